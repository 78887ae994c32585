"""How fast translation starts (`python -m experiments.translate_timing`): the page the script
writes, drawn again on the results page."""

from __future__ import annotations

from typing import Any

from experiments.lib import reports
from experiments.lib.pages.study import StudyPage, script_page


def page(record: dict[str, Any]) -> str:
  fmt = reports.fmt
  cells = [
    [r["name"], str(r["sentences"]), fmt(r["wall_s"], 1), str(r["programs_added"])]
    for r in record["rows"]
  ]
  lines = [
    "# How fast translation starts",
    "",
    f"{reports.made_by('translate_timing', record)} and {record['load_average']['end']} at the "
    f"end; run `{record['run']}` with its own decoding settings, input `{record['input']}`, "
    f"other input `{record['other']}`. Each row is a fresh `main.py --mode=translate` process "
    "sharing one compilation cache folder, empty before the first.",
    "",
    *reports.table(["process", "sentences", "wall s", "programs compiled"], cells),
    "",
    f"Decoding alone, warm in one process: "
    f"**{fmt(record['decoding_only_sentences_per_s'], 1)} sentences/s** over the input. "
    f"Cold and warm outputs {'identical' if record['same_output_cold_and_warm'] else 'DIFFER'}.",
    "",
    *reports.command_block(record["command"]),
  ]
  return "\n".join(lines) + "\n"


STUDIES = {
  "translate_timing": StudyPage(
    "How fast translation starts",
    "`main.py --mode=translate` of the Multi30k test sources cold, warm and warm on other "
    "sentences, with the compilation cache, beside the decoding alone.",
    measurements=script_page(page, "translate_timing.json"),
  ),
}

"""What an update costs in each decoder (`python -m experiments.decoder_cost`): the page the
script writes, drawn again on the results page."""

from __future__ import annotations

import statistics
from typing import Any

from experiments.lib import reports
from experiments.lib.pages.study import StudyPage, script_page


def page(result: dict[str, Any]) -> str:
  rows = [
    [
      f"`{c['config']}`",
      reports.fmt(c["ms_per_update"], 1),
      ", ".join(reports.fmt(v, 1) for v in c["rounds_ms_per_update"]),
      reports.fmt(c["cost_vs_first"], 2) + "×",
      reports.fmt(c["target_tokens_per_s"], 0),
      f"{len(c['compile_s'])} × {reports.fmt(statistics.mean(c['compile_s']), 1)}",
      reports.fmt(c["last_round_loss"], 4),
    ]
    for c in result["configs"]
  ]
  header = ["config", "ms / update", "per round", "cost vs first", "target tokens/s"]
  header += ["shapes × compile s", "mean loss, last round"]
  intro = (
    f"{reports.made_by('decoder_cost', result)} and {result['load_average']['end']} at the "
    f"end ({', '.join(result['cpu'].get('vector_isa', []))}). The first {result['batches']} "
    f"training batches ({result['target_tokens_per_update']:.0f} target tokens per update on "
    f"average), {result['rounds']} timed rounds, the configs taking turns batch by batch "
    "(see the script's docstring)."
  )
  title = "What an update costs in each decoder"
  return reports.table_page(title, intro, header, rows, result["command"])


STUDIES = {
  "decoder_cost": StudyPage(
    "What an update costs in each decoder",
    "Luong et al.'s decoder (configs/luong.py:multi30k) against the paper's (configs/multi30k.py):"
    " the compiled train step timed on the same Multi30k training batches, side by side.",
    measurements=script_page(page, "cost.json"),
  ),
}

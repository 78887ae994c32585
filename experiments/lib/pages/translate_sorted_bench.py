"""Translation longest first against file order, and its memory as the input grows (`python -m
experiments.translate_sorted_bench`): the results page drawn from the script's JSON."""

from __future__ import annotations

from typing import Any

from experiments.lib import reports
from experiments.lib.pages.study import StudyPage, script_page


def page(record: dict[str, Any]) -> str:
  fmt = reports.fmt
  speed = [
    [
      name,
      fmt(r["sentences_per_s"], 2),
      fmt(min(r["seconds"]), 1),
      fmt(r["speedup_over_file_order"], 2),
    ]
    for name, r in record["speed"].items()
  ]
  memory = [
    [
      f"{m['lines']:,}",
      fmt(m["peak_rss_mib"], 0),
      fmt(m["wall_s"], 0),
      fmt(m["sentences_per_s"], 0),
      f"{m['lines_written']:,}",
    ]
    for m in record["memory"]
  ]
  diff = record["differences"]
  rounds = len(next(iter(record["speed"].values()))["seconds"])
  trained = record["trained_here_steps"]
  model = (
    f"a configs/multi30k.py run trained here for {trained} updates"
    if trained
    else "a trained configs/multi30k.py English->French run"
  )
  lines = [
    "# Translation longest first, and its memory",
    "",
    f"{reports.made_by('translate_sorted_bench', record)} and {record['load_average']['end']} at "
    f"the end; {model}.",
    "",
    f"## Speed: beam {record['beam_size']} over the {record['sentences']:,} sentences of "
    f"`{record['input']}`",
    "",
    f"Each order translated once to compile, then timed over {rounds} pass(es) (the fastest "
    "kept), in one process, the orders taking turns.",
    "",
    *reports.table(["order", "sentences/s", "seconds", "x file order"], speed),
    "",
    f"Sentences translated differently in the two orders: **{diff['count']}** "
    f"({diff['at_length_limit']} where the batch's output length limit explains it, "
    f"{diff['otherwise']} otherwise); among the sentences translated alike the scores differ by "
    f"at most {diff['largest_score_gap_among_the_same_translations']:.2g}.",
    "",
    "## Memory: greedy translation in a fresh `main.py --mode=translate` process",
    "",
    "The input is the short sentences of the Multi30k test file repeated; the peak is the "
    "process's own resident memory (ru_maxrss).",
    "",
    *reports.table(["lines", "peak RSS MiB", "wall s", "sentences/s", "lines written"], memory),
    "",
    *reports.command_block(record["command"]),
  ]
  return "\n".join(lines) + "\n"


STUDIES = {
  "translate_sorted": StudyPage(
    "Translation longest first, and its memory",
    "Beam-5 sentences/s of newstest2012 in file order against longest first in one process, the "
    "sentences the two orders translate differently, and the peak memory of translating 10,000 "
    "to 1,000,000 lines.",
    measurements=script_page(page, "translate_sorted_bench.json"),
  ),
}

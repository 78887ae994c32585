"""What `make demo` scores (`python -m experiments.demo_run`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.lib import reports
from experiments.lib.pages.study import StudyPage
from experiments.lib.reports import fmt


def table(result: dict[str, Any]) -> list[str]:
  """The demo's scores, both splits, as a Markdown table."""
  header = ["split", "checkpoint", "sentences", "BLEU", "chrF", "No-UNK BLEU", "AER", "beam"]
  cells = [
    [split, f"{r['step']:,}", f"{r['num_sentences']:,}", reports.fmt(r["bleu"])]
    + [reports.fmt(r["chrf"]), reports.fmt(r["bleu_no_unk"]), reports.fmt(r["aer"], 3)]
    + [str(r["beam_size"])]
    for split, r in result["results"].items()
  ]
  return reports.table(header, cells)


def demo_table(study: Path) -> list[str]:
  """What `make demo` scores, and its validation curve, from the demo's record."""
  result = json.loads((study / "demo.json").read_text())
  curve = ", ".join(
    f"{c['step']:,}: {fmt(c['bleu'])}" for c in result["valid_curve"] if c["bleu"] is not None
  )
  return [
    "## Measurements",
    "",
    f"The best checkpoint, evaluated at the end of `{result['trains']}` "
    f"({fmt(result['wall_s'] / 60, 1)} minutes in all, training and evaluation; 1-, 5- and "
    f"15-minute load average {result['load_average']} at the end):",
    "",
    *table(result),
    "",
    f"Greedy validation BLEU during training, by update: {curve}. The run's console is "
    f"`experiments/results/{study.name}/console.txt`.",
    "",
  ]


STUDIES = {
  "demo": StudyPage(
    "`make demo`",
    "RNNsearch on the embedded corpus with `configs/demo.py`.",
    measurements=demo_table,
  ),
}

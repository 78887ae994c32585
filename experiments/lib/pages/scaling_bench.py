"""How the train step's cost grows with the work (`python -m experiments.scaling_bench`): the page
the script writes, drawn again on the results page."""

from __future__ import annotations

from typing import Any

from experiments.lib import reports
from experiments.lib.pages.study import StudyPage, script_page

LABELS = {
  "length": "sentence length (source = target words)",
  "vocab": "target vocabulary (words)",
  "batch": "batch size (sentences)",
  "hidden": "hidden width (embedding, GRU, attention)",
}


def page(result: dict[str, Any]) -> str:
  """The Markdown of a result: per curve, every point's measured and predicted tokens/s, their
  ratio, and the planned memory."""
  fmt = reports.fmt
  lines = [
    "# How the train step's cost grows with the work",
    "",
    f"{reports.made_by('scaling_bench', result)} and {result['load_average']['end']} at the end; "
    f"the `{result['preset']}` preset in {result['dtype']}, one axis changed at a time "
    f"({', '.join(result['cpu'].get('vector_isa', []))}). Tokens/s: target tokens per second of "
    "the train step (median of "
    f"{result['timing']['repeats']} runs of {result['timing']['steps_per_repeat']} steps); "
    "predicted: what the step's matmul FLOPs give, scaled to the first point; planned: the memory "
    "XLA plans for the step (arguments, outputs and temporaries, less what the donated state "
    "reuses).",
  ]
  for name, curve in result["curves"].items():
    header = ["value", "tokens/s", "predicted", "measured / predicted", "planned MiB", "step s"]
    cells = [
      [
        f"{p['value']:,}",
        fmt(p["tokens_per_s"], 0),
        fmt(p["expected_tokens_per_s"], 0),
        fmt(p["tokens_per_s"] / p["expected_tokens_per_s"], 2),
        fmt(p["planned_mb"], 1),
        fmt(p["step_s"], 3),
      ]
      for p in curve["points"]
    ]
    lines += ["", f"## {name}: {LABELS[curve['axis']]}", "", *reports.table(header, cells)]
  lines += ["", "![Scaling](scaling.png)", "", "```bash", result["command"], "```"]
  return "\n".join(lines) + "\n"


STUDIES = {
  "scaling": StudyPage(
    "How the train step's cost grows with the work",
    "The benchmark config's train step with one of sentence length, target vocabulary (full and "
    "sampled softmax), batch size and hidden width changed at a time, beside what its matmul "
    "FLOPs predict.",
    measurements=script_page(page, "scaling.json"),
  ),
}

"""Alignments from attribution against attention's (`python -m experiments.attribution_aer`):
the page the script writes, drawn again on the results page."""

from __future__ import annotations

from typing import Any

from experiments.lib import reports
from experiments.lib.pages.study import StudyPage, script_page

WAYS = {
  "attention": "the teacher-forced attention's argmax",
  "grad_x_input": "word saliency, (dp/de_j) . e_j (Ding et al. 2019)",
  "grad_norm": "the gradient's length, the norm of dp/de_j",
  "smoothgrad": "word saliency averaged over noisy copies (SmoothGrad)",
}


def page(result: dict[str, Any]) -> str:
  rows = [
    [
      f"`{w['way']}`",
      WAYS.get(w["way"], ""),
      reports.fmt(w["aer"], 3),
      reports.fmt(w["seconds"], 0),
    ]
    for w in result["ways"]
  ]
  intro = (
    f"{reports.made_by('attribution_aer', result)} and {result['load_average']['end']} at the "
    f"end. The run at step {result['run_step']}; the first {result['pairs']} pairs of its "
    f"{result['split']} split, their reference translations forced, "
    f"{result['gold_links_per_pair']:.1f} gold links per pair; each target word linked to one "
    f"source word by each way (SmoothGrad: {result['smooth_samples']} copies). Lower AER is "
    "better; nothing is tuned."
  )
  header = ["way", "what links a target word", "AER", "seconds"]
  title = "Alignments from attribution against attention"
  return reports.table_page(title, intro, header, rows, result["command"])


STUDIES = {
  "attribution_aer": StudyPage(
    "Alignments from attribution against attention",
    "Word saliency (Ding et al. 2019), the gradient's norm and SmoothGrad against the attention's"
    " argmax, by AER on the embedded corpus's gold links.",
    measurements=script_page(page, "attribution_aer.json"),
  ),
}

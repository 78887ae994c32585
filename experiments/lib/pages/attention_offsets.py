"""Where attention peaks from an output word's source twin
(`python -m experiments.attention_offsets`)."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.lib import reports
from experiments.lib.pages.study import StudyPage


def offsets_table(study: Path) -> list[str]:
  """Share of twin pairs by offset of the attention's peak from the twin, per point."""
  data = json.loads((study / "offsets.json").read_text())
  bins = data["bins"]
  header = ["point", "seeds", *[f"`{b}`" for b in bins], "peaks on `</s>`"]
  cells = []
  for name, p in data["points"].items():
    shares = [f"{p[b][0]:.3f}" for b in bins]
    end = p.get("end_peaks")
    cells.append([name, str(p["seeds"]), *shares, "-" if end is None else f"{end[0]:.3f}"])
  return [
    "## Results",
    "",
    *reports.table(header, cells),
    "",
    f"Mean over seeds ({data['split']} split) of the share of twin pairs whose attention peaks "
    "that many source words from the twin (`+0`: on it); peaks on `</s>`: the share of output "
    "steps whose attention peaks on the source's end of sentence.",
    "",
  ]


def offsets_conclusion(study: Path) -> list[str]:
  path = study / "offsets.json"
  if not path.exists():
    return []
  points = json.loads(path.read_text())["points"]
  on = {n: p["+0"][0] for n, p in points.items() if "head rank" not in n}
  order = sorted(on, key=on.get, reverse=True)
  hi, lo = order[0], order[-1]
  return [
    f"The share of twin pairs whose attention peaks on the twin itself runs from "
    f"{on[hi]:.3f} (`{hi}`) to {on[lo]:.3f} (`{lo}`), over {len(on)} points (heads of a "
    "multi-head model apart)."
  ]


STUDIES = {
  "multi30k_attention_offsets": StudyPage(
    "Where attention peaks, from the output word's source twin",
    "For output words spelled like a source word that occurs once on each side, where the "
    "attention peaks, counted in words from that twin, per point of the score, feature and "
    "structure studies (the mean over seeds).",
    measurements=offsets_table,
    conclusion=offsets_conclusion,
  ),
}

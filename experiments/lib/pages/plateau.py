"""Where the baselines flatten (`python -m experiments.plateau`): the budget read from a curve."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.lib.pages.study import StudyPage


def budget_conclusion(study: Path) -> list[str]:
  path = study / "budget.json"
  if not path.exists():
    return []
  b = json.loads(path.read_text())
  return [
    f"Budget: the trailing mean of {b['window']} validation evaluations first comes within "
    f"{b['tolerance']:g} BLEU of its best ({b['best_trailing_mean']:.2f}) at {b['budget']:,} "
    f"updates (`python -m experiments.plateau`, `budget.json`)."
  ]


STUDIES = {
  "multi30k_plateau": StudyPage(
    "Where the Multi30k baseline flattens",
    "One long additive run's validation curve, read to choose the studies' budget.",
    conclusion=budget_conclusion,
  ),
  "embedded_plateau": StudyPage(
    "Where the embedded corpus flattens",
    "The additive model's validation curve, read for the embedded studies' budget.",
    conclusion=budget_conclusion,
  ),
}

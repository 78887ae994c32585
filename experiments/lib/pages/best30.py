"""The 30-minute Multi30k system (`python -m experiments.best30`) and the tries that chose its
levers."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.lib import reports
from experiments.lib.pages.sections import RESULTS
from experiments.lib.pages.study import StudyPage
from experiments.lib.reports import fmt


def final_table(study: Path) -> list[str]:
  """The final system's figures (`final.json` of `experiments.best30 --final`), with and without
  its parameters' moving average on the same checkpoint."""
  best = json.loads((study / "final.json").read_text())
  header = ["parameters", "test BLEU", "test chrF", "test BLEU lowercased"]
  header += ["test BLEU, `<unk>` dropped", "valid BLEU", "valid chrF", "checkpoint"]
  rows = [("moving average (the system)", best)]
  if best.get("without_moving_average"):
    rows.append(("training parameters", best["without_moving_average"]))
  cells = [
    [name, fmt(r["test_bleu"]), fmt(r["test_chrf"]), fmt(r["test_bleu_lowercase"])]
    + [fmt(r["test_bleu_no_unk"]), fmt(r["valid_bleu"]), fmt(r["valid_chrf"])]
    + [f"{r['test_step']:,}"]
    for name, r in rows
  ]
  lines = ["## Results", "", *reports.table(header, cells), ""]
  lines += [
    f"sacrebleu `{best['sacrebleu_signature']}` on test_2016_flickr and val, the checkpoint "
    "chosen on validation BLEU.",
    "",
  ]
  if best.get("without_moving_average"):
    lines += ["Without the moving average:", "", "```bash"]
    lines += [best["without_moving_average"]["command"], "```", ""]
  return lines


FINAL = RESULTS / "multi30k_best" / "final.json"  # experiments.best30 --final


def best_conclusion(study: Path) -> list[str]:
  """The final system, on its own page and on the page of the tries that chose its levers."""
  if study.name not in ("multi30k_best", "multi30k_best_tries") or not FINAL.exists():
    return []
  best = json.loads(FINAL.read_text())
  published = best.get("published") or {}
  where = "" if study.name == "multi30k_best" else " ([its page](multi30k_best.md))"
  out = [
    f"The final system{where}: test BLEU {best['test_bleu']:.2f}, chrF "
    f"{best['test_chrf']:.2f}, in {best['minutes']:.1f} minutes ({best['updates']:,} updates)."
  ]
  if published.get("test_2016_bleu") is not None:
    out.append(f"Published ({published['system']}): {published['test_2016_bleu']}.")
  raw = best.get("without_moving_average")
  if raw and study.name == "multi30k_best":
    out.append(
      f"The same checkpoint with its training parameters instead of their moving average: "
      f"{raw['test_bleu']:.2f} test BLEU ({raw['test_bleu'] - best['test_bleu']:+.2f})."
    )
  return out


STUDIES = {
  "multi30k_best": StudyPage(
    "The 30-minute Multi30k system",
    "`configs/multi30k_best.py`, the levers the tries chose, trained and tested by one "
    "`main.py` command within 30 minutes of wall clock on the development CPU.",
    measurements=final_table,
    conclusion=best_conclusion,
  ),
  "multi30k_best_tries": StudyPage(
    "The 30-minute Multi30k system: the levers tried",
    "Each lever of `configs/multi30k_best.py`, tried on validation.",
    conclusion=best_conclusion,
  ),
}

"""How fast an explorer report opens (`python -m experiments.explorer_timing`)."""

from __future__ import annotations

from pathlib import Path

from experiments.lib import records, reports
from experiments.lib.pages.sections import cpu_name, data_files
from experiments.lib.pages.study import StudyPage
from experiments.lib.reports import fmt


def explorer_table(study: Path) -> list[str]:
  lines = ["## Measurements", ""]
  header = ["report", "sentences", "kB", "load ms (median)", "loads", "sort by BLEU ms"]
  header += ["Chromium"]
  cells = []
  for name, t in data_files(study, records.load_definition(study)).items():
    cells.append(
      [f"`{name}`", f"{t['sentences']:,}", fmt(t["bytes"] / 1000, 0), fmt(t["load_ms_median"], 0)]
      + [str(len(t["load_ms"])), fmt(t["sort_by_bleu_ms"], 0), t["browser"]]
    )
    command = " ".join(["python -m experiments.explorer_timing", *t["argv"][1:]])
  lines += [*reports.table(header, cells), "", "```bash", command, "```", ""]
  return lines


def explorer_conclusion(study: Path) -> list[str]:
  if study.name != "explorer_timing":
    return []
  out = []
  for name, t in data_files(study, records.load_definition(study)).items():
    out.append(
      f"A report of {t['sentences']:,} sentences ({t['bytes'] / 1e6:.2f} MB) opens in "
      f"{t['load_ms_median']:.0f} ms (median of {len(t['load_ms'])} loads) and sorts by "
      f"sentence BLEU in {t['sort_by_bleu_ms']:.0f} ms, on {cpu_name(t)} (`{name}`)."
    )
  return out


STUDIES = {
  "explorer_timing": StudyPage(
    "Explorer load time",
    "How large an explorer report of a test split is and how fast it opens and sorts in "
    "headless Chromium.",
    measurements=explorer_table,
    conclusion=explorer_conclusion,
  ),
}

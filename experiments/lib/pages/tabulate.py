"""Every point against its own study's baseline over several studies (`python -m
experiments.tabulate`): the table the script writes, and the page that draws it again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.lib import records, reports
from experiments.lib.pages.sections import demote, files
from experiments.lib.pages.study import StudyPage
from experiments.lib.reports import fmt, mean_sd


def markdown(result: dict[str, Any], title: str) -> str:
  """The table, each study's command and date under it, then what is pending."""
  header = ["study", "point", "baseline", "updates", "BLEU", "baseline BLEU"]
  header += ["difference [95%]", "by seed", "p", "chrF", "OOV words produced"]
  rows = []
  for line in result["lines"]:
    diff, ci = line["difference"], line["difference_ci95"]
    diff = "-" if diff is None else f"{diff:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"
    rows.append([
      line["study"], line["point"], line["baseline"], str(line["budget"] or "config"),
      mean_sd(line, "bleu"), mean_sd(line, "baseline_bleu"), diff,
      " / ".join(f"{d:+.2f}" for d in line["seed_differences"]) or "-",
      fmt(line["p_value"], 4), mean_sd(line, "chrf"),
      "-" if line["oov_recall_mean"] is None else
      f"{fmt(line['oov_recall_mean'], 3)} (baseline {fmt(line['baseline_oov_recall_mean'], 3)})",
    ])  # fmt: skip
  out = [f"# {title}", "", *reports.table(header, rows), ""]
  out.append(
    "Test BLEU (sacrebleu 13a): mean ± sample standard deviation over the seeds. difference, p: "
    "the sweep's paired bootstrap against its baseline, seeds pooled per resample (it resamples "
    "sentences, not seeds); by seed: each seed's test BLEU minus the baseline's of the same seed. "
    "OOV words produced: the share of reference words outside the target vocabulary that the "
    "output holds."
  )
  out += ["", "Studies:", ""]
  for name, source in result["studies"].items():
    out.append(
      f"- {name} ({source['date'][:10]}, {source['runs_wall_minutes']} minutes of training "
      f"and evaluation): `{source['command']}`"
    )
  if "command" in result:
    out += ["", f"Command: `{result['command']}`"]
  if result["pending"]:
    out += ["", "Pending:", ""]
    out += [f"- {name}: {why}" for name, why in result["pending"].items()]
  return "\n".join(out) + "\n"


def across_page(study: Path, out: Path) -> str:
  """Each point against its own study's baseline, over several studies, from the JSON
  `experiments.tabulate` wrote (its table drawn again by `markdown`, titled as the
  committed table is)."""
  page = out / f"{study.name}.md"
  definition = records.load_definition(study)
  about = STUDIES[study.name]
  lines = [f"# {about.title}", "", about.about, ""]
  for name in definition["tables"]:
    path = (study / name).with_suffix(".json")
    heading = (study / name).read_text().splitlines()[0].lstrip("# ")
    table = markdown(json.loads(path.read_text()), heading)
    lines += [demote(table, page, path), ""]
  lines += files(definition, study)
  return "\n".join(lines).rstrip() + "\n"


STUDIES = {
  "across_studies": StudyPage(
    "Across studies",
    "Every point against its own study's baseline, seed by seed, in one table per group of "
    "studies (`python -m experiments.tabulate`, whose command is under each table).",
    page=across_page,
  ),
}

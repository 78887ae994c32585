"""One table over several sweeps: every point against its own sweep's baseline.

    python -m experiments.tabulate --out experiments/results/across_studies/attend_to.md \
        STUDY [STUDY ...]

Each STUDY is a sweep's `--out` folder (`experiments.sweep`, read from its sweep.json) or the
report JSON of a study built on the sweep engine (alignment_study.json, study.json); it gives
one line per point other than the baseline: the point, its baseline, the budget in updates, test
BLEU (mean ± sample sd over seeds) of both, the pooled bootstrap's difference with its 95%
interval and p, the difference seed by seed (the bootstrap resamples sentences, so a gain that
rests on one seed shows only here), chrF, and the share of reference words outside the target
vocabulary that the outputs produce (`oov_recall`, where copying shows). A study whose report is
missing, or lists points not yet trained, is named as pending, so the table can be rewritten as
each study finishes. Writes the table to OUT (X.md) and, as X.json beside it, the lines, each
study's command, date and training wall time. The attend-to measurements in
experiments/multi30k_studies.sh end with it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib import reports
from experiments.lib.pages.tabulate import markdown

SWEEP_FILE = "sweep.json"


def _stats(row: dict[str, Any], keys: Sequence[str], prefix: str = "") -> dict[str, Any]:
  """{PREFIX KEY_mean, PREFIX KEY_std} of a sweep row (None where it lacks them)."""
  return {f"{prefix}{k}_{s}": row.get(f"{k}_{s}") for k in keys for s in ("mean", "std")}


def study_lines(name: str, sweep: dict[str, Any]) -> list[dict[str, Any]]:
  """One line per point of `sweep` other than its baseline."""
  rows = {r["name"]: r for r in sweep["configurations"]}
  base_row = rows.pop(sweep["baseline"])
  base = _stats(base_row, ("bleu", "oov_recall"), "baseline_")
  base_bleu = dict(zip(base_row["seeds"], base_row["bleu"], strict=True))
  significance = sweep["significance"]  # The alignment study's is split by split.
  tests = significance.get("per_split", {}).get("test") or significance["per_configuration"]
  lines = []
  for point, row in rows.items():
    test = tests.get(point, {})
    line = {"study": name, "point": point, "baseline": sweep["baseline"], "seeds": row["seeds"]}
    line["budget"] = row["overrides"].get("train.num_steps")  # None: the config's own.
    line |= _stats(row, ("bleu", "chrf", "oov_recall")) | base
    line["seed_differences"] = [  # Seed S against the baseline's seed S.
      bleu - base_bleu[seed] for seed, bleu in zip(row["seeds"], row["bleu"], strict=True)
      if seed in base_bleu
    ]  # fmt: skip
    line |= {k: test.get(k) for k in ("difference", "difference_ci95", "p_value")}
    lines.append(line)
  return lines


def tabulate(studies: Sequence[Path]) -> dict[str, Any]:
  """The lines of every finished study, and which studies or points are still pending."""
  lines, sources, pending = [], {}, {}
  for study in studies:
    path = study if study.suffix == ".json" else study / SWEEP_FILE
    name = path.parent.name
    if not path.exists():
      pending[name] = "not run yet"
      continue
    sweep = json.loads(path.read_text())
    if sweep["pending_points"]:
      pending[name] = "untrained: " + ", ".join(sweep["pending_points"])
    lines += study_lines(name, sweep)
    sources[name] = {
      "path": str(path),
      "command": sweep["command"],
      "date": sweep["date"],
      "runs_wall_minutes": round(sweep["runs_wall_s"] / 60, 1),
    }
  return {"lines": lines, "studies": sources, "pending": pending}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("studies", nargs="+", type=Path, help="sweep folders or study report JSONs")
  p.add_argument("--out", required=True, type=Path, help="the table (X.md; X.json beside it)")
  p.add_argument("--title", default="Each point against its sweep's baseline")
  args = p.parse_args(argv)
  if args.out.suffix != ".md":
    p.error(f"--out {args.out}: name the Markdown table, X.md (X.json is written beside it)")
  result = tabulate(args.studies)
  argv = sys.argv[1:] if argv is None else list(argv)
  result["command"] = shlex.join(["python", "-m", "experiments.tabulate", *argv])
  args.out.parent.mkdir(parents=True, exist_ok=True)
  reports.write_json(args.out.with_suffix(".json"), result)
  args.out.write_text(markdown(result, args.title))
  print(f"{args.out}: {len(result['lines'])} lines, {len(result['pending'])} pending")
  return result


if __name__ == "__main__":
  main()

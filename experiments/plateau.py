"""The budget at which a long run's validation BLEU has reached its plateau.

    python -m experiments.plateau RUN_DIR [--tolerance 1.0] [--window 1] [--json OUT.json]

Reads RUN_DIR/metrics.jsonl (a run trained with `train.valid_bleu=true`), takes its greedy
validation BLEU at every evaluation, and prints the first evaluated step from which every later
value stays within `--tolerance` BLEU of the best (`stats.plateau_budget`): the number of updates
the studies rerun with, so that their baseline is within 1 BLEU of its plateau. A curve that ends
more than the tolerance below its best has fallen from its plateau (overfitting); its budget is
the first step at which it came within the tolerance. `--window N` reads the curve's trailing
mean over N evaluations instead: the embedded corpus's small models at a constant learning rate
swing by up to 8 BLEU between evaluations 500 updates apart, more than any tolerance of 1 BLEU
can absorb. `--json` also writes the curve, its trailing mean, their best values and the budget.
A curve that only comes within the tolerance at its last evaluation has not been seen to
flatten: that is an error (train the run longer), so a study script does not go on to train
every point at a budget that is no plateau.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from experiments.lib import stats
from seq2seq.training import metric_writer


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("run", help="the long run's workdir")
  p.add_argument("--tolerance", type=float, default=1.0, help="BLEU below the best still flat")
  p.add_argument(
    "--window",
    type=int,
    default=1,
    help="read the curve's trailing mean over this many evaluations",
  )
  p.add_argument("--json", default=None, help="also write the curve and the budget here")
  args = p.parse_args(argv)
  rows = [r for r in metric_writer.read_metrics(args.run) if r["split"] == "valid" and "bleu" in r]
  if not rows:
    sys.exit(f"{args.run}: no validation BLEU in metrics.jsonl (train with train.valid_bleu=true)")
  steps, bleu = [r["step"] for r in rows], [r["bleu"] for r in rows]
  budget = stats.plateau_budget(steps, bleu, args.tolerance, args.window)
  if budget == steps[-1]:
    sys.exit(
      f"{args.run}: validation BLEU (trailing mean of {args.window}) comes within "
      f"{args.tolerance} of its best only at the last evaluation (step {budget}): no plateau "
      "seen; train the run longer"
    )
  if args.json:
    smoothed = stats.trailing_mean(bleu, args.window)
    record = {"run": str(args.run), "steps": steps, "bleu": bleu, "best": max(bleu)}
    record.update({"trailing_mean": smoothed, "best_trailing_mean": max(smoothed)})
    record.update({"tolerance": args.tolerance, "window": args.window, "budget": budget})
    Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
  print(budget)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())

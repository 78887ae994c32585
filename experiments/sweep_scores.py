"""Sweeps the alignment (score) functions over seeds and compares them with the additive one.

    python -m experiments.sweep_scores --out runs/sweep [--preset smoke|cpu | --config FILE[:ARG]]
        [--seeds 0,1,2] [--scores NAME,...]
        [--baseline additive] [--set key=value ...] [--training together|sequential]
        [--launcher local|jobs] [--only SCORE,...] [--collect] [--bootstrap-samples 1000]
        [--compilation-cache DIR]

A named grid on the generic sweep (`python -m experiments.sweep`, whose flags it shares: jobs
file, collecting, resuming): one point per score function (by default every one registered in
`seq2seq.model.scores`), `{"model.score": NAME}`, named by the
score, crossed with the seeds (`seed` sets initialisation, dropout and the data order); each run
an ordinary workdir OUT/runs/SCORE/seed_N (record `SCORE-seedN` in sweep.json, with its exact
main.py command). `dot`, `scaled` and `cosine` need `model.dec_hidden == 2 * model.enc_hidden`,
which the tiny and demo sizes satisfy. Presets (`experiments/lib/presets.py`): `smoke` =
configs/tiny.py for a few steps (the test), `cpu` = the budget the three study scripts share;
`--config` sweeps the scores on any config instead.

Reported per score (over its seeds): test BLEU mean and sample standard deviation, AER (argmax
and thresholded) mean and standard deviation and attention entropy (embedded corpus only),
training tokens/s (median over the train lines of metrics.jsonl, leaving out each run's first
window, which includes compiling), and the paired bootstrap p of its test BLEU against the
baseline's (`stats.paired_bootstrap`: sentences resampled, seed S paired with the baseline's
seed S, the seeds pooled on each resample). Outputs: OUT/sweep.json, OUT/sweep.md, OUT/sweep.png
(test BLEU per score, error bars one standard deviation) and OUT/learning_curves.png.

Training (`--training`): `together` (default) trains the seeds of one score as one vmapped group
(`seq2seq/seed_group.py`: the seeds then differ in initialisation and dropout and share the
first seed's data order), writing each seed's ordinary workdir; a group's wall time is split
evenly over its seeds. `sequential` trains them one after another with `main.py`'s loop (each
seed also shuffles the data its own way). Scores always run one after another here (their
shapes differ); `--launcher=jobs` hands them to a scheduler as parallel jobs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from experiments.lib import driver, plots, reports, stats
from experiments.lib.reports import fmt
from experiments.lib.sweeps import Point, Sweep
from seq2seq.model import scores


class ScoreSweep(driver.PresetStudy):
  """One point per score function."""

  module = "experiments.sweep_scores"

  def add_arguments(self, parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scores", default="", help="comma-separated; default: all registered")
    parser.add_argument("--baseline", default="additive", help="the score tested against")

  def points(self, args: argparse.Namespace) -> list[Point]:
    names = driver.names_flag(args.scores or ",".join(scores.names()), scores.names(), "score")
    return [Point(name, {"model.score": name}) for name in names]

  def report(
    self, sweep: Sweep, args: argparse.Namespace, trained: set[str], start: float
  ) -> dict[str, Any]:
    result = driver.collect(sweep, args, args.baseline, trained, start)
    rows = result["configurations"]
    plots.bar_plot(
      [r["name"] for r in rows],
      [r["bleu_mean"] for r in rows],
      [r["bleu_std"] for r in rows],
      sweep.out / "sweep.png",
      f"test BLEU over seeds {sweep.seeds} ({driver.setting(result)})",
    )
    driver.write(sweep.out, self.report_name, result, markdown(result))
    return result


def markdown(result: dict[str, Any]) -> str:
  """The sweep table: one row per score."""
  baseline = result["baseline"]
  header = ["score", "seeds", "BLEU", "AER", "AER (>= 0.3)", "entropy", "tokens/s"]
  cells = [
    [
      r["name"],
      str(len(r["seeds"])),
      reports.mean_sd(r, "bleu"),
      reports.mean_sd(r, "aer", 3),
      reports.mean_sd(r, "aer_threshold", 3),
      fmt(r["attention_entropy_mean"]),
      fmt(r["train_tokens_per_s_median"], 0),
      fmt(r["p_value_vs_baseline"], 4),
    ]
    for r in result["configurations"]
  ]
  lines = [
    f"# Score functions ({driver.setting(result)}, test split)",
    "",
    *reports.table([*header, f"p vs {baseline}"], cells),
    "",
    "Mean ± sample standard deviation over seeds.",
    stats.bootstrap_caption(baseline),
    "tokens/s: median of the training log windows (each run's first window, with compilation, left",
    "out), one model's target tokens; seeds trained together (`--training together`) each run at",
    "that rate at once.",
  ]
  return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
  return driver.main(ScoreSweep(__doc__), argv)


if __name__ == "__main__":
  main()

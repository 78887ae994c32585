"""Sweeps any config over a grid of fields and seeds, and compares the points.

    python -m experiments.sweep --config=configs/demo.py --out runs/my-sweep \
        --grid model.score=additive,dot,general --grid model.features=none,coverage \
        --seeds 0,1,2 [--set train.num_steps=2000 ...] [--baseline POINT] [--within KEY]
        [--decode decode.replace_unk=false ...]
        [--training together|sequential] [--launcher local|jobs|cores] [--only POINT,...]
        [--collect] [--bootstrap-samples 1000] [--compilation-cache DIR]

The points are the cross product of the `--grid KEY=V1,V2,...` values (each read as the type of
the config field it sets; an unknown field fails at once), named from them
(`score=dot+features=coverage`); a value may be a spec with settings, its commas inside the
parentheses (`--grid "model.attention=soft,local_p(window=5),multihead(heads=2)"`). Every point
runs once per seed, each run an ordinary resumable workdir OUT/runs/POINT/seed_S that `main.py`
could train alone (its command is in sweep.json). `--decode decode.KEY=V1,V2` adds, for every
trained point P, the points `P+KEY=V` that decode copies of P's runs with those settings (no
training: the checkpoints are P's).
`--config` is any config file with its argument (`configs/rnnsearch.py:maxlen=50`); `--set`
applies to every run and wins over the grid. Runs share one corpus in OUT/data unless the
config sets `data.cache_dir`.

Training (`experiments/lib/sweeps.py`): by default the seeds of a point train together, one
compiled step vmapped over their stacked parameters (`seq2seq.seed_group`; they share the first
seed's data order), `--training sequential` one after another. A rerun resumes unfinished runs
and skips finished ones. `--launcher=jobs` trains nothing: it builds the corpus and writes
OUT/jobs.txt, one self-contained command per point (per point and seed when sequential), and
OUT/sbatch.sh, a SLURM array over those lines (`experiments/lib/launch.py`):

    xargs -d '\\n' -P 4 -I{} sh -c {} < OUT/jobs.txt      # or: parallel -j 4 < OUT/jobs.txt
    sbatch OUT/sbatch.sh                                     # on a SLURM cluster

and then the same command with `--collect` gathers the finished workdirs. `--launcher=cores`
does both on this machine: it runs the jobs file's lines `--processes` at a time (default: one
per CPU core), each process pinned to its own core, then reports.

Outputs (after training, or with `--collect`): OUT/sweep.md, per point the mean ± sample standard
deviation over seeds of test BLEU, test chrF, validation BLEU (the final evaluation's) and,
where the corpus has gold alignments, AER, and the paired bootstrap p of test BLEU against
`--baseline` (default: the first point), pooled over seeds (each seed's test hypotheses
concatenated in seed order and paired with the baseline's of the same seed), and with
`--within KEY` the same test of each point against its group's baseline (the point with its
value of KEY and the baseline's of the other grid fields); OUT/sweep.json
(rows, significance, every run's record and command, learning curves, environment) and
OUT/learning_curves.png (validation BLEU against steps, or validation loss where no run computed
BLEU: mean over seeds, band of one standard deviation, one line per point).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from experiments.lib import configs, driver, reports, stats, sweeps
from experiments.lib.reports import fmt, mean_sd
from experiments.lib.sweeps import Point, Sweep
from seq2seq import checkpoints
from seq2seq.data import metrics


class GridSweep(driver.Study):
  """The cross product of `--grid` values on `--config`."""

  module = "experiments.sweep"

  def add_arguments(self, parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
      "--grid",
      action="append",
      default=[],
      metavar="KEY=V1,V2",
      help="dotted config field and its values (repeatable: the points are the cross product)",
    )
    parser.add_argument(
      "--decode",
      action="append",
      default=[],
      metavar="decode.KEY=V1,V2",
      help="decoding settings (decode.* and the model's decoding-time switches, repeatable): "
      "every trained point is also decoded with each combination, from its own checkpoints, "
      "without training again",
    )
    parser.add_argument(
      "--points",
      default=None,
      metavar="POINT,...",
      help="the grid's points to keep (default: all of the cross product), for a study whose "
      "points are not a whole cross product",
    )
    parser.add_argument("--baseline", default=None, help="point tested against (default: first)")
    parser.add_argument(
      "--within",
      default=None,
      metavar="KEY",
      help="a --grid field: also test each point against the point with its value of KEY and "
      "the baseline's of every other field (--within model.decoder: each normaliser against "
      "softmax in the same decoder)",
    )

  def points(self, args: argparse.Namespace) -> list[Point]:
    if not args.grid:
      raise ValueError("--grid KEY=V1,V2,... is required")
    config = configs.load_config(args.config)
    grid = sweeps.grid_points(sweeps.parse_grid(args.grid))
    if args.points:
      kept = set(driver.names_flag(args.points, [p.name for p in grid], "point"))
      grid = [p for p in grid if p.name in kept]
    trained = [Point(p.name, configs.typed(config, p.overrides)) for p in grid]
    decodings = sweeps.parse_grid(args.decode)
    decoding_keys = ("decode.", *checkpoints.DECODING_SWITCHES)
    if outside := [key for key in decodings if not key.startswith(decoding_keys)]:
      raise ValueError(
        f"--decode sets decoding only (decode.*, {', '.join(checkpoints.DECODING_SWITCHES)}), "
        f"not {', '.join(outside)}"
      )
    settings = sweeps.grid_points(decodings) if decodings else []  # No --decode: no points.
    decoded = [
      Point(f"{p.name}+{d.name}", configs.typed(config, {**p.overrides, **d.overrides}), p.name)
      for p in trained
      for d in settings
    ]
    return trained + decoded

  def check(self, sweep: Sweep, args: argparse.Namespace) -> None:
    """`--within KEY` must name a --grid field other than every field."""
    if args.within is None:
      return
    grid = sweeps.parse_grid(args.grid)
    if args.within not in grid:
      raise ValueError(f"--within {args.within}: not a --grid field ({', '.join(grid)})")
    if len(grid) < 2:
      raise ValueError(f"--within {args.within}: the grid has no other field to compare in groups")

  def report(
    self, sweep: Sweep, args: argparse.Namespace, trained: set[str], start: float
  ) -> dict[str, Any]:
    baseline = self.baseline(args, sweep.points)
    grid = sweeps.parse_grid(args.grid)
    result = driver.collect(sweep, args, baseline, trained, start, grid=grid)
    driver.write(sweep.out, self.report_name, result, markdown(result))
    return result


def markdown(result: dict[str, Any]) -> str:
  """The sweep table: one row per point."""
  rows, baseline = result["configurations"], result["baseline"]
  with_aer = any(r["aer_mean"] is not None for r in rows)
  with_oov = sweeps.copies(result["grid"])  # What copying is for: words the vocabulary lacks.
  # Where attention points on real text, which has no gold links (runs evaluated before the
  # metric existed lack it: the column waits until every row has it).
  with_twins = bool(rows) and all(r.get("identical_word_peaks_mean") is not None for r in rows)
  # How long the output runs against the reference (runs evaluated before the metric lack it).
  with_ratio = bool(rows) and all(r.get("valid_length_ratio_mean") is not None for r in rows)
  header = ["point", "seeds", "test BLEU", "test chrF", "valid BLEU"]
  header += ["valid length ratio", "test length ratio"] * with_ratio
  # What coverage and the other alignment features are for (words translated twice or never),
  # and what a structure that limits where attention looks may change.
  with_coverage = bool({"model.features", "model.attention"} & set(result["grid"]))
  # What a sparse normaliser changes: how many attention weights are exactly zero.
  with_zeros = "model.normaliser" in result["grid"] and all(
    r.get("attention_zero_share_mean") is not None for r in rows
  )
  header += ["AER"] * with_aer + ["OOV recall"] * with_oov + ["twin peaks"] * with_twins
  header += ["over-translated", "unattended"] * with_coverage + ["zero weights"] * with_zeros
  header += [f"p vs {baseline}"]
  cells = []
  for r in rows:
    cells.append(
      [r["name"], str(len(r["seeds"])), mean_sd(r, "bleu"), mean_sd(r, "chrf")]
      + [mean_sd(r, "valid_bleu")]
      + ([mean_sd(r, "valid_length_ratio", 3), mean_sd(r, "length_ratio", 3)] if with_ratio else [])
      + [mean_sd(r, "aer", 3)] * with_aer
      + [mean_sd(r, "oov_recall", 3)] * with_oov
      + [mean_sd(r, "identical_word_peaks", 3)] * with_twins
      + [mean_sd(r, "over_translation", 0), mean_sd(r, "under_translation", 0)] * with_coverage
      + [mean_sd(r, "attention_zero_share", 3)] * with_zeros
      + [fmt(r["p_value_vs_baseline"], 4)]
    )
  grid = ", ".join(f"`{k}` = {', '.join(v)}" for k, v in result["grid"].items())
  lines = [f"# Sweep of `{result['config_file']}`: {grid}", "", *reports.table(header, cells)]
  seeds = ", ".join(map(str, result["seeds"]))
  lines += [
    "",
    f"Mean ± sample standard deviation over seeds {seeds} (`--training {result['training']}`).",
    "BLEU and chrF: sacrebleu on the detokenised test split; valid BLEU: the final evaluation's"
    " (the checkpoint evaluated is the best by greedy validation BLEU where the runs select on"
    " it, so this figure is not independent of the selection).",
  ]
  if with_ratio:
    lines.append(
      "Length ratio: output words over reference words in BLEU's tokenisation (below 1 the"
      " brevity penalty applies)."
    )
  if with_aer:
    lines.append("AER: argmax attention against the gold alignments of the test split.")
  if with_oov:
    lines.append(
      "OOV recall: the share of the test references' words outside the target vocabulary "
      "that the output holds (clipped counts; `<unk>` replacement also produces some)."
    )
  if with_twins:
    lines.append(
      "Twin peaks: of the output words spelled like a source word that occurs once on each side"
      " (names, numbers, cognates: links known without gold alignments), the share whose"
      " attention peaks on that source word (`metrics.identical_word_offsets`)."
    )
  if with_coverage:
    lines.append(
      "Over-translated: output words repeated beyond the reference (sum over words of"
      " max(0, n_hyp - max(1, n_ref)), `<unk>` left out); unattended: source content words (outside"
      f" the {metrics.CONTENT_RANK} most frequent) that no output word's attention peaks on; both"
      " summed over the test split (`seq2seq.data.metrics`)."
    )
  if with_zeros:
    lines.append(
      "Zero weights: the share of the test outputs' attention weights (every output step,"
      " every source position, padding left out) that are exactly zero."
    )
  n = result["significance"]["n_samples"]
  lines.append(stats.bootstrap_caption(baseline, f"test BLEU ({n} resamples)"))
  within = result["significance"].get("within") or {"references": {}}
  if within["references"]:
    tests = within["per_configuration"]
    cells = [
      [name, other, _signed(tests[name].get("difference")), fmt(tests[name]["p_value"], 4)]
      for name, other in within["references"].items()
    ]
    lines += [
      "",
      f"Within each `{within['key']}`: each point against its group's baseline (its "
      f"`{within['key']}`, the baseline's other settings), by the same test.",
      "",
      *reports.table(["point", "against", "test BLEU difference", "p"], cells),
    ]
  return "\n".join(lines) + "\n"


def _signed(difference: float | None) -> str:
  return "0 (the same outputs)" if difference is None else f"{difference:+.2f}"


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
  return driver.main(GridSweep(__doc__), argv)


if __name__ == "__main__":
  main()

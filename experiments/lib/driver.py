"""The command line every sweep script shares, and what it does.

A sweep script defines a `Study`: which points it sweeps, on which config (its presets, or any
`--config=FILE[:ARG]`), against which baseline, and what it reports. `main(study, argv)` parses

    --out DIR [--config FILE[:ARG] | --preset NAME] [--seeds 0,1,2] [--set KEY=VALUE ...]
    [--training together|sequential] [--launcher local|jobs|cores [--processes P]]
    [--only POINT,...] [--collect [--partial]] [--bootstrap-samples N] [--ar-trials N]
    [--compilation-cache DIR]

plus the study's own flags, checks every run's config (a bad field fails in one line before
anything trains), and then:

* by default trains every unfinished run (`sweeps.train`) and reports (`Study.report`), except
  where it trained nothing and OUT already holds the report on every point and seed: rerunning a
  study script to resume it leaves a finished study's report (its date and machines) as it is;
* `--only P,Q` trains those points and stops (the jobs of a scheduler run this);
* `--launcher=jobs` writes OUT/jobs.txt and OUT/sbatch.sh instead of training (`launch`);
* `--launcher=cores` writes them and runs the jobs here, `--processes` at a time (default: one per
  CPU core), each pinned to its own core, then reports as the default does;
* `--collect` trains nothing and reports on the finished workdirs (an unfinished run is an
  error naming it); `--collect --partial` reports on the points whose runs have all finished and
  names the others in the report (a study that spans sessions, committed point by point).
"""

from __future__ import annotations

import abc
import argparse
import json
import os
import shlex
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from experiments.lib import configs, launch, plots, records, reports, stats, sweeps
from experiments.lib.presets import STUDIES
from experiments.lib.reports import fmt
from experiments.lib.sweeps import Point, Sweep
from seq2seq import sharding as rt

LAUNCHERS = ("local", "jobs", "cores")


class Study(abc.ABC):
  """A named sweep. Subclasses set `module` (what the jobs file runs) and the presets, and
  override `points`; `report` writes the study's files from the finished runs."""

  module = "experiments.sweep"
  report_name = "sweep"  # `report` writes OUT/<report_name>.json and .md.
  presets: dict[str, tuple[str, dict[str, Any]]] = {}  # --preset NAME: (config file, overrides).
  default_preset: str | None = None

  def __init__(self, description: str):
    self.description = description

  def add_arguments(self, parser: argparse.ArgumentParser) -> None:  # noqa: B027 (optional hook)
    """The study's own flags."""

  @abc.abstractmethod
  def points(self, args: argparse.Namespace) -> list[Point]:
    """The study's grid points."""

  def baseline(self, args: argparse.Namespace, points: Sequence[Point]) -> str:
    """The point the others are tested against: `--baseline` where the study has it, else the
    first point."""
    return getattr(args, "baseline", None) or points[0].name

  def shared(self, args: argparse.Namespace) -> dict[str, Any]:
    """Overrides of every run on top of the preset's (none by default)."""
    return {}

  def check(self, sweep: Sweep, args: argparse.Namespace) -> None:  # noqa: B027 (optional hook)
    """Raises ValueError where the study cannot run on `sweep` (its configs resolve)."""

  @abc.abstractmethod
  def report(
    self, sweep: Sweep, args: argparse.Namespace, trained: set[str], start: float
  ) -> dict[str, Any]:
    """Writes the study's files from the finished runs; returns its JSON record."""


class PresetStudy(Study):
  """A study on the presets the study scripts share (`experiments/lib/presets.py`), `cpu` unless
  `--preset` or `--config` says otherwise."""

  presets = STUDIES
  default_preset = "cpu"


def parser(study: Study) -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=study.description.split("\n\n")[0])
  p.add_argument("--out", required=True, help="output folder (runs go to OUT/runs/POINT/seed_S)")
  p.add_argument("--config", default=None, help="config file FILE[:ARG], as main.py takes it")
  if study.presets:
    p.add_argument(
      "--preset",
      default=None,
      choices=sorted(study.presets),
      help=f"config file and overrides of the study (default {study.default_preset}; "
      "not with --config)",
    )
  p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
  p.add_argument(
    "--set", action="append", default=[], metavar="KEY=VALUE", help="override of every run"
  )
  p.add_argument(
    "--training",
    default="together",
    choices=sweeps.TRAININGS,
    help="a point's seeds: vmapped as one group, or one run after another",
  )
  p.add_argument(
    "--launcher",
    default="local",
    choices=LAUNCHERS,
    help="local: train here; jobs: write OUT/jobs.txt and OUT/sbatch.sh for a scheduler; "
    "cores: write them, run the jobs here --processes at a time, one CPU core each, then report",
  )
  p.add_argument(
    "--processes",
    type=int,
    default=len(os.sched_getaffinity(0)),
    help="with --launcher=cores: jobs at once (default: one per CPU core this process may use)",
  )
  p.add_argument("--only", default=None, help="train only these points (comma-separated)")
  p.add_argument("--collect", action="store_true", help="report on the finished runs only")
  p.add_argument(
    "--partial",
    action="store_true",
    help="with --collect: only the points whose runs have all finished; the others are named",
  )
  p.add_argument("--bootstrap-samples", type=int, default=1000, help="paired bootstrap resamples")
  p.add_argument(
    "--ar-trials",
    type=int,
    default=stats.AR_TRIALS,
    help="trials of the paired approximate randomisation beside the bootstrap",
  )
  p.add_argument(
    "--compilation-cache",
    default=None,
    help="JAX persistent compilation cache folder (default OUT/jax_cache; 'none': off)",
  )
  study.add_arguments(p)
  return p


def names_flag(value: str, valid: Sequence[str], what: str) -> list[str]:
  """A comma-separated list of names, each of which must be in `valid` (ValueError)."""
  names = [s.strip() for s in value.split(",") if s.strip()]
  unknown = [n for n in names if n not in valid]
  if unknown or not names:
    raise ValueError(f"unknown {what} {unknown or value!r}; valid: {', '.join(valid)}")
  return names


def _absolute(args: argparse.Namespace) -> None:
  """Paths in `args` made independent of the working directory (the jobs file repeats them)."""
  args.out = str(Path(args.out).resolve())
  if args.config:
    args.config = configs.normalize_spec(args.config)
  cache = args.compilation_cache
  if cache and cache.lower() != "none":
    args.compilation_cache = str(Path(cache).resolve())


def seeds_flag(value: str) -> list[int]:
  """`--seeds 0,1,2` as integers (ValueError naming the flag)."""
  try:
    return [int(s) for s in value.split(",") if s.strip()]
  except ValueError:
    raise ValueError(f"--seeds {value!r}: expected comma-separated integers") from None


def plan(study: Study, args: argparse.Namespace) -> Sweep:
  """The sweep the arguments ask for; ValueError for anything wrong (its baseline included)."""
  preset = getattr(args, "preset", None)
  if args.config and preset:
    raise ValueError("--config and --preset exclude each other")
  if not args.config and not study.presets:
    raise ValueError("--config is required")
  if args.config:
    config_file, overrides = args.config, {}
  else:
    args.preset = preset or study.default_preset
    config_file, overrides = study.presets[args.preset]
  seeds = seeds_flag(args.seeds)
  if args.bootstrap_samples < 1:
    raise ValueError("--bootstrap-samples must be at least 1")
  if args.ar_trials < 1:
    raise ValueError("--ar-trials must be at least 1")
  out = Path(args.out)
  shared: dict[str, Any] = {}
  if not configs.load_config(config_file).data.cache_dir:  # Runs share one corpus, built once.
    shared["data.cache_dir"] = str(out / "data")
  shared |= overrides | study.shared(args)
  points = study.points(args)
  sets = configs.typed(configs.load_config(config_file), configs.parse_sets(args.set))
  sweep = Sweep(config_file, points, seeds, out, shared, sets, args.training)
  sweep.check()
  study.check(sweep, args)
  sweep.point(study.baseline(args, points))
  return sweep


def main(study: Study, argv: Sequence[str] | None = None) -> dict[str, Any] | None:
  """Runs the study as the command line asks; its JSON record when it reported."""
  p = parser(study)
  args = p.parse_args(argv)
  if args.collect and (args.only or args.launcher != "local"):
    p.error("--collect goes without --only and --launcher")
  if args.partial and not args.collect:
    p.error("--partial goes with --collect")
  if args.launcher == "cores" and args.only:
    p.error("--launcher=cores trains every unfinished point: it goes without --only")
  try:
    _absolute(args)
    arguments = dict(vars(args))  # As parsed, for the jobs file.
    words = list(sys.argv[1:] if argv is None else argv)
    args.command_line = shlex.join(["python", "-m", study.module, *words])
    sweep = plan(study, args)
    args.pending = []
    if args.partial:
      baseline = study.baseline(args, sweep.points)
      sweep, args.pending = sweeps.finished_part(sweep)
      if baseline in args.pending:
        raise ValueError(f"the baseline {baseline} has unfinished runs: nothing to compare with")
    only = names_flag(args.only, sweep.names(), "point") if args.only else sweep.names()
  except (ValueError, TypeError, FileNotFoundError) as e:
    raise SystemExit(f"error: {e}") from None
  sweep.out.mkdir(parents=True, exist_ok=True)
  if args.launcher == "jobs":
    lines, written = launch.write_jobs(sweep, study.module, arguments)
    print(f"wrote {', '.join(map(str, written))}: {len(lines)} jobs")
    print(f"run them, e.g.: xargs -d '\\n' -P 2 -I{{}} sh -c {{}} < {written[0]}")
    print(f"then: python -m {study.module} ... --collect")
    return None
  rt.enable_compilation_cache(args.compilation_cache or str(sweep.out / "jax_cache"))
  start = time.perf_counter()
  if args.launcher == "cores":
    trained = train_on_cores(sweep, study.module, arguments, args.processes)
  else:
    trained = set() if args.collect else sweeps.train(sweep, only)
  if args.only:
    return None
  missing = sweeps.unfinished(sweep)
  if missing:
    names = ", ".join(run.name for run in missing[:8]) + (" ..." if len(missing) > 8 else "")
    raise SystemExit(f"error: {len(missing)} runs unfinished ({names}); run them first")
  report = sweep.out / f"{study.report_name}.json"
  if not (trained or args.collect) and _reports_on(report, sweep):
    print(f"every run had finished and {report} reports on them all: kept (--collect rewrites it)")
    return None
  return study.report(sweep, args, trained, start)


def train_on_cores(
  sweep: Sweep, module: str, arguments: dict[str, Any], processes: int
) -> set[str]:
  """`--launcher=cores`: the jobs file's lines run here on a core each; the points they trained."""
  lines, _ = launch.write_jobs(sweep, module, arguments)
  unfinished = {run.name for run in sweeps.unfinished(sweep)}
  trained = {p.name for p in sweep.points if any(r.name in unfinished for r in sweep.runs(p.name))}
  print(f"{len(lines)} jobs, {processes} at a time on a core each; logs in {sweep.out / 'logs'}")
  try:
    launch.run_on_cores(lines, processes)
  except (ValueError, RuntimeError) as e:
    raise SystemExit(f"error: {e}") from None
  return trained


def _reports_on(path: Path, sweep: Sweep) -> bool:
  """Whether the study record at `path` reports on every point and seed of `sweep`."""
  if not path.exists():
    return False
  old = json.loads(path.read_text())
  names = [row["name"] for row in old.get("configurations", [])]
  return not old.get("pending_points") and names == sweep.names() and old["seeds"] == sweep.seeds


def record(
  sweep: Sweep,
  args: argparse.Namespace,
  baseline: str,
  rows: Sequence[dict[str, Any]],
  tested: dict[str, Any],
  recs: dict[str, Sequence[dict[str, Any]]],
  start: float,
  **extra: Any,
) -> dict[str, Any]:
  """The JSON record of a study: its settings (`extra` after them), rows, significance (the
  test, then `tested`), every run's record, the wall time of this invocation and of every run,
  and the environment."""
  runs = {rec["name"]: rec for point_recs in recs.values() for rec in point_recs}
  out = sweep.out.resolve()
  shared = [n for n, rec in runs.items() if not Path(rec["workdir"]).resolve().is_relative_to(out)]
  loads = [rec["load_1min_mean"] for rec in runs.values() if rec.get("load_1min_mean") is not None]
  return {
    "command": getattr(args, "command_line", None),
    "preset": getattr(args, "preset", None),
    "config_file": sweep.config_file,
    "seeds": sweep.seeds,
    "baseline": baseline,
    "training": sweep.training,
    "sets": args.set,
    **extra,
    "pending_points": getattr(args, "pending", []),
    "configurations": rows,
    "significance": {
      "test": stats.BOOTSTRAP,
      "n_samples": args.bootstrap_samples,
      "ar_test": stats.AR,
      "ar_trials": args.ar_trials,
      **tested,
    },
    "runs": runs,
    "curves": sweeps.curves(sweep),
    "total_wall_s": time.perf_counter() - start,
    "runs_wall_s": sum(rec["wall_s"] for rec in runs.values()),
    # Runs linked from another study (a shared baseline): their time is counted there too.
    "shared_runs": shared,
    "shared_runs_wall_s": sum(runs[n]["wall_s"] for n in shared),
    "runs_load_1min_mean": statistics.mean(loads) if loads else None,
    "runs_machines": runs_machines(runs.values()),
    **reports.environment(),
  }


def setting(result: dict[str, Any]) -> str:
  """What a study record ran on, for titles: "cpu preset", or the config file."""
  return f"{result['preset']} preset" if result["preset"] else result["config_file"]


def how_trained(name: str, curve: dict[str, Any]) -> str:
  """ "How trained: NAME's validation BLEU is X at step N, G more than at three quarters", from
  one of `sweeps.workdir_curves`' curves (with a final value)."""
  what = "validation BLEU (greedy)" if curve["metric"] == "bleu" else "validation loss"
  how = f"How trained: {name}'s {what} is {fmt(curve['final'])} at step "
  if curve["gain_last_quarter"] is None:
    return (
      how + f"{curve['step'][-1]} (no evaluation before three quarters of the steps to compare)."
    )
  return how + (
    f"{curve['step'][-1]}, {fmt(curve['gain_last_quarter'])} more than at step "
    f"{0.75 * curve['step'][-1]:,g} (three quarters of the steps; read linearly between the "
    "evaluations on either side where none falls there)."
  )


def footer(result: dict[str, Any]) -> list[str]:
  """The lines every study table ends with: how trained its baseline is (its final validation
  BLEU, or loss, and the gain over the last quarter of the steps), the points still to finish
  (`--collect --partial`), the settings of every run, the command, the date and the runs' wall
  clock."""
  lines = []
  curve = result.get("curves", {}).get(result["baseline"])
  if curve and curve["final"] is not None:
    lines += ["", how_trained(result["baseline"], curve)]
  if result.get("pending_points"):
    pending = ", ".join(f"`{name}`" for name in result["pending_points"])
    lines += ["", f"Not finished yet, so not in this table: {pending}."]
  if result["sets"]:
    lines += ["", "Every run: " + ", ".join(f"`{s}`" for s in result["sets"]) + "."]
  runs = result["runs"]
  lines += ["", *run_table(runs)]
  lines += [
    "",
    f"Command: `{result['command']}`",
    "",
    f"Reported {result['date']}; training and evaluating the {len(runs)} runs took "
    f"{result['runs_wall_s'] / 60:.0f} minutes of wall clock "
    f"({result['runs_wall_s'] / 60 / max(len(runs), 1):.1f} per run; {trained_on(result)}).",
  ]
  if result.get("shared_runs"):
    lines[-1] += (
      f" {len(result['shared_runs'])} of these runs (the baseline's, "
      f"{result['shared_runs_wall_s'] / 60:.0f} minutes) were trained for another study and are "
      "linked here."
    )
  if result.get("runs_load_1min_mean") is not None:
    lines[-1] += (
      f" Mean 1-minute load average while they trained: {result['runs_load_1min_mean']:.2f} "
      "(over the runs that sampled it)."
    )
  return lines


def runs_machines(recs: Iterable[dict[str, Any]]) -> dict[str, int]:
  """{machine: how many runs trained on it} over run records (`runs.machines`; a run resumed on
  another machine counts for each), "not recorded" for runs trained before runs recorded it."""
  counts: dict[str, int] = {}
  for rec in recs:
    for machine in rec.get("machines") or ["not recorded"]:
      counts[machine] = counts.get(machine, 0) + 1
  return counts


def trained_on(result: dict[str, Any]) -> str:
  """Where a study's runs trained, from their own records (a study spans sessions, and the CPU
  changes between them); records written before runs kept it name the reporting machine."""
  counts = result.get("runs_machines")
  if counts is None:
    return f"CPU: {result.get('cpu_model') or 'unknown'}, {result['cpu_count']} cores"
  if list(counts) == ["not recorded"]:
    return "CPU: not recorded by these runs"
  if len(counts) == 1:
    return f"CPU: {next(iter(counts))}"
  return "CPU: " + "; ".join(
    f"{machine} ({n} run{'s' if n > 1 else ''})" for machine, n in counts.items()
  )


def run_table(runs: dict[str, dict[str, Any]]) -> list[str]:
  """Every run's own figures, so that a per-seed table is read from the report, never copied by
  hand: test BLEU and chrF, validation BLEU, the checkpoint evaluated, the training clock at its
  last step (metrics.jsonl: carried over resumes), the wall clock of all its invocations
  (training and evaluation; wall_time.json) and the mean 1-minute load average while it ran."""
  header = ["run", "test BLEU", "test chrF", "valid BLEU", "checkpoint"]
  header += ["training minutes", "wall minutes", "load"]
  cells = []
  for name, rec in runs.items():
    test, valid = rec["results"]["test"], rec["results"].get("valid", {})
    train_s = rec.get("train_s")
    cells.append(
      [name, fmt(test.get("bleu")), fmt(test.get("chrf")), fmt(valid.get("bleu"))]
      + [f"{test['step']:,}" if "step" in test else "-"]
      + [fmt(None if train_s is None else train_s / 60, 1), fmt(rec["wall_s"] / 60, 1)]
      + [fmt(rec.get("load_1min_mean"))]
    )
  return ["Per run:", "", *reports.table(header, cells)]


def write(out: Path, name: str, result: dict[str, Any], markdown: str) -> None:
  """OUT/NAME.json and OUT/NAME.md (the study's tables, then `footer`), the table printed,
  OUT/learning_curves.png from the record's validation curves (`plots.learning_curves`), and the
  study in its committed form (`records.convert_study`: OUT/definition.json, every run's
  record.json and hypotheses/)."""
  if result.get("curves"):
    seeds = ", ".join(map(str, result["seeds"]))
    title = f"{setting(result)}, seeds {seeds}"
    plots.learning_curves(result["curves"], out / "learning_curves.png", title)
  markdown = markdown + "\n".join(footer(result)) + "\n"
  reports.write_json(out / f"{name}.json", result)
  (out / f"{name}.md").write_text(markdown)
  # The committed form: each run's record and test outputs, and the study's definition.
  records.convert_study(out)
  print(markdown)
  print(f"wrote {out / f'{name}.json'} ({result['total_wall_s']:.0f} s)")


def collect(
  sweep: Sweep,
  args: argparse.Namespace,
  baseline: str,
  trained: set[str],
  start: float,
  **extra: Any,
) -> dict[str, Any]:
  """The record of a finished sweep: per point the test-split figures over seeds
  (`sweeps.aggregate`) with the paired bootstrap p of its test BLEU against `baseline`
  (`sweeps.bootstrap`; of its test chrF and, where the runs kept their per-sentence counts, its
  twin peaks beside it), every run's record, and the validation learning curves. With
  `--within KEY`, the same tests of each point against its group's baseline
  (`sweeps.within_references`) too, under the significance's "within". Every BLEU and chrF test
  has the approximate randomisation's p beside the bootstrap's."""
  recs = sweeps.records(sweep, trained)
  rows = [sweeps.aggregate(sweep, point, recs[point.name]) for point in sweep.points]
  refs = sweeps.references(sweep)
  n = args.bootstrap_samples
  bleu_chrf = {"metrics": ("bleu", "chrf"), "ar_trials": args.ar_trials}
  significance = sweeps.bootstrap(sweep, baseline, refs, n, **bleu_chrf)
  for row in rows:
    row["p_value_vs_baseline"] = significance["bleu"][row["name"]]["p_value"]
  tested = {
    "hypotheses": "test split, seed S paired with the baseline's, seeds pooled per resample",
    "per_configuration": significance["bleu"],
    "per_configuration_chrf": significance["chrf"],
    "per_configuration_twin_peaks": sweeps.bootstrap_twins(recs, baseline, n),
  }
  if key := getattr(args, "within", None):
    pairs = sweeps.within_references(sweep, baseline, key)
    within = sweeps.bootstrap(sweep, pairs, refs, n, **bleu_chrf)
    tested["within"] = {
      "key": key,
      "references": pairs,
      "per_configuration": within["bleu"],
      "per_configuration_chrf": within["chrf"],
      "per_configuration_twin_peaks": sweeps.bootstrap_twins(recs, pairs, n),
    }
  return record(sweep, args, baseline, rows, tested, recs, start, **extra)

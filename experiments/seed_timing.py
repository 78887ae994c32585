"""Seeds trained together (vmapped) against one after another: wall time and tokens/s.

    nice python -m experiments.seed_timing --config=configs/multi30k.py --seeds 0,1,2 \
        --steps 150 --out experiments/results/seed_timing/together.json

Every way (`--ways`, default the first two) trains the same configuration for the same number
of updates per seed, each way in fresh Python processes (so none reuses another's compiled
programs; the persistent compilation cache is off) with validation and the final evaluation off:

* `together`: `seq2seq.seed_group.train_together`, one compiled step vmapped over the seeds'
  stacked parameters (what `experiments.sweep` does by default);
* `sequential`: `seq2seq.train.train_and_evaluate` once per seed, in one process (what
  `experiments.sweep --training sequential` does);
* `processes`: each seed in its own process, `--processes` of them at once, each pinned to its
  own CPU core (`experiments.lib.launch.run_on_cores`, what `experiments.sweep --training
  sequential --launcher=cores` does). Its runs overlap, so its training wall time is the whole
  group's, first start to last end (compiling and starting Python included).

Reported per way: the wall seconds of the whole training (compiling included, data loading
not: the corpus is built once before either way), model updates per wall second (seeds x steps /
seconds), and the steady-state throughput in target tokens/s of all seeds together (the median
of the logged windows after the first, which holds the compile; for `together` a window's
tokens/s counts one model, so it is multiplied by the number of seeds, for `processes` by the
number of processes at once). The JSON also records the
CPU model, its vector instruction sets and the load average before and after each way.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WAYS = ("together", "sequential", "processes")


def _runs(config_file: str, overrides: dict[str, Any], seeds: Sequence[int], root: Path):
  from experiments.lib import runs as runs_lib

  return [
    runs_lib.Run(f"seed_{s}", config_file, {**overrides, "seed": s}, root / f"seed_{s}")
    for s in seeds
  ]


def overrides_for(args: argparse.Namespace, data_dir: str) -> dict[str, Any]:
  """The settings both ways share: the budget, no validation, no final evaluation."""
  from experiments.lib import configs

  return {
    **configs.parse_sets(args.set),
    "train.num_steps": args.steps,
    "train.max_minutes": 0.0,
    "train.log_every": args.log_every,
    "train.eval_every": 10 * args.steps,
    "train.checkpoint_every": args.steps,
    "train.final_eval": False,
    "data.cache_dir": data_dir,
  }


def train_way(args: argparse.Namespace) -> None:
  """Child process: trains the seeds one way under args.root."""
  from experiments.lib import runs as runs_lib

  runs = _runs(args.config, json.loads(args.overrides_json), args.seeds, Path(args.root))
  if args.way == "together":
    runs_lib.train_together(runs)
  else:
    for run in runs:
      runs_lib.train_alone(run)


def child_command(args: argparse.Namespace, way: str, seeds: Sequence[int], root: Path,
                  overrides: dict[str, Any]) -> list[str]:  # fmt: skip
  return [
    sys.executable, "-m", "experiments.seed_timing", "--child", "--way", way,
    "--config", args.config, "--seeds", ",".join(map(str, seeds)),
    "--root", str(root), "--overrides-json", json.dumps(overrides),
  ]  # fmt: skip


def measure(args: argparse.Namespace, way: str, root: Path, overrides: dict[str, Any]):
  """Runs one way in child processes; its figures read back from the workdirs."""
  from experiments.lib import launch, reports
  from experiments.lib import runs as runs_lib

  load_before = reports.load_average()
  start = time.perf_counter()
  if way == "processes":  # A process per seed, `--processes` at once, each on its own core.
    seeds = [[seed] for seed in args.seeds]
    lines = [shlex.join(child_command(args, "sequential", s, root, overrides)) for s in seeds]
    launch.run_on_cores(lines, args.processes)
  else:
    subprocess.run(child_command(args, way, args.seeds, root, overrides), check=True)
  process_s = time.perf_counter() - start
  runs = _runs(args.config, overrides, args.seeds, root)
  wall = process_s if way == "processes" else sum(runs_lib.wall_time(r.workdir) for r in runs)
  per_model = [v for run in runs for v in runs_lib.train_tokens_per_s(run.workdir)]
  at_once = {"together": len(runs), "processes": min(args.processes, len(runs))}.get(way, 1)
  steady = statistics.median(per_model) * at_once
  return {
    "way": way,
    "training_wall_s": wall,
    "process_wall_s": process_s,
    "model_updates_per_s": len(runs) * args.steps / wall,
    "steady_tokens_per_s_all_seeds": steady,
    "load_average_before": load_before,
    "load_average_after": reports.load_average(),
  }


def speedups(ways: dict[str, dict[str, Any]]) -> dict[str, float]:
  """Each way against one after another: `together` on training wall time and steady tokens/s
  (as before), `processes` on the whole group's process wall time (its runs overlap)."""
  out = {}
  sequential = ways.get("sequential")
  if sequential and "together" in ways:
    together = ways["together"]
    out["together_speedup_wall"] = sequential["training_wall_s"] / together["training_wall_s"]
    out["together_speedup_steady"] = (
      together["steady_tokens_per_s_all_seeds"] / sequential["steady_tokens_per_s_all_seeds"]
    )
  if sequential and "processes" in ways:
    processes = ways["processes"]
    out["processes_speedup_wall"] = sequential["process_wall_s"] / processes["process_wall_s"]
  return out


def prepare_corpus(config_file: str, data_dir: str) -> None:
  from experiments.lib import configs
  from seq2seq.data import builders, input_pipeline

  config = configs.load_config(config_file)
  builders.prepare_corpus(input_pipeline.DataSettings.from_config(config), Path(data_dir))


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--config", default="configs/multi30k.py")
  p.add_argument("--seeds", default="0,1,2", type=lambda v: [int(s) for s in v.split(",")])
  p.add_argument("--steps", type=int, default=150, help="updates per seed")
  p.add_argument("--log-every", type=int, default=25)
  p.add_argument("--set", action="append", default=[], help="KEY=VALUE for every way")
  p.add_argument(
    "--ways",
    default=",".join(WAYS[:2]),
    type=lambda v: v.split(","),
    help=f"which of {', '.join(WAYS)}",
  )
  p.add_argument(
    "--processes",
    type=int,
    default=len(os.sched_getaffinity(0)),
    help="the `processes` way's processes at once (default: one per CPU core)",
  )
  p.add_argument("--data-dir", default=None, help="corpus cache (default: a temporary folder)")
  p.add_argument("--out", default=None, help="JSON file to write")
  p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)
  p.add_argument("--root", help=argparse.SUPPRESS)
  p.add_argument("--overrides-json", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if not args.ways or set(args.ways) - set(WAYS):
    p.error(f"--ways: a comma-separated list of {', '.join(WAYS)}")
  if args.child:
    train_way(args)
    return None

  from experiments.lib import reports

  with tempfile.TemporaryDirectory(prefix="seed_timing_") as tmp:
    data_dir = args.data_dir or str(Path(tmp) / "data")
    prepare_corpus(args.config, data_dir)
    overrides = overrides_for(args, str(Path(data_dir).resolve()))
    ways = {way: measure(args, way, Path(tmp) / way, overrides) for way in args.ways}
  result = {
    "command": " ".join(["python -m experiments.seed_timing", *(argv or sys.argv[1:])]),
    "config": args.config,
    "seeds": args.seeds,
    "steps_per_seed": args.steps,
    "overrides": overrides,
    "ways": list(ways.values()),
    **speedups(ways),
    "cpu": reports.cpu_info(),
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
  }
  print(json.dumps(result, indent=2))
  if args.out:
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
  return result


if __name__ == "__main__":
  main()

"""What an update costs in each decoder, side by side: Luong et al.'s against the paper's.

    nice python -m experiments.decoder_cost --out experiments/results/decoder_cost/cost.json \
        [--configs configs/multi30k.py,configs/luong.py:multi30k] [--batches 40] [--rounds 3]

The configs must read the same corpus with the same batching: the first `--batches` batches of
its training stream (seed 0, every length bucket they reach) are what each config's compiled
train step (`sharding.compile_steps`, the one training runs) is timed on. Every config first
compiles a program per batch shape (the seconds recorded per config: a new shape compiles once
per run) and goes over the batches once untimed. Then, `--rounds` times, each batch is given to
every config in turn, the order reversed from batch to batch, so a load that changes while it
runs falls on all of them alike. An update's cost is a round's seconds over its batches,
divided by their number; each config's figure is the median round, and its cost over the first
config's is the comparison the issue asks for. The mean training loss of the last round is
recorded too: a change that must leave the numbers alone leaves it equal to rounding.

Writes OUT (JSON: per config the cost per update, every round's, target tokens per update,
compile seconds per shape, the loss; the CPU model and its vector instruction sets, the load
average at the start and the end) and a page beside it (OUT with .md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib.pages.decoder_cost import page

DEFAULT_CONFIGS = "configs/multi30k.py,configs/luong.py:multi30k"


def training_batches(config_file: str, count: int, data_dir: Path) -> list[dict[str, Any]]:
  """The first `count` batches of the config's training stream (its corpus built if need be)."""
  from experiments.lib import configs
  from seq2seq.data import input_pipeline

  config = configs.load_config(config_file)
  config.data.cache_dir = str(data_dir)
  d = input_pipeline.DataSettings.from_config(config)
  data = input_pipeline.load_data(d, data_dir / "workdir")
  it = input_pipeline.train_iterator(data, d)
  return [{k: v for k, v in next(it).items() if k != "index"} for _ in range(count)]


class Stepper:
  """A config's train step on one device, as training compiles it, one program per shape."""

  def __init__(self, config_file: str, batches: Sequence[dict[str, Any]]):
    import jax

    from experiments.lib import configs
    from seq2seq import settings
    from seq2seq import sharding as rt
    from seq2seq.training import train_state

    config = configs.load_config(config_file)
    self.name = config_file
    run = settings.validate(config)
    self.runtime = rt.Runtime()
    self.state = train_state.create_train_state(
      run, jax.random.key(0), config.data.src_vocab_size, config.data.tgt_vocab_size
    )
    step_fn, _ = rt.compile_steps(run, self.runtime)
    self.batches = [self.runtime.put_batch(b) for b in batches]
    self.rng = jax.random.key(1)
    self.programs: dict[tuple, Any] = {}
    self.compile_s: list[float] = []
    for batch in self.batches:
      shape = tuple(v.shape for v in batch.values())
      if shape not in self.programs:
        start = time.perf_counter()
        self.programs[shape] = step_fn.lower(self.state, batch, self.rng).compile()
        self.compile_s.append(time.perf_counter() - start)
    self.step = 0
    self.losses: list[float] = []

  def update(self, i: int) -> float:
    """Applies the train step to batch i; its wall seconds, results awaited."""
    import jax

    batch = self.batches[i]
    program = self.programs[tuple(v.shape for v in batch.values())]
    start = time.perf_counter()
    self.state, metrics = program(self.state, batch, jax.random.fold_in(self.rng, self.step))
    jax.block_until_ready((self.state, metrics))
    seconds = time.perf_counter() - start
    self.step += 1
    self.losses.append(float(metrics["loss"]))
    return seconds


def measure(steppers: Sequence[Stepper], rounds: int) -> dict[str, list[float]]:
  """Seconds per round of each stepper over all its batches, the steppers taking turns."""
  n = len(steppers[0].batches)
  for s in steppers:  # Untimed: every program run once.
    for i in range(n):
      s.update(i)
  totals: dict[str, list[float]] = {s.name: [] for s in steppers}
  for _ in range(rounds):
    round_s = {s.name: 0.0 for s in steppers}
    for i in range(n):
      order = steppers if i % 2 == 0 else steppers[::-1]
      for s in order:
        round_s[s.name] += s.update(i)
    for name, seconds in round_s.items():
      totals[name].append(seconds)
  return totals


def command_line(argv: Sequence[str]) -> str:
  """The command as recorded: without `--data-dir`, a cache whose place changes nothing."""
  kept, skip = [], False
  for arg in argv:
    if skip or arg.startswith("--data-dir="):
      skip = False
      continue
    if arg == "--data-dir":
      skip = True
      continue
    kept.append(arg)
  return " ".join(["python -m experiments.decoder_cost", *kept])


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--configs", default=DEFAULT_CONFIGS, type=lambda v: v.split(","))
  p.add_argument("--batches", type=int, default=40, help="training batches timed per round")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--data-dir", default=None, help="corpus cache (default: a temporary folder)")
  p.add_argument("--out", required=True, help="JSON file; a .md page is written beside it")
  args = p.parse_args(argv)

  from experiments.lib import configs, reports
  from seq2seq.data import input_pipeline

  data_settings = [
    input_pipeline.DataSettings.from_config(configs.load_config(c)) for c in args.configs
  ]
  if any(d != data_settings[0] for d in data_settings):
    p.error("the configs read different corpora or batch them differently: no common batches")
  load_start = reports.load_average()
  with tempfile.TemporaryDirectory(prefix="decoder_cost_") as tmp:
    data_dir = Path(args.data_dir or tmp).resolve()
    batches = training_batches(args.configs[0], args.batches, data_dir)
  steppers = [Stepper(c, batches) for c in args.configs]
  totals = measure(steppers, args.rounds)
  tokens = statistics.mean(float(b["tgt_mask"].sum()) for b in batches)
  first = statistics.median(totals[args.configs[0]])
  result = {
    "command": command_line(argv if argv is not None else sys.argv[1:]),
    "batches": args.batches,
    "rounds": args.rounds,
    "target_tokens_per_update": tokens,
    "configs": [
      {
        "config": s.name,
        "ms_per_update": 1000 * statistics.median(totals[s.name]) / args.batches,
        "rounds_ms_per_update": [1000 * t / args.batches for t in totals[s.name]],
        "cost_vs_first": statistics.median(totals[s.name]) / first,
        "target_tokens_per_s": tokens * args.batches / statistics.median(totals[s.name]),
        "compile_s": s.compile_s,
        "last_round_loss": statistics.mean(s.losses[-args.batches :]),
      }
      for s in steppers
    ],
    "cpu": reports.cpu_info(),
    "versions": reports.versions(),
    "load_average": {"start": load_start, "end": reports.load_average()},
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
  }
  reports.publish(Path(args.out), result, page(result))
  return result


if __name__ == "__main__":
  main()

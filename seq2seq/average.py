"""Checkpoint averaging: the mean of a run's last K checkpoints (or named steps) as a new run.

    python -m seq2seq.average --workdir=runs/a --last=4 --out=runs/a-avg4
    python -m seq2seq.average --workdir=runs/a --steps=2000,2500 --out=runs/a-avg

The new workdir holds the run's config.json, vocab/ and corpus (data/, when it lives in the
workdir) and one checkpoint, at the last averaged step, whose parameters are the element-wise
mean of the chosen checkpoints' (in float32; a moving average, `train.ema_decay`, is averaged the
same way). Its optimiser and data-iterator state are the last checkpoint's, so `main.py` evaluates
and translates it like any run (`--mode=eval` / `--mode=translate` with the run's config and
`--workdir` pointing at the new folder). `average.json` records where it came from.

A run with a moving average evaluates that average. `--raw` keeps the training parameters
instead (the average dropped, `train.ema_decay=0` in the new config.json), so the same checkpoint
can be evaluated both ways; `--best` reads the best checkpoint by validation BLEU (the one
evaluation picks) instead of the latest ones:

    python -m seq2seq.average --workdir=runs/a --best --last=1 --raw --out=runs/a-raw
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp

from seq2seq import checkpoints, settings
from seq2seq import sharding as rt
from seq2seq.common import files
from seq2seq.data import tokenizer as tok
from seq2seq.training import train_state


def mean_states(states: Sequence[train_state.TrainState]) -> train_state.TrainState:
  """The last state with `params` (and `ema`, if any) replaced by their mean over `states`."""
  mean = lambda *xs: (sum(x.astype(jnp.float32) for x in xs) / len(xs)).astype(xs[0].dtype)
  last = states[-1]
  out = last.replace(params=jax.tree.map(mean, *(s.params for s in states)))
  if last.ema is not None:
    out = out.replace(ema=jax.tree.map(mean, *(s.ema for s in states)))
  return out


def choose_steps(available: Sequence[int], last: int | None, named: Sequence[int] | None):
  """The checkpoint steps to average: the `last` K, or the `named` ones (all must exist)."""
  if (last is None) == (not named):
    raise ValueError("give either --last=K or --steps=A,B,...")
  if named:
    missing = sorted(set(named) - set(available))
    if missing:
      raise ValueError(f"no checkpoint of step(s) {missing}; the run keeps {list(available)}")
    return sorted(set(named))
  if last < 1 or last > len(available):
    raise ValueError(
      f"--last={last}: the run keeps {len(available)} checkpoint(s) {list(available)} "
      "(train.keep_checkpoints sets how many)"
    )
  return list(available)[-last:]


def average_checkpoints(
  workdir: str | Path,
  out: str | Path,
  *,
  last: int | None = None,
  steps_: Sequence[int] = (),
  raw: bool = False,
  subdir: str = "checkpoints",
) -> dict:
  """Writes the average of `workdir`'s chosen checkpoints as the run in `out`; its record.
  `raw`: the training parameters only, without the run's moving average (see the module doc);
  `subdir`: "checkpoints" (the latest ones) or "best" (the best by validation BLEU)."""
  workdir, out = Path(workdir), Path(out)
  if out.exists() and any(out.iterdir()):
    raise FileExistsError(f"{out} exists and is not empty; give a new --out")
  if not (workdir / subdir).is_dir():  # (Opening it would make an empty one in the run.)
    raise ValueError(f"{workdir} has no {subdir}/ to average: it has saved no checkpoint")
  config = checkpoints.load_config(workdir)
  run = settings.validate(config)
  if raw and not run.train.ema_decay:
    raise ValueError(f"--raw: {workdir} keeps no moving average (train.ema_decay=0)")
  vocab = {side: tok.load(workdir / "vocab" / side) for side in ("src", "tgt")}
  runtime = rt.Runtime()
  template = rt.abstract_state(run, vocab["src"].size, vocab["tgt"].size, runtime)
  source = checkpoints.Checkpointer(workdir, run.train.keep_checkpoints, subdir=subdir)
  chosen = choose_steps(source.manager.all_steps(), last, steps_)
  states, data_state = [], None
  for step in chosen:
    state, data_state = source.restore(template, step)
    states.append(state)
  source.close()
  averaged = mean_states(states)

  out.mkdir(parents=True, exist_ok=True)
  if raw:
    averaged = averaged.replace(ema=None)
    config.unlock()
    config.train.ema_decay = 0.0
    config.lock()
    checkpoints.check_and_save_config(out, config)
  else:
    shutil.copy(workdir / "config.json", out / "config.json")
  shutil.copytree(workdir / "vocab", out / "vocab")
  if not run.data.cache_dir and (workdir / "data").is_dir():
    shutil.copytree(workdir / "data", out / "data")
  target = checkpoints.Checkpointer(out, 1)
  target.save(averaged, data_state)
  target.close()
  record = {"source": str(workdir), "steps": chosen, "step": chosen[-1], "raw": raw}
  files.write_atomic(out / "average.json", json.dumps(record, indent=2) + "\n")
  return record


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m seq2seq.average", description=__doc__)
  parser.add_argument("--workdir", required=True, help="the run whose checkpoints to average")
  parser.add_argument("--out", required=True, help="the new workdir (must not exist yet)")
  parser.add_argument("--last", type=int, default=None, help="average the last K checkpoints")
  parser.add_argument("--steps", default="", help="or these steps, comma-separated")
  parser.add_argument(
    "--raw", action="store_true", help="the training parameters, not their moving average"
  )
  parser.add_argument(
    "--best", action="store_true", help="read the best checkpoint(s) by validation BLEU"
  )
  args = parser.parse_args(argv)
  named = [int(s) for s in args.steps.split(",") if s.strip()]
  try:
    record = average_checkpoints(
      args.workdir,
      args.out,
      last=args.last,
      steps_=named,
      raw=args.raw,
      subdir="best" if args.best else "checkpoints",
    )
  except (ValueError, OSError) as e:
    raise SystemExit(f"error: {e}") from None
  print(json.dumps(record))


if __name__ == "__main__":
  main()

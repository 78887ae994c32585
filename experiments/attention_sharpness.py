"""How sharp each run's attention is, at initialisation and after training.

    python -m experiments.attention_sharpness STUDY_DIR [--split valid] [--limit 300]
        [--json OUT.json]

For every finished run under STUDY_DIR/runs/POINT/seed_S that kept a checkpoint: the teacher-forced
attention of the references of the first `--limit` sentences of `--split`, from the parameters
its seed initialises (step 0) and from the checkpoint evaluation restores (its best by validation
BLEU). Reports per point, mean and sd over seeds, the entropy of a target word's attention row
relative to the uniform distribution over its source (1: uniform, 0: one source word) and the
mean largest weight of a row. It asks whether a score function starts from near-uniform
attention, as additive does (v_a is zero at initialisation), or from sharp attention its random
parameters chose. Selects on nothing and reads no test split.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from flax import nnx

from experiments.lib import stats
from seq2seq import checkpoints, restoring, settings
from seq2seq import sharding as rt
from seq2seq.data import copying, input_pipeline
from seq2seq.data import lexicon as lexicon_lib
from seq2seq.decoding import decode, inference


def sharpness(alphas: Sequence[np.ndarray]) -> dict[str, float]:
  """Mean over target words of (entropy / log S) and of the row's largest weight, for attention
  rows [T, S] (rows renormalised; sources of one word, where entropy relative to uniform is
  undefined, are left out)."""
  relative, peak = [], []
  for alpha in alphas:
    rows = np.asarray(alpha, np.float64)
    if rows.shape[-1] < 2:
      continue
    p = np.clip(rows / rows.sum(axis=1, keepdims=True), 1e-12, 1.0)
    relative.extend((-(p * np.log(p)).sum(axis=1) / np.log(rows.shape[-1])).tolist())
    peak.extend(p.max(axis=1).tolist())
  return {"relative_entropy": float(np.mean(relative)), "max_weight": float(np.mean(peak))}


def measure(workdir: Path, config, split_name: str, limit: int) -> dict[str, dict[str, float]]:
  """The run's attention sharpness at initialisation and at its evaluated checkpoint (`config`:
  the run's saved config)."""
  runtime, run = rt.Runtime(), settings.validate(config)
  data = rt.load_data(run, workdir)
  split = input_pipeline.subset(data.splits[split_name], np.arange(limit))
  sizes = (data.src_tokenizer.size, data.tgt_tokenizer.size)
  states = {
    "init": rt.initial_state(run, *sizes, runtime, **_tables(data, config, workdir)),
    "trained": restoring.restore_run(run, workdir, *sizes, runtime),
  }
  out = {}
  for name, state in states.items():
    out[name] = sharpness(
      inference.teacher_forced_attention(state, split, decode.DecodeSettings.from_config(config))
    )
    out[name]["step"] = int(state.step)
    out[name]["score_scalars"] = score_scalars(state.params)
  return out


def score_scalars(params: nnx.State) -> dict[str, float]:
  """The score function's learned scalars by name (cosine's `sharpness`, the beta that bounds
  its scores to [-beta, beta]); empty for scores without one."""
  return {
    "/".join(map(str, path[1:])): float(np.asarray(value[...]))
    for path, value in nnx.to_flat_state(params)
    if path[0] == "score" and np.ndim(value[...]) == 0
  }


def _tables(data, config, workdir: Path) -> dict:
  """The data-built tables a copying or lexicon-biased model is initialised with, as training
  built them (`seq2seq.train`)."""
  tables = {}
  if copying.asked(config.model.addons):
    tables["copy_map"] = copying.vocab_map(data.src_tokenizer, data.tgt_tokenizer)
  if (workdir / lexicon_lib.FILE).is_file():
    tables["lexicon"] = lexicon_lib.Lexicon.load(workdir / lexicon_lib.FILE)
  return tables


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("study", type=Path, help="a study's --out folder (with runs/POINT/seed_S)")
  p.add_argument("--split", default="valid")
  p.add_argument("--limit", type=int, default=300, help="sentences of the split measured")
  p.add_argument("--json", type=Path, default=None, help="default: STUDY/attention_sharpness.json")
  args = p.parse_args(argv)
  start = time.time()
  runs: dict[str, dict[str, dict]] = {}
  for run in sorted(args.study.glob("runs/*/seed_*")):
    config = checkpoints.load_config(run)
    finished = (
      run / restoring.eval_prefix(settings.validate(config).model) / "test" / "results.json"
    )
    if not finished.is_file() or not any((run / s).is_dir() for s in ("best", "checkpoints")):
      continue  # Still training, or its checkpoints are not in this working tree.
    if input_pipeline.DataSettings.from_config(config).sources > 1:
      print(f"{run}: skipped (two sources: a row holds two distributions, one per source)")
      continue
    print(f"{run}", flush=True)
    runs.setdefault(run.parent.name, {})[run.name] = measure(run, config, args.split, args.limit)
  points = {}
  for point, seeds in runs.items():
    points[point] = {
      f"{when}_{key}": stats.mean_std([s[when][key] for s in seeds.values()])
      for when in ("init", "trained")
      for key in ("relative_entropy", "max_weight")
    }
    for name in next(iter(seeds.values()))["trained"]["score_scalars"]:
      values = [s["trained"]["score_scalars"][name] for s in seeds.values()]
      points[point][f"trained_score_{name}"] = stats.mean_std(values)
  record = {
    "command": "python -m experiments.attention_sharpness " + " ".join(argv or sys.argv[1:]),
    "split": args.split,
    "sentences": args.limit,
    "points": points,
    "runs": runs,
    "minutes": (time.time() - start) / 60,
  }
  out = args.json or args.study / "attention_sharpness.json"
  out.write_text(json.dumps(record, indent=2) + "\n")
  for point, row in points.items():
    cells = "  ".join(f"{k} {m:.3f}±{s:.3f}" for k, (m, s) in row.items())
    print(f"{point}: {cells}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())

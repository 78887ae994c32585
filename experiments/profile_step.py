"""Where a training step's and a decoding call's time goes, by operation, from XLA's own trace.

    python -m experiments.profile_step --out experiments/results/profile \
        [--configs bench,paper,configs/multi30k_best.py] [--dtypes float32,bfloat16] [--steps 3]

For each config and dtype: the library's train step (`train_bench.TrainBench`, its random batch
of full-length sentences: 64 x 30 words on `bench`, 80 x 30 on `paper`, and 64 x 30 on a config
file) and greedy decoding of that batch (`decode.jit_decode`, 30 steps), each run under
`jax.profiler.trace` after a warm-up. XLA:CPU runs every HLO instruction (a fusion, a matmul, a
copy) as a thunk, and the trace times each one; a `while` (the recurrences' scans) or
`conditional` thunk only waits for the instructions inside it, which are timed themselves, so
it is left out. Each instruction's time is attributed, through the compiled module's metadata
(the call stack of the operation at its root), to the innermost function of this repository on
that stack: `seq2seq/model/scores.py:Additive.__call__` (the score),
`seq2seq/model/layers.py:GRUCell. __call__` (the gates), `seq2seq/training/train_state.py:...` (the
optimiser's update, called from there); the bfloat16 matmul helpers (`PASS_THROUGH`) give their
operations to their caller; an operation no function of ours made is named by its package's function
(`optax/...`). The op kind (`fusion` for fused elementwise work and, on this backend, for matmuls
fused by XNNPACK's successor `ynn_fusion`, `dot`, `copy`, `dynamic-update-slice`, ...) is counted
beside it.

Two threads may run thunks at once, so the summed thunk time can exceed the wall time; each part
is given in milliseconds per step and as a share of the summed time. A plain `dot` thunk (an
Eigen matmul) can be timed short of its work: the bench step's weight-gradient dot (31.5 GFLOP)
shows 19.5 ms, a rate two cores cannot reach, so part of such a dot's time lands on the thunks
that wait for it (the dot presumably runs on in Eigen's thread pool); read the `dot` kind as a
lower bound. The matmuls XLA hands to YNNPACK (`ynn_fusion`) look timed whole.

Writes OUT/profile.json (per config, dtype and program: every part, the top instructions, the
wall time per step, the CPU and its load) and OUT/profile.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import ml_collections

from experiments.lib import reports, train_bench
from experiments.lib.configs import REPO_ROOT, load_config
from experiments.lib.pages.profile_step import page

CONTROL = re.compile(r"(?<![\w-])(while|conditional|call)\(")
INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = ")
FRAME = re.compile(r"stack_frame_id=(\d+)")
OP_KIND = re.compile(r" ([a-z][\w-]*)\(")
SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
# Helpers every caller goes through (the bfloat16 matmul with its CPU fast path and its custom
# gradient): an operation made there is attributed to the function that called them, where the
# caller is on the stack (the custom gradient's backward is traced without it).
PASS_THROUGH = tuple(
  f"seq2seq/model/layers.py:{name}"
  for name in (
    "matmul",
    "_bf16_matmul",
    "_bf16_matmul_fwd",
    "_bf16_matmul_bwd",
    "_mixed_dot_general",
  )
)


def config_for(name: str, dtype: str) -> ml_collections.ConfigDict:
  """A preset of the benchmark (`bench`, `paper`) or a config file with the benchmark's batch."""
  if name in train_bench.PRESETS:
    return train_bench.make_config(name, dtype)
  cfg = load_config(name)
  cfg.model.dtype = dtype
  cfg.data.batch_size, cfg.data.max_len = 64, 30
  if not cfg.data.tgt_vocab_size:  # The whole training vocabulary: the multi30k_best size.
    cfg.data.tgt_vocab_size = 11_571
  return cfg


def _field(text: str, name: str) -> int:
  return int(re.search(rf"\b{name}=(\d+)", text).group(1))


def stack_frames(hlo_text: str) -> dict[int, list[tuple[str, str, int]]]:
  """{stack frame id: its call stack, innermost first, as (file, function, line)} from the
  tables XLA prints after the module (a frame's `parent_frame_id` is its parent's id + 1; 0,
  none)."""
  tables: dict[str, dict[int, str]] = {}
  current = None
  for line in hlo_text.splitlines():
    if line in SECTIONS:
      current = tables.setdefault(line, {})
    elif current is not None and line[:1].isdigit():
      key, value = line.split(" ", 1)
      current[int(key)] = value.strip().strip('"')
    else:
      current = None
  if len(tables) < len(SECTIONS):
    return {}
  files, functions = tables["FileNames"], tables["FunctionNames"]
  locations, frames = tables["FileLocations"], tables["StackFrames"]

  def where(frame: int) -> tuple[str, str, int]:
    loc = locations[_field(frames[frame], "file_location_id")]
    return (
      files[_field(loc, "file_name_id")],
      functions[_field(loc, "function_name_id")],
      _field(loc, "line"),
    )

  stacks = {}
  for frame in frames:
    stack, at = [], frame
    while at >= 1 and len(stack) < 64:
      stack.append(where(at))
      at = _field(frames[at], "parent_frame_id") - 1
    stacks[frame] = stack
  return stacks


def instructions(hlo_text: str) -> dict[str, dict[str, Any]]:
  """{instruction name: its part (`part`), op kind and whether it is control flow}."""
  stacks = stack_frames(hlo_text)
  out = {}
  for line in hlo_text.splitlines():
    found = INSTRUCTION.match(line)
    if not found:
      continue
    rest = line[found.end() :]
    frame = FRAME.search(rest)
    kind = OP_KIND.search(rest)
    out[found.group(1)] = {
      "part": part(stacks.get(int(frame.group(1)), []) if frame else []),
      "kind": kind.group(1) if kind else "?",
      "control": bool(CONTROL.search(rest)),
    }
  return out


def part(stack: list[tuple[str, str, int]]) -> str:
  """`path:function` of the innermost frame of this repository's code in `stack` (the path
  relative to it), else of the innermost frame (a package's path: `optax/...`)."""
  if not stack:
    return "(no source)"
  ours = [
    f"{Path(file).relative_to(REPO_ROOT)}:{function}"
    for file, function, _ in stack
    if Path(file).is_relative_to(REPO_ROOT) and "site-packages" not in file
  ]
  if ours:
    return next((f for f in ours if f not in PASS_THROUGH), ours[0])
  path = Path(stack[0][0])
  at = next((i for i, p in enumerate(path.parts) if p == "site-packages"), None)
  shown = "/".join(path.parts[at + 1 :]) if at is not None else path.name
  return f"{shown}:{stack[0][1]}"


def thunk_times(trace_dir: Path, module: str) -> dict[str, float]:
  """{HLO instruction: summed microseconds} of `module`'s thunks in the trace."""
  files = sorted(trace_dir.glob("**/*.trace.json.gz"))
  if not files:
    raise RuntimeError(f"jax.profiler wrote no trace under {trace_dir}")
  data = json.loads(gzip.open(files[-1]).read())
  events = data["traceEvents"] if isinstance(data, dict) else data
  out: dict[str, float] = defaultdict(float)
  for e in events:
    args = e.get("args") or {}
    if e.get("ph") == "X" and args.get("hlo_module") == module and "hlo_op" in args:
      out[args["hlo_op"]] += float(e.get("dur", 0.0))
  return out


def profile(call, compiled_text: str, calls: int) -> dict[str, Any]:
  """Runs `call` (warm) `calls` times under the profiler; the breakdown per call."""
  module = compiled_text.split("\n", 1)[0].split()[1].rstrip(",")
  ops = instructions(compiled_text)
  jax.block_until_ready(call())
  with tempfile.TemporaryDirectory() as tmp:
    with jax.profiler.trace(tmp, create_perfetto_trace=True):
      start = time.perf_counter()
      for _ in range(calls):
        jax.block_until_ready(call())
      wall = (time.perf_counter() - start) / calls
    times = thunk_times(Path(tmp), module)
  parts: dict[str, float] = defaultdict(float)
  kinds: dict[str, float] = defaultdict(float)
  top = []
  for name, us in times.items():
    op = ops.get(name, {"part": "(not in the module)", "kind": "?", "control": False})
    if op["control"]:
      continue
    where = op["part"]
    parts[where] += us
    kinds[op["kind"]] += us
    top.append((us, name, op["kind"], where))
  total = sum(parts.values())
  per_call = lambda us: us / 1e3 / calls
  return {
    "wall_ms": wall * 1e3,
    "thunk_ms": per_call(total),
    "parts": [
      {"part": p, "ms": per_call(us), "share": us / total}
      for p, us in sorted(parts.items(), key=lambda x: -x[1])
    ],
    "kinds": {k: per_call(us) for k, us in sorted(kinds.items(), key=lambda x: -x[1])},
    "top_instructions": [
      {"instruction": n, "kind": k, "part": w, "ms": per_call(us)}
      for us, n, k, w in sorted(top, reverse=True)[:15]
    ],
  }


def profile_config(name: str, dtype: str, steps: int) -> dict[str, Any]:
  from seq2seq.decoding import decode

  cfg = config_for(name, dtype)
  bench = train_bench.TrainBench(cfg)
  bench.run(2)  # Warm.

  def train():
    bench.run(1)
    return bench.state.params

  out = {"train_step": profile(train, bench.compiled.as_text(), steps)}
  src, mask = bench.batch["src"], bench.batch["src_mask"]
  graphdef, params = bench.state.graphdef, bench.state.params
  greedy = dict(beam_size=1, max_len=int(src.shape[1]))
  call = lambda: decode.jit_decode(graphdef, params, src, mask, **greedy)
  text = decode.jit_decode.lower(graphdef, params, src, mask, **greedy).compile().as_text()
  out["greedy_decode"] = profile(call, text, steps)
  out["batch"] = {"sentences": int(src.shape[0]), "words": int(src.shape[1])}
  return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--out", required=True)
  p.add_argument("--configs", default="bench,paper,configs/multi30k_best.py")
  p.add_argument("--dtypes", default="float32,bfloat16")
  p.add_argument("--steps", type=int, default=3, help="calls profiled per program")
  p.add_argument("--one", nargs=3, metavar=("CONFIG", "DTYPE", "JSON"), help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.one:  # One config and dtype, in a process of its own (see below).
    name, dtype, path = args.one
    Path(path).write_text(json.dumps(profile_config(name, dtype, args.steps)))
    return {}
  load_start = reports.load_average()
  runs = {}
  with tempfile.TemporaryDirectory() as tmp:
    for name in args.configs.split(","):
      for dtype in args.dtypes.split(","):
        # Each in a fresh process: nothing compiled or allocated for one is there for the next
        # (after two others in one process, the paper preset's step once failed to donate its
        # state: "Attempt to donate the same buffer twice").
        print(f"profiling {name} {dtype}", flush=True)
        path = Path(tmp) / "one.json"
        command = [sys.executable, "-m", "experiments.profile_step", "--out", tmp]
        command += ["--steps", str(args.steps), "--one", name, dtype, str(path)]
        subprocess.run(command, cwd=REPO_ROOT, check=True)
        runs[f"{name} {dtype}"] = json.loads(path.read_text())
  result = {"runs": runs, "versions": reports.versions()}
  result |= reports.provenance("profile_step", argv, load_start)
  reports.publish(Path(args.out) / "profile.json", result, page(result))
  return result


if __name__ == "__main__":
  main()

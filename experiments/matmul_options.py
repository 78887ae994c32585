"""The CPU's matmul rate under XLA's own options, beside PyTorch's on the same shapes.

    python -m experiments.matmul_options --out experiments/results/matmul_options \
        [--peer-python /tmp/peer-venv/bin/python] [--repeats 7]

The shapes: a 2,048-square matmul and the `bench` preset's output layer (64 sentences of 30
words, maxout 1,024, 8,000 words) in the three forms its training step multiplies: the forward
[1,920 x 1,024] x [1,024 x 8,000], the input gradient g W^T (W stored [1,024 x 8,000]) and the
weight gradient h^T g (h stored [1,920 x 1,024]), each in float32 and in bfloat16 with float32
accumulation (how the model multiplies, `seq2seq.model.layers.matmul`). Each XLA variant runs in a
process of its own with its `XLA_FLAGS` (`VARIANTS`: the default, oneDNN for matmuls, XNNPACK
off, YNNPACK fusions off); the PyTorch row (if `--peer-python` exists) times `torch.matmul` of
the same shapes with 2 threads (bfloat16 under `torch.autocast`, as the peer trains). GFLOP/s
are the median of `--repeats` timed calls after two warm-ups.

Writes OUT/matmul_options.json (every rate, the flags, the CPU and its load) and
OUT/matmul_options.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# No project import at the top but the study's page module, which imports only the standard library:
# the PyTorch child runs this module in the peer's environment.
from experiments.lib.pages.matmul_options import DTYPES, SHAPES, page

REPO_ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
  "default": "",
  "oneDNN matmuls": "--xla_cpu_use_onednn=true",
  "XNNPACK off": "--xla_cpu_use_xnnpack=false",
  "YNNPACK fusions off": "--xla_cpu_experimental_ynn_fusion_type=",
}


def xla_rates(repeats: int) -> dict[str, dict[str, float]]:
  """{shape: {dtype: GFLOP/s}} of jitted matmuls in this process (its XLA_FLAGS)."""
  import functools

  import jax

  out: dict[str, dict[str, float]] = {}
  for name, (m, k, n, form) in SHAPES.items():
    out[name] = {}
    for dtype in DTYPES:
      keys = jax.random.split(jax.random.key(0))
      x = jax.random.normal(keys[0], (k, m) if form == "TN" else (m, k)).astype(dtype)
      y = jax.random.normal(keys[1], (n, k) if form == "NT" else (k, n)).astype(dtype)
      f = jax.jit(functools.partial(_product, form=form)).lower(x, y).compile()
      out[name][dtype] = _rate(lambda f=f, x=x, y=y: f(x, y).block_until_ready(), m, k, n, repeats)
  return out


def _product(a, b, form: str):
  """a x b in `form` (`SHAPES`), accumulated and returned in float32."""
  import jax.numpy as jnp

  a, b = (a.T, b) if form == "TN" else (a, b.T) if form == "NT" else (a, b)
  return jnp.matmul(a, b, preferred_element_type=jnp.float32)


def torch_rates(repeats: int) -> dict[str, dict[str, float]]:
  """The same with `torch.matmul`, 2 threads; bfloat16 under CPU autocast."""
  import torch

  torch.set_num_threads(2)
  out: dict[str, dict[str, float]] = {}
  for name, (m, k, n, form) in SHAPES.items():
    out[name] = {}
    x = torch.randn(k, m).t() if form == "TN" else torch.randn(m, k)
    y = torch.randn(n, k).t() if form == "NT" else torch.randn(k, n)

    def plain(x=x, y=y):
      return torch.matmul(x, y)

    def mixed(x=x, y=y):
      with torch.autocast("cpu", torch.bfloat16):
        return torch.matmul(x, y)

    with torch.no_grad():
      out[name]["float32"] = _rate(plain, m, k, n, repeats)
      out[name]["bfloat16"] = _rate(mixed, m, k, n, repeats)
  return out


def _rate(call, m: int, k: int, n: int, repeats: int) -> float:
  call()
  call()
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    call()
    seconds.append(time.perf_counter() - start)
  return 2.0 * m * k * n / statistics.median(seconds) / 1e9


def _child(python: str, what: str, repeats: int, flags: str = "") -> dict[str, Any]:
  """Runs this module's `--child WHAT` in a fresh process; its JSON."""
  env = {**os.environ, "XLA_FLAGS": flags} if what == "xla" else dict(os.environ)
  command = [python, "-m", "experiments.matmul_options", "--child", what]
  command += ["--repeats", str(repeats), "--out", "-"]
  done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
  if done.returncode:
    return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
  return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--out", required=True)
  p.add_argument("--repeats", type=int, default=7)
  p.add_argument("--peer-python", default="/tmp/peer-venv/bin/python")
  p.add_argument("--variants", default=",".join(VARIANTS), help="of " + ", ".join(VARIANTS))
  p.add_argument("--child", choices=["xla", "torch"], help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.child:  # One measurement in a process of its own: its JSON on the last line.
    rates = xla_rates(args.repeats) if args.child == "xla" else torch_rates(args.repeats)
    print(json.dumps(rates))
    return rates
  from experiments.lib import reports

  load_start = reports.load_average()
  rows: dict[str, dict[str, Any]] = {}
  chosen = [v for v in args.variants.split(",") if v]
  if unknown := [v for v in chosen if v not in VARIANTS]:
    raise SystemExit(f"error: --variants: unknown {', '.join(unknown)}")
  for name, flags in ((v, VARIANTS[v]) for v in chosen):
    print(f"XLA {name}", flush=True)
    found = _child(sys.executable, "xla", args.repeats, flags)
    rows[f"XLA, {name}"] = {"flags": flags, **({"rates": found} if "error" not in found else found)}
  if Path(args.peer_python).exists():
    print("PyTorch", flush=True)
    found = _child(args.peer_python, "torch", args.repeats)
    rows["PyTorch (the peer's)"] = {
      "flags": "",
      **({"rates": found} if "error" not in found else found),
    }
  record = {"rows": rows, "repeats": args.repeats}
  record |= reports.provenance("matmul_options", argv, load_start)
  reports.publish(Path(args.out) / "matmul_options.json", record, page(record))
  return record


if __name__ == "__main__":
  main()

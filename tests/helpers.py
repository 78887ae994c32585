"""What several test modules share: running main.py (and the experiment scripts) as
subprocesses with cheap compilation, and reading a run's metrics and checkpoints."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


# main.py runs check files, shapes and equalities between runs, not speed: compile cheaply.
FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


def subprocess_env(extra_xla_flags: str = "") -> dict[str, str]:
  """The environment of a main.py run: this one, with FAST_COMPILE (and `extra_xla_flags`)."""
  return {**os.environ, "XLA_FLAGS": f"{FAST_COMPILE} {extra_xla_flags}".strip()}


def main_command(workdir, *overrides) -> list[str]:
  """main.py on configs/tiny.py in `workdir` with `overrides`."""
  return [sys.executable, "main.py", "--config=configs/tiny.py", f"--workdir={workdir}", *overrides]


def run_main(workdir, *overrides, xla_flags="", check=True):
  cmd = main_command(workdir, *overrides)
  proc = subprocess.run(
    cmd, cwd=ROOT, capture_output=True, text=True, env=subprocess_env(xla_flags), timeout=600
  )
  if check and proc.returncode != 0:
    raise AssertionError(f"exit {proc.returncode}\n{proc.stderr[-3000:]}")
  return proc


def metrics(workdir):
  return [json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]


def final_params(workdir):
  """The parameters of the latest checkpoint as a flat dict of arrays."""
  import orbax.checkpoint as ocp

  ckpt_dir = Path(workdir) / "checkpoints"
  step = max(int(p.name) for p in ckpt_dir.iterdir() if p.name.isdigit())
  tree = ocp.StandardCheckpointer().restore(ckpt_dir / str(step) / "state")
  flat = {}

  def walk(prefix, node):
    if isinstance(node, dict):
      for k, v in node.items():
        walk(f"{prefix}/{k}", v)
    else:
      flat[prefix] = np.asarray(node)

  walk("", tree["params"])
  return step, flat


def run_module(module: str, *args: str, fast_compile: bool = True, timeout: float = 600):
  """`python -m MODULE ARGS` from the repository root on the CPU (with FAST_COMPILE unless
  `fast_compile` is False); fails the calling test on a non-zero exit."""
  env = {**(subprocess_env() if fast_compile else os.environ), "JAX_PLATFORMS": "cpu"}
  cmd = [sys.executable, "-m", module, *args]
  proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc

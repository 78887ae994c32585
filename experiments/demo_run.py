"""`make demo`'s run kept as data: configs/demo.py trained and evaluated in a fresh workdir with
`make demo`'s command, what it printed and scored written to a study folder.

    python -m experiments.demo_run [--out experiments/results/demo]

Writes OUT/demo.json (the command, the best checkpoint's scores on both splits, the validation
curve, the training wall time, and the CPU with its instruction sets, load and date),
OUT/config.json, OUT/metrics.jsonl and OUT/console.txt (the run's console, its temporary paths
as they were), then OUT/definition.json. Rerun it when a change of the code or of the CPU moves
the demo's figures: the demo is seeded, so on one CPU and one commit it prints the same scores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib import records, reports
from experiments.lib.configs import REPO_ROOT

CONFIG = "configs/demo.py"  # As the Makefile's `demo` target trains it.
SCORES = ("step", "num_sentences", "bleu", "chrf", "bleu_no_unk", "aer", "beam_size")


def run(workdir: Path) -> tuple[str, float]:
  """The demo trained and evaluated in `workdir`: its console output and wall seconds."""
  command = [sys.executable, "main.py", f"--config={CONFIG}", f"--workdir={workdir}"]
  start = time.perf_counter()
  done = subprocess.run(
    command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
  )
  seconds = time.perf_counter() - start
  if done.returncode != 0:
    raise SystemExit(f"error: the demo failed ({done.returncode}):\n{done.stdout[-2000:]}")
  return done.stdout, seconds


def record(workdir: Path, seconds: float, argv: Sequence[str]) -> dict[str, Any]:
  metrics = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  results = {}
  for split in ("valid", "test"):
    full = json.loads((workdir / "eval" / split / "results.json").read_text())
    results[split] = {k: full.get(k) for k in SCORES}
  env = reports.environment()
  return {
    "command": " ".join(["python -m experiments.demo_run", *argv]),
    "trains": f"python main.py --config={CONFIG} --workdir=WORKDIR",
    "results": results,
    "valid_curve": [
      {"step": m["step"], "bleu": m.get("bleu"), "loss": m["loss"]}
      for m in metrics
      if m["split"] == "valid"
    ],
    "wall_s": seconds,
    **{k: env[k] for k in (*records.ENVIRONMENT, "load_average", "date") if k in env},
  }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--out", type=Path, default=REPO_ROOT / "experiments/results/demo")
  args = p.parse_args(argv)
  with tempfile.TemporaryDirectory(prefix="demo_run_") as tmp:
    workdir = Path(tmp) / "demo"
    console, seconds = run(workdir)
    result = record(workdir, seconds, sys.argv[1:] if argv is None else list(argv))
    args.out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "metrics.jsonl"):
      shutil.copyfile(workdir / name, args.out / name)
  (args.out / "console.txt").write_text(console)
  (args.out / "demo.json").write_text(json.dumps(result, indent=1) + "\n")
  records.write_definition(args.out, script="experiments.demo_run")
  return result


if __name__ == "__main__":
  main()

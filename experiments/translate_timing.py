"""How fast `main.py --mode=translate` starts: cold, warm, and warm on another input.

    python -m experiments.translate_timing --run RUN --input FILE --other FILE \
        --out experiments/results/translate_timing [--config configs/multi30k.py]

Three fresh processes translate with the run's decoding settings, one after another, each
with JAX's persistent compilation cache in one new folder (`--compilation_cache`): `cold` (the
folder empty: everything compiles), `warm` (the same input again: every program loads from the
folder) and `warm, other input` (`--other`: other sentences, other lengths; what it adds to the
folder is what the shape buckets did not cover). Each row gives the process's wall seconds
(start-up, loading the run, compiling or loading programs, decoding, writing) and the
compiled programs it added to the cache. Beside them, the decoding alone: the input's
sentences per second decoded warm in one process (`experiments.lib.decoding.decoding_speed`,
the median of three passes). The outputs of the two passes over `--input` are compared byte for
byte.

Writes OUT/translate_timing.json (with the CPU, its instruction sets and the load) and
OUT/translate_timing.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib import reports
from experiments.lib.configs import REPO_ROOT
from experiments.lib.pages.translate_timing import page


def translate(config: str, run: Path, source: Path, output: Path, cache: Path) -> float:
  """Wall seconds of one `main.py --mode=translate` process."""
  command = [sys.executable, "main.py", f"--config={config}", f"--workdir={run}"]
  command += ["--mode=translate", f"--input={source}", f"--output={output}"]
  command += [f"--compilation_cache={cache}", f"--config.data.cache_dir={_cache_dir(run)}"]
  start = time.perf_counter()
  subprocess.run(command, cwd=REPO_ROOT, check=True, capture_output=True)
  return time.perf_counter() - start


def _cache_dir(run: Path) -> str:
  return json.loads((run / "config.json").read_text())["data"]["cache_dir"]


def decoding_only(run: Path, source: Path) -> float:
  """Sentences per second of the run's own decoding of `source`, warm, in this process."""
  from experiments.lib.decoding import decoding_speed

  lines = source.read_text(encoding="utf-8").splitlines()
  return decoding_speed(run, {"own": {}}, lines=lines)["own"]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--run", required=True, help="a trained run")
  p.add_argument("--input", required=True, help="the sentences timed cold and warm")
  p.add_argument("--other", required=True, help="other sentences, translated warm")
  p.add_argument("--config", default="configs/multi30k.py", help="the run's config file")
  p.add_argument("--out", required=True)
  args = p.parse_args(argv)
  run, source, other = Path(args.run).resolve(), Path(args.input), Path(args.other)
  load_start = reports.load_average()
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    cache, outputs = Path(tmp) / "jax_cache", []
    entries = lambda: len(list(cache.glob("*"))) if cache.exists() else 0
    for name, lines in (("cold", source), ("warm", source), ("warm, other input", other)):
      before = entries()
      output = Path(tmp) / f"out{len(rows)}.txt"
      seconds = translate(args.config, run, lines, output, cache)
      sentences = len(lines.read_text(encoding="utf-8").splitlines())
      rows.append(
        {
          "name": name,
          "sentences": sentences,
          "wall_s": seconds,
          "programs_added": entries() - before,
        }
      )
      outputs.append(output.read_bytes())
    same_output = outputs[0] == outputs[1]
  record = {
    "run": str(run),
    "input": str(source),
    "other": str(other),
    "rows": rows,
    "same_output_cold_and_warm": same_output,
    "decoding_only_sentences_per_s": decoding_only(run, source),
  }
  record |= reports.provenance("translate_timing", argv, load_start)
  reports.publish(Path(args.out) / "translate_timing.json", record, page(record))
  return record


if __name__ == "__main__":
  main()

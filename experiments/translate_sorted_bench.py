"""Translation longest first against file order, and translation's memory as the input grows.

    python -m experiments.translate_sorted_bench --out experiments/results/translate_sorted_bench \
        [--workdir RUN --config configs/multi30k.py] [--train-steps 300] \
        [--input ../shared/data/newstest/newstest2012.en] [--beam 5] [--rounds 1] \
        [--short ../shared/data/multi30k/test_2016_flickr.en] [--sizes 10000,100000,1000000]

1. The model: `--workdir`, a trained English->French run (`--config`: its config file); without
   one, configs/multi30k.py trained for `--train-steps` updates on ../shared/data/multi30k into
   a scratch folder (`--scratch`, else a temporary one), no validation BLEU nor final evaluation.
2. Speed: the `--input` sentences translated with beam `--beam` in this process
   (`translate.translate_lines`, the run's other decoding settings) in file order and longest
   first (`decode.order`), and longest first under a token budget where `--max-tokens` gives one.
   A first pass of each compiles and gives its translations; `--rounds` timed passes then go
   round the orders in turn (a change of the machine's load falls on all of them) and the
   fastest is kept: sentences per second, and the ratio to file order.
3. Equality: the sentences whose translation differs between file order and longest first,
   counted and listed. Each gets the output steps its batch allowed in either order
   (`translate.output_limits`, which follow the longest source in the batch) and whether the
   limit explains the difference: the limits differ and the shorter one cut its translation
   (left it unfinished) or the other translation needed more steps than it allows (up to the
   shorter limit both searches are the same). Otherwise the batch's other rows changed the
   rounding.
4. Memory: for each of `--sizes`, a file of that many lines, the `--short` file's sentences of
   at most `--short-words` words repeated, translated greedily by a fresh `main.py
   --mode=translate` process (which reads, decodes and writes `translate.CHUNK_LINES` lines at a
   time); its peak resident memory (ru_maxrss of that process, from os.wait4), wall seconds and
   the lines it wrote.

Writes OUT/translate_sorted_bench.json (with the CPU, its vector instruction sets and the load
average) and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib import reports
from experiments.lib.configs import REPO_ROOT

ORDERS = ("file", "length")


def train(workdir: Path, steps: int) -> None:
  """configs/multi30k.py (English->French, ../shared/data/multi30k) trained for `steps`
  updates into `workdir` by main.py, as a user trains it; no BLEU is computed."""
  command = [sys.executable, "main.py", "--config=configs/multi30k.py", f"--workdir={workdir}"]
  command += [
    f"--config.train.num_steps={steps}",
    "--config.train.max_minutes=0",
    f"--config.train.eval_every={steps}",
    f"--config.train.checkpoint_every={steps}",
    "--config.train.valid_bleu=false",
    "--config.train.final_eval=false",
  ]
  print("# training:", " ".join(command), flush=True)
  subprocess.run(command, cwd=REPO_ROOT, check=True)


def read_lines(path: Path) -> list[str]:
  return path.read_text(encoding="utf-8").split("\n")[:-1]


def speed(
  t, lines: list[str], beam: int, rounds: int, max_tokens: int
) -> tuple[dict[str, Any], dict[str, list]]:
  """({variant: sentences per second and seconds of each timed pass}, {variant: the
  translations}) of `lines` by the `Translator` `t` at beam `beam` in each order (and under
  `max_tokens`, where > 0)."""
  from seq2seq import translate

  variants = {order: {"order": order} for order in ORDERS}
  if max_tokens:
    variants[f"length, max_tokens={max_tokens}"] = {"order": "length", "max_tokens": max_tokens}
  go = lambda how: translate.translate_lines(t, lines, progress=None, beam_size=beam, **how)[0]
  found = {}
  for name, how in variants.items():
    print(f"# compiling and translating: {name}", flush=True)
    found[name] = go(how)
  seconds: dict[str, list[float]] = {name: [] for name in variants}
  for _ in range(rounds):
    for name, how in variants.items():
      start = time.perf_counter()
      go(how)
      seconds[name].append(time.perf_counter() - start)
  rows = {
    name: {"sentences_per_s": len(lines) / min(s), "seconds": s} for name, s in seconds.items()
  }
  for row in rows.values():
    row["speedup_over_file_order"] = row["sentences_per_s"] / rows["file"]["sentences_per_s"]
  return rows, found


def differences(t, lines: list[str], beam: int, found: dict[str, list]) -> dict[str, Any]:
  """The sentences file order and longest first translate differently (`found`: each order's
  translations by the `Translator` `t`), each with its output limit in either order and whether
  that limit explains the difference (the module's docstring)."""
  from seq2seq import translate

  limits = {o: translate.output_limits(t, lines, beam_size=beam, order=o) for o in ORDERS}
  listed, same_score_gap = [], 0.0
  for i, line in enumerate(lines):
    hyps = {o: found[o][i][0] if found[o][i] else None for o in ORDERS}
    if hyps["file"] is None or hyps["length"] is None:
      continue
    if hyps["file"].ids == hyps["length"].ids:
      gap = abs(hyps["file"].score - hyps["length"].score)
      same_score_gap = max(same_score_gap, gap)
      continue
    shorter = min(ORDERS, key=lambda o: limits[o][i])
    cut, other = hyps[shorter], hyps[ORDERS[1 - ORDERS.index(shorter)]]
    at_limit = limits["file"][i] != limits["length"][i] and (
      not cut.finished or len(other.ids) + other.finished > limits[shorter][i]
    )
    listed.append(
      {
        "line": i + 1,
        "source_words": len(line.split()),
        "limit": {o: limits[o][i] for o in ORDERS},
        "at_length_limit": at_limit,
        "translation": {o: hyps[o].text for o in ORDERS},
        "score": {o: hyps[o].score for o in ORDERS},
      }
    )
  at_limit = sum(d["at_length_limit"] for d in listed)
  return {
    "count": len(listed),
    "at_length_limit": at_limit,
    "otherwise": len(listed) - at_limit,
    "largest_score_gap_among_the_same_translations": same_score_gap,
    "sentences": listed,
  }


def short_input(path: Path, source: Path, lines: int, words: int) -> None:
  """`lines` lines at `path`: the sentences of `source` of at most `words` words, repeated."""
  short = [s for s in read_lines(source) if s.strip() and len(s.split()) <= words]
  if not short:
    raise SystemExit(f"{source} holds no sentence of at most {words} words")
  with open(path, "w", encoding="utf-8") as f:
    for i in range(lines):
      f.write(short[i % len(short)] + "\n")


def memory(run: Path, config: str, path: Path, scratch: Path) -> dict[str, Any]:
  """Peak resident memory, wall seconds and lines written of a fresh `main.py --mode=translate`
  process translating `path` greedily."""
  from seq2seq.data import builders

  out = scratch / f"{path.stem}.out"
  command = [sys.executable, "main.py", f"--config={config}", f"--workdir={run}"]
  command += ["--mode=translate", f"--input={path}", f"--output={out}"]
  command += ["--config.decode.beam_size=1", f"--config.data.cache_dir={_cache_dir(run)}"]
  start = time.perf_counter()
  with open(scratch / f"{path.stem}.log", "w") as log:
    proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)  # This process's own peak, not its siblings'.
  proc.returncode = os.waitstatus_to_exitcode(status)
  if proc.returncode:
    raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}): see {log.name}")
  wall = time.perf_counter() - start
  lines = builders.count_lines(path)
  written = builders.count_lines(out)
  out.unlink()
  return {
    "lines": lines,
    "peak_rss_mib": usage.ru_maxrss / 1024,  # Linux reports KiB.
    "wall_s": wall,
    "sentences_per_s": lines / wall,
    "lines_written": written,
  }


def _cache_dir(run: Path) -> str:
  return json.loads((run / "config.json").read_text())["data"]["cache_dir"]


def summary(record: dict[str, Any]) -> str:
  fmt = reports.fmt
  rows = [
    [name, fmt(r["sentences_per_s"], 2), fmt(r["speedup_over_file_order"], 2)]
    for name, r in record["speed"].items()
  ]
  diff = record["differences"]
  memory_rows = [
    [str(m["lines"]), fmt(m["peak_rss_mib"], 0), fmt(m["wall_s"], 0), str(m["lines_written"])]
    for m in record["memory"]
  ]
  return "\n".join(
    [
      f"beam {record['beam_size']} over {record['sentences']} sentences of {record['input']}:",
      *reports.table(["order", "sentences/s", "x file order"], rows),
      "",
      f"{diff['count']} sentences translated differently ({diff['at_length_limit']} at an output "
      f"length limit, {diff['otherwise']} otherwise)",
      "",
      "greedy, fresh process per input:",
      *reports.table(["lines", "peak RSS MiB", "wall s", "lines written"], memory_rows),
    ]
  )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--out", required=True, help="folder of translate_sorted_bench.json")
  p.add_argument("--workdir", help="a trained English->French run (default: train one)")
  p.add_argument("--config", default="configs/multi30k.py", help="the run's config file")
  p.add_argument("--train-steps", type=int, default=300, help="updates of the run trained here")
  p.add_argument("--scratch", help="folder for the run trained here and the inputs made")
  p.add_argument("--input", default="../shared/data/newstest/newstest2012.en")
  p.add_argument("--beam", type=int, default=5, help="beam width of the timed translations")
  p.add_argument("--rounds", type=int, default=1, help="timed passes of each order")
  p.add_argument("--max-tokens", type=int, default=0, help="also time longest first under it")
  p.add_argument("--short", default="../shared/data/multi30k/test_2016_flickr.en")
  p.add_argument("--short-words", type=int, default=10, help="longest sentence of --short kept")
  p.add_argument("--sizes", default="10000,100000,1000000", help="lines of the memory inputs")
  args = p.parse_args(argv)
  load_start = reports.load_average()
  with tempfile.TemporaryDirectory() as tmp:
    scratch = Path(args.scratch or tmp).resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    if args.workdir:
      run, config = Path(args.workdir).resolve(), args.config
    else:
      run, config = scratch / "run", "configs/multi30k.py"
      train(run, args.train_steps)
    import seq2seq

    t = seq2seq.load(run)
    lines = read_lines(Path(args.input))
    rows, found = speed(t, lines, args.beam, args.rounds, args.max_tokens)
    record: dict[str, Any] = {
      "run": str(run) if args.workdir or args.scratch else "trained in a temporary folder",
      "trained_here_steps": None if args.workdir else args.train_steps,
      "input": args.input,
      "sentences": len(lines),
      "beam_size": args.beam,
      "speed": rows,
      "differences": differences(t, lines, args.beam, found),
      "memory": [],
    }
    for size in (int(s) for s in args.sizes.split(",") if s):
      path = scratch / f"short_{size}.txt"
      short_input(path, Path(args.short), size, args.short_words)
      print(f"# translating {size} lines greedily in a fresh process", flush=True)
      record["memory"].append(memory(run, config, path, scratch))
      path.unlink()
  record |= reports.provenance("translate_sorted_bench", argv, load_start)
  folders = {"RUN": args.workdir, "SCRATCH": args.scratch}  # Named by their flags.
  for key in ("command", "run"):
    record[key] = reports.named_folders(record[key], folders)
  out = Path(args.out) / "translate_sorted_bench.json"
  out.parent.mkdir(parents=True, exist_ok=True)
  reports.write_json(out, record)
  print(summary(record))
  print(f"wrote {out}")
  return record


if __name__ == "__main__":
  main()

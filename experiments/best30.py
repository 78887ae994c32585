"""Tries toward the best Multi30k system in 30 CPU minutes, each measured on `val` only.

    nice python -m experiments.best30 [--only NAME ...] [--minutes 30] \
        [--out experiments/results/multi30k_best_tries] [--workdir runs/best30]

Every try is `configs/multi30k.py` (English->French) with the overrides of `TRIES`, trained by
`main.py` in a fresh process for `--minutes` of wall clock (compiling and validation included;
the config's own 30-minute budget by default) with greedy validation BLEU every 300 updates and
no test decoding. Tries already recorded in OUT/tries.json are skipped, so the table grows over
sessions; each row keeps the try's setting, its best validation BLEU and the minute and update it
came at, its updates, median training tokens/s, the load average around it and the CPU. The test
set is decoded once, by the final configuration, never by a try.

    nice python -m experiments.best30 --final \
        [--record experiments/results/multi30k_best/final.json]

trains `configs/multi30k_best.py` (the levers the tries chose) with one `main.py` command that
trains for the config's minutes and then evaluates its best checkpoint on val and
test_2016_flickr, and records the test figures (BLEU and chrF, sacrebleu 13a, as written and
lowercased), the command's whole wall clock, the load average and the CPU in the record.

    nice python -m experiments.best30 --without-average

then evaluates the final run's best checkpoint once more with its training parameters instead of
their moving average (`python -m seq2seq.average --best --last 1 --raw`, then `main.py
--mode=eval`), outside the 30 minutes, and adds those figures to the record under
"without_moving_average": what the average was worth on the same checkpoint. The average was
chosen on validation before; this changes nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib import reports
from experiments.lib.configs import run_command
from experiments.lib.runs import Run, train_in_process, valid_rows
from seq2seq import average
from seq2seq.common import files
from seq2seq.training import metric_writer

CONFIG = "configs/multi30k.py"
FINAL_CONFIG = "configs/multi30k_best.py"
# The system to pass: LIUM-CVC's constrained text-only recurrent system at WMT17
# (conditional GRU, joint BPE, layer normalisation, hours on a GPU), tokenised lowercased BLEU.
PUBLISHED = {"system": "LIUM-CVC, WMT17 Multi30k en-fr, text-only", "test_2016_bleu": 59.0}
FIGURES = ("bleu", "chrf", "bleu_lowercase", "chrf_lowercase", "bleu_no_unk", "step")

# The levers chosen so far (each won its try on validation); every later try adds one lever to
# them, so its row compares with the "bfloat16" row.
CHOSEN: dict[str, Any] = {
  "model.dtype": "bfloat16",
  "train.ema_decay": 0.999,
  "model.decoder": "cgru",
  "model.layer_norm": True,
  "data.tgt_vocab_size": 0,
  "train.softmax": "sampled(size=4096)",
}

# name -> overrides of configs/multi30k.py; "base" is the config as it is (the 30-minute run
# that reached 56.2 test BLEU, experiments/results/multi30k_realtext/multi30k.md).
TRIES: dict[str, dict[str, Any]] = {
  "base": {},
  # Mixed precision: bfloat16 matmuls accumulated in float32 (`seq2seq.model.layers.matmul`), about
  # 1.5x the updates per minute on a CPU with AVX512-BF16
  # (experiments/results/benchmark/benchmark.md).
  "bfloat16": {"model.dtype": "bfloat16"},
  "cgru": {**CHOSEN, "model.decoder": "cgru"},
  "layer-norm": {**CHOSEN, "model.layer_norm": True},
  "cgru+layer-norm": {**CHOSEN, "model.decoder": "cgru", "model.layer_norm": True},
  "tied-embeddings": {**CHOSEN, "model.tie_embeddings": True},
  "ema-0.999": {**CHOSEN, "train.ema_decay": 0.999},
  "warmup-rsqrt": {
    **CHOSEN,
    "train.warmup_steps": 300,
    "train.decay": "rsqrt",
    "train.learning_rate": 4e-3,
  },
  "batch-96": {**CHOSEN, "data.batch_size": 96},
  # The learning rate falls linearly to 0 as the 30 minutes run out (on the clock).
  "anneal-linear": {**CHOSEN, "train.anneal": "linear"},
  "bpe-8k": {**CHOSEN, "data.tokenizer": "sentencepiece", "data.sp_model_type": "bpe"},
  # Jean et al.: the whole target vocabulary with the sampled softmax in training, against the
  # same vocabulary with the full softmax and against the 8k shortlist of the chosen levers.
  # Size 0 keeps every word: Multi30k's French training side has
  # 11,567 distinct words after Moses splitting, 11,571 ids with the 4 specials (the first
  # all-words try named that size itself). A larger id space would keep ids no word uses, which
  # the sampled softmax would draw as negatives and decoding would score.
  "all-words-sampled": {
    **CHOSEN,
    "data.tgt_vocab_size": 0,
    "train.softmax": "sampled(size=4096)",
  },
  "all-words-full": {**CHOSEN, "data.tgt_vocab_size": 0, "train.softmax": "full"},
}


def record_try(name: str, workdir: Path, run: dict[str, Any], load: list[float] | None) -> dict:
  """One row of the table from a finished try's workdir."""
  rows = valid_rows(workdir)
  best = max(rows, key=lambda r: r["bleu"]) if rows else None
  train = [r for r in metric_writer.read_metrics(workdir) if r["split"] == "train"]
  speeds = [r["tokens_per_s"] for r in train[1:]] or [r["tokens_per_s"] for r in train]
  return {
    "name": name,
    "overrides": TRIES[name],
    "command": run["command"],
    "best_valid_bleu": best["bleu"] if best else None,
    "best_at_minute": best["minutes"] if best else None,
    "best_at_update": best["step"] if best else None,
    # The share of <unk> in the best validation's greedy output (before UNK replacement).
    "best_unk_rate": best.get("unk_rate") if best else None,
    "updates": train[-1]["step"] if train else 0,
    "train_minutes": train[-1]["elapsed_s"] / 60 if train else 0.0,
    "median_tokens_per_s": statistics.median(speeds) if speeds else None,
    "curve": rows,
    "load_average": {"start": load, "end": reports.load_average()},
    "cpu": reports.cpu_info(),
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
  }


def markdown(table: dict[str, dict[str, Any]]) -> str:
  fmt = reports.fmt
  lines = [
    "# Tries toward the best Multi30k en-fr system in 30 CPU minutes (validation only)",
    "",
    "Made by `python -m experiments.best30`; greedy validation BLEU (sacrebleu 13a) every 300 "
    "updates. A try's minutes count its whole training wall clock (compiling and validation "
    "included); <unk> in output: the share of the best validation's greedy output words that are "
    "<unk> (logged since 2026-11-25 17:00 UTC); the load average is the 1-minute figure at its "
    "start and end.",
    "",
    "| try | overrides | best valid BLEU | at minute | at update | updates | tokens/s "
    "| <unk> in output | load |",
    "|---|---|---:|---:|---:|---:|---:|---:|---|",
  ]
  for name, row in table.items():
    overrides = ", ".join(f"`{k}={v}`" for k, v in row["overrides"].items()) or "(as is)"
    load = row["load_average"]
    unk = row.get("best_unk_rate")
    lines.append(
      f"| {name} | {overrides} | {fmt(row['best_valid_bleu'])} | {fmt(row['best_at_minute'], 1)} "
      f"| {row['best_at_update']} | {row['updates']} | {fmt(row['median_tokens_per_s'], 0)} | "
      f"{'-' if unk is None else f'{100 * unk:.2f}%'} | "
      f"{(load['start'] or ['?'])[0]} to {(load['end'] or ['?'])[0]} |"
    )
  return "\n".join(lines) + "\n"


def eval_figures(workdir: Path) -> dict[str, Any]:
  """The FIGURES of a run's final evaluation on val and test (WORKDIR/eval/SPLIT/results.json),
  as test_KEY and valid_KEY, with the test BLEU's sacrebleu signature."""
  results = {
    split: json.loads((workdir / "eval" / split / "results.json").read_text())
    for split in ("valid", "test")
  }
  return {
    **{f"test_{k}": results["test"].get(k) for k in FIGURES},
    **{f"valid_{k}": results["valid"].get(k) for k in FIGURES},
    "sacrebleu_signature": results["test"].get("bleu_signature"),
  }


def final(args) -> dict[str, Any]:
  """Trains and evaluates `FINAL_CONFIG` with one main.py command; the record it writes."""
  workdir = (args.workdir / "final").resolve()
  overrides = {"data.cache_dir": str((args.workdir / "data").resolve()), **dict(args.sets)}
  load = reports.load_average()
  run = train_in_process(Run("final", FINAL_CONFIG, overrides, workdir))
  train = [r for r in metric_writer.read_metrics(workdir) if r["split"] == "train"]
  record = {
    "command": run["command"],
    "minutes": run["process_wall_s"] / 60,  # Data loading, training and evaluation: all of it.
    "updates": train[-1]["step"] if train else 0,
    **eval_figures(workdir),
    "published": PUBLISHED,
    "load_average": {"start": load, "end": reports.load_average()},
    "cpu": reports.cpu_info(),
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
  }
  args.record.parent.mkdir(parents=True, exist_ok=True)
  files.write_atomic(args.record, json.dumps(record, indent=2) + "\n")
  print(json.dumps(record, indent=2))
  return record


def without_average(args) -> dict[str, Any]:
  """Adds to the final's record its best checkpoint's figures without the moving average."""
  workdir = (args.workdir / "final").resolve()
  raw = workdir.with_name("final-raw")
  if not (raw / "average.json").exists():
    shutil.rmtree(raw, ignore_errors=True)
    average.average_checkpoints(workdir, raw, last=1, raw=True, subdir="best")
  overrides = {
    "data.cache_dir": str((args.workdir / "data").resolve()),
    **dict(args.sets),
    "train.ema_decay": 0.0,
  }
  command = run_command(Run("final-raw", FINAL_CONFIG, overrides, raw).command() + " --mode=eval")
  record = json.loads(args.record.read_text())
  record["without_moving_average"] = {
    "command": f"python -m seq2seq.average --workdir={workdir} --best --last=1 --raw "
    f"--out={raw} && {command}",
    **{k: v for k, v in eval_figures(raw).items() if k != "sacrebleu_signature"},
    "load_average": reports.load_average(),
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
  }
  files.write_atomic(args.record, json.dumps(record, indent=2) + "\n")
  print(json.dumps(record["without_moving_average"], indent=2))
  return record


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--only", nargs="+", choices=list(TRIES), help="these tries (default: all)")
  p.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget of each try")
  p.add_argument("--out", type=Path, default=Path("experiments/results/multi30k_best_tries"))
  p.add_argument("--workdir", type=Path, default=Path("runs/best30"))
  p.add_argument("--set", action="append", default=[], help="KEY=VALUE for every try (tests)")
  p.add_argument("--final", action="store_true", help=f"train and test {FINAL_CONFIG} instead")
  p.add_argument(
    "--record", type=Path, default=Path("experiments/results/multi30k_best/final.json")
  )
  p.add_argument(
    "--without-average",
    action="store_true",
    help="evaluate the final's best checkpoint without its moving average, into the record",
  )
  args = p.parse_args(argv)
  args.sets = [s.split("=", 1) for s in args.set]
  if args.without_average:
    return without_average(args)
  if args.final:
    return final(args)
  args.out.mkdir(parents=True, exist_ok=True)
  path = args.out / "tries.json"
  table = json.loads(path.read_text()) if path.exists() else {}
  extra = dict(args.sets)
  for name in args.only or list(TRIES):
    if name in table:
      print(f"{name}: recorded already, skipped")
      continue
    workdir = (args.workdir / name).resolve()
    overrides = {
      "data.cache_dir": str((args.workdir / "data").resolve()),
      "train.final_eval": False,
      "train.eval_every": 300,
      "train.max_minutes": args.minutes,
      "train.num_steps": 1_000_000,
      **TRIES[name],
      **extra,
    }
    load = reports.load_average()
    run = train_in_process(Run(name, CONFIG, overrides, workdir))
    table[name] = record_try(name, workdir, run, load)
    files.write_atomic(path, json.dumps(table, indent=2) + "\n")  # After every try: resumable.
    (args.out / "tries.md").write_text(markdown(table))
  print(markdown(table))
  return table


if __name__ == "__main__":
  main()

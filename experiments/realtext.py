"""Multi30k under a wall-clock budget: explore on validation, train the chosen config, test once.

    python -m experiments.realtext --workdir runs/realtext
        [--out experiments/results/multi30k_realtext] [--stage explore|final|report|all]
        [--explore-minutes 10] [--only NAME ...] [--pair en-fr] [--minutes 30] [--preset full|smoke]

Stages (each reuses what earlier invocations finished, so the script can be run piecewise):

* `explore`: trains every setting of `EXPLORE` (overrides of `configs/multi30k.py`) for
  `--explore-minutes` of wall clock each, in its own `main.py` process (cold start: data
  loading and XLA compilation are paid by every run, as a user pays them), validation greedy
  BLEU every `train.eval_every` steps. Recorded: each setting's validation BLEU against minutes.
* `final`: trains `configs/multi30k.py` as committed (the settings chosen from the
  exploration) for `--minutes` (default: the config's `train.max_minutes`), then, on the
  checkpoint with the best validation BLEU, decodes the validation split with every setting of
  `DECODE_GRID` (beam size, length normalisation, with and without UNK replacement), keeps the
  best, and decodes the test split once with it.
* `report`: writes OUT/multi30k.md (exploration table, decoding table, final result), OUT/
  multi30k.json (`test_bleu`, `test_chrf`, `train_minutes`, `sacrebleu_signature`,
  `tokens_per_s`, ...) and OUT/multi30k_bleu_vs_minutes.png.

The `smoke` preset trains the tiny sizes for a few seconds per run and decodes with
`SMOKE_DECODE_GRID` only (the test).
BLEU and chrF are sacrebleu's on detokenised output against the raw reference lines.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib import reports
from experiments.lib.configs import load_config
from experiments.lib.runs import Run, train_in_process, valid_rows
from seq2seq import evaluation, plots, restoring, settings
from seq2seq import sharding as rt
from seq2seq.data import metrics
from seq2seq.decoding import decode, inference
from seq2seq.training import metric_writer

CONFIG = "configs/multi30k.py"
STAGES = ("explore", "final", "report", "all")
PRESETS = ("full", "smoke")
REFERENCE = {  # The run to beat (../shared/peers/joeynmt), as measured there.
  "system": "JoeyNMT 2.3.0 GRU + Bahdanau attention, 35 min on this 2-core CPU",
  "test_bleu": 41.8,
  "test_chrf": 66.0,
  "tokens_per_s": 2100,
}

# Settings tried for the 30-minute budget: name -> overrides of EXPLORE_BASE, the starting point
# (configs/multi30k.py with batch 64 and Adam 1e-3; the exploration chose today's values).
EXPLORE_BASE = {"data.batch_size": 64, "train.learning_rate": 1e-3, "train.eval_every": 500}
EXPLORE: dict[str, dict[str, Any]] = {
  "base": {},
  "dropout-0.5": {"model.dropout": 0.5},
  "batch-128-lr-2e-3": {"data.batch_size": 128, "train.learning_rate": 2e-3},
  "small-256": {"model.dec_hidden": 256, "model.enc_hidden": 128, "model.emb_dim": 128},
  "big-384": {
    "model.emb_dim": 384,
    "model.enc_hidden": 384,
    "model.dec_hidden": 768,
    "model.attn_dim": 384,
    "model.maxout_dim": 384,
  },
  "sentencepiece-8k": {"data.tokenizer": "sentencepiece"},
}
# Decoding settings compared on the validation split: (beam size, length-normalisation alpha).
DECODE_GRID = ((1, 0.0), (5, 0.0), (5, 0.6), (5, 1.0), (10, 1.0))
SMOKE_DECODE_GRID = ((1, 0.0), (5, 1.0))  # The smoke preset's: greedy and one beam setting.
SMOKE = {  # Overrides making every run of the smoke preset a few seconds long.
  "model.emb_dim": 16,
  "model.enc_hidden": 16,
  "model.dec_hidden": 32,
  "model.attn_dim": 16,
  "model.maxout_dim": 16,
  "data.src_vocab_size": 204,
  "data.tgt_vocab_size": 204,
  "train.eval_every": 5,
  "train.log_every": 5,
  "train.checkpoint_every": 5,
}


def run_config(args, overrides: dict[str, Any], minutes: float, workdir: Path) -> Run:
  """The `main.py` run of `configs/multi30k.py:PAIR` in `workdir` with `overrides` and a budget."""
  shared = {"data.cache_dir": str((args.workdir / "data").resolve()), "train.final_eval": False}
  if args.data_dir:
    shared["data.local.dir"] = str(args.data_dir)
  smoke = SMOKE if args.preset == "smoke" else {}
  overrides = {**shared, **overrides, **smoke, "train.max_minutes": minutes}
  return Run(workdir.name, f"{CONFIG}:{args.pair}", overrides, workdir)


def throughput(workdir: Path, config: dict[str, Any]) -> dict[str, float]:
  """Training speed of a finished run from its metrics and its training data.

  `tokens_per_s`: target tokens (words + EOS) trained on per second of the whole training wall
  time (compiling, validation and checkpoints included): steps x batch size x the mean target
  length of the kept training pairs, over the elapsed seconds. `window_tokens_per_s`: the
  median of the logged training windows (steady state, validation excluded).
  """
  train_rows = [r for r in metric_writer.read_metrics(workdir) if r["split"] == "train"]
  last = train_rows[-1]
  stats = json.loads((workdir / "data_stats.json").read_text())
  pairs_seen = last["step"] * config["data"]["batch_size"]
  tokens = pairs_seen * stats["mean_train_tgt_tokens"]
  windows = [r["tokens_per_s"] for r in train_rows[1:]] or [last["tokens_per_s"]]
  epochs = pairs_seen / stats["train_pairs"]
  return {
    "steps": last["step"],
    "epochs": epochs,
    "train_minutes": last["elapsed_s"] / 60,
    "tokens_per_s": tokens / last["elapsed_s"],
    "window_tokens_per_s": float(np.median(windows)),
  }


def save_data_stats(data, workdir: Path) -> None:
  """Mean target length (+ EOS) and count of the training pairs, for `throughput`."""
  split = data.splits["train"]
  stats = {
    "train_pairs": len(split),
    "mean_train_tgt_tokens": float(np.mean(split.tgt_lengths + 1)),
  }
  (workdir / "data_stats.json").write_text(json.dumps(stats) + "\n")


def explore(args) -> None:
  names = args.only or list(EXPLORE)
  for name in names:
    overrides = {**EXPLORE_BASE, **EXPLORE[name]}
    train_in_process(
      run_config(args, overrides, args.explore_minutes, args.workdir / "explore" / name)
    )


def power_penalty(alpha: float) -> str:
  """The `decode.length_penalty` that divides by length**alpha (the grid's records keep alpha
  under its old name, `length_norm_alpha`)."""
  return f"power(alpha={alpha})"


def decode_on(state, data, config, split: str, beam: int, alpha: float) -> list:
  cfg = config.copy_and_resolve_references()
  cfg.decode.beam_size, cfg.decode.length_penalty = beam, power_penalty(alpha)
  return inference.translate_split(
    state, data.splits[split], decode.DecodeSettings.from_config(cfg)
  )


def final(args) -> None:
  """Trains the committed config, picks the decoding on validation, decodes test once."""
  workdir = args.workdir / "final"
  run = run_config(args, {}, args.minutes, workdir)
  train_in_process(run)
  if (workdir / "final.json").exists():
    return
  config = run.config()
  runtime, run_settings = rt.Runtime(), settings.validate(config)
  data = rt.load_data(run_settings, workdir)
  save_data_stats(data, workdir)
  state = restoring.restore_for_eval(
    run_settings, workdir, data.src_tokenizer.size, data.tgt_tokenizer.size, runtime
  )
  state = rt.host_local(state)
  raw = data.raw("valid")
  refs = [r[1] for r in raw]
  grid = []
  for beam, alpha in DECODE_GRID if args.preset == "full" else SMOKE_DECODE_GRID:
    start = time.perf_counter()
    translations = decode_on(state, data, config, "valid", beam, alpha)
    seconds = time.perf_counter() - start
    for replace_unk in (False, True):
      hyps = [
        inference.output_text(t, r[0], data.src_tokenizer, data.tgt_tokenizer, replace_unk)
        for t, r in zip(translations, raw, strict=True)
      ]
      grid.append(
        {
          "beam_size": beam,
          "length_norm_alpha": alpha,
          "replace_unk": replace_unk,
          "valid_bleu": metrics.bleu(hyps, refs)[0],
          "valid_chrf": metrics.chrf(hyps, refs),
          "decode_s": seconds,
        }
      )
      print(json.dumps(grid[-1]), flush=True)
  best = max(grid, key=lambda g: g["valid_bleu"])  # First best: the cheaper setting on ties.
  chosen = config.copy_and_resolve_references()
  chosen.decode.beam_size = best["beam_size"]
  chosen.decode.length_penalty = power_penalty(best["length_norm_alpha"])
  chosen.decode.replace_unk = best["replace_unk"]
  start = time.perf_counter()
  test = evaluation.evaluate_split(
    state, data, "test", settings.validate(chosen), workdir / "eval" / "test"
  )
  test["decode_s"] = time.perf_counter() - start
  test["step"] = int(state.step)
  out = {"decode_grid": grid, "chosen_decode": best, "test": test}
  (workdir / "final.json").write_text(json.dumps(out, indent=2) + "\n")


def report(args) -> dict[str, Any]:
  explored = {}
  for name in EXPLORE:
    workdir = args.workdir / "explore" / name
    if (workdir / "run.json").exists():
      rows = valid_rows(workdir)
      explored[name] = {
        "overrides": EXPLORE[name],
        "best_valid_bleu": max((r["bleu"] for r in rows), default=None),
        "curve": rows,
        "command": json.loads((workdir / "run.json").read_text())["command"],
      }
  workdir = args.workdir / "final"
  record = json.loads((workdir / "run.json").read_text())
  fin = json.loads((workdir / "final.json").read_text())
  test = fin["test"]
  speed = throughput(workdir, record["config"])
  result = {
    "test_bleu": test["bleu"],
    "test_chrf": test["chrf"],
    "test_bleu_no_unk": test["bleu_no_unk"],
    "sacrebleu_signature": test["bleu_signature"],
    "train_minutes": speed["train_minutes"],
    "process_minutes": record["process_wall_s"] / 60,
    "tokens_per_s": speed["tokens_per_s"],
    "window_tokens_per_s": speed["window_tokens_per_s"],
    "steps": speed["steps"],
    "epochs": speed["epochs"],
    "best_step": test["step"],
    "chosen_decode": fin["chosen_decode"],
    "decode_grid": fin["decode_grid"],
    "valid_curve": valid_rows(workdir),
    "exploration": explored,
    "explore_minutes": args.explore_minutes,
    "command": record["command"],
    "config": record["config"],
    "reference": REFERENCE,
    "environment": reports.environment(),
    "preset": args.preset,
  }
  args.out.mkdir(parents=True, exist_ok=True)
  (args.out / "multi30k.json").write_text(json.dumps(result, indent=2) + "\n")
  lines = {name: e["curve"] for name, e in explored.items()}
  lines["final (chosen)"] = result["valid_curve"]
  plots.bleu_vs_minutes(lines, args.out / "multi30k_bleu_vs_minutes.png")
  (args.out / "multi30k.md").write_text(markdown(result))
  return result


def fmt(value: float | None, digits: int = 2) -> str:
  return reports.fmt(value, digits, missing="–")


def markdown(r: dict[str, Any]) -> str:
  d = r["chosen_decode"]
  out = [
    f"# Multi30k {r['config']['data']['local']['src_lang']}→"
    f"{r['config']['data']['local']['tgt_lang']} in {fmt(r['train_minutes'], 1)} minutes",
    "",
    "Made by `python -m experiments.realtext` (preset "
    f"`{r['preset']}`) on {r['environment'].get('cpu_count', '?')} CPU cores. BLEU and chrF: "
    "sacrebleu on detokenised output against the raw reference lines.",
    "",
    "## Final result (test_2016_flickr, decoded once)",
    "",
    "| system | test BLEU | test chrF | train minutes | target tokens/s |",
    "|---|---|---|---|---|",
    f"| this repo, `configs/multi30k.py` | {fmt(r['test_bleu'])} | {fmt(r['test_chrf'])} | "
    f"{fmt(r['train_minutes'], 1)} | {r['tokens_per_s']:.0f} |",
    f"| {REFERENCE['system']} (the reference run to beat, as measured with JoeyNMT) | "
    f"{REFERENCE['test_bleu']} | {REFERENCE['test_chrf']} | 35 | {REFERENCE['tokens_per_s']} |",
    "",
    f"Decoding: beam {d['beam_size']}, length normalisation alpha {d['length_norm_alpha']}, "
    f"UNK replacement {'on' if d['replace_unk'] else 'off'} (chosen on validation). "
    f"Best checkpoint: step {r['best_step']} of {r['steps']} ({r['epochs']:.1f} epochs). "
    f"Tokens/s counts the whole training wall time (compiling and validation included); "
    f"steady-state windows ran at {r['window_tokens_per_s']:.0f}. The process, with data "
    f"loading, took {fmt(r['process_minutes'], 1)} minutes before the test decoding.",
    "",
    f"Signature: `{r['sacrebleu_signature']}`",
    "",
    f"Command: `{r['command']}`",
    "",
    f"## Exploration ({r['explore_minutes']:g} minutes each, validation greedy BLEU)",
    "",
    "Each setting changes the starting point "
    + ", ".join(f"`{k}={v}`" for k, v in EXPLORE_BASE.items())
    + " (the rest as in `configs/multi30k.py`); every run is a fresh `main.py` process, so "
    "data loading and compiling count against its minutes.",
    "",
    "| setting | overrides | best valid BLEU | at minute |",
    "|---|---|---|---|",
  ]
  for name, e in r["exploration"].items():
    best = max(e["curve"], key=lambda c: c["bleu"]) if e["curve"] else None
    overrides = ", ".join(f"`{k}={v}`" for k, v in e["overrides"].items()) or "(config as is)"
    out.append(
      f"| {name} | {overrides} | {fmt(e['best_valid_bleu'])} | "
      f"{fmt(best['minutes'] if best else None, 1)} |"
    )
  missing = [name for name in EXPLORE if name not in r["exploration"]]
  if missing:
    out += ["", f"Defined in `EXPLORE` but not run for this record: {', '.join(missing)}."]
  out += [
    "",
    "## Decoding settings (validation split, best checkpoint of the final run)",
    "",
    "| beam | alpha | UNK replacement | valid BLEU | valid chrF | decode seconds |",
    "|---|---|---|---|---|---|",
  ]
  for g in r["decode_grid"]:
    out.append(
      f"| {g['beam_size']} | {g['length_norm_alpha']} | {'on' if g['replace_unk'] else 'off'} | "
      f"{fmt(g['valid_bleu'])} | {fmt(g['valid_chrf'])} | {g['decode_s']:.0f} |"
    )
  out += [
    "",
    "## Validation BLEU against wall-clock minutes (final run)",
    "",
    "| minute | step | valid BLEU (greedy) | valid loss |",
    "|---|---|---|---|",
  ]
  for c in r["valid_curve"]:
    out.append(f"| {c['minutes']:.1f} | {c['step']} | {fmt(c['bleu'])} | {fmt(c['loss'], 3)} |")
  out += ["", "![validation BLEU against minutes](multi30k_bleu_vs_minutes.png)", ""]
  return "\n".join(out)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--workdir", type=Path, required=True, help="where the runs train")
  p.add_argument(
    "--out",
    type=Path,
    default=Path("experiments/results/multi30k_realtext"),
    help="where the report files go (default: the study's folder)",
  )
  p.add_argument("--stage", default="all", choices=STAGES)
  p.add_argument("--preset", default="full", choices=PRESETS)
  p.add_argument("--pair", default="en-fr", help="SRC-TGT of the Multi30k folder")
  p.add_argument("--data-dir", type=Path, default=None, help="data.local.dir (default: config's)")
  p.add_argument("--explore-minutes", type=float, default=10.0)
  p.add_argument("--minutes", type=float, default=None, help="final budget (config's default)")
  p.add_argument("--only", nargs="*", choices=sorted(EXPLORE), help="explore these settings")
  args = p.parse_args(argv)
  if args.minutes is None:
    args.minutes = load_config(f"{CONFIG}:{args.pair}").train.max_minutes
  return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
  args = parse_args(argv)
  args.workdir.mkdir(parents=True, exist_ok=True)
  if args.stage in ("explore", "all"):
    explore(args)
  if args.stage in ("final", "all"):
    final(args)
  if args.stage in ("report", "all"):
    return report(args)
  return None


if __name__ == "__main__":
  main()

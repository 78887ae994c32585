"""Where attention may look: every attention structure over seeds, on all test sentences and on
the long ones.

    python -m experiments.structural_study --out runs/structures [--preset smoke|cpu]
        [--seeds 0,1,2] [--variants soft,local_m,local_p,monotonic,conv,multihead,hard]
        [--baseline soft] [--set key=value ...] [--bootstrap-samples 1000]
        [--decode-sentences 50] [--training together|sequential] [--launcher local|jobs]
        [--only VARIANT,...] [--collect] [--compilation-cache DIR]

A variant is one config override, `{"model.attention": NAME}` (seq2seq/model/structures.py), crossed
with the seeds: a named grid on the generic sweep (`python -m experiments.sweep`, whose flags it
shares: jobs file, collecting, resuming; `experiments/lib/sweeps.py`). Every run is an ordinary
workdir OUT/runs/NAME/seed_N (record `NAME-seedN`; rerunning resumes or reuses it);
`--training together` (default) trains a variant's seeds as one vmapped group
(`seq2seq/seed_group.py`), `sequential` one after another with
`seq2seq.train.train_and_evaluate`. Plain RNNsearch (`soft`, the additive score everywhere) is
the baseline of the paired bootstrap.

When the study reports (after training, or with `--collect`, on the machine that collects), each
run's best (else latest) checkpoint is measured once more (`measure`, cached in
WORKDIR/structural_study.json):

* the long split: the test pairs whose source length in words is in the preset's range
  (`LONG_SPLITS`: 40-80 for `cpu`). The corpus has no such split of its own, so it is
  selected here, after evaluation, by source length: BLEU of the run's test hypotheses
  restricted to those pairs against their references, and AER and attention entropy of the
  teacher-forced attention on them (argmax links against the gold alignments, as in
  `seq2seq.data.metrics`);
* decoding speed: sentences per second of `seq2seq.decoding.inference.translate_split` with the
run's
  decode settings over the first `--decode-sentences` long test sources and as many short ones
  (shorter than the long split). A first pass compiles; the second is timed.

Reported per variant (mean and sample standard deviation over seeds): test BLEU, AER and
attention entropy, on all test pairs and on the long split; training tokens/s (median of the
logged windows, each run's first window left out); decode sentences/s on short and long
sources; milliseconds per decoder step of a teacher-forced forward pass over a fixed random batch
with sources of a quarter of the long split's longest and of its longest (`step_ms`: the cost
per step, free of how long each model's translations are); the paired bootstrap p-value of
test BLEU against the baseline, on all pairs and on the long split
(`sweeps.bootstrap`: sentences resampled, seed S paired with the baseline's seed S, the seeds
pooled on each resample). Outputs:
OUT/study.json, OUT/study.md, OUT/study_bleu.png (all pairs), OUT/study_bleu_long.png,
OUT/study_decode_long.png and OUT/study_step_ms.png.

Presets:
* `smoke`: configs/tiny.py for a few steps (the test); its sentences have at most 18 words, so
  its "long split" is 10-18 words.
* `cpu`: the cpu preset shared by the study scripts (`experiments/lib/presets.py`: half the
  demo's width, Glorot initialisation, 400 updates of 64 pairs of at most 30 words, on a corpus
  whose 1,000 test pairs hold about 100 of 40-80 words, so the long split also tests length
  generalisation). Its measured wall time is in study.json (`total_wall_s`).

`--config FILE[:ARG]` runs the study on another config instead of a preset; its long split is
then the config's `data.long_test_min_words` to `_max_words` (set them, e.g. through `--set`),
and AER needs a corpus with gold alignments (the embedded one).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from experiments.lib import driver, plots, reports, stats, sweeps, timing
from experiments.lib import runs as runs_lib
from experiments.lib.reports import fmt
from experiments.lib.runs import Run
from experiments.lib.sweeps import Point, Sweep
from seq2seq import restoring, settings
from seq2seq import sharding as rt
from seq2seq.common import files
from seq2seq.data import input_pipeline, metrics, synthetic
from seq2seq.decoding import decode, inference
from seq2seq.model import structures

LONG_SPLITS = {"smoke": (10, 18), "cpu": (40, 80)}  # Source words (inclusive) of the long split.
MEASURE_FILE = "structural_study.json"


class StructuralStudy(driver.PresetStudy):
  """One point per attention structure, measured on all test sentences and on long ones."""

  module = "experiments.structural_study"
  report_name = "study"

  def add_arguments(self, parser: argparse.ArgumentParser) -> None:
    names = ",".join(structures.names())
    parser.add_argument("--variants", default=names, help="model.attention values")
    parser.add_argument("--baseline", default="soft", help="the variant tested against")
    parser.add_argument(
      "--decode-sentences", type=int, default=50, help="long (and short) sources timed per run"
    )

  def points(self, args: argparse.Namespace) -> list[Point]:
    if args.decode_sentences < 1:
      raise ValueError("--decode-sentences must be at least 1")
    names = driver.names_flag(args.variants, structures.names(), "variant")
    return [Point(name, {"model.attention": name}) for name in names]

  def check(self, sweep: Sweep, args: argparse.Namespace) -> None:
    long_split(sweep, args)

  def report(
    self, sweep: Sweep, args: argparse.Namespace, trained: set[str], start: float
  ) -> dict[str, Any]:
    words = long_split(sweep, args)
    baseline = args.baseline
    recs = sweeps.records(sweep, trained)
    measured = {
      p.name: [measure(run, words, args.decode_sentences) for run in sweep.runs(p)]
      for p in sweep.points
    }
    rows = [aggregate(sweep, p, recs[p.name], measured[p.name]) for p in sweep.points]
    examples = runs_lib.test_examples(sweep.runs(baseline)[0])
    refs = [ex.tgt for ex in examples]
    ids = input_pipeline.long_test_indices([ex.src for ex in examples], *words).tolist()
    n = {"n_samples": args.bootstrap_samples, "ar_trials": args.ar_trials}
    significance = {
      "all": sweeps.bootstrap(sweep, baseline, refs, **n)["bleu"],
      "long": sweeps.bootstrap(sweep, baseline, refs, **n, indices=ids)["bleu"],
    }
    for row in rows:
      row["p_value_vs_baseline"] = significance["all"][row["name"]]["p_value"]
      row["p_value_long_vs_baseline"] = significance["long"][row["name"]]["p_value"]
    tested = {
      "hypotheses": "test split, seed S paired with the baseline's, seeds pooled per resample",
      "per_configuration": significance["all"],
      "per_configuration_long": significance["long"],
    }
    result = driver.record(sweep, args, baseline, rows, tested, recs, start)
    result["long_split"] = list(words)
    result["measured"] = {
      run.name: m
      for p in sweep.points
      for run, m in zip(sweep.runs(p), measured[p.name], strict=True)
    }
    names = [r["name"] for r in rows]
    for key, file, label in (
      ("bleu", "study_bleu.png", "test BLEU"),
      ("long_bleu", "study_bleu_long.png", f"test BLEU, {words[0]}-{words[1]} words"),
      ("decode_long_sent_per_s", "study_decode_long.png", "decode sentences/s (long)"),
      ("step_ms_long", "study_step_ms.png", f"ms per decoder step, {words[1]}-word sources"),
    ):
      means = [r[f"{key}_mean"] or 0.0 for r in rows]
      stds = [r[f"{key}_std"] or 0.0 for r in rows]
      title = f"{label}, seeds {sweep.seeds}"
      plots.bar_plot(names, means, stds, sweep.out / file, title, ylabel=label)
    table = markdown(rows, baseline, driver.setting(result), words)
    driver.write(sweep.out, self.report_name, result, table)
    return result


def long_split(sweep: Sweep, args: argparse.Namespace) -> tuple[int, int]:
  """Source words (inclusive) of the long split: the preset's, or the config's long test split
  (ValueError where it has none)."""
  return LONG_SPLITS[args.preset] if args.preset else sweeps.long_test_words(sweep)


def decode_speed(state, split: input_pipeline.Split, config) -> float | None:
  """Sentences per second of `inference.translate_split` (second pass; the first compiles)."""
  if len(split) == 0:
    return None
  inference.translate_split(state, split, decode.DecodeSettings.from_config(config))
  start = time.perf_counter()
  inference.translate_split(state, split, decode.DecodeSettings.from_config(config))
  return len(split) / (time.perf_counter() - start)


STEP_BATCH = 64  # Sentences of the fixed batch `step_ms` times.


def step_ms(state, vocab: int, src_len: int, repeats: int = 5) -> float:
  """Milliseconds per decoder step of the jitted teacher-forced forward pass (encoder, scan and
  output layer) on a fixed random batch of STEP_BATCH sentences of `src_len` source and as many
  target tokens: the cost of attention per step at that source length, whatever the model
  outputs (decode speed also depends on how long its translations are). Median of `repeats`
  after a compiling run."""
  rng = np.random.default_rng(0)
  src = rng.integers(4, vocab, (STEP_BATCH, src_len)).astype(np.int32)
  tgt = rng.integers(4, vocab, (STEP_BATCH, src_len)).astype(np.int32)
  mask = np.ones_like(src)
  forward = jax.jit(lambda params, s, m, t: state.replace(params=params).model()(s, m, t))
  return 1000.0 * timing.median_seconds(forward, (state.params, src, mask, tgt), repeats) / src_len


def measure(run: Run, long_split: tuple[int, int], decode_sentences: int) -> dict[str, Any]:
  """The long split's BLEU, AER and entropy and the decoding speeds of a finished run (cached in
  WORKDIR/MEASURE_FILE for its last evaluation)."""
  path = run.workdir / MEASURE_FILE
  cached = runs_lib.cached_measurement(
    run, MEASURE_FILE, lambda c: c.get("long_split") == list(long_split) and "step_ms_long" in c
  )
  if cached is not None:
    return cached
  config = run.config()
  runtime, run_settings = rt.Runtime(), settings.validate(config)
  data = rt.load_data(run_settings, run.workdir)
  state = restoring.restore_for_eval(
    run_settings, run.workdir, data.src_tokenizer.size, data.tgt_tokenizer.size, runtime
  )
  raw = data.raw("test")
  test = data.splits["test"]
  ids = input_pipeline.long_test_indices([src for src, _, _ in raw], *long_split).tolist()
  hyps = runs_lib.hypotheses(run)
  out: dict[str, Any] = {"long_split": list(long_split), "long_sentences": len(ids)}
  out["long_bleu"] = metrics.bleu([hyps[i] for i in ids], [raw[i][1] for i in ids])[0]
  if ids and all(raw[i][2] is not None for i in ids):
    forced = inference.teacher_forced_attention(
      state, input_pipeline.subset(test, ids), decode.DecodeSettings.from_config(config)
    )
    gold = [set(synthetic.parse_alignment(raw[i][2])) for i in ids]
    out["long_aer"] = metrics.alignment_error_rate([metrics.argmax_links(a) for a in forced], gold)
    out["long_attention_entropy"] = metrics.attention_entropy(forced)
  short = [i for i, (src, _, _) in enumerate(raw) if len(src.split()) < long_split[0]]
  for name, chosen in (("short", short), ("long", ids)):
    chosen = chosen[:decode_sentences]
    out[f"decode_{name}_sentences"] = len(chosen)
    chosen_split = input_pipeline.subset(test, chosen)
    out[f"decode_{name}_sent_per_s"] = decode_speed(state, chosen_split, config)
  vocab = min(data.src_tokenizer.size, data.tgt_tokenizer.size)
  for name, length in step_lengths(long_split).items():
    out[f"step_ms_{name}"] = step_ms(state, vocab, length)
  if jax.process_index() == 0:
    files.write_atomic(path, json.dumps(out, indent=2) + "\n")
  return out


LONG_FIELDS = (
  "long_bleu",
  "long_aer",
  "long_attention_entropy",
  "decode_short_sent_per_s",
  "decode_long_sent_per_s",
  "step_ms_short",
  "step_ms_long",
)


def step_lengths(long_split: tuple[int, int]) -> dict[str, int]:
  """Source (and target) lengths of the `step_ms` batches: a quarter of the long split's
  longest, and its longest."""
  return {"short": max(1, long_split[1] // 4), "long": long_split[1]}


def aggregate(
  sweep: Sweep, point: Point, recs: Sequence[dict[str, Any]], measured: Sequence[dict[str, Any]]
) -> dict[str, Any]:
  """The sweep's aggregate plus the long split's figures and the decoding speeds."""
  row = sweeps.aggregate(sweep, point, recs)
  for field in LONG_FIELDS:
    row[f"{field}_mean"], row[f"{field}_std"] = stats.mean_std([m.get(field) for m in measured])
  row["long_sentences"] = measured[0]["long_sentences"]
  return row


def markdown(
  rows: Sequence[dict[str, Any]], baseline: str, label: str, words: tuple[int, int]
) -> str:
  """The study table: one row per attention structure."""
  low, high = words
  short = step_lengths(words)["short"]
  pm = reports.mean_sd
  header = ["attention", "seeds", "BLEU", "BLEU long", "AER", "AER long", "entropy"]
  header += ["entropy long", "train tok/s", "decode sent/s short", "decode sent/s long"]
  header += [f"ms/step src {short}", f"ms/step src {high}", f"p vs {baseline}", "p long"]
  cells = [
    [
      r["name"],
      str(len(r["seeds"])),
      pm(r, "bleu"),
      pm(r, "long_bleu"),
      pm(r, "aer", 3),
      pm(r, "long_aer", 3),
      pm(r, "attention_entropy"),
      pm(r, "long_attention_entropy"),
      fmt(r["train_tokens_per_s_median"], 0),
      pm(r, "decode_short_sent_per_s", 1),
      pm(r, "decode_long_sent_per_s", 1),
      pm(r, "step_ms_short", 3),
      pm(r, "step_ms_long", 3),
      fmt(r["p_value_vs_baseline"], 4),
      fmt(r["p_value_long_vs_baseline"], 4),
    ]
    for r in rows
  ]
  lines = [
    f"# Attention structures ({label}, test split; long: {low}-{high} source words)",
    "",
    *reports.table(header, cells),
    "",
    "Mean ± sample standard deviation over seeds. long: the test pairs whose source has "
    f"{low}-{high} words ({rows[0]['long_sentences']} pairs), selected after evaluation.",
    "AER: argmax links of the teacher-forced attention against the gold alignments.",
    stats.bootstrap_caption(baseline),
    "train tok/s: median of the logged training windows (first one, with compilation, left out).",
    "decode sent/s: second pass over the first long / short test sources (first pass compiles).",
    f"ms/step: teacher-forced forward pass over {STEP_BATCH} random sentences of {short} (or "
    f"{high}) source and target tokens, per target step (median of 5 after compiling).",
  ]
  return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
  return driver.main(StructuralStudy(__doc__), argv)


if __name__ == "__main__":
  main()

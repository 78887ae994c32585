"""Where attention may look: every attention structure over seeds, on all test sentences and on
the long ones.

    python experiments/structural_study.py --out runs/structures [--preset smoke|cpu]
        [--seeds 0,1,2] [--variants soft,local_m,local_p,monotonic,conv,multihead,hard]
        [--baseline soft] [--set key=value ...] [--bootstrap-samples 1000]
        [--decode-sentences 50] [--compilation-cache DIR]

A variant is one config override, `{"model.attention": NAME}` (seq2seq/structures.py), crossed
with the seeds: a sweep in the sense of experiments/sweep_scores.py, whose functions this script
reuses. Every run is an ordinary workdir OUT/runs/NAME-seedN (rerunning resumes or reuses it);
`--training together` (default) trains a variant's seeds as one vmapped group
(`seq2seq/seed_group.py`), `sequential` one after another with
`seq2seq.train.train_and_evaluate`. Plain RNNsearch (`soft`,
the additive score everywhere) is the baseline of the paired bootstrap.

After training, each run's best (else latest) checkpoint is measured once more (`measure`, cached in
WORKDIR/structural_study.json):

* the long split: the test pairs whose source length in words is in the preset's range
  (`LONG_SPLITS`: 40-80 for `cpu`). The corpus has no such split of its own, so it is
  selected here, after evaluation, by source length: BLEU of the run's test hypotheses
  restricted to those pairs against their references, and AER and attention entropy of the
  teacher-forced attention on them (argmax links against the gold alignments, as in
  `seq2seq.evaluate`);
* decoding speed: sentences per second of `seq2seq.evaluate.translate_split` with the run's
  decode settings over the first `--decode-sentences` long test sources and as many short ones
  (shorter than the long split). A first pass compiles; the second is timed.

Reported per variant (mean and sample standard deviation over seeds): test BLEU, AER and
attention entropy, on all test pairs and on the long split; training tokens/s (median of the
logged windows, each run's first window left out); decode sentences/s on short and long
sources; milliseconds per decoder step of a teacher-forced forward pass over a fixed random batch
with sources of a quarter of the long split's longest and of its longest (`step_ms`: the cost
per step, free of how long each model's translations are); the paired bootstrap p-value of
test BLEU against the baseline, on all pairs and on the long split
(`sweep_scores.paired_bootstrap`, hypotheses of shared seeds concatenated). Outputs:
OUT/study.json, OUT/study.md, OUT/study_bleu.png (all pairs), OUT/study_bleu_long.png,
OUT/study_decode_long.png and OUT/study_step_ms.png.

Presets:
* `smoke`: configs/tiny.py for a few steps (the test); its sentences have at most 18 words, so
  its "long split" is 10-18 words.
* `cpu`: the cpu preset shared by the study scripts (`sweep_scores.CPU_OVERRIDES`: half the
  demo's width, Glorot initialisation, 400 updates of 64 pairs of at most 30 words, on a corpus
  whose 1,000 test pairs hold about 100 of 40-80 words, so the long split also tests length
  generalisation). Its measured wall time is in study.json (`total_wall_s`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `configs` is a top-level package of the checkout.
  sys.path.insert(0, str(REPO_ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from experiments import benchmark  # noqa: E402
from experiments import reproduce_paper as rp  # noqa: E402
from experiments import sweep_scores as sweep  # noqa: E402
from seq2seq import eval_run, evaluate, input_pipeline, structures  # noqa: E402
from seq2seq import runtime as rt  # noqa: E402
from seq2seq.data import synthetic  # noqa: E402

PRESETS = ("smoke", "cpu")
LONG_SPLITS = {"smoke": (10, 18), "cpu": (40, 80)}  # Source words (inclusive) of the long split.
MEASURE_FILE = "structural_study.json"


def configurations(variants: Sequence[str]) -> list[dict[str, Any]]:
  """The study: one {"name", "overrides"} per attention structure."""
  return [{"name": v, "overrides": {"model.attention": v}} for v in variants]


def build_runs(
  preset: str, variants: Sequence[str], seeds: Sequence[int], out: Path, sets: dict[str, Any]
) -> dict[str, list[rp.Run]]:
  """{variant: its runs, one per seed}: `sweep_scores.build_runs` (its presets; `--set` wins)."""
  return sweep.build_runs(preset, configurations(variants), seeds, out, sets)


def subset(split: input_pipeline.Split, ids: Sequence[int]) -> input_pipeline.Split:
  """The pairs `ids` of `split`, in that order."""
  rows = lambda ragged: input_pipeline.Ragged.from_lists([ragged.row(i).tolist() for i in ids])
  index = np.asarray(ids, np.int64)
  return input_pipeline.Split(split.name, rows(split.src), rows(split.tgt), split.line[index])


def long_ids(sources: Sequence[str], long_split: tuple[int, int]) -> list[int]:
  """Indices of the sources of long_split[0]..long_split[1] (whitespace) words."""
  low, high = long_split
  return [i for i, src in enumerate(sources) if low <= len(src.split()) <= high]


def decode_speed(state, split: input_pipeline.Split, config) -> float | None:
  """Sentences per second of `evaluate.translate_split` (second pass; the first compiles)."""
  if len(split) == 0:
    return None
  evaluate.translate_split(state, split, config)
  start = time.perf_counter()
  evaluate.translate_split(state, split, config)
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
  return (
    1000.0 * benchmark.median_seconds(forward, (state.params, src, mask, tgt), repeats) / src_len
  )


def measure(run: rp.Run, long_split: tuple[int, int], decode_sentences: int) -> dict[str, Any]:
  """The long split's BLEU, AER and entropy and the decoding speeds of a finished run (cached in
  WORKDIR/MEASURE_FILE for its last evaluation)."""
  path = run.workdir / MEASURE_FILE
  results = run.workdir / "eval" / "test" / "results.json"
  if path.exists() and path.stat().st_mtime >= results.stat().st_mtime:
    cached = json.loads(path.read_text())
    if cached.get("long_split") == list(long_split) and "step_ms_long" in cached:
      return cached
  config = run.config()
  runtime = rt.Runtime()
  data = rt.load_data(config, run.workdir)
  state = eval_run.restore_for_eval(
    config, run.workdir, data.src_tokenizer.size, data.tgt_tokenizer.size, runtime
  )
  raw = data.raw("test")
  test = data.splits["test"]
  ids = long_ids([src for src, _, _ in raw], long_split)
  hyps = sweep.hypotheses(run)
  out: dict[str, Any] = {"long_split": list(long_split), "long_sentences": len(ids)}
  out["long_bleu"] = evaluate.bleu([hyps[i] for i in ids], [raw[i][1] for i in ids])[0]
  if ids and all(raw[i][2] is not None for i in ids):
    forced = evaluate.teacher_forced_attention(state, subset(test, ids), config)
    gold = [set(synthetic.parse_alignment(raw[i][2])) for i in ids]
    out["long_aer"] = evaluate.alignment_error_rate(
      [evaluate.argmax_links(a) for a in forced], gold
    )
    out["long_attention_entropy"] = evaluate.attention_entropy(forced)
  short = [i for i, (src, _, _) in enumerate(raw) if len(src.split()) < long_split[0]]
  for name, chosen in (("short", short), ("long", ids)):
    chosen = chosen[:decode_sentences]
    out[f"decode_{name}_sentences"] = len(chosen)
    out[f"decode_{name}_sent_per_s"] = decode_speed(state, subset(test, chosen), config)
  vocab = min(data.src_tokenizer.size, data.tgt_tokenizer.size)
  for name, length in step_lengths(long_split).items():
    out[f"step_ms_{name}"] = step_ms(state, vocab, length)
  if jax.process_index() == 0:
    path.write_text(json.dumps(out, indent=2) + "\n")
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


def aggregate(name: str, records, runs, measured: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """`sweep_scores.aggregate` plus the long split's figures and the decoding speeds."""
  row = sweep.aggregate(name, records, runs)
  for field in LONG_FIELDS:
    row[f"{field}_mean"], row[f"{field}_std"] = sweep.mean_std([m.get(field) for m in measured])
  row["long_sentences"] = measured[0]["long_sentences"]
  return row


def markdown(rows: Sequence[dict[str, Any]], baseline: str, preset: str, long_split) -> str:
  """The study table: one row per attention structure."""
  f = rp._fmt
  low, high = long_split
  short = step_lengths(long_split)["short"]
  pm = lambda r, key, digits=2: f"{f(r[key + '_mean'], digits)} ± {f(r[key + '_std'], digits)}"
  lines = [
    f"# Attention structures ({preset} preset, test split; long: {low}-{high} source words)",
    "",
    "| attention | seeds | BLEU | BLEU long | AER | AER long | entropy | entropy long | "
    f"train tok/s | decode sent/s short | decode sent/s long | ms/step src {short} | "
    f"ms/step src {high} | p vs {baseline} | p long |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ]
  for r in rows:
    lines.append(
      f"| {r['name']} | {len(r['seeds'])} | {pm(r, 'bleu')} | {pm(r, 'long_bleu')} | "
      f"{pm(r, 'aer', 3)} | {pm(r, 'long_aer', 3)} | {pm(r, 'attention_entropy')} | "
      f"{pm(r, 'long_attention_entropy')} | {f(r['train_tokens_per_s_median'], 0)} | "
      f"{pm(r, 'decode_short_sent_per_s', 1)} | {pm(r, 'decode_long_sent_per_s', 1)} | "
      f"{pm(r, 'step_ms_short', 3)} | {pm(r, 'step_ms_long', 3)} | "
      f"{f(r['p_value_vs_baseline'], 4)} | {f(r['p_value_long_vs_baseline'], 4)} |"
    )
  lines += [
    "",
    "Mean ± sample standard deviation over seeds. long: the test pairs whose source has "
    f"{low}-{high} words ({rows[0]['long_sentences']} pairs), selected after evaluation.",
    "AER: argmax links of the teacher-forced attention against the gold alignments. p: sacrebleu",
    f"paired bootstrap of test BLEU against {baseline}, hypotheses of shared seeds concatenated.",
    "train tok/s: median of the logged training windows (first one, with compilation, left out).",
    "decode sent/s: second pass over the first long / short test sources (first pass compiles).",
    f"ms/step: teacher-forced forward pass over {STEP_BATCH} random sentences of {short} (or "
    f"{high}) source and target tokens, per target step (median of 5 after compiling).",
  ]
  return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = sweep.common_parser(__doc__)
  p.add_argument("--variants", default=",".join(structures.names()), help="model.attention values")
  p.add_argument("--baseline", default="soft", help="the variant tested against")
  p.add_argument(
    "--decode-sentences", type=int, default=50, help="long (and short) sources timed per run"
  )
  args = p.parse_args(argv)
  sweep.check_common(p, args)
  args.variants = sweep.names_flag(p, args.variants, structures.names(), "variant")
  if args.baseline not in args.variants:
    p.error(f"--baseline {args.baseline!r} is not among --variants")
  if args.decode_sentences < 1:
    p.error("--decode-sentences must be at least 1")
  return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  args = parse_args(argv)
  long_split = LONG_SPLITS[args.preset]
  out, runs = sweep.prepare(
    args, lambda out, sets: build_runs(args.preset, args.variants, args.seeds, out, sets)
  )
  start = time.perf_counter()
  if args.training == "together":
    sweep.train_groups(runs)
  records, measured = {}, {}
  for name, name_runs in runs.items():
    records[name] = [rp.execute(run) for run in name_runs]
    measured[name] = [measure(run, long_split, args.decode_sentences) for run in name_runs]
  rows = [aggregate(name, records[name], runs[name], measured[name]) for name in runs]
  references = sweep.test_references(runs[args.baseline][0])
  ids = long_ids([ex.src for ex in sweep.test_examples(runs[args.baseline][0])], long_split)
  significance = {
    "all": sweep.paired_bootstrap(runs, args.baseline, references, args.bootstrap_samples),
    "long": sweep.paired_bootstrap(
      runs, args.baseline, references, args.bootstrap_samples, indices=ids
    ),
  }
  for row in rows:
    row["p_value_vs_baseline"] = significance["all"][row["name"]]["p_value"]
    row["p_value_long_vs_baseline"] = significance["long"][row["name"]]["p_value"]
  tested = {
    "hypotheses": "test split, concatenated over the seeds shared with the baseline",
    "per_configuration": significance["all"],
    "per_configuration_long": significance["long"],
  }
  result = sweep.study_record(args, args.baseline, rows, tested, records, start)
  result["long_split"] = list(long_split)
  result["measured"] = {
    run.name: m for name in runs for run, m in zip(runs[name], measured[name], strict=True)
  }
  (out / "study.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
  (out / "study.md").write_text(markdown(rows, args.baseline, args.preset, long_split))
  names = [r["name"] for r in rows]
  for key, file, label in (
    ("bleu", "study_bleu.png", "test BLEU"),
    ("long_bleu", "study_bleu_long.png", f"test BLEU, {long_split[0]}-{long_split[1]} words"),
    ("decode_long_sent_per_s", "study_decode_long.png", "decode sentences/s (long)"),
    ("step_ms_long", "study_step_ms.png", f"ms per decoder step, {long_split[1]}-word sources"),
  ):
    means = [r[f"{key}_mean"] or 0.0 for r in rows]
    stds = [r[f"{key}_std"] or 0.0 for r in rows]
    sweep.bar_plot(names, means, stds, out / file, f"{label}, seeds {args.seeds}", ylabel=label)
  print((out / "study.md").read_text())
  print(f"wrote {out / 'study.json'} ({result['total_wall_s']:.0f} s)")
  return result


if __name__ == "__main__":
  main()

"""Is attention trained to align? Plain additive RNNsearch against each alignment feature and a
few combinations, over seeds, on the embedded corpus (its gold alignments are the referee).

    python -m experiments.alignment_study --out runs/alignment [--preset smoke|cpu]
        [--seeds 0,1,2] [--variants additive,coverage,...] [--set key=value ...]
        [--training together|sequential] [--launcher local|jobs] [--only VARIANT,...]
        [--collect] [--bootstrap-samples 1000] [--compilation-cache DIR]

Variants (`VARIANTS`; each a set of config overrides on the preset's RNNsearch, additive score):

* `additive`: plain RNNsearch, the baseline every other variant is tested against.
* `coverage`: the running sum of past attention enters the score (Tu et al. 2016).
* `coverage+fertility`: that coverage divided by a learned fertility N_j.
* `prev-attention`: `PREV` (8 filters of width 5) over the previous step's attention
  (Cohn et al. 2016; Chorowski et al. 2015).
* `fertility-penalty`: the loss sum_j (sum_i alpha_ij - 1)^2, weight 0.1 (`FERTILITY`).
* `supervised`: cross-entropy against the gold links, weight 1 (`SUPERVISED`);
  `supervised-0.1` a tenth of that weight; `supervised-mse` squared error, weight 1
  (at the cpu preset the full cross-entropy weight throws decoding into
  repetition loops, see experiments/results/alignment/README.md).
* `agreement`: source->target and target->source models trained jointly with the trace bonus
  (weight 1; Cohn et al. 2016); evaluated with its forward model.
* `coverage+fertility+penalty`: learned fertility, pushed towards the attention it receives.
* `coverage+prev-attention`: both memories of past attention in the score.
* `gnmt-beam`: no training of its own: the `additive` run of the same seed (its workdir copied)
  decoded with GNMT's coverage penalty beta = `GNMT_BETA` in beam search; its training
  figures (tokens/s) are therefore additive's.

A named grid on the generic sweep (`python -m experiments.sweep`, whose flags it shares: jobs
file, collecting, resuming; `experiments/lib/sweeps.py`): every variant runs once per seed, each
run an ordinary workdir OUT/runs/NAME/seed_N (record `NAME-seedN`; rerunning resumes or reuses
finished runs; each record in alignment_study.json carries the `main.py` command that trains it
alone). `--training together` (default) trains the seeds of a variant as one vmapped group
(`seq2seq/seed_group.py`: they differ in initialisation and dropout and share the first seed's
data order); `sequential` trains them one after another with
`seq2seq.train.train_and_evaluate` (`seed` then also sets the data order). With
`--launcher=jobs`, `gnmt-beam` runs in the job of `additive`, after it.

Evaluation: the test split, and a long-sentence split `test_long`: the test pairs whose source
has `LONG_WORDS[preset]` words (`data.long_test_min_words` / `_max_words`; 40 to 80 at the cpu
preset, on a corpus generated with sentences up to 80 words, while training keeps pairs of at
most `data.max_len` = 30 tokens, so the long split also measures generalisation to lengths never
trained on, where dropped and repeated words are most common). Reported per configuration, mean
± sample standard deviation over seeds: BLEU, No-UNK BLEU, AER of argmax attention (plain,
shifted one target word back and forward, and thresholded at 0.3), attention entropy, over- and
under-translation counts (summed over the split's sentences), train tokens/s (median of the log
windows after the first; an agreement run counts its forward target tokens, so its tokens/s is
sentence-pair throughput, comparable with the others), and the paired bootstrap p of
BLEU against `additive` (`stats.paired_bootstrap`: sentences resampled, seed S paired with
additive's seed S, the seeds pooled on each resample; p = 1 where the outputs equal additive's),
for both splits.

Presets:

* `smoke`: configs/tiny.py for `presets.SMOKE_STEPS` steps, long split 12-18 words
  (tiny sentences stop at 18): checks the files and keys written
  (tests/experiments/test_experiments_studies.py).
* `cpu`: the cpu preset shared by the study scripts (`experiments/lib/presets.py`: half the
  demo's width, Glorot initialisation, Adam 3e-3, 400 updates of 64 pairs, the last checkpoint
  evaluated with beam 5 on 1,000 test pairs, about 100 of them of 40-80 words). The paper's
  initialisation keeps attention near uniform for the first few hundred steps (measured: demo
  sizes, 200 steps, test BLEU 0.8, AER 0.96), hence Glorot: the study compares the variants
  early in training. Its measured wall time is in alignment_study.json (`total_wall_s`).

`--config FILE[:ARG]` runs the study on another config instead of a preset; it must define the
long split (`data.long_test_min_words` and `_max_words`, e.g. through `--set`), and AER needs a
corpus with gold alignments (the embedded one).

Outputs in OUT: alignment_study.json (rows, significance, every run record, environment),
alignment_study.md (the two tables), alignment_study.png (test BLEU), alignment_study_long.png
(long-split BLEU) and alignment_study_aer.png (test AER), each with one-standard-deviation bars.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from experiments.lib import driver, plots, reports, stats, sweeps
from experiments.lib import runs as runs_lib
from experiments.lib.reports import fmt
from experiments.lib.sweeps import Point, Sweep
from seq2seq.data import input_pipeline

BASELINE = "additive"
LONG = input_pipeline.LONG_TEST
SPLITS = ("test", LONG)

FERTILITY = "fertility(weight=0.1)"  # The penalty variants' loss term.
SUPERVISED = "supervision(weight=1.0)"  # `supervised`'s loss term.
PREV = "prev_attention(filters=8)"  # The previous-attention variants' feature.
GNMT_BETA = 0.2  # decode.coverage_penalty of `gnmt-beam` (Wu et al. 2016 use 0.2).

LONG_WORDS = {"smoke": (12, 18), "cpu": (40, 80)}  # Source words of the long split, per preset.

VARIANTS = (
  Point(BASELINE, {}),
  Point("coverage", {"model.features": "coverage"}),
  Point("coverage+fertility", {"model.features": "coverage(fertility=true)"}),
  Point("prev-attention", {"model.features": PREV}),
  Point("fertility-penalty", {"train.loss_terms": FERTILITY}),
  Point("supervised", {"train.loss_terms": SUPERVISED}),
  Point("supervised-0.1", {"train.loss_terms": "supervision(weight=0.1)"}),
  Point("supervised-mse", {"train.loss_terms": "supervision(weight=1.0, loss=mse)"}),
  Point("agreement", {"model.name": "agreement"}),
  Point(
    "coverage+fertility+penalty",
    {"model.features": "coverage(fertility=true)", "train.loss_terms": FERTILITY},
  ),
  Point("coverage+prev-attention", {"model.features": f"coverage+{PREV}"}),
  Point("gnmt-beam", {"decode.coverage_penalty": GNMT_BETA}, decode_from=BASELINE),
)
VARIANT_NAMES = tuple(v.name for v in VARIANTS)
# Figures per split, mean and standard deviation over seeds: results.json key -> column.
METRICS = (
  "bleu",
  "bleu_no_unk",
  "aer",
  "aer_shift_minus1",
  "aer_shift_plus1",
  "aer_threshold",
  "attention_entropy",
  "over_translation",
  "under_translation",
)


class AlignmentStudy(driver.PresetStudy):
  """Plain additive attention against the alignment features, on both test splits."""

  module = "experiments.alignment_study"
  report_name = "alignment_study"

  def add_arguments(self, parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variants", default=",".join(VARIANT_NAMES), help="comma-separated")

  def points(self, args: argparse.Namespace) -> list[Point]:
    names = driver.names_flag(args.variants, VARIANT_NAMES, "variant")
    if BASELINE not in names:
      raise ValueError(f"--variants must include the baseline {BASELINE!r}")
    return [v for v in VARIANTS if v.name in names]  # Baseline first: the study's order.

  def baseline(self, args: argparse.Namespace, points: Sequence[Point]) -> str:
    return BASELINE

  def shared(self, args: argparse.Namespace) -> dict[str, Any]:
    if args.config:
      return {}
    lo, hi = LONG_WORDS[args.preset]
    return {"data.long_test_min_words": lo, "data.long_test_max_words": hi}

  def check(self, sweep: Sweep, args: argparse.Namespace) -> None:
    sweeps.long_test_words(sweep)  # The study evaluates a long test split.

  def report(
    self, sweep: Sweep, args: argparse.Namespace, trained: set[str], start: float
  ) -> dict[str, Any]:
    recs = sweeps.records(sweep, trained)
    rows = [summarise(sweep, point, recs[point.name]) for point in sweep.points]
    significance = {}
    for split in SPLITS:
      refs = references(sweep, split)
      n = args.bootstrap_samples
      per_metric = sweeps.bootstrap(sweep, BASELINE, refs, n, split, ar_trials=args.ar_trials)
      significance[split] = per_metric["bleu"]
    for row in rows:
      row["p_value_vs_baseline"] = significance["test"][row["name"]]["p_value"]
      row["p_value_long_vs_baseline"] = significance[LONG][row["name"]]["p_value"]
    tested = {
      "hypotheses": "per split, seed S paired with the baseline's, seeds pooled per resample",
      "per_split": significance,
    }
    words = sweeps.long_test_words(sweep)
    result = driver.record(
      sweep,
      args,
      BASELINE,
      rows,
      tested,
      recs,
      start,
      preset_overrides=self.shared(args),
      long_split_words=list(words),
      variants={
        p.name: {**p.overrides, "decode_only": p.decode_from is not None} for p in sweep.points
      },
    )
    names = [r["name"] for r in rows]
    label = driver.setting(result)
    for suffix, key, what in (
      ("", "test_bleu", "test BLEU"),
      ("_long", f"{LONG}_bleu", f"BLEU, test pairs of {words[0]}-{words[1]} words"),
      ("_aer", "test_aer", "test AER (argmax)"),
    ):
      plots.bar_plot(
        names,
        [r[f"{key}_mean"] for r in rows],
        [r[f"{key}_std"] for r in rows],
        sweep.out / f"alignment_study{suffix}.png",
        f"{what} over seeds {sweep.seeds} ({label})",
        ylabel=what,
      )
    driver.write(sweep.out, self.report_name, result, markdown(rows, label, words))
    return result


def references(sweep: Sweep, split: str) -> list[str]:
  """Reference translations of `split` ("test" or the long split) from the runs' corpus."""
  test = runs_lib.test_examples(sweep.runs(BASELINE)[0])
  if split == LONG:
    keep = input_pipeline.long_test_indices([ex.src for ex in test], *sweeps.long_test_words(sweep))
    return [test[i].tgt for i in keep]
  return [ex.tgt for ex in test]


def summarise(sweep: Sweep, point: Point, recs: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """One row: the sweep's aggregate (test split) plus every `METRICS` figure per split."""
  row = sweeps.aggregate(sweep, point, recs)
  row["decode_only"] = point.decode_from is not None
  for split in SPLITS:
    for key in METRICS:
      values = [rec["results"][split].get(key) for rec in recs]
      row[f"{split}_{key}_mean"], row[f"{split}_{key}_std"] = stats.mean_std(values)
    row[f"{split}_sentences"] = recs[0]["results"][split]["num_sentences"]
  return row


def markdown(rows: Sequence[dict[str, Any]], label: str, words: tuple[int, int]) -> str:
  """The study's two tables: the test split, then the long-sentence split."""

  def ms(row: dict[str, Any], split: str, key: str, digits: int = 2) -> str:
    return reports.mean_sd(row, f"{split}_{key}", digits)

  n_test, n_long = rows[0]["test_sentences"], rows[0][f"{LONG}_sentences"]
  test_header = ["variant", "seeds", "BLEU", "No-UNK BLEU", "AER", "AER shift -1", "AER shift +1"]
  test_header += ["AER (>= 0.3)", "entropy", "over", "under", "tokens/s", f"p vs {BASELINE}"]
  test_rows = [
    [
      r["name"],
      str(len(r["seeds"])),
      ms(r, "test", "bleu"),
      ms(r, "test", "bleu_no_unk"),
      ms(r, "test", "aer", 3),
      ms(r, "test", "aer_shift_minus1", 3),
      ms(r, "test", "aer_shift_plus1", 3),
      ms(r, "test", "aer_threshold", 3),
      ms(r, "test", "attention_entropy"),
      ms(r, "test", "over_translation", 1),
      ms(r, "test", "under_translation", 1),
      fmt(r["train_tokens_per_s_median"], 0),
      fmt(r["p_value_vs_baseline"], 4),
    ]
    for r in rows
  ]
  long_header = ["variant", "BLEU", "No-UNK BLEU", "AER", "AER shift -1", "over", "under"]
  long_rows = [
    [
      r["name"],
      ms(r, LONG, "bleu"),
      ms(r, LONG, "bleu_no_unk"),
      ms(r, LONG, "aer", 3),
      ms(r, LONG, "aer_shift_minus1", 3),
      ms(r, LONG, "over_translation", 1),
      ms(r, LONG, "under_translation", 1),
      fmt(r["p_value_long_vs_baseline"], 4),
    ]
    for r in rows
  ]
  lo, hi = words
  lines = [
    f"# Attention trained to align ({label})",
    "",
    f"## Test split ({n_test} sentences)",
    "",
    *reports.table(test_header, test_rows),
    "",
    f"## Long sentences: test pairs of {lo}-{hi} source words ({n_long} sentences)",
    "",
    *reports.table([*long_header, f"p vs {BASELINE}"], long_rows),
    "",
    "Mean ± sample standard deviation over seeds. BLEU: sacrebleu (13a); No-UNK: sentences with",
    "no unknown word in source or reference. AER: teacher-forced attention against the gold",
    "links (argmax; shifted one target word back / forward; weights >= 0.3). entropy: mean",
    "attention entropy (nats). over: output words repeated beyond their count in the reference;",
    "under: source content words that no output word attends to most (both summed over the",
    "split). tokens/s: median training log window (compilation left out; gnmt-beam shows",
    "additive's, whose checkpoints it decodes).",
    stats.bootstrap_caption(BASELINE, "BLEU"),
  ]
  return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
  return driver.main(AlignmentStudy(__doc__), argv)


if __name__ == "__main__":
  main()

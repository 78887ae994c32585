"""Is attention trained to align? Plain additive RNNsearch against each alignment feature and a
few combinations, over seeds, on the embedded corpus (its gold alignments are the referee).

    python experiments/alignment_study.py --out runs/alignment [--preset smoke|cpu]
        [--seeds 0,1,2] [--variants additive,coverage,...] [--set key=value ...]
        [--bootstrap-samples 1000] [--compilation-cache DIR]

Variants (`VARIANTS`; each a set of config overrides on the preset's RNNsearch, additive score):

* `additive`: plain RNNsearch, the baseline every other variant is tested against.
* `coverage`: the running sum of past attention enters the score (Tu et al. 2016).
* `coverage+fertility`: that coverage divided by a learned fertility N_j.
* `prev-attention`: `PREV_FILTERS` filters of width 5 over the previous step's attention
  (Cohn et al. 2016; Chorowski et al. 2015).
* `fertility-penalty`: the loss sum_j (sum_i alpha_ij - 1)^2 with weight `FERTILITY_WEIGHT`.
* `supervised`: cross-entropy against the gold links, weight `SUPERVISION_WEIGHT`;
  `supervised-0.1` a tenth of that weight; `supervised-mse` squared error, weight
  `SUPERVISION_WEIGHT` (at the cpu preset the full cross-entropy weight throws decoding into
  repetition loops, see experiments/results/alignment/README.md).
* `agreement`: source->target and target->source models trained jointly with the trace bonus
  (weight 1; Cohn et al. 2016); evaluated with its forward model.
* `coverage+fertility+penalty`: learned fertility, pushed towards the attention it receives.
* `coverage+prev-attention`: both memories of past attention in the score.
* `gnmt-beam`: no training of its own: the `additive` run of the same seed (its workdir copied)
  decoded with GNMT's coverage penalty beta = `GNMT_BETA` in beam search; its training
  figures (tokens/s) are therefore additive's.

Every configuration runs once per seed, each run an ordinary workdir OUT/runs/NAME-seedN
(rerunning resumes or reuses finished runs; each record in alignment_study.json carries the
`main.py` command that trains it alone). `--training together` (default) trains the seeds of a
configuration as one vmapped group (`seq2seq/seed_group.py`: they differ in initialisation and
dropout and share the first seed's data order); `sequential` trains them one after another with
`seq2seq.train.train_and_evaluate` (`seed` then also sets the data order). The runs, the
seed-paired bootstrap, `mean_std`, the aggregation and the bar plots come from
`experiments/sweep_scores.py`.

Evaluation: the test split, and a long-sentence split `test_long`: the test pairs whose source
has `LONG_WORDS[preset]` words (`data.long_test_min_words` / `_max_words`; 40 to 80 at the cpu
preset, on a corpus generated with sentences up to 80 words, while training keeps pairs of at
most `data.max_len` = 30 tokens, so the long split also measures generalisation to lengths never
trained on, where dropped and repeated words are most common). Reported per configuration, mean
± sample standard deviation over seeds: BLEU, No-UNK BLEU, AER of argmax attention (plain,
shifted one target word back and forward, and thresholded at 0.3), attention entropy, over- and
under-translation counts (summed over the split's sentences), train tokens/s (median of the log
windows after the first; an agreement run counts its forward target tokens, so its tokens/s is
sentence-pair throughput, comparable with the others), and sacrebleu's paired bootstrap p of
BLEU against `additive` (hypotheses of shared seeds concatenated; p = 1 where they equal the
baseline's, where sacrebleu would report 1 / (n + 1)), for both splits.

Presets:

* `smoke`: configs/tiny.py for `reproduce_paper.SMOKE_STEPS` steps, long split 12-18 words
  (tiny sentences stop at 18): checks the files and keys written (tests/test_experiments.py).
* `cpu`: the cpu preset shared by the study scripts (`sweep_scores.CPU_OVERRIDES`: half the
  demo's width, Glorot initialisation, Adam 3e-3, 400 updates of 64 pairs, the last checkpoint
  evaluated with beam 5 on 1,000 test pairs, about 100 of them of 40-80 words). The paper's
  initialisation keeps attention near uniform for the first few hundred steps (measured: demo
  sizes, 200 steps, test BLEU 0.8, AER 0.96), hence Glorot: the study compares the variants
  early in training. Its measured wall time is in alignment_study.json (`total_wall_s`).

Outputs in OUT: alignment_study.json (rows, significance, every run record, environment),
alignment_study.md (the two tables), alignment_study.png (test BLEU), alignment_study_long.png
(long-split BLEU) and alignment_study_aer.png (test AER), each with one-standard-deviation bars.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `configs` is a top-level package of the checkout.
  sys.path.insert(0, str(REPO_ROOT))

from experiments import reproduce_paper as rp  # noqa: E402
from experiments import sweep_scores as sweep  # noqa: E402
from seq2seq import input_pipeline  # noqa: E402

PRESETS = ("smoke", "cpu")
BASELINE = "additive"
LONG = input_pipeline.LONG_TEST
SPLITS = ("test", LONG)

FERTILITY_WEIGHT = 0.1  # train.fertility_weight of the penalty variants.
SUPERVISION_WEIGHT = 1.0  # train.attention_supervision of `supervised`.
PREV_FILTERS = 8  # model.prev_attention_filters of the previous-attention variants.
GNMT_BETA = 0.2  # decode.coverage_penalty of `gnmt-beam` (Wu et al. 2016 use 0.2).

LONG_WORDS = {"smoke": (12, 18), "cpu": (40, 80)}  # Source words of the long split, per preset.


@dataclasses.dataclass(frozen=True)
class Variant:
  """One configuration of the study: config overrides on the preset's RNNsearch."""

  name: str
  overrides: dict[str, Any]
  decode_only: bool = False  # Decodes the baseline's checkpoints (same seed) instead of training.


VARIANTS = (
  Variant(BASELINE, {}),
  Variant("coverage", {"model.coverage": True}),
  Variant("coverage+fertility", {"model.coverage": True, "model.fertility": True}),
  Variant("prev-attention", {"model.prev_attention_filters": PREV_FILTERS}),
  Variant("fertility-penalty", {"train.fertility_weight": FERTILITY_WEIGHT}),
  Variant("supervised", {"train.attention_supervision": SUPERVISION_WEIGHT}),
  Variant("supervised-0.1", {"train.attention_supervision": SUPERVISION_WEIGHT / 10}),
  Variant(
    "supervised-mse",
    {
      "train.attention_supervision": SUPERVISION_WEIGHT,
      "train.attention_supervision_loss": "mse",
    },
  ),
  Variant("agreement", {"model.name": "agreement"}),
  Variant(
    "coverage+fertility+penalty",
    {"model.coverage": True, "model.fertility": True, "train.fertility_weight": FERTILITY_WEIGHT},
  ),
  Variant(
    "coverage+prev-attention",
    {"model.coverage": True, "model.prev_attention_filters": PREV_FILTERS},
  ),
  Variant("gnmt-beam", {"decode.coverage_penalty": GNMT_BETA}, decode_only=True),
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


def preset_overrides(preset: str) -> dict[str, Any]:
  """Settings every run of `preset` shares (on top of sweep_scores' preset config file)."""
  lo, hi = LONG_WORDS[preset]
  return {"data.long_test_min_words": lo, "data.long_test_max_words": hi}


def build_runs(
  preset: str, variants: Sequence[Variant], seeds: Sequence[int], out: Path, sets: dict
) -> dict[str, list[rp.Run]]:
  """{variant name: its runs, one per seed}, in `variants` order."""
  configs = [{"name": v.name, "overrides": v.overrides} for v in variants]
  return sweep.build_runs(
    preset, configs, seeds, out, sets, shared_overrides=preset_overrides(preset)
  )


def split_results(run: rp.Run, split: str) -> dict[str, Any]:
  """WORKDIR/eval/SPLIT/results.json of a finished run."""
  return json.loads((run.workdir / "eval" / split / "results.json").read_text())


def references(run: rp.Run, split: str) -> list[str]:
  """Reference translations of `split` ("test" or the long split) from the run's corpus."""
  config, test = run.config(), sweep.test_examples(run)
  if split == LONG:
    lo, hi = config.data.long_test_min_words, config.data.long_test_max_words
    return [test[i].tgt for i in input_pipeline.long_test_indices(test, lo, hi)]
  return [ex.tgt for ex in test]


def mark_identical(
  significance: dict[str, dict[str, Any]], runs: dict[str, list[rp.Run]], split: str
) -> None:
  """Sets p = 1 (and `identical_to_baseline`) where a configuration's `split` hypotheses equal
  the baseline's for every shared seed: sacrebleu's bootstrap gives identical systems
  p = 1 / (n + 1), which would read as a significant difference."""
  base = {r.config().seed: r for r in runs[BASELINE]}
  for name, name_runs in runs.items():
    paired = [(base[r.config().seed], r) for r in name_runs if r.config().seed in base]
    same = bool(paired) and all(
      sweep.hypotheses(b, split) == sweep.hypotheses(r, split) for b, r in paired
    )
    if name != BASELINE and same:
      significance[name] |= {"p_value": 1.0, "identical_to_baseline": True}


def run_variant(variant: Variant, runs: Sequence[rp.Run], baseline: Sequence[rp.Run]) -> list:
  """Trains and evaluates (or, decode-only, re-evaluates the baseline's copy) every seed's run;
  their records, with the long split's results added."""
  records = []
  for run, base in zip(runs, baseline, strict=True):
    if variant.decode_only and not (rp.seed_from(run, base, run.config()) or run.workdir.exists()):
      raise SystemExit(f"{run.name} decodes {base.name}'s checkpoints, and it has none")
    record = rp.execute(run)
    record["results"][LONG] = split_results(run, LONG)
    record["decode_only_from"] = base.name if variant.decode_only else None
    records.append(record)
  return records


def summarise(
  variant: Variant, records: Sequence[dict[str, Any]], runs: Sequence[rp.Run]
) -> dict[str, Any]:
  """One row: sweep_scores' aggregate (test split) plus every `METRICS` figure per split."""
  row = sweep.aggregate(variant.name, records, runs)
  row["decode_only"] = variant.decode_only
  for split in SPLITS:
    for key in METRICS:
      values = [rec["results"][split].get(key) for rec in records]
      row[f"{split}_{key}_mean"], row[f"{split}_{key}_std"] = sweep.mean_std(values)
    row[f"{split}_sentences"] = records[0]["results"][split]["num_sentences"]
  return row


def markdown(rows: Sequence[dict[str, Any]], preset: str, long_words: tuple[int, int]) -> str:
  """The study's two tables: the test split, then the long-sentence split."""
  f = rp._fmt

  def ms(row, split, key, digits=2):
    mean, std = row[f"{split}_{key}_mean"], row[f"{split}_{key}_std"]
    return f"{f(mean, digits)} ± {f(std, digits)}"

  n_test, n_long = rows[0]["test_sentences"], rows[0][f"{LONG}_sentences"]
  lines = [
    f"# Attention trained to align ({preset} preset)",
    "",
    f"## Test split ({n_test} sentences)",
    "",
    "| variant | seeds | BLEU | No-UNK BLEU | AER | AER shift -1 | AER shift +1 | AER (>= 0.3) "
    f"| entropy | over | under | tokens/s | p vs {BASELINE} |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ]
  for r in rows:
    lines.append(
      f"| {r['name']} | {len(r['seeds'])} | {ms(r, 'test', 'bleu')} | "
      f"{ms(r, 'test', 'bleu_no_unk')} | {ms(r, 'test', 'aer', 3)} | "
      f"{ms(r, 'test', 'aer_shift_minus1', 3)} | {ms(r, 'test', 'aer_shift_plus1', 3)} | "
      f"{ms(r, 'test', 'aer_threshold', 3)} | {ms(r, 'test', 'attention_entropy')} | "
      f"{ms(r, 'test', 'over_translation', 1)} | {ms(r, 'test', 'under_translation', 1)} | "
      f"{f(r['train_tokens_per_s_median'], 0)} | {f(r['p_value_vs_baseline'], 4)} |"
    )
  lo, hi = long_words
  lines += [
    "",
    f"## Long sentences: test pairs of {lo}-{hi} source words ({n_long} sentences)",
    "",
    f"| variant | BLEU | No-UNK BLEU | AER | AER shift -1 | over | under | p vs {BASELINE} |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
  ]
  for r in rows:
    lines.append(
      f"| {r['name']} | {ms(r, LONG, 'bleu')} | {ms(r, LONG, 'bleu_no_unk')} | "
      f"{ms(r, LONG, 'aer', 3)} | {ms(r, LONG, 'aer_shift_minus1', 3)} | "
      f"{ms(r, LONG, 'over_translation', 1)} | {ms(r, LONG, 'under_translation', 1)} | "
      f"{f(r['p_value_long_vs_baseline'], 4)} |"
    )
  lines += [
    "",
    "Mean ± sample standard deviation over seeds. BLEU: sacrebleu (13a); No-UNK: sentences with",
    "no unknown word in source or reference. AER: teacher-forced attention against the gold",
    "links (argmax; shifted one target word back / forward; weights >= 0.3). entropy: mean",
    "attention entropy (nats). over: output words repeated beyond their count in the reference;",
    "under: source content words that no output word attends to most (both summed over the",
    "split). tokens/s: median training log window (compilation left out; gnmt-beam shows",
    "additive's, whose checkpoints it decodes). p: sacrebleu paired bootstrap of BLEU against",
    f"{BASELINE}, hypotheses of shared seeds concatenated (1 where they equal {BASELINE}'s).",
  ]
  return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = sweep.common_parser(__doc__)
  p.add_argument("--variants", default=",".join(VARIANT_NAMES), help="comma-separated variants")
  args = p.parse_args(argv)
  sweep.check_common(p, args)
  names = sweep.names_flag(p, args.variants, VARIANT_NAMES, "variant")
  if BASELINE not in names:
    p.error(f"--variants must include the baseline {BASELINE!r}")
  args.variants = [v for v in VARIANTS if v.name in names]  # Baseline first: the study's order.
  return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  args = parse_args(argv)
  out, runs = sweep.prepare(
    args, lambda out, sets: build_runs(args.preset, args.variants, args.seeds, out, sets)
  )
  start = time.perf_counter()
  if args.training == "together":  # Decode-only variants reuse the baseline's training.
    sweep.train_groups({v.name: runs[v.name] for v in args.variants if not v.decode_only})
  records = {v.name: run_variant(v, runs[v.name], runs[BASELINE]) for v in args.variants}
  rows = [summarise(v, records[v.name], runs[v.name]) for v in args.variants]
  significance = {}
  for split in SPLITS:
    refs = references(runs[BASELINE][0], split)
    significance[split] = sweep.paired_bootstrap(
      runs, BASELINE, refs, args.bootstrap_samples, split=split
    )
    mark_identical(significance[split], runs, split)
  for row in rows:
    row["p_value_vs_baseline"] = significance["test"][row["name"]]["p_value"]
    row["p_value_long_vs_baseline"] = significance[LONG][row["name"]]["p_value"]
  long_words = LONG_WORDS[args.preset]
  tested = {
    "hypotheses": "per split, concatenated over the seeds shared with the baseline",
    "per_split": significance,
  }
  result = sweep.study_record(
    args,
    BASELINE,
    rows,
    tested,
    records,
    start,
    preset_overrides=preset_overrides(args.preset),
    long_split_words=list(long_words),
    variants={v.name: {**v.overrides, "decode_only": v.decode_only} for v in args.variants},
  )
  (out / "alignment_study.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
  (out / "alignment_study.md").write_text(markdown(rows, args.preset, long_words))
  names = [r["name"] for r in rows]
  lo, hi = long_words
  for suffix, key, label in (
    ("", "test_bleu", "test BLEU"),
    ("_long", f"{LONG}_bleu", f"BLEU, test pairs of {lo}-{hi} words"),
    ("_aer", "test_aer", "test AER (argmax)"),
  ):
    sweep.bar_plot(
      names,
      [r[f"{key}_mean"] for r in rows],
      [r[f"{key}_std"] for r in rows],
      out / f"alignment_study{suffix}.png",
      f"{label} over seeds {args.seeds} ({args.preset})",
      ylabel=label,
    )
  print((out / "alignment_study.md").read_text())
  print(f"wrote {out / 'alignment_study.json'} ({result['total_wall_s']:.0f} s)")
  return result


if __name__ == "__main__":
  main()

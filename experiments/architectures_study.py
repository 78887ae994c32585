"""Attention against attribution across architectures (#95): RNNsearch, Luong et al.'s decoder
and a Transformer, plain and with one head supervised, over seeds, on the embedded corpus (its
gold alignments are the referee).

    python -m experiments.architectures_study --out runs/architectures [--preset smoke|cpu]
        [--seeds 0,1,2] [--points rnnsearch,luong,transformer,transformer-supervised]
        [--attribution-sentences 200] [--set key=value ...] [--training together|sequential]
        [--launcher local|jobs|cores] [--only POINT,...] [--collect] [--bootstrap-samples 1000]
        [--compilation-cache DIR]

Points (`POINTS`; each a set of config overrides on the preset's RNNsearch, additive score):

* `rnnsearch`: the paper's decoder, the baseline every other point is tested against.
* `luong`: Luong et al.'s decoder (one LSTM layer, input feeding) with the `general` score.
* `transformer`: a Transformer encoder and decoder (`TRANSFORMER`, tuned in that one place:
  2 layers of 4 heads on each side, scaled dot product, Adam with b2 = 0.98 peaking at 1e-3
  after 100 warm-up updates, then the inverse square root), reporting its top layer's mean of
  heads. The rest is the preset's, as for the recurrent points: its widths (128 on each side at
  the cpu preset), no dropout, no label smoothing, gradients clipped at norm 1
  (configs/transformer.py's recipe has dropout and label smoothing of 0.1 and no clipping).
* `transformer-supervised`: the same, reporting one head of the penultimate layer
  (`SUPERVISED_HEAD`) and training it towards the gold links (`SUPERVISED`: cross-entropy,
  weight 1), as Garg et al. 2019 do; the embedded corpus gives training its gold links.

A named grid on the generic sweep (`experiments/lib/sweeps.py`, whose flags it shares: jobs file,
collecting, resuming): every point runs once per seed in OUT/runs/POINT/seed_N.
`--training together` (default) trains a point's seeds as one vmapped group
(`seq2seq/seed_group.py`: they share the first seed's data order), which works for every point
(checked at the smoke preset: the Transformer with its supervised head and Luong's LSTM);
`sequential` trains them one after another, each seed with its own data order.

Evaluation, beyond every sweep's test figures (BLEU, chrF, AER of the reported attention, ...,
and the paired bootstrap p of test BLEU against `rnnsearch`, seeds pooled), of each run's
evaluated checkpoint (`measure`, cached in WORKDIR/architectures_measured.json):

* attribution, on the first `--attribution-sentences` test pairs with their references forced:
  AER of word saliency's links (gradient times input, Ding et al. 2019:
  `seq2seq.decoding.attribution`) and of the attention's (argmax) on those same pairs, and the
  mean over target words of the Spearman rank correlation between the word's attention row and
  its saliency row over the source words (Jain and Wallace 2019's comparison);
* for a Transformer decoder, the teacher-forced AER of every layer's heads and of each layer's
  mean of heads on the validation split; the one with the lowest is chosen per seed, and its
  test AER reported beside the reported attention's and each layer mean's. Nothing is chosen
  on the test split.

Each figure is reported as the mean ± sample standard deviation over seeds.

Presets:

* `smoke`: configs/tiny.py for `presets.SMOKE_STEPS` steps: checks the files and keys written
  (tests/experiments/test_experiments_studies.py).
* `cpu`: the cpu preset shared by the study scripts (`experiments/lib/presets.py`: half the
  demo's width, 400 updates of 64 pairs, the last checkpoint evaluated on 1,000 test pairs, 200
  validation pairs): early in training, as the alignment and structures studies compare.

`--config FILE[:ARG]` runs the study on another config; AER needs a corpus with gold alignments
(the embedded one), and `transformer-supervised` a word tokenizer.

Outputs in OUT: architectures_study.json (rows, significance, every run record and measurement,
environment), architectures_study.md (the tables), architectures_study.png (test BLEU) and
architectures_study_aer.png (attention's and saliency's AER on the attributed pairs).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from experiments.lib import driver, plots, reports, stats
from experiments.lib import runs as runs_lib
from experiments.lib.pages import architectures_study as page
from experiments.lib.reports import fmt, mean_sd
from experiments.lib.runs import Run
from experiments.lib.sweeps import Point, Sweep
from seq2seq import evaluation, restoring, settings
from seq2seq import sharding as rt
from seq2seq.common import files
from seq2seq.data import input_pipeline, metrics
from seq2seq.decoding import decode, inference

BASELINE = "rnnsearch"
BLOCKS = "layers=2, heads=4"  # Each side of the Transformer.
TRANSFORMER: dict[str, Any] = {
  "model.encoder": f"transformer({BLOCKS})",
  "model.decoder": f"transformer({BLOCKS})",
  "model.score": "scaled",
  "train.warmup_steps": 100,
  "train.decay": "rsqrt",
  "train.adam_b2": 0.98,
  "train.learning_rate": 1e-3,
}
SUPERVISED_HEAD = "alignment_layer=1, alignment_head=1"  # Head 1 of the penultimate layer.
SUPERVISED = "supervision(weight=1.0)"  # `transformer-supervised`'s loss term.

POINTS = (
  Point(BASELINE, {}),
  Point("luong", {"model.decoder": "luong(cell=lstm, layers=1)", "model.score": "general"}),
  Point("transformer", TRANSFORMER),
  Point(
    "transformer-supervised",
    {
      **TRANSFORMER,
      "model.decoder": f"transformer({BLOCKS}, {SUPERVISED_HEAD})",
      "train.loss_terms": SUPERVISED,
    },
  ),
)
POINT_NAMES = tuple(p.name for p in POINTS)
MEASURE_FILE = "architectures_measured.json"  # In each run workdir (the report is OUT/...).
ATTRIBUTION = ("attribution_attention_aer", "attribution_saliency_aer", "attribution_spearman")


class ArchitecturesStudy(driver.PresetStudy):
  """RNNsearch against Luong's decoder and a Transformer: attention and attribution as aligners."""

  module = "experiments.architectures_study"
  report_name = "architectures_study"

  def add_arguments(self, parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--points", default=",".join(POINT_NAMES), help="comma-separated")
    parser.add_argument(
      "--attribution-sentences",
      type=int,
      default=200,
      help="test pairs whose word saliency is measured against their attention",
    )

  def points(self, args: argparse.Namespace) -> list[Point]:
    if args.attribution_sentences < 1:
      raise ValueError("--attribution-sentences must be at least 1")
    names = driver.names_flag(args.points, POINT_NAMES, "point")
    if BASELINE not in names:
      raise ValueError(f"--points must include the baseline {BASELINE!r}")
    return [p for p in POINTS if p.name in names]  # Baseline first: the study's order.

  def baseline(self, args: argparse.Namespace, points: Sequence[Point]) -> str:
    return BASELINE

  def report(
    self, sweep: Sweep, args: argparse.Namespace, trained: set[str], start: float
  ) -> dict[str, Any]:
    measured = {
      p.name: [measure(run, args.attribution_sentences) for run in sweep.runs(p)]
      for p in sweep.points
    }
    result = driver.collect(
      sweep,
      args,
      BASELINE,
      trained,
      start,
      points={p.name: p.overrides for p in sweep.points},
      attribution_sentences=args.attribution_sentences,
      attribution_method="grad_x_input",
    )
    for row in result["configurations"]:
      row.update(summarise(measured[row["name"]]))
    result["measured"] = {
      run.name: m
      for p in sweep.points
      for run, m in zip(sweep.runs(p), measured[p.name], strict=True)
    }
    rows, label = result["configurations"], driver.setting(result)
    names = [r["name"] for r in rows]
    seeds = f"seeds {sweep.seeds} ({label})"
    plots.bar_plot(
      names,
      [r["bleu_mean"] for r in rows],
      [r["bleu_std"] for r in rows],
      sweep.out / "architectures_study.png",
      f"test BLEU over {seeds}",
    )
    plots.grouped_bars(
      {
        way: {r["name"]: (r[f"{key}_mean"], r[f"{key}_std"]) for r in rows}
        for way, key in (("attention", ATTRIBUTION[0]), ("word saliency", ATTRIBUTION[1]))
      },
      sweep.out / "architectures_study_aer.png",
      f"AER on the first {rows[0]['attribution_pairs']} test pairs, {seeds}",
      xlabel="point",
      ylabel="AER (lower is better)",
    )
    driver.write(sweep.out, self.report_name, result, markdown(result))
    return result


def measure(run: Run, sentences: int) -> dict[str, Any]:
  """The attribution figures of a finished run's evaluated checkpoint and, for a Transformer
  decoder, its heads' AER (cached in WORKDIR/MEASURE_FILE for its last evaluation)."""
  path = run.workdir / MEASURE_FILE
  cached = runs_lib.cached_measurement(
    run, MEASURE_FILE, lambda cached: cached["attribution"]["sentences"] == sentences
  )
  if cached is not None:
    return cached
  config = run.config()
  runtime, run_settings = rt.Runtime(), settings.validate(config)
  data = rt.load_data(run_settings, run.workdir)
  sizes = (data.src_tokenizer.size, data.tgt_tokenizer.size)
  state = restoring.restore_for_eval(run_settings, run.workdir, *sizes, runtime)
  dec = decode.DecodeSettings.from_config(config)
  out: dict[str, Any] = {"step": int(state.step)}
  out["attribution"] = attribution_figures(state, data, dec, sentences)
  if run_settings.model.decoder.name == "transformer":
    out["heads"] = head_figures(state, data, dec)
  if jax.process_index() == 0:
    files.write_atomic(path, json.dumps(out, indent=2) + "\n")
  return out


def gold(data: input_pipeline.Data, split: str, count: int | None = None) -> list:
  """The gold links of the first `count` pairs of `split` (all: None); ValueError without."""
  links = evaluation.gold_links(data.raw(split)[:count])
  if links is None:
    raise ValueError(f"the {split} split has no gold links: the study needs the embedded corpus")
  return links


def attribution_figures(state, data, dec: decode.DecodeSettings, sentences: int) -> dict:
  """AER of attention's and of word saliency's argmax links on the first `sentences` test pairs
  (their references forced), and the mean Spearman correlation of the two, row by row."""
  test = data.splits["test"]
  count = min(sentences, len(test))
  split = input_pipeline.subset(test, np.arange(count))
  sure = gold(data, "test", count)
  attention = inference.words_of(data, split, inference.teacher_forced_attention(state, split, dec))
  saliency = inference.words_of(data, split, inference.saliency_split(state, split, dec))
  rhos = [
    stats.spearman(a_row, s_row)
    for a, s in zip(attention, saliency, strict=True)
    for a_row, s_row in zip(a, s, strict=True)
  ]
  defined = [r for r in rhos if r is not None]
  return {
    "sentences": sentences,
    "pairs": count,
    "attention_aer": aer(attention, sure),
    "saliency_aer": aer(saliency, sure),
    "spearman": float(np.mean(defined)) if defined else None,
    "spearman_words": len(defined),
    "target_words": len(rhos),
  }


def aer(word_matrices: Sequence[np.ndarray], sure: Sequence[set]) -> float:
  """Corpus AER of each target word's argmax link against the gold links."""
  return metrics.alignment_error_rate([metrics.argmax_links(m) for m in word_matrices], sure)


def head_figures(state, data, dec: decode.DecodeSettings) -> dict:
  """The AER of every layer's heads (`L1H2`) and of each layer's mean of heads (`L1mean`) on
  the validation and test splits, and the one with the lowest validation AER."""
  out: dict[str, Any] = {}
  for name in ("valid", "test"):
    split = data.splits[name]
    forced = inference.teacher_forced_attention(state, split, dec, output="alpha_layers")
    n_layers, n_heads = forced[0].shape[1:3]
    ways = {}
    for layer in range(n_layers):
      for head in range(n_heads):
        ways[f"L{layer + 1}H{head + 1}"] = [f[:, layer, head] for f in forced]
      ways[f"L{layer + 1}mean"] = [f[:, layer].mean(axis=1) for f in forced]
    sure = gold(data, name)
    out[name] = {way: aer(inference.words_of(data, split, m), sure) for way, m in ways.items()}
  best = min(out["valid"], key=out["valid"].get)
  return {"layers": n_layers, "heads": n_heads, "best_on_valid": best, **out}


def summarise(measured: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """A point's measured figures over its seeds, for its row (None where a seed lacks one)."""
  row: dict[str, Any] = {"attribution_pairs": measured[0]["attribution"]["pairs"]}
  for key in ATTRIBUTION:
    values = [m["attribution"][key.removeprefix("attribution_")] for m in measured]
    row[f"{key}_mean"], row[f"{key}_std"] = stats.mean_std(values)
  heads = [m.get("heads") for m in measured]
  if any(h is None for h in heads):
    return {**row, "layers": None}
  row["layers"] = heads[0]["layers"]
  row["best_heads"] = [h["best_on_valid"] for h in heads]
  for key, split in (("head_aer_best", "test"), ("head_aer_best_valid", "valid")):
    values = [h[split][h["best_on_valid"]] for h in heads]
    row[f"{key}_mean"], row[f"{key}_std"] = stats.mean_std(values)
  for layer in range(1, row["layers"] + 1):
    values = [h["test"][f"L{layer}mean"] for h in heads]
    row[f"layer{layer}_aer_mean"], row[f"layer{layer}_aer_std"] = stats.mean_std(values)
  return row


def markdown(result: dict[str, Any]) -> str:
  """The study's tables: the test split, attention against attribution, the Transformer heads."""
  rows, baseline = result["configurations"], result["baseline"]
  header = ["point", "seeds", "test BLEU", "test chrF", "AER", "tokens/s", f"p vs {baseline}"]
  cells = [
    [r["name"], str(len(r["seeds"])), mean_sd(r, "bleu"), mean_sd(r, "chrf")]
    + [mean_sd(r, "aer", 3), fmt(r["train_tokens_per_s_median"], 0)]
    + [fmt(r["p_value_vs_baseline"], 4)]
    for r in rows
  ]
  lines = [
    f"# Attention against attribution across architectures ({driver.setting(result)})",
    "",
    "## Test split",
    "",
    *reports.table(header, cells),
    "",
    "Mean ± sample standard deviation over seeds. BLEU and chrF: sacrebleu on the detokenised "
    "test split. AER: the reported attention of the references, teacher-forced, against the "
    "gold links (argmax). tokens/s: median training log window.",
    stats.bootstrap_caption(baseline, "BLEU"),
    "",
    *page.tables(result),
  ]
  return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
  return driver.main(ArchitecturesStudy(__doc__), argv)


if __name__ == "__main__":
  main()

"""Reproduces Table 1, Fig. 2 and Fig. 3 of Bahdanau et al. (2014) at a chosen scale.

    python -m experiments.reproduce_paper --out runs/paper [--preset smoke|cpu|paper]
        [--corpus synthetic|local] [--with-star] [--seeds 0,1,2] [--set key=value ...]
        [--compilation-cache DIR]

Trains RNNencdec-30, RNNsearch-30, RNNencdec-50 and RNNsearch-50 (and, with `--with-star`,
RNNsearch-50*: RNNsearch-50 trained twice as long) one after another, each an ordinary workdir
OUT/runs/NAME trained with `seq2seq.train.train_and_evaluate`: rerunning the script resumes
unfinished runs and reuses finished ones, every run can be inspected with TensorBoard, and the
exact `main.py` command that trains it alone is written into OUT/summary.json. The *-30 models
train on pairs of at most 30 words (`data.max_len=30`), the *-50 ones on at most 50; the test
split is evaluated in full, whatever its lengths. Every `--set key=value` (dotted config field,
e.g. `--set train.valid_bleu=false`) applies to every run.

With `--seeds 0,1,2` every model trains once per seed (OUT/runs/NAME/seed_S, one after another):
Table 1 gives the mean and sample standard deviation over the seeds, and Fig. 2 the mean BLEU of
each length bin with a band of one standard deviation. One seed (the default, 0) keeps the
layout OUT/runs/NAME.

RNNsearch-50* starts from a copy of RNNsearch-50's finished workdir and continues to twice the
steps; resuming is bit-identical to an uninterrupted run, so this equals training it from
scratch (which its `main.py` command does) at half the cost.

Presets (one shared config base each, changed only in `model.name` and `data.max_len`):

* `smoke`: `configs/tiny.py` for a few steps, no validation BLEU (seconds; the test).
* `cpu`: `configs/demo.py` sizes on an embedded corpus holding sentences of up to 80 words
  (`data.synthetic.max_len=80`), sized so the four runs finish in under 90 minutes on 2 CPU
  cores. The step budget: the demo trains at about `DEMO_TOKENS_PER_S` target tokens/s on 2
  cores; of the `CPU_BUDGET_MIN` minutes, the fraction `CPU_TRAIN_FRACTION` goes to training
  steps, shared equally by the four models (the paper also gave each model the same time), and
  the rest to building the corpus, compiling, validation BLEU and the final beam search over
  the validation and test splits. A model's steps are its token budget divided by the target
  tokens of one batch: `data.batch_size` times the mean target length (+ EOS) of the training
  pairs it keeps, counted on the corpus itself, so the *-30 models take more (shorter) steps.
* `paper`: `configs/rnnencdec.py` / `configs/rnnsearch.py` (`:maxlen=30|50`), the paper's sizes,
  for machines with accelerators.

Outputs in OUT: table1.md and table1.json (test BLEU on all sentences and on those without
unknown words, AER of the RNNsearch models: Table 1; how trained each model is, its final
validation BLEU and gain over the last quarter of the steps; the JSON also holds Fig. 2's numbers
and the learning curves), bleu_vs_length.png (test BLEU by source length: Fig. 2),
learning_curves.png (validation BLEU and loss against updates and minutes, mean ± sd over
seeds), alignments/ (RNNsearch-50's test heatmaps: Fig. 3), summary.json (every result, resolved
config, command and wall time, package versions, total time). The corpus is built once in
OUT/data (`data.cache_dir`) and shared by the runs. Compiled XLA programs are kept in JAX's
persistent compilation cache (`--compilation-cache`, default OUT/jax_cache), which runs of the
same model and resumed runs then skip. Rerun, the script resumes unfinished runs; once every run
had finished and OUT's summary reports on them all, it keeps that summary and draws the tables
and figures again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from experiments.lib import driver, presets, reports, stats, sweeps
from experiments.lib import plots as study_plots
from experiments.lib import runs as runs_lib
from experiments.lib.configs import apply_overrides, load_config, parse_sets
from experiments.lib.reports import fmt
from experiments.lib.runs import Run
from seq2seq import plots
from seq2seq import sharding as rt
from seq2seq.data import builders, input_pipeline

PRESETS = ("smoke", "cpu", "paper")
CORPORA = ("synthetic", "local")

# The cpu preset's budget (see the module docstring).
CPU_BUDGET_MIN = 90  # Wall-clock minutes for the four models on 2 CPU cores.
DEMO_TOKENS_PER_S = 4_000  # configs/demo.py's training throughput on 2 CPU cores.
CPU_TRAIN_FRACTION = 0.6  # Share of the budget spent in training steps.
CPU_EVALS_PER_RUN = 4  # Validation passes (loss, greedy BLEU, best checkpoint) per run.
CPU_LONG_SENTENCES = 80  # data.synthetic.max_len: the corpus has sentences up to this long.


@dataclasses.dataclass(frozen=True)
class Model:
  """One row of Table 1: the model family, its training length cut-off and step multiplier."""

  name: str  # As the paper writes it, e.g. "RNNsearch-50*".
  family: str  # config.model.name: "rnnencdec" or "rnnsearch".
  max_len: int  # data.max_len.
  steps_factor: int = 1  # Multiple of the preset's steps (2 for the starred model).

  @property
  def dirname(self) -> str:
    return self.name.replace("*", "star")


MODELS = (
  Model("RNNencdec-30", "rnnencdec", 30),
  Model("RNNsearch-30", "rnnsearch", 30),
  Model("RNNencdec-50", "rnnencdec", 50),
  Model("RNNsearch-50", "rnnsearch", 50),
)
STAR = Model("RNNsearch-50*", "rnnsearch", 50, steps_factor=2)


def mean_target_tokens(config: ml_collections.ConfigDict, data_dir: Path, max_len: int) -> float:
  """Mean target tokens (words + EOS) of the training pairs kept by `data.max_len=max_len`.

  Builds the corpus in `data_dir` if needed. Counts whitespace words, which is what the word
  tokenizer keeps (a SentencePiece vocabulary makes this an estimate).
  """
  corpus = builders.prepare_corpus(input_pipeline.DataSettings.from_config(config), data_dir)
  lengths = [
    len(ex.tgt.split()) + 1
    for ex in corpus.read("train")
    if len(ex.src.split()) <= max_len and len(ex.tgt.split()) <= max_len
  ]
  if not lengths:
    raise ValueError(f"no training pair of at most {max_len} words in {data_dir}")
  return float(np.mean(lengths))


def cpu_steps(batch_size: int, tokens_per_pair: float, num_models: int) -> int:
  """Steps that spend one model's share of the cpu preset's training time."""
  train_s = CPU_BUDGET_MIN * 60 * CPU_TRAIN_FRACTION / num_models
  return max(1, int(train_s * DEMO_TOKENS_PER_S / (batch_size * tokens_per_pair)))


def build_runs(
  preset: str,
  corpus: str,
  with_star: bool,
  out: Path,
  sets: dict[str, str],
  seeds: Sequence[int] = (0,),
) -> dict[str, list[Run]]:
  """{model name: its runs, one per seed}, in training order (RNNsearch-50 before
  RNNsearch-50*)."""
  if not seeds or len(set(seeds)) != len(seeds):
    raise ValueError(f"--seeds {list(seeds)}: give distinct seeds")
  if len(seeds) > 1 and "seed" in sets:
    raise ValueError("--seeds and --set seed=... exclude each other")
  if preset not in PRESETS:
    raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
  if corpus not in CORPORA:
    raise ValueError(f"unknown corpus {corpus!r}; valid: {', '.join(CORPORA)}")
  models = [*MODELS, STAR] if with_star else list(MODELS)
  data_dir = (out / "data").resolve()
  shared: dict[str, Any] = {"data.corpus": corpus, "data.cache_dir": str(data_dir)}
  if preset == "smoke":
    shared |= presets.SMOKE
  if preset == "cpu":
    shared["data.synthetic.max_len"] = CPU_LONG_SENTENCES
  runs = {}
  for model in models:
    if preset == "paper":
      file = f"configs/{model.family}.py:maxlen={model.max_len}"
      overrides = dict(shared)
    else:
      file = "configs/tiny.py" if preset == "smoke" else "configs/demo.py"
      overrides = {**shared, "model.name": model.family, "data.max_len": model.max_len}
    overrides |= sets  # --set applies to every run and wins.
    config = apply_overrides(load_config(file), overrides)
    steps = config.train.num_steps
    if preset == "cpu" and "train.num_steps" not in sets:
      tokens = mean_target_tokens(config, data_dir, config.data.max_len)
      steps = cpu_steps(config.data.batch_size, tokens, len(MODELS))
      every = max(1, steps // CPU_EVALS_PER_RUN)
      overrides |= {"train.eval_every": every, "train.checkpoint_every": every}
    overrides["train.num_steps"] = steps * model.steps_factor
    workdir = out / "runs" / model.dirname
    if len(seeds) == 1 and not seeds[0]:
      runs[model.name] = [Run(model.name, file, overrides, workdir)]
    else:
      runs[model.name] = [
        Run(f"{model.name} seed {s}", file, {**overrides, "seed": s}, workdir / f"seed_{s}")
        for s in seeds
      ]
  return runs


# ---------------------------------------------------------------------- tables and figures
# Table 1's averaged columns: {row key: key of the test split's results.json}.
TABLE1_FIGURES = {
  "bleu_all": "bleu",
  "bleu_no_unk": "bleu_no_unk",
  "bleu_no_unk_plain": "bleu_no_unk_plain",
  "bleu_tokenized": "bleu_tokenized",
  "aer": "aer",
  "aer_threshold": "aer_threshold",
  "chrf": "chrf",
}


def table1(records: dict[str, Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
  """Rows of Table 1 from the test results of each model's runs ({model: records, one per
  seed}): every figure's mean over the seeds and, as KEY_std, its sample standard deviation (0
  for one seed); AER only for models that attend."""
  rows = []
  for model, recs in records.items():
    tests = [rec["results"]["test"] for rec in recs]
    row: dict[str, Any] = {"model": model, "seeds": [rec["config"]["seed"] for rec in recs]}
    for key, source in TABLE1_FIGURES.items():
      row[key], row[f"{key}_std"] = stats.mean_std([t.get(source) for t in tests])
    first = tests[0]
    row |= {key: first.get(key) for key in ("num_sentences", "num_no_unk", "beam_size")}
    row["step"] = first.get("step") if len(tests) == 1 else [t.get("step") for t in tests]
    rows.append(row)
  return rows


def fig2_curves(records: dict[str, Sequence[dict[str, Any]]]) -> dict[str, list[dict]]:
  """Fig. 2's lines: per model, each source-length bin's test BLEU, the mean over the seeds with
  its sample standard deviation as `bleu_std` (the bins are the same test sentences in every
  seed)."""
  curves = {}
  for model, recs in records.items():
    per_seed = [rec["results"]["test"]["bleu_by_length"] for rec in recs]
    bins = []
    for rows in zip(*per_seed, strict=True):
      mean, std = stats.mean_std([r["bleu"] for r in rows])
      bins.append({**rows[0], "bleu": mean, "bleu_std": std if len(recs) > 1 else None})
    curves[model] = bins
  return curves


def table1_markdown(rows: Sequence[dict[str, Any]], preset: str, corpus: str) -> str:
  """Table 1 as Markdown: BLEU (All, No UNK) and AER on the test split."""
  lines = [
    f"# Table 1: test BLEU ({preset} preset, {corpus} corpus)",
    "",
    "| Model | All | No UNK | No UNK (plain) | All (tokenised) | AER | sentences (No UNK) | step |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
  ]
  several = any(len(r["seeds"]) > 1 for r in rows)

  def cell(r: dict[str, Any], key: str, digits: int = 2) -> str:
    if not several or r[key] is None:
      return fmt(r[key], digits)
    return f"{fmt(r[key], digits)} ± {fmt(r[key + '_std'], digits)}"

  for r in rows:
    steps = r["step"] if isinstance(r["step"], list) else [r["step"]]
    lines.append(
      f"| {r['model']} | {cell(r, 'bleu_all')} | {cell(r, 'bleu_no_unk')} | "
      f"{cell(r, 'bleu_no_unk_plain')} | {cell(r, 'bleu_tokenized')} | {cell(r, 'aer', 3)} | "
      f"{r['num_sentences']} ({r['num_no_unk']}) | {', '.join(map(str, steps))} |"
    )
  lines += [""]
  if several:
    seeds = ", ".join(map(str, rows[0]["seeds"]))
    lines.append(f"Mean ± sample standard deviation over seeds {seeds}; step: each seed's.")
  lines += [
    "All: sacrebleu 13a BLEU on the whole detokenised test split. No UNK: the sentences without",
    "unknown words in source or reference, decoded again with <unk> forbidden (the paper's",
    "protocol, GroundHog's --ignore-unk); No UNK (plain): the same sentences from the ordinary",
    "decoding. All (tokenised): BLEU on the target vocabulary's words (multi-bleu.perl style).",
    "AER: teacher-forced attention (argmax) against the gold alignments of the embedded corpus",
    "(RNNsearch only).",
  ]
  return "\n".join(lines) + "\n"


def write_report(out: Path, records: dict[str, Sequence[dict[str, Any]]], args) -> list[dict]:
  """table1.{md,json}, bleu_vs_length.png, learning_curves.png and alignments/ in `out`, drawn
  from each model's run records ({model: one per seed}); Table 1's rows."""
  rows, fig2 = table1(records), fig2_curves(records)
  learning = sweeps.workdir_curves(
    {model: [Path(rec["workdir"]) for rec in recs] for model, recs in records.items()}
  )
  reports.write_json(
    out / "table1.json",
    {"preset": args.preset, "corpus": args.corpus, "rows": rows, "fig2": fig2, "curves": learning},
  )
  trained = [driver.how_trained(m, c) for m, c in learning.items() if c["final"] is not None]
  md = table1_markdown(rows, args.preset, args.corpus)
  (out / "table1.md").write_text(md + "".join(f"\n{line}\n" for line in trained))
  seeds = rows[0]["seeds"]
  over = f", mean ± sd over {len(seeds)} seeds" if len(seeds) > 1 else ""
  plots.bleu_vs_length(
    fig2, out / "bleu_vs_length.png", title=f"test BLEU by source length ({args.preset}{over})"
  )
  study_plots.learning_curves(
    learning, out / "learning_curves.png", title=f"Table 1's models ({args.preset}{over})"
  )
  source = Path(records[MODELS[-1].name][0]["workdir"])  # RNNsearch-50 (its first seed).
  copy_heatmaps(source / "eval" / "test" / "alignments", out / "alignments")
  return rows


def copy_heatmaps(heatmaps: Path, target: Path) -> None:
  """Replaces `target`'s PNGs with those in `heatmaps`, where the run drew some: a checkout that
  kept a finished reproduction's results but not its runs' heatmaps (they are not committed)
  keeps the committed figures when the report is redrawn."""
  pngs = sorted(heatmaps.glob("*.png")) if heatmaps.is_dir() else []
  if not pngs:
    return
  if target.exists():
    shutil.rmtree(target)
  target.mkdir(parents=True)
  for png in pngs:
    shutil.copy2(png, target / png.name)


def write_outputs(
  out: Path, records: dict[str, Sequence[dict[str, Any]]], args, total_s: float
) -> dict:
  """The report (`write_report`) and summary.json in `out`."""
  rows = write_report(out, records, args)
  seeds = rows[0]["seeds"]
  summary = {
    "preset": args.preset,
    "corpus": args.corpus,
    "with_star": args.with_star,
    "seeds": seeds,
    "sets": args.set,
    "table1": rows,
    "runs": {rec["name"]: rec for recs in records.values() for rec in recs},
    "total_wall_s": total_s,  # This invocation.
    "runs_wall_s": sum(rec["wall_s"] for recs in records.values() for rec in recs),
    "cpu_budget": {
      "budget_min": CPU_BUDGET_MIN,
      "demo_tokens_per_s": DEMO_TOKENS_PER_S,
      "train_fraction": CPU_TRAIN_FRACTION,
      "evals_per_run": CPU_EVALS_PER_RUN,
    }
    if args.preset == "cpu"
    else None,
    **reports.environment(),
  }
  reports.write_json(out / "summary.json", summary)
  return summary


# ---------------------------------------------------------------------- driver
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--out", required=True, help="output folder (runs go to OUT/runs/NAME)")
  p.add_argument("--preset", default="cpu", choices=PRESETS)
  p.add_argument("--corpus", default="synthetic", choices=CORPORA)
  p.add_argument("--with-star", action="store_true", help="also RNNsearch-50* (2x the steps)")
  p.add_argument("--seeds", default="0", help="train every model once per seed (0,1,2: 3 each)")
  p.add_argument(
    "--set",
    action="append",
    default=[],
    metavar="KEY=VALUE",
    help="dotted config override applied to every run (repeatable)",
  )
  p.add_argument(
    "--compilation-cache",
    default=None,
    help="JAX persistent compilation cache folder (default OUT/jax_cache; 'none': off)",
  )
  return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  args = parse_args(argv)
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  try:
    seeds = driver.seeds_flag(args.seeds)
    sets = parse_sets(args.set)
    runs = build_runs(args.preset, args.corpus, args.with_star, out, sets, seeds)
  except (ValueError, FileNotFoundError) as e:
    raise SystemExit(f"error: {e}") from e
  rt.enable_compilation_cache(args.compilation_cache or str(out / "jax_cache"))
  start = time.perf_counter()
  records: dict[str, list[dict[str, Any]]] = {}
  for name, model_runs in runs.items():
    records[name] = []
    for k, run in enumerate(model_runs):
      source = runs[MODELS[-1].name][k]  # RNNsearch-50 of the same seed.
      seeded = name == STAR.name and runs_lib.seed_from(run, source)
      records[name].append(
        {**runs_lib.execute(run), "seeded_from": source.name if seeded else None}
      )
  path = out / "summary.json"
  old = json.loads(path.read_text()) if path.exists() else {"runs": {}}
  done = [rec for recs in records.values() for rec in recs]
  if all(rec["reused"] for rec in done) and list(old["runs"]) == [rec["name"] for rec in done]:
    # Rerunning a finished reproduction draws its tables and figures again from the runs and
    # keeps the summary of the invocation that trained them (its date, load and time).
    write_report(out, records, args)
    print(
      f"every run had finished and {path} reports on them all: kept; tables and figures redrawn"
    )
    return old
  summary = write_outputs(out, records, args, time.perf_counter() - start)
  print((out / "table1.md").read_text())
  print(f"wrote {out / 'summary.json'} ({summary['total_wall_s']:.0f} s)")
  return summary


if __name__ == "__main__":
  main()

"""Sweeps the alignment (score) functions over seeds and compares them with the additive one.

    python experiments/sweep_scores.py --out runs/sweep [--preset smoke|cpu] [--seeds 0,1,2]
        [--scores additive,dot,general,scaled,cosine,location] [--baseline additive]
        [--set key=value ...] [--bootstrap-samples 1000] [--compilation-cache DIR]

A sweep is data: `configurations()` gives one list of dotted config overrides per score function
(`{"model.score": NAME}`), crossed with the seeds (`{"seed": N}`, which seeds initialisation,
dropout and the data order). The runs go one after another, each an ordinary workdir
OUT/runs/SCORE-seedN trained with `seq2seq.train.train_and_evaluate` (rerunning resumes or
reuses them; summary.json-style records with the exact main.py command are in sweep.json).
`dot`, `scaled` and `cosine` need `model.dec_hidden == 2 * model.enc_hidden`, which the tiny and
demo sizes satisfy. Presets: `smoke` = configs/tiny.py for a few steps (the test), `cpu` =
configs/demo.py with `CPU_OVERRIDES`, the cpu preset all three study scripts share: half the
demo's width (embeddings 64, encoder 64 per direction, decoder 128, attention and maxout 64),
Glorot initialisation, Adam 3e-3, `CPU_STEPS` = 400 updates of 64 pairs on a 20k-pair corpus
whose sentences reach 80 words (training keeps those of at most 30), the last checkpoint
evaluated on 1,000 test pairs with beam 5. It compares the score functions early in training,
at a budget that lets the three studies run in one working session on 2 CPU cores.
`--set key=value` applies to every run.

Reported per configuration (over its seeds): test BLEU mean and sample standard deviation, AER
(argmax and thresholded) mean and standard deviation and attention entropy (embedded corpus
only), training tokens/s (median over the train lines of metrics.jsonl, leaving out each run's
first window, which includes compiling), and the paired bootstrap test of sacrebleu
(`sacrebleu.significance.PairedTest`, test type "bs", seed SACREBLEU_SEED or 12345) of its test
BLEU against the baseline's. The test pairs the hypotheses of equal seeds: for each
configuration, the test hypotheses of every seed it shares with the baseline are concatenated
(seed order), as are the baseline's, against the references repeated once per seed; with one
seed this is the plain seed-0 comparison. Outputs: OUT/sweep.json, OUT/sweep.md and
OUT/sweep.png (test BLEU per configuration, error bars one standard deviation).

Training (`--training`): `together` (default) trains the seeds of one configuration as one
group, one compiled step vmapped over their stacked parameters (`seq2seq/seed_group.py`: the
seeds then differ in initialisation and dropout and share the first seed's data order), and
writes each seed's ordinary workdir; a group's wall time is split evenly over its seeds.
`sequential` trains them one after another with `main.py`'s loop (each seed also shuffles the
data its own way). Configurations always run one after another: their shapes differ.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `configs` is a top-level package of the checkout.
  sys.path.insert(0, str(REPO_ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import sacrebleu  # noqa: E402
from sacrebleu.significance import PairedTest  # noqa: E402

from experiments import reproduce_paper as rp  # noqa: E402
from seq2seq import input_pipeline, scores, seed_group, summary  # noqa: E402
from seq2seq.data import builders  # noqa: E402

PRESETS = ("smoke", "cpu")
DEFAULT_SCORES = ("additive", "dot", "general", "scaled", "cosine", "location")
PRESET_CONFIGS = {"smoke": "configs/tiny.py", "cpu": "configs/demo.py"}
CPU_STEPS = 400
# The `cpu` preset of every study script (this sweep, alignment_study, structural_study): one
# budget, so their baselines are the same model and their tables can be read side by side.
CPU_OVERRIDES: dict[str, Any] = {
  "model.emb_dim": 64,  # Half of configs/demo.py's width: about twice its tokens/s.
  "model.enc_hidden": 64,
  "model.dec_hidden": 128,  # = 2 * enc_hidden, as in the demo: every score applies.
  "model.attn_dim": 64,
  "model.maxout_dim": 64,
  "model.init": "glorot",  # The paper's init keeps attention uniform for hundreds of steps.
  "train.learning_rate": 3e-3,
  "data.synthetic.max_len": 80,  # Sentences up to 80 words exist (the long test split) ...
  "data.max_len": 30,  # ... but training keeps pairs of at most 30 tokens.
  "data.synthetic.train_pairs": 20_000,  # More than the 400 x 64 pairs seen.
  "data.synthetic.valid_pairs": 200,
  "data.synthetic.test_pairs": 1_000,
  "data.long_test_min_words": 40,  # The `test_long` split: test pairs of 40-80 source words.
  "data.long_test_max_words": 80,
  "train.num_steps": CPU_STEPS,
  "train.log_every": CPU_STEPS // 5,
  "train.eval_every": CPU_STEPS,  # One validation loss at the end ...
  "train.checkpoint_every": CPU_STEPS,
  "train.valid_bleu": False,  # ... and the last checkpoint is evaluated.
  "decode.num_heatmaps": 2,
}


def configurations(score_names: Sequence[str]) -> list[dict[str, Any]]:
  """The sweep: one {"name", "overrides"} per score function."""
  return [{"name": s, "overrides": {"model.score": s}} for s in score_names]


def build_runs(
  preset: str,
  configs: Sequence[dict[str, Any]],
  seeds: Sequence[int],
  out: Path,
  sets: dict,
  *,
  shared_overrides: dict[str, Any] | None = None,
) -> dict[str, list[rp.Run]]:
  """{configuration name: its runs, one per seed}, every run on the shared corpus OUT/data.

  `shared_overrides` (a caller's preset) apply to every run after the preset's own settings and
  before each configuration's overrides, the seed and `sets`.
  """
  shared: dict[str, Any] = {"data.cache_dir": str((out / "data").resolve())}
  if preset == "smoke":
    shared |= {
      "train.num_steps": rp.SMOKE_STEPS,
      "train.log_every": rp.SMOKE_STEPS // 2,
      "train.eval_every": rp.SMOKE_STEPS,
      "train.checkpoint_every": rp.SMOKE_STEPS,
      "train.valid_bleu": False,
    }
  elif preset == "cpu":
    shared |= CPU_OVERRIDES
  shared |= shared_overrides or {}
  runs: dict[str, list[rp.Run]] = {}
  for cfg in configs:
    runs[cfg["name"]] = [
      rp.Run(
        f"{cfg['name']}-seed{seed}",
        PRESET_CONFIGS[preset],
        {**shared, **cfg["overrides"], "seed": seed, **sets},
        out / "runs" / f"{cfg['name']}-seed{seed}",
      )
      for seed in seeds
    ]
  return runs


def train_groups(runs: dict[str, list[rp.Run]]) -> None:
  """Trains each configuration's unfinished seeds together (`seq2seq.seed_group`).

  Afterwards every run is finished, so `rp.execute` reuses it; WORKDIR/wall_time.json gets the
  group's wall time divided by its number of seeds.
  """
  for name_runs in runs.values():
    configs = [run.config() for run in name_runs]
    pairs = zip(name_runs, configs, strict=True)
    if len(name_runs) < 2 or all(rp.is_finished(run, c) for run, c in pairs):
      continue
    print(f"[{name_runs[0].name} ...] {len(name_runs)} seeds together", flush=True)
    start = time.perf_counter()
    seeds = [c.seed for c in configs]
    outcome = seed_group.train_together(configs[0], seeds, [r.workdir for r in name_runs])
    if "preempted_at_step" in outcome[0]:
      raise SystemExit(f"preempted at step {outcome[0]['preempted_at_step']}; rerun")
    share = (time.perf_counter() - start) / len(name_runs)
    for run in name_runs:
      (run.workdir / "wall_time.json").write_text(json.dumps({"seconds": share}) + "\n")


def train_tokens_per_s(workdir: Path) -> list[float]:
  """tokens_per_s of a run's train lines, without the first (it includes compiling)."""
  values = [r["tokens_per_s"] for r in summary.read_metrics(workdir) if r["split"] == "train"]
  return values[1:] if len(values) > 1 else values


def mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
  """Mean and sample standard deviation (0 for one value); (None, None) when any is missing."""
  if not values or any(v is None for v in values):
    return None, None
  std = statistics.stdev(values) if len(values) > 1 else 0.0
  return statistics.fmean(values), std


def test_examples(run: rp.Run) -> list[builders.Example]:
  """The test split's pairs, from the run's (built) corpus."""
  config = run.config()
  corpus = builders.prepare_corpus(config.data, input_pipeline.data_dir(config, run.workdir))
  return list(corpus.read("test"))


def test_references(run: rp.Run) -> list[str]:
  """The test split's reference translations."""
  return [ex.tgt for ex in test_examples(run)]


def hypotheses(run: rp.Run, split: str = "test") -> list[str]:
  return (run.workdir / "eval" / split / "hypotheses.txt").read_text().splitlines()


def paired_bootstrap(
  runs: dict[str, list[rp.Run]],
  baseline: str,
  references: list[str],
  n_samples: int,
  indices: Sequence[int] | None = None,
  split: str = "test",
) -> dict[str, dict[str, Any]]:
  """sacrebleu's paired bootstrap of every configuration against `baseline` (BLEU on `split`,
  whose `references` these are).

  Hypotheses of the seeds a configuration shares with the baseline are concatenated, paired
  seed by seed. {name: {"p_value", "bleu", "mean", "ci95", "seeds"}} (baseline: p_value None).
  `indices`: test only these sentences (hypotheses and `references` both filtered), e.g. a
  length bucket; None tests them all.
  """
  if indices is not None:
    references = [references[i] for i in indices]
    select = lambda lines: [lines[i] for i in indices]
  else:
    select = lambda lines: lines
  base_seeds = {r.config().seed: r for r in runs[baseline]}
  out: dict[str, dict[str, Any]] = {}
  for name, name_runs in runs.items():
    if name == baseline:
      continue
    paired = [(base_seeds[r.config().seed], r) for r in name_runs if r.config().seed in base_seeds]
    if not paired:
      out[name] = {"p_value": None, "note": f"no seed in common with {baseline}"}
      continue
    base_hyps = [h for b, _ in paired for h in select(hypotheses(b, split))]
    sys_hyps = [h for _, r in paired for h in select(hypotheses(r, split))]
    refs = references * len(paired)
    test = PairedTest(
      [(baseline, base_hyps), (name, sys_hyps)],
      {"BLEU": sacrebleu.metrics.BLEU()},
      references=[refs],
      test_type="bs",
      n_samples=n_samples,
    )
    signatures, table = test()
    base_result, result = table["BLEU"]
    out[name] = {
      "p_value": result.p_value,
      "bleu": result.score,
      "mean": result.mean,
      "ci95": result.ci,
      "baseline_bleu": base_result.score,
      "baseline_mean": base_result.mean,
      "baseline_ci95": base_result.ci,
      "seeds": [b.config().seed for b, _ in paired],
      "signature": str(signatures["BLEU"].format()),
    }
  out[baseline] = {"p_value": None, "seeds": sorted(base_seeds)}
  return out


def aggregate(name: str, records: Sequence[dict[str, Any]], runs: Sequence[rp.Run]) -> dict:
  """One configuration's figures over its seeds."""
  tests = [rec["results"]["test"] for rec in records]
  bleu = mean_std([t["bleu"] for t in tests])
  aer = mean_std([t.get("aer") for t in tests])
  aer_thr = mean_std([t.get("aer_threshold") for t in tests])
  entropy = mean_std([t.get("attention_entropy") for t in tests])
  speeds = [v for run in runs for v in train_tokens_per_s(run.workdir)]
  return {
    "name": name,
    "overrides": {k: v for k, v in runs[0].overrides.items() if k != "seed"},
    "seeds": [run.config().seed for run in runs],
    "runs": [run.name for run in runs],
    "bleu": [t["bleu"] for t in tests],
    "bleu_mean": bleu[0],
    "bleu_std": bleu[1],
    "aer_mean": aer[0],
    "aer_std": aer[1],
    "aer_threshold_mean": aer_thr[0],
    "aer_threshold_std": aer_thr[1],
    "attention_entropy_mean": entropy[0],
    "attention_entropy_std": entropy[1],
    "train_tokens_per_s_median": statistics.median(speeds) if speeds else None,
    "wall_s": sum(rec["wall_s"] for rec in records),
  }


def bar_plot(
  names: Sequence[str],
  means: Sequence[float],
  stds: Sequence[float],
  path: Path,
  title: str,
  ylabel: str = "test BLEU",
) -> None:
  """Bars of `means` with +- `stds` error bars, one per name (PNG at `path`)."""
  fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(names) + 1.5), 4))
  x = np.arange(len(names))
  ax.bar(x, means, yerr=stds, capsize=4, color="tab:blue", alpha=0.8)
  ax.set_xticks(x, names, rotation=30, ha="right")
  ax.set_ylabel(ylabel)
  ax.set_ylim(bottom=0)
  ax.grid(axis="y", alpha=0.3)
  ax.set_title(title)
  fig.tight_layout()
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=100)
  plt.close(fig)


def markdown(rows: Sequence[dict[str, Any]], significance: dict, baseline: str, preset: str) -> str:
  """The sweep table: one row per configuration."""
  f = rp._fmt
  lines = [
    f"# Score functions ({preset} preset, test split)",
    "",
    f"| score | seeds | BLEU | AER | AER (>= 0.3) | entropy | tokens/s | p vs {baseline} |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
  ]
  for r in rows:
    p = significance.get(r["name"], {}).get("p_value")
    lines.append(
      f"| {r['name']} | {len(r['seeds'])} | {f(r['bleu_mean'])} ± {f(r['bleu_std'])} | "
      f"{f(r['aer_mean'], 3)} ± {f(r['aer_std'], 3)} | "
      f"{f(r['aer_threshold_mean'], 3)} ± {f(r['aer_threshold_std'], 3)} | "
      f"{f(r['attention_entropy_mean'])} | {f(r['train_tokens_per_s_median'], 0)} | "
      f"{f(p, 4)} |"
    )
  lines += [
    "",
    "Mean ± sample standard deviation over seeds. p: sacrebleu paired bootstrap of test BLEU",
    f"against {baseline}, hypotheses of shared seeds concatenated. tokens/s: median of the",
    "training log windows (each run's first window, with compilation, left out), one model's",
    "target tokens; seeds trained together (`--training together`) each run at that rate at once.",
  ]
  return "\n".join(lines) + "\n"


def common_parser(doc: str, default_preset: str = "cpu") -> argparse.ArgumentParser:
  """The flags every study script shares (this sweep, alignment_study, structural_study)."""
  p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
  p.add_argument("--out", required=True, help="output folder (runs go to OUT/runs/NAME-seedN)")
  p.add_argument("--preset", default=default_preset, choices=PRESETS)
  p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
  p.add_argument(
    "--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run"
  )
  p.add_argument("--bootstrap-samples", type=int, default=1000, help="paired bootstrap resamples")
  p.add_argument(
    "--training",
    default="together",
    choices=("together", "sequential"),
    help="a configuration's seeds: vmapped as one group, or one main.py run after another",
  )
  p.add_argument(
    "--compilation-cache",
    default=None,
    help="JAX persistent compilation cache folder (default OUT/jax_cache; 'none': off)",
  )
  return p


def check_common(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
  """Parses --seeds into ints and rejects bad shared flags (p.error exits)."""
  args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
  if not args.seeds or len(set(args.seeds)) != len(args.seeds):
    p.error("--seeds needs distinct integers")
  if args.bootstrap_samples < 1:
    p.error("--bootstrap-samples must be at least 1")


def names_flag(p: argparse.ArgumentParser, value: str, valid: Sequence[str], what: str) -> list:
  """A comma-separated list of names, each of which must be in `valid`."""
  names = [s.strip() for s in value.split(",") if s.strip()]
  unknown = [n for n in names if n not in valid]
  if unknown:
    p.error(f"unknown {what} {unknown}; valid: {', '.join(valid)}")
  return names


def prepare(args: argparse.Namespace, build) -> tuple[Path, dict[str, list[rp.Run]]]:
  """OUT (created) and the study's runs, `build(out, sets)`; every run's config is resolved
  first (a bad --set fails before anything trains), then the compilation cache is enabled."""
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  try:
    runs = build(out, rp.parse_sets(args.set))
    for name_runs in runs.values():
      for run in name_runs:
        run.config()
  except (ValueError, TypeError) as e:
    raise SystemExit(f"error: {e}") from e
  rp.enable_compilation_cache(args.compilation_cache or str(out / "jax_cache"))
  return out, runs


def study_record(
  args: argparse.Namespace,
  baseline: str,
  rows: Sequence[dict[str, Any]],
  significance: dict[str, Any],
  records: dict[str, Sequence[dict[str, Any]]],
  start: float,
  **extra: Any,
) -> dict[str, Any]:
  """The JSON record a study script writes: its settings, rows, significance (the per-script
  part under "significance", after the test's description), every run's record, the wall time
  since `start` and the environment; `extra` keys come after the settings."""
  return {
    "preset": args.preset,
    "config_file": PRESET_CONFIGS[args.preset],
    "seeds": args.seeds,
    "baseline": baseline,
    "training": args.training,
    "sets": args.set,
    **extra,
    "configurations": rows,
    "significance": {
      "test": "sacrebleu paired bootstrap resampling (PairedTest, test_type='bs')",
      "n_samples": args.bootstrap_samples,
      **significance,
    },
    "runs": {rec["name"]: rec for recs in records.values() for rec in recs},
    "total_wall_s": time.perf_counter() - start,
    **rp.environment(),
  }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = common_parser(__doc__)
  p.add_argument("--scores", default=",".join(DEFAULT_SCORES), help="comma-separated scores")
  p.add_argument("--baseline", default="additive", help="the configuration tested against")
  args = p.parse_args(argv)
  check_common(p, args)
  args.scores = names_flag(p, args.scores, scores.names(), "score")
  if args.baseline not in args.scores:
    p.error(f"--baseline {args.baseline!r} is not among --scores")
  return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  args = parse_args(argv)
  sweep = configurations(args.scores)
  out, runs = prepare(args, lambda out, sets: build_runs(args.preset, sweep, args.seeds, out, sets))
  start = time.perf_counter()
  if args.training == "together":
    train_groups(runs)
  records = {name: [rp.execute(run) for run in name_runs] for name, name_runs in runs.items()}
  rows = [aggregate(name, records[name], runs[name]) for name in runs]
  references = test_references(runs[args.baseline][0])
  significance = paired_bootstrap(runs, args.baseline, references, args.bootstrap_samples)
  for row in rows:
    row["p_value_vs_baseline"] = significance[row["name"]]["p_value"]
  tested = {
    "hypotheses": "test split, concatenated over the seeds shared with the baseline",
    "per_configuration": significance,
  }
  result = study_record(args, args.baseline, rows, tested, records, start)
  (out / "sweep.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
  (out / "sweep.md").write_text(markdown(rows, significance, args.baseline, args.preset))
  bar_plot(
    [r["name"] for r in rows],
    [r["bleu_mean"] for r in rows],
    [r["bleu_std"] for r in rows],
    out / "sweep.png",
    f"test BLEU over seeds {args.seeds} ({args.preset})",
  )
  print((out / "sweep.md").read_text())
  print(f"wrote {out / 'sweep.json'} ({result['total_wall_s']:.0f} s)")
  return result


if __name__ == "__main__":
  main()

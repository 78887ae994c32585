"""The documentation's results pages, generated from the committed study data.

    python -m experiments.pages [--out docs/results] [--check]

Writes OUT/index.md (every study, and the headline table) and one MyST page per study folder
under the results root (`experiments/lib/records.py`: its definition.json, report and records):
what was run, the exact command, the machine, the tables, the figures (referenced where the
study keeps them), the learning curves, the significance tests and the conclusion, whose every
number is filled in from the data by the templates below, never typed. `--check` writes
nothing and fails, naming the pages, where a committed page differs from what the data gives.
`headline_table()` is the README's table of results.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.lib import driver, records, reports
from experiments.lib.reports import fmt, mean_sd

ROOT = records.REPO_ROOT
RESULTS = records.RESULTS_ROOT
OUT = ROOT / "docs" / "results"
P_LEVEL = 0.05  # A difference the bootstrap gives p above this is called level.

# Titles and what each study asks: prose without figures (every figure comes from the data).
ABOUT: dict[str, tuple[str, str]] = {
  "multi30k_scores": (
    "Score functions on Multi30k English→French",
    "The six alignment score functions (additive, dot, general, scaled, cosine, location) on "
    "real text, three seeds each, trained to where the additive baseline has flattened.",
  ),
  "multi30k_scores_en_de": (
    "Score functions on Multi30k English→German",
    "The same six score functions on the second language pair, to see whether the ranking "
    "found into French transfers.",
  ),
  "multi30k_features": (
    "Alignment features on Multi30k",
    "Coverage (a running sum of past attention in the keys), previous attention and both, on "
    "the additive score; the additive runs are linked in as the baseline.",
  ),
  "multi30k_structures": (
    "Where attention may look, on Multi30k",
    "Local-p (a predicted window with a Gaussian prior) and multi-head additive attention "
    "against soft attention over the whole source.",
  ),
  "multi30k_copy": (
    "Copying and unknown-word replacement on Multi30k",
    "A copy mechanism and `<unk>` replacement, each on and off: what they do to the words "
    "outside the target vocabulary.",
  ),
  "multi30k_copy_eos": (
    "Where copying sends the attention on the source EOS",
    "A copying run trained with the source EOS copied as the target EOS, decoded that way and "
    "with that attention copied as nothing (`model.copy_eos`): output length and BLEU, on which "
    "the default was chosen (validation rows only).",
  ),
  "multi30k_lexicon": (
    "Lexicon bias on Multi30k (all training pairs)",
    "A lexical translation table added to the output's logits, against none.",
  ),
  "multi30k_lexicon_5k": (
    "Lexicon bias on Multi30k (5,000 training pairs)",
    "The lexicon bias where the training data is small.",
  ),
  "multi30k_multi_source": (
    "Two sources on Multi30k",
    "German→French, and English and German together into French, against English→French.",
  ),
  "multi30k_intra": (
    "Intra-attention on Multi30k",
    "The decoder attending over its own earlier states, against the plain model.",
  ),
  "multi30k_luong": (
    "Luong et al.'s Table 4 on Multi30k",
    "Luong, Pham and Manning (2015)'s decoder (two LSTM layers, input feeding) with global "
    "attention (location, dot, general) and local-m and local-p attention (dot, general), "
    "three seeds each; everything but the decoder as in the score study.",
  ),
  "multi30k_luong_scores": (
    "The six score functions in Luong's decoder",
    "The score study repeated with Luong et al.'s decoder, queried by the new top-layer state "
    "h_t instead of s_{i-1}: whether the ranking of the scores depends on the decoder.",
  ),
  "multi30k_normalisers": (
    "Attention normalisers in the paper's decoder",
    "Softmax, sparsemax and 1.5-entmax with the additive score, three seeds each.",
  ),
  "multi30k_luong_normalisers": (
    "Attention normalisers in Luong's decoder",
    "Softmax, sparsemax and 1.5-entmax with the additive score in Luong et al.'s decoder.",
  ),
  "multi30k_luong_none": (
    "Luong's decoder without attention",
    "The ladder's first rung: the fixed summary of the encoder in place of the context.",
  ),
  "multi30k_luong_feeding": (
    "Input feeding in Luong's decoder",
    "Global location attention with and without feeding h~_{t-1} to the next step.",
  ),
  "multi30k_luong_depth": (
    "One or two layers in Luong's decoder",
    "Local-p attention with the general score in a decoder of one and of two LSTM layers.",
  ),
  "multi30k_subword": (
    "Subword regularisation on Multi30k",
    "SentencePiece unigram vocabularies of 8,000 pieces, each training batch segmented by "
    "sampling (Kudo 2018: alpha 0.1 over the 64 best segmentations) against the deterministic "
    "segmentation; validation and test always deterministic. Three seeds each.",
  ),
  "multi30k_guided": (
    "Guided alignment on Multi30k",
    "Attention supervised by eflomal's links of the training split (grow-diag-final-and; "
    "experiments/alignments/multi30k.en-fr.train.align) against the plain model, which reads "
    "the same config but for the loss term. "
    "Three seeds each; twin peaks measure whether attention finds the source word an output "
    "word is spelled like.",
  ),
  "multi30k_decoding": (
    "Decoding choices on Multi30k",
    "Beam, length normalisation, checkpoint averaging, ensembles and shortlists, decoded from "
    "the score study's additive runs.",
  ),
  "multi30k_best_tries": (
    "The 30-minute Multi30k system: the levers tried",
    "Each lever of `configs/multi30k_best.py`, tried on validation.",
  ),
  "multi30k_plateau": (
    "Where the Multi30k baseline flattens",
    "One long additive run's validation curve, read to choose the studies' budget.",
  ),
  "paper_cpu_seeds": (
    "The paper's Table 1 and Fig. 2 on the embedded corpus",
    "The paper's four models (RNNencdec and RNNsearch, trained on sentences up to 30 and 50 "
    "words) at the demo config's sizes with Adam, the same number of steps each, three seeds.",
  ),
  "paper_cpu": (
    "The paper's Table 1 and Fig. 2 on the embedded corpus (one seed)",
    "The first reproduction, one seed per model.",
  ),
  "embedded_scores": (
    "Score functions on the embedded corpus at the plateau",
    "Additive against cosine on the embedded synthetic corpus, trained to its plateau.",
  ),
  "embedded_normalisers": (
    "Attention normalisers in both decoders, on the embedded corpus",
    "Softmax, sparsemax and 1.5-entmax with the additive score in the paper's decoder and in "
    "Luong et al.'s, three seeds each at the embedded studies' budget: AER against the corpus's "
    "gold alignments (Luong et al. report AER for their variants) and the share of exactly "
    "zero attention weights.",
  ),
  "embedded_plateau": (
    "Where the embedded corpus flattens",
    "The additive model's validation curve, read for the embedded studies' budget.",
  ),
  "embedded_alignment": (
    "Attention trained to align, on the embedded corpus",
    "Alignment features and decoding-time coverage against the additive model, with the "
    "corpus's gold alignments.",
  ),
  "embedded_structures": (
    "Where attention may look, on the embedded corpus",
    "Attention structures against soft attention, on the test split and its long sentences.",
  ),
  "alignment": (
    "Attention trained to align (early study)",
    "The first alignment study, on the embedded corpus, early in training.",
  ),
  "structures": (
    "Attention structures (early study)",
    "The first structures study, on the embedded corpus, early in training.",
  ),
  "sweep": (
    "Score functions on the embedded corpus, early in training",
    "The six score functions after a short budget: how fast models start, not where they end.",
  ),
  "benchmark": (
    "Training and decoding speed",
    "Throughput at the benchmark config beside an idiomatic PyTorch RNNsearch, on the "
    "development CPU, and once on a GPU.",
  ),
  "demo": ("`make demo`", "RNNsearch on the embedded corpus with `configs/demo.py`."),
  "intra_timing": ("Intra-attention timing", "The cost of intra-attention per update."),
  "multi30k_realtext": (
    "Multi30k in 30 minutes: the first system",
    "Settings explored on validation for ten minutes each, then `configs/multi30k.py` trained "
    "for its 30 minutes, its decoding chosen on validation and the test split decoded once.",
  ),
  "multi30k_best": (
    "The 30-minute Multi30k system",
    "`configs/multi30k_best.py`, the levers the tries chose, trained and tested by one "
    "`main.py` command within 30 minutes of wall clock on the development CPU.",
  ),
  "multi30k_attention_offsets": (
    "Where attention peaks, from the output word's source twin",
    "For output words spelled like a source word that occurs once on each side, where the "
    "attention peaks, counted in words from that twin, per point of the score, feature and "
    "structure studies (the mean over seeds).",
  ),
  "seed_timing": (
    "Seeds together or one after another",
    "The same configuration trained for the same updates per seed, the seeds vmapped in one "
    "process, one after another in one process, or in one process each.",
  ),
  "multi30k_mbr": (
    "Minimum Bayes risk and reranking on Multi30k",
    "Beam 5 against MBR over the 10-best and over 16 and 32 samples, and the 10-best reranked "
    "with weights tuned on validation, with and without a French-to-English model's score, on "
    "the score study's additive model; each with its decoding speed beside greedy's.",
  ),
  "translate_timing": (
    "How fast translation starts",
    "`main.py --mode=translate` of the Multi30k test sources cold, warm and warm on other "
    "sentences, with the compilation cache, beside the decoding alone.",
  ),
  "matmul_options": (
    "Matmul rate under XLA's options, and PyTorch's",
    "The development CPU's matmul rate on a square matrix and on the benchmark's output layer, "
    "in float32 and bfloat16, under XLA's default and three of its CPU options, beside "
    "PyTorch's on the same shapes.",
  ),
  "profile": (
    "Where a step's time goes",
    "The train step and greedy decoding of the benchmark's presets and the 30-minute Multi30k "
    "config, in float32 and bfloat16, broken down by operation from XLA's trace and attributed "
    "to the functions that made each operation.",
  ),
  "scaling": (
    "How the train step's cost grows with the work",
    "The benchmark config's train step with one of sentence length, target vocabulary (full and "
    "sampled softmax), batch size and hidden width changed at a time, beside what its matmul "
    "FLOPs predict.",
  ),
  "serve_bench": (
    "The translation service under load",
    "The service (`seq2seq.serve`) answering 1, 8 and 64 concurrent clients against offline "
    "batch decoding of the same sentences, and under faults.",
  ),
  "explorer_timing": (
    "Explorer load time",
    "How large an explorer report of a test split is and how fast it opens and sorts in "
    "headless Chromium.",
  ),
  "across_studies": (
    "Across studies",
    "Every point against its own study's baseline, seed by seed, in one table per group of "
    "studies (`python -m experiments.tabulate`, whose command is under each table).",
  ),
}


# The state of a study's data where it is not the final one (delete the note once it is).
NOTES = {}


# ---------------------------------------------------------------------- small helpers
def _p(p: float | None) -> str:
  return "-" if p is None else f"{p:.3f}"


def _verdict(diff: float, p: float | None) -> str:
  if p is None:
    return ""
  if p > P_LEVEL:
    return "level"
  return "ahead" if diff > 0 else "behind"


def _rel(target: Path, page: Path) -> str:
  return os.path.relpath(target, page.parent).replace(os.sep, "/")


def demote(markdown: str, page: Path, source: Path) -> str:
  """A committed Markdown table file made part of a page: its headings one level down, its
  relative links to files written as text (the page links no file outside the docs), its images
  pointed at from the page."""
  out, fenced = [], False
  for line in markdown.splitlines():
    if line.startswith("```"):
      fenced = not fenced
    if not fenced and line.startswith("#"):
      line = "#" + line
    if not fenced:
      line = re.sub(
        r"!\[([^\]]*)\]\(([^)#:]+)\)",
        lambda m: f"![{m.group(1)}]({_rel(source.parent / m.group(2), page)})",
        line,
      )
      line = re.sub(r"(?<!!)\[([^\]]+)\]\((?![a-z]+:)[^)]*\)", r"\1", line)
    out.append(line)
  return "\n".join(out).strip() + "\n"


def _test_significance(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
  sig = report.get("significance") or {}
  return sig.get("per_split", {}).get("test") or sig.get("per_configuration") or {}


def _bleu_key(row: Mapping[str, Any]) -> str:
  return "bleu" if "bleu_mean" in row else "test_bleu"


def _runs(study: Path, definition: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
  """{point: its runs' records}, linked points included."""
  out = {}
  for point in definition["points"]:
    out[point["name"]] = [json.loads((study / r["record"]).read_text()) for r in point["runs"]]
  return out


def _seed_tests(recs: Sequence[Mapping[str, Any]], key: str) -> dict[int, float]:
  return {r["seed"]: r["results"]["test"][key] for r in recs if key in r["results"]["test"]}


def _data_files(study: Path, definition: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
  """{name: content} of the study's report and other JSON files (a study without runs)."""
  names = [definition["report"], *definition["files"]]
  return {n: json.loads((study / n).read_text()) for n in names if n and n.endswith(".json")}


def _isa(isa: Sequence[str]) -> str:
  return "AVX-512" if "avx512f" in isa else "AVX2" if "avx2" in isa else "no AVX2"


def _cpu(data: Mapping[str, Any]) -> str:
  """ "AMD EPYC (AVX-512)" from a file's `cpu`, `device` or top-level `cpu_model` ("" if none)."""
  cpu = data.get("cpu") or data.get("device") or data
  model = cpu.get("cpu_model")
  return f"{model} ({_isa(cpu.get('vector_isa', []))})" if model else ""


def _date(data: Mapping[str, Any]) -> str:
  return data.get("date") or (data.get("environment") or {}).get("date") or "undated"


# ---------------------------------------------------------------------- sections
def how_run(definition: Mapping[str, Any]) -> list[str]:
  lines = ["## How it was run", ""]
  if definition["command"]:
    lines += ["```bash", definition["command"], "```", ""]
  facts = []
  if definition["config_file"]:
    preset = f" (the `{definition['preset']}` preset)" if definition["preset"] else ""
    facts.append(f"Config: `{definition['config_file']}`{preset}.")
  if definition["seeds"]:
    facts.append(f"Seeds: {', '.join(map(str, definition['seeds']))}.")
  steps = definition["budget"].get("num_steps")
  if steps:
    facts.append(f"Budget: {steps:,} updates a run.")
  if definition["training"]:
    facts.append(f"Training: `{definition['training']}`.")
  if definition["baseline"]:
    facts.append(f"Baseline: `{definition['baseline']}`.")
  if not definition["command"] and definition["script"]:
    facts.append(
      f"Written by `python -m {definition['script']}`; each of its files records the command "
      "that wrote it."
    )
  lines += [" ".join(facts), ""] if facts else []
  points = [p for p in definition["points"] if p["runs"]]
  if points:
    lines += ["| point | runs | decodes | linked from |", "|---|---:|---|---|"]
    for p in points:
      linked = f"`{p['linked']}`" if p["linked"] else "-"
      lines.append(f"| {p['name']} | {len(p['runs'])} | {p['decode_from'] or '-'} | {linked} |")
    lines.append("")
  return lines if len(lines) > 2 else []  # Nothing recorded: the tables say how they were made.


def machine(definition: Mapping[str, Any], study: Path) -> list[str]:
  facts = []
  env = definition["environment"]
  counts = definition["machines"]
  if counts:
    runs = "; ".join(f"{m} ({n} run{'s' * (n != 1)})" for m, n in counts.items())
    facts.append(f"Runs trained on: {runs}.")
  if env.get("cpu_model"):
    facts.append(f"Reported on: {env['cpu_model']}, {env.get('cpu_count')} cores.")
  if definition["load_1min_mean"] is not None:
    load = definition["load_1min_mean"]
    facts.append(f"Mean 1-minute load average while the runs trained: {load:.2f}.")
  versions = env.get("versions") or {}
  if versions:
    shown = ", ".join(f"{k} {versions[k]}" for k in ("python", "jax", "flax") if k in versions)
    facts.append(f"Software: {shown}; backend {env.get('backend', '-')}.")
  if definition["date"]:
    facts.append(f"Reported {definition['date']}.")
  if not counts and not env.get("cpu_model"):  # No runs: the machines its files were measured on.
    by_cpu: dict[str, list[str]] = {}
    for name, data in _data_files(study, definition).items():
      if _cpu(data):
        by_cpu.setdefault(_cpu(data), []).append(f"`{name}`")
    facts += [f"{cpu}: {', '.join(names)}." for cpu, names in by_cpu.items()]
  return ["## Machine", "", " ".join(facts) or "Not recorded by this study's files.", ""]


def per_run(recs: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
  """Every run's own figures, from its record."""
  header = ["run", "test BLEU", "test chrF", "valid BLEU", "checkpoint", "updates"]
  header += ["training minutes", "wall minutes", "load", "machine"]
  cells = []
  for point_recs in recs.values():
    for r in point_recs:
      test, valid = r["results"]["test"], r["results"]["valid"]
      train = None if r["train_s"] is None else r["train_s"] / 60
      cells.append(
        [r["name"], fmt(test.get("bleu")), fmt(test.get("chrf")), fmt(valid.get("bleu"))]
        + [f"{test['step']:,}" if "step" in test else "-", f"{r['updates']:,}"]
        + [fmt(train, 1), fmt(r["wall_s"] / 60, 1), fmt(r["load_1min_mean"])]
        + ["; ".join(r["machines"]) or "not recorded"]
      )
  if not cells:
    return []
  return ["## Per run", "", *reports.table(header, cells), ""]


# Figures a results table shows where any point's is above zero ("-" for points without one):
# attention's zero share, which only the sparse normalisers make, was first measured with them,
# and runs evaluated before then, linked as baselines, lack it.
SOME_ROWS = ("attention_zero_share",)


def results_table(report: Mapping[str, Any]) -> list[str]:
  """Per point, mean ± sd over seeds of the test figures its rows hold."""
  rows = report.get("configurations") or []
  if not rows:
    return []
  key = _bleu_key(rows[0])
  prefix = "" if key == "bleu" else "test_"
  columns = [(f"{prefix}bleu", "test BLEU", 2), ("chrf", "test chrF", 2)]
  columns += [("valid_bleu", "valid BLEU", 2), (f"{prefix}aer", "AER", 3)]
  columns += [("identical_word_peaks", "twin peaks", 3), ("oov_recall", "OOV recall", 3)]
  columns += [(f"{prefix}over_translation", "over-translated", 0)]
  columns += [(f"{prefix}under_translation", "unattended", 0)]
  columns += [("long_bleu", "long test BLEU", 2), ("test_long_bleu", "long test BLEU", 2)]
  columns += [
    ("valid_length_ratio", "valid length ratio", 3),
    ("length_ratio", "test length ratio", 3),
    ("attention_zero_share", "zero weights", 3),
  ]
  has = lambda r, c: r.get(f"{c[0]}_mean") is not None
  some = lambda c: any(r.get(f"{c[0]}_mean") for r in rows)
  shown = [c for c in columns if (some(c) if c[0] in SOME_ROWS else all(has(r, c) for r in rows))]
  header = ["point", "seeds", *[c[1] for c in shown], f"p vs {report['baseline']}"]
  cells = []
  for r in rows:
    p = r.get("p_value_vs_baseline")
    figures = [mean_sd(r, c[0], c[2]) if has(r, c) else "-" for c in shown]
    cells.append([r["name"], str(len(r["seeds"])), *figures, _p(p)])
  return ["## Results", "", *reports.table(header, cells), "", _caption(shown), ""]


def _caption(shown: Sequence[tuple[str, str, int]]) -> str:
  words = {
    "test BLEU": "sacrebleu 13a on the detokenised test split",
    "valid BLEU": "the final evaluation's (of the checkpoint chosen on greedy validation BLEU)",
    "AER": "argmax attention against the gold alignments",
    "twin peaks": "of the output words spelled like a source word that occurs once on each side,"
    " the share whose attention peaks on it",
    "OOV recall": "the share of reference words outside the target vocabulary the output holds",
    "over-translated": "output words repeated beyond the reference, summed over the split",
    "unattended": "source content words no output word's attention peaks on, summed",
    "valid length ratio": "output words over reference words in BLEU's tokenisation (below 1 the"
    " brevity penalty applies), on the split the run was selected on",
    "zero weights": "the share of the test split's attention weights (output word by source"
    " word) that are exactly zero; - where the runs were evaluated before it was measured",
  }
  parts = [f"{name}: {words[name]}" for _, name, _ in shown if name in words]
  return (
    "Mean ± sample standard deviation over the seeds. "
    + "; ".join(parts)
    + "; p: the paired bootstrap of test BLEU against the baseline, seeds pooled per resample."
  )


def _more_tests(sig: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any], int]]:
  """Beside BLEU, where the report tested them: (column, tests, digits)."""
  return [
    (name, sig[key], digits)
    for name, key, digits in (
      ("chrF difference (p)", "per_configuration_chrf", 2),
      ("twin peaks difference (p)", "per_configuration_twin_peaks", 3),
    )
    if sig.get(key)
  ]


def _significance_rows(
  pairs: Mapping[str, str],
  tests: Mapping[str, Any],
  more: Sequence[tuple[str, Mapping[str, Any], int]],
  recs: Mapping[str, Sequence[dict]],
) -> list[list[str]]:
  """One row per tested point of `pairs` ({point: what it is tested against}): the BLEU
  difference, its interval and p, the differences by seed, and the `more` tests."""
  cells = []
  for name, base in pairs.items():
    t = tests.get(name, {})
    if t.get("difference") is None:
      continue
    lo, hi = t["difference_ci95"]
    cells.append(
      [name, f"{t['difference']:+.2f}", f"{lo:+.2f} to {hi:+.2f}", _p(t["p_value"])]
      + [" / ".join(f"{d:+.2f}" for d in _seed_differences(recs, name, base)) or "-"]
      + [_difference(other.get(name), digits) for _, other, digits in more]
    )
  return cells


def significance(report: Mapping[str, Any], recs: Mapping[str, Sequence[dict]]) -> list[str]:
  tests = _test_significance(report)
  base = report.get("baseline")
  sig = report.get("significance") or {}
  pairs = {r["name"]: base for r in report.get("configurations", []) if r["name"] != base}
  more = _more_tests(sig)
  header = ["point", f"difference vs {base}", "95% interval", "p", "by seed"]
  cells = _significance_rows(pairs, tests, more, recs) if tests else []
  if not cells:
    return []
  lines = ["## Significance", "", *reports.table(header + [n for n, _, _ in more], cells), ""]
  within = sig.get("within") or {"references": {}, "per_configuration": {}}
  refs = within["references"]
  more_within = _more_tests(within)
  rows = _significance_rows(refs, within["per_configuration"], more_within, recs)
  for row in rows:
    row.insert(1, refs[row[0]])
  if rows:
    header = ["point", "against", "difference", "95% interval", "p", "by seed"]
    lines += [
      f"Within each `{within['key']}`: each point against the point with its "
      f"`{within['key']}` and the baseline's other settings.",
      "",
      *reports.table(header + [n for n, _, _ in more_within], rows),
      "",
    ]
  n = sig.get("n_samples")
  lines += [
    f"Paired bootstrap of test BLEU ({n} resamples of the test sentences; each seed's outputs "
    "paired with those of the same seed of the point tested against, pooled on every resample); "
    "by seed: each seed's test BLEU minus that of the same seed of the point tested against, "
    "from the run records."
    + (
      " chrF and twin peaks (the share of output words with one source twin whose attention "
      "peaks on it, pooled over the resampled sentences' pairs): the same resamples."
      if more
      else ""
    ),
    "",
  ]
  return lines


def _difference(test: Mapping[str, Any] | None, digits: int) -> str:
  if not test or test.get("difference") is None:
    return "-"
  return f"{test['difference']:+.{digits}f} ({_p(test['p_value'])})"


def _seed_differences(recs: Mapping[str, Sequence[dict]], point: str, base: str) -> list[float]:
  mine, theirs = _seed_tests(recs.get(point, []), "bleu"), _seed_tests(recs.get(base, []), "bleu")
  return [mine[s] - theirs[s] for s in sorted(mine) if s in theirs]


def learning(report: Mapping[str, Any], study: Path, page: Path) -> list[str]:
  curves = report.get("curves") or {}
  if not curves:
    return []
  lines = ["## Learning curves", ""]
  header = ["point", "metric", "final (mean over seeds)", "gain over the last quarter", "steps"]
  cells = []
  for name, c in curves.items():
    metric = "greedy validation BLEU" if c["metric"] == "bleu" else "validation loss"
    last = f"{c['step'][-1]:,}" if c["step"] else "-"
    cells.append([name, metric, fmt(c["final"]), fmt(c["gain_last_quarter"]), last])
  lines += [*reports.table(header, cells), ""]
  base = report.get("baseline")
  if base in curves and curves[base]["final"] is not None:
    lines += [driver.how_trained(base, curves[base]), ""]
  if (study / "learning_curves.png").exists():
    lines += [f"![Learning curves]({_rel(study / 'learning_curves.png', page)})", ""]
  return lines


def figures(
  definition: Mapping[str, Any], study: Path, page: Path, above: Sequence[str] = ()
) -> list[str]:
  """The study's figures not already shown `above` (the page's lines so far)."""
  text = "\n".join(above)
  shown = [
    f
    for f in definition["figures"]
    if f != "learning_curves.png" and f"({_rel(study / f, page)})" not in text
  ]
  if not shown:
    return []
  lines = ["## Figures", ""]
  for name in shown:
    lines += [f"![{name}]({_rel(study / name, page)})", ""]
  return lines


def tables(definition: Mapping[str, Any], study: Path, page: Path) -> list[str]:
  """The study script's own tables (generated by it from the same data), headings demoted."""
  lines = []
  for name in definition["tables"]:
    text = (study / name).read_text()
    if not text.startswith("# "):  # Its own title, demoted, heads it; else one from its name.
      lines += [f"## {Path(name).stem.replace('_', ' ').capitalize()}", ""]
    lines += [demote(text, page, study / name), ""]
  return lines


def files(definition: Mapping[str, Any], study: Path) -> list[str]:
  rel = study.relative_to(ROOT)
  lines = ["## Data", "", f"Everything on this page is read from `{rel}/`:", ""]
  listed = [records.DEFINITION, definition["report"], *definition["files"]]
  lines += [f"- `{rel}/{name}`" for name in listed if name]
  n = sum(len(p["runs"]) for p in definition["points"] if not p["linked"])
  if n:
    lines.append(f"- `{rel}/runs/POINT/seed_S/record.json` and `hypotheses/`: {n} runs")
  return lines + [""]


# ---------------------------------------------------------------------- studies without runs
def final_table(study: Path) -> list[str]:
  """The final system's figures (`final.json` of `experiments.best30 --final`), with and without
  its parameters' moving average on the same checkpoint."""
  best = json.loads((study / "final.json").read_text())
  header = ["parameters", "test BLEU", "test chrF", "test BLEU lowercased"]
  header += ["test BLEU, `<unk>` dropped", "valid BLEU", "valid chrF", "checkpoint"]
  rows = [("moving average (the system)", best)]
  if best.get("without_moving_average"):
    rows.append(("training parameters", best["without_moving_average"]))
  cells = [
    [name, fmt(r["test_bleu"]), fmt(r["test_chrf"]), fmt(r["test_bleu_lowercase"])]
    + [fmt(r["test_bleu_no_unk"]), fmt(r["valid_bleu"]), fmt(r["valid_chrf"])]
    + [f"{r['test_step']:,}"]
    for name, r in rows
  ]
  lines = ["## Results", "", *reports.table(header, cells), ""]
  lines += [
    f"sacrebleu `{best['sacrebleu_signature']}` on test_2016_flickr and val, the checkpoint "
    "chosen on validation BLEU.",
    "",
  ]
  if best.get("without_moving_average"):
    lines += ["Without the moving average:", "", "```bash"]
    lines += [best["without_moving_average"]["command"], "```", ""]
  return lines


def seed_timing_tables(study: Path) -> list[str]:
  """Each `experiments.seed_timing` measurement: its command and every way's figures."""
  lines = ["## Measurements", ""]
  header = ["way", "training wall s", "model updates/s", "steady tokens/s, all seeds"]
  header += ["1-minute load before, after"]
  for name, t in _data_files(study, records.load_definition(study)).items():
    lines += [f"### {name}", ""]
    lines += [
      f"{len(t['seeds'])} seeds of {t['steps_per_seed']:,} updates each, `{t['config']}`, on "
      f"{_cpu(t)}, {_date(t)}:",
      "",
      "```bash",
      t["command"],
      "```",
      "",
    ]
    cells = [
      [w["way"], fmt(w["training_wall_s"], 0), fmt(w["model_updates_per_s"], 3)]
      + [fmt(w["steady_tokens_per_s_all_seeds"], 0)]
      + [f"{w['load_average_before'][0]:.2f}, {w['load_average_after'][0]:.2f}"]
      for w in t["ways"]
    ]
    lines += [*reports.table(header, cells), ""]
  return lines


def explorer_table(study: Path) -> list[str]:
  lines = ["## Measurements", ""]
  header = ["report", "sentences", "kB", "load ms (median)", "loads", "sort by BLEU ms"]
  header += ["Chromium"]
  cells = []
  for name, t in _data_files(study, records.load_definition(study)).items():
    cells.append(
      [f"`{name}`", f"{t['sentences']:,}", fmt(t["bytes"] / 1000, 0), fmt(t["load_ms_median"], 0)]
      + [str(len(t["load_ms"])), fmt(t["sort_by_bleu_ms"], 0), t["browser"]]
    )
    command = " ".join(["python -m experiments.explorer_timing", *t["argv"][1:]])
  lines += [*reports.table(header, cells), "", "```bash", command, "```", ""]
  return lines


def offsets_table(study: Path) -> list[str]:
  """Share of twin pairs by offset of the attention's peak from the twin, per point."""
  data = json.loads((study / "offsets.json").read_text())
  bins = data["bins"]
  header = ["point", "seeds", *[f"`{b}`" for b in bins], "peaks on `</s>`"]
  cells = []
  for name, p in data["points"].items():
    shares = [f"{p[b][0]:.3f}" for b in bins]
    end = p.get("end_peaks")
    cells.append([name, str(p["seeds"]), *shares, "-" if end is None else f"{end[0]:.3f}"])
  return [
    "## Results",
    "",
    *reports.table(header, cells),
    "",
    f"Mean over seeds ({data['split']} split) of the share of twin pairs whose attention peaks "
    "that many source words from the twin (`+0`: on it); peaks on `</s>`: the share of output "
    "steps whose attention peaks on the source's end of sentence.",
    "",
  ]


def serve_table(study: Path) -> list[str]:
  """The service benchmark's page body (`experiments.serve_bench.page`) under a heading."""
  from experiments import serve_bench

  record = json.loads((study / "serve_bench.json").read_text())
  body = serve_bench.page(record).split("\n", 2)[2]  # Past the script's own title.
  return ["## Measurements", "", *body.splitlines(), "```bash", record["command"], "```", ""]


def script_page(script: str, report: str, render: str = "page"):
  """The table function of a study whose script writes its own page: `experiments.SCRIPT`'s
  `render(record)` of STUDY/REPORT under a heading, past the script's own title, its figures
  linked from the study folder."""
  import importlib

  def table(study: Path) -> list[str]:
    record = json.loads((study / report).read_text())
    body = getattr(importlib.import_module(f"experiments.{script}"), render)(record)
    body = re.sub(r"\]\((\w+\.png)\)", rf"](../../experiments/results/{study.name}/\1)", body)
    return ["## Measurements", "", *body.split("\n", 2)[2].splitlines(), ""]

  return table


def demo_table(study: Path) -> list[str]:
  """What `make demo` scores, and its validation curve, from the demo's record."""
  from experiments import demo_run

  result = json.loads((study / "demo.json").read_text())
  curve = ", ".join(
    f"{c['step']:,}: {fmt(c['bleu'])}" for c in result["valid_curve"] if c["bleu"] is not None
  )
  return [
    "## Measurements",
    "",
    f"The best checkpoint, evaluated at the end of `{result['trains']}` "
    f"({fmt(result['wall_s'] / 60, 1)} minutes in all, training and evaluation; 1-, 5- and "
    f"15-minute load average {result['load_average']} at the end):",
    "",
    *demo_run.table(result),
    "",
    f"Greedy validation BLEU during training, by update: {curve}. The run's console is "
    f"`experiments/results/{study.name}/console.txt`.",
    "",
  ]


# The tables of a study without runs drawn from its script's JSON, in place of any page the script
# wrote from the same JSON (its definition's `tables`).
MEASUREMENTS = {
  "multi30k_mbr": script_page("mbr_study", "mbr.json", render="markdown"),
  "translate_timing": script_page("translate_timing", "translate_timing.json"),
  "matmul_options": script_page("matmul_options", "matmul_options.json"),
  "profile": script_page("profile_step", "profile.json"),
  "scaling": script_page("scaling_bench", "scaling.json"),
  "serve_bench": serve_table,
  "multi30k_best": final_table,
  "seed_timing": seed_timing_tables,
  "explorer_timing": explorer_table,
  "multi30k_attention_offsets": offsets_table,
  "demo": demo_table,
}


# ---------------------------------------------------------------------- conclusions
def ranking(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, float]]:
  key = f"{_bleu_key(rows[0])}_mean"
  return sorted(((r["name"], r[key]) for r in rows), key=lambda x: -x[1])


def _comparison(name: str, base: str, t: Mapping[str, Any], recs: Mapping) -> str:
  """One sentence: `name`'s test BLEU against `base`'s, its interval, p, verdict and seeds."""
  lo, hi = t["difference_ci95"]
  verdict = _verdict(t["difference"], t["p_value"])
  seeds = _seed_differences(recs, name, base)
  sign = ""
  if len(seeds) > 1:
    every = "both seeds" if len(seeds) == 2 else f"all {len(seeds)} seeds"
    if all(d > 0 for d in seeds) or all(d < 0 for d in seeds):
      sign = f"; the same sign on {every}"
    else:
      sign = "; the seeds differ in sign"
  return (
    f"`{name}` against `{base}`: {t['difference']:+.2f} test BLEU (95% interval "
    f"{lo:+.2f} to {hi:+.2f}), p {_p(t['p_value'])}: {verdict}{sign}."
  )


def sweep_conclusion(report: Mapping[str, Any], recs: Mapping[str, Sequence[dict]]) -> list[str]:
  """What a study's rows and bootstrap say, one sentence per point against the baseline, and
  per point against its group's baseline where the study tested within groups."""
  rows = report.get("configurations") or []
  base = report.get("baseline")
  if not rows or base is None:
    return []
  tests = _test_significance(report)
  out = []
  if len(rows) > 2:
    order = ", ".join(f"{n} ({v:.2f})" for n, v in ranking(rows))
    out.append(f"By mean test BLEU: {order}.")
  for row in rows:
    t = tests.get(row["name"], {})
    if row["name"] != base and t.get("difference") is not None:
      out.append(_comparison(row["name"], base, t, recs))
  ps = [(tests.get(r["name"]) or {}).get("p_value") for r in rows if r["name"] != base]
  level = [p for p in ps if p is not None and p > P_LEVEL]
  if level and len(level) == len(rows) - 1:
    out.append(f"No point moves test BLEU away from `{base}` (every p above {P_LEVEL}).")
  within = (report.get("significance") or {}).get("within") or {}
  for name, other in within.get("references", {}).items():
    t = within["per_configuration"].get(name, {})
    if t.get("difference") is not None:
      out.append(f"Within its `{within['key']}`: " + _comparison(name, other, t, recs))
  return out


def attention_conclusion(report: Mapping[str, Any], recs: Mapping[str, Sequence[dict]]) -> list:
  """Twin peaks, unattended words and out-of-vocabulary words against the baseline."""
  rows = {r["name"]: r for r in report.get("configurations") or []}
  base = report.get("baseline")
  if base not in rows:
    return []
  out = []
  b = rows[base]
  if all(r.get("identical_word_peaks_mean") is not None for r in rows.values()):
    low = min(rows.values(), key=lambda r: r["identical_word_peaks_mean"])
    if (
      low["name"] != base
      and low["identical_word_peaks_mean"] < b["identical_word_peaks_mean"] - 0.02
    ):
      out.append(
        f"Where attention points: `{low['name']}` finds the twin (the source word spelled like "
        f"the output word) least often, {low['identical_word_peaks_mean']:.3f} against "
        f"`{base}`'s {b['identical_word_peaks_mean']:.3f}."
      )
  key = "under_translation"
  base_seeds = _seed_tests(recs.get(base, []), key)
  if (
    base_seeds
    and "model.features" in str(report.get("grid")) + str(report.get("command"))
    or (base_seeds and "model.attention" in str(report.get("grid")))
  ):
    for name, row in rows.items():
      mine = _seed_tests(recs.get(name, []), key)
      if name == base or not mine or row.get(f"{key}_mean") is None:
        continue
      if max(mine.values()) < min(base_seeds.values()):
        how = "fewer than every seed of the baseline"
      elif min(mine.values()) > max(base_seeds.values()):
        how = "more than every seed of the baseline"
      else:
        how = "overlapping the baseline's seeds"
      counts = ", ".join(str(mine[s]) for s in sorted(mine))
      base_counts = ", ".join(str(base_seeds[s]) for s in sorted(base_seeds))
      out.append(
        f"Unattended source content words, `{name}`: {counts} by seed, {how} ({base_counts})."
      )
  if "model.copy" in str(report.get("grid")) and b.get("oov_recall_mean") is not None:
    shares = ", ".join(f"`{n}` {mean_sd(r, 'oov_recall', 3)}" for n, r in rows.items())
    out.append(f"Share of the references' words outside the target vocabulary produced: {shares}.")
  return out


def chrf_conclusion(report: Mapping[str, Any], recs: Mapping[str, Sequence[dict]]) -> list[str]:
  """chrF where a point moves it on every seed while its BLEU is level."""
  rows = {r["name"]: r for r in report.get("configurations") or []}
  base = report.get("baseline")
  tests = _test_significance(report)
  out = []
  for name, row in rows.items():
    p = (tests.get(name) or {}).get("p_value")
    if name == base or p is None or p <= P_LEVEL or row.get("chrf_mean") is None:
      continue
    mine, theirs = _seed_tests(recs.get(name, []), "chrf"), _seed_tests(recs.get(base, []), "chrf")
    diffs = [mine[s] - theirs[s] for s in sorted(mine) if s in theirs]
    if len(diffs) > 1 and (all(d > 0 for d in diffs) or all(d < 0 for d in diffs)):
      by_seed = ", ".join(f"{d:+.2f}" for d in diffs)
      out.append(
        f"BLEU level, chrF not: `{name}` {mean_sd(row, 'chrf')} against `{base}`'s "
        f"{mean_sd(rows[base], 'chrf')}, the same sign on every seed ({by_seed}; no test on chrF)."
      )
  return out


def curve_conclusion(report: Mapping[str, Any]) -> list[str]:
  """Where a point starts faster or slower than the baseline and whether that lasts."""
  curves, base = report.get("curves") or {}, report.get("baseline")
  if base not in curves or curves[base]["metric"] != "bleu" or not curves[base]["step"]:
    return []
  b = dict(zip(curves[base]["step"], curves[base]["mean"], strict=True))
  out, seen = [], [curves[base]["mean"]]
  for name, c in curves.items():
    shared = [s for s in c["step"] if s in b]
    if name == base or not shared or c["metric"] != "bleu" or c["mean"] in seen:
      continue  # A point decoding another's runs has its curve.
    seen.append(c["mean"])
    mine = dict(zip(c["step"], c["mean"], strict=True))
    first, last = shared[0], shared[-1]
    if abs(mine[first] - b[first]) >= 1.0:
      out.append(
        f"Early on `{name}` is {'ahead' if mine[first] > b[first] else 'behind'}: mean greedy "
        f"validation BLEU {mine[first]:.1f} against `{base}`'s {b[first]:.1f} at step "
        f"{first:,}, and {mine[last]:.1f} against {b[last]:.1f} at step {last:,}."
      )
  return out


def long_conclusion(report: Mapping[str, Any]) -> list[str]:
  """The long test sentences, where a study evaluates them."""
  rows = {r["name"]: r for r in report.get("configurations") or []}
  base = report.get("baseline")
  sig = report.get("significance") or {}
  long = sig.get("per_split", {}).get("test_long") or sig.get("per_configuration_long") or {}
  key = next(
    (k for k in ("test_long_bleu", "long_bleu") if f"{k}_mean" in rows.get(base, {})), None
  )
  if base not in rows or key is None:
    return []
  words = report.get("long_split_words") or report.get("long_split")
  n = rows[base].get("test_long_sentences") or rows[base].get("long_sentences")
  where = f"the {n} test sentences of {words[0]}-{words[1]} source words" if words else "long"
  out = []
  for name, row in rows.items():
    t = long.get(name) or {}
    if name == base or t.get("difference") is None:
      continue
    out.append(
      f"On {where}: `{name}` {mean_sd(row, key)} test BLEU against `{base}`'s "
      f"{mean_sd(rows[base], key)}, {t['difference']:+.2f} (p {_p(t['p_value'])}): "
      f"{_verdict(t['difference'], t['p_value'])}."
    )
  return out


# Studies run early in training that a later study repeats at the plateau.
EARLY = {
  "embedded_scores": "sweep",
  "embedded_structures": "structures",
  "embedded_alignment": "alignment",
}


def early_conclusion(study: Path, report: Mapping[str, Any]) -> list[str]:
  """The early study's difference against the baseline beside this study's, point by point."""
  early_dir = RESULTS / EARLY.get(study.name, "-")
  early = records.load_report(early_dir) if early_dir.is_dir() else None
  if not early or early.get("baseline") != report.get("baseline"):
    return []
  base = report["baseline"]
  key = lambda r: r.get("bleu_mean", r.get("test_bleu_mean"))  # noqa: E731
  then = {r["name"]: key(r) for r in early["configurations"]}
  now = {r["name"]: key(r) for r in report["configurations"]}
  steps = (early.get("runs") or {}).values()
  n_then = next((r["config"]["train"]["num_steps"] for r in steps if "config" in r), None)
  out = []
  for name in now:
    if name == base or name not in then or base not in then:
      continue
    d_then, d_now = then[name] - then[base], now[name] - now[base]
    p = (_test_significance(report).get(name) or {}).get("p_value")
    if p is not None and p > P_LEVEL:
      held = f"level here (p {_p(p)}), so the early verdict does not hold"
    elif (d_then > 0) == (d_now > 0):
      held = "the early verdict holds"
    else:
      held = "the early verdict turns"
    after = f"after {n_then:,} updates" if n_then else "early in training"
    out.append(
      f"`{name}` against `{base}` {after} ({early_dir.name}): {d_then:+.2f} test BLEU; "
      f"here {d_now:+.2f}: {held}."
    )
  return out


def budget_conclusion(study: Path) -> list[str]:
  path = study / "budget.json"
  if not path.exists():
    return []
  b = json.loads(path.read_text())
  return [
    f"Budget: the trailing mean of {b['window']} validation evaluations first comes within "
    f"{b['tolerance']:g} BLEU of its best ({b['best_trailing_mean']:.2f}) at {b['budget']:,} "
    f"updates (`python -m experiments.plateau`, `budget.json`)."
  ]


FINAL = RESULTS / "multi30k_best" / "final.json"  # experiments.best30 --final


def best_conclusion(study: Path) -> list[str]:
  """The final system, on its own page and on the page of the tries that chose its levers."""
  if study.name not in ("multi30k_best", "multi30k_best_tries") or not FINAL.exists():
    return []
  best = json.loads(FINAL.read_text())
  published = best.get("published") or {}
  where = "" if study.name == "multi30k_best" else " ([its page](multi30k_best.md))"
  out = [
    f"The final system{where}: test BLEU {best['test_bleu']:.2f}, chrF "
    f"{best['test_chrf']:.2f}, in {best['minutes']:.1f} minutes ({best['updates']:,} updates)."
  ]
  if published.get("test_2016_bleu") is not None:
    out.append(f"Published ({published['system']}): {published['test_2016_bleu']}.")
  raw = best.get("without_moving_average")
  if raw and study.name == "multi30k_best":
    out.append(
      f"The same checkpoint with its training parameters instead of their moving average: "
      f"{raw['test_bleu']:.2f} test BLEU ({raw['test_bleu'] - best['test_bleu']:+.2f})."
    )
  return out


def realtext_conclusion(study: Path) -> list[str]:
  path = study / "multi30k.json"
  if not path.exists():
    return []
  r = json.loads(path.read_text())
  d, ref = r["chosen_decode"], r["reference"]
  unk = "on" if d["replace_unk"] else "off"
  best = max(r["exploration"].items(), key=lambda kv: kv[1]["best_valid_bleu"])
  return [
    f"Of the settings explored for {r['explore_minutes']:g} minutes each, `{best[0]}` reached "
    f"the best validation BLEU ({best[1]['best_valid_bleu']:.2f}).",
    f"`configs/multi30k.py` trained for {r['train_minutes']:.1f} minutes ({r['steps']:,} "
    f"updates, {r['epochs']:.1f} epochs) reaches test BLEU {r['test_bleu']:.2f}, chrF "
    f"{r['test_chrf']:.2f}, decoded with beam {d['beam_size']}, length normalisation "
    f"{d['length_norm_alpha']:g} and UNK replacement {unk} (chosen on validation).",
    f"The run to beat, {ref['system']}: {ref['test_bleu']} test BLEU, {ref['test_chrf']} chrF.",
  ]


def seed_timing_conclusion(study: Path) -> list[str]:
  if study.name != "seed_timing":
    return []
  out = []
  for name, t in _data_files(study, records.load_definition(study)).items():
    ways = [w["way"] for w in t["ways"]]
    for way in ways:
      wall = t.get(f"{way}_speedup_wall")
      if wall is None:
        continue
      other = next(w for w in ways if w != way)
      steady = t.get(f"{way}_speedup_steady")
      steady = "" if steady is None else f", {steady:.2f}x in steady-state tokens/s"
      out.append(
        f"`{way}` against `{other}`, {len(t['seeds'])} seeds on {_cpu(t)}: {wall:.2f}x the "
        f"speed over the training wall clock{steady} (`{name}`)."
      )
  return out


def explorer_conclusion(study: Path) -> list[str]:
  if study.name != "explorer_timing":
    return []
  out = []
  for name, t in _data_files(study, records.load_definition(study)).items():
    out.append(
      f"A report of {t['sentences']:,} sentences ({t['bytes'] / 1e6:.2f} MB) opens in "
      f"{t['load_ms_median']:.0f} ms (median of {len(t['load_ms'])} loads) and sorts by "
      f"sentence BLEU in {t['sort_by_bleu_ms']:.0f} ms, on {_cpu(t)} (`{name}`)."
    )
  return out


def offsets_conclusion(study: Path) -> list[str]:
  path = study / "offsets.json"
  if not path.exists():
    return []
  points = json.loads(path.read_text())["points"]
  on = {n: p["+0"][0] for n, p in points.items() if "head rank" not in n}
  order = sorted(on, key=on.get, reverse=True)
  hi, lo = order[0], order[-1]
  return [
    f"The share of twin pairs whose attention peaks on the twin itself runs from "
    f"{on[hi]:.3f} (`{hi}`) to {on[lo]:.3f} (`{lo}`), over {len(on)} points (heads of a "
    "multi-head model apart)."
  ]


def sharpness_conclusion(study: Path) -> list[str]:
  path = study / "attention_sharpness.json"
  if not path.exists():
    return []
  points = json.loads(path.read_text())["points"]
  trained = {n: p["trained_relative_entropy"][0] for n, p in points.items()}
  order = sorted(trained, key=trained.get)
  text = ", ".join(f"`{n}` {trained[n]:.3f}" for n in order)
  out = [
    "Attention after training, relative entropy of its rows (1: uniform, 0: one word; "
    f"`attention_sharpness.json`), sharpest first: {text}."
  ]
  for name, p in points.items():
    if "trained_score_sharpness" in p:
      m, s = p["trained_score_sharpness"]
      out.append(f"`{name}`'s learned scale ends at {m:.2f} ± {s:.2f}.")
  return out


# Studies whose points repeat another study's with one thing changed: the other study and how
# the sentence names it (the en→de score study against the en→fr one; the score study and the
# normalisers in Luong's decoder against the paper's decoder).
COUNTERPARTS = {
  "multi30k_scores_en_de": ("multi30k_scores", "into French"),
  "multi30k_luong_scores": ("multi30k_scores", "in the paper's decoder"),
  "multi30k_luong_normalisers": ("multi30k_normalisers", "in the paper's decoder"),
}


def _counterpart(study: Path) -> tuple[dict[str, Any], str] | None:
  """The counterpart study's report and its name in a sentence, where it has one."""
  if study.name not in COUNTERPARTS:
    return None
  name, words = COUNTERPARTS[study.name]
  path = RESULTS / name / "sweep.json"
  return (json.loads(path.read_text()), words) if path.exists() else None


def transfer_conclusion(study: Path, report: Mapping[str, Any]) -> list[str]:
  """Whether the ranking of a study's points matches that of the same points in its counterpart
  study (`COUNTERPARTS`)."""
  found = _counterpart(study)
  if found is None:
    return []
  there, words = found
  here_order = [n for n, _ in ranking(report["configurations"])]
  there_order = [n for n, _ in ranking(there["configurations"])]
  swapped = [
    (a, b)
    for i, a in enumerate(here_order)
    for b in here_order[i + 1 :]
    if b in there_order and a in there_order and there_order.index(a) > there_order.index(b)
  ]
  same = (
    "the same order"
    if not swapped
    else "the same order but for " + ", ".join(f"`{a}` and `{b}`" for a, b in swapped)
  )
  return [
    f"Ranked by mean test BLEU the points stand in {same} as {words} "
    f"({', '.join(there_order)} there; {', '.join(here_order)} here)."
  ]


def counterpart_table(study: Path, report: Mapping[str, Any]) -> list[str]:
  """The points this study shares with its counterpart side by side: mean ± sd test BLEU and,
  where both have them, twin peaks and the share of zero attention weights, with each side's
  rank by test BLEU."""
  found = _counterpart(study)
  if found is None:
    return []
  there, words = found
  mine = {r["name"]: r for r in report["configurations"]}
  theirs = {r["name"]: r for r in there["configurations"]}
  shared = [n for n in mine if n in theirs]
  if not shared:
    return []
  rank = lambda rows: {n: i + 1 for i, (n, _) in enumerate(ranking(rows))}
  rank_here = rank([mine[n] for n in shared])
  rank_there = rank([theirs[n] for n in shared])
  both = lambda key: all(
    r.get(f"{key}_mean") is not None for n in shared for r in (mine[n], theirs[n])
  )
  extra = [(k, t, d) for k, t, d in EXTRA_COLUMNS if both(k)]
  header = ["point", f"test BLEU {words}", "rank", "test BLEU here", "rank"]
  for _, label, _ in extra:
    header += [f"{label} {words}", f"{label} here"]
  cells = []
  for n in shared:
    row = [n, mean_sd(theirs[n], "bleu"), str(rank_there[n]), mean_sd(mine[n], "bleu")]
    row.append(str(rank_here[n]))
    for key, _, digits in extra:
      row += [mean_sd(theirs[n], key, digits), mean_sd(mine[n], key, digits)]
    cells.append(row)
  source = COUNTERPARTS[study.name][0]
  return [
    f"## Beside `{source}`",
    "",
    *reports.table(header, cells),
    "",
    f"The points both studies trained, mean ± sd over seeds; ranks by mean test BLEU among these "
    f"points on each side. `{source}` is the same study {words}.",
    "",
  ]


# The attention figures a counterpart table shows where both studies have them.
EXTRA_COLUMNS = (
  ("identical_word_peaks", "twin peaks", 3),
  ("attention_zero_share", "zero weights", 3),
)


def paper_conclusion(study: Path) -> list[str]:
  path = study / "table1.json"
  if not path.exists():
    return []
  table = json.loads(path.read_text())
  rows = {r["model"]: r for r in table["rows"]}

  def cell(name: str) -> str:
    r = rows[name]
    sd = r.get("bleu_all_std")
    return f"{r['bleu_all']:.2f}" + ("" if sd is None else f" ± {sd:.2f}")

  out = []
  for n in (30, 50):
    search, encdec = f"RNNsearch-{n}", f"RNNencdec-{n}"
    if search in rows and encdec in rows:
      out.append(
        f"Trained on sentences up to {n} words, RNNsearch reaches {cell(search)} test BLEU "
        f"against RNNencdec's {cell(encdec)}."
      )
  fig2 = table.get("fig2") or {}
  if "RNNsearch-50" in fig2 and "RNNencdec-50" in fig2:
    s, e = fig2["RNNsearch-50"], fig2["RNNencdec-50"]
    bins = [b for b in s if b.get("bleu") is not None]
    if bins:
      last = bins[-1]
      other = next((b for b in e if b.get("max_len") == last.get("max_len")), None)
      if other and other.get("bleu") is not None:
        out.append(
          f"By source length (Fig. 2), on the longest sentences ({last.get('min_len')} to "
          f"{last.get('max_len')} words) RNNsearch-50 scores {last['bleu']:.2f} and "
          f"RNNencdec-50 {other['bleu']:.2f}."
        )
  return out


def conclusion(study: Path, report: Mapping[str, Any] | None, recs: Mapping) -> list[str]:
  sentences: list[str] = []
  if report:
    sentences += sweep_conclusion(report, recs)
    sentences += chrf_conclusion(report, recs)
    sentences += long_conclusion(report)
    sentences += early_conclusion(study, report)
    sentences += curve_conclusion(report)
    sentences += attention_conclusion(report, recs)
    sentences += transfer_conclusion(study, report)
  sentences += sharpness_conclusion(study)
  sentences += paper_conclusion(study)
  sentences += budget_conclusion(study)
  sentences += best_conclusion(study)
  sentences += realtext_conclusion(study)
  sentences += seed_timing_conclusion(study)
  sentences += explorer_conclusion(study)
  sentences += offsets_conclusion(study)
  if not sentences:
    return []
  return ["## Conclusion", "", *[f"- {s}" for s in sentences], ""]


# ---------------------------------------------------------------------- pages
def title(study: Path) -> str:
  return ABOUT.get(study.name, (study.name, ""))[0]


def study_page(study: Path, out: Path = OUT) -> str:
  """The page of one study folder, from its definition, report and run records."""
  study = Path(study)
  if study.name == ACROSS:
    return across_page(study, out)
  page = out / f"{study.name}.md"
  definition = records.load_definition(study)
  report = records.load_report(study)
  recs = _runs(study, definition)
  about = ABOUT.get(study.name, (study.name, ""))[1]
  lines = [f"# {title(study)}", ""]
  lines += [about, ""] if about else []
  lines += [f"```{{note}}\n{NOTES[study.name]}\n```", ""] if study.name in NOTES else []
  missing = [p["name"] for p in definition["points"] if not p["runs"]]
  if missing and len(missing) < len(definition["points"]):
    names = ", ".join(f"`{n}`" for n in missing)
    lines += [
      f"Not committed as run records: {names}; what this page says of them comes from the "
      "study's report alone.",
      "",
    ]
  lines += conclusion(study, report, recs)
  lines += how_run(definition)
  lines += machine(definition, study)
  sweep_like = report is not None and bool(report.get("configurations"))
  if sweep_like:
    lines += results_table(report)
    lines += counterpart_table(study, report)
    lines += significance(report, recs)
    lines += learning(report, study, page)
    lines += per_run(recs)
  elif study.name in MEASUREMENTS:  # Drawn from the JSON: the script's own page says the same.
    lines += MEASUREMENTS[study.name](study)
  else:
    lines += tables(definition, study, page)
  lines += figures(definition, study, page, lines)
  lines += files(definition, study)
  return "\n".join(lines).rstrip() + "\n"


def index_page(studies: Sequence[Path]) -> str:
  lines = ["# Results", ""]
  lines += [
    "Every study committed under `experiments/results/`, one page each, generated by "
    "`python -m experiments.pages` from the study's data (its `definition.json`, report and "
    "run records; the schema: [Results as data](schema.md)). No number on these pages is "
    "typed by hand.",
    "",
    "## Headline",
    "",
    headline_table(),
    "",
    "## Studies",
    "",
    "| study | runs | reported |",
    "|---|---:|---|",
  ]
  for study in studies:
    definition = records.load_definition(study)
    n = sum(len(p["runs"]) for p in definition["points"])
    date = (definition["date"] or "-")[:10]
    lines.append(f"| [{title(study)}]({study.name}.md) | {n} | {date} |")
  lines += ["", "```{toctree}", ":hidden:", "", "schema"]
  lines += [study.name for study in studies]
  lines += ["```", ""]
  return "\n".join(lines)


def schema_page() -> str:
  blocks = (records.__doc__ or "").strip().split("\n\n")
  prose = lambda text: " ".join(text.split())  # noqa: E731
  lines = ["# Results as data", "", prose(blocks[0]), "", prose(blocks[1]), "", "```text"]
  lines += [textwrap.dedent(blocks[2]), "```", ""]
  lines += [prose(b) + "\n" for b in blocks[3:]]
  lines += [
    f"Schema version {records.SCHEMA_VERSION}; every record and definition carries "
    "`schema_version`.",
    "",
  ]
  for cls, where in (
    (records.StudyDefinition, "definition.json"),
    (records.RunRecord, "record.json"),
  ):
    lines += [f"## {where}", "", (cls.__doc__ or "").strip(), ""]
    lines += ["| field | type | meaning |", "|---|---|---|"]
    for name, kind, doc in records.schema_fields(cls):
      lines.append(f"| `{name}` | `{kind}` | {doc.replace('|', '/')} |")
    lines.append("")
  lines += ["## A point of a definition", "", "| field | type | meaning |", "|---|---|---|"]
  for name, kind, doc in records.schema_fields(records.Point):
    lines.append(f"| `{name}` | `{kind}` | {doc.replace('|', '/')} |")
  lines += [
    "",
    "## Converting",
    "",
    "```bash",
    "python -m experiments.convert_results --prune experiments/results/STUDY",
    "python -m experiments.convert_results --prune experiments/results/STUDY/runs/POINT/seed_S",
    "```",
    "",
    "The first converts every finished run of a study, the second one run that finished later; "
    "both are idempotent. A sweep writes its study in this form itself when it reports.",
    "",
  ]
  return "\n".join(lines)


# The study of tables over several studies (`experiments.tabulate`), drawn again from its JSON.
ACROSS = "across_studies"


def across_page(study: Path, out: Path = OUT) -> str:
  """Each point against its own study's baseline, over several studies, from the JSON
  `experiments.tabulate` wrote (its table drawn again by `tabulate.markdown`, titled as the
  committed table is)."""
  from experiments import tabulate  # noqa: PLC0415 (only this page needs it)

  page = out / f"{study.name}.md"
  definition = records.load_definition(study)
  lines = [f"# {title(study)}", "", ABOUT[study.name][1], ""]
  for name in definition["tables"]:
    path = (study / name).with_suffix(".json")
    heading = (study / name).read_text().splitlines()[0].lstrip("# ")
    table = tabulate.markdown(json.loads(path.read_text()), heading)
    lines += [demote(table, page, path), ""]
  lines += files(definition, study)
  return "\n".join(lines).rstrip() + "\n"


def pages(out: Path = OUT) -> dict[Path, str]:
  """{path: text} of every results page."""
  studies = records.studies(RESULTS)
  result = {out / "index.md": index_page(studies), out / "schema.md": schema_page()}
  for study in studies:
    result[out / f"{study.name}.md"] = study_page(study, out)
  return result


# ---------------------------------------------------------------------- the README's table
def _read(path: str) -> dict[str, Any]:
  return json.loads((ROOT / path).read_text())


HEADLINE_INPUTS = {
  "paper": "experiments/results/paper_cpu_seeds/table1.json",
  "multi30k": "experiments/results/multi30k_best/final.json",
  "speed": "experiments/results/benchmark",
  "decoders": "experiments/results/embedded_normalisers/sweep.json",
}
README = ROOT / "README.md"
# The README's generated block sits between these two lines.
HEADLINE_BEGIN = "<!-- headline:begin (generated by `python -m experiments.pages`; do not edit) -->"
HEADLINE_END = "<!-- headline:end -->"


def headline_table(inputs: Mapping[str, str] = HEADLINE_INPUTS) -> str:
  """The README's table of results, a Markdown table whose every cell is read from these files:

  * `paper`, experiments/results/paper_cpu_seeds/table1.json: the paper's Table 1 on the
    embedded corpus (`rows`: per model `bleu_all` and `bleu_all_std` over `seeds`), RNNsearch-50
    against RNNencdec-50;
  * `multi30k`, experiments/results/multi30k_best/final.json: the 30-minute Multi30k system
    (`test_bleu`, `minutes`, `updates`, `published`: the best published recurrent system);
  * `decoders`, experiments/results/embedded_normalisers/sweep.json: the attention's AER
    against the embedded corpus's gold alignments (`aer_mean`, `aer_std`), softmax in Luong et
    al.'s decoder against softmax in the paper's (the study's baseline), with both test BLEUs;
  * `speed`, benchmark JSONs of `python -m experiments.benchmark --peer` (`headline_speeds`: a
    folder gives, per CPU, its newest float32 one): our training tokens/s and greedy
    sentences/s over the PyTorch peer's (`peer.ratios`), measured side by side at the benchmark
    config, with the dtypes, CPU (`device.cpu_model`, `device.vector_isa`) and `date` it
    records, a row each. Only a run in which both compute in the same dtype is a fair headline,
    so another is refused.
  """
  paper = _read(inputs["paper"])
  rows = {r["model"]: r for r in paper["rows"]}
  search, encdec = rows["RNNsearch-50"], rows["RNNencdec-50"]
  seeds = len(search["seeds"])
  best = _read(inputs["multi30k"])
  lines = ["| result | ours | against | data |", "|---|---:|---:|---|"]
  lines.append(
    f"| Table 1 on the embedded corpus: RNNsearch-50, test BLEU ({seeds} seeds) | "
    f"{search['bleu_all']:.2f} ± {search['bleu_all_std']:.2f} | RNNencdec-50: "
    f"{encdec['bleu_all']:.2f} ± {encdec['bleu_all_std']:.2f} | `{inputs['paper']}` |"
  )
  published = best.get("published") or {}
  lines.append(
    f"| Multi30k en→fr test 2016 BLEU, {best['minutes']:.0f} CPU minutes "
    f"({best['updates']:,} updates) | {best['test_bleu']:.2f} | "
    f"{published.get('system', '-')}: {published.get('test_2016_bleu', '-')} | "
    f"`{inputs['multi30k']}` |"
  )
  decoders = _read(inputs["decoders"])
  points = {r["name"]: r for r in decoders["configurations"]}
  paper_decoder = points[decoders["baseline"]]
  luong = next(
    r
    for r in decoders["configurations"]
    if r["overrides"]["model.decoder"].startswith("luong")
    and r["overrides"]["model.normaliser"] == "softmax"
  )
  lines.append(
    f"| Attention's alignment error rate on the embedded corpus (lower is better), Luong et "
    f"al.'s decoder ({len(luong['seeds'])} seeds; test BLEU {luong['bleu_mean']:.2f} against "
    f"{paper_decoder['bleu_mean']:.2f}) | {luong['aer_mean']:.3f} ± {luong['aer_std']:.3f} | "
    f"the paper's decoder: {paper_decoder['aer_mean']:.3f} ± {paper_decoder['aer_std']:.3f} | "
    f"`{inputs['decoders']}` |"
  )
  for path in headline_speeds(inputs["speed"]):
    bench = _read(path)
    peer = bench["peer"]
    if peer.get("note") or peer.get("dtype", bench["dtype"]) != bench["dtype"]:
      raise ValueError(f"{path}: ours and the peer's dtypes differ ({peer.get('note')})")
    device = bench["device"]
    isa = _isa(device.get("vector_isa", []))
    lines.append(
      f"| Training tokens/s against the PyTorch peer, both {bench['dtype']} ("
      f"{device['cpu_model']} {isa}, {device['host_cpus']} cores, {bench['date'][:10]}) | "
      f"{peer['ratios']['train_tokens_per_s']['median']:.2f}x | "
      f"greedy decoding: {peer['ratios']['greedy_sentences_per_s']:.2f}x | `{path}` |"
    )
  return "\n".join(lines)


def headline_speeds(speed: str) -> list[str]:
  """The benchmark files the headline reports: `speed` itself if it is a file; if a folder, for
  every CPU model among its runs compared with the peer like for like (`peer.like_for_like`)
  at the benchmark preset in float32, the newest, oldest CPU first. Every machine measured has
  its row: the slower figures are not left out."""
  if not (ROOT / speed).is_dir():
    return [speed]
  newest: dict[str, tuple[str, str]] = {}
  for path in sorted((ROOT / speed).glob("*.json")):
    bench = json.loads(path.read_text())
    peer = bench.get("peer") or {}
    fair = peer.get("like_for_like") and peer.get("ratios") and not peer.get("note")
    cpu = (bench.get("device") or {}).get("cpu_model")
    if fair and cpu and bench.get("preset") == "bench" and bench.get("dtype") == "float32":
      if bench["date"] > newest.get(cpu, ("",))[0]:
        newest[cpu] = (bench["date"], str(path.relative_to(ROOT)))
  return [p for _, p in sorted(newest.values())]


# ---------------------------------------------------------------------- command line
def main(argv: Sequence[str] | None = None) -> list[Path]:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", type=Path, default=OUT, help="where the pages go")
  p.add_argument("--check", action="store_true", help="compare with the committed pages only")
  args = p.parse_args(argv)
  out = args.out.resolve()
  generated = pages(out)
  if args.check:
    generated[README] = readme_with_headline(README.read_text())
    stale = [path for path, text in generated.items() if _differs(path, text)]
    if stale:
      raise SystemExit("error: stale results pages: " + ", ".join(map(str, stale)))
    print(f"{len(generated)} results pages match the data")
    return []
  out.mkdir(parents=True, exist_ok=True)
  written = []
  generated[README] = readme_with_headline(README.read_text())
  for path, text in generated.items():
    if _differs(path, text):
      path.write_text(text)
      written.append(path)
  print(f"{len(generated)} results pages, {len(written)} written, in {out}")
  return written


def readme_with_headline(text: str) -> str:
  """`text` (the README) with the block between HEADLINE_BEGIN and HEADLINE_END replaced by
  `headline_table()`."""
  start, end = text.index(HEADLINE_BEGIN) + len(HEADLINE_BEGIN), text.index(HEADLINE_END)
  return text[:start] + "\n" + headline_table() + "\n" + text[end:]


def _differs(path: Path, text: str) -> bool:
  return not path.exists() or path.read_text() != text


if __name__ == "__main__":
  main()

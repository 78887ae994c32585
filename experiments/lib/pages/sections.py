"""The sections every results page is built from, read from a study folder's data.

A study folder (`experiments/lib/records.py`: its definition.json, report and run records) gives
a page how it was run, the machine, the results table, the significance tests, the learning
curves, each run's figures, the figures and tables its script drew, and the list of its files.
The small readers here (a study's run records and JSON files, the CPU a file was measured on)
serve the study modules beside this one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.lib import driver, records, reports
from experiments.lib.reports import fmt, mean_sd

ROOT = records.REPO_ROOT
RESULTS = records.RESULTS_ROOT
P_LEVEL = 0.05  # A difference the bootstrap gives p above this is called level.


# ---------------------------------------------------------------------- small helpers
def p_text(p: float | None, digits: int = 3) -> str:
  return "-" if p is None else f"{p:.{digits}f}"


def ar_text(test: Mapping[str, Any]) -> str:
  """The approximate randomisation's p of a test, to its trials' resolution (1e-4 at 10,000)."""
  p = test.get("ar_p_value")
  return p_text(p, max(3, len(str(test.get("ar_trials", 0))) - 1))


def verdict_of(diff: float, p: float | None) -> str:
  if p is None:
    return ""
  if p > P_LEVEL:
    return "level"
  return "ahead" if diff > 0 else "behind"


def rel_link(target: Path, page: Path) -> str:
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
        lambda m: f"![{m.group(1)}]({rel_link(source.parent / m.group(2), page)})",
        line,
      )
      line = re.sub(r"(?<!!)\[([^\]]+)\]\((?![a-z]+:)[^)]*\)", r"\1", line)
    out.append(line)
  return "\n".join(out).strip() + "\n"


def test_significance(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
  sig = report.get("significance") or {}
  return sig.get("per_split", {}).get("test") or sig.get("per_configuration") or {}


def bleu_key(row: Mapping[str, Any]) -> str:
  return "bleu" if "bleu_mean" in row else "test_bleu"


def run_records(study: Path, definition: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
  """{point: its runs' records}, linked points included."""
  out = {}
  for point in definition["points"]:
    out[point["name"]] = [json.loads((study / r["record"]).read_text()) for r in point["runs"]]
  return out


def seed_tests(recs: Sequence[Mapping[str, Any]], key: str) -> dict[int, float]:
  return {r["seed"]: r["results"]["test"][key] for r in recs if key in r["results"]["test"]}


def data_files(study: Path, definition: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
  """{name: content} of the study's report and other JSON files (a study without runs)."""
  names = [definition["report"], *definition["files"]]
  return {n: json.loads((study / n).read_text()) for n in names if n and n.endswith(".json")}


def isa_name(isa: Sequence[str]) -> str:
  return "AVX-512" if "avx512f" in isa else "AVX2" if "avx2" in isa else "no AVX2"


def cpu_name(data: Mapping[str, Any]) -> str:
  """ "AMD EPYC (AVX-512)" from a file's `cpu`, `device` or top-level `cpu_model` ("" if none)."""
  cpu = data.get("cpu") or data.get("device") or data
  model = cpu.get("cpu_model")
  return f"{model} ({isa_name(cpu.get('vector_isa', []))})" if model else ""


def date_of(data: Mapping[str, Any]) -> str:
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
    for name, data in data_files(study, definition).items():
      if cpu_name(data):
        by_cpu.setdefault(cpu_name(data), []).append(f"`{name}`")
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
  key = bleu_key(rows[0])
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
    cells.append([r["name"], str(len(r["seeds"])), *figures, p_text(p)])
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
  with_ar: bool = False,
) -> list[list[str]]:
  """One row per tested point of `pairs` ({point: what it is tested against}): the BLEU
  difference, its interval and p (and AR's p: `with_ar`), the differences by seed, and the `more`
  tests."""
  cells = []
  for name, base in pairs.items():
    t = tests.get(name, {})
    if t.get("difference") is None:
      continue
    lo, hi = t["difference_ci95"]
    cells.append(
      [name, f"{t['difference']:+.2f}", f"{lo:+.2f} to {hi:+.2f}", p_text(t["p_value"])]
      + [ar_text(t)] * with_ar
      + [" / ".join(f"{d:+.2f}" for d in seed_differences(recs, name, base)) or "-"]
      + [_difference(other.get(name), digits) for _, other, digits in more]
    )
  return cells


def _has_ar(*tests: Mapping[str, Any]) -> bool:
  """Whether any of the tests has approximate randomisation's p (reports before it have none)."""
  return any(t.get("ar_p_value") is not None for group in tests for t in group.values())


def _ar_agreement(*tests: Mapping[str, Any]) -> str:
  """Whether the bootstrap and approximate randomisation put each point on the same side of
  P_LEVEL (the pages' level/ahead/behind verdicts read the bootstrap's p)."""
  differ = [
    f"`{name}` (bootstrap {p_text(t['p_value'])}, AR {ar_text(t)})"
    for group in tests
    for name, t in group.items()
    if t.get("ar_p_value") is not None and (t["p_value"] <= P_LEVEL) != (t["ar_p_value"] <= P_LEVEL)
  ]
  if not differ:
    return f"Both tests put every point on the same side of p = {P_LEVEL}."
  return f"The tests fall on different sides of p = {P_LEVEL} for " + ", ".join(differ) + "."


def significance(report: Mapping[str, Any], recs: Mapping[str, Sequence[dict]]) -> list[str]:
  tests = test_significance(report)
  base = report.get("baseline")
  sig = report.get("significance") or {}
  pairs = {r["name"]: base for r in report.get("configurations", []) if r["name"] != base}
  more = _more_tests(sig)
  within = sig.get("within") or {"references": {}, "per_configuration": {}}
  with_ar = _has_ar(tests, within["per_configuration"])
  header = ["point", f"difference vs {base}", "95% interval", "p", *["AR p"] * with_ar, "by seed"]
  cells = _significance_rows(pairs, tests, more, recs, with_ar) if tests else []
  if not cells:
    return []
  lines = ["## Significance", "", *reports.table(header + [n for n, _, _ in more], cells), ""]
  refs = within["references"]
  more_within = _more_tests(within)
  rows = _significance_rows(refs, within["per_configuration"], more_within, recs, with_ar)
  for row in rows:
    row.insert(1, refs[row[0]])
  if rows:
    header = ["point", "against", "difference", "95% interval", "p", *["AR p"] * with_ar]
    header += ["by seed"]
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
  if with_ar:
    groups = (tests, within["per_configuration"])
    trials = {t["ar_trials"] for g in groups for t in g.values() if t.get("ar_p_value") is not None}
    lines += [
      "AR p: paired approximate randomisation of test BLEU, the same pairs "
      f"({' / '.join(f'{k:,}' for k in sorted(trials))} trials, sacrebleu's for its default seed: "
      "each swaps the two points' outputs of a random half of the sentences, every seed's "
      "together; a tie with the observed difference counts as extreme). " + _ar_agreement(*groups),
      "",
    ]
  return lines


def _difference(test: Mapping[str, Any] | None, digits: int) -> str:
  if not test or test.get("difference") is None:
    return "-"
  return f"{test['difference']:+.{digits}f} ({p_text(test['p_value'])})"


def seed_differences(recs: Mapping[str, Sequence[dict]], point: str, base: str) -> list[float]:
  mine, theirs = seed_tests(recs.get(point, []), "bleu"), seed_tests(recs.get(base, []), "bleu")
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
    lines += [f"![Learning curves]({rel_link(study / 'learning_curves.png', page)})", ""]
  return lines


def figures(
  definition: Mapping[str, Any], study: Path, page: Path, above: Sequence[str] = ()
) -> list[str]:
  """The study's figures not already shown `above` (the page's lines so far)."""
  text = "\n".join(above)
  shown = [
    f
    for f in definition["figures"]
    if f != "learning_curves.png" and f"({rel_link(study / f, page)})" not in text
  ]
  if not shown:
    return []
  lines = ["## Figures", ""]
  for name in shown:
    lines += [f"![{name}]({rel_link(study / name, page)})", ""]
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

"""The sentences of a study's conclusion that any study with a report can have: the ranking and
each point against the baseline, chrF where BLEU is level, the long sentences, the early
study's verdict, the learning curves, where attention points, and the study beside its
counterpart (the same points with one thing changed)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.lib import records, reports, sweeps
from experiments.lib.pages.sections import (
  P_LEVEL,
  RESULTS,
  bleu_key,
  p_text,
  seed_differences,
  seed_tests,
  test_significance,
  verdict_of,
)
from experiments.lib.pages.study import StudyPage
from experiments.lib.reports import mean_sd


def ranking(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, float]]:
  key = f"{bleu_key(rows[0])}_mean"
  return sorted(((r["name"], r[key]) for r in rows), key=lambda x: -x[1])


def _comparison(name: str, base: str, t: Mapping[str, Any], recs: Mapping) -> str:
  """One sentence: `name`'s test BLEU against `base`'s, its interval, p, verdict and seeds."""
  lo, hi = t["difference_ci95"]
  verdict = verdict_of(t["difference"], t["p_value"])
  seeds = seed_differences(recs, name, base)
  sign = ""
  if len(seeds) > 1:
    every = "both seeds" if len(seeds) == 2 else f"all {len(seeds)} seeds"
    if all(d > 0 for d in seeds) or all(d < 0 for d in seeds):
      sign = f"; the same sign on {every}"
    else:
      sign = "; the seeds differ in sign"
  return (
    f"`{name}` against `{base}`: {t['difference']:+.2f} test BLEU (95% interval "
    f"{lo:+.2f} to {hi:+.2f}), p {p_text(t['p_value'])}: {verdict}{sign}."
  )


def sweep_conclusion(report: Mapping[str, Any], recs: Mapping[str, Sequence[dict]]) -> list[str]:
  """What a study's rows and bootstrap say, one sentence per point against the baseline, and
  per point against its group's baseline where the study tested within groups."""
  rows = report.get("configurations") or []
  base = report.get("baseline")
  if not rows or base is None:
    return []
  tests = test_significance(report)
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
  base_seeds = seed_tests(recs.get(base, []), key)
  if (
    base_seeds
    and "model.features" in str(report.get("grid")) + str(report.get("command"))
    or (base_seeds and "model.attention" in str(report.get("grid")))
  ):
    for name, row in rows.items():
      mine = seed_tests(recs.get(name, []), key)
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
  if sweeps.copies(report.get("grid") or {}) and b.get("oov_recall_mean") is not None:
    shares = ", ".join(f"`{n}` {mean_sd(r, 'oov_recall', 3)}" for n, r in rows.items())
    out.append(f"Share of the references' words outside the target vocabulary produced: {shares}.")
  return out


def chrf_conclusion(report: Mapping[str, Any], recs: Mapping[str, Sequence[dict]]) -> list[str]:
  """chrF where a point moves it on every seed while its BLEU is level."""
  rows = {r["name"]: r for r in report.get("configurations") or []}
  base = report.get("baseline")
  tests = test_significance(report)
  out = []
  for name, row in rows.items():
    p = (tests.get(name) or {}).get("p_value")
    if name == base or p is None or p <= P_LEVEL or row.get("chrf_mean") is None:
      continue
    mine, theirs = seed_tests(recs.get(name, []), "chrf"), seed_tests(recs.get(base, []), "chrf")
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
      f"{mean_sd(rows[base], key)}, {t['difference']:+.2f} (p {p_text(t['p_value'])}): "
      f"{verdict_of(t['difference'], t['p_value'])}."
    )
  return out


def early_conclusion(report: Mapping[str, Any], early_name: str) -> list[str]:
  """The early study's (`early_name`, run early in training) difference against the baseline
  beside this study's, point by point."""
  early_dir = RESULTS / (early_name or "-")
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
    p = (test_significance(report).get(name) or {}).get("p_value")
    if p is not None and p > P_LEVEL:
      held = f"level here (p {p_text(p)}), so the early verdict does not hold"
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


# ---------------------------------------------------------------------- beside a counterpart
def _counterpart(counterpart: tuple[str, str] | None) -> tuple[dict[str, Any], str] | None:
  """The counterpart study's report and its name in a sentence, where it has one."""
  if counterpart is None:
    return None
  name, words = counterpart
  path = RESULTS / name / "sweep.json"
  return (json.loads(path.read_text()), words) if path.exists() else None


def transfer_conclusion(report: Mapping[str, Any], counterpart: tuple[str, str] | None) -> list:
  """Whether the ranking of a study's points matches that of the same points in its counterpart
  study (`StudyPage.counterpart`)."""
  found = _counterpart(counterpart)
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


# The attention figures a counterpart table shows where both studies have them.
EXTRA_COLUMNS = (
  ("identical_word_peaks", "twin peaks", 3),
  ("attention_zero_share", "zero weights", 3),
)


def counterpart_table(report: Mapping[str, Any], counterpart: tuple[str, str] | None) -> list:
  """The points this study shares with its counterpart side by side: mean ± sd test BLEU and,
  where both have them, twin peaks and the share of zero attention weights, with each side's
  rank by test BLEU."""
  found = _counterpart(counterpart)
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
  source = counterpart[0]
  return [
    f"## Beside `{source}`",
    "",
    *reports.table(header, cells),
    "",
    f"The points both studies trained, mean ± sd over seeds; ranks by mean test BLEU among these "
    f"points on each side. `{source}` is the same study {words}.",
    "",
  ]


def conclusion(
  study: Path, report: Mapping[str, Any] | None, recs: Mapping, about: StudyPage
) -> list[str]:
  """Every sentence the study's data supports, as a list under its heading."""
  sentences: list[str] = []
  if report:
    sentences += sweep_conclusion(report, recs)
    sentences += chrf_conclusion(report, recs)
    sentences += long_conclusion(report)
    sentences += early_conclusion(report, about.early)
    sentences += curve_conclusion(report)
    sentences += attention_conclusion(report, recs)
    sentences += transfer_conclusion(report, about.counterpart)
  sentences += about.conclusion(study) if about.conclusion else []
  if not sentences:
    return []
  return ["## Conclusion", "", *[f"- {s}" for s in sentences], ""]

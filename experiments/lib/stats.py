"""Statistics over seeds and systems: mean and sample standard deviation, paired bootstrap,
paired approximate randomisation.

The paired bootstrap resamples the test sentences with replacement `n_samples` times (numpy's
generator seeded with `BOOTSTRAP_SEED`) and scores both systems on each resample with sacrebleu's
BLEU (13a) from its per-sentence statistics. With several seeds, every seed of a system is scored
on the same resample and their statistics are summed (the BLEU of the seeds' outputs pooled), so
the sentence is the unit resampled: K seeds with the same outputs give one seed's p. p is
two-sided: the share of resamples whose BLEU difference, centred on the resamples' mean
difference, is at least as far from 0 as the observed one, (count + 1) / (n_samples + 1).
(sacrebleu's own test centres the absolute differences, which reads about half a two-sided p,
and pooling seeds by concatenating their outputs counted each sentence once per seed.)

The second test, paired approximate randomisation (AR), is sacrebleu's `--paired-ar`
(`sacrebleu.significance._paired_ar_test`) on the same seeds-pooled sentence statistics: each of
`AR_TRIALS` trials swaps the two systems' outputs of a random half of the sentences (all seeds of
a sentence together), with sacrebleu's draws for its default seed. p = (count + 1) / (trials + 1),
the count being the trials whose absolute difference is at least the observed one. sacrebleu
counts only those above it, so a tie is never "as extreme": systems that differ in one sentence
(every trial's difference is the observed one) get p = 1 / (trials + 1) there, 1 here.

Both tests score with sacrebleu's private `_extract_corpus_statistics` (per-sentence statistics)
and `_compute_score_from_stats` (a score from summed ones); tests/experiments/test_sacrebleu_api.py
fails, naming them, if a sacrebleu release changes either.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np
import sacrebleu

from seq2seq.data import metrics

BOOTSTRAP_SEED = 12345  # Also AR's: sacrebleu's default (SACREBLEU_SEED), its draws reproduced.
# AR's trials per pair, sacrebleu's default: 1.6 s a pair (chrF 3.0 s) for three seeds of
# Multi30k's 1,000 test sentences, statistics included, on a shared 2-core AMD EPYC; 1,000
# trials take 1.2 s (2.8 s) and resolve p to 1e-3 only.
AR_TRIALS = 10_000


def last_quarter_gain(steps: Sequence[int], values: Sequence[float]) -> float | None:
  """How much a learning curve still moved over the last quarter of its steps: the value at the
  last step minus the curve's value at 3/4 of it, read linearly between the evaluations on
  either side where none falls there (None where the curve starts later). Under 1 BLEU on
  validation is the studies' "flattened". (It once took the last evaluation at or before 3/4:
  with evaluations every 500 of 3,000 steps, step 2,000, the last third.)"""
  if not steps or steps[0] > 0.75 * steps[-1]:
    return None
  return float(values[-1] - np.interp(0.75 * steps[-1], steps, values))


def trailing_mean(values: Sequence[float], window: int) -> list[float]:
  """Each value replaced by the mean of the last `window` values up to it (fewer at the start)."""
  return [float(np.mean(values[max(0, i + 1 - window) : i + 1])) for i in range(len(values))]


def plateau_budget(
  steps: Sequence[int], values: Sequence[float], tolerance: float = 1.0, window: int = 1
) -> int:
  """The budget at which a long run's validation BLEU has reached its plateau, for the reruns of
  a study: the first logged step from which the learning curve stays within `tolerance` of its
  best value to the end (every later value counts, so one lucky evaluation does not set the
  budget early). A curve that ends out of the tolerance, having fallen from its best (a small
  model overfitting its corpus), has no such step; its budget is the first step at which it
  came within the tolerance of its best, the shortest training that reached the plateau. With
  `window` > 1 the curve is first replaced by its trailing mean over that many evaluations
  (fewer at the start), for curves whose evaluations swing by more than the tolerance from one
  to the next."""
  if not steps:
    raise ValueError("an empty learning curve has no plateau")
  smoothed = trailing_mean(values, window)
  floor = max(smoothed) - tolerance
  if smoothed[-1] < floor:
    return int(next(s for s, v in zip(steps, smoothed, strict=True) if v >= floor))
  budget = steps[-1]
  for step, value in zip(reversed(steps), reversed(smoothed), strict=True):
    if value < floor:
      break
    budget = step
  return int(budget)


BOOTSTRAP = "paired bootstrap resampling of test sentences, two-sided, seeds pooled per resample"
AR = (
  "paired approximate randomisation (sacrebleu's trials and seed), two-sided, the seeds of a "
  "sentence swapped together, ties counted as extreme"
)


def mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
  """Mean and sample standard deviation (0 for one value); (None, None) when any is missing."""
  if not values or any(v is None for v in values):
    return None, None
  std = statistics.stdev(values) if len(values) > 1 else 0.0
  return statistics.fmean(values), std


def ranks(values: Sequence[float]) -> np.ndarray:
  """The ranks of `values` from 0, tied values sharing the mean of their ranks."""
  x = np.asarray(values, np.float64)
  first = np.empty(len(x))
  first[np.argsort(x, kind="stable")] = np.arange(len(x))
  _, group = np.unique(x, return_inverse=True)
  return (np.bincount(group, first) / np.bincount(group))[group]


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
  """Spearman's rank correlation of two series of one length (ties at their mean rank), or None
  where it is undefined: fewer than two values, or either series constant."""
  if len(a) != len(b):
    raise ValueError(f"series of {len(a)} and {len(b)} values")
  x, y = ranks(a), ranks(b)
  x, y = x - x.mean(), y - y.mean()
  norm = np.sqrt((x * x).sum() * (y * y).sum())
  return float((x * y).sum() / norm) if len(x) > 1 and norm > 0 else None


def bootstrap_caption(baseline: str, what: str = "test BLEU") -> str:
  """The sentence under a study table that says what its p column is."""
  return (
    f"p: paired bootstrap of {what} against {baseline} (two-sided; the test sentences resampled, "
    "each resample scoring every seed, paired with the baseline's seed; 1 where the outputs are "
    "the baseline's)."
  )


def _require_paired_seeds(baseline: Sequence[Any], system: Sequence[Any]) -> None:
  if len(baseline) != len(system) or not baseline:
    raise ValueError(f"paired seeds needed: {len(baseline)} baseline, {len(system)} system")


def paired_bootstrap(
  baseline: Sequence[Sequence[str]],
  system: Sequence[Sequence[str]],
  references: Sequence[str],
  n_samples: int,
  metric: str = "bleu",
) -> dict[str, Any]:
  """BLEU (or chrF: `metric="chrf"`) of `system` against `baseline`: one list of translations
  of `references` per seed, seed S of the system paired with seed S of the baseline (see the
  module docstring).

  Returns p_value, both systems' score (of their seeds pooled; the key is the metric's name),
  bootstrap means and 95% percentile intervals (ci95: [low, high]), the difference system -
  baseline with its interval, and sacrebleu's signature. Identical outputs get p = 1 without
  resampling.
  """
  _require_paired_seeds(baseline, system)
  if [list(h) for h in baseline] == [list(h) for h in system]:
    return {"p_value": 1.0, "identical_to_baseline": True}
  scorer, score = _scorer(metric)
  base, sys_ = (pooled_statistics(scorer, h, references) for h in (baseline, system))
  result = resampled(base, sys_, score, n_samples, metric)
  return {**result, "signature": str(scorer.get_signature())}


def paired_ar(
  baseline: Sequence[Sequence[str]],
  system: Sequence[Sequence[str]],
  references: Sequence[str],
  n_trials: int = AR_TRIALS,
  metric: str = "bleu",
) -> dict[str, Any]:
  """The paired approximate randomisation test of BLEU (or chrF) of `system` against `baseline`,
  seeds paired and pooled as `paired_bootstrap`'s (see the module docstring): {"ar_p_value",
  "ar_trials"}, to stand beside the bootstrap's result. Identical outputs get p = 1."""
  _require_paired_seeds(baseline, system)
  if [list(h) for h in baseline] == [list(h) for h in system]:
    return {"ar_p_value": 1.0, "ar_trials": n_trials}
  scorer, score = _scorer(metric)
  base, sys_ = (pooled_statistics(scorer, h, references) for h in (baseline, system))
  return {"ar_p_value": randomised(base, sys_, score, n_trials), "ar_trials": n_trials}


def _scorer(metric: str) -> tuple[Any, Any]:
  """sacrebleu's scorer of `metric` ("bleu" or "chrf") and its score of summed statistics."""
  scorer = {"bleu": sacrebleu.metrics.BLEU, "chrf": sacrebleu.metrics.CHRF}[metric]()

  def score(stats_: np.ndarray) -> float:
    return float(scorer._compute_score_from_stats(list(stats_)).score)

  return scorer, score


def pooled_statistics(
  scorer: Any, seeds: Sequence[Sequence[str]], references: Sequence[str]
) -> np.ndarray:
  """[N, statistics]: each sentence's sacrebleu statistics, summed over the seeds' outputs."""
  refs = [list(references)]
  per_seed = [scorer._extract_corpus_statistics(metrics.scored_text(h), refs) for h in seeds]
  return np.sum([np.asarray(s, np.float64) for s in per_seed], axis=0)


def randomised(base: np.ndarray, system: np.ndarray, score: Any, n_trials: int) -> float:
  """AR's p of `score` (a function of summed per-sentence statistics) on the [N, k] per-sentence
  statistics of both systems: sacrebleu's trials (`_paired_ar_test`: pseudo-system a takes the
  baseline's statistics of the sentences drawn True, b the system's), ties counted as extreme."""
  rng = np.random.default_rng(BOOTSTRAP_SEED)
  drawn = rng.integers(2, size=(n_trials, len(base)), dtype=bool)  # [trials, N]
  scores_a = np.array([score(row) for row in drawn @ base + ~drawn @ system])
  scores_b = np.array([score(row) for row in ~drawn @ base + drawn @ system])
  observed = abs(score(system.sum(0)) - score(base.sum(0)))
  extreme = np.abs(scores_a - scores_b) >= observed - 1e-9
  return float((extreme.sum() + 1) / (n_trials + 1))


def paired_bootstrap_twins(
  baseline: Sequence[np.ndarray], system: Sequence[np.ndarray], n_samples: int
) -> dict[str, Any]:
  """How often attention peaks on an output word's source twin (`metrics.twin_figures`'s
  `identical_word_peaks`), `system` against `baseline`, by the same resampling of the test
  sentences: per seed an [N, 2] array of each sentence's twin pairs and pairs peaking on the twin
  (`metrics.twin_counts`), seed S paired with the baseline's seed S, seeds pooled. The share is
  pooled over the resampled sentences' pairs, as over a split's."""
  _require_paired_seeds(baseline, system)

  def share(stats_: np.ndarray) -> float:
    return float(stats_[1] / stats_[0]) if stats_[0] else float("nan")

  base, sys_ = (np.sum([np.asarray(s, np.float64) for s in x], axis=0) for x in (baseline, system))
  return resampled(base, sys_, share, n_samples, "identical_word_peaks")


def resampled(
  base: np.ndarray, system: np.ndarray, score: Any, n_samples: int, name: str
) -> dict[str, Any]:
  """The paired bootstrap of `score` (a function of summed per-sentence statistics) on the
  [N, k] per-sentence statistics of both systems: p, both scores with bootstrap means and 95%
  intervals, the difference and its interval."""
  n = len(base)
  rng = np.random.default_rng(BOOTSTRAP_SEED)
  counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_samples)])
  base_scores = np.array([score(row) for row in counts @ base])
  sys_scores = np.array([score(row) for row in counts @ system])
  sys_score, base_score = score(system.sum(0)), score(base.sum(0))
  observed = sys_score - base_score
  diffs = sys_scores - base_scores
  defined = diffs[~np.isnan(diffs)]  # A resample may hold no pair of a ratio's denominator.
  extreme = np.abs(defined - defined.mean()) >= abs(observed) - 1e-9
  interval = lambda x: [float(v) for v in np.nanpercentile(x, [2.5, 97.5])]
  return {
    "p_value": float((extreme.sum() + 1) / (len(defined) + 1)),
    name: sys_score,
    "mean": float(np.nanmean(sys_scores)),
    "ci95": interval(sys_scores),
    f"baseline_{name}": base_score,
    "baseline_mean": float(np.nanmean(base_scores)),
    "baseline_ci95": interval(base_scores),
    "difference": observed,
    "difference_ci95": interval(diffs),
  }

"""Statistics over seeds and systems: mean and sample standard deviation, paired bootstrap.

The paired bootstrap resamples the test sentences with replacement `n_samples` times (numpy's
generator seeded with `BOOTSTRAP_SEED`) and scores both systems on each resample with sacrebleu's
BLEU (13a) from its per-sentence statistics. With several seeds, every seed of a system is scored
on the same resample and their statistics are summed (the BLEU of the seeds' outputs pooled), so
the sentence is the unit resampled: K seeds with the same outputs give one seed's p. p is
two-sided: the share of resamples whose BLEU difference, centred on the resamples' mean
difference, is at least as far from 0 as the observed one, (count + 1) / (n_samples + 1).
(sacrebleu's own test centres the absolute differences, which reads about half a two-sided p,
and pooling seeds by concatenating their outputs counted each sentence once per seed.)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np
import sacrebleu

from seq2seq import metrics

BOOTSTRAP_SEED = 12345


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


def mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
  """Mean and sample standard deviation (0 for one value); (None, None) when any is missing."""
  if not values or any(v is None for v in values):
    return None, None
  std = statistics.stdev(values) if len(values) > 1 else 0.0
  return statistics.fmean(values), std


def bootstrap_caption(baseline: str, what: str = "test BLEU") -> str:
  """The sentence under a study table that says what its p column is."""
  return (
    f"p: paired bootstrap of {what} against {baseline} (two-sided; the test sentences resampled, "
    "each resample scoring every seed, paired with the baseline's seed; 1 where the outputs are "
    "the baseline's)."
  )


def paired_bootstrap(
  baseline: Sequence[Sequence[str]],
  system: Sequence[Sequence[str]],
  references: Sequence[str],
  n_samples: int,
) -> dict[str, Any]:
  """BLEU of `system` against `baseline`: one list of translations of `references` per seed,
  seed S of the system paired with seed S of the baseline (see the module docstring).

  Returns p_value, both systems' BLEU (of their seeds pooled), bootstrap means and 95%
  percentile intervals (ci95: [low, high]), the difference system - baseline with its interval,
  and sacrebleu's signature. Identical outputs get p = 1 without resampling.
  """
  if len(baseline) != len(system) or not baseline:
    raise ValueError(f"paired seeds needed: {len(baseline)} baseline, {len(system)} system")
  if [list(h) for h in baseline] == [list(h) for h in system]:
    return {"p_value": 1.0, "identical_to_baseline": True}
  metric = sacrebleu.metrics.BLEU()
  refs = [list(references)]

  def pooled_stats(seeds: Sequence[Sequence[str]]) -> np.ndarray:  # [N, statistics]
    per_seed = [metric._extract_corpus_statistics(metrics.scored_text(h), refs) for h in seeds]
    return np.sum([np.asarray(s, np.float64) for s in per_seed], axis=0)

  def bleu(stats_: np.ndarray) -> float:
    return float(metric._compute_score_from_stats(stats_).score)

  base, sys_ = pooled_stats(baseline), pooled_stats(system)
  n = len(references)
  rng = np.random.default_rng(BOOTSTRAP_SEED)
  counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_samples)])
  base_scores = np.array([bleu(row) for row in counts @ base])
  sys_scores = np.array([bleu(row) for row in counts @ sys_])
  sys_bleu, base_bleu = bleu(sys_.sum(0)), bleu(base.sum(0))
  observed = sys_bleu - base_bleu
  diffs = sys_scores - base_scores
  extreme = np.abs(diffs - diffs.mean()) >= abs(observed) - 1e-9
  interval = lambda x: [float(v) for v in np.percentile(x, [2.5, 97.5])]
  return {
    "p_value": float((extreme.sum() + 1) / (n_samples + 1)),
    "bleu": sys_bleu,
    "mean": float(sys_scores.mean()),
    "ci95": interval(sys_scores),
    "baseline_bleu": base_bleu,
    "baseline_mean": float(base_scores.mean()),
    "baseline_ci95": interval(base_scores),
    "difference": observed,
    "difference_ci95": interval(diffs),
    "signature": str(metric.get_signature()),
  }

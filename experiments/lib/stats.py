"""Statistics over seeds and systems: mean and sample standard deviation, paired bootstrap.

The paired bootstrap is sacrebleu's (`sacrebleu.significance.PairedTest`, test type "bs",
seeded by the environment variable SACREBLEU_SEED or 12345): the test sentences are resampled
with replacement `n_samples` times and both systems scored on each resample; p is the share of
resamples whose centred absolute BLEU difference exceeds the observed one, (count + 1) /
(n_samples + 1), so its floor is 1 / (n_samples + 1). Two-sided: p says whether the systems
differ, the BLEU columns say which is ahead.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import sacrebleu
from sacrebleu.significance import PairedTest


def last_quarter_gain(steps: Sequence[int], values: Sequence[float]) -> float | None:
  """How much a learning curve still moved over the last quarter of its steps: the value at the
  last step minus the value at the last logged step <= 3/4 of it (None without such a step).
  Under 1 BLEU on validation is the studies' "flattened"."""
  if not steps:
    return None
  cut = 0.75 * steps[-1]
  earlier = [v for s, v in zip(steps, values, strict=True) if s <= cut]
  return values[-1] - earlier[-1] if earlier else None


BOOTSTRAP = "sacrebleu paired bootstrap resampling (PairedTest, test_type='bs')"


def mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
  """Mean and sample standard deviation (0 for one value); (None, None) when any is missing."""
  if not values or any(v is None for v in values):
    return None, None
  std = statistics.stdev(values) if len(values) > 1 else 0.0
  return statistics.fmean(values), std


def paired_bootstrap(
  baseline: Sequence[str],
  system: Sequence[str],
  references: Sequence[str],
  n_samples: int,
  names: tuple[str, str] = ("baseline", "system"),
) -> dict[str, Any]:
  """BLEU of `system` against `baseline`, both translations of `references` line by line.

  Returns p_value, the system's BLEU, bootstrap mean and 95% interval, the same for the
  baseline, and sacrebleu's signature. Identical outputs get p = 1 without resampling (the
  test would give them its floor, which reads as a significant difference).
  """
  if list(baseline) == list(system):
    return {"p_value": 1.0, "identical_to_baseline": True}
  test = PairedTest(
    [(names[0], list(baseline)), (names[1], list(system))],
    {"BLEU": sacrebleu.metrics.BLEU()},
    references=[list(references)],
    test_type="bs",
    n_samples=n_samples,
  )
  signatures, table = test()
  base_result, result = table["BLEU"]
  return {
    "p_value": result.p_value,
    "bleu": result.score,
    "mean": result.mean,
    "ci95": result.ci,
    "baseline_bleu": base_result.score,
    "baseline_mean": base_result.mean,
    "baseline_ci95": base_result.ci,
    "signature": str(signatures["BLEU"].format()),
  }

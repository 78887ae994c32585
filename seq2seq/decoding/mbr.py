"""Minimum Bayes risk decoding: of a sentence's candidates (its samples, `decode.sampling`, or
the beam's n-best list), choose the one with the highest expected utility.

`decode.mbr` names it: "" keeps the search's order; a spec

    mbr(utility=chrf, evidence=uniform)

ranks candidate c_i by Kumar and Byrne's (2004) expected utility over the evidence set, the
distinct texts t among the candidates, c_i's own included: E(i) = sum over t of P(t) u(c_i, t).
u is sacrebleu's sentence chrF (`chrf`) or sentence BLEU with effective order (`bleu`) on the
detokenised text. P(t) is the mass of t's occurrences over all the candidates' mass, with a mass
of 1 each (`uniform`: over samples, the Monte Carlo estimate; a text drawn k times weighs k) or
the model's probability (`model`, for a beam's n-best list; refused over samples, which are
already drawn in proportion to it). Identical texts score alike. The first candidate after
ranking is the translation, and the ranking is the n-best list (`--nbest`); ties keep the
search's order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import sacrebleu

from seq2seq.common import registry

FIELD = "decode.mbr"


def _chrf() -> Callable[[str, str], float]:
  metric = sacrebleu.metrics.CHRF()
  return lambda hyp, ref: metric.sentence_score(hyp, [ref]).score


def _bleu() -> Callable[[str, str], float]:
  metric = sacrebleu.metrics.BLEU(effective_order=True)
  return lambda hyp, ref: metric.sentence_score(hyp, [ref]).score


UTILITIES = {"chrf": _chrf, "bleu": _bleu}
EVIDENCE = ("uniform", "model")


@dataclasses.dataclass(frozen=True)
class Mbr:
  """The settings of `decode.mbr`."""

  utility: str = "chrf"
  evidence: str = "uniform"

  def __post_init__(self):
    if self.utility not in UTILITIES:
      raise ValueError(f"utility must be one of {', '.join(UTILITIES)}, got {self.utility!r}")
    if self.evidence not in EVIDENCE:
      raise ValueError(f"evidence must be one of {', '.join(EVIDENCE)}, got {self.evidence!r}")

  def __str__(self) -> str:
    return str(registry.Spec("mbr", self))


def parse(text: str | Mbr | None) -> Mbr | None:
  """The MBR settings a `decode.mbr` spec names; None for "" (the search's order)."""
  usage = "'' (off) or mbr(utility=chrf|bleu, evidence=uniform|model)"
  return registry.optional_settings(Mbr, "mbr", text, FIELD, usage)


def expected_utilities(
  texts: Sequence[str], utility: Callable[[str, str], float], weights: np.ndarray
) -> np.ndarray:
  """E(i) for every candidate [N] (see the module docstring), from each candidate's mass
  `weights` [N] (non-negative, not all 0); duplicate texts pool their mass."""
  distinct = list(dict.fromkeys(texts))
  text_N = np.array([distinct.index(text) for text in texts])
  mass_D = np.zeros(len(distinct))
  np.add.at(mass_D, text_N, np.asarray(weights, np.float64))
  utility_DD = np.array([[utility(hyp, ref) for ref in distinct] for hyp in distinct], np.float64)
  return (utility_DD @ (mass_D / mass_D.sum()))[text_N]


def evidence_weights(scores: Sequence[float], evidence: str) -> np.ndarray:
  """Each candidate's mass in the evidence set [N], from its log-probability `scores` [N]: 1
  (`uniform`) or its probability up to a common factor (`model`)."""
  if evidence == "uniform":
    return np.ones(len(scores))
  logp = np.asarray(scores, np.float64)
  if not np.isfinite(logp).any():
    return np.ones(len(scores))
  return np.exp(logp - logp[np.isfinite(logp)].max())


def order(texts: Sequence[str], scores: Sequence[float], settings: Mbr) -> list[int]:
  """The candidates' indices by expected utility, highest first (ties in the given order)."""
  utilities = expected_utilities(
    texts, UTILITIES[settings.utility](), evidence_weights(scores, settings.evidence)
  )
  return sorted(range(len(texts)), key=lambda i: -utilities[i])

"""Minimum Bayes risk decoding: of a sentence's candidates (its samples, `decode.sampling`, or
the beam's n-best list), choose the one that agrees best with the others.

`decode.mbr` names it: "" keeps the search's order; a spec

    mbr(utility=chrf, evidence=uniform)

ranks the candidates by their expected utility against the candidates as pseudo-references:
E(i) = sum over j != i of w_j u(c_i, c_j) / sum over j != i of w_j, where u is sacrebleu's
sentence chrF (`chrf`) or sentence BLEU with effective order (`bleu`) on the detokenised text,
and the weights w are equal (`uniform`: with samples, the Monte Carlo estimate of the expected
utility under the model; duplicates count as often as they were drawn) or the model's
probabilities of the candidates renormalised over the list (`model`, for an n-best list). A
candidate is not its own evidence. The first candidate after ranking is the translation, and
the ranking is the n-best list (`--nbest`); ties keep the search's order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import sacrebleu

from seq2seq import registry

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
  """E(i) for every candidate [N] (see the module docstring); one candidate scores 0."""
  n = len(texts)
  table = np.zeros((n, n))
  for i in range(n):
    for j in range(n):
      if i != j:
        table[i, j] = utility(texts[i], texts[j])
  others = np.where(np.eye(n, dtype=bool), 0.0, np.asarray(weights, np.float64)[None, :])
  totals = others.sum(axis=1)
  return np.divide((table * others).sum(axis=1), totals, out=np.zeros(n), where=totals > 0)


def evidence_weights(scores: Sequence[float], evidence: str) -> np.ndarray:
  """The weight of each candidate as a pseudo-reference, from its log-probability `scores`."""
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

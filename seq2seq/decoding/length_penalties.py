"""Length penalties: what beam search ranks a finished output by, given its summed
log-probability s (<= 0) and its length n (tokens up to and including EOS).

`decode.length_penalty` names one (a registry beside the model's components):

* `none`: s, the raw log-probability (short outputs win: each word costs log p < 0).
* `power(alpha=1)`: s / n^alpha, GroundHog's length normalisation at alpha = 1 (the paper's
  decoder), fairseq's `--lenpen`; alpha = 0 is `none`.
* `gnmt(alpha=0.6)`: s / lp(n) with lp(n) = ((5 + n) / 6)^alpha (Wu et al. 2016, eq. 14),
  gentler than `power` on short outputs; Wu et al. tuned alpha in [0.6, 0.7].
* `word(penalty=P)`: s - P * n, Marian's `--word-penalty`; a negative P is a reward per word
  (the word reward of He et al. 2016 and Murray and Chiang 2018).

GNMT's coverage penalty (`decode.coverage_penalty`) is a separate term added to whichever of
these is chosen.

Beam search stops when no live hypothesis can beat the best finished one, so each penalty also
gives `bound(s, t, max_len)`: an upper bound on what any output extending a live hypothesis of
score s and t tokens can be ranked at. Its length ends in t + 1 .. max_len and its score s' <= s
(every word adds log p <= 0); every penalty here is nondecreasing in s, so the bound is the best
of `rank(s, n)` over those lengths, which for each penalty is one end of the range.
`tests/decoding/test_decode.py` checks the search against exhaustive search under every penalty.

A penalty is a frozen dataclass (hashable: it is a static argument of the jitted searches);
`make(spec)` builds the one a spec names.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from seq2seq.common import registry

REGISTRY: registry.Registry[LengthPenalty] = registry.Registry(
  "length penalty", field="decode.length_penalty"
)
register = REGISTRY.register
names = REGISTRY.names
spec = REGISTRY.spec


@functools.cache
def _make(text: str) -> LengthPenalty:
  parsed = spec(text)
  return REGISTRY.get(parsed.name)(parsed.settings)


def make(penalty: str | registry.Spec | LengthPenalty) -> LengthPenalty:
  """The length penalty a `decode.length_penalty` spec names (a penalty is returned as it is)."""
  if isinstance(penalty, LengthPenalty):
    return penalty
  return _make(str(spec(penalty)))


def _float_lengths(lengths: jax.Array | int) -> jax.Array:
  return jnp.maximum(jnp.asarray(lengths), 1).astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class LengthPenalty:
  """Base class: `rank(scores, lengths)` -> what the search ranks finished outputs by (any
  leading axes; -inf stays -inf), and `bound(scores, t, max_len)` (see the module docstring)."""

  name: ClassVar[str] = "base"
  Settings: ClassVar[type] = registry.NoSettings
  settings: object = registry.NoSettings()

  def rank(self, scores: jax.Array, lengths: jax.Array | int) -> jax.Array:
    raise TypeError(f"{type(self).__name__} must define rank")

  def bound(self, scores: jax.Array, t: jax.Array | int, max_len: int) -> jax.Array:
    """Nondecreasing in the length (as `power` and `gnmt` are for s <= 0): the longest output."""
    return self.rank(scores, max_len)

  def __str__(self) -> str:
    return str(registry.Spec(self.name, self.settings))


@dataclasses.dataclass(frozen=True)
class AlphaSettings:
  """alpha >= 0: a negative exponent would reward length without bound; an infinite one
  would rank every length alike."""

  alpha: float = 1.0

  def __post_init__(self):
    if not self.alpha >= 0:
      raise ValueError(f"alpha must be >= 0, got {self.alpha}")
    if self.alpha == math.inf:
      raise ValueError(f"alpha must be finite, got {self.alpha}")


@register("none")
@dataclasses.dataclass(frozen=True)
class NoPenalty(LengthPenalty):
  """s: the summed log-probability as it is."""

  def rank(self, scores, lengths):
    return scores


@register("power")
@dataclasses.dataclass(frozen=True)
class Power(LengthPenalty):
  """s / base(n)^alpha with base(n) = n (GroundHog's normalisation at alpha = 1)."""

  Settings: ClassVar[type] = AlphaSettings

  def base(self, lengths: jax.Array) -> jax.Array:
    return lengths

  def rank(self, scores, lengths):
    if self.settings.alpha == 0:
      return scores
    return scores / self.base(_float_lengths(lengths)) ** self.settings.alpha


@dataclasses.dataclass(frozen=True)
class GnmtSettings(AlphaSettings):
  alpha: float = 0.6


@register("gnmt")
@dataclasses.dataclass(frozen=True)
class Gnmt(Power):
  """s / ((5 + n) / 6)^alpha (Wu et al. 2016): `power` over a base that grows from 1."""

  Settings: ClassVar[type] = GnmtSettings

  def base(self, lengths):
    return (5.0 + lengths) / 6.0


@dataclasses.dataclass(frozen=True)
class WordSettings:
  """penalty: subtracted once per output token; negative values reward length."""

  penalty: float = 0.0

  def __post_init__(self):
    if not math.isfinite(self.penalty):
      raise ValueError(f"penalty must be finite, got {self.penalty}")


@register("word")
@dataclasses.dataclass(frozen=True)
class Word(LengthPenalty):
  """s - P * n (Marian's word penalty)."""

  Settings: ClassVar[type] = WordSettings

  def rank(self, scores, lengths):
    return scores - self.settings.penalty * _float_lengths(lengths)

  def bound(self, scores, t, max_len):
    # A penalty favours the shortest possible ending (t + 1 tokens), a reward the longest.
    shortest = jnp.minimum(jnp.asarray(t) + 1, max_len)
    return self.rank(scores, shortest if self.settings.penalty >= 0 else max_len)

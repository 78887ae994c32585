"""Attention normalisers: scores e_j over the allowed positions -> weights alpha_j on the simplex.

`model.normaliser` names one (a registry beside scores and structures):

* `softmax`: alpha_j = exp(e_j) / sum_k exp(e_k), every allowed position above zero (the paper's).
* `sparsemax`: the Euclidean projection of e onto the simplex, alpha_j = max(e_j - tau, 0)
  (Martins and Astudillo 2016): positions scored more than tau below the best get exactly zero.
* `entmax15`: 1.5-entmax, alpha_j = max(e_j / 2 - tau, 0)^2 (Peters, Niculae and Martins 2019),
  between the two: sparse, but smoother than sparsemax near the threshold.

Both sparse maps are computed exactly by sorting: with z sorted in decreasing order, the support
is the longest prefix of k positions whose threshold tau_k (a function of the first k sorted
scores) stays below the k-th score, and tau is that prefix's tau_k. Their gradients are JAX's
derivatives of these closed forms (tau is a smooth function of the support's scores, the
support piecewise constant), which `tests/model/test_normalisers.py` checks against finite
differences.

Every normaliser takes scores [..., S] and a mask (broadcast to them) and returns float32
weights (float64 for float64 input): masked positions get exactly 0 and never reach the output
or its gradient, whatever their value; a row with no allowed position is all zeros, never NaN.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from seq2seq.common import registry
from seq2seq.model import attention

REGISTRY: registry.Registry[Normaliser] = registry.Registry("normaliser", field="model.normaliser")
register = REGISTRY.register
names = REGISTRY.names
spec = REGISTRY.spec


def make_normaliser(normaliser: str | registry.Spec) -> Normaliser:
  """The normaliser a `model.normaliser` spec names: a callable (e, mask) -> alpha."""
  return REGISTRY.get(spec(normaliser).name)()


@dataclasses.dataclass(frozen=True)
class Normaliser:
  """Base class; `sparse`: whether it can give exact zeros inside the mask; `plain`: the
  paper's normaliser, what `model.normaliser` stays at where no scores are normalised."""

  name: ClassVar[str] = "base"
  sparse: ClassVar[bool] = False
  plain: ClassVar[bool] = False
  Settings: ClassVar[type] = registry.NoSettings

  def __call__(self, e: jax.Array, mask: jax.Array, axis: int = -1) -> jax.Array:
    raise TypeError(f"{type(self).__name__} must define __call__")


@register("softmax")
@dataclasses.dataclass(frozen=True)
class Softmax(Normaliser):
  """exp(e_j) / sum_k exp(e_k) over the allowed positions (`attention.masked_softmax`)."""

  plain: ClassVar[bool] = True

  def __call__(self, e, mask, axis=-1):
    return attention.masked_softmax(e, mask, axis=axis)


def _sorted_scores(z: jax.Array, mask: jax.Array, axis: int):
  """(z less the row's best allowed score, the masked positions at -2; that sorted in
  decreasing order along `axis`; the mask broadcast to z; whether the row has any allowed
  position). Both maps are unchanged by a shift of the scores, and with the best at 0 the
  running sums of the support's scores (and squares) lose no precision to large scores. -2 is
  below any threshold of sparsemax and 1.5-entmax (both have tau >= max z - 1, as no weight
  exceeds 1), so masked positions never join the support."""
  mask = jnp.broadcast_to(mask.astype(bool), z.shape)
  z = jnp.where(mask, z, 0.0)
  best = jnp.max(jnp.where(mask, z, -jnp.inf), axis=axis, keepdims=True)
  any_allowed = jnp.isfinite(best)
  best = jax.lax.stop_gradient(jnp.where(any_allowed, best, 0.0))
  z = jnp.where(mask, z - best, -2.0)
  z_sorted = -jnp.sort(-z, axis=axis)
  return z, z_sorted, mask, any_allowed


def _ranks(z: jax.Array, axis: int) -> jax.Array:
  """1, 2, ..., S along `axis`, shaped to broadcast against z."""
  n = z.shape[axis]
  shape = [1] * z.ndim
  shape[axis] = n
  return jnp.arange(1, n + 1, dtype=z.dtype).reshape(shape)


def _at_support_size(values: jax.Array, support: jax.Array, axis: int) -> jax.Array:
  """values[k* - 1] along `axis`, k* the support size (the number of true `support` entries,
  which form a prefix)."""
  k = jnp.sum(support, axis=axis, keepdims=True).astype(jnp.int32)
  return jnp.take_along_axis(values, jnp.maximum(k - 1, 0), axis=axis)


def _finish(alpha, mask, any_allowed):
  return jnp.where(mask & any_allowed, alpha, 0.0)


@register("sparsemax")
@dataclasses.dataclass(frozen=True)
class Sparsemax(Normaliser):
  """alpha = max(e - tau, 0), sum alpha = 1: tau_k = (sum of the k best - 1) / k."""

  sparse: ClassVar[bool] = True

  def __call__(self, e, mask, axis=-1):
    z = e.astype(jnp.promote_types(e.dtype, jnp.float32))
    z, z_sorted, mask, any_allowed = _sorted_scores(z, mask, axis)
    k = _ranks(z, axis)
    tau_k = (jnp.cumsum(z_sorted, axis=axis) - 1.0) / k
    tau = _at_support_size(tau_k, z_sorted > tau_k, axis)
    return _finish(jnp.maximum(z - tau, 0.0), mask, any_allowed)


@register("entmax15")
@dataclasses.dataclass(frozen=True)
class Entmax15(Normaliser):
  """alpha = max(e / 2 - tau, 0)^2, sum alpha = 1: with z = e / 2 sorted, tau_k solves
  sum_{j <= k} (z_j - tau)^2 = 1, tau_k = mean_k - sqrt((1 - k (meansq_k - mean_k^2)) / k)."""

  sparse: ClassVar[bool] = True

  def __call__(self, e, mask, axis=-1):
    z = e.astype(jnp.promote_types(e.dtype, jnp.float32)) / 2.0
    z, z_sorted, mask, any_allowed = _sorted_scores(z, mask, axis)
    k = _ranks(z, axis)
    mean = jnp.cumsum(z_sorted, axis=axis) / k
    mean_sq = jnp.cumsum(z_sorted * z_sorted, axis=axis) / k
    delta = (1.0 - k * (mean_sq - mean * mean)) / k
    # Prefixes past the support can have delta < 0; they are never chosen, and the floor keeps
    # their square root (and its gradient) finite.
    tau_k = mean - jnp.sqrt(jnp.maximum(delta, 1e-12))
    tau = _at_support_size(tau_k, z_sorted >= tau_k, axis)
    return _finish(jnp.square(jnp.maximum(z - tau, 0.0)), mask, any_allowed)

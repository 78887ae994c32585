"""Alignment models: the unnormalised score e_j of one decoder query against every source position.

Every score function is an NNX module with two methods:

* `keys(annotations_BSH) -> keys_BSK`: whatever can be computed from the annotations alone,
  once per sentence (U_a h_j for `additive`, W h_j for `general`, h_j / |h_j| for `cosine`).
* `__call__(query_D, keys_SK, annotations_SH) -> e_S`: the score of ONE query (the previous
  decoder state s_{i-1}) against all S positions. `seq2seq.model.attention.attend` lifts it over the
  batch with `jax.vmap`.

Register a new one with `@register("name")` on a `Score` subclass. Settings of its own go in a
nested frozen dataclass `Settings` and are named in the spec, e.g.
`model.score="cosine(sharpness=5)"` (`seq2seq.common.registry`); `make_score(spec, ...)` builds it
and lists the valid names when the name is unknown.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.common import registry
from seq2seq.model import layers

REGISTRY: registry.Registry[Score] = registry.Registry(
  "score function", field="model.score", sort=True
)
register = REGISTRY.register  # Class decorator: @register("name") on a Score subclass.
names = REGISTRY.names  # The registered score names, sorted.
get = REGISTRY.get  # The score class registered under a name.
spec = REGISTRY.spec  # The Spec (name, typed settings) of a `model.score` string.


def make_score(
  score: str | registry.Spec, query_dim: int, annot_dim: int, cfg: Any, *, rngs: nnx.Rngs
) -> Score:
  """Builds the score function `score` (a spec) for queries of size D and annotations of size H;
  `cfg` holds the model's shared settings (`models.ModelSettings`)."""
  parsed = spec(score)
  return get(parsed.name)(query_dim, annot_dim, cfg, parsed.settings, rngs=rngs)


class Score(nnx.Module):
  """Base class: the `keys` default is the annotations themselves."""

  name = "base"
  positional = False  # Scores depend on absolute positions, not only on the keys given.
  takes_features = False  # Alignment features add to its keys (`model.features`).
  plain = False  # The paper's score: what `model.score` stays at when a structure scores alone.
  Settings = registry.NoSettings  # The score's own settings (a frozen dataclass).

  def __init__(self, query_dim: int, annot_dim: int, cfg: Any, settings: Any, *, rngs: nnx.Rngs):
    pass

  @classmethod
  def source_limit(cls, settings: Any) -> int | None:
    """The most source positions (EOS included) it can score; None: no limit."""
    return None

  @classmethod
  def matmul_flops(
    cls, settings: Any, query_dim: int, key_dim: int, attn_dim: int, slots: float
  ) -> tuple[float, float]:
    """(one key, one query): matmul FLOPs (2 per multiply-add) of `keys` for one annotation
    `key_dim` wide, and of scoring one query against `slots` keys. The default suits keys that
    are the annotations and one product with each; a score doing other matmuls overrides it."""
    return 0.0, slots * 2 * key_dim

  def keys(self, annotations_BSH: jax.Array) -> jax.Array:
    return annotations_BSH

  @property
  def keys_are_annotations(self) -> bool:
    """Whether `keys` gives the annotations unchanged (so a memory need not store both)."""
    return type(self).keys is Score.keys

  def __call__(self, query_D: jax.Array, keys_SK: jax.Array, annotations_SH: jax.Array):
    raise TypeError(f"{type(self).__name__} must define __call__")


def _require_same_size(name: str, query_dim: int, annot_dim: int) -> None:
  if query_dim != annot_dim:
    raise ValueError(
      f"score {name!r} compares the decoder state (size {query_dim}) with annotations (size "
      f"{annot_dim}) directly, so the sizes must match: set model.dec_hidden = "
      f"2 * model.enc_hidden, or use 'general' or 'additive'"
    )


@register("additive")
class Additive(Score):
  """Bahdanau et al.: e_j = v_a^T tanh(W_a s + U_a h_j); U_a h_j is the precomputed key."""

  takes_features = True
  plain = True

  def __init__(self, query_dim, annot_dim, cfg, settings, *, rngs):
    self.w_a = layers.dense(query_dim, cfg.attn_dim, cfg, rngs=rngs, role="attention")
    self.u_a = layers.dense(annot_dim, cfg.attn_dim, cfg, rngs=rngs, role="attention")
    self.v_a = layers.dense(cfg.attn_dim, 1, cfg, rngs=rngs, role="zeros")

  @classmethod
  def matmul_flops(cls, settings, query_dim, key_dim, attn_dim, slots):
    return 2 * key_dim * attn_dim, 2 * query_dim * attn_dim + slots * 2 * attn_dim

  def keys(self, annotations_BSH):
    return self.u_a(annotations_BSH)

  def __call__(self, query_D, keys_SK, annotations_SH):
    # tanh over [S, A] is recomputed in the backward pass rather than kept: kept, a decoder
    # scan stacks it for every step ([T, B, S, A] floats written and zero-filled per training
    # step), while recomputing reads only W_a s per step and the keys, which do not change
    # along the scan. The values and gradients are the same bits either way.
    energy = jax.checkpoint(lambda wq_A, keys_SK: self.v_a(jnp.tanh(wq_A[None, :] + keys_SK)))
    return energy(self.w_a(query_D), keys_SK)[:, 0]


REGISTRY.alias("concat", "additive")  # Luong et al.'s name: v_a^T tanh(W_a [s ; h_j]).


@register("dot")
class Dot(Score):
  """Luong et al.: e_j = s^T h_j (requires dec_hidden == 2 * enc_hidden)."""

  def __init__(self, query_dim, annot_dim, cfg, settings, *, rngs):
    _require_same_size(self.name, query_dim, annot_dim)
    self.dtype = layers.compute_dtype(cfg)

  def __call__(self, query_D, keys_SK, annotations_SH):
    return _dot(keys_SK, query_D, self.dtype)


@register("scaled")
class ScaledDot(Dot):
  """Vaswani et al.: e_j = s^T h_j / sqrt(d)."""

  def __call__(self, query_D, keys_SK, annotations_SH):
    return super().__call__(query_D, keys_SK, annotations_SH) / jnp.sqrt(query_D.shape[-1])


@register("general")
class General(Score):
  """Luong et al.: e_j = s^T W h_j; W h_j is the precomputed key."""

  def __init__(self, query_dim, annot_dim, cfg, settings, *, rngs):
    self.w = layers.dense(annot_dim, query_dim, cfg, rngs=rngs, role="attention")
    self.dtype = layers.compute_dtype(cfg)

  @classmethod
  def matmul_flops(cls, settings, query_dim, key_dim, attn_dim, slots):
    return 2 * key_dim * query_dim, slots * 2 * query_dim

  def keys(self, annotations_BSH):
    return self.w(annotations_BSH)

  def __call__(self, query_D, keys_SK, annotations_SH):
    return _dot(keys_SK, query_D, self.dtype)


@register("cosine")
class Cosine(Score):
  """Graves et al.'s content-based addressing: e_j = beta * cos(s, h_j), beta learned.

  The key is the unit-normalised annotation; beta starts at `sharpness`.
  """

  @dataclasses.dataclass(frozen=True)
  class Settings:
    sharpness: float = 10.0  # Initial beta; learned.

  def __init__(self, query_dim, annot_dim, cfg, settings, *, rngs):
    _require_same_size(self.name, query_dim, annot_dim)
    self.sharpness = nnx.Param(jnp.asarray(settings.sharpness, jnp.float32))
    self.dtype = layers.compute_dtype(cfg)

  def keys(self, annotations_BSH):
    return _unit(annotations_BSH.astype(jnp.float32))

  def __call__(self, query_D, keys_SK, annotations_SH):
    return self.sharpness[...] * _dot(keys_SK, _unit(query_D.astype(jnp.float32)), self.dtype)


def _dot(keys_SK: jax.Array, query_D: jax.Array, dtype: jnp.dtype) -> jax.Array:
  """keys_SK @ query_D [S] as every matmul computes it (`layers.matmul`): the factors rounded to
  the compute dtype, the products summed and returned in float32."""
  return jnp.dot(keys_SK.astype(dtype), query_D.astype(dtype), preferred_element_type=jnp.float32)


def _unit(x: jax.Array, eps: float = 1e-6) -> jax.Array:
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


@register("location")
class Location(Score):
  """Luong et al.'s location-based score: e = W s over positions, blind to content.

  W maps the query to `max_len` scores, of which the first S are used; a longer source is an
  error (translation truncates inputs to fit).
  """

  @dataclasses.dataclass(frozen=True)
  class Settings:
    max_len: int = 100  # Longest source (in tokens, EOS included) it can address.

    def __post_init__(self):
      if self.max_len < 1:
        raise ValueError(f"max_len must be positive, got {self.max_len}")

  positional = True

  @classmethod
  def source_limit(cls, settings):
    return settings.max_len

  @classmethod
  def matmul_flops(cls, settings, query_dim, key_dim, attn_dim, slots):
    return 0.0, 2 * query_dim * settings.max_len

  def __init__(self, query_dim, annot_dim, cfg, settings, *, rngs):
    self.max_len = settings.max_len
    self.w = layers.dense(query_dim, settings.max_len, cfg, rngs=rngs, role="attention")

  def __call__(self, query_D, keys_SK, annotations_SH):
    num_positions = keys_SK.shape[0]
    if num_positions > self.max_len:
      raise ValueError(
        f"score 'location(max_len={self.max_len})' addresses at most {self.max_len} source "
        f"positions, got a batch padded to {num_positions}"
      )
    return self.w(query_D)[:num_positions]

"""Alignment features: what the additive score may know about the attention so far.

Each feature is a per-source-position quantity carried from one decoder step to the next that
enters the additive score through its keys (Tu et al. 2016; Mi et al. 2016; Cohn et al. 2016;
Chorowski et al. 2015):

  e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j + sum_f key_f(state_f)_j)

`model.features` lists the features of a run as "+"-joined specs with their own settings
(`seq2seq.common.registry`), e.g. "coverage(fertility=true)+prev_attention(filters=8)"; "" is none.
A feature is an `nnx.Module` registered by name, its settings a nested frozen dataclass
`Settings`, with four methods, which the decoder calls for every configured feature in
registration order:

* `prepare(annotations_BSH)`: what it computes once per sentence (e.g. the learned fertility);
* `init_state(mask_BS)`: its state before the first step [B, S];
* `keys(state_BS, prepared)`: its contribution to the step's keys [B, S, A];
* `update(state_BS, alpha_BS)`: its state after a step with attention alpha.

All are off by default; a model without features is exactly the paper's.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.common import registry
from seq2seq.model import layers


class Feature(nnx.Module, abc.ABC):
  """The protocol of an alignment feature (see the module docstring)."""

  name: ClassVar[str]
  Settings: ClassVar[type] = registry.NoSettings  # The feature's own settings.

  def prepare(self, annotations_BSH: jax.Array) -> Any:
    return None

  def init_state(self, mask_BS: jax.Array) -> jax.Array:
    return jnp.zeros(mask_BS.shape, jnp.float32)

  @abc.abstractmethod
  def keys(self, state_BS: jax.Array, prepared: Any) -> jax.Array:
    """Its contribution to the step's keys [B, S, A]."""

  @abc.abstractmethod
  def update(self, state_BS: jax.Array, alpha_BS: jax.Array) -> jax.Array:
    """Its state after a step whose attention is alpha [B, S]."""


REGISTRY: registry.Registry[Feature] = registry.Registry(
  "alignment feature", field="model.features"
)
register = REGISTRY.register  # Class decorator: @register("name") on a Feature subclass.
names = REGISTRY.names  # The registered features, in registration order (the order of keys).
get = REGISTRY.get  # The feature class registered under a name.


def specs(text: str) -> tuple[registry.Spec, ...]:
  """The features a `model.features` string turns on, in registration order."""
  order = {name: i for i, name in enumerate(names())}
  return tuple(sorted(REGISTRY.specs(text), key=lambda s: order[s.name]))


def make_feature(spec: registry.Spec, cfg: Any, annot_dim: int, *, rngs: nnx.Rngs) -> Feature:
  """Builds feature `spec` for annotations of size H; `cfg`: the model's shared settings."""
  return get(spec.name)(cfg, annot_dim, spec.settings, rngs=rngs)


@register("coverage")
class Coverage(Feature):
  """The running sum of past attention, cov_{i-1,j} = sum_{k<i} alpha_kj (Tu et al.), divided
  by a fertility N_j: 1, or with `fertility=true` a learned N_j = `fertility_max` *
  sigmoid(U_f h_j). Keys: V_c cov_{i-1,j} / N_j."""

  @dataclasses.dataclass(frozen=True)
  class Settings:
    fertility: bool = False  # Divide the coverage by a learned fertility N_j.
    fertility_max: float = 2.0  # N in N_j = N * sigmoid(U_f h_j).

    def __post_init__(self):
      if self.fertility_max <= 0:
        raise ValueError(f"fertility_max must be positive, got {self.fertility_max}")

  def __init__(self, cfg: Any, annot_dim: int, settings: Settings, *, rngs: nnx.Rngs):
    self.cov_proj = layers.dense(1, cfg.attn_dim, cfg, rngs=rngs, role="attention")
    self.fertility_max = float(settings.fertility_max)
    self.fert_proj = (
      layers.dense(annot_dim, 1, cfg, rngs=rngs, role="attention", use_bias=True)
      if settings.fertility
      else None
    )

  def prepare(self, annotations_BSH):
    """The fertility N_j [B, S] (ones without `fertility`)."""
    if self.fert_proj is None:
      return jnp.ones(annotations_BSH.shape[:2], jnp.float32)
    gate = jax.nn.sigmoid(self.fert_proj(annotations_BSH).astype(jnp.float32)[..., 0])
    return self.fertility_max * gate

  def keys(self, state_BS, fertility_BS):
    return self.cov_proj((state_BS / fertility_BS)[..., None])

  def update(self, state_BS, alpha_BS):
    return state_BS + alpha_BS


@register("prev_attention")
class PreviousAttention(Feature):
  """`filters` filters of width `width` (odd) over the previous step's attention (Chorowski et
  al.'s location-aware features). Keys: V_p conv(alpha_{i-1})_j."""

  @dataclasses.dataclass(frozen=True)
  class Settings:
    filters: int = 8  # Filters over the previous step's attention.
    width: int = 5  # Their width (odd).

    def __post_init__(self):
      if self.width < 1 or self.width % 2 == 0:
        raise ValueError(f"width must be odd, got {self.width}")
      if self.filters < 1:
        raise ValueError(f"filters must be positive, got {self.filters}")

  def __init__(self, cfg: Any, annot_dim: int, settings: Settings, *, rngs: nnx.Rngs):
    self.width = int(settings.width)
    filters = int(settings.filters)
    self.prev_conv = layers.dense(self.width, filters, cfg, rngs=rngs, role="attention")
    self.prev_proj = layers.dense(filters, cfg.attn_dim, cfg, rngs=rngs, role="attention")

  def keys(self, prev_alpha_BS, prepared):
    half = self.width // 2
    padded = jnp.pad(prev_alpha_BS, ((0, 0), (half, half)))
    src_len = prev_alpha_BS.shape[1]
    windows_BSW = jnp.stack([padded[:, w : w + src_len] for w in range(self.width)], -1)
    return self.prev_proj(self.prev_conv(windows_BSW))

  def update(self, state_BS, alpha_BS):
    return alpha_BS

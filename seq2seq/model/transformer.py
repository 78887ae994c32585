"""The Transformer's blocks (Vaswani et al. 2017), pre-norm as Xiong et al. (2020) and the
toolkits' current recipes have them: multi-head scaled dot-product attention, the position-wise
feed-forward layer, sinusoidal or learned positions, and the self-attention layer the encoder
stacks (`encoders.TransformerEncoder`), and the decoder's layer (`decoders.TransformerDecoder`):
causal self-attention over the words so far, cross-attention over the source, feed-forward.

The decoder's cross-attention draws its score from the registry (`model.score`; `scaled` is the
paper's) and its weights from the registered normaliser (`model.normaliser`), one score per
head on the head's projections, so the attention families this project studies apply per head.

Each sublayer reads its input layer-normalised and adds its output, dropped out in training,
to the input: x + Dropout(F(LN(x))); a last layer normalisation closes the stack. Projections
are initialised by Xavier's uniform scheme, as in the paper, whatever `model.init` says: the
recurrent schemes' small normals suit embeddings and gates, not a stack of residual layers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.model import layers, normalisers, scores

POSITIONS = ("sinusoidal", "learned")
XAVIER = nnx.initializers.xavier_uniform()


@dataclasses.dataclass(frozen=True)
class StackSettings:
  """The settings of a stack of Transformer layers, the encoder's and the decoder's
  (`model.encoder` / `model.decoder` = `transformer(...)`)."""

  layers: int = 2
  heads: int = 4
  inner: int = 0  # Feed-forward units; 0: four times the width.
  positions: str = "sinusoidal"  # sinusoidal | learned.
  max_positions: int = 512  # Tokens a learned table holds.

  def __post_init__(self):
    if self.layers < 1 or self.heads < 1 or self.inner < 0:
      raise ValueError("layers and heads must be at least 1, inner at least 0")
    if self.positions not in POSITIONS:
      raise ValueError(f"positions must be one of {', '.join(POSITIONS)}, got {self.positions!r}")


def sinusoids(length: int, width: int) -> jax.Array:
  """The paper's positions [length, width]: sin(p / 10000^(2i/width)) in the even units and the
  cosine in the odd ones."""
  position = jnp.arange(length, dtype=jnp.float32)[:, None]
  rate = jnp.exp(-math.log(10_000.0) * jnp.arange(0, width, 2, dtype=jnp.float32) / width)
  table = jnp.zeros((length, width), jnp.float32)
  table = table.at[:, 0::2].set(jnp.sin(position * rate))
  return table.at[:, 1::2].set(jnp.cos(position * rate[: width // 2]))


def embedded(project: nnx.Module, emb: jax.Array) -> jax.Array:
  """The words' embeddings projected to the layers' width D and scaled by sqrt(D), as the paper
  scales its embeddings, so that the words weigh as much as the positions added to them (unit
  scale) whatever `model.init` makes of the embeddings."""
  return project(emb).astype(jnp.float32) * math.sqrt(project.out_features)


def position_table(kind: str, learned: Any, length: int, width: int, field: str) -> jax.Array:
  """Positions [length, width]: the paper's sinusoids, or the first `length` rows of a learned
  table [max_positions, width] (`learned`), refused past its end; `field` names the setting."""
  if kind == "sinusoidal":
    return sinusoids(length, width)
  if length > learned.shape[0]:
    raise ValueError(
      f"{length} positions are past the learned positions' {learned.shape[0]} ({field}'s "
      "max_positions)"
    )
  return learned[...][:length]


class LayerNorm(nnx.Module):
  """Layer normalisation over the last axis, in float32, gain 1 and bias 0 at the start."""

  def __init__(self, width: int, eps: float = 1e-6):
    self.eps = eps
    self.gain = nnx.Param(jnp.ones((width,), jnp.float32))
    self.bias = nnx.Param(jnp.zeros((width,), jnp.float32))

  def __call__(self, x: jax.Array) -> jax.Array:
    x = x.astype(jnp.float32)
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + self.eps) * self.gain[...] + self.bias[...]


class MultiHeadAttention(nnx.Module):
  """`heads` heads of scaled dot-product attention from queries [B, T, D] over memory [B, S, D]
  (the queries themselves in self-attention), keys where `mask_BS` is 0 left out."""

  def __init__(self, width: int, heads: int, cfg: Any, *, rngs: nnx.Rngs):
    if width % heads:
      raise ValueError(f"heads ({heads}) must divide the model width ({width})")
    self.heads, self.head_dim = heads, width // heads
    self.query = layers.dense(width, width, cfg, rngs=rngs, use_bias=True, init=XAVIER)
    self.key_value = layers.dense(width, 2 * width, cfg, rngs=rngs, use_bias=True, init=XAVIER)
    self.out = layers.dense(width, width, cfg, rngs=rngs, use_bias=True, init=XAVIER)

  def _split(self, x: jax.Array) -> jax.Array:  # [B, L, D] -> [B, heads, L, head_dim]
    b, n, _ = x.shape
    return jnp.swapaxes(x.reshape(b, n, self.heads, self.head_dim), 1, 2)

  def project_query(self, x_BTD: jax.Array) -> jax.Array:
    """The queries [B, heads, T, head_dim] of inputs [B, T, D]."""
    return self._split(self.query(x_BTD).astype(jnp.float32))

  def project_memory(self, memory_BSD: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The keys and values [B, S, D] (heads not yet split) of memory [B, S, D]."""
    k, v = jnp.split(self.key_value(memory_BSD).astype(jnp.float32), 2, axis=-1)
    return k, v

  def mix(self, q_BhTd, k_BSD, v_BSD, mask, dropout_rate=0.0, rng=None) -> jax.Array:
    """Scaled dot-product attention of split queries over keys and values [B, S, D], through
    the output projection: [B, T, D]. `mask` [B, S] (every query alike) or [B, T, S] (a query's
    own keys: the decoder's causal mask) is 0 where a key is left out."""
    k, v = self._split(k_BSD), self._split(v_BSD)
    scores = jnp.einsum("bhtd,bhsd->bhts", q_BhTd, k) / math.sqrt(self.head_dim)
    mask = mask[:, None, None, :] if mask.ndim == 2 else mask[:, None, :, :]
    scores = jnp.where(mask > 0, scores, -1e9)
    weights = layers.dropout(jax.nn.softmax(scores, axis=-1), dropout_rate, rng)
    return self.merge(jnp.einsum("bhts,bhsd->bhtd", weights, v))

  def merge(self, mixed_BhTd: jax.Array) -> jax.Array:
    """The heads' outputs [B, heads, T, head_dim] side by side, projected: [B, T, D]."""
    b, _, t, _ = mixed_BhTd.shape
    return self.out(jnp.swapaxes(mixed_BhTd, 1, 2).reshape(b, t, -1)).astype(jnp.float32)

  def __call__(self, x_BTD, memory_BSD, mask, dropout_rate=0.0, rng=None) -> jax.Array:
    k, v = self.project_memory(memory_BSD)
    return self.mix(self.project_query(x_BTD), k, v, mask, dropout_rate, rng)


class FeedForward(nnx.Module):
  """max(0, x W1 + b1) W2 + b2, [B, L, D] -> [B, L, D] through `inner` units."""

  def __init__(self, width: int, inner: int, cfg: Any, *, rngs: nnx.Rngs):
    self.up = layers.dense(width, inner, cfg, rngs=rngs, use_bias=True, init=XAVIER)
    self.down = layers.dense(inner, width, cfg, rngs=rngs, use_bias=True, init=XAVIER)

  def __call__(self, x: jax.Array, dropout_rate=0.0, rng=None) -> jax.Array:
    hidden = layers.dropout(jax.nn.relu(self.up(x).astype(jnp.float32)), dropout_rate, rng)
    return self.down(hidden).astype(jnp.float32)


class SelfAttentionLayer(nnx.Module):
  """x + Dropout(SelfAttention(LN(x))), then + Dropout(FeedForward(LN(.)))."""

  def __init__(self, width: int, heads: int, inner: int, cfg: Any, *, rngs: nnx.Rngs):
    self.attention_norm = LayerNorm(width)
    self.attention = MultiHeadAttention(width, heads, cfg, rngs=rngs)
    self.feed_forward_norm = LayerNorm(width)
    self.feed_forward = FeedForward(width, inner, cfg, rngs=rngs)

  def __call__(self, x_BSD, mask_BS, dropout_rate=0.0, rng=None) -> jax.Array:
    keys = [None] * 4 if rng is None else list(jax.random.split(rng, 4))
    normed = self.attention_norm(x_BSD)
    attended = self.attention(normed, normed, mask_BS, dropout_rate, keys[0])
    x_BSD = x_BSD + layers.dropout(attended, dropout_rate, keys[1])
    fed = self.feed_forward(self.feed_forward_norm(x_BSD), dropout_rate, keys[2])
    return x_BSD + layers.dropout(fed, dropout_rate, keys[3])


class CrossMemory(NamedTuple):
  """What a layer's cross-attention computes once per sentence from the annotations."""

  keys: jax.Array  # [B, heads, S, head_dim]: each head's projection of the annotations.
  values: jax.Array  # [B, heads, S, head_dim].
  scored: tuple[jax.Array, ...]  # Each head's score keys [B, S, K] (empty for scaled dot).


class CrossAttention(nnx.Module):
  """`heads` heads from the decoder's queries [B, T, D] over the annotations [B, S, H]: each
  head projects both to D / heads units, scores them with its own instance of the registered
  score `score` and turns the scores into weights over the real source positions with the
  registered normaliser `normaliser`. Parameter-free scaled dot product (`scaled`, the paper's)
  scores every head in one product; any other score runs per head, lifted over the batch and
  the queries as the recurrent models lift it over the batch."""

  def __init__(self, width, memory_width, heads, score, normaliser, cfg: Any, *, rngs: nnx.Rngs):
    if width % heads:
      raise ValueError(f"heads ({heads}) must divide the decoder width ({width})")
    self.heads, self.head_dim = heads, width // heads
    self.query = layers.dense(width, width, cfg, rngs=rngs, use_bias=True, init=XAVIER)
    self.key_value = layers.dense(
      memory_width, 2 * width, cfg, rngs=rngs, use_bias=True, init=XAVIER
    )
    self.out = layers.dense(width, width, cfg, rngs=rngs, use_bias=True, init=XAVIER)
    for h in range(1, heads + 1):
      built = scores.make_score(score, self.head_dim, self.head_dim, cfg, rngs=rngs)
      setattr(self, f"score_{h}", built)
    self.fused = type(self.score_1) is scores.ScaledDot
    self.normalise = normalisers.make_normaliser(normaliser)

  def _split(self, x: jax.Array) -> jax.Array:  # [B, L, D] -> [B, heads, L, head_dim]
    b, n, _ = x.shape
    return jnp.swapaxes(x.reshape(b, n, self.heads, self.head_dim), 1, 2)

  def _score(self, h: int) -> scores.Score:
    return getattr(self, f"score_{h + 1}")

  def prepare(self, annotations_BSH: jax.Array) -> CrossMemory:
    kv = self.key_value(annotations_BSH).astype(jnp.float32)
    k, v = (self._split(x) for x in jnp.split(kv, 2, axis=-1))
    scored = () if self.fused else tuple(self._score(h).keys(k[:, h]) for h in range(self.heads))
    return CrossMemory(k, v, scored)

  def scores(self, q_BhTd: jax.Array, memory: CrossMemory, fused: bool | None = None):
    """e [B, heads, T, S] float32; `fused=False` scores scaled dot product per head too."""
    if self.fused if fused is None else fused:
      return jnp.einsum("bhtd,bhsd->bhts", q_BhTd, memory.keys) / math.sqrt(self.head_dim)
    per_head = []
    for h in range(self.heads):
      keys = memory.scored[h] if memory.scored else memory.keys[:, h]
      one = jax.vmap(jax.vmap(self._score(h), in_axes=(0, None, None)))
      per_head.append(one(q_BhTd[:, h], keys, memory.keys[:, h]).astype(jnp.float32))
    return jnp.stack(per_head, axis=1)

  def __call__(self, x_BTD, memory: CrossMemory, mask_BS, dropout_rate=0.0, rng=None):
    """(the attended [B, T, D] float32, the weights [B, heads, T, S] float32)."""
    q = self._split(self.query(x_BTD).astype(jnp.float32))
    e = self.scores(q, memory)
    alpha = self.normalise(e, jnp.broadcast_to(mask_BS[:, None, None, :] > 0, e.shape))
    mixed = jnp.einsum("bhts,bhsd->bhtd", layers.dropout(alpha, dropout_rate, rng), memory.values)
    b, _, t, _ = mixed.shape
    out = self.out(jnp.swapaxes(mixed, 1, 2).reshape(b, t, -1)).astype(jnp.float32)
    return out, alpha


class DecoderLayer(nnx.Module):
  """x + Dropout(SelfAttention(LN(x))) over the words so far, then + Dropout(CrossAttention(LN(.)))
  over the source, then + Dropout(FeedForward(LN(.))). `__call__` runs every target position at
  once under a causal mask (training, scoring); `step` runs one position against the keys and
  values of the positions before it, cached (decoding)."""

  def __init__(self, width, memory_width, heads, inner, score, normaliser, cfg, *, rngs):
    self.self_norm = LayerNorm(width)
    self.self_attention = MultiHeadAttention(width, heads, cfg, rngs=rngs)
    self.cross_norm = LayerNorm(width)
    self.cross_attention = CrossAttention(
      width, memory_width, heads, score, normaliser, cfg, rngs=rngs
    )
    self.feed_forward_norm = LayerNorm(width)
    self.feed_forward = FeedForward(width, inner, cfg, rngs=rngs)

  def __call__(self, x_BTD, memory: CrossMemory, mask_BS, dropout_rate=0.0, rng=None):
    """(outputs [B, T, D], cross-attention weights [B, heads, T, S])."""
    keys = [None] * 6 if rng is None else list(jax.random.split(rng, 6))
    normed = self.self_norm(x_BTD)
    t = x_BTD.shape[1]
    causal = jnp.tril(jnp.ones((t, t), jnp.float32))[None]
    k, v = self.self_attention.project_memory(normed)
    q = self.self_attention.project_query(normed)
    attended = self.self_attention.mix(q, k, v, causal, dropout_rate, keys[0])
    x_BTD = x_BTD + layers.dropout(attended, dropout_rate, keys[1])
    return self._cross_and_feed(x_BTD, memory, mask_BS, dropout_rate, keys[2:])

  def step(self, x_B1D, cache_k_BTD, cache_v_BTD, position_B, memory: CrossMemory, mask_BS):
    """One position per sentence, at `position_B`: (outputs [B, 1, D], weights [B, heads, 1,
    S], the caches [B, T, D] with this position's keys and values written in)."""
    normed = self.self_norm(x_B1D)
    k_new, v_new = self.self_attention.project_memory(normed)
    slots = jnp.arange(cache_k_BTD.shape[1])
    here = (slots[None, :] == position_B[:, None])[..., None]
    cache_k_BTD = jnp.where(here, k_new, cache_k_BTD)
    cache_v_BTD = jnp.where(here, v_new, cache_v_BTD)
    seen = (slots[None, :] <= position_B[:, None]).astype(jnp.float32)
    q = self.self_attention.project_query(normed)
    x_B1D = x_B1D + self.self_attention.mix(q, cache_k_BTD, cache_v_BTD, seen)
    x_B1D, alpha = self._cross_and_feed(x_B1D, memory, mask_BS, 0.0, [None] * 4)
    return x_B1D, alpha, cache_k_BTD, cache_v_BTD

  def _cross_and_feed(self, x, memory, mask_BS, dropout_rate, keys):
    attended, alpha = self.cross_attention(
      self.cross_norm(x), memory, mask_BS, dropout_rate, keys[0]
    )
    x = x + layers.dropout(attended, dropout_rate, keys[1])
    fed = self.feed_forward(self.feed_forward_norm(x), dropout_rate, keys[2])
    return x + layers.dropout(fed, dropout_rate, keys[3]), alpha

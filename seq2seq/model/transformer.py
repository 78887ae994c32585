"""The Transformer's blocks (Vaswani et al. 2017), pre-norm as Xiong et al. (2020) and the
toolkits' current recipes have them: multi-head scaled dot-product attention, the position-wise
feed-forward layer, sinusoidal or learned positions, and the self-attention layer the encoder
stacks (`encoders.TransformerEncoder`).

Each sublayer reads its input layer-normalised and adds its output, dropped out in training,
to the input: x + Dropout(F(LN(x))); a last layer normalisation closes the stack. Projections
are initialised by Xavier's uniform scheme, as in the paper, whatever `model.init` says: the
recurrent schemes' small normals suit embeddings and gates, not a stack of residual layers.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.model import layers

POSITIONS = ("sinusoidal", "learned")
XAVIER = nnx.initializers.xavier_uniform()


def sinusoids(length: int, width: int) -> jax.Array:
  """The paper's positions [length, width]: sin(p / 10000^(2i/width)) in the even units and the
  cosine in the odd ones."""
  position = jnp.arange(length, dtype=jnp.float32)[:, None]
  rate = jnp.exp(-math.log(10_000.0) * jnp.arange(0, width, 2, dtype=jnp.float32) / width)
  table = jnp.zeros((length, width), jnp.float32)
  table = table.at[:, 0::2].set(jnp.sin(position * rate))
  return table.at[:, 1::2].set(jnp.cos(position * rate[: width // 2]))


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

  def __call__(self, x_BTD, memory_BSD, mask_BS, dropout_rate=0.0, rng=None) -> jax.Array:
    q = self._split(self.query(x_BTD).astype(jnp.float32))
    k, v = jnp.split(self.key_value(memory_BSD).astype(jnp.float32), 2, axis=-1)
    k, v = self._split(k), self._split(v)
    scores = jnp.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(self.head_dim)
    scores = jnp.where(mask_BS[:, None, None, :] > 0, scores, -1e9)
    weights = layers.dropout(jax.nn.softmax(scores, axis=-1), dropout_rate, rng)
    mixed = jnp.einsum("bhts,bhsd->bhtd", weights, v)
    b, _, t, _ = mixed.shape
    return self.out(jnp.swapaxes(mixed, 1, 2).reshape(b, t, -1)).astype(jnp.float32)


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

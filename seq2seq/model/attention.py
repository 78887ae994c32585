"""Masked softmax over source positions and the context vector c_i = sum_j alpha_ij h_j."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _at_least_f32(x: jax.Array) -> jnp.dtype:
  return jnp.promote_types(x.dtype, jnp.float32)


def masked_softmax(logits: jax.Array, mask: jax.Array, axis: int = -1) -> jax.Array:
  """Softmax of `logits` over `axis` restricted to positions where `mask` is true.

  Computed in float32, or float64 for float64 input. Masked positions get exactly 0; a row with no
  unmasked position is all zeros (never NaN), and so is its gradient. Values at masked positions,
  even inf or NaN, do not reach the output or the gradient.
  """
  mask = mask.astype(bool)
  x = jnp.where(mask, logits.astype(_at_least_f32(logits)), 0.0)
  peak = jnp.max(jnp.where(mask, x, -jnp.inf), axis=axis, keepdims=True)
  peak = jax.lax.stop_gradient(jnp.where(jnp.isfinite(peak), peak, 0.0))
  unnorm = jnp.exp(jnp.where(mask, x - peak, -jnp.inf))
  total = jnp.sum(unnorm, axis=axis, keepdims=True)
  return unnorm / jnp.where(total > 0, total, 1.0)


def context(alpha_BS: jax.Array, annotations_BSH: jax.Array, mask_BS: jax.Array) -> jax.Array:
  """c = sum_j alpha_j h_j: [B, S] x [B, S, H] -> [B, H] (float32); padding contributes nothing."""
  dtype = _at_least_f32(annotations_BSH)
  values = jnp.where(mask_BS[..., None].astype(bool), annotations_BSH.astype(dtype), 0.0)
  return jnp.einsum("bs,bsh->bh", alpha_BS.astype(dtype), values)


def attend(score, query_BD, keys_BSK, annotations_BSH, mask_BS, normalise=masked_softmax):
  """Scores one query per sentence against its source, normalises and reads the context.

  `score(query_D, keys_SK, annotations_SH) -> e_S` is written for a single query and lifted
  over the batch with `jax.vmap`; `normalise(e, mask)` turns the scores into weights (a
  `seq2seq.model.normalisers` normaliser; the softmax by default). Returns (context_BH float32,
  alpha_BS float32).
  """
  e_BS = jax.vmap(score)(query_BD, keys_BSK, annotations_BSH)
  alpha_BS = normalise(e_BS, mask_BS)
  return context(alpha_BS, annotations_BSH, mask_BS), alpha_BS

"""Alignments read from attribution instead of attention: how much each source word moves the
probability of each given output word (Ding, Xu and Koehn 2019's word saliency).

For the output word y_t and the source position j, with e_j the embedding the encoder reads:

  grad_x_input:  psi_tj = (d p(y_t | y_<t, x) / d e_j) . e_j      (word saliency)
  grad_norm:     psi_tj = || d p(y_t | y_<t, x) / d e_j ||_2

and with `samples` > 1 each is averaged over that many copies of the embeddings with Gaussian
noise of standard deviation `noise` times the sentence's embedding spread added (SmoothGrad,
Smilkov et al. 2017; the first copy is noiseless), as Ding et al. smooth their saliency.

  integrated_gradients:  psi_tj = e_j . mean_k d p(y_t | y_<t, a_k x) / d e_j,  a_k = (k + 1/2) / m

is Sundararajan et al. (2017)'s path integral from the baseline of zero embeddings to the
sentence's, by the midpoint rule over m = `samples` points (no noise): summed over the source
positions it gives p(y_t | x) - p(y_t | zero embeddings) up to the rule's error
(completeness), which shrinks as m grows. The
probabilities are the model's teacher-forced ones in decoding mode (`forcing.force_decode`), so
they are those forced scoring reports. A matrix [T, S] per sentence comes out where attention
would, so the word links, AER and Pharaoh lines read it as they read attention
(`inference.word_links`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.decoding import core, decode, forcing

METHODS = core.ATTRIBUTION_METHODS


class _Shifted:
  """An embedding lookup with `delta` [B, S, E] added: the point gradients are taken at."""

  def __init__(self, embed: Any, delta: jax.Array):
    self.embed, self.delta = embed, delta

  def __call__(self, ids: jax.Array) -> jax.Array:
    return self.embed(ids).astype(jnp.float32) + self.delta


def check_model(model: Any) -> None:
  """ValueError in one line for a model whose source embeddings cannot be attributed to."""
  encoder = getattr(model, "encoder", None)
  if encoder is None or not hasattr(encoder, "embed") or hasattr(model, "encoder2"):
    raise ValueError("attribution reads one encoder's source embeddings: not this model")


def saliency(
  model: Any,
  batch: Mapping[str, jax.Array],
  method: str = "grad_x_input",
  samples: int = 1,
  noise: float = 0.15,
  rng: jax.Array | None = None,
) -> jax.Array:
  """psi [B, T, S] (float32) of the batch's given outputs (src, src_mask, tgt_in, tgt_out,
  tgt_mask), zero at padding (see the module docstring)."""
  if method not in METHODS:
    raise ValueError(f"attribution method must be one of {', '.join(METHODS)}, got {method!r}")
  check_model(model)
  embed = model.encoder.embed
  src, src_mask = batch["src"], batch["src_mask"]
  tgt_mask = batch["tgt_mask"].astype(jnp.float32)
  base_BSE = embed(src).astype(jnp.float32)

  shifted = _Shifted(embed, jnp.zeros_like(base_BSE))

  def probabilities(delta_BSE):  # The model reads `shifted` (set below, outside the traces).
    shifted.delta = delta_BSE
    forced = forcing.force_decode(
      model, src, src_mask, batch["tgt_in"], batch["tgt_out"], batch["tgt_mask"]
    )
    return jnp.exp(forced.token_scores) * tgt_mask  # [B, T]

  steps = batch["tgt_in"].shape[1]
  one_hot_TBT = jnp.broadcast_to(jnp.eye(steps)[:, None, :], (steps, *tgt_mask.shape))
  real_BS1 = src_mask[..., None].astype(jnp.float32)
  spread = jnp.std(base_BSE, axis=(1, 2), keepdims=True)

  rng = jax.random.key(0) if rng is None else rng

  def one(total_TBS: jax.Array, k: jax.Array) -> tuple[jax.Array, None]:
    """Adds copy k's psi [T, B, S]; copy 0 reads the embeddings as they are (SmoothGrad), or
    point k of the path from zero (integrated gradients)."""
    if method == "integrated_gradients":
      delta = ((k + 0.5) / samples - 1.0) * base_BSE
    else:
      noisy = jax.random.normal(jax.random.fold_in(rng, k), base_BSE.shape)
      delta = jnp.where(k > 0, noise * spread * noisy * real_BS1, 0.0)
    _, pullback = jax.vjp(probabilities, delta)
    (grads_TBSE,) = jax.vmap(pullback)(one_hot_TBT)
    if method == "grad_norm":
      return total_TBS + jnp.linalg.norm(grads_TBSE, axis=-1), None
    # Integrated gradients weigh by the path's length, e_j - 0; saliency by the point itself.
    along = base_BSE if method == "integrated_gradients" else base_BSE + delta
    return total_TBS + jnp.einsum("tbse,bse->tbs", grads_TBSE, along), None

  model.encoder.embed = shifted
  try:  # One copy after another (a scan), so memory holds one copy's gradients at a time.
    zeros_TBS = jnp.zeros((steps, *src.shape), jnp.float32)
    psi_TBS = jax.lax.scan(one, zeros_TBS, jnp.arange(samples))[0] / samples
  finally:
    model.encoder.embed = embed
  psi_BTS = jnp.swapaxes(psi_TBS, 0, 1)
  return psi_BTS * tgt_mask[..., None] * src_mask[:, None, :].astype(jnp.float32)


@functools.partial(jax.jit, static_argnames=("graphdef", "method", "samples", "noise"))
def jit_saliency(
  graphdef: nnx.GraphDef,
  params: nnx.State,
  batch: Mapping[str, jax.Array],
  *,
  method: str = "grad_x_input",
  samples: int = 1,
  noise: float = 0.15,
) -> jax.Array:
  """Compiled `saliency` of an NNX model given as `nnx.split(model)`."""
  return saliency(nnx.merge(graphdef, params), batch, method, samples, noise)


def saliency_batch(state: Any, batch: Mapping[str, Any], **settings: Any) -> jax.Array:
  """`saliency` of a decoding batch with a run's `train_state.TrainState`: one compiled function
  per padded shape."""
  params, *placed = decode.on_devices(state.params, *(batch[k] for k in forcing.FORCED_KEYS))
  arrays = dict(zip(forcing.FORCED_KEYS, placed, strict=True))
  return jit_saliency(state.graphdef, params, arrays, **settings)

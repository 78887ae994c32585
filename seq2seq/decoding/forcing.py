"""Forced decoding: the scores of given outputs, computed as search computes them.

`force_decode` scores given outputs with the model's teacher-forced pass (in decoding mode: the
structures' test-time choices) and ranks them exactly as the searches do (`core.ranking_score`),
so the score of a decoded output equals the score its search reported.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.decoding import core, decode, length_penalties


class ForcedResult(NamedTuple):
  """Given outputs scored by the model (forced decoding)."""

  token_scores: jax.Array  # [B, T] float32: log p(y_t | y_<t, x) per token, EOS included; 0 after.
  scores: jax.Array  # [B] float32: their sum, as search scores an output.
  norm_scores: jax.Array  # [B] float32: the ranking score search would give it (`ranking_score`).
  alpha: jax.Array  # [B, T, S] float32: attention per target position (zeros without one, after).


def force_decode(
  model: Any,
  src_BS: jax.Array,
  src_mask_BS: jax.Array,
  tgt_in_BT: jax.Array,
  tgt_out_BT: jax.Array,
  tgt_mask_BT: jax.Array,
  *,
  length_penalty: core.LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
  output_ids: jax.Array | None = None,
  output_mask: jax.Array | None = None,
) -> ForcedResult:
  """The log-probabilities of given outputs tgt_out [B, T] (EOS included, PAD after it; tgt_in
  is BOS followed by tgt_out shifted; tgt_mask marks tgt_out's tokens), as search computes them.

  One teacher-forced pass of `model` (its `__call__`, as in training, with `decoding=True`: the
  structures' test-time choices, e.g. hard monotonic attention), log p_t = log-softmax over the
  full vocabulary (`step_log_probs`), or over the shortlist `output_ids` [N] (each sentence's
  own part with `output_mask` [B, N]) as `jit_decode` takes them, so an output of greedy or
  beam search scores what its search reported. A word outside the shortlist scores -inf.
  Models without attention (`uses_attention` False) report zero attention.
  """
  kw = {"decoding": True}
  if output_ids is not None:
    kw |= {"output_ids": output_ids, "output_mask": output_mask}
  if model.uses_attention:
    logits_BTV, alpha_BTS = model(src_BS, src_mask_BS, tgt_in_BT, return_alpha=True, **kw)
  else:
    logits_BTV = model(src_BS, src_mask_BS, tgt_in_BT, **kw)
    alpha_BTS = jnp.zeros(tgt_in_BT.shape + src_BS.shape[1:], jnp.float32)
  real_BT = tgt_mask_BT.astype(bool)
  logp_BTV = core.step_log_probs(logits_BTV)
  target_BT = tgt_out_BT.astype(jnp.int32)
  listed_BT = jnp.ones(target_BT.shape, bool)
  if output_ids is not None:  # Word ids to candidate positions (each id is listed once).
    match_BTN = target_BT[..., None] == output_ids
    listed_BT = jnp.any(match_BTN, axis=-1)
    target_BT = jnp.argmax(match_BTN, axis=-1).astype(jnp.int32)
  token_BT = jnp.take_along_axis(logp_BTV, target_BT[..., None], axis=-1)[..., 0]
  token_BT = jnp.where(listed_BT, token_BT, -jnp.inf)
  token_BT = jnp.where(real_BT, token_BT, 0.0)
  alpha_BTS = jnp.where(real_BT[..., None], alpha_BTS.astype(jnp.float32), 0.0)
  scores_B = jnp.sum(token_BT, axis=-1)
  norm_B = core.ranking_score(
    scores_B,
    jnp.sum(real_BT, axis=-1),
    alpha_BTS.sum(1),
    src_mask_BS,
    length_penalty,
    coverage_beta,
  )
  return ForcedResult(token_BT, scores_B, norm_B, alpha_BTS)


@functools.partial(jax.jit, static_argnames=("graphdef", "length_penalty", "coverage_beta"))
def jit_force_decode(
  graphdef: nnx.GraphDef,
  params: nnx.State,
  batch: Mapping[str, jax.Array],
  *,
  length_penalty: core.LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
  output_ids: jax.Array | None = None,
  output_mask: jax.Array | None = None,
) -> ForcedResult:
  """Compiled `force_decode` of an NNX model given as `nnx.split(model)` on a batch dict (src,
  src_mask, tgt_in, tgt_out, tgt_mask); `graphdef` and the ranking settings are static."""
  return force_decode(
    nnx.merge(graphdef, params),
    batch["src"],
    batch["src_mask"],
    batch["tgt_in"],
    batch["tgt_out"],
    batch["tgt_mask"],
    length_penalty=length_penalties.make(length_penalty),
    coverage_beta=coverage_beta,
    output_ids=output_ids,
    output_mask=output_mask,
  )


FORCED_KEYS = ("src", "src_mask", "tgt_in", "tgt_out", "tgt_mask")


def score_batch(state: Any, batch: Mapping[str, Any], dec: decode.DecodeSettings) -> ForcedResult:
  """Scores the batch's target side given its source (`force_decode`) with the run's ranking
  settings (`dec.length_penalty`, `coverage_penalty`) and over its shortlist where
  it decodes with one (`shortlist_of`), so the scores are what its search would report; `state`
  is a `train_state.TrainState`. One compiled function per padded shape, so bucketed batches reuse
  them; with several devices the rows are split over them (`decode.on_devices`)."""
  params, *placed = decode.on_devices(state.params, *(batch[k] for k in FORCED_KEYS))
  arrays = dict(zip(FORCED_KEYS, placed, strict=True))
  output_ids, output_mask = decode.shortlist_of(batch, dec)
  return jit_force_decode(
    state.graphdef,
    params,
    arrays,
    length_penalty=dec.length_penalty,
    coverage_beta=float(dec.coverage_penalty),
    output_ids=output_ids,
    output_mask=output_mask,
  )

"""Greedy and beam-search decoding, and attention-based unknown-word replacement.

Axes: B batch, K beam, S source positions, L output positions (the static `max_len`), V target
vocabulary, D decoder units.

`greedy` and `beam_search` take any `model` with the decoding API of `models.Seq2Seq`:
`encode(src_BS, src_mask_BS) -> Encoded` and `decoder_step(enc, state, y_prev_B) ->
(new_state, logits_BV, alpha_BS or None)`, where the state (starting at `enc.init_state`) is any
pytree of arrays with the batch as leading axis. They are pure and traceable: the source is encoded
once, the time loop is one `jax.lax.while_loop` that exits as soon as every hypothesis has ended,
and nothing happens on the host. They run eagerly as they are; to compile them with an NNX model,
pass the split model to `jit_decode(graphdef, params, ...)` (a `jax.jit` with the graph definition
static, which merges the model inside the trace), or call `decode_batch(state, batch, config)`,
which does that for a `TrainState` and keeps one compiled function per static setting.

Scores are sums of the model's log-probabilities (log-softmax over the full vocabulary). PAD and
BOS are never produced: their log-probabilities are set to -inf before choosing. A hypothesis ends
when it emits EOS; afterwards it only extends with PAD at zero cost. Beam search ranks by
score / length**alpha (GroundHog-style length normalisation for alpha = 1, raw log-probability for
alpha = 0), where the length counts the tokens up to and including EOS, plus GNMT's coverage
penalty beta * sum_j log(min(sum_i alpha_ij, 1)) over the real source positions (Wu et al. 2016;
beta = `decode.coverage_penalty`, 0 by default; coverage is floored at 1e-6 so an unattended word
costs a finite beta * log(1e-6)).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from seq2seq.models import Encoded
from seq2seq.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID


class DecodeResult(NamedTuple):
  """The best hypothesis of every sentence."""

  tokens: jax.Array  # [B, L] int32: the output, EOS included, PAD after it.
  lengths: jax.Array  # [B] int32: tokens up to and including EOS (L when EOS never came).
  scores: jax.Array  # [B] float32: sum of log-probabilities of `tokens[:lengths]`.
  norm_scores: jax.Array  # [B] float32: score / length**alpha used by beam search (greedy: score).
  alpha: jax.Array  # [B, L, S] float32: attention at each output position (zeros without one).


def _step_log_probs(logits_NV: jax.Array) -> jax.Array:
  """Log-softmax over the full vocabulary, with PAD and BOS made impossible: [N, V] float32."""
  logp = jax.nn.log_softmax(logits_NV.astype(jnp.float32), axis=-1)
  banned = jnp.zeros(logp.shape[-1], bool).at[jnp.array([PAD_ID, BOS_ID])].set(True)
  return jnp.where(banned, -jnp.inf, logp)


def _candidates(logp_NV: jax.Array, scores_N: jax.Array, ended_N: jax.Array) -> jax.Array:
  """Scores of every one-token extension [N, V]: an ended hypothesis extends only with PAD, free."""
  pad_only = jnp.where(jnp.arange(logp_NV.shape[-1]) == PAD_ID, 0.0, -jnp.inf)
  return scores_N[:, None] + jnp.where(ended_N[:, None], pad_only, logp_NV)


def _attention(alpha_NS: jax.Array | None, enc: Encoded) -> jax.Array:
  """The step's attention as float32 [N, S]; zeros for models without attention (RNNencdec)."""
  if alpha_NS is None:
    return jnp.zeros(enc.mask.shape, jnp.float32)
  return alpha_NS.astype(jnp.float32)


def greedy(model: Any, src_BS: jax.Array, src_mask_BS: jax.Array, *, max_len: int) -> DecodeResult:
  """Picks the most probable next word at every step, for at most `max_len` (static) steps.

  src_BS, src_mask_BS: [B, S] int. Returns a `DecodeResult` with L = max_len; `norm_scores`
  equals `scores` (greedy ranks nothing).
  """
  enc = model.encode(src_BS, src_mask_BS)
  batch, src_len = src_BS.shape

  def cond(carry):
    t, ended = carry[0], carry[4]
    return (t < max_len) & ~jnp.all(ended)

  def body(carry):
    t, tokens_BL, alpha_BLS, scores_B, ended_B, lengths_B, state_B, y_prev_B = carry
    new_state, logits, alpha_BS = model.decoder_step(enc, state_B, y_prev_B)
    cand_BV = _candidates(_step_log_probs(logits), scores_B, ended_B)
    tok_B = jnp.argmax(cand_BV, axis=-1).astype(jnp.int32)
    scores_B = jnp.take_along_axis(cand_BV, tok_B[:, None], axis=-1)[:, 0]
    alpha_BS = jnp.where(ended_B[:, None], 0.0, _attention(alpha_BS, enc))
    lengths_B = lengths_B + (~ended_B).astype(jnp.int32)
    tokens_BL = tokens_BL.at[:, t].set(tok_B)
    alpha_BLS = alpha_BLS.at[:, t].set(alpha_BS)
    ended_B = ended_B | (tok_B == EOS_ID)
    return t + 1, tokens_BL, alpha_BLS, scores_B, ended_B, lengths_B, new_state, tok_B

  init = (
    jnp.zeros((), jnp.int32),
    jnp.full((batch, max_len), PAD_ID, jnp.int32),
    jnp.zeros((batch, max_len, src_len), jnp.float32),
    jnp.zeros((batch,), jnp.float32),
    jnp.zeros((batch,), bool),
    jnp.zeros((batch,), jnp.int32),
    enc.init_state,
    jnp.full((batch,), BOS_ID, jnp.int32),
  )
  _, tokens, alpha, scores, _, lengths, _, _ = jax.lax.while_loop(cond, body, init)
  return DecodeResult(tokens, lengths, scores, scores, alpha)


def _tile(tree: Any, beam_size: int) -> Any:
  """Repeats every leaf [B, ...] to [B*K, ...], row b*K + k being beam k of sentence b."""
  return jax.tree.map(lambda x: jnp.repeat(x, beam_size, axis=0), tree)


def _normalise(scores: jax.Array, lengths: jax.Array, length_norm_alpha: float) -> jax.Array:
  """score / length**alpha; -inf stays -inf (and alpha = 0 returns the raw score)."""
  if length_norm_alpha == 0:
    return scores
  denom = jnp.maximum(lengths, 1).astype(jnp.float32) ** length_norm_alpha
  return scores / denom


COVERAGE_FLOOR = 1e-6


def coverage_penalty(coverage_NS: jax.Array, mask_NS: jax.Array, beta: float) -> jax.Array:
  """GNMT's beta * sum_j log(min(coverage_j, 1)) over real positions [N, S] -> [N] (<= 0)."""
  covered = jnp.clip(coverage_NS, COVERAGE_FLOOR, 1.0)
  return beta * jnp.sum(jnp.where(mask_NS.astype(bool), jnp.log(covered), 0.0), axis=-1)


def beam_search(
  model: Any,
  src_BS: jax.Array,
  src_mask_BS: jax.Array,
  *,
  beam_size: int,
  max_len: int,
  length_norm_alpha: float = 1.0,
  coverage_beta: float = 0.0,
) -> DecodeResult:
  """Beam search of width `beam_size` (static) for at most `max_len` (static) steps.

  Every hypothesis keeps its token and attention history ([B, K, L] and [B, K, L, S]), reordered
  with `take_along_axis` after each step. Ended hypotheses stay in the beam with a frozen score;
  at each step the K best of all K*V extensions by normalised score survive. The loop stops once
  every hypothesis has ended, or earlier when for every sentence no live hypothesis can still beat
  the best ended one (with log-probs <= 0, score s can reach at most s / max_len**alpha). The
  result is the best ended hypothesis by normalised score, or the best unended one where none
  ended. With `coverage_beta` > 0 the ranking adds `coverage_penalty` of each hypothesis's summed
  attention (0 at best, so the early-stopping bound still holds).
  """
  batch, src_len = src_BS.shape
  k, n = beam_size, src_BS.shape[0] * beam_size
  enc = _tile(model.encode(src_BS, src_mask_BS), k)
  mask_BKS = enc.mask.reshape(batch, k, src_len)

  def penalty(coverage_BKS):
    if coverage_beta == 0:
      return 0.0
    return coverage_penalty(coverage_BKS, mask_BKS, coverage_beta)

  def cond(carry):
    t, scores_BK, ended_BK, lengths_BK = carry[0], carry[3], carry[4], carry[5]
    # Log-probs are <= 0, so a live hypothesis with score s can reach at best s / max_len**alpha.
    # A sentence is done when no live hypothesis can beat its best ended one.
    live_BK = ~ended_BK & jnp.isfinite(scores_BK)
    reachable_BK = _normalise(scores_BK, jnp.full_like(lengths_BK, max_len), length_norm_alpha)
    bound_B = jnp.max(jnp.where(live_BK, reachable_BK, -jnp.inf), axis=1)
    norm_BK = _normalise(scores_BK, lengths_BK, length_norm_alpha) + penalty(carry[2].sum(2))
    best_ended_B = jnp.max(jnp.where(ended_BK, norm_BK, -jnp.inf), axis=1)
    return (t < max_len) & ~jnp.all(best_ended_B >= bound_B)

  def body(carry):
    t, tokens_BKL, alpha_BKLS, scores_BK, ended_BK, lengths_BK, state_N, y_prev_N = carry
    new_state_N, logits_NV, alpha_NS = model.decoder_step(enc, state_N, y_prev_N)
    logp_NV = _step_log_probs(logits_NV)
    vocab = logp_NV.shape[-1]
    cand_BKV = _candidates(logp_NV, scores_BK.reshape(n), ended_BK.reshape(n)).reshape(
      batch, k, vocab
    )
    cand_len_BK = jnp.where(ended_BK, lengths_BK, t + 1)
    rank_BKV = _normalise(cand_BKV, cand_len_BK[..., None], length_norm_alpha)
    if coverage_beta != 0:
      step_BKS = jnp.where(
        ended_BK[..., None], 0.0, _attention(alpha_NS, enc).reshape(batch, k, src_len)
      )
      rank_BKV = rank_BKV + penalty(alpha_BKLS.sum(2) + step_BKS)[..., None]
    _, flat_BK = jax.lax.top_k(rank_BKV.reshape(batch, k * vocab), k)
    origin_BK, tok_BK = flat_BK // vocab, (flat_BK % vocab).astype(jnp.int32)

    def pick(x):  # Reorders [B, K, ...] by origin beam.
      idx = origin_BK.reshape(origin_BK.shape + (1,) * (x.ndim - 2))
      return jnp.take_along_axis(x, idx, axis=1)

    scores_BK = jnp.take_along_axis(cand_BKV.reshape(batch, k * vocab), flat_BK, axis=1)
    was_ended_BK = pick(ended_BK)
    lengths_BK = pick(cand_len_BK)
    step_alpha_BKS = pick(_attention(alpha_NS, enc).reshape(batch, k, src_len))
    step_alpha_BKS = jnp.where(was_ended_BK[..., None], 0.0, step_alpha_BKS)
    tokens_BKL = pick(tokens_BKL).at[:, :, t].set(tok_BK)
    alpha_BKLS = pick(alpha_BKLS).at[:, :, t].set(step_alpha_BKS)
    ended_BK = was_ended_BK | (tok_BK == EOS_ID)
    state_N = jax.tree.map(
      lambda x: pick(x.reshape((batch, k) + x.shape[1:])).reshape(x.shape), new_state_N
    )
    return t + 1, tokens_BKL, alpha_BKLS, scores_BK, ended_BK, lengths_BK, state_N, tok_BK.ravel()

  init = (
    jnp.zeros((), jnp.int32),
    jnp.full((batch, k, max_len), PAD_ID, jnp.int32),
    jnp.zeros((batch, k, max_len, src_len), jnp.float32),
    # Only beam 0 is alive at the start, so the first step expands one hypothesis, not K copies.
    jnp.tile(jnp.where(jnp.arange(k) == 0, 0.0, -jnp.inf), (batch, 1)).astype(jnp.float32),
    jnp.zeros((batch, k), bool),
    jnp.zeros((batch, k), jnp.int32),
    enc.init_state,
    jnp.full((n,), BOS_ID, jnp.int32),
  )
  out = jax.lax.while_loop(cond, body, init)
  _, tokens_BKL, alpha_BKLS, scores_BK, ended_BK, lengths_BK, _, _ = out

  norm_BK = _normalise(scores_BK, lengths_BK, length_norm_alpha) + penalty(alpha_BKLS.sum(2))
  any_ended_B1 = jnp.any(ended_BK, axis=1, keepdims=True)
  final_BK = jnp.where(any_ended_B1 & ~ended_BK, -jnp.inf, norm_BK)
  best_B1 = jnp.argmax(final_BK, axis=1)[:, None]

  def best(x):
    idx = best_B1.reshape(best_B1.shape + (1,) * (x.ndim - 2))
    return jnp.take_along_axis(x, idx, axis=1)[:, 0]

  return DecodeResult(
    best(tokens_BKL), best(lengths_BK), best(scores_BK), best(norm_BK), best(alpha_BKLS)
  )


@functools.partial(
  jax.jit,
  static_argnames=("graphdef", "beam_size", "max_len", "length_norm_alpha", "coverage_beta"),
)
def jit_decode(
  graphdef: nnx.GraphDef,
  params: nnx.State,
  src_BS: jax.Array,
  src_mask_BS: jax.Array,
  *,
  beam_size: int,
  max_len: int,
  length_norm_alpha: float = 1.0,
  coverage_beta: float = 0.0,
) -> DecodeResult:
  """Compiled decoding of an NNX model given as `nnx.split(model)`: greedy when beam_size == 1.

  `graphdef`, `beam_size`, `max_len`, `length_norm_alpha` and `coverage_beta` are static;
  `params` is the model state, merged with `graphdef` inside the trace.
  """
  model = nnx.merge(graphdef, params)
  if beam_size == 1:
    return greedy(model, src_BS, src_mask_BS, max_len=max_len)
  return beam_search(
    model,
    src_BS,
    src_mask_BS,
    beam_size=beam_size,
    max_len=max_len,
    length_norm_alpha=length_norm_alpha,
    coverage_beta=coverage_beta,
  )


def max_output_len(src_len: int, max_len_ratio: float) -> int:
  """The longest output considered for a source of `src_len` positions: int(ratio * S) + 10."""
  return int(max_len_ratio * src_len) + 10


def decode_batch(
  state: Any, batch: Mapping[str, Any], config: ml_collections.ConfigDict
) -> DecodeResult:
  """Decodes `batch["src"]` / `batch["src_mask"]` [B, S] with the `config.decode` settings.

  `state` is a `train.TrainState` (its `graphdef` and `params` are used). Greedy when
  `config.decode.beam_size == 1`, beam search otherwise; max_len = int(max_len_ratio * S) + 10
  with S the padded source length. `jit_decode` keeps one compiled function per static setting,
  so bucketed source lengths reuse their compilations.
  """
  cfg = config.decode
  src = jnp.asarray(batch["src"], jnp.int32)
  mask = jnp.asarray(batch["src_mask"], jnp.int32)
  return jit_decode(
    state.graphdef,
    state.params,
    src,
    mask,
    beam_size=int(cfg.beam_size),
    max_len=max_output_len(src.shape[1], cfg.max_len_ratio),
    length_norm_alpha=float(cfg.length_norm_alpha),
    coverage_beta=float(cfg.coverage_penalty),
  )


def replace_unknowns(
  tokens: Sequence[Any],
  alpha: Any,
  src_tokens: Sequence[Any],
  unk_id: Any = UNK_ID,
  dictionary: Mapping[Any, Any] | None = None,
) -> list[Any]:
  """Host-side unknown-word replacement by attention (Jean et al. / Luong et al. style).

  tokens: one output [L] (ids or words); alpha: its attention [L, S]; src_tokens: the real
  source words [S'] (ids or words, S' <= S; no EOS: the columns past S', the source EOS and
  padding, are never copied). Every item equal to `unk_id` becomes the source token at
  argmax_j alpha[i, j] over j < S', translated through `dictionary` when it has an entry; with
  no source words it stays as it is. For a batch, pass tokens [B, L], alpha [B, L, S] and one
  source sequence per sentence: the result is then one list per sentence.
  """
  alpha = np.asarray(alpha)
  if alpha.ndim == 3:
    return [
      replace_unknowns(t, a, s, unk_id, dictionary)
      for t, a, s in zip(tokens, alpha, src_tokens, strict=True)
    ]
  src = list(src_tokens)
  out = []
  for i, tok in enumerate(np.asarray(tokens).tolist()):
    if tok == unk_id and src:
      word = src[int(np.argmax(alpha[i, : len(src)]))]
      tok = dictionary.get(word, word) if dictionary is not None else word
    out.append(tok)
  return out

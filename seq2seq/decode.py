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
BOS are never produced: their log-probabilities are set to -inf before choosing (UNK too with
`ban_unk`, GroundHog's --ignore-unk, used for the paper's No-UNK column). In greedy search a
hypothesis ends when it emits EOS; afterwards it only extends with PAD at zero cost. Beam search
keeps K live hypotheses and, apart from them, a pool of the K best finished ones per sentence
(`BeamState`): an extension by EOS moves to the pool, so live hypotheses that look better for the
moment can never push a finished translation out. Finished hypotheses are ranked by
score / length**alpha (GroundHog-style length normalisation for alpha = 1, raw log-probability
for alpha = 0), where the length counts the tokens up to and including EOS, plus GNMT's coverage
penalty beta * sum_j log(min(sum_i alpha_ij, 1)) over the real source positions (Wu et al. 2016;
beta = `decode.coverage_penalty`, 0 by default; coverage is floored at 1e-6 so an unattended word
costs a finite beta * log(1e-6)). The search stops once no live hypothesis can beat the best
finished one.
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

from seq2seq import lexicon
from seq2seq.models import Encoded
from seq2seq.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID


class DecodeResult(NamedTuple):
  """The best hypothesis of every sentence."""

  tokens: jax.Array  # [B, L] int32: the output, EOS included, PAD after it.
  lengths: jax.Array  # [B] int32: tokens up to and including EOS (L when EOS never came).
  scores: jax.Array  # [B] float32: sum of log-probabilities of `tokens[:lengths]`.
  norm_scores: jax.Array  # [B] float32: score / length**alpha used by beam search (greedy: score).
  alpha: jax.Array  # [B, L, S] float32: attention at each output position (zeros without one).


def _step_log_probs(logits_NV: jax.Array, ban_unk: bool = False) -> jax.Array:
  """Log-softmax over the full vocabulary, with PAD and BOS (and UNK with `ban_unk`, GroundHog's
  --ignore-unk) made impossible afterwards: [N, V] float32. The other words keep their
  probabilities under the full softmax."""
  logp = jax.nn.log_softmax(logits_NV.astype(jnp.float32), axis=-1)
  banned_ids = [PAD_ID, BOS_ID, UNK_ID] if ban_unk else [PAD_ID, BOS_ID]
  banned = jnp.zeros(logp.shape[-1], bool).at[jnp.array(banned_ids)].set(True)
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


def greedy(
  model: Any, src_BS: jax.Array, src_mask_BS: jax.Array, *, max_len: int, ban_unk: bool = False
) -> DecodeResult:
  """Picks the most probable next word at every step, for at most `max_len` (static) steps
  (never UNK with `ban_unk`).

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
    cand_BV = _candidates(_step_log_probs(logits, ban_unk), scores_B, ended_B)
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


class BeamState(NamedTuple):
  """The loop state of `beam_search`: K live hypotheses and the K best finished ones per sentence.

  Live hypotheses have not emitted EOS; all have the same length (the step count t). A live
  extension by EOS leaves the beam for the finished pool, so a finished translation can never be
  pushed out by live ones that merely look better for now (GroundHog keeps such a list too).
  """

  t: jax.Array  # [] int32: steps taken; the live hypotheses hold t tokens.
  live_tokens: jax.Array  # [B, K, L] int32: tokens so far, PAD beyond t.
  live_alpha: jax.Array  # [B, K, L, S] float32: attention of each step, zeros beyond t.
  live_scores: jax.Array  # [B, K] float32: summed log-probabilities (-inf: an empty slot).
  dec_state: Any  # The model's decoder state, leaves [B*K, ...].
  y_prev: jax.Array  # [B*K] int32: the last token of each live hypothesis.
  fin_tokens: jax.Array  # [B, K, L] int32: finished outputs, EOS included, PAD after it.
  fin_alpha: jax.Array  # [B, K, L, S] float32.
  fin_scores: jax.Array  # [B, K] float32: summed log-probabilities (-inf: an empty slot).
  fin_norm: jax.Array  # [B, K] float32: the ranking score (normalised, coverage penalty added).
  fin_lengths: jax.Array  # [B, K] int32: tokens up to and including EOS.


def _gather_beams(x: jax.Array, index_BK: jax.Array) -> jax.Array:
  """x [B, M, ...] reordered along its second axis by index [B, K] -> [B, K, ...]."""
  index = index_BK.reshape(index_BK.shape + (1,) * (x.ndim - 2))
  return jnp.take_along_axis(x, index, axis=1)


def beam_search_pool(
  model: Any,
  src_BS: jax.Array,
  src_mask_BS: jax.Array,
  *,
  beam_size: int,
  max_len: int,
  length_norm_alpha: float = 1.0,
  coverage_beta: float = 0.0,
  ban_unk: bool = False,
) -> BeamState:
  """Beam search of width `beam_size` (static) for at most `max_len` (static) steps; the final
  `BeamState` (use `beam_search` for the best output of each sentence).

  Each step extends the K live hypotheses by every word ([B, K, V] candidates). The K extensions
  by EOS are ranked by score / length**alpha (plus the coverage penalty) and merged into the
  finished pool, which keeps the K best; the K best extensions by any other word become the new
  live hypotheses (they share one length, so the normalisation does not change their order; the
  coverage penalty may). The loop stops at `max_len`, or earlier when for every sentence no live
  hypothesis can still beat its best finished one: log-probabilities are <= 0, so a live score s
  can reach at most s / max_len**alpha, and the coverage penalty is at most 0. The finished pool
  then holds the best translation; it may hold fewer than K (empty slots score -inf), and later
  members are the best found before the search stopped, not necessarily the K best overall.
  """
  batch, src_len = src_BS.shape
  k, n = beam_size, src_BS.shape[0] * beam_size
  enc = _tile(model.encode(src_BS, src_mask_BS), k)
  mask_BKS = enc.mask.reshape(batch, k, src_len)

  def penalty(coverage_BKS):  # [B, K], or 0 without the coverage penalty.
    if coverage_beta == 0:
      return 0.0
    return coverage_penalty(coverage_BKS, mask_BKS, coverage_beta)

  def cond(bs: BeamState):
    reachable_BK = _normalise(
      bs.live_scores, jnp.full_like(bs.fin_lengths, max_len), length_norm_alpha
    )
    bound_B = jnp.max(jnp.where(jnp.isfinite(bs.live_scores), reachable_BK, -jnp.inf), axis=1)
    best_fin_B = jnp.max(bs.fin_norm, axis=1)
    return (bs.t < max_len) & ~jnp.all(best_fin_B >= bound_B)

  def body(bs: BeamState):
    t = bs.t
    new_state_N, logits_NV, alpha_NS = model.decoder_step(enc, bs.dec_state, bs.y_prev)
    logp_BKV = _step_log_probs(logits_NV, ban_unk).reshape(batch, k, -1)
    vocab = logp_BKV.shape[-1]
    cand_BKV = bs.live_scores[..., None] + logp_BKV
    step_alpha_BKS = _attention(alpha_NS, enc).reshape(batch, k, src_len)
    alpha_BKLS = bs.live_alpha.at[:, :, t].set(step_alpha_BKS)
    penalty_BK = penalty(alpha_BKLS.sum(2))

    # Extensions by EOS join the finished pool, which keeps its K best.
    eos_scores_BK = cand_BKV[..., EOS_ID]
    eos_norm_BK = _normalise(eos_scores_BK, t + 1, length_norm_alpha) + penalty_BK
    eos_norm_BK = jnp.where(jnp.isfinite(eos_scores_BK), eos_norm_BK, -jnp.inf)
    pool_norm, keep_BK = jax.lax.top_k(jnp.concatenate([bs.fin_norm, eos_norm_BK], axis=1), k)
    pool = lambda fin, new: _gather_beams(jnp.concatenate([fin, new], axis=1), keep_BK)
    fin_tokens = pool(bs.fin_tokens, bs.live_tokens.at[:, :, t].set(EOS_ID))
    fin_alpha = pool(bs.fin_alpha, alpha_BKLS)
    fin_scores = pool(bs.fin_scores, eos_scores_BK)
    fin_lengths = pool(bs.fin_lengths, jnp.full((batch, k), t + 1, jnp.int32))

    # Every other extension competes for the K live slots. They share one length, so only the
    # coverage penalty (of each origin beam) can change their order.
    live_BKV = cand_BKV.at[..., EOS_ID].set(-jnp.inf)
    rank_BKV = live_BKV
    if coverage_beta != 0:
      rank_BKV = _normalise(live_BKV, t + 1, length_norm_alpha) + penalty_BK[..., None]
    _, flat_BK = jax.lax.top_k(rank_BKV.reshape(batch, k * vocab), k)
    origin_BK, tok_BK = flat_BK // vocab, (flat_BK % vocab).astype(jnp.int32)
    live_scores = jnp.take_along_axis(live_BKV.reshape(batch, k * vocab), flat_BK, axis=1)
    dec_state = jax.tree.map(
      lambda x: _gather_beams(x.reshape((batch, k) + x.shape[1:]), origin_BK).reshape(x.shape),
      new_state_N,
    )
    return BeamState(
      t=t + 1,
      live_tokens=_gather_beams(bs.live_tokens, origin_BK).at[:, :, t].set(tok_BK),
      live_alpha=_gather_beams(alpha_BKLS, origin_BK),
      live_scores=live_scores,
      dec_state=dec_state,
      y_prev=tok_BK.reshape(n),
      fin_tokens=fin_tokens,
      fin_alpha=fin_alpha,
      fin_scores=fin_scores,
      fin_norm=pool_norm,
      fin_lengths=fin_lengths,
    )

  empty = jnp.full((batch, k), -jnp.inf, jnp.float32)
  tokens = jnp.full((batch, k, max_len), PAD_ID, jnp.int32)
  alpha = jnp.zeros((batch, k, max_len, src_len), jnp.float32)
  init = BeamState(
    t=jnp.zeros((), jnp.int32),
    live_tokens=tokens,
    live_alpha=alpha,
    # Only beam 0 is alive at the start, so the first step expands one hypothesis, not K copies.
    live_scores=empty.at[:, 0].set(0.0),
    dec_state=enc.init_state,
    y_prev=jnp.full((n,), BOS_ID, jnp.int32),
    fin_tokens=tokens,
    fin_alpha=alpha,
    fin_scores=empty,
    fin_norm=empty,
    fin_lengths=jnp.zeros((batch, k), jnp.int32),
  )
  return jax.lax.while_loop(cond, body, init)


def beam_search(model: Any, src_BS: jax.Array, src_mask_BS: jax.Array, **settings) -> DecodeResult:
  """The best output of `beam_search_pool` (same arguments: beam_size, max_len and optionally
  length_norm_alpha, coverage_beta, ban_unk) for every sentence: its best finished hypothesis,
  or, for a sentence where nothing finished within `max_len` steps, its best live one (length
  `max_len`, no EOS), ranked the same way."""
  bs = beam_search_pool(model, src_BS, src_mask_BS, **settings)
  max_len, beam_size = settings["max_len"], settings["beam_size"]
  length_norm_alpha = settings.get("length_norm_alpha", 1.0)
  coverage_beta = settings.get("coverage_beta", 0.0)
  finished_B = jnp.isfinite(bs.fin_scores[:, 0])
  live_norm_BK = _normalise(bs.live_scores, max_len, length_norm_alpha)
  if coverage_beta != 0:
    mask_BKS = jnp.repeat(src_mask_BS[:, None], beam_size, axis=1)
    live_norm_BK = live_norm_BK + coverage_penalty(bs.live_alpha.sum(2), mask_BKS, coverage_beta)
  live_best_B1 = jnp.argmax(live_norm_BK, axis=1)[:, None]

  def best(fin, live):  # Slot 0 of the pool is its best (top_k sorts).
    pick_live = _gather_beams(live, live_best_B1)[:, 0]
    mask = finished_B.reshape(finished_B.shape + (1,) * (fin.ndim - 2))
    return jnp.where(mask, fin[:, 0], pick_live)

  lengths = jnp.where(finished_B, bs.fin_lengths[:, 0], max_len)
  return DecodeResult(
    best(bs.fin_tokens, bs.live_tokens),
    lengths,
    best(bs.fin_scores, bs.live_scores),
    best(bs.fin_norm, live_norm_BK),
    best(bs.fin_alpha, bs.live_alpha),
  )


@functools.partial(
  jax.jit,
  static_argnames=(
    "graphdef",
    "beam_size",
    "max_len",
    "length_norm_alpha",
    "coverage_beta",
    "ban_unk",
  ),
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
  ban_unk: bool = False,
  output_ids: jax.Array | None = None,
) -> DecodeResult:
  """Compiled decoding of an NNX model given as `nnx.split(model)`: greedy when beam_size == 1.

  `graphdef`, `beam_size`, `max_len`, `length_norm_alpha`, `coverage_beta` and `ban_unk` are
  static; `params` is the model state, merged with `graphdef` inside the trace. `output_ids`
  [N]: decode over that shortlist only (`lexicon.shortlist`, specials first), the output
  mapped back to word ids.
  """
  model = nnx.merge(graphdef, params)
  if output_ids is not None:
    model = Shortlisted(model, output_ids)
  result = _search(
    model,
    src_BS,
    src_mask_BS,
    beam_size=beam_size,
    max_len=max_len,
    length_norm_alpha=length_norm_alpha,
    coverage_beta=coverage_beta,
    ban_unk=ban_unk,
  )
  return result if output_ids is None else result._replace(tokens=output_ids[result.tokens])


class Shortlisted:
  """A model decoded over a shortlist `ids` [N] (`lexicon.shortlist`: the specials first, at
  their own positions): the search works in candidate indices, so PAD, BOS, EOS and UNK keep
  their ids; the embedding reads the candidate's word id and the output layer runs over the N
  candidates only. Map the output back with `ids[tokens]`."""

  def __init__(self, model: Any, ids_N: jax.Array):
    self.model, self.ids = model, ids_N
    self.uses_attention = model.uses_attention

  def encode(self, src_BS, src_mask_BS):
    return self.model.encode(src_BS, src_mask_BS)

  def decoder_step(self, enc, state, y_prev_B):
    return self.model.decoder_step(enc, state, self.ids[y_prev_B], output_ids=self.ids)


def _search(
  model, src_BS, src_mask_BS, *, beam_size, max_len, length_norm_alpha, coverage_beta, ban_unk
):
  """Greedy when beam_size == 1, else beam search."""
  if beam_size == 1:
    return greedy(model, src_BS, src_mask_BS, max_len=max_len, ban_unk=ban_unk)
  return beam_search(
    model,
    src_BS,
    src_mask_BS,
    beam_size=beam_size,
    max_len=max_len,
    length_norm_alpha=length_norm_alpha,
    coverage_beta=coverage_beta,
    ban_unk=ban_unk,
  )


def max_output_len(src_len: int, max_len_ratio: float) -> int:
  """The longest output considered for a source of `src_len` positions: int(ratio * S) + 10."""
  return int(max_len_ratio * src_len) + 10


def decode_batch(
  state: Any, batch: Mapping[str, Any], config: ml_collections.ConfigDict, *, ban_unk: bool = False
) -> DecodeResult:
  """Decodes `batch["src"]` / `batch["src_mask"]` [B, S] with the `config.decode` settings
  (never producing UNK with `ban_unk`: the paper's No-UNK protocol).

  `state` is a `steps.TrainState` (its `graphdef` and `params` are used). Greedy when
  `config.decode.beam_size == 1`, beam search otherwise; max_len = int(max_len_ratio * S) + 10
  with S the padded source length. With `decode.shortlist` (a lexical table, `seq2seq.lexicon`)
  the output layer runs over the batch's shortlist only. `jit_decode` keeps one compiled
  function per static setting, so bucketed source lengths reuse their compilations.
  """
  cfg = config.decode
  src = jnp.asarray(batch["src"], jnp.int32)
  mask = jnp.asarray(batch["src_mask"], jnp.int32)
  output_ids = None
  if cfg.shortlist:
    table = lexicon.load_cached(cfg.shortlist)
    ids = lexicon.shortlist(table, batch["src"], cfg.shortlist_frequent, cfg.shortlist_per_word)
    output_ids = jnp.asarray(ids)
  return jit_decode(
    state.graphdef,
    state.params,
    src,
    mask,
    beam_size=int(cfg.beam_size),
    max_len=max_output_len(src.shape[1], cfg.max_len_ratio),
    length_norm_alpha=float(cfg.length_norm_alpha),
    coverage_beta=float(cfg.coverage_penalty),
    ban_unk=ban_unk,
    output_ids=output_ids,
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

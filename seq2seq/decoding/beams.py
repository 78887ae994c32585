"""Beam search and its n-best lists.

Beam search keeps K live hypotheses and, apart from them, a pool of the K best finished ones per
sentence (`BeamState`): an extension by EOS moves to the pool, so live hypotheses that look
better for the moment can never push a finished translation out. The search stops once no live
hypothesis can beat the best finished one (with `nbest=N`, its N-th best finished one): each
length penalty bounds what a live hypothesis can still reach (`LengthPenalty.bound`).
`beam_search_nbest` returns the N best hypotheses of that pool (N <= K), best first;
`beam_search` is its first.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.decoding import constraints as constraints_
from seq2seq.decoding import core, length_penalties


class BeamTrace(NamedTuple):
  """What each step t of beam search did (fields [B, L, K]; rows from `BeamState.t` on are
  unused): the K live hypotheses it kept, and the extensions by EOS of the K it extended.

  Live slot k after step t holds the hypothesis in slot `origins[t, k]` after step t - 1 (the
  empty one before step 0) extended by `tokens[t, k]`, with summed log-probability
  `scores[t, k]` (-inf: an empty slot). The extension by EOS of slot k after step t - 1 scored
  `eos_scores[t, k]` and ranked `eos_norm[t, k]` (-inf: not allowed, or the slot was empty);
  `entered[t, k]` says whether it entered the pool of finished hypotheses then (it may be
  pushed out later)."""

  tokens: jax.Array  # int32
  origins: jax.Array  # int32
  scores: jax.Array  # float32
  eos_scores: jax.Array  # float32
  eos_norm: jax.Array  # float32
  entered: jax.Array  # bool


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
  # With lexical constraints, what each live hypothesis has met (leaves [B*K, ...]); else None.
  progress: constraints_.Progress | None = None
  trace: BeamTrace | None = None  # What each step did, when asked (`beam_search_pool(trace=)`).


def beam_search_pool(
  model: Any,
  src_BS: jax.Array,
  src_mask_BS: jax.Array,
  *,
  beam_size: int,
  max_len: int,
  length_penalty: core.LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
  ban_unk: bool = False,
  nbest: int = 1,
  prefix_BP: jax.Array | None = None,
  constraints: constraints_.Constraints | None = None,
  trace: bool = False,
  run_type: type[BeamRun] | None = None,
  **run_fields: Any,
) -> BeamState:
  """Beam search of width `beam_size` (static) for at most `max_len` (static) steps; the final
  `BeamState` (`beam_search` gives the best output of each sentence, `beam_search_nbest` the
  `nbest` best), with what each step did in its `trace` (a `BeamTrace`) when `trace` (static)
  is set.

  Each step extends the K live hypotheses by every word ([B, K, V] candidates). The K extensions
  by EOS are ranked by the length penalty (plus the coverage penalty) and merged into the
  finished pool, which keeps the K best; the K best extensions by any other word become the new
  live hypotheses (they share one length, so the length penalty does not change their order; the
  coverage penalty may). The loop stops at `max_len`, or earlier when for every sentence no live
  hypothesis can still beat its `nbest`-th best finished one (static, 1 <= nbest <= K):
  log-probabilities are <= 0, so a live score s can reach at most the length penalty's
  `bound(s, t, max_len)`, and the coverage penalty is at most 0. The pool's first `nbest`
  members are then the best the beam can find; it may hold fewer than K (empty slots score
  -inf), and later members are the best found before the search stopped, not necessarily the
  best overall. Asking for more does not change the best: the search only runs on until nothing
  left can beat the nbest-th.

  `prefix_BP` [B, P] forces each output's first words (`forced_words`): until a sentence's
  prefix is spent its one live hypothesis extends by the next prefix word only. `constraints`
  [B, C] (`seq2seq.decoding.constraints`) makes every output contain its sentence's phrases: the
  live slots are allocated by how many constraint tokens a hypothesis has met, and an extension by
  EOS is allowed only once it has met them all.

  `run_type` (a subclass of `BeamRun`, built with the `run_fields` it adds) changes how a step
  chooses: which slots start live, which extensions stay live, how the pool keeps finished ones
  (diverse beam search, `seq2seq.decoding.diverse`, is one).
  """
  core.check_nbest(nbest, beam_size)
  batch, src_len = src_BS.shape
  enc = core.tile(model.encode(src_BS, src_mask_BS, steps=max_len), beam_size)
  run = (run_type or BeamRun)(
    model=model,
    enc=enc,
    ranker=length_penalties.make(length_penalty),
    batch=batch,
    k=beam_size,
    src_len=src_len,
    max_len=max_len,
    nbest=nbest,
    coverage_beta=coverage_beta,
    ban_unk=ban_unk,
    prefix_BP=prefix_BP,
    constraints=constraints,
    cons_N=None if constraints is None else core.tile(constraints, beam_size),
    **run_fields,
  )
  return jax.lax.while_loop(run.unfinished, run.step, run.initial(trace))


@dataclasses.dataclass(frozen=True)
class BeamRun:
  """One beam search's static settings and per-sentence arrays, what every step reads, and the
  step itself (`step`), whose choices a subclass may change: `live_at_start`, `choose_live`,
  `merge_pool`, `unfinished`."""

  model: Any
  enc: Any  # The encoding, tiled to B * K rows.
  ranker: length_penalties.LengthPenalty
  batch: int
  k: int
  src_len: int
  max_len: int
  nbest: int
  coverage_beta: float
  ban_unk: bool
  prefix_BP: jax.Array | None
  constraints: constraints_.Constraints | None  # [B, C]
  cons_N: constraints_.Constraints | None  # The same tiled to B * K rows.

  def initial(self, trace: bool) -> BeamState:
    batch, k = self.batch, self.k
    empty = jnp.full((batch, k), -jnp.inf, jnp.float32)
    tokens = jnp.full((batch, k, self.max_len), PAD_ID, jnp.int32)
    alpha = jnp.zeros((batch, k, self.max_len, self.src_len), jnp.float32)
    return BeamState(
      t=jnp.zeros((), jnp.int32),
      live_tokens=tokens,
      live_alpha=alpha,
      live_scores=self.live_at_start(empty),
      dec_state=self.enc.init_state,
      y_prev=jnp.full((batch * k,), BOS_ID, jnp.int32),
      fin_tokens=tokens,
      fin_alpha=alpha,
      fin_scores=empty,
      fin_norm=empty,
      fin_lengths=jnp.zeros((batch, k), jnp.int32),
      progress=None if self.cons_N is None else constraints_.initial(self.cons_N),
      trace=_empty_trace(batch, self.max_len, k) if trace else None,
    )

  def live_at_start(self, empty_BK: jax.Array) -> jax.Array:
    """The live scores [B, K] before the first step (-inf: an empty slot). Only beam 0 is alive,
    so the first step expands one hypothesis, not K copies."""
    return empty_BK.at[:, 0].set(0.0)

  def merge_pool(self, bs: BeamState, eos_norm_BK: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(the pool's new ranking scores [B, K], the columns kept [B, K] of the pool and the K
    extensions by EOS side by side [B, 2K]): the K best, sorted."""
    return jax.lax.top_k(jnp.concatenate([bs.fin_norm, eos_norm_BK], axis=1), self.k)

  def penalty(self, coverage_BKS: jax.Array) -> jax.Array | float:
    """The coverage penalty [B, K], or 0 without one."""
    if self.coverage_beta == 0:
      return 0.0
    mask_BKS = self.enc.mask.reshape(self.batch, self.k, self.src_len)
    return core.coverage_penalty(coverage_BKS, mask_BKS, self.coverage_beta)

  def unfinished(self, bs: BeamState) -> jax.Array:
    """Whether some sentence's live hypotheses can still beat its nbest-th finished one."""
    reachable_BK = self.ranker.bound(bs.live_scores, bs.t, self.max_len)
    bound_B = jnp.max(jnp.where(jnp.isfinite(bs.live_scores), reachable_BK, -jnp.inf), axis=1)
    nth_fin_B = bs.fin_norm[:, self.nbest - 1]  # top_k keeps the pool sorted.
    return (bs.t < self.max_len) & ~jnp.all(nth_fin_B >= bound_B)

  def candidates(self, bs: BeamState, logits_NV: jax.Array):
    """(every extension's summed log-probability [B, K, V], its EOS column [B, K] and the others
    [B, K, V] with EOS at -inf, the constraint tokens each would have met [B, K, V] or None):
    forced prefixes and unmet constraints leave their extensions at -inf."""
    batch, k, t = self.batch, self.k, bs.t
    logp_BKV = core.step_log_probs(logits_NV, self.ban_unk).reshape(batch, k, -1)
    vocab = logp_BKV.shape[-1]
    if self.prefix_BP is not None:
      forcing_B, forced_B = core.forced_words(self.prefix_BP, t)
      other_BV = forcing_B[:, None] & (jnp.arange(vocab) != forced_B[:, None])
      logp_BKV = jnp.where(other_BV[:, None], -jnp.inf, logp_BKV)
    cand_BKV = bs.live_scores[..., None] + logp_BKV
    live_BKV = cand_BKV.at[..., EOS_ID].set(-jnp.inf)
    eos_scores_BK = cand_BKV[..., EOS_ID]
    count_BKV = None
    if self.cons_N is not None:  # EOS once every constraint is met; only extensions that can.
      count_BKV = constraints_.met_after(self.cons_N, bs.progress, vocab).reshape(batch, k, vocab)
      slots = self.cons_N.tokens.shape[1]
      complete_BK = bs.progress.met.all(-1).reshape(batch, k)
      eos_scores_BK = jnp.where(complete_BK, eos_scores_BK, -jnp.inf)
      room_BKV = constraints_.room(count_BKV, slots, t, self.max_len)
      live_BKV = jnp.where(room_BKV, live_BKV, -jnp.inf)
    return eos_scores_BK, live_BKV, count_BKV

  def choose_live(self, bs, live_BKV, count_BKV, penalty_BK) -> jax.Array:
    """The K extensions other than by EOS that stay live [B, K], as flat indices into [K * V].
    They share one length, so only the coverage penalty (of each origin beam) can change their
    order; with constraints the slots are allocated by the constraint tokens met."""
    batch, k, vocab = self.batch, self.k, live_BKV.shape[-1]
    rank_BKV = live_BKV
    if self.coverage_beta != 0:
      rank_BKV = self.ranker.rank(live_BKV, bs.t + 1) + penalty_BK[..., None]
    if self.cons_N is None:
      return jax.lax.top_k(rank_BKV.reshape(batch, k * vocab), k)[1]
    flat_rank, flat_count = rank_BKV.reshape(batch, k * vocab), count_BKV.reshape(batch, k * vocab)
    return constraints_.allocate(flat_rank, flat_count, self.constraints, k)

  def step(self, bs: BeamState) -> BeamState:
    batch, k, src_len, t = self.batch, self.k, self.src_len, bs.t
    new_state_N, logits_NV, alpha_NS = self.model.decoder_step(self.enc, bs.dec_state, bs.y_prev)
    eos_scores_BK, live_BKV, count_BKV = self.candidates(bs, logits_NV)
    vocab = live_BKV.shape[-1]
    step_alpha_BKS = core.attention_of(alpha_NS, self.enc).reshape(batch, k, src_len)
    alpha_BKLS = bs.live_alpha.at[:, :, t].set(step_alpha_BKS)
    penalty_BK = self.penalty(alpha_BKLS.sum(2))

    # Extensions by EOS join the finished pool, which keeps its K best.
    eos_norm_BK = self.ranker.rank(eos_scores_BK, t + 1) + penalty_BK
    eos_norm_BK = jnp.where(jnp.isfinite(eos_scores_BK), eos_norm_BK, -jnp.inf)
    pool_norm, keep_BK = self.merge_pool(bs, eos_norm_BK)
    pool = lambda fin, new: core.gather_beams(jnp.concatenate([fin, new], axis=1), keep_BK)

    flat_BK = self.choose_live(bs, live_BKV, count_BKV, penalty_BK)
    origin_BK, tok_BK = flat_BK // vocab, (flat_BK % vocab).astype(jnp.int32)
    live_scores = jnp.take_along_axis(live_BKV.reshape(batch, k * vocab), flat_BK, axis=1)
    regroup = lambda x: core.gather_beams(x.reshape((batch, k) + x.shape[1:]), origin_BK).reshape(
      x.shape
    )
    progress = None
    if self.cons_N is not None:
      regrouped = jax.tree.map(regroup, bs.progress)
      progress = constraints_.advance(self.cons_N, regrouped, tok_BK.reshape(batch * k))
    steps = None
    if bs.trace is not None:  # An EOS extension entered the pool if top_k kept its column.
      entered_BK = (keep_BK[:, :, None] == k + jnp.arange(k)).any(axis=1)
      now = (tok_BK, origin_BK.astype(jnp.int32), live_scores, eos_scores_BK, eos_norm_BK)
      steps = BeamTrace(
        *(x.at[:, t].set(v) for x, v in zip(bs.trace, (*now, entered_BK), strict=True))
      )
    return BeamState(
      t=t + 1,
      live_tokens=core.gather_beams(bs.live_tokens, origin_BK).at[:, :, t].set(tok_BK),
      live_alpha=core.gather_beams(alpha_BKLS, origin_BK),
      live_scores=live_scores,
      dec_state=jax.tree.map(regroup, new_state_N),
      y_prev=tok_BK.reshape(batch * k),
      fin_tokens=pool(bs.fin_tokens, bs.live_tokens.at[:, :, t].set(EOS_ID)),
      fin_alpha=pool(bs.fin_alpha, alpha_BKLS),
      fin_scores=pool(bs.fin_scores, eos_scores_BK),
      fin_norm=pool_norm,
      fin_lengths=pool(bs.fin_lengths, jnp.full((batch, k), t + 1, jnp.int32)),
      progress=progress,
      trace=steps,
    )


def _empty_trace(batch: int, max_len: int, k: int) -> BeamTrace:
  shape = (batch, max_len, k)
  none = jnp.full(shape, -jnp.inf, jnp.float32)
  slots = jnp.zeros(shape, jnp.int32)
  return BeamTrace(slots, slots, none, none, none, jnp.zeros(shape, bool))


def nbest_of_pool(
  bs: BeamState,
  src_mask_BS: jax.Array,
  *,
  nbest: int,
  max_len: int,
  length_penalty: core.LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
) -> core.DecodeResult:
  """The `nbest` best hypotheses of every sentence in a final `BeamState`, best first: fields
  [B, N, ...].

  They are the pool's first N finished hypotheses, in its order (by ranking score; top_k keeps
  ties in the order they were found), so their scores never increase down the list. A sentence
  where nothing finished within `max_len` steps gets its best live hypothesis instead (length
  `max_len`, no EOS; ranked the same way), as `beam_search` returns. Slots beyond what finished
  are empty: score -inf, length 0, PAD tokens, zero attention.
  """
  batch, k = bs.fin_scores.shape
  mask_BKS = jnp.repeat(src_mask_BS[:, None], k, axis=1)
  live_norm_BK = core.ranking_score(
    bs.live_scores, max_len, bs.live_alpha.sum(2), mask_BKS, length_penalty, coverage_beta
  )
  live_best_BN = jnp.broadcast_to(jnp.argmax(live_norm_BK, axis=1)[:, None], (batch, nbest))
  rank_BN = jnp.broadcast_to(jnp.arange(nbest), (batch, nbest))
  # The pool is sorted, its empty slots (-inf) last: slot 0 is empty only if nothing finished.
  use_live_BN = ~jnp.isfinite(bs.fin_scores[:, :1]) & (rank_BN == 0)

  def pick(fin, live):
    chosen = use_live_BN.reshape(use_live_BN.shape + (1,) * (fin.ndim - 2))
    return jnp.where(chosen, core.gather_beams(live, live_best_BN), core.gather_beams(fin, rank_BN))

  return core.DecodeResult(
    pick(bs.fin_tokens, bs.live_tokens),
    jnp.where(use_live_BN, max_len, core.gather_beams(bs.fin_lengths, rank_BN)),
    pick(bs.fin_scores, bs.live_scores),
    pick(bs.fin_norm, live_norm_BK),
    pick(bs.fin_alpha, bs.live_alpha),
  )


def beam_search_nbest(
  model: Any,
  src_BS: jax.Array,
  src_mask_BS: jax.Array,
  *,
  nbest: int,
  trace: bool = False,
  **settings,
) -> core.DecodeResult | tuple[core.DecodeResult, BeamTrace]:
  """The `nbest` (static, <= beam_size) best outputs of `beam_search_pool` for every sentence,
  best first (`nbest_of_pool`): fields [B, N, ...]; with `trace`, (those, the search's
  `BeamTrace`). Same settings as `beam_search_pool` (beam_size, max_len and optionally
  length_penalty, coverage_beta, ban_unk)."""
  bs = beam_search_pool(model, src_BS, src_mask_BS, nbest=nbest, trace=trace, **settings)
  best = nbest_of_pool(
    bs,
    src_mask_BS,
    nbest=nbest,
    max_len=settings["max_len"],
    length_penalty=settings.get("length_penalty", "power"),
    coverage_beta=settings.get("coverage_beta", 0.0),
  )
  return (best, bs.trace) if trace else best


def beam_search(
  model: Any, src_BS: jax.Array, src_mask_BS: jax.Array, **settings
) -> core.DecodeResult:
  """The best output of `beam_search_pool` (same arguments: beam_size, max_len and optionally
  length_penalty, coverage_beta, ban_unk) for every sentence, the first of
  `beam_search_nbest`: its best finished hypothesis, or, for a sentence where nothing finished
  within `max_len` steps, its best live one (length `max_len`, no EOS), ranked the same way."""
  best = beam_search_nbest(model, src_BS, src_mask_BS, nbest=1, **settings)
  return jax.tree.map(lambda x: x[:, 0], best)


@core.SEARCHES.register("beam")
class Beam(core.Search):
  """Beam search of width `decode.beam_size` (`beam_search_nbest`), lexical constraints and a
  trace of its steps included."""

  takes_constraints = True
  traces = True

  def __call__(self, model, src_BS, src_mask_BS, job):
    result = beam_search_nbest(
      model,
      src_BS,
      src_mask_BS,
      nbest=job.nbest,
      trace=job.trace,
      beam_size=job.beam_size,
      constraints=job.constraints,
      **job.steering(),
    )
    return result if job.trace else (result, None)

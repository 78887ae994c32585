"""Left-to-right searches that keep one hypothesis per row: greedy search (`greedy`, the most
probable word at every step) and sampling (`sample`, words drawn from the model's truncated
distribution, `seq2seq.decoding.sampling`).

A hypothesis ends when it emits EOS; afterwards it only extends with PAD at zero cost. Greedy
ranks nothing: its `norm_scores` are what beam search would rank its outputs by
(`core.ranking_score`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.decoding import core
from seq2seq.decoding import sampling as sampling_


class GreedyState(NamedTuple):
  """What greedy search (and sampling) carries from one step to the next."""

  t: jax.Array  # int32 scalar: the step about to be taken.
  tokens_BL: jax.Array  # [B, L] int32: the outputs so far, PAD after EOS and beyond step t.
  alpha_BLS: jax.Array  # [B, L, S] float32: their attention (zeros after EOS).
  scores_B: jax.Array  # [B] float32: sum of the outputs' log-probabilities.
  ended_B: jax.Array  # [B] bool: EOS produced.
  lengths_B: jax.Array  # [B] int32: tokens up to and including EOS.
  dec_state: Any  # The model's decoder state.
  y_prev_B: jax.Array  # [B] int32: the word fed to the next step.


def greedy(
  model: Any,
  src_BS: jax.Array,
  src_mask_BS: jax.Array,
  *,
  max_len: int,
  ban_unk: bool = False,
  length_penalty: core.LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
  prefix_BP: jax.Array | None = None,
) -> core.DecodeResult:
  """Picks the most probable next word at every step, for at most `max_len` (static) steps
  (never UNK with `ban_unk`), after the forced `prefix_BP` where one is given.

  src_BS, src_mask_BS: [B, S] int. Returns a `DecodeResult` with L = max_len. Greedy ranks
  nothing; its `norm_scores` are what beam search would rank its outputs by (`ranking_score`
  with `length_penalty` and `coverage_beta`; an output that never ended counts L tokens).
  prefix_BP [B, P] int: each output's first words (PAD after a sentence's own; `forced_words`).
  """
  pick = lambda logits_BV, t: core.best_words(logits_BV, ban_unk)
  return left_to_right(
    model, src_BS, src_mask_BS, pick, max_len, length_penalty, coverage_beta, prefix_BP
  )


def sample(
  model: Any,
  src_BS: jax.Array,
  src_mask_BS: jax.Array,
  *,
  sampling: sampling_.Sampling,
  max_len: int,
  ban_unk: bool = False,
  length_penalty: core.LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
  prefix_BP: jax.Array | None = None,
) -> core.DecodeResult:
  """`sampling.n` outputs per sentence, each word drawn from the model's truncated next-word
  distribution (`seq2seq.decoding.sampling`), for at most `max_len` (static) steps, after the forced
  `prefix_BP` [B, P] where one is given (as `greedy`'s).

  Returns a `DecodeResult` with fields [B, N, ...] (N = sampling.n), each sentence's samples
  best first by `norm_scores` (as `greedy`'s); `scores` are the model's own log-probabilities.
  """
  n = sampling.n
  keys_R = sampling_.sample_keys(sampling.seed, src_BS, src_mask_BS, n)

  def pick(logits_RV, t):
    banned_V = core.banned(logits_RV.shape[-1], ban_unk)
    tok_R = sampling_.draw(keys_R, t, sampling_.truncated_logits(logits_RV, banned_V, sampling))
    return tok_R, core.word_log_probs(logits_RV, tok_R)

  src_RS, mask_RS = core.tile(src_BS, n), core.tile(src_mask_BS, n)
  prefix_RP = None if prefix_BP is None else core.tile(prefix_BP, n)
  flat = left_to_right(
    model, src_RS, mask_RS, pick, max_len, length_penalty, coverage_beta, prefix_RP
  )
  per_sentence = jax.tree.map(lambda x: x.reshape(src_BS.shape[0], n, *x.shape[1:]), flat)
  order_BN = jnp.argsort(-per_sentence.norm_scores, axis=1, stable=True)
  return jax.tree.map(lambda x: core.gather_beams(x, order_BN), per_sentence)


def left_to_right(
  model: Any,
  src_BS: jax.Array,
  src_mask_BS: jax.Array,
  pick,
  max_len: int,
  length_penalty: core.LengthPenaltyLike,
  coverage_beta: float,
  prefix_BP: jax.Array | None = None,
) -> core.DecodeResult:
  """One output per row, word by word: `pick(logits_BV, t) -> (words [B], their
  log-probabilities [B])` chooses each step's words (greedy's argmax, or a draw), except where
  `prefix_BP` forces them."""
  enc = model.encode(src_BS, src_mask_BS, steps=max_len)
  batch, src_len = src_BS.shape

  def cond(g: GreedyState):
    return (g.t < max_len) & ~jnp.all(g.ended_B)

  def body(g: GreedyState) -> GreedyState:
    new_state, logits, alpha_BS = model.decoder_step(enc, g.dec_state, g.y_prev_B)
    best_B, logp_B = pick(logits, g.t)  # An ended output extends with PAD, free.
    if prefix_BP is not None:
      forcing_B, forced_B = core.forced_words(prefix_BP, g.t)
      best_B = jnp.where(forcing_B, forced_B, best_B)
      logp_B = jnp.where(forcing_B, core.word_log_probs(logits, forced_B), logp_B)
    tok_B = jnp.where(g.ended_B, PAD_ID, best_B)
    alpha_BS = jnp.where(g.ended_B[:, None], 0.0, core.attention_of(alpha_BS, enc))
    return GreedyState(
      t=g.t + 1,
      tokens_BL=g.tokens_BL.at[:, g.t].set(tok_B),
      alpha_BLS=g.alpha_BLS.at[:, g.t].set(alpha_BS),
      scores_B=g.scores_B + jnp.where(g.ended_B, 0.0, logp_B),
      ended_B=g.ended_B | (tok_B == EOS_ID),
      lengths_B=g.lengths_B + (~g.ended_B).astype(jnp.int32),
      dec_state=new_state,
      y_prev_B=tok_B,
    )

  init = GreedyState(
    t=jnp.zeros((), jnp.int32),
    tokens_BL=jnp.full((batch, max_len), PAD_ID, jnp.int32),
    alpha_BLS=jnp.zeros((batch, max_len, src_len), jnp.float32),
    scores_B=jnp.zeros((batch,), jnp.float32),
    ended_B=jnp.zeros((batch,), bool),
    lengths_B=jnp.zeros((batch,), jnp.int32),
    dec_state=enc.init_state,
    y_prev_B=jnp.full((batch,), BOS_ID, jnp.int32),
  )
  done = jax.lax.while_loop(cond, body, init)
  tokens, alpha, scores, lengths = done.tokens_BL, done.alpha_BLS, done.scores_B, done.lengths_B
  norm = core.ranking_score(
    scores, lengths, alpha.sum(1), src_mask_BS, length_penalty, coverage_beta
  )
  return core.DecodeResult(tokens, lengths, scores, norm, alpha)


@core.SEARCHES.register("greedy")
class Greedy(core.Search):
  """The most probable word at every step (`greedy`); its n-best list is its one output."""

  def outputs(self, job: core.SearchJob) -> int:
    return 1

  def __call__(self, model, src_BS, src_mask_BS, job):
    result = greedy(model, src_BS, src_mask_BS, **job.steering())
    return jax.tree.map(lambda x: x[:, None], result), None


@core.SEARCHES.register("sample")
class Sample(core.Search):
  """`decode.sampling`'s draws (`sample`), best first taking the place of the n-best list."""

  def check(self, dec) -> None:
    if dec.sampling is None:
      raise ValueError("decode.search=sample draws by decode.sampling's spec: set it")

  def outputs(self, job: core.SearchJob) -> int:
    return job.sampling.n

  def __call__(self, model, src_BS, src_mask_BS, job):
    if job.sampling is None:
      raise ValueError("decode.search=sample draws by decode.sampling: set it")
    result = sample(model, src_BS, src_mask_BS, sampling=job.sampling, **job.steering())
    return jax.tree.map(lambda x: x[:, : job.nbest], result), None

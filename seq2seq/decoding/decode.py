"""Greedy and beam-search decoding, n-best lists, forced decoding (the scores of given
translations), and attention-based unknown-word replacement.

Axes: B batch, K beam, S source positions, L output positions (the static `max_len`), V target
vocabulary, D decoder units.

`greedy` and `beam_search` take any `model` with the decoding API of `models.Seq2Seq`:
`encode(src_BS, src_mask_BS) -> Encoded` and `decoder_step(enc, state, y_prev_B) ->
(new_state, logits_BV, alpha_BS or None)`, where the state (starting at `enc.init_state`) is any
pytree of arrays with the batch as leading axis. They are pure and traceable: the source is encoded
once, the time loop is one `jax.lax.while_loop` that exits as soon as every hypothesis has ended,
and nothing happens on the host. They run eagerly as they are; to compile them with an NNX model,
pass the split model to `jit_decode(graphdef, params, ...)` (a `jax.jit` with the graph definition
static, which merges the model inside the trace), or call `decode_batch(state, batch, dec)`,
which does that for a `TrainState` and keeps one compiled function per static setting. The
decoding settings travel typed (`DecodeSettings.from_config`, built once where a run is
evaluated or translated).

Scores are sums of the model's log-probabilities (log-softmax over the full vocabulary). PAD and
BOS are never produced: their log-probabilities are set to -inf before choosing (UNK too with
`ban_unk`, GroundHog's --ignore-unk, used for the paper's No-UNK column). In greedy search a
hypothesis ends when it emits EOS; afterwards it only extends with PAD at zero cost. Beam search
keeps K live hypotheses and, apart from them, a pool of the K best finished ones per sentence
(`BeamState`): an extension by EOS moves to the pool, so live hypotheses that look better for the
moment can never push a finished translation out. Finished hypotheses are ranked by a length
penalty of their score and length (`decode.length_penalty`, `seq2seq.decoding.length_penalties`: by
default score / length, GroundHog's normalisation), where the length counts the tokens up to and
including EOS, plus GNMT's coverage
penalty beta * sum_j log(min(sum_i alpha_ij, 1)) over the real source positions (Wu et al. 2016;
beta = `decode.coverage_penalty`, 0 by default; coverage is floored at 1e-6 so an unattended word
costs a finite beta * log(1e-6)). The search stops once no live hypothesis can beat the best
finished one (with `nbest=N`, its N-th best finished one): each length penalty bounds what a
live hypothesis can still reach (`LengthPenalty.bound`).

`beam_search_nbest` returns the N best hypotheses of that pool (N <= K), best first;
`beam_search` is its first. `force_decode` scores given outputs with the model's teacher-forced
pass (in decoding mode: the structures' test-time choices) and ranks them exactly as the search
does (`ranking_score`), so the score of a decoded output equals the score its search reported.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from seq2seq.common import registry
from seq2seq.data import input_pipeline, lexicon
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from seq2seq.decoding import constraints as constraints_
from seq2seq.decoding import length_penalties
from seq2seq.decoding import sampling as sampling_
from seq2seq.model.models import Encoded

# A `decode.length_penalty` spec ("gnmt(alpha=0.6)") or the penalty it names.
LengthPenaltyLike = str | length_penalties.LengthPenalty


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
  """The `config.decode` section, typed (configs/default.py says what each field means), with
  the two data settings decoding reads: `sources`, the source languages a batch packs side by
  side (`input_pipeline.num_sources`), and `bucket_step`, the multiple decoding batches are
  padded to (`data.bucket_step`), so few shapes compile."""

  beam_size: int
  max_len_ratio: float
  length_penalty: str
  coverage_penalty: float
  batch_size: int
  max_input_tokens: int
  ensemble: str
  ensemble_combination: str
  ensemble_attention: str
  shortlist: str
  shortlist_frequent: int
  shortlist_per_word: int
  shortlist_scope: str
  replace_unk: bool
  num_heatmaps: int
  sampling: str = ""
  mbr: str = ""
  sources: int = 1
  bucket_step: int = 1

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> DecodeSettings:
    """The typed decoding settings of a run's config (`settings.validate` checks the values)."""
    sources = input_pipeline.num_sources(input_pipeline.DataSettings.from_config(config))
    derived = {"sources": sources, "bucket_step": int(config.data.bucket_step)}
    return registry.typed_section(cls, dict(config.decode.items()), "decode", **derived)

  def candidates(self) -> int:
    """How many outputs per sentence decoding can give: the samples drawn, or the beam."""
    drawn = sampling_.parse(self.sampling)
    return drawn.n if drawn is not None else self.beam_size

  def check_nbest(self, nbest: int) -> None:
    """Raises ValueError unless these settings can give `nbest` outputs per sentence."""
    check_nbest(nbest, self.beam_size, sampling_.parse(self.sampling))


class DecodeResult(NamedTuple):
  """The best hypothesis of every sentence; with an n-best list every field gains an axis N after
  B (tokens [B, N, L], scores [B, N], ...), best first."""

  tokens: jax.Array  # [B, L] int32: the output, EOS included, PAD after it.
  lengths: jax.Array  # [B] int32: tokens up to and including EOS (L when EOS never came).
  # [B] float32: sum of log-probabilities of `tokens[:lengths]` (-inf: none), normalised over
  # the vocabulary, or over the shortlist when decoding with one (`normalised_over`).
  scores: jax.Array
  norm_scores: jax.Array  # [B] float32: the ranking score of beam search (`ranking_score`).
  alpha: jax.Array  # [B, L, S] float32: attention at each output position (zeros without one).


def _step_log_probs(logits_NV: jax.Array, ban_unk: bool = False) -> jax.Array:
  """Log-softmax over the words the logits cover (the vocabulary, or a shortlist's candidates),
  with PAD and BOS (and UNK with `ban_unk`, GroundHog's --ignore-unk) made impossible
  afterwards: [N, V] float32. The other words keep their probabilities under that softmax."""
  logp = jax.nn.log_softmax(logits_NV.astype(jnp.float32), axis=-1)
  return jnp.where(_banned(logp.shape[-1], ban_unk), -jnp.inf, logp)


def _banned(vocab: int, ban_unk: bool) -> jax.Array:
  """[V] bool: the ids no output may hold (PAD, BOS, and UNK with `ban_unk`)."""
  banned_ids = [PAD_ID, BOS_ID, UNK_ID] if ban_unk else [PAD_ID, BOS_ID]
  return jnp.zeros(vocab, bool).at[jnp.array(banned_ids)].set(True)


def _best_words(logits_NV: jax.Array, ban_unk: bool = False) -> tuple[jax.Array, jax.Array]:
  """Greedy's pick: each row's most probable allowed word [N] and its log-probability [N] under
  the softmax over the logits' words (the argmax and entry of `_step_log_probs`), without
  writing the [N, V] log-probabilities."""
  allowed = jnp.where(_banned(logits_NV.shape[-1], ban_unk), -jnp.inf, logits_NV)
  tok_N = jnp.argmax(allowed, axis=-1).astype(jnp.int32)
  return tok_N, _word_log_probs(logits_NV, tok_N)


def _attention(alpha_NS: jax.Array | None, enc: Encoded) -> jax.Array:
  """The step's attention as float32 [N, S]; zeros for models without attention (RNNencdec)."""
  if alpha_NS is None:
    return jnp.zeros(enc.mask.shape, jnp.float32)
  return alpha_NS.astype(jnp.float32)


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
  length_penalty: LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
  prefix_BP: jax.Array | None = None,
) -> DecodeResult:
  """Picks the most probable next word at every step, for at most `max_len` (static) steps
  (never UNK with `ban_unk`), after the forced `prefix_BP` where one is given.

  src_BS, src_mask_BS: [B, S] int. Returns a `DecodeResult` with L = max_len. Greedy ranks
  nothing; its `norm_scores` are what beam search would rank its outputs by (`ranking_score`
  with `length_penalty` and `coverage_beta`; an output that never ended counts L tokens).
  prefix_BP [B, P] int: each output's first words (PAD after a sentence's own; `forced_words`).
  """
  pick = lambda logits_BV, t: _best_words(logits_BV, ban_unk)
  return _left_to_right(
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
  length_penalty: LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
  prefix_BP: jax.Array | None = None,
) -> DecodeResult:
  """`sampling.n` outputs per sentence, each word drawn from the model's truncated next-word
  distribution (`seq2seq.decoding.sampling`), for at most `max_len` (static) steps, after the forced
  `prefix_BP` [B, P] where one is given (as `greedy`'s).

  Returns a `DecodeResult` with fields [B, N, ...] (N = sampling.n), each sentence's samples
  best first by `norm_scores` (as `greedy`'s); `scores` are the model's own log-probabilities.
  """
  n = sampling.n
  keys_R = sampling_.sample_keys(sampling.seed, src_BS, src_mask_BS, n)

  def pick(logits_RV, t):
    banned_V = _banned(logits_RV.shape[-1], ban_unk)
    tok_R = sampling_.draw(keys_R, t, sampling_.truncated_logits(logits_RV, banned_V, sampling))
    return tok_R, _word_log_probs(logits_RV, tok_R)

  src_RS, mask_RS = _tile(src_BS, n), _tile(src_mask_BS, n)
  prefix_RP = None if prefix_BP is None else _tile(prefix_BP, n)
  flat = _left_to_right(
    model, src_RS, mask_RS, pick, max_len, length_penalty, coverage_beta, prefix_RP
  )
  per_sentence = jax.tree.map(lambda x: x.reshape(src_BS.shape[0], n, *x.shape[1:]), flat)
  order_BN = jnp.argsort(-per_sentence.norm_scores, axis=1, stable=True)
  return jax.tree.map(lambda x: _gather_beams(x, order_BN), per_sentence)


def _left_to_right(
  model: Any,
  src_BS: jax.Array,
  src_mask_BS: jax.Array,
  pick,
  max_len: int,
  length_penalty: LengthPenaltyLike,
  coverage_beta: float,
  prefix_BP: jax.Array | None = None,
) -> DecodeResult:
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
      forcing_B, forced_B = forced_words(prefix_BP, g.t)
      best_B = jnp.where(forcing_B, forced_B, best_B)
      logp_B = jnp.where(forcing_B, _word_log_probs(logits, forced_B), logp_B)
    tok_B = jnp.where(g.ended_B, PAD_ID, best_B)
    alpha_BS = jnp.where(g.ended_B[:, None], 0.0, _attention(alpha_BS, enc))
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
  norm = ranking_score(scores, lengths, alpha.sum(1), src_mask_BS, length_penalty, coverage_beta)
  return DecodeResult(tokens, lengths, scores, norm, alpha)


def _tile(tree: Any, beam_size: int) -> Any:
  """Repeats every leaf [B, ...] to [B*K, ...], row b*K + k being beam k of sentence b."""
  return jax.tree.map(lambda x: jnp.repeat(x, beam_size, axis=0), tree)


def forced_words(prefix_BP: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(whether step t is forced [B], the word it is forced to [B]) by prefixes [B, P]: each
  row's words, PAD after them (no prefix: all PAD). A prefix holds no EOS, so a forced output
  goes on after it."""
  word_B = prefix_BP[:, jnp.minimum(t, prefix_BP.shape[1] - 1)]
  return (t < prefix_BP.shape[1]) & (word_B != PAD_ID), word_B


def _word_log_probs(logits_NV: jax.Array, word_N: jax.Array) -> jax.Array:
  """[N] the log-probability of each row's word under the softmax over the logits' words."""
  logits = logits_NV.astype(jnp.float32)
  chosen = jnp.take_along_axis(logits, word_N[:, None], axis=-1)[:, 0]
  return chosen - jax.nn.logsumexp(logits, axis=-1)


COVERAGE_FLOOR = 1e-6


def coverage_penalty(coverage_NS: jax.Array, mask_NS: jax.Array, beta: float) -> jax.Array:
  """GNMT's beta * sum_j log(min(coverage_j, 1)) over real positions [N, S] -> [N] (<= 0)."""
  covered = jnp.clip(coverage_NS, COVERAGE_FLOOR, 1.0)
  return beta * jnp.sum(jnp.where(mask_NS.astype(bool), jnp.log(covered), 0.0), axis=-1)


def ranking_score(
  scores_N: jax.Array,
  lengths_N: jax.Array | int,
  coverage_NS: jax.Array,
  mask_NS: jax.Array,
  length_penalty: LengthPenaltyLike,
  coverage_beta: float,
) -> jax.Array:
  """What beam search ranks an output by: its length penalty's rank of the score and length
  (`length_penalties`), plus GNMT's coverage penalty of
  its attention summed over output positions, coverage_NS (left out when beta = 0); any leading
  axes N. Greedy search and `force_decode` report the same for their outputs."""
  norm_N = length_penalties.make(length_penalty).rank(scores_N, lengths_N)
  if coverage_beta == 0:
    return norm_N
  return norm_N + coverage_penalty(coverage_NS, mask_NS, coverage_beta)


def check_nbest(nbest: int, beam_size: int, sampling: sampling_.Sampling | None = None) -> None:
  """Raises ValueError unless 1 <= nbest <= beam_size (the pool holds only K finished outputs),
  or with `sampling`, nbest <= its n (the samples drawn)."""
  if nbest < 1:
    raise ValueError(f"nbest must be at least 1, got {nbest}")
  if sampling is not None:
    if nbest > sampling.n:
      raise ValueError(
        f"nbest={nbest} exceeds the samples drawn (decode.sampling={sampling}): ask for at "
        f"most {sampling.n} or draw more (n=...)"
      )
  elif nbest > beam_size:
    raise ValueError(
      f"nbest={nbest} exceeds the beam size {beam_size} (decode.beam_size): ask for at most "
      f"{beam_size} hypotheses or widen the beam"
    )


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
  length_penalty: LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
  ban_unk: bool = False,
  nbest: int = 1,
  prefix_BP: jax.Array | None = None,
  constraints: constraints_.Constraints | None = None,
  trace: bool = False,
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
  """
  check_nbest(nbest, beam_size)
  ranker = length_penalties.make(length_penalty)
  batch, src_len = src_BS.shape
  k, n = beam_size, src_BS.shape[0] * beam_size
  enc = _tile(model.encode(src_BS, src_mask_BS, steps=max_len), k)
  mask_BKS = enc.mask.reshape(batch, k, src_len)
  cons_N = None if constraints is None else _tile(constraints, k)

  def penalty(coverage_BKS):  # [B, K], or 0 without the coverage penalty.
    if coverage_beta == 0:
      return 0.0
    return coverage_penalty(coverage_BKS, mask_BKS, coverage_beta)

  def cond(bs: BeamState):
    reachable_BK = ranker.bound(bs.live_scores, bs.t, max_len)
    bound_B = jnp.max(jnp.where(jnp.isfinite(bs.live_scores), reachable_BK, -jnp.inf), axis=1)
    nth_fin_B = bs.fin_norm[:, nbest - 1]  # top_k keeps the pool sorted.
    return (bs.t < max_len) & ~jnp.all(nth_fin_B >= bound_B)

  def body(bs: BeamState):
    t = bs.t
    new_state_N, logits_NV, alpha_NS = model.decoder_step(enc, bs.dec_state, bs.y_prev)
    logp_BKV = _step_log_probs(logits_NV, ban_unk).reshape(batch, k, -1)
    vocab = logp_BKV.shape[-1]
    if prefix_BP is not None:
      forcing_B, forced_B = forced_words(prefix_BP, t)
      other_BV = forcing_B[:, None] & (jnp.arange(vocab) != forced_B[:, None])
      logp_BKV = jnp.where(other_BV[:, None], -jnp.inf, logp_BKV)
    cand_BKV = bs.live_scores[..., None] + logp_BKV
    step_alpha_BKS = _attention(alpha_NS, enc).reshape(batch, k, src_len)
    alpha_BKLS = bs.live_alpha.at[:, :, t].set(step_alpha_BKS)
    penalty_BK = penalty(alpha_BKLS.sum(2))
    live_BKV = cand_BKV.at[..., EOS_ID].set(-jnp.inf)
    eos_scores_BK = cand_BKV[..., EOS_ID]
    if cons_N is not None:  # EOS once every constraint is met; only extensions that can still.
      count_BKV = constraints_.met_after(cons_N, bs.progress, vocab).reshape(batch, k, vocab)
      slots = cons_N.tokens.shape[1]
      complete_BK = bs.progress.met.all(-1).reshape(batch, k)
      eos_scores_BK = jnp.where(complete_BK, eos_scores_BK, -jnp.inf)
      live_BKV = jnp.where(constraints_.room(count_BKV, slots, t, max_len), live_BKV, -jnp.inf)

    # Extensions by EOS join the finished pool, which keeps its K best.
    eos_norm_BK = ranker.rank(eos_scores_BK, t + 1) + penalty_BK
    eos_norm_BK = jnp.where(jnp.isfinite(eos_scores_BK), eos_norm_BK, -jnp.inf)
    pool_norm, keep_BK = jax.lax.top_k(jnp.concatenate([bs.fin_norm, eos_norm_BK], axis=1), k)
    pool = lambda fin, new: _gather_beams(jnp.concatenate([fin, new], axis=1), keep_BK)
    fin_tokens = pool(bs.fin_tokens, bs.live_tokens.at[:, :, t].set(EOS_ID))
    fin_alpha = pool(bs.fin_alpha, alpha_BKLS)
    fin_scores = pool(bs.fin_scores, eos_scores_BK)
    fin_lengths = pool(bs.fin_lengths, jnp.full((batch, k), t + 1, jnp.int32))

    # Every other extension competes for the K live slots. They share one length, so only the
    # coverage penalty (of each origin beam) can change their order.
    rank_BKV = live_BKV
    if coverage_beta != 0:
      rank_BKV = ranker.rank(live_BKV, t + 1) + penalty_BK[..., None]
    if cons_N is None:
      _, flat_BK = jax.lax.top_k(rank_BKV.reshape(batch, k * vocab), k)
    else:
      flat_BK = constraints_.allocate(
        rank_BKV.reshape(batch, k * vocab), count_BKV.reshape(batch, k * vocab), constraints, k
      )
    origin_BK, tok_BK = flat_BK // vocab, (flat_BK % vocab).astype(jnp.int32)
    live_scores = jnp.take_along_axis(live_BKV.reshape(batch, k * vocab), flat_BK, axis=1)
    regroup = lambda x: _gather_beams(x.reshape((batch, k) + x.shape[1:]), origin_BK).reshape(
      x.shape
    )
    dec_state = jax.tree.map(regroup, new_state_N)
    progress = None
    if cons_N is not None:
      progress = constraints_.advance(cons_N, jax.tree.map(regroup, bs.progress), tok_BK.reshape(n))
    steps = None
    if bs.trace is not None:  # An EOS extension entered the pool if top_k kept its column.
      entered_BK = (keep_BK[:, :, None] == k + jnp.arange(k)).any(axis=1)
      now = (tok_BK, origin_BK.astype(jnp.int32), live_scores, eos_scores_BK, eos_norm_BK)
      steps = BeamTrace(
        *(x.at[:, t].set(v) for x, v in zip(bs.trace, (*now, entered_BK), strict=True))
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
      progress=progress,
      trace=steps,
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
    progress=None if cons_N is None else constraints_.initial(cons_N),
    trace=_empty_trace(batch, max_len, k) if trace else None,
  )
  return jax.lax.while_loop(cond, body, init)


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
  length_penalty: LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
) -> DecodeResult:
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
  live_norm_BK = ranking_score(
    bs.live_scores, max_len, bs.live_alpha.sum(2), mask_BKS, length_penalty, coverage_beta
  )
  live_best_BN = jnp.broadcast_to(jnp.argmax(live_norm_BK, axis=1)[:, None], (batch, nbest))
  rank_BN = jnp.broadcast_to(jnp.arange(nbest), (batch, nbest))
  # The pool is sorted, its empty slots (-inf) last: slot 0 is empty only if nothing finished.
  use_live_BN = ~jnp.isfinite(bs.fin_scores[:, :1]) & (rank_BN == 0)

  def pick(fin, live):
    chosen = use_live_BN.reshape(use_live_BN.shape + (1,) * (fin.ndim - 2))
    return jnp.where(chosen, _gather_beams(live, live_best_BN), _gather_beams(fin, rank_BN))

  return DecodeResult(
    pick(bs.fin_tokens, bs.live_tokens),
    jnp.where(use_live_BN, max_len, _gather_beams(bs.fin_lengths, rank_BN)),
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
) -> DecodeResult | tuple[DecodeResult, BeamTrace]:
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


def beam_search(model: Any, src_BS: jax.Array, src_mask_BS: jax.Array, **settings) -> DecodeResult:
  """The best output of `beam_search_pool` (same arguments: beam_size, max_len and optionally
  length_penalty, coverage_beta, ban_unk) for every sentence, the first of
  `beam_search_nbest`: its best finished hypothesis, or, for a sentence where nothing finished
  within `max_len` steps, its best live one (length `max_len`, no EOS), ranked the same way."""
  best = beam_search_nbest(model, src_BS, src_mask_BS, nbest=1, **settings)
  return jax.tree.map(lambda x: x[:, 0], best)


@functools.partial(
  jax.jit,
  static_argnames=(
    "graphdef",
    "beam_size",
    "max_len",
    "length_penalty",
    "coverage_beta",
    "ban_unk",
    "nbest",
    "sampling",
    "trace",
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
  length_penalty: LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
  ban_unk: bool = False,
  nbest: int | None = None,
  output_ids: jax.Array | None = None,
  output_mask: jax.Array | None = None,
  sampling: sampling_.Sampling | None = None,
  prefix_BP: jax.Array | None = None,
  constraints: constraints_.Constraints | None = None,
  trace: bool = False,
) -> DecodeResult | tuple[DecodeResult, BeamTrace]:
  """Compiled decoding of an NNX model given as `nnx.split(model)`: greedy when beam_size == 1,
  `sample` (its samples best first taking the place of the n-best list) with `sampling`, beam
  search of any width with lexical `constraints` [B, C]; `prefix_BP` [B, P] forces each output's
  first words in all of them.

  `graphdef`, `beam_size`, `max_len`, `length_penalty`, `coverage_beta`, `ban_unk` and
  `nbest` are static; `params` is the model state, merged with `graphdef` inside the trace.
  With `nbest` (1 <= nbest <= beam_size) the result is the n-best list, fields [B, N, ...]
  (greedy's one output for beam_size 1); without it, the best output, fields [B, ...]. Any
  `nnx.Module` with the decoding API can be split and passed, one that wraps several models too.
  `output_ids` [N]: decode over that shortlist only (`lexicon.shortlist`, specials first), the
  output mapped back to word ids, its scores normalised over the shortlist; `output_mask`
  [B, N]: each sentence over its own part of it (`lexicon.sentence_candidates`).
  With `trace` (static; beam search, even of width 1) the result comes with what each step of
  the search did, `(result, BeamTrace)`, its tokens word ids as the result's.
  """
  if trace and sampling is not None:
    raise ValueError("a beam trace records beam search: decode without sampling")
  if nbest is not None:
    check_nbest(nbest, beam_size, sampling)
  model = nnx.merge(graphdef, params)
  if output_ids is not None:
    model = Shortlisted(model, output_ids, output_mask)
  settings = {
    "max_len": max_len,
    "length_penalty": length_penalties.make(length_penalty),
    "coverage_beta": coverage_beta,
    "ban_unk": ban_unk,
    "prefix_BP": prefix_BP,
  }
  if sampling is not None:
    result = sample(model, src_BS, src_mask_BS, sampling=sampling, **settings)
    result = jax.tree.map(lambda x: x[:, 0] if nbest is None else x[:, :nbest], result)
  elif beam_size == 1 and constraints is None and not trace:
    result = greedy(model, src_BS, src_mask_BS, **settings)
    result = result if nbest is None else jax.tree.map(lambda x: x[:, None], result)
  else:
    settings |= {"beam_size": beam_size, "constraints": constraints}
    if trace:
      result, steps = beam_search_nbest(
        model, src_BS, src_mask_BS, nbest=nbest or 1, trace=True, **settings
      )
      if nbest is None:
        result = jax.tree.map(lambda x: x[:, 0], result)
      if output_ids is not None:
        steps = steps._replace(tokens=output_ids[steps.tokens])
        result = result._replace(tokens=output_ids[result.tokens])
      return result, steps
    if nbest is None:
      result = beam_search(model, src_BS, src_mask_BS, **settings)
    else:
      result = beam_search_nbest(model, src_BS, src_mask_BS, nbest=nbest, **settings)
  return result if output_ids is None else result._replace(tokens=output_ids[result.tokens])


class ShortlistEncoded(NamedTuple):
  """A shortlisted model's encoding: the model's own, and the mask of each sentence's
  candidates, which beam search tiles with the rest."""

  inner: Any  # What the model's `encode` returned.
  mask: jax.Array  # [B, S] the source mask (the search reads it).
  init_state: Any  # The model's initial decoder state.
  allowed: jax.Array | None  # [B, N] bool: the sentence's own candidates; None: all N.


class Shortlisted:
  """A model decoded over a shortlist `ids` [N] (`lexicon.shortlist`: the specials first, at
  their own positions): the search works in candidate indices, so PAD, BOS, EOS and UNK keep
  their ids; the embedding reads the candidate's word id and the output layer runs over the N
  candidates only, the softmax normalised over them (or over a sentence's own candidates,
  `allowed_BN`). Map the output back with `ids[tokens]`."""

  def __init__(self, model: Any, ids_N: jax.Array, allowed_BN: jax.Array | None = None):
    self.model, self.ids, self.allowed = model, ids_N, allowed_BN
    self.uses_attention = model.uses_attention

  def encode(self, src_BS, src_mask_BS, **kwargs):
    enc = self.model.encode(src_BS, src_mask_BS, **kwargs)
    return ShortlistEncoded(enc, enc.mask, enc.init_state, self.allowed)

  def decoder_step(self, enc: ShortlistEncoded, state, y_prev_B):
    return self.model.decoder_step(
      enc.inner, state, self.ids[y_prev_B], output_ids=self.ids, output_mask=enc.allowed
    )


def normalised_over(dec: DecodeSettings) -> str:
  """What the scores of decoding and of forced decoding under `dec` are log-probabilities
  over: "vocabulary", or "shortlist" (`decode.shortlist`: its batch's or the sentence's own)."""
  if not dec.shortlist:
    return "vocabulary"
  return f"shortlist ({dec.shortlist_scope})"


def shortlist_of(
  batch: Mapping[str, Any], dec: DecodeSettings
) -> tuple[jax.Array | None, jax.Array | None]:
  """(ids [N], per-sentence mask [B, N] or None) of the batch's shortlist under `dec`
  (`decode.shortlist_scope`); (None, None) without a shortlist."""
  if not dec.shortlist:
    return None, None
  table = lexicon.load_cached(dec.shortlist)
  src = np.asarray(batch["src"])
  ids = lexicon.shortlist(table, src, dec.shortlist_frequent, dec.shortlist_per_word)
  mask = None
  if dec.shortlist_scope == "sentence":
    mask = lexicon.sentence_candidates(
      table, src, ids, dec.shortlist_frequent, dec.shortlist_per_word
    )
    mask = jnp.asarray(mask)
  return jnp.asarray(ids), mask


def max_output_len(src_len: int, max_len_ratio: float) -> int:
  """The longest output considered for a source of `src_len` positions: int(ratio * S) + 10."""
  return int(max_len_ratio * src_len) + 10


def decode_batch(
  state: Any,
  batch: Mapping[str, Any],
  dec: DecodeSettings,
  *,
  ban_unk: bool = False,
  nbest: int | None = None,
  prefix_BP: Any = None,
  constraints: constraints_.Constraints | None = None,
  trace: bool = False,
) -> DecodeResult | tuple[DecodeResult, BeamTrace]:
  """Decodes `batch["src"]` / `batch["src_mask"]` [B, S] with the decoding settings `dec`
  (never producing UNK with `ban_unk`: the paper's No-UNK protocol); with `nbest`, the n-best
  lists [B, N, ...] (`jit_decode`); each output starting with its row of `prefix_BP` [B, P]
  and containing its row's `constraints` where they are given; with `trace`, beam search's
  `BeamTrace` beside the result (`jit_decode`).

  `state` is a `train_state.TrainState` (its `graphdef` and `params` are used). Greedy when
  `dec.beam_size == 1`, beam search otherwise; max_len = int(max_len_ratio * S) + 10
  with S the padded source length (of one source, where a multi-source batch packs two). With
  `decode.shortlist` (a lexical table, `seq2seq.data.lexicon`) the output layer runs over the
  batch's shortlist only, each sentence over its own with `decode.shortlist_scope="sentence"`
  (`shortlist_of`), and the scores are normalised over it (`normalised_over`). `jit_decode`
  keeps one compiled function per static setting, so bucketed source lengths reuse their
  compilations.
  """
  src = jnp.asarray(batch["src"], jnp.int32)
  mask = jnp.asarray(batch["src_mask"], jnp.int32)
  output_ids, output_mask = shortlist_of(batch, dec)
  return jit_decode(
    state.graphdef,
    state.params,
    src,
    mask,
    beam_size=int(dec.beam_size),
    # Multi-source batches pack the sources side by side: the limit follows one source's length.
    max_len=max_output_len(src.shape[1] // dec.sources, dec.max_len_ratio),
    length_penalty=length_penalties.make(dec.length_penalty),
    coverage_beta=float(dec.coverage_penalty),
    ban_unk=ban_unk,
    nbest=nbest,
    output_ids=output_ids,
    output_mask=output_mask,
    sampling=sampling_.parse(dec.sampling),
    prefix_BP=None if prefix_BP is None else jnp.asarray(prefix_BP, jnp.int32),
    constraints=None if constraints is None else jax.tree.map(jnp.asarray, constraints),
    trace=trace,
  )


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
  length_penalty: LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
  output_ids: jax.Array | None = None,
  output_mask: jax.Array | None = None,
) -> ForcedResult:
  """The log-probabilities of given outputs tgt_out [B, T] (EOS included, PAD after it; tgt_in
  is BOS followed by tgt_out shifted; tgt_mask marks tgt_out's tokens), as search computes them.

  One teacher-forced pass of `model` (its `__call__`, as in training, with `decoding=True`: the
  structures' test-time choices, e.g. hard monotonic attention), log p_t = log-softmax over the
  full vocabulary (`_step_log_probs`), or over the shortlist `output_ids` [N] (each sentence's
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
  logp_BTV = _step_log_probs(logits_BTV)
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
  norm_B = ranking_score(
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
  length_penalty: LengthPenaltyLike = "power",
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


def score_batch(state: Any, batch: Mapping[str, Any], dec: DecodeSettings) -> ForcedResult:
  """Scores the batch's target side given its source (`force_decode`) with the run's ranking
  settings (`dec.length_penalty`, `coverage_penalty`) and over its shortlist where
  it decodes with one (`shortlist_of`), so the scores are what its search would report; `state`
  is a `train_state.TrainState`. One compiled function per padded shape, so bucketed batches reuse
  them."""
  arrays = {k: jnp.asarray(batch[k], jnp.int32) for k in FORCED_KEYS}
  output_ids, output_mask = shortlist_of(batch, dec)
  return jit_force_decode(
    state.graphdef,
    state.params,
    arrays,
    length_penalty=length_penalties.make(dec.length_penalty),
    coverage_beta=float(dec.coverage_penalty),
    output_ids=output_ids,
    output_mask=output_mask,
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

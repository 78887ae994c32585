"""Greedy and beam search against references written here: a Python argmax loop, exhaustive search
over every output of a fixed-table model, and teacher-forced attention; n-best lists against the
exhaustive ranking, and forced decoding against what the searches reported."""

import itertools

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import (
  PENALTIES,
  VOCAB,
  TableModel,
  build_model,
  compiled,
  penalised,
  random_batch,
  random_lexicon,
  randomise,
  score_of,
  tiny_model,
)

from configs import tiny
from seq2seq import settings
from seq2seq.data import lexicon
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from seq2seq.decoding import beams, core, decode, forcing, left_to_right, unknowns
from seq2seq.training import train_state


def src_of(batch):
  return jnp.asarray(batch["src"]), jnp.asarray(batch["src_mask"])


@pytest.fixture(scope="module")
def model():
  return tiny_model()


@pytest.fixture(scope="module")
def batch():
  return random_batch(seed=3, batch=6, src_len=7, vocab=VOCAB)


def as_spec(penalty) -> str:
  return penalty if isinstance(penalty, str) else f"power(alpha={penalty})"


def exhaustive_ranking(table_VV, max_len, penalty):
  """Every ended output as (tokens, ranking score), best first, by enumeration in float64;
  `penalty`: a PENALTIES name or the alpha of score / length**alpha."""
  rank = penalised(penalty)
  logp = np.asarray(table_VV, np.float64)
  logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
  words = [w for w in range(logp.shape[0]) if w not in (PAD_ID, BOS_ID, EOS_ID)]
  ranked = []
  for length in range(1, max_len + 1):
    for prefix in itertools.product(words, repeat=length - 1):
      seq = (*prefix, EOS_ID)
      score = sum(logp[p, w] for p, w in zip((BOS_ID, *seq[:-1]), seq, strict=True))
      ranked.append((seq, score, rank(score, length)))
  return [(seq, norm) for seq, _, norm in sorted(ranked, key=lambda r: -r[2])]


def exhaustive_best(table_VV, max_len, penalty):
  """(tokens, ranking score) of the best ended output, by enumeration in float64."""
  return exhaustive_ranking(table_VV, max_len, penalty)[0]


@pytest.mark.parametrize("penalty", list(PENALTIES))
def test_beam_matches_exhaustive_search(penalty):
  """A beam wider than every prefix finds the exhaustive best under every length penalty: only
  stopping too early (a wrong bound) could make it miss."""
  vocab, max_len, rows = 6, 4, 5
  table = 2.0 * np.random.default_rng(7).normal(size=(rows, vocab, vocab))
  src = jnp.full((rows, 3), 5, jnp.int32)
  stand_in = TableModel(table)
  res = jax.jit(
    lambda s, m: beams.beam_search(
      stand_in, s, m, beam_size=128, max_len=max_len, length_penalty=penalty
    )
  )(src, jnp.ones_like(src))
  found_greedy_miss = False
  for b in range(rows):
    seq, norm = exhaustive_best(table[b], max_len, penalty)
    length = int(res.lengths[b])
    assert tuple(np.asarray(res.tokens[b, :length])) == seq
    assert np.all(np.asarray(res.tokens[b, length:]) == PAD_ID)
    np.testing.assert_allclose(res.norm_scores[b], norm, rtol=1e-5)
    np.testing.assert_allclose(res.scores[b], score_of(table[b], seq), rtol=1e-5)
    # Attention history follows the reordered beams: one-hot at the previous token.
    prev = np.concatenate([[BOS_ID], np.asarray(res.tokens[b, : length - 1])])
    np.testing.assert_array_equal(res.alpha[b, :length], np.eye(3)[prev % 3])
    np.testing.assert_array_equal(res.alpha[b, length:], 0.0)
    found_greedy_miss |= seq != tuple(
      np.asarray(
        left_to_right.greedy(stand_in, src, jnp.ones_like(src), max_len=max_len).tokens[b]
      )[:length]
    )
  assert found_greedy_miss, "the tables should include a case greedy gets wrong"


def test_a_word_penalty_stops_only_when_no_shorter_ending_can_win():
  """Under word(penalty=3) the one-word output [w, EOS] (about -0.02 - 6) beats [EOS] alone
  (about -5 - 3), which finishes first. A bound that assumed the longest ending (the right one
  for length normalisation) would put the live [w] at -0.01 - 12, below -8, and stop with [EOS]."""
  vocab, w = 6, 3
  table = np.full((1, vocab, vocab), -5.0)
  table[0, BOS_ID, EOS_ID], table[0, BOS_ID, w] = 0.0, 5.0
  table[0, w, EOS_ID] = 5.0
  src = jnp.full((1, 3), 5, jnp.int32)
  res = beams.beam_search(
    TableModel(table),
    src,
    jnp.ones_like(src),
    beam_size=4,
    max_len=4,
    length_penalty="word(penalty=3)",
  )
  assert tuple(np.asarray(res.tokens[0, : int(res.lengths[0])])) == (w, EOS_ID)
  want, _ = exhaustive_best(table[0], 4, "word(penalty=3)")
  assert want == (w, EOS_ID)


def test_beam_size_one_follows_the_greedy_path(model, batch):
  """A beam of one extends its live hypothesis by the best word other than EOS, as greedy does,
  but keeps every EOS extension in its finished pool. So where nothing can end it equals greedy
  token for token, and otherwise (raw scores) it returns a finished output scoring at least as
  high as greedy's wherever greedy's ended (greedy stops at its first EOS; the pool may hold an
  earlier, better one)."""
  src, mask = src_of(batch)
  never_ends = tiny_model(eos_bias=-np.inf)
  beam1 = lambda m, alpha: jax.jit(
    lambda s, k: beams.beam_search(m, s, k, beam_size=1, max_len=14, length_penalty=as_spec(alpha))
  )(src, mask)
  g = left_to_right.greedy(never_ends, src, mask, max_len=14)
  b = beam1(never_ends, 1.0)
  np.testing.assert_array_equal(g.lengths, 14)
  np.testing.assert_array_equal(g.tokens, b.tokens)
  np.testing.assert_allclose(g.scores, b.scores, rtol=1e-6)
  np.testing.assert_allclose(g.alpha, b.alpha, atol=1e-6)

  g = jax.jit(lambda s, m: left_to_right.greedy(model, s, m, max_len=14))(src, mask)
  b = beam1(model, 0.0)
  ended = np.asarray(g.lengths) < 14
  assert 0 < ended.sum() < len(ended), "want a mix of ended and unended"
  ends_with_eos = np.asarray(b.tokens)[np.arange(len(ended)), np.asarray(b.lengths) - 1] == EOS_ID
  assert np.all(ends_with_eos[ended])
  assert np.all(np.asarray(b.scores)[ended] >= np.asarray(g.scores)[ended] - 1e-5)


def test_greedy_matches_python_loop(model, batch):
  src, mask = src_of(batch)
  max_len = 10
  res = left_to_right.greedy(model, src, mask, max_len=max_len)
  enc = model.encode(src, mask)
  state, y = enc.init_state, jnp.full((src.shape[0],), BOS_ID, jnp.int32)
  ended = np.zeros(src.shape[0], bool)
  tokens = np.full((src.shape[0], max_len), PAD_ID)
  scores, lengths = np.zeros(src.shape[0]), np.zeros(src.shape[0], int)
  for t in range(max_len):
    state, logits, _ = model.decoder_step(enc, state, y)
    logp = np.asarray(jax.nn.log_softmax(logits), np.float64)
    logp[:, [PAD_ID, BOS_ID]] = -np.inf
    tok = logp.argmax(-1)
    tokens[:, t] = np.where(ended, PAD_ID, tok)
    scores += np.where(ended, 0.0, logp[np.arange(len(tok)), tok])
    lengths += ~ended
    ended |= tok == EOS_ID
    y = jnp.asarray(tok, jnp.int32)
  np.testing.assert_array_equal(res.tokens, tokens)
  np.testing.assert_array_equal(res.lengths, lengths)
  np.testing.assert_allclose(res.scores, scores, rtol=1e-5)


def test_beam_attention_matches_teacher_forcing(model, batch):
  src, mask = src_of(batch)
  graphdef, params = nnx.split(model)
  res = decode.jit_decode(graphdef, params, src, mask, beam_size=4, max_len=12)
  tgt_in = jnp.concatenate([jnp.full((src.shape[0], 1), BOS_ID), res.tokens[:, :-1]], axis=1)
  logits, alpha = model(src, mask, tgt_in, return_alpha=True)
  logp = jax.nn.log_softmax(logits)
  for b in range(src.shape[0]):
    n = int(res.lengths[b])
    np.testing.assert_allclose(res.alpha[b, :n], alpha[b, :n], atol=1e-5)
    np.testing.assert_array_equal(res.alpha[b, n:], 0.0)
    tf_score = jnp.sum(logp[b, jnp.arange(n), res.tokens[b, :n]])
    np.testing.assert_allclose(res.scores[b], tf_score, rtol=1e-4)
    np.testing.assert_allclose(res.norm_scores[b], res.scores[b] / n, rtol=1e-6)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_early_exit_when_everything_ends(beam_size):
  calls = []
  table = np.zeros((2, 5, 5))
  table[..., EOS_ID] = 10.0
  stand_in = TableModel(table, on_step=lambda: calls.append(1))
  src = jnp.ones((2, 3), jnp.int32)
  if beam_size == 1:
    res = left_to_right.greedy(stand_in, src, src, max_len=8)
  else:
    res = beams.beam_search(stand_in, src, src, beam_size=beam_size, max_len=8)
  jax.effects_barrier()
  np.testing.assert_array_equal(res.lengths, [1, 1])
  np.testing.assert_array_equal(res.tokens[:, 0], [EOS_ID, EOS_ID])
  np.testing.assert_array_equal(res.tokens[:, 1:], PAD_ID)
  assert len(calls) == 1


def test_rnnencdec_decodes_with_zero_attention(batch):
  encdec = tiny_model("rnnencdec")
  src, mask = src_of(batch)
  graphdef, params = nnx.split(encdec)
  for beam_size in (1, 3):
    res = decode.jit_decode(graphdef, params, src, mask, beam_size=beam_size, max_len=9)
    assert res.tokens.shape == (src.shape[0], 9) and res.alpha.shape == (src.shape[0], 9, 7)
    np.testing.assert_array_equal(res.alpha, 0.0)
    assert np.all(np.isfinite(res.scores))


def test_decode_batch_from_train_state(batch):
  config = tiny.get_config()
  state = train_state.create_train_state(settings.validate(config), jax.random.key(0), VOCAB, VOCAB)
  for beam_size in (1, 2):
    config.decode.beam_size = beam_size
    res = decode.decode_batch(state, batch, decode.DecodeSettings.from_config(config))
    max_len = core.max_output_len(7, config.decode.max_len_ratio)
    assert res.tokens.shape == (batch["src"].shape[0], max_len)
    assert res.tokens.dtype == jnp.int32
    assert np.all((np.asarray(res.lengths) >= 1) & (np.asarray(res.lengths) <= max_len))


def test_replace_unknowns():
  alpha = np.array([[0.7, 0.2, 0.1, 0.0], [0.1, 0.1, 0.8, 0.0], [0.0, 0.1, 0.3, 0.6]])
  tokens = np.array([UNK_ID, 9, UNK_ID])
  # The fourth source position is padding: argmax is taken over the three real words.
  assert unknowns.replace_unknowns(tokens, alpha, ["le", "chat", "noir"]) == ["le", 9, "noir"]
  lexicon = {"le": "the", "noir": "black"}
  words = ["<unk>", "cat", "<unk>"]
  got = unknowns.replace_unknowns(words, alpha, ["le", "chat", "noir"], "<unk>", lexicon)
  assert got == ["the", "cat", "black"]
  batched = unknowns.replace_unknowns(
    [tokens, tokens], np.stack([alpha, alpha[::-1]]), [["a", "b", "c"], ["x", "y", "z"]]
  )
  assert batched == [["a", 9, "c"], ["z", 9, "x"]]


def test_beam_keeps_a_finished_translation_that_live_extensions_outrank():
  """The scripted case: "a </s>" ends at step 2 (probability .4 x .5); the "b" branch has K=2
  extensions ("b" or "<unk>", .5 each) that look better per word at every step (log .6 + n log .5
  over n + 1 words, at best -0.60 against -0.80) but almost never end. The search must return
  the finished output, not an unfinished max-length one."""
  vocab, a, b = 6, 4, 5
  probs = np.full((vocab, vocab), 1e-6)
  probs[BOS_ID, a], probs[BOS_ID, b] = 0.4, 0.6
  probs[a, EOS_ID], probs[a, UNK_ID] = 0.5, 0.5
  for prev in (b, UNK_ID):  # "b" and "<unk>" continue with "b" or "<unk>", never with EOS.
    probs[prev, b] = probs[prev, UNK_ID] = 0.5
  logp = np.log(probs / probs.sum(-1, keepdims=True))
  stand_in = TableModel(np.stack([logp]))
  src = jnp.full((1, 3), 5, jnp.int32)
  res = beams.beam_search(
    stand_in, src, jnp.ones_like(src), beam_size=2, max_len=8, length_penalty="power"
  )
  assert int(res.lengths[0]) == 2
  assert tuple(np.asarray(res.tokens[0])) == (a, EOS_ID, *[PAD_ID] * 6)
  np.testing.assert_allclose(res.scores[0], np.log(0.4 * 0.5), rtol=1e-5)


def _exhaustive_model_best(model, src, mask, vocab, max_len, penalty):
  """(tokens, ranking score) of the best ended output of an NNX model, every sentence of at
  most `max_len` tokens scored teacher-forced in float64 (one source sentence)."""
  words = [w for w in range(vocab) if w not in (PAD_ID, BOS_ID, EOS_ID)]
  seqs = [
    (*prefix, EOS_ID) for n in range(max_len) for prefix in itertools.product(words, repeat=n)
  ]
  tgt_out = np.full((len(seqs), max_len), PAD_ID, np.int32)
  for i, seq in enumerate(seqs):
    tgt_out[i, : len(seq)] = seq
  tgt_in = np.concatenate([np.full((len(seqs), 1), BOS_ID), tgt_out[:, :-1]], axis=1)
  tile = lambda x: jnp.repeat(x, len(seqs), axis=0)
  logits = model(tile(src), tile(mask), jnp.asarray(tgt_in, jnp.int32))
  logp = np.asarray(jax.nn.log_softmax(logits.astype(jnp.float32)), np.float64)
  norms, rank = [], penalised(penalty)
  for i, seq in enumerate(seqs):
    norms.append(rank(sum(logp[i, t, w] for t, w in enumerate(seq)), len(seq)))
  best = int(np.argmax(norms))
  return seqs[best], norms[best]


@hypothesis.settings(deadline=None, max_examples=12, derandomize=True)
@hypothesis.example(seed=23, penalty="power", name="rnnsearch")  # Old beam lost its finished best.
@hypothesis.given(
  seed=hypothesis.strategies.integers(0, 10_000),
  penalty=hypothesis.strategies.sampled_from(list(PENALTIES)),
  name=hypothesis.strategies.sampled_from(["rnnsearch", "rnnencdec"]),
)
def test_beam_with_every_prefix_equals_exhaustive_search_on_tiny_models(seed, penalty, name):
  """Vocabulary 5 (three producible tokens), max length 5: at most 2**4 live prefixes, so a beam
  of 16 holds every prefix and must find the best ended output under the same length penalty."""
  vocab, max_len = 5, 5
  cfg = tiny.get_config()
  cfg.model.name = name
  model = randomise(build_model(cfg.model, vocab, vocab, rngs=nnx.Rngs(seed)), seed, 3.0)
  src = jnp.asarray([[4, 3, 4, 2]], jnp.int32)
  mask = jnp.ones_like(src)
  want, norm = _exhaustive_model_best(model, src, mask, vocab, max_len, penalty)
  res = _beam_all_prefixes(model, src, mask, penalty)
  got = tuple(int(t) for t in res.tokens[0, : int(res.lengths[0])])
  assert got == want
  np.testing.assert_allclose(res.norm_scores[0], norm, rtol=1e-4, atol=1e-5)


_BEAM_FNS = {}


def _beam_all_prefixes(model, src, mask, penalty):
  """Beam 16, max length 5, jitted once per (graph, length penalty)."""
  graphdef, params = nnx.split(model)
  key = (graphdef, penalty)
  if key not in _BEAM_FNS:
    _BEAM_FNS[key] = jax.jit(
      lambda p, s, m: beams.beam_search(
        nnx.merge(graphdef, p), s, m, beam_size=16, max_len=5, length_penalty=penalty
      )
    )
  return _BEAM_FNS[key](params, src, mask)


@pytest.mark.parametrize("alpha", [0.0, 1.0, "gnmt(alpha=0.6)", "word(penalty=-2)"])
def test_nbest_equals_the_exhaustive_top_n(alpha):
  """A beam wider than every prefix (3 words, at most 27 live prefixes) must return the 5 best
  ended outputs in the exhaustive ranking's order, scores non-increasing, the first being
  `beam_search`'s output, each with its own attention history. (With these tables, stopping when
  nothing can beat the best finished output, rather than the 5th, misses two at alpha 0.)"""
  vocab, max_len, rows, nbest = 6, 4, 4, 5
  table = 2.0 * np.random.default_rng(0).normal(size=(rows, vocab, vocab))
  src = jnp.full((rows, 3), 5, jnp.int32)
  stand_in = TableModel(table)
  settings = {"beam_size": 32, "max_len": max_len, "length_penalty": as_spec(alpha)}
  search = jax.jit(lambda s, m: beams.beam_search_nbest(stand_in, s, m, nbest=nbest, **settings))
  res = jax.device_get(search(src, jnp.ones_like(src)))
  best = beams.beam_search(stand_in, src, jnp.ones_like(src), **settings)
  assert res.tokens.shape == (rows, nbest, max_len) and res.alpha.shape == (rows, nbest, max_len, 3)
  np.testing.assert_array_equal(res.tokens[:, 0], best.tokens)
  np.testing.assert_array_equal(res.scores[:, 0], best.scores)
  assert np.all(np.diff(res.norm_scores, axis=1) <= 0)
  for b in range(rows):
    for rank, (seq, norm) in enumerate(exhaustive_ranking(table[b], max_len, alpha)[:nbest]):
      length = int(res.lengths[b, rank])
      assert tuple(res.tokens[b, rank, :length]) == seq
      np.testing.assert_array_equal(res.tokens[b, rank, length:], PAD_ID)
      np.testing.assert_allclose(res.norm_scores[b, rank], norm, rtol=1e-5)
      np.testing.assert_allclose(res.scores[b, rank], score_of(table[b], seq), rtol=1e-5)
      prev = np.concatenate([[BOS_ID], res.tokens[b, rank, : length - 1]])
      np.testing.assert_array_equal(res.alpha[b, rank, :length], np.eye(3)[prev % 3])


def test_nbest_where_nothing_finishes_is_the_best_live_output_alone():
  """EOS impossible: as `beam_search` does, the list holds the best live output (length max_len,
  no EOS) and the other slots are empty (score -inf, PAD, no attention)."""
  table = 2.0 * np.random.default_rng(5).normal(size=(2, 6, 6))
  table[..., EOS_ID] = -np.inf
  src = jnp.full((2, 3), 5, jnp.int32)
  stand_in = TableModel(table)
  settings = {"beam_size": 3, "max_len": 5}
  res = beams.beam_search_nbest(stand_in, src, jnp.ones_like(src), nbest=3, **settings)
  best = beams.beam_search(stand_in, src, jnp.ones_like(src), **settings)
  np.testing.assert_array_equal(res.lengths[:, 0], 5)
  np.testing.assert_array_equal(res.tokens[:, 0], best.tokens)
  assert np.all(np.isfinite(res.scores[:, 0])) and np.all(res.scores[:, 1:] == -np.inf)
  np.testing.assert_array_equal(res.tokens[:, 1:], PAD_ID)
  np.testing.assert_array_equal(res.alpha[:, 1:], 0.0)


def test_nbest_larger_than_the_beam_is_refused(model, batch):
  src, mask = src_of(batch)
  graphdef, params = nnx.split(model)
  for beam_size, nbest in ((2, 3), (1, 2)):
    with pytest.raises(ValueError, match=f"nbest={nbest} exceeds the beam size {beam_size}"):
      decode.jit_decode(graphdef, params, src, mask, beam_size=beam_size, max_len=5, nbest=nbest)
  with pytest.raises(ValueError, match="nbest must be at least 1"):
    core.check_nbest(0, 4)


def forced_inputs(tokens_NL, lengths_N):
  """tgt_in, tgt_out, tgt_mask [N, L] of outputs `tokens` (EOS included) of given lengths."""
  mask = np.arange(tokens_NL.shape[1])[None] < np.asarray(lengths_N)[:, None]
  tgt_out = np.where(mask, tokens_NL, PAD_ID).astype(np.int32)
  tgt_in = np.concatenate([np.full((len(tgt_out), 1), BOS_ID), tgt_out[:, :-1]], axis=1)
  return jnp.asarray(tgt_in, jnp.int32), jnp.asarray(tgt_out), jnp.asarray(mask, jnp.int32)


@pytest.fixture(scope="module")
def lexicon_table(tmp_path_factory):
  path = tmp_path_factory.mktemp("lexicon") / lexicon.FILE
  random_lexicon(VOCAB).save(path)
  return str(path)


@pytest.mark.parametrize(
  "name, attention, attend_to",
  [
    ("rnnsearch", "soft", ""),
    ("rnnsearch", "monotonic", ""),
    ("rnnencdec", "soft", ""),
    ("rnnsearch", "soft", "intra+lexicon"),
    ("rnnsearch", "soft", "two_sources"),
  ],
)
def test_forced_decoding_scores_what_greedy_and_beam_search_reported(
  batch, lexicon_table, name, attention, attend_to
):
  """Every output of greedy search and every member of a beam's n-best list, scored by the
  teacher-forced pass, gets the score, ranking score (length normalisation 0.6, coverage penalty
  0.2) and attention its search reported, ended or not. Monotonic attention decodes with hard
  choices, which forced decoding must take too. With intra-attention the search carries each
  beam's own past states (reordered with the beams, in a memory sized to the length limit) where
  the forced pass holds the output's; with a lexicon bias each step's logits read that step's
  attention; with two sources (gated) the attention is both maps side by side."""
  src, mask = src_of(batch)
  fields, sources = {}, 1
  if attend_to == "intra+lexicon":
    fields = {"addons": f"intra(score=general)+lexicon(table={lexicon_table})"}
  elif attend_to == "two_sources":  # Packed as a batch packs them: source 2 from column S.
    fields, sources = {"multi_source": "gate"}, 2
    src2, mask2 = src_of(
      random_batch(seed=4, batch=src.shape[0], src_len=src.shape[1], vocab=VOCAB)
    )
    assert src2.shape == src.shape
    src, mask = jnp.concatenate([src, src2], axis=1), jnp.concatenate([mask, mask2], axis=1)
  model = tiny_model(name, attention=attention, sources=sources, **fields)
  graphdef, params = nnx.split(model)
  ranking = {"length_penalty": "gnmt(alpha=0.6)", "coverage_beta": 0.2}
  for beam_size, nbest in ((1, 1), (4, 3)):
    res = jax.device_get(
      decode.jit_decode(
        graphdef, params, src, mask, beam_size=beam_size, max_len=12, nbest=nbest, **ranking
      )
    )
    rows, ranks = np.nonzero(np.isfinite(res.scores))  # Empty slots of the list score -inf.
    assert len(rows) >= nbest * src.shape[0] - 2, "want (almost) full lists"
    targets = forced_inputs(res.tokens[rows, ranks], res.lengths[rows, ranks])
    forced = forcing.force_decode(model, src[rows], mask[rows], *targets, **ranking)
    np.testing.assert_allclose(forced.scores, res.scores[rows, ranks], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(
      forced.norm_scores, res.norm_scores[rows, ranks], rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(forced.alpha, res.alpha[rows, ranks], atol=1e-5)
    np.testing.assert_allclose(forced.token_scores.sum(1), forced.scores, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_forced_decoding_of_a_batch_equals_one_pair_at_a_time(model, batch):
  """Padding rows and columns change nothing: each pair alone, cut to its own lengths, scores
  what it scores in the padded batch."""
  src, mask = src_of(batch)
  tgt_in, tgt_out, tgt_mask = (jnp.asarray(batch[k]) for k in ("tgt_in", "tgt_out", "tgt_mask"))
  forced = lambda *arrays: compiled(forcing.force_decode, model, *arrays, coverage_beta=0.3)
  whole = forced(src, mask, tgt_in, tgt_out, tgt_mask)
  for b in range(src.shape[0]):
    s, t = int(mask[b].sum()), int(tgt_mask[b].sum())
    one = forced(
      src[b : b + 1, :s],
      mask[b : b + 1, :s],
      tgt_in[b : b + 1, :t],
      tgt_out[b : b + 1, :t],
      tgt_mask[b : b + 1, :t],
    )
    np.testing.assert_allclose(one.token_scores[0], whole.token_scores[b, :t], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(whole.token_scores[b, t:], 0.0)
    np.testing.assert_allclose(one.norm_scores[0], whole.norm_scores[b], rtol=1e-5)
    np.testing.assert_allclose(one.alpha[0], whole.alpha[b, :t, :s], atol=1e-6)

"""Greedy and beam search against references written here: a Python argmax loop, exhaustive search
over every output of a fixed-table model, and teacher-forced attention."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import random_batch, randomise
from flax import nnx

from configs import tiny
from seq2seq import decode, models, train
from seq2seq.models import Encoded
from seq2seq.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

VOCAB = 30


def tiny_model(name="rnnsearch", eos_bias=1.0):
  """A randomised tiny model whose EOS logit is raised so that some outputs end early."""
  cfg = tiny.get_config()
  cfg.model.name = name
  model = randomise(models.build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0)))
  model.w_o.bias.value = model.w_o.bias.value.at[EOS_ID].add(eos_bias)
  return model


def src_of(batch):
  return jnp.asarray(batch["src"]), jnp.asarray(batch["src_mask"])


@pytest.fixture(scope="module")
def model():
  return tiny_model()


@pytest.fixture(scope="module")
def batch():
  return random_batch(seed=3, batch=6, src_len=7, vocab=VOCAB)


class TableModel:
  """Next-word logits depend only on the previous word: logits = table[b, y_prev] ([B, V, V]).

  The sentence index b rides in the decoder state, so beams of one sentence share its table. The
  attention at each step is one-hot at position y_prev % S, which makes histories checkable.
  """

  def __init__(self, table_BVV, on_step=None):
    self.table = jnp.asarray(table_BVV, jnp.float32)
    self.on_step = on_step

  def encode(self, src_BS, src_mask_BS):
    batch, src_len = src_BS.shape
    annotations = jnp.zeros((batch, src_len, 2), jnp.float32)
    row = jnp.arange(batch, dtype=jnp.float32)[:, None]
    ones = jnp.ones(src_mask_BS.shape)
    return Encoded(annotations, annotations[..., :0], src_mask_BS, row, jnp.zeros((batch, 2)), ones)

  def decoder_step(self, enc, state_BD, y_prev_B):
    if self.on_step is not None:
      jax.debug.callback(self.on_step)
    logits = self.table[state_BD[:, 0].astype(jnp.int32), y_prev_B]
    alpha = jax.nn.one_hot(y_prev_B % enc.mask.shape[1], enc.mask.shape[1])
    return state_BD, logits, alpha


def exhaustive_best(table_VV, max_len, alpha):
  """(tokens, normalised score) of the best ended output, by enumeration in float64."""
  logp = np.asarray(table_VV, np.float64)
  logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
  words = [w for w in range(logp.shape[0]) if w not in (PAD_ID, BOS_ID, EOS_ID)]
  best = (None, -np.inf)
  for length in range(1, max_len + 1):
    for prefix in itertools.product(words, repeat=length - 1):
      seq = (*prefix, EOS_ID)
      score = sum(logp[p, w] for p, w in zip((BOS_ID, *seq[:-1]), seq, strict=True))
      norm = score / length**alpha
      if norm > best[1]:
        best = (seq, norm)
  return best


@pytest.mark.parametrize("alpha", [0.0, 1.0, 0.6])
def test_beam_matches_exhaustive_search(alpha):
  vocab, max_len, rows = 6, 4, 5
  table = 2.0 * np.random.default_rng(7).normal(size=(rows, vocab, vocab))
  src = jnp.full((rows, 3), 5, jnp.int32)
  stand_in = TableModel(table)
  res = jax.jit(
    lambda s, m: decode.beam_search(
      stand_in, s, m, beam_size=128, max_len=max_len, length_norm_alpha=alpha
    )
  )(src, jnp.ones_like(src))
  found_greedy_miss = False
  for b in range(rows):
    seq, norm = exhaustive_best(table[b], max_len, alpha)
    length = int(res.lengths[b])
    assert tuple(np.asarray(res.tokens[b, :length])) == seq
    assert np.all(np.asarray(res.tokens[b, length:]) == PAD_ID)
    np.testing.assert_allclose(res.norm_scores[b], norm, rtol=1e-5)
    np.testing.assert_allclose(res.scores[b], norm * length**alpha, rtol=1e-5)
    # Attention history follows the reordered beams: one-hot at the previous token.
    prev = np.concatenate([[BOS_ID], np.asarray(res.tokens[b, : length - 1])])
    np.testing.assert_array_equal(res.alpha[b, :length], np.eye(3)[prev % 3])
    np.testing.assert_array_equal(res.alpha[b, length:], 0.0)
    found_greedy_miss |= seq != tuple(
      np.asarray(decode.greedy(stand_in, src, jnp.ones_like(src), max_len=max_len).tokens[b])[
        :length
      ]
    )
  assert found_greedy_miss, "the tables should include a case greedy gets wrong"


def test_beam_size_one_is_greedy(model, batch):
  src, mask = src_of(batch)
  g = jax.jit(lambda s, m: decode.greedy(model, s, m, max_len=14))(src, mask)
  b = jax.jit(lambda s, m: decode.beam_search(model, s, m, beam_size=1, max_len=14))(src, mask)
  assert 0 < int(jnp.sum(g.lengths < 14)) < len(g.lengths), "want a mix of ended and unended"
  np.testing.assert_array_equal(g.tokens, b.tokens)
  np.testing.assert_array_equal(g.lengths, b.lengths)
  np.testing.assert_array_equal(g.scores, b.scores)
  np.testing.assert_array_equal(g.alpha, b.alpha)


def test_greedy_matches_python_loop(model, batch):
  src, mask = src_of(batch)
  max_len = 10
  res = decode.greedy(model, src, mask, max_len=max_len)
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
    res = decode.greedy(stand_in, src, src, max_len=8)
  else:
    res = decode.beam_search(stand_in, src, src, beam_size=beam_size, max_len=8)
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
  state = train.create_train_state(config, jax.random.key(0), VOCAB, VOCAB)
  for beam_size in (1, 2):
    config.decode.beam_size = beam_size
    res = decode.decode_batch(state, batch, config)
    max_len = decode.max_output_len(7, config.decode.max_len_ratio)
    assert res.tokens.shape == (batch["src"].shape[0], max_len)
    assert res.tokens.dtype == jnp.int32
    assert np.all((np.asarray(res.lengths) >= 1) & (np.asarray(res.lengths) <= max_len))


def test_replace_unknowns():
  alpha = np.array([[0.7, 0.2, 0.1, 0.0], [0.1, 0.1, 0.8, 0.0], [0.0, 0.1, 0.3, 0.6]])
  tokens = np.array([UNK_ID, 9, UNK_ID])
  # The fourth source position is padding: argmax is taken over the three real words.
  assert decode.replace_unknowns(tokens, alpha, ["le", "chat", "noir"]) == ["le", 9, "noir"]
  lexicon = {"le": "the", "noir": "black"}
  words = ["<unk>", "cat", "<unk>"]
  got = decode.replace_unknowns(words, alpha, ["le", "chat", "noir"], "<unk>", lexicon)
  assert got == ["the", "cat", "black"]
  batched = decode.replace_unknowns(
    [tokens, tokens], np.stack([alpha, alpha[::-1]]), [["a", "b", "c"], ["x", "y", "z"]]
  )
  assert batched == [["a", 9, "c"], ["z", 9, "x"]]

"""Sampling (`seq2seq.decoding.sampling`, `left_to_right.sample`): each truncation against masks
worked out by hand, draws against the distribution they leave, top_k=1 against greedy search, a
sample's score against forced decoding, and the same samples for a sentence in any batch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, random_batch, randomise

from configs import tiny
from seq2seq import settings
from seq2seq.data.tokenizer import EOS_ID, PAD_ID
from seq2seq.decoding import decode, forcing, sampling

VOCAB = 30
# Four words of probability 0.5, 0.3, 0.15, 0.05 and a fifth that is banned.
PROBS = np.array([0.5, 0.3, 0.15, 0.05])
LOGITS = jnp.asarray(np.log(np.append(PROBS, 0.2)))[None]
BANNED = jnp.array([False, False, False, False, True])


def kept(**settings_):
  """The words (ids) each truncation leaves of LOGITS."""
  out = sampling.truncated_logits(LOGITS, BANNED, sampling.Sampling(**settings_))
  return [int(i) for i in np.flatnonzero(np.isfinite(np.asarray(out[0])))]


@pytest.mark.parametrize(
  "settings_, words",
  [
    ({}, [0, 1, 2, 3]),
    ({"top_k": 2}, [0, 1]),
    ({"top_k": 1}, [0]),
    ({"top_k": 9}, [0, 1, 2, 3]),
    # Before each word: 0, 0.5, 0.8, 0.95 of probability; a word stays while that is below p.
    ({"top_p": 0.5}, [0]),
    ({"top_p": 0.7}, [0, 1]),
    ({"top_p": 0.81}, [0, 1, 2]),
    ({"top_p": 0.01}, [0]),
    ({"epsilon": 0.1}, [0, 1, 2]),
    ({"epsilon": 0.9}, [0]),  # The most probable word always stays.
    ({"top_k": 3, "top_p": 0.8}, [0, 1]),  # top_p reads what top_k left: 0.5/0.95, 0.3/0.95 ...
  ],
)
def test_truncations_keep_the_words_worked_out_by_hand(settings_, words):
  assert kept(**settings_) == words


@pytest.mark.parametrize("k, words", [(2, [0, 1]), (3, [0, 1, 2]), (4, [0, 1, 2, 3])])
def test_top_k_keeps_exactly_k_words_when_some_tie(k, words):
  """Words 1-3 tie at 0.2: top_k keeps k words, the tied ones of lowest id first."""
  tied = jnp.asarray(np.log([0.4, 0.2, 0.2, 0.2, 0.2]))[None]
  out = sampling.truncated_logits(tied, BANNED, sampling.Sampling(top_k=k))
  assert [int(i) for i in np.flatnonzero(np.isfinite(np.asarray(out[0])))] == words


def test_temperature_divides_the_logits():
  out = sampling.truncated_logits(LOGITS, BANNED, sampling.Sampling(temperature=2.0))
  np.testing.assert_allclose(np.asarray(out[0, :4]), np.log(PROBS) / 2, rtol=1e-6)


def test_draws_follow_the_truncated_distribution():
  """20000 draws under top_p=0.81 (words 0-2 renormalised: 0.526, 0.316, 0.158): each
  frequency within 4 standard errors."""
  n = 20000
  logits = sampling.truncated_logits(
    jnp.repeat(LOGITS, n, 0), BANNED, sampling.Sampling(top_p=0.81)
  )
  keys = jax.random.split(jax.random.key(0), n)
  words = np.asarray(sampling.draw(keys, jnp.int32(0), logits))
  expected = np.append(PROBS[:3] / PROBS[:3].sum(), [0, 0])
  freq = np.bincount(words, minlength=5) / n
  assert np.all(np.abs(freq - expected) <= 4 * np.sqrt(expected * (1 - expected) / n) + 1e-12)


@pytest.mark.parametrize(
  "spec, message",
  [
    ("sample(temperature=-1)", "temperature must be > 0"),
    ("sample(temperature=0)", "temperature must be > 0"),
    ("sample(top_p=0)", r"top_p must be in \(0, 1\]"),
    ("sample(top_p=1.5)", r"top_p must be in \(0, 1\]"),
    ("sample(top_k=-2)", "top_k must be >= 0"),
    ("sample(epsilon=1)", r"epsilon must be in \[0, 1\)"),
    ("sample(n=0)", "n must be at least 1"),
    ("sample(k=3)", "has no setting 'k'"),
    ("nucleus(p=0.9)", "use '' \\(search\\) or sample"),
  ],
)
def test_bad_sampling_specs_fail_with_one_clear_line(spec, message):
  config = tiny.get_config()
  config.decode.sampling = spec
  with pytest.raises(ValueError, match=message):
    settings.validate(config)


def test_a_spec_reads_back_as_itself():
  s = sampling.parse("sample(n=4, top_p=0.9, seed=3)")
  assert s == sampling.Sampling(n=4, top_p=0.9, seed=3)
  assert sampling.parse(str(s)) == s
  assert sampling.parse("") is None


@pytest.fixture(scope="module")
def model():
  cfg = tiny.get_config()
  m = randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0)))
  m.w_o.bias.value = m.w_o.bias.value.at[EOS_ID].add(1.0)  # Some outputs end early.
  return m


@pytest.fixture(scope="module")
def batch():
  b = random_batch(seed=5, batch=5, src_len=7, vocab=VOCAB)
  return jnp.asarray(b["src"]), jnp.asarray(b["src_mask"])


def run(model, src, mask, max_len=9, **kw):
  graphdef, params = nnx.split(model, nnx.Param)
  return jax.device_get(
    decode.jit_decode(graphdef, params, src, mask, beam_size=1, max_len=max_len, **kw)
  )


def test_top_k_1_is_greedy_search(model, batch):
  greedy = run(model, *batch)
  drawn = run(model, *batch, sampling=sampling.Sampling(n=3, top_k=1, seed=7), nbest=3)
  for i in range(3):
    np.testing.assert_array_equal(drawn.tokens[:, i], greedy.tokens)
    np.testing.assert_allclose(drawn.scores[:, i], greedy.scores, rtol=1e-5)


def test_sample_scores_are_what_forced_decoding_gives(model, batch):
  src, mask = batch
  n = 4
  drawn = run(model, src, mask, sampling=sampling.Sampling(n=n, temperature=1.5), nbest=n)
  tokens = drawn.tokens.reshape(-1, drawn.tokens.shape[-1])
  lengths = drawn.lengths.reshape(-1)
  tgt_mask = (np.arange(tokens.shape[1])[None] < lengths[:, None]).astype(np.int32)
  tgt_in = np.concatenate([np.full((len(tokens), 1), 1), tokens[:, :-1]], 1) * tgt_mask
  forced = forcing.force_decode(
    model,
    jnp.repeat(src, n, 0),
    jnp.repeat(mask, n, 0),
    jnp.asarray(tgt_in, jnp.int32),
    jnp.asarray(tokens * tgt_mask, jnp.int32),
    jnp.asarray(tgt_mask),
  )
  np.testing.assert_allclose(np.asarray(forced.scores), drawn.scores.reshape(-1), rtol=2e-5)
  np.testing.assert_allclose(
    np.asarray(forced.norm_scores), drawn.norm_scores.reshape(-1), rtol=2e-5
  )
  assert np.all(np.diff(drawn.norm_scores, axis=1) <= 0), "samples come best first"
  assert np.all(tokens[tgt_mask == 0] == PAD_ID)


def test_a_sentence_gets_the_same_samples_alone_or_in_any_batch(model, batch):
  src, mask = batch
  s = sampling.Sampling(n=3, temperature=2.0, seed=11)
  together = run(model, src, mask, sampling=s, nbest=3)
  # Sentence 2 alone, padded wider than in the batch.
  wide_src = jnp.pad(src[2:3], ((0, 0), (0, 4)))
  wide_mask = jnp.pad(mask[2:3], ((0, 0), (0, 4)))
  alone = run(model, wide_src, wide_mask, sampling=s, nbest=3)
  np.testing.assert_array_equal(alone.tokens[0], together.tokens[2])
  np.testing.assert_allclose(alone.scores[0], together.scores[2], rtol=1e-5)
  reordered = run(model, src[::-1], mask[::-1], sampling=s, nbest=3)
  np.testing.assert_array_equal(reordered.tokens[::-1], together.tokens)
  other_seed = run(model, src, mask, sampling=sampling.Sampling(n=3, temperature=2.0), nbest=3)
  assert not np.array_equal(other_seed.tokens, together.tokens)


def test_nbest_beyond_the_samples_drawn_is_refused(model, batch):
  with pytest.raises(ValueError, match="nbest=5 exceeds the samples drawn"):
    run(model, *batch, sampling=sampling.Sampling(n=4), nbest=5)
  config = tiny.get_config()
  config.decode.sampling = "sample(n=4)"
  config.decode.beam_size = 2
  settings.validate(config).decode.check_nbest(4)  # The samples, not the beam, bound it.

"""Diverse beam search (`decode.search="diverse(groups=G, strength=L)"`): one group is beam search,
no diversity makes every group a beam of its own width, a strong one spreads the groups' first
words, and the scores it reports are the model's own (forced decoding)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import VOCAB, random_batch, tiny_model

from configs import tiny
from seq2seq import settings
from seq2seq.common import registry
from seq2seq.data.tokenizer import BOS_ID, PAD_ID
from seq2seq.decoding import decode, forcing


@pytest.fixture(scope="module")
def model():
  return tiny_model()


@pytest.fixture(scope="module")
def sources():
  batch = random_batch(seed=5, batch=5, src_len=7, vocab=VOCAB)
  return jnp.asarray(batch["src"]), jnp.asarray(batch["src_mask"])


def run(model, sources, beam_size, nbest, search=None):
  graphdef, params = nnx.split(model)
  spec = None if search is None else decode.parse_search(search)
  result = decode.jit_decode(
    graphdef, params, *sources, beam_size=beam_size, max_len=10, nbest=nbest, search=spec
  )
  return jax.device_get(result)


def test_one_group_is_beam_search(model, sources):
  beam = run(model, sources, 4, 4)
  diverse = run(model, sources, 4, 4, "diverse(groups=1, strength=3)")
  np.testing.assert_array_equal(diverse.tokens, beam.tokens)
  np.testing.assert_allclose(diverse.scores, beam.scores, rtol=1e-5)
  np.testing.assert_allclose(diverse.norm_scores, beam.norm_scores, rtol=1e-5)


def test_without_diversity_every_group_is_a_beam_of_its_width(model, sources):
  """strength 0: two groups of 2 are two identical beams of 2, whose pools sort side by side."""
  beam = run(model, sources, 2, 2)
  diverse = run(model, sources, 4, 4, "diverse(groups=2, strength=0)")
  twice = lambda x: np.repeat(x, 2, axis=1)  # [b0, b0, b1, b1]: each group's i-th, in turn.
  np.testing.assert_array_equal(diverse.tokens, twice(beam.tokens))
  np.testing.assert_allclose(diverse.scores, twice(beam.scores), rtol=1e-5)


def test_a_strong_diversity_spreads_the_groups_first_words(model, sources):
  plain = run(model, sources, 2, 2, "diverse(groups=2, strength=0)")
  spread = run(model, sources, 2, 2, "diverse(groups=2, strength=1000)")
  assert np.all(plain.tokens[:, 0, 0] == plain.tokens[:, 1, 0])
  assert np.all(spread.tokens[:, 0, 0] != spread.tokens[:, 1, 0])
  # Sorted best first by what beam search ranks by.
  assert np.all(np.diff(spread.norm_scores, axis=1) <= 1e-6)


def test_the_scores_reported_are_the_models_own(model, sources):
  """The diversity term steers the choice only: forced decoding of every output of the n-best
  list gives the score and ranking score the search reported."""
  result = run(model, sources, 4, 4, "diverse(groups=2, strength=2)")
  rows, ranks = np.nonzero(np.isfinite(result.scores))
  tokens, lengths = result.tokens[rows, ranks], result.lengths[rows, ranks]
  mask = np.arange(tokens.shape[1])[None] < lengths[:, None]
  tgt_out = np.where(mask, tokens, PAD_ID).astype(np.int32)
  tgt_in = np.concatenate([np.full((len(tgt_out), 1), BOS_ID), tgt_out[:, :-1]], axis=1)
  src, src_mask = (np.asarray(x)[rows] for x in sources)
  forced = forcing.force_decode(model, src, src_mask, tgt_in, tgt_out, mask.astype(np.int32))
  np.testing.assert_allclose(forced.scores, result.scores[rows, ranks], rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(
    forced.norm_scores, result.norm_scores[rows, ranks], rtol=1e-4, atol=1e-4
  )


def config_with(**decode_fields):
  config = tiny.get_config()
  config.decode.update(decode_fields)
  return config


def test_the_config_names_the_search_and_validation_refuses_what_it_cannot_honour():
  dec = settings.validate(config_with(beam_size=4, search="diverse(groups=2)")).decode
  assert dec.search == registry.Spec("diverse", decode.SEARCHES.get("diverse").Settings(groups=2))
  refused = {
    "is not a multiple": {"beam_size": 4, "search": "diverse(groups=3)"},
    "leave one of them empty": {"beam_size": 4, "search": "diverse", "sampling": "sample(n=4)"},
    "unknown search 'nope'": {"search": "nope"},
    "groups must be at least 1": {"search": "diverse(groups=0)"},
  }
  for message, fields in refused.items():
    with pytest.raises(ValueError, match=message):
      settings.validate(config_with(**fields))


def test_a_search_that_takes_no_constraints_refuses_them(model, sources):
  from seq2seq.decoding import constraints as constraints_

  graphdef, params = nnx.split(model)
  phrases = constraints_.pack([[[5, 6]]] * sources[0].shape[0])
  with pytest.raises(ValueError, match="takes no lexical constraints"):
    decode.jit_decode(
      graphdef,
      params,
      *sources,
      beam_size=2,
      max_len=10,
      constraints=phrases,
      search=decode.parse_search("diverse"),
    )

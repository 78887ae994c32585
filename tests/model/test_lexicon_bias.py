"""Lexicon bias (Arthur et al. 2016, `model.addons=lexicon`) against a computation written here."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, data_settings, random_batch, random_lexicon

from configs import tiny
from seq2seq import settings
from seq2seq.data import lexicon
from seq2seq.model import addons, models
from seq2seq.training import train_state

VOCAB, K = 30, 3


@pytest.fixture(scope="module")
def table_path(tmp_path_factory):
  table = random_lexicon(VOCAB, K)
  table.ids[5, 2], table.probs[5, 2] = -1, 0.0  # A padded entry.
  path = tmp_path_factory.mktemp("lex") / lexicon.FILE
  table.save(path)
  return path


def pair(path):
  """(model with the bias, the same model without it): equal parameters but the table."""
  cfg = tiny.get_config()
  plain = build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0))
  cfg.model.addons = f"lexicon(table={path})"
  table = lexicon.Lexicon.load(path)
  biased = build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0), lexicon=table)
  return biased, plain


def reference_bias(path, src, alpha):
  """log(sum_j alpha_j p_lex(w | x_j) + 0.001) [..., V] by loops over positions and entries."""
  table = lexicon.Lexicon.load(path)
  out = np.zeros((*alpha.shape[:-1], VOCAB))
  for index in np.ndindex(*alpha.shape[:-1]):
    b = index[0]
    for j, word in enumerate(src[b]):
      for i, p in zip(table.ids[word], table.probs[word], strict=True):
        if i >= 0:
          out[(*index, i)] += alpha[(*index, j)] * p
  return np.log(out + addons.LEXICON_EPS)


def test_the_bias_is_the_log_of_the_attention_weighted_lexicon(table_path):
  biased, plain = pair(table_path)
  b = random_batch(seed=1, batch=3, src_len=6, tgt_len=4, vocab=VOCAB)
  args = (jnp.asarray(b["src"]), jnp.asarray(b["src_mask"]), jnp.asarray(b["tgt_in"]))
  logits, alpha = biased(*args, return_alpha=True)
  src = np.where(b["src_mask"] > 0, b["src"], 0)
  want = np.asarray(plain(*args)) + reference_bias(table_path, src, np.asarray(alpha))
  np.testing.assert_allclose(np.asarray(logits), want, rtol=1e-5, atol=1e-4)
  # One decoding step: the same bias from the step's attention.
  enc = biased.encode(args[0], args[1])
  _, step_logits, step_alpha = biased.decoder_step(enc, enc.init_state, args[2][:, 0])
  _, plain_logits, _ = plain.decoder_step(
    plain.encode(args[0], args[1]), enc.init_state, args[2][:, 0]
  )
  want = np.asarray(plain_logits) + reference_bias(table_path, src, np.asarray(step_alpha))
  np.testing.assert_allclose(np.asarray(step_logits), want, rtol=1e-5, atol=1e-4)


def test_training_never_moves_the_table(table_path):
  cfg = tiny.get_config()
  cfg.model.addons = f"lexicon(table={table_path})"
  cfg.train.optimizer, cfg.train.learning_rate = "adam", 1e-2
  state = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), VOCAB, VOCAB)
  b = {k: jnp.asarray(v) for k, v in random_batch(seed=2, vocab=VOCAB).items()}
  step = jax.jit(functools.partial(train_state.train_step, run=settings.validate(cfg)))
  table = lambda s: (
    np.asarray(s.params["lexicon_ids"][...]),
    np.asarray(s.params["lexicon_probs"][...]),
  )
  before = table(state)
  for i in range(3):
    state, metrics = step(state, b, jax.random.key(i))
  assert np.isfinite(float(metrics["loss"]))
  for got, want in zip(table(state), before, strict=True):
    np.testing.assert_array_equal(got, want)


def test_the_bias_needs_attention_and_a_table_of_the_model_vocabularies(table_path):
  cfg = tiny.get_config()
  cfg.model.addons, cfg.model.name = f"lexicon(table={table_path})", "rnnencdec"
  with pytest.raises(ValueError, match="reads the attention: model.name=.*, not rnnencdec"):
    settings.validate(cfg)
  cfg.model.name = "rnnsearch"
  with pytest.raises(ValueError, match="is a table of 30 source and 30 target words"):
    table = lexicon.Lexicon.load(table_path)
    build_model(cfg.model, VOCAB + 1, VOCAB, rngs=nnx.Rngs(0), lexicon=table)


def test_a_table_learned_when_training_starts_is_saved_with_the_parameters(tmp_path):
  """`model.addons=lexicon(table=train)`: IBM Model 1 from the run's (here: first 300) training
  pairs, written to WORKDIR/lexicon.npz and carried by the checkpoint into evaluation."""
  import seq2seq
  from seq2seq import train

  cfg = tiny.get_config()
  cfg.model.addons = "lexicon"  # table=train, the default.
  cfg.data.train_pairs = 300
  cfg.train.num_steps = cfg.train.eval_every = cfg.train.checkpoint_every = 2
  cfg.train.valid_bleu = cfg.train.final_eval = False
  train.train_and_evaluate(cfg, tmp_path)
  table = lexicon.Lexicon.load(tmp_path / lexicon.FILE)
  loaded = seq2seq.load(tmp_path).state.params
  np.testing.assert_array_equal(
    np.asarray(loaded["lexicon_probs"][...]), table.probs[:, : addons.LEXICON_TOP]
  )
  assert np.asarray(loaded["lexicon_probs"][...]).max() > 0
  off = tiny.get_config()
  off.model.addons = "none"  # A sweep's spelling of "off".
  assert models.ModelSettings.from_config(off.model).addon("lexicon") is None


def test_train_pairs_keeps_the_first_pairs(tmp_path):
  from seq2seq.data import input_pipeline

  cfg = tiny.get_config()
  cfg.data.train_pairs = 120
  data = input_pipeline.load_data(data_settings(cfg), tmp_path)
  assert len(data.splits["train"]) == 120 and len(data.splits["valid"]) == 64

"""Alignments from attribution: word saliency against finite differences, SmoothGrad's copies,
integrated gradients' completeness, padding and the compiled function."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, random_batch, randomise

from configs import tiny
from seq2seq import settings
from seq2seq.decoding import attribution, forcing

VOCAB = 50


@pytest.fixture(scope="module")
def model_and_batch():
  cfg = tiny.get_config()
  settings.validate(cfg)
  model = randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0)))
  batch = {k: jnp.asarray(v) for k, v in random_batch(seed=5, vocab=VOCAB).items()}
  return model, {k: batch[k] for k in forcing.FORCED_KEYS}


def _probabilities(model, batch, delta):
  embed = model.encoder.embed
  model.encoder.embed = attribution._Shifted(embed, delta)
  try:
    forced = forcing.force_decode(model, *(batch[k] for k in forcing.FORCED_KEYS))
  finally:
    model.encoder.embed = embed
  return np.asarray(jnp.exp(forced.token_scores))


def test_word_saliency_is_the_derivative_along_each_source_embedding(model_and_batch):
  """psi_tj = dp(y_t)/de_j . e_j is the derivative of p(y_t) along e_j: central differences
  agree, for every target position of a sentence and two source positions."""
  model, batch = model_and_batch
  psi = np.asarray(attribution.saliency(model, batch))
  base = model.encoder.embed(batch["src"]).astype(jnp.float32)
  eps, row = 1e-2, 1
  for j in (0, 2):
    step = jnp.zeros_like(base).at[row, j].set(eps * base[row, j])
    up, down = _probabilities(model, batch, step), _probabilities(model, batch, -step)
    real = int(batch["tgt_mask"][row].sum())
    numeric = (up[row, :real] - down[row, :real]) / (2 * eps)
    np.testing.assert_allclose(psi[row, :real, j], numeric, rtol=2e-2, atol=1e-6)


def test_saliency_is_zero_at_padding_compiles_and_smooths(model_and_batch):
  model, batch = model_and_batch
  psi = attribution.saliency(model, batch, method="grad_norm")
  src_pad = np.asarray(batch["src_mask"]) == 0
  tgt_pad = np.asarray(batch["tgt_mask"]) == 0
  assert np.all(np.asarray(psi)[np.broadcast_to(src_pad[:, None, :], psi.shape)] == 0)
  assert np.all(np.asarray(psi)[np.broadcast_to(tgt_pad[:, :, None], psi.shape)] == 0)
  assert np.all(np.asarray(psi) >= 0)
  graphdef, params = nnx.split(model)
  compiled = attribution.jit_saliency(graphdef, params, batch, method="grad_norm")
  np.testing.assert_allclose(compiled, psi, rtol=1e-5, atol=1e-7)
  smooth = attribution.saliency(model, batch, samples=3, rng=jax.random.key(1))
  plain = attribution.saliency(model, batch)
  assert not np.allclose(smooth, plain)  # Noisy copies moved it ...
  np.testing.assert_allclose(  # ... and with no noise, three copies are the plain one.
    attribution.saliency(model, batch, samples=3, noise=0.0), plain, rtol=1e-5, atol=1e-8
  )
  with pytest.raises(ValueError, match="method must be one of grad_x_input, grad_norm, integ"):
    attribution.saliency(model, batch, method="lime")


@pytest.mark.parametrize("decoder", ["paper", "transformer(layers=1, heads=2)"])
def test_integrated_gradients_sum_to_the_change_from_the_zero_baseline(decoder):
  """Completeness (Sundararajan et al. 2017): summed over the source positions, psi_t is
  p(y_t | x) - p(y_t | zero embeddings), to the midpoint rule's error: within 2 % of the
  largest change with 32 points, and closer with 32 than with 4."""
  cfg = tiny.get_config()
  cfg.model.decoder = decoder
  settings.validate(cfg)
  model = randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(3)))
  b = {k: jnp.asarray(v) for k, v in random_batch(seed=6, vocab=VOCAB).items()}
  batch = {k: b[k] for k in forcing.FORCED_KEYS}
  base = model.encoder.embed(batch["src"]).astype(jnp.float32)
  change = _probabilities(model, batch, 0 * base) - _probabilities(model, batch, -base)
  change = change * np.asarray(batch["tgt_mask"])
  errors = []
  for points in (4, 32):
    psi = attribution.saliency(model, batch, method="integrated_gradients", samples=points)
    errors.append(np.abs(np.asarray(psi).sum(-1) - change).max())
  assert np.abs(change).max() > 1e-3  # The baseline moves the probabilities.
  assert errors[1] < 0.02 * np.abs(change).max() and errors[1] < errors[0], errors

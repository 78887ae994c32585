"""Attention normalisers (seq2seq/model/normalisers.py): forward values against a NumPy bisection on
the threshold (another algorithm than the package's sorting), gradients against finite
differences, masks, and bfloat16 inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import build_model

from seq2seq.model import normalisers

SPARSE = {"sparsemax": 2.0, "entmax15": 1.5}  # alpha of the alpha-entmax each one is.


def _reference(e: np.ndarray, allowed: np.ndarray, alpha: float) -> np.ndarray:
  """alpha-entmax of e over the allowed positions in float64, its threshold found by bisection:
  p_j = max((alpha - 1) e_j - tau, 0)^(1 / (alpha - 1)) with sum p = 1."""
  out = np.zeros_like(e, dtype=np.float64)
  for row in np.ndindex(e.shape[:-1]):
    if not allowed[row].any():
      continue
    z = (alpha - 1.0) * e[row][allowed[row]].astype(np.float64)
    lo, hi = z.max() - 1.0, z.max()  # The sum is >= 1 at lo and 0 at hi.
    for _ in range(200):
      tau = (lo + hi) / 2
      total = np.sum(np.maximum(z - tau, 0.0) ** (1.0 / (alpha - 1.0)))
      lo, hi = (tau, hi) if total > 1.0 else (lo, tau)
    out[row][allowed[row]] = np.maximum(z - lo, 0.0) ** (1.0 / (alpha - 1.0))
  return out


def _scores_and_mask(seed=0, shape=(5, 9), scale=2.0):
  rng = np.random.default_rng(seed)
  e = rng.normal(size=shape) * scale
  allowed = rng.random(shape) < 0.8
  allowed[0] = True  # A row without padding,
  allowed[1] = False  # a row with no allowed position,
  allowed[2, 1:] = False  # a row of one.
  return e, allowed


@pytest.mark.parametrize("name", sorted(SPARSE))
def test_sparse_normalisers_match_a_bisection_reference(name):
  e, allowed = _scores_and_mask()
  got = np.asarray(normalisers.make_normaliser(name)(jnp.asarray(e, jnp.float32), allowed))
  want = _reference(e, allowed, SPARSE[name])
  np.testing.assert_allclose(got, want, atol=2e-6)
  sums = got.sum(-1)
  np.testing.assert_allclose(sums[allowed.any(-1)], 1.0, atol=1e-5)
  assert np.all(got[~allowed] == 0.0) and np.all(got[1] == 0.0) and got[2, 0] == 1.0
  assert np.sum((got == 0.0) & allowed) > 0  # Exact zeros inside the mask: sparse.
  soft = np.asarray(normalisers.make_normaliser("softmax")(jnp.asarray(e), allowed))
  assert np.all(soft[allowed & allowed.any(-1, keepdims=True)] > 0.0)


@pytest.mark.parametrize("name", sorted(SPARSE))
def test_masked_positions_never_reach_the_output_or_the_gradient(name):
  e, allowed = _scores_and_mask(seed=1)
  normalise = normalisers.make_normaliser(name)
  poisoned = np.where(allowed, e, np.nan)
  poisoned[0, 0] = e[0, 0]
  poisoned[3, ~allowed[3]] = np.inf
  got = normalise(jnp.asarray(poisoned, jnp.float32), allowed)
  want = normalise(jnp.asarray(e, jnp.float32), allowed)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  weights = jnp.asarray(np.random.default_rng(2).normal(size=e.shape), jnp.float32)
  grad = jax.grad(lambda x: jnp.sum(normalise(x, allowed) * weights))(jnp.asarray(poisoned))
  assert np.all(np.isfinite(np.asarray(grad))) and np.all(np.asarray(grad)[~allowed] == 0.0)


@pytest.mark.parametrize("name", ["softmax", *sorted(SPARSE)])
def test_gradients_match_finite_differences(name):
  # Scores close together: supports of several positions, where the Jacobian is not zero.
  e, allowed = _scores_and_mask(seed=3, shape=(4, 7), scale=0.3)
  weights = np.random.default_rng(4).normal(size=e.shape)
  with jax.enable_x64(True):
    normalise = normalisers.make_normaliser(name)
    loss = lambda x: jnp.sum(normalise(x, allowed) * weights)
    x = jnp.asarray(e, jnp.float64)
    grad = np.asarray(jax.grad(loss)(x))
    eps, numeric = 1e-6, np.zeros_like(e)
    for index in np.ndindex(e.shape):
      step = np.zeros_like(e)
      step[index] = eps
      numeric[index] = (loss(x + step) - loss(x - step)) / (2 * eps)
  np.testing.assert_allclose(grad, numeric, atol=1e-6)
  assert np.abs(grad).max() > 1e-3


@pytest.mark.parametrize("name", ["softmax", *sorted(SPARSE)])
def test_bfloat16_scores_are_normalised_in_float32(name):
  e, allowed = _scores_and_mask(seed=5)
  normalise = normalisers.make_normaliser(name)
  rounded = jnp.asarray(e, jnp.bfloat16)
  got = normalise(rounded, allowed)
  assert got.dtype == jnp.float32
  want = normalise(rounded.astype(jnp.float32), allowed)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-7)


def test_an_unknown_normaliser_names_the_valid_ones():
  with pytest.raises(ValueError, match="valid: softmax, sparsemax, entmax15"):
    normalisers.make_normaliser("gumbel")


@pytest.mark.parametrize("decoder", ["paper", "luong"])
@pytest.mark.parametrize("name", sorted(SPARSE))
def test_sparse_attention_in_both_decoders_decodes_as_it_trains_and_learns(decoder, name):
  """In either decoder a sparse normaliser gives attention rows that sum to 1 over the real
  positions with exact zeros among them; search's steps give the teacher-forced scores, and a
  few Adam steps lower the loss."""

  from flax import nnx
  from helpers import check_trains, random_batch, randomise

  from configs import tiny
  from seq2seq import settings

  cfg = tiny.get_config()
  cfg.model.decoder, cfg.model.normaliser = decoder, name
  settings.validate(cfg)
  model = randomise(build_model(cfg.model, 50, 50, rngs=nnx.Rngs(0)), scale=1.0)
  b = {k: jnp.asarray(v) for k, v in random_batch(seed=3, vocab=50).items()}
  logits, alpha = model(b["src"], b["src_mask"], b["tgt_in"], return_alpha=True)
  real = np.broadcast_to(np.asarray(b["src_mask"], bool)[:, None, :], alpha.shape)
  np.testing.assert_allclose(np.asarray(alpha).sum(-1), 1.0, atol=1e-5)
  assert np.all(np.asarray(alpha)[~real] == 0.0) and np.any(np.asarray(alpha)[real] == 0.0)
  enc = model.encode(b["src"], b["src_mask"])
  state = enc.init_state
  # The logits reach |60| here (parameters randomised at scale 1): float32 rounding in sums of
  # such terms is about 1e-5 of that size, not of each logit's own (an AVX-512 EPYC differed by
  # 1.3e-4 at a logit of -0.27 with entmax15, whose threshold search rounds as the shapes say).
  atol = 1e-5 * float(np.abs(np.asarray(logits)).max())
  for i in range(b["tgt_in"].shape[1]):
    state, step_logits, step_alpha = model.decoder_step(enc, state, b["tgt_in"][:, i])
    np.testing.assert_allclose(
      np.asarray(step_logits), np.asarray(logits[:, i]), rtol=1e-4, atol=atol
    )
    np.testing.assert_allclose(np.asarray(step_alpha), np.asarray(alpha[:, i]), atol=5e-6)
  cfg.train.optimizer, cfg.train.learning_rate = "adam", 1e-2
  check_trains(cfg, b, 50)


def test_monotonic_attention_refuses_another_normaliser():
  from configs import tiny
  from seq2seq import settings

  cfg = tiny.get_config()
  cfg.model.attention, cfg.model.normaliser = "monotonic", "entmax15"
  with pytest.raises(ValueError, match="a structure that normalises scores"):
    settings.validate(cfg)

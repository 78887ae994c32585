"""Masking properties of the softmax and the context vector, over random masks (hypothesis)."""

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.model import attention

shapes = st.tuples(st.integers(1, 4), st.integers(1, 9))
dtypes = st.sampled_from([jnp.float32, jnp.bfloat16])


@st.composite
def problems(draw):
  batch, length = draw(shapes)
  logits = draw(hnp.arrays(np.float32, (batch, length), elements=st.floats(-30, 30, width=32)))
  mask = draw(hnp.arrays(np.bool_, (batch, length)))
  values = draw(hnp.arrays(np.float32, (batch, length, 3), elements=st.floats(-5, 5, width=32)))
  return logits, mask, values


@settings(max_examples=60, deadline=None)
@given(problems(), dtypes)
def test_alpha_is_a_distribution_over_unmasked_positions(problem, dtype):
  logits, mask, _ = problem
  alpha = np.asarray(attention.masked_softmax(jnp.asarray(logits, dtype), mask))
  assert np.all(np.isfinite(alpha))
  assert np.all(alpha[~mask] == 0.0)
  rows = mask.any(axis=1)
  np.testing.assert_allclose(alpha[rows].sum(axis=1), 1.0, rtol=1e-5)
  assert np.all(alpha[~rows] == 0.0)  # Fully masked rows are zeros, not NaN.


@settings(max_examples=60, deadline=None)
@given(problems(), dtypes, st.integers(0, 2**31 - 1))
def test_values_at_padding_change_nothing(problem, dtype, seed):
  logits, mask, values = problem
  noise = np.random.default_rng(seed)
  logits2 = np.where(mask, logits, noise.normal(size=logits.shape) * 1e4).astype(np.float32)
  logits2[~mask & (noise.random(logits.shape) < 0.2)] = np.inf  # Even inf at padding is harmless.
  values2 = np.where(mask[..., None], values, noise.normal(size=values.shape) * 1e4)

  def run(lg, vals):
    alpha = attention.masked_softmax(jnp.asarray(lg, dtype), mask)
    return attention.context(alpha, jnp.asarray(vals, dtype), mask), alpha

  (c1, a1), (c2, a2) = run(logits, values), run(logits2, values2)
  np.testing.assert_array_equal(np.asarray(a1), np.asarray(a2))
  np.testing.assert_array_equal(np.asarray(c1), np.asarray(c2))
  assert np.all(np.isfinite(np.asarray(c2)))


@jax.jit
@jax.grad
def _weighted_softmax_grad(logits, mask, weights):
  """The gradient of sum(masked_softmax(logits) * weights) in the logits, one program a shape
  (outside `jit` each of its operations compiled for every shape drawn)."""
  return jnp.sum(attention.masked_softmax(logits, mask) * weights)


@settings(max_examples=30, deadline=None)
@given(problems())
def test_gradient_is_finite_and_zero_at_padding(problem):
  logits, mask, values = problem
  weights = jnp.asarray(values[..., 0])
  grad = np.asarray(_weighted_softmax_grad(jnp.asarray(logits), mask, weights))
  assert np.all(np.isfinite(grad))
  assert np.all(grad[~mask] == 0.0)


@settings(max_examples=30, deadline=None)
@given(problems())
def test_jit_and_no_jit_agree(problem):
  logits, mask, values = problem

  def run(lg, m, v):
    alpha = attention.masked_softmax(lg, m)
    return attention.context(alpha, v, m)

  eager = run(jnp.asarray(logits), mask, jnp.asarray(values))
  jitted = jax.jit(run)(jnp.asarray(logits), mask, jnp.asarray(values))
  np.testing.assert_allclose(np.asarray(eager), np.asarray(jitted), rtol=1e-6, atol=1e-6)

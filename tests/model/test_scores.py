"""Each score function against a float64 NumPy reference; registry errors; a gradient check."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import randomise

from seq2seq.model import attention, scores

D, H, S, B = 6, 6, 5, 3


def _cfg(tiny_config, **overrides):
  cfg = tiny_config.model
  cfg.attn_dim = 4
  cfg.update(overrides)
  return cfg


def _spec(name):
  """`name`, with location scores addressing 8 positions."""
  return "location(max_len=8)" if name == "location" else name


def _kernel(layer):
  return np.asarray(layer.kernel[...], np.float64)


def _bf16(x):
  """x rounded to bfloat16, as float64."""
  rounded = jnp.asarray(x, jnp.float32).astype(jnp.bfloat16).astype(jnp.float32)
  return np.asarray(rounded, np.float64)


def _reference(score, q, h, rounded=lambda x: x):
  """float64 NumPy e [S] for one query q [D] and annotations h [S, H]; `rounded` is applied to
  both factors of every product (`_bf16`: what a bfloat16 model computes)."""
  q, h = q.astype(np.float64), h.astype(np.float64)

  def mm(x, w):
    return rounded(x) @ rounded(w)

  name = score.name
  if name == "additive":
    hidden = np.tanh(mm(q, _kernel(score.w_a)) + mm(h, _kernel(score.u_a)))
    return mm(hidden, _kernel(score.v_a))[:, 0]
  if name == "dot":
    return mm(h, q)
  if name == "scaled":
    return mm(h, q) / np.sqrt(len(q))
  if name == "general":
    return mm(mm(h, _kernel(score.w)), q)
  if name == "cosine":
    beta = float(score.sharpness[...])
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
    return beta * mm(unit(h), unit(q))
  if name == "location":
    return mm(q, _kernel(score.w))[: len(h)]
  raise AssertionError(f"no reference for {name}")


@pytest.mark.parametrize("name", scores.names())
def test_score_matches_float64_reference(tiny_config, name):
  score = randomise(
    scores.make_score(_spec(name), D, H, _cfg(tiny_config), rngs=nnx.Rngs(0)), 1, scale=0.5
  )
  rng = np.random.default_rng(0)
  q_BD = rng.normal(size=(B, D)).astype(np.float32)
  h_BSH = rng.normal(size=(B, S, H)).astype(np.float32)
  keys = score.keys(jnp.asarray(h_BSH))
  e_BS = jax.vmap(score)(jnp.asarray(q_BD), keys, jnp.asarray(h_BSH))
  want = np.stack([_reference(score, q_BD[b], h_BSH[b]) for b in range(B)])
  np.testing.assert_allclose(np.asarray(e_BS), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", scores.names())
def test_bfloat16_scores_are_float32_sums_of_bfloat16_products(tiny_config, name):
  """Under bfloat16 a score multiplies bfloat16 roundings and returns the float32 sum, as every
  matmul does (`layers.matmul`): scores rounded to bfloat16 (8 bits of mantissa) would move the
  softmax by about 0.3 at scores near 90."""
  score = randomise(
    scores.make_score(_spec(name), D, H, _cfg(tiny_config, dtype="bfloat16"), rngs=nnx.Rngs(0)),
    1,
    scale=0.5,
  )
  rng = np.random.default_rng(0)
  q_BD = jnp.asarray(rng.normal(size=(B, D)).astype(np.float32))
  h_BSH = jnp.asarray(rng.normal(size=(B, S, H)).astype(np.float32))
  e_BS = jax.vmap(score)(q_BD, score.keys(h_BSH), h_BSH)
  assert e_BS.dtype == jnp.float32
  q, h = np.asarray(q_BD), np.asarray(h_BSH)
  want = np.stack([_reference(score, q[b], h[b], _bf16) for b in range(B)])
  unrounded = np.stack([_reference(score, q[b], h[b]) for b in range(B)])
  # The rounding moves the scores by far more than the tolerance, so the check can tell.
  assert np.abs(want - unrounded).max() > 100 * (1e-5 * np.abs(want).max() + 1e-6)
  np.testing.assert_allclose(np.asarray(e_BS), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", scores.names())
def test_attend_with_padding_matches_reference_and_jit(tiny_config, name):
  score = randomise(
    scores.make_score(_spec(name), D, H, _cfg(tiny_config), rngs=nnx.Rngs(0)), 2, scale=0.5
  )
  rng = np.random.default_rng(1)
  q = rng.normal(size=(B, D)).astype(np.float32)
  h = rng.normal(size=(B, S, H)).astype(np.float32)
  mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], np.int32)

  def run(q, h, mask):
    return attention.attend(score, q, score.keys(h), h, mask)

  ctx, alpha = run(q, h, mask)
  ctx_jit, alpha_jit = jax.jit(run)(q, h, mask)
  for b in range(B):
    n = mask[b].sum()
    e = _reference(score, q[b], h[b])[:n]
    p = np.exp(e - e.max())
    p /= p.sum()
    np.testing.assert_allclose(np.asarray(alpha[b, :n]), p, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(alpha[b, n:]), 0.0)
    np.testing.assert_allclose(
      np.asarray(ctx[b]), p @ h[b, :n].astype(np.float64), rtol=1e-5, atol=1e-6
    )
  np.testing.assert_allclose(np.asarray(alpha_jit), np.asarray(alpha), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(np.asarray(ctx_jit), np.asarray(ctx), rtol=1e-6, atol=1e-6)


def test_unknown_score_lists_valid_names(tiny_config):
  with pytest.raises(
    ValueError,
    match=r"unknown score function 'bilinear' \(model.score\); valid: additive.*location",
  ):
    scores.make_score("bilinear", D, H, _cfg(tiny_config), rngs=nnx.Rngs(0))


def test_a_name_registers_once():
  with pytest.raises(ValueError, match="score function 'dot' is registered twice"):
    scores.register("dot")(type("Dot2", (scores.Score,), {}))
  assert scores.names() == sorted(scores.names()) and "dot" in scores.names()


@pytest.mark.parametrize("name", ["dot", "scaled", "cosine"])
def test_size_mismatch_names_both_sizes(tiny_config, name):
  with pytest.raises(ValueError, match=r"size 7\).*size 6\)"):
    scores.make_score(name, 7, 6, _cfg(tiny_config), rngs=nnx.Rngs(0))


def test_location_rejects_sources_longer_than_configured(tiny_config):
  score = scores.make_score("location(max_len=4)", D, H, _cfg(tiny_config), rngs=nnx.Rngs(0))
  h = jnp.ones((S, H))
  with pytest.raises(ValueError, match=r"location\(max_len=4\)' addresses at most 4"):
    score(jnp.ones(D), h, h)


def test_additive_gradient_matches_finite_differences(tiny_config):
  with jax.enable_x64(True):
    cfg = _cfg(tiny_config, dtype="float64")
    score = randomise(scores.make_score("additive", D, H, cfg, rngs=nnx.Rngs(0)), 3, scale=0.5)
    graphdef, params = nnx.split(score)
    params = jax.tree.map(lambda x: x.astype(jnp.float64), params)
    rng = np.random.default_rng(2)
    q = jnp.asarray(rng.normal(size=D))
    h = jnp.asarray(rng.normal(size=(S, H)))
    mask = jnp.asarray([1, 1, 1, 0, 0])
    w = jnp.asarray(rng.normal(size=(S,)))

    def objective(params, q, h):
      sc = nnx.merge(graphdef, params)
      alpha = attention.masked_softmax(sc(q, sc.keys(h[None])[0], h), mask)
      return jnp.sum(alpha * w)

    grads = jax.grad(objective, argnums=(0, 1, 2))(params, q, h)
    flat_p, unflatten = jax.flatten_util.ravel_pytree((params, q, h))
    flat_g, _ = jax.flatten_util.ravel_pytree(grads)
    eps = 1e-6
    numeric = np.array(
      [
        (
          objective(*unflatten(flat_p.at[i].add(eps)))
          - objective(*unflatten(flat_p.at[i].add(-eps)))
        )
        / (2 * eps)
        for i in range(flat_p.size)
      ]
    )
    assert flat_g.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(flat_g), numeric, rtol=1e-6, atol=1e-9)
    assert np.abs(numeric).max() > 1e-3  # The check is not vacuous.


def test_additive_training_keeps_no_tanh_per_step(tiny_config):
  """A decoder scan of T steps differentiated through the additive score holds no [T, B, S, A]
  array: tanh is recomputed in the backward pass, not stacked for every step."""
  T = 7
  score = randomise(scores.make_score("additive", D, H, _cfg(tiny_config), rngs=nnx.Rngs(0)), 3)
  graphdef, params = nnx.split(score)
  rng = np.random.default_rng(0)
  queries_TBD = jnp.asarray(rng.normal(size=(T, B, D)), jnp.float32)
  annotations_BSH = jnp.asarray(rng.normal(size=(B, S, H)), jnp.float32)
  mask_BS = jnp.ones((B, S), bool)

  def loss(params):
    sc = nnx.merge(graphdef, params)
    keys_BSK = sc.keys(annotations_BSH)

    def step(total, query_BD):
      c_BH, _ = attention.attend(sc, query_BD, keys_BSK, annotations_BSH, mask_BS)
      return total + jnp.sum(c_BH**2), None

    return jax.lax.scan(step, 0.0, queries_TBD)[0]

  text = jax.jit(jax.grad(loss)).lower(params).compile().as_text()
  assert f"f32[{B},{S},4]" in text  # One step's tanh is there: the check below is not vacuous.
  assert f"f32[{T},{B},{S},4]" not in text


def _matmul_flops(jaxpr) -> float:
  """FLOPs (2 per multiply-add) of every dot_general in a jaxpr and the jaxprs inside it."""
  total = 0.0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      (contract, _), _ = eqn.params["dimension_numbers"]
      depth = np.prod([eqn.invars[0].aval.shape[d] for d in contract])
      total += 2.0 * np.prod(eqn.outvars[0].aval.shape) * depth
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      total += _matmul_flops(sub)
  return total


@pytest.mark.parametrize("name", scores.names())
def test_matmul_flops_count_what_the_score_computes(tiny_config, name):
  """Each registered score's `matmul_flops` against the matmuls traced in its `keys` (for S
  annotations) and in one query's scores, so the benchmark's FLOP count holds for every score."""
  cfg = _cfg(tiny_config)
  spec = scores.spec(_spec(name))
  score = scores.make_score(spec, D, H, cfg, rngs=nnx.Rngs(0))
  h, q = jnp.ones((S, H)), jnp.ones((D,))
  per_key, per_query = type(score).matmul_flops(spec.settings, D, H, cfg.attn_dim, S)
  keys = jax.make_jaxpr(score.keys)(h)
  query = jax.make_jaxpr(score)(q, score.keys(h), h)
  assert _matmul_flops(keys.jaxpr) == S * per_key
  assert _matmul_flops(query.jaxpr) == per_query

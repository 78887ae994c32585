"""Attention structures (seq2seq/model/structures.py): local, monotonic, convolutional, multi-head
and hard attention against hand or float64 references, and every variant end to end.

Structure-level checks call one jitted step (`step`) of a structure with random parameters on
random annotations; model-level checks use configs/tiny.py sizes.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, random_batch, randomise

from configs import tiny
from seq2seq import checkpoints, settings
from seq2seq.data import input_pipeline
from seq2seq.data.tokenizer import EOS_ID
from seq2seq.decoding import beams, decode, inference, left_to_right
from seq2seq.model import scores, structures
from seq2seq.training import objective, optimisers, train_state

VOCAB = 30
B, S = 3, 7  # Structure-level examples: batch and padded source length.
VARIANTS = structures.names()


def model_config(attention="soft", dtype="float32", **fields):
  """The tiny config with `attention`; `fields` that are not model fields are its settings."""
  cfg = tiny.get_config()
  own = {k: v for k, v in fields.items() if k not in cfg.model}
  args = ", ".join(f"{k}={v}" for k, v in own.items())
  cfg.model.attention, cfg.model.dtype = f"{attention}({args})" if own else attention, dtype
  for key, value in fields.items():
    if key not in own:
      setattr(cfg.model, key, value)
  return cfg


def build(cfg, seed=0):
  return build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(seed))


def source(seed=0, lengths=(7, 4, 1)):
  """A query [B, D], annotations [B, S, H] and a ragged mask [B, S] of the tiny config's sizes."""
  cfg = tiny.get_config().model
  rng = np.random.default_rng(seed)
  query = jnp.asarray(rng.normal(size=(B, cfg.dec_hidden)), jnp.float32)
  annotations = jnp.asarray(rng.normal(size=(B, S, 2 * cfg.enc_hidden)), jnp.float32)
  mask = jnp.asarray(np.arange(S)[None] < np.asarray(lengths)[:, None], jnp.int32)
  return query, annotations, mask


def structure(name, seed=1, **fields):
  """(randomised structure `name`, randomised additive score) at the tiny config's sizes."""
  cfg = model_config(name, **fields).model
  annot = 2 * cfg.enc_hidden
  built = structures.make_structure(cfg.attention, cfg.dec_hidden, annot, cfg, rngs=nnx.Rngs(0))
  score = scores.make_score("additive", cfg.dec_hidden, annot, cfg, rngs=nnx.Rngs(0))
  return randomise(built, seed=seed, scale=1.0), randomise(score, seed=seed + 1, scale=1.0)


def step(module, score, query, annotations, mask, state=(), rng=None):
  """One jitted step of a structure (its keys included): `structures.Attended`."""
  fn = lambda q, a, m, st, k: module(score, q, module.keys(score, a, m), a, m, st, rng=k)
  return jax.jit(fn)(query, annotations, mask, state, rng)


def test_unknown_attention_lists_the_valid_ones():
  with pytest.raises(
    ValueError,
    match=r"unknown attention structure 'sparse' \(model.attention\); valid: soft, local_m",
  ):
    build(model_config("sparse"))
  assert VARIANTS == ["soft", "local_m", "local_p", "monotonic", "conv", "multihead", "hard"]


def test_soft_adds_no_parameter_and_structures_check_their_settings():
  soft = nnx.eval_shape(lambda: build(model_config()))
  paths = [path for path, _ in nnx.to_flat_state(nnx.state(soft, nnx.Param))]
  assert ("score", "v_a", "kernel") in paths and not any("structure" in p for p in paths)
  for attention, field, value, message in [
    ("multihead", "heads", 3, r"multihead\(heads=3\) must divide model.attn_dim=16"),
    ("multihead", "heads", 0, "heads must be positive"),
    ("conv", "width", 2, "width must be odd"),
    ("local_p", "window", 0, "window must be at least 1"),
    ("local_p", "windw", 1, "local_p has no setting 'windw'; valid: window"),
  ]:
    with pytest.raises(ValueError, match=message):
      nnx.eval_shape(lambda a=attention, f=field, v=value: build(model_config(a, **{f: v})))
  with pytest.raises(ValueError, match="leave model.score at 'additive'"):
    build(model_config("conv", score="dot"))
  with pytest.raises(ValueError, match="needs model.name=rnnsearch"):
    build(model_config("local_m", name="rnnencdec"))


# ------------------------------------------------------------------------------ local attention
def test_local_m_with_a_window_over_the_whole_sentence_is_global_attention():
  local, score = structure("local_m", window=S - 1)
  soft, _ = structure("soft")
  query, annotations, mask = source()
  want = step(soft, score, query, annotations, mask)
  for i in range(S + 3):  # Target positions past the end of the source too.
    got = step(local, score, query, annotations, mask, jnp.full((B,), i, jnp.int32))
    np.testing.assert_allclose(got.alpha, want.alpha, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got.context, want.context, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got.state, i + 1)


def test_local_p_with_an_infinitely_wide_gaussian_is_global_attention():
  local, score = structure("local_p", window=10**6)
  soft, _ = structure("soft")
  query, annotations, mask = source()
  want = step(soft, score, query, annotations, mask)
  got = step(local, score, query, annotations, mask)
  np.testing.assert_allclose(got.alpha, want.alpha, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(got.context, want.context, rtol=1e-5, atol=1e-6)


def test_windows_stop_at_sentence_borders_and_padding():
  query, annotations, mask = source(lengths=(7, 4, 2))
  real = np.asarray(mask, bool)
  positions = np.arange(S)
  local_m, score = structure("local_m", window=1)
  for i in (0, 3, 9):  # First word, middle, past the end (the centre stops at the last word).
    alpha = np.asarray(step(local_m, score, query, annotations, mask, jnp.full((B,), i)).alpha)
    centre = np.minimum(i, real.sum(1) - 1)[:, None]
    inside = real & (np.abs(positions[None] - centre) <= 1)
    assert np.all(alpha[~inside] == 0) and np.all(alpha[inside] > 0)
    np.testing.assert_allclose(alpha.sum(1), 1.0, rtol=1e-6)
  local_p, score = structure("local_p", window=2)
  alpha = np.asarray(step(local_p, score, query, annotations, mask).alpha, np.float64)
  p = np.asarray(jax.jit(local_p.centre)(query, mask), np.float64)[:, None]
  assert np.all((p >= 0) & (p <= real.sum(1, keepdims=True)))
  inside = real & (np.abs(positions[None] - p) <= 2)
  assert np.all(alpha[~inside] == 0) and np.all(alpha.sum(1) <= 1 + 1e-6)
  keys = score.keys(annotations)
  e = np.asarray(jax.jit(jax.vmap(score))(query, keys, annotations), np.float64)
  soft = np.where(inside, np.exp(e - np.where(inside, e, -np.inf).max(1, keepdims=True)), 0)
  want = soft / soft.sum(1, keepdims=True) * np.exp(-((positions[None] - p) ** 2) / 2.0)
  np.testing.assert_allclose(alpha, want, rtol=1e-5, atol=1e-7)  # sigma = D / 2 = 1.


@pytest.mark.parametrize("score_name", ["additive", "location"])
def test_local_m_scores_only_its_window_and_matches_the_masked_softmax(score_name):
  """The window is scored and read on its own (2D + 1 positions); the result must equal the
  softmax over all positions masked to the window, context included. `location` depends on
  absolute positions, so it is scored everywhere (Score.positional) and must agree as well."""
  query, annotations, mask = source(seed=4, lengths=(7, 5, 2))
  cfg = model_config("local_m", window=1).model
  local, _ = structure("local_m", window=1)
  annot = 2 * cfg.enc_hidden
  score = scores.make_score(score_name, cfg.dec_hidden, annot, cfg, rngs=nnx.Rngs(0))
  score = randomise(score, seed=3, scale=1.0)
  e = np.asarray(jax.jit(jax.vmap(score))(query, score.keys(annotations), annotations), np.float64)
  real = np.asarray(mask, bool)
  for i in (0, 2, 6, 8):
    got = step(local, score, query, annotations, mask, jnp.full((B,), i, jnp.int32))
    centre = np.minimum(i, real.sum(1) - 1)[:, None]
    inside = real & (np.abs(np.arange(S)[None] - centre) <= 1)
    w = np.where(inside, np.exp(e - np.where(inside, e, -np.inf).max(1, keepdims=True)), 0.0)
    want = w / w.sum(1, keepdims=True)
    np.testing.assert_allclose(got.alpha, want, rtol=1e-5, atol=1e-7)
    context = np.einsum("bs,bsh->bh", want, np.asarray(annotations, np.float64))
    np.testing.assert_allclose(got.context, context, rtol=1e-5, atol=1e-6)


# -------------------------------------------------------------------------- monotonic attention
def monotonic_loop(energy, prev, mask):
  """The recurrence as written, in float64: alpha_j = p_j sum_{k<=j} prev_k prod_{k<=l<j}(1-p_l)."""
  energy, prev = np.asarray(energy, np.float64), np.asarray(prev, np.float64)
  p = np.where(np.asarray(mask, bool), 1.0 / (1.0 + np.exp(-energy)), 0.0)
  out = np.zeros_like(p)
  for b in range(p.shape[0]):
    for j in range(p.shape[1]):
      total = 0.0
      for k in range(j + 1):
        total += prev[b, k] * np.prod(1.0 - p[b, k:j])
      out[b, j] = p[b, j] * total
  return out


def test_expected_alignment_equals_a_float64_loop_and_rows_sum_to_at_most_one():
  rng = np.random.default_rng(0)
  mask = np.arange(S)[None] < np.array([7, 5, 2])[:, None]
  prev = np.where(mask, rng.dirichlet(np.ones(S), size=B), 0.0) * 0.9
  expected = jax.jit(structures.expected_alignment)
  want, got = prev, jnp.asarray(prev, jnp.float32)
  for _ in range(6):  # Six steps, each from its own previous row.
    energy = rng.normal(0.0, 3.0, size=(B, S))
    want = monotonic_loop(energy, want, mask)
    got = expected(jnp.asarray(energy, jnp.float32), got, mask)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=1e-7)
    assert np.all(np.asarray(got).sum(1) <= prev.sum(1) + 1e-6)
    assert np.all(np.asarray(got)[~mask] == 0)


def test_expected_alignment_on_80_words_is_finite_and_equals_the_float64_recurrence():
  """80 steps over 80-word sources with energies up to +-40 (p within 4e-18 of 0 or 1)."""
  src_len, steps = 80, 80
  rng = np.random.default_rng(1)
  mask = np.arange(src_len)[None] < np.array([80, 41])[:, None]
  energies = rng.uniform(-40, 40, size=(steps, 2, src_len))
  first = np.where(np.arange(src_len) == 0, 1.0, 0.0)[None].repeat(2, 0)

  def rows(energies_TBS):
    scan = lambda alpha, e: (structures.expected_alignment(e, alpha, mask),) * 2
    return jax.lax.scan(scan, jnp.asarray(first, jnp.float32), energies_TBS)[1]

  e32 = jnp.asarray(energies, jnp.float32)
  got = np.asarray(jax.jit(rows)(e32))
  grads = jax.jit(jax.grad(lambda e: rows(e)[:, :, :10].sum()))(e32)
  assert np.isfinite(got).all() and bool(jnp.isfinite(grads).all())
  assert got.sum(-1).max() <= 1 + 1e-6
  # The recurrence q_j = (1 - p_{j-1}) q_{j-1} + alpha_{i-1,j}, alpha_ij = p_ij q_ij, in float64.
  p = np.where(mask, 1.0 / (1.0 + np.exp(-energies)), 0.0)
  alpha, want = first, []
  for i in range(steps):
    q, new = np.zeros(2), np.zeros_like(alpha)
    for j in range(src_len):
      q = (1.0 - p[i, :, j - 1]) * q + alpha[:, j] if j else alpha[:, 0]
      new[:, j] = p[i, :, j] * q
    alpha = new
    want.append(alpha)
  np.testing.assert_allclose(got, np.stack(want), atol=2e-6)


def b_args(b):
  """The model inputs of a batch: src, src_mask, tgt_in."""
  return b["src"], b["src_mask"], b["tgt_in"]


def _train_state(model, cfg):
  graphdef, params = nnx.split(model, nnx.Param)
  tx = optimisers.make_optimizer(optimisers.TrainSettings.from_config(cfg))
  baseline = jnp.zeros((), jnp.float32) if model.samples_attention else None
  return train_state.TrainState(
    jnp.zeros((), jnp.int32), params, tx.init(params), graphdef, tx, baseline
  )


def test_monotonic_model_is_finite_on_80_word_sources_in_bfloat16():
  """Float32 on 80 words: test_expected_alignment_on_80_words_... (with extreme energies)."""
  cfg = model_config("monotonic", "bfloat16")
  model = randomise(build(cfg), scale=0.5)
  b = random_batch(seed=2, batch=2, src_len=80, tgt_len=80, vocab=VOCAB, pad_rows=False)
  b["src_mask"][1, 50:] = 0
  ts = _train_state(model, cfg)

  def loss_and_alpha(params):  # Training: the expected alignment, with noise.
    model = ts.replace(params=params).model()
    logits, aux = model(*b_args(b), return_aux=True, dropout_rng=jax.random.key(0))
    total, tokens = objective.cross_entropy(logits, b["tgt_out"], b["tgt_mask"])
    return total / tokens, aux["alpha"]

  (loss, alpha), grads = jax.jit(jax.value_and_grad(loss_and_alpha, has_aux=True))(ts.params)
  assert np.isfinite(float(loss))
  assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))
  assert bool(jnp.isfinite(alpha).all()) and float(alpha.sum(-1).max()) <= 1 + 1e-5


def decoded(model, b, beam, max_len):
  """Greedy search (beam 1) or beam search of `model` on batch `b`, jitted."""
  graphdef, params = nnx.split(model, nnx.Param)
  return _search(graphdef, beam, max_len)(params, b["src"], b["src_mask"])


@functools.cache
def _search(graphdef, beam, max_len):
  """The jitted search of one model structure: models that differ only in their parameters'
  values (seeds, initial biases) share its compiled program."""

  def run(params, src, mask):
    merged = nnx.merge(graphdef, params)
    if beam == 1:
      return left_to_right.greedy(merged, src, mask, max_len=max_len)
    return beams.beam_search(merged, src, mask, beam_size=beam, max_len=max_len)

  return jax.jit(run)


def _positions(alpha_LS):
  """The attended position of each output step (-1: nothing attended)."""
  alpha = np.asarray(alpha_LS)
  return np.where(alpha.sum(-1) > 0, alpha.argmax(-1), -1)


def test_hard_monotonic_decoding_never_moves_backwards():
  rng = np.random.default_rng(3)
  mask = jnp.asarray(np.arange(S)[None] < np.array([7, 5, 3])[:, None])
  alpha = jnp.asarray(np.eye(S)[[0, 0, 0]], jnp.float32)
  hard = jax.jit(structures.hard_monotonic)
  seen = []
  for _ in range(12):
    alpha = hard(jnp.asarray(rng.normal(-0.5, 1, (B, S)), jnp.float32), alpha, mask)
    seen.append(_positions(alpha))
  seen = np.stack(seen, 1)
  assert seen.max() >= 3 and (seen == -1).any()  # It moves, and some sentences run out.
  for row in seen:
    stops = row[row >= 0]
    assert np.all(np.diff(stops) >= 0) and np.all(row[len(stops) :] == -1)

  model = randomise(build(model_config("monotonic")), seed=4, scale=0.5)
  b = random_batch(seed=5, batch=4, src_len=9, vocab=VOCAB)
  for beam in (1, 3):
    out = decoded(model, b, beam, max_len=12)
    for row, length in zip(np.asarray(out.alpha), np.asarray(out.lengths), strict=True):
      steps = _positions(row[:length])
      stops = steps[steps >= 0]
      assert np.all(row[:length].sum(-1) <= 1)  # One-hot or nothing.
      assert np.all(np.diff(stops) >= 0) and np.all(steps[len(stops) :] == -1)


def test_monotonic_lookahead_decodes_exactly_like_scoring_every_position():
  """Decoding with lookahead L first scores L positions from the last attended one, and all of
  them only when a sentence finds no stop there: outputs and attention must not change."""
  b = random_batch(seed=6, batch=5, src_len=9, vocab=VOCAB)
  for bias in (-2.0, 0.0, 2.0):  # Few stops (long jumps, runs past the end), some, many.
    outs = []
    for look in (0, 1, 3):  # Every position; lookahead 1 and 3.
      cfg = model_config("monotonic", lookahead=look, bias_init=bias)
      outs.append(decoded(randomise(build(cfg), seed=4, scale=0.5), b, 3, max_len=12))
    for look, out in zip((1, 3), outs[1:], strict=True):
      np.testing.assert_array_equal(out.tokens, outs[0].tokens, err_msg=f"lookahead {look}")
      np.testing.assert_array_equal(out.alpha, outs[0].alpha, err_msg=f"lookahead {look}")


# ---------------------------------------------------------------------- convolutional attention
def test_convolutional_attention_with_width_one_is_a_content_score_by_hand():
  conv, _ = structure("conv", width=1, filters=3)
  query, annotations, mask = source(seed=4)
  got = step(conv, None, query, annotations, mask)
  h = np.asarray(annotations, np.float64)
  k1, b1 = np.asarray(conv.conv1.kernel[...], np.float64)[0], np.asarray(conv.conv1.bias[...])
  k2, b2 = np.asarray(conv.conv2.kernel[...], np.float64)[0], np.asarray(conv.conv2.bias[...])
  gate = np.asarray(query, np.float64) @ np.asarray(conv.gate.kernel[...], np.float64)  # [B, F]
  features = (np.maximum(h @ k1 + b1, 0) @ k2 + b2) * gate[:, None, :]  # [B, S, F]
  unit = features / np.sqrt((features**2).sum(-1, keepdims=True) + 1e-6)
  e = unit @ np.asarray(conv.conv_att.kernel[...], np.float64)[0, :, 0]  # [B, S]
  e = np.where(np.asarray(mask, bool), e, -np.inf)
  want = np.exp(e - e.max(1, keepdims=True))
  want /= want.sum(1, keepdims=True)
  np.testing.assert_allclose(np.asarray(got.alpha), want, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(
    np.asarray(got.context), np.einsum("bs,bsh->bh", want, h), rtol=1e-4, atol=1e-5
  )


def test_convolutional_attention_sees_the_next_word_only_with_wider_kernels():
  query, annotations, mask = source(seed=5, lengths=(7, 7, 7))
  moved = annotations.at[:, 3].add(1.0)  # Change word 3; look at the score of word 2.
  for width, changes in ((1, False), (3, True)):
    conv, _ = structure("conv", width=width)
    alphas = [np.asarray(step(conv, None, query, a, mask).alpha) for a in (annotations, moved)]
    ratio = [a[:, 2] / a[:, 0] for a in alphas]  # Free of the softmax normaliser.
    assert np.allclose(ratio[0], ratio[1], rtol=1e-5) != changes


# ------------------------------------------------------------------------- multi-head attention
def test_multihead_with_one_head_is_additive_attention():
  heads, _ = structure("multihead", heads=1)
  heads.w_o.kernel[...] = jnp.eye(heads.w_o.kernel.shape[0])  # Its initial value.
  _, score = structure("soft")
  score.w_a.kernel[...] = heads.w_a.kernel[...]
  score.u_a.kernel[...] = heads.u_a.kernel[...]
  score.v_a.kernel[...] = heads.v_a[...].reshape(-1, 1)
  soft, _ = structure("soft")
  query, annotations, mask = source(seed=6)
  want = step(soft, score, query, annotations, mask)
  got = step(heads, None, query, annotations, mask)
  np.testing.assert_allclose(got.alpha, want.alpha, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(got.extras["alpha_heads"][:, 0], want.alpha, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(got.context, want.context, rtol=1e-5, atol=1e-6)


def test_multihead_returns_every_head_and_their_mean():
  heads, _ = structure("multihead", heads=4)
  query, annotations, mask = source(seed=7)
  got = step(heads, None, query, annotations, mask)
  per_head = np.asarray(got.extras["alpha_heads"])
  assert per_head.shape == (B, 4, S)
  np.testing.assert_allclose(per_head.sum(-1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(got.alpha), per_head.mean(1), rtol=1e-6)
  assert not np.allclose(per_head[:, 0], per_head[:, 1])  # The heads differ.


def test_multihead_heatmaps_reproduce_the_decoded_attention():
  cfg = tiny.get_config()
  cfg.model.attention, cfg.decode.beam_size = "multihead(heads=2)", 3
  state = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), 30, 30)
  state = state.replace(params=nnx.state(randomise(state.model()), nnx.Param))  # Heads differ.
  batch = random_batch(seed=3, batch=4, src_len=7, vocab=30)
  n_src = batch["src_mask"].sum(1)
  batch["src"][np.arange(4), n_src - 1] = EOS_ID  # Real rows end in EOS, as the pipeline's do.
  res = jax.device_get(decode.decode_batch(state, batch, decode.DecodeSettings.from_config(cfg)))
  translations = []
  for b in range(4):
    n = int(res.lengths[b])
    ids = [int(t) for t in res.tokens[b, :n] if t != EOS_ID]
    translations.append(inference.Hypothesis(ids, np.asarray(res.alpha[b, :n, : n_src[b]])))
  rows = input_pipeline.Ragged.from_lists
  sources = rows([batch["src"][b, : n_src[b] - 1] for b in range(4)])
  split = input_pipeline.Split("decoded", sources, rows([[]] * 4), np.arange(4))
  cfg.decode.batch_size = 3  # Two batches, the last one padded.
  for b, (tr, heads) in enumerate(
    zip(
      translations,
      inference.decoded_heads(state, split, translations, decode.DecodeSettings.from_config(cfg)),
      strict=True,
    )
  ):
    assert len(heads) == 2 and heads[0].shape == tr.attention.shape
    np.testing.assert_allclose((heads[0] + heads[1]) / 2, tr.attention, atol=1e-5)
    if n_src[b] > 2:  # Two different heads (over one word and EOS they might agree).
      assert not np.allclose(heads[0], heads[1], atol=1e-3)
  cfg.model.attention = "soft"  # One head: nothing extra to draw.
  soft = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), 30, 30)
  assert (
    inference.decoded_heads(soft, split, translations, decode.DecodeSettings.from_config(cfg))
    is None
  )


# ----------------------------------------------------------------------------- hard attention
CHI2_4DOF_999 = 18.467  # 0.999 quantile of the chi-square distribution with 4 degrees of freedom.


class ColumnScore:
  """A score function for tests: e_j is the first feature of annotation j."""

  def keys(self, annotations_BSH):
    return annotations_BSH

  def __call__(self, query_D, keys_SK, annotations_SH):
    return keys_SK[:, 0]


def test_hard_attention_samples_follow_the_softmax():
  hard, _ = structure("hard")
  n, alpha = 20_000, np.array([0.1, 0.4, 0.2, 0.25, 0.05])
  annotations = np.zeros((n, S, 4), np.float32)
  annotations[:, :5, 0] = np.log(alpha)
  annotations[:, 5:, 0] = 5.0  # Padding with the highest scores.
  mask = jnp.asarray(np.arange(S) < 5, jnp.int32)[None].repeat(n, 0)
  query = jnp.zeros((n, 1), jnp.float32)
  got = step(hard, ColumnScore(), query, jnp.asarray(annotations), mask, rng=jax.random.key(0))
  np.testing.assert_allclose(np.asarray(got.alpha[0, :5]), alpha, rtol=1e-5)
  position = np.asarray(got.extras["position"])
  counts = np.bincount(position, minlength=S)
  assert counts[5:].sum() == 0  # Never padding.
  expected = n * alpha
  assert ((counts[:5] - expected) ** 2 / expected).sum() < CHI2_4DOF_999
  uniform = np.full(5, n / 5)  # The test has power: uniform draws would fail it by far.
  assert ((counts[:5] - uniform) ** 2 / uniform).sum() > 10 * CHI2_4DOF_999
  np.testing.assert_allclose(np.asarray(got.extras["sample_logp"]), np.log(alpha[position]), 1e-5)
  argmax = step(hard, ColumnScore(), query[:2], jnp.asarray(annotations[:2]), mask[:2])
  np.testing.assert_array_equal(argmax.extras["position"], 1)  # No key: the argmax.


def test_reinforce_loss_gradient_is_the_score_function_estimator():
  reward, baseline = jnp.asarray([-3.0, -5.0]), jnp.asarray(-4.0)
  logp, entropy = jnp.full((2, 3), -1.0), jnp.full((2, 3), 0.5)
  mask = jnp.asarray([[1, 1, 1], [1, 1, 0]])
  grads = jax.grad(objective.reinforce_loss, argnums=(0, 1, 2, 3))(
    reward, baseline, logp, entropy, mask, 2.0, 0.1
  )
  advantage = np.array([1.0, -1.0])[:, None]
  np.testing.assert_allclose(grads[2], -2.0 * advantage * np.asarray(mask))
  np.testing.assert_allclose(grads[3], -0.1 * np.asarray(mask))
  assert float(jnp.abs(grads[0]).sum() + jnp.abs(grads[1])) == 0  # Reward, baseline: constants.


def test_hard_attention_gradient_is_finite_and_the_baseline_moves(tmp_path):
  cfg = model_config("hard")
  state = initial = train_state.create_train_state(
    settings.validate(cfg), jax.random.key(0), VOCAB, VOCAB
  )
  assert float(state.terms["reinforce"]) == 0.0  # The term keeps its baseline.
  b = {k: jnp.asarray(v) for k, v in random_batch(seed=9, vocab=VOCAB).items()}

  @jax.jit
  def grads(params, reinforce_weight, entropy_weight):
    terms = (
      objective.CrossEntropy(),
      objective.Reinforce(objective.Reinforce.Settings(reinforce_weight, entropy_weight)),
    )
    weights = objective.Objective(terms)
    loss = lambda p: objective.loss_fn(p, state, b, jax.random.key(1), weights)[0]
    return jax.grad(loss)(params)

  v_a = lambda g: dict(nnx.to_flat_state(g))[("score", "v_a", "kernel")].value
  with_estimator = grads(state.params, 1.0, 0.01)
  without = grads(state.params, 0.0, 0.0)
  assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(with_estimator))
  assert float(jnp.abs(v_a(with_estimator)).sum()) > 0
  assert float(jnp.abs(v_a(without)).sum()) == 0  # Only the estimator trains the score.

  update = jax.jit(functools.partial(train_state.train_step, run=settings.validate(cfg)))
  state, first = update(state, b, jax.random.key(2))
  assert float(state.terms["reinforce"]) == float(first["reward"]) < 0  # Step 0: the mean reward.
  state, second = update(state, b, jax.random.key(3))
  want = 0.9 * float(first["reward"]) + 0.1 * float(second["reward"])
  assert float(state.terms["reinforce"]) == pytest.approx(want, rel=1e-6)
  assert float(second["baseline"]) == float(state.terms["reinforce"])
  assert float(second["reward"]) != float(first["reward"])

  ckpt = checkpoints.Checkpointer(tmp_path, cfg.train.keep_checkpoints)
  ckpt.save(state, None)
  restored, _ = ckpt.restore(initial, with_data=False)
  ckpt.close()
  assert float(restored.terms["reinforce"]) == float(state.terms["reinforce"]) != 0.0


def test_a_checkpoint_saved_with_the_baseline_at_the_top_restores_into_the_term(tmp_path):
  """Checkpoints written before loss terms kept their own states hold REINFORCE's baseline as
  a top-level "baseline"; they restore with it as the term's state."""
  import orbax.checkpoint as ocp

  cfg = model_config("hard")
  state = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), VOCAB, VOCAB)
  old = {"step": jnp.asarray(7, jnp.int32), "params": state.params, "opt_state": state.opt_state}
  old["baseline"] = jnp.asarray(-3.25, jnp.float32)
  manager = ocp.CheckpointManager(tmp_path / "checkpoints")
  manager.save(7, args=ocp.args.Composite(state=ocp.args.StandardSave(old)), force=True)
  manager.wait_until_finished()
  manager.close()
  ckpt = checkpoints.Checkpointer(tmp_path, cfg.train.keep_checkpoints)
  restored, _ = ckpt.restore(state, with_data=False)
  ckpt.close()
  assert int(restored.step) == 7 and float(restored.terms["reinforce"]) == -3.25


# ------------------------------------------------------------------------------ every variant
def variant_config(name, dtype="float32"):
  """`name` with its default settings, but local windows of 2 (smaller than the sources)."""
  return model_config(name, dtype, **({"window": 2} if name.startswith("local") else {}))


def _random_model(name, dtype="float32", seed=0):
  cfg = variant_config(name, dtype)
  return cfg, randomise(build(cfg, seed), seed=seed + 1, scale=0.5)


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_overfits_fixed_pairs_and_jit_matches_eager(name):
  cfg = variant_config(name)
  cfg.train.optimizer, cfg.train.learning_rate = "adam", 1e-2
  batch = random_batch(seed=7, batch=8, src_len=6, tgt_len=5, vocab=VOCAB, pad_rows=True)
  state = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), VOCAB, VOCAB)
  update = jax.jit(functools.partial(train_state.train_step, run=settings.validate(cfg)))
  first = None
  for i in range(150):  # Until the training loss is well below the bar the final check sets.
    state, metrics = update(state, batch, jax.random.key(i))
    loss = float(metrics["loss"])
    first = loss if first is None else first
    if loss < 0.1:
      break
  # The training loss (with its key: hard attention samples, monotonic adds noise), with and
  # without jit, on the trained model.
  key = jax.random.key(7) if structures.uses_rng(cfg.model.attention) else None
  weights = objective.Objective.from_config(cfg)  # Hard attention: reinforce 1, entropy 0.01.
  loss = lambda params, key: objective.loss_fn(params, state, batch, key, weights)[0]
  eager = float(loss(state.params, key))
  np.testing.assert_allclose(float(jax.jit(loss)(state.params, key)), eager, rtol=1e-5)
  final = float(jax.jit(loss)(state.params, None)) if key is not None else eager  # Evaluation.
  assert first > 3.0
  assert final < 0.3, f"{name}: loss {first:.2f} -> {final:.3f}"


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_decodes_steps_like_training_and_ignores_padding(name):
  cfg, model = _random_model(name)
  b = random_batch(seed=10, vocab=VOCAB)
  graphdef, params = nnx.split(model)
  forward = jax.jit(lambda p, src, mask: nnx.merge(graphdef, p)(src, mask, b["tgt_in"]))
  logits = forward(params, b["src"], b["src_mask"])
  src = np.concatenate([b["src"], np.full((4, 3), 17, np.int32)], axis=1)  # Padding of any id.
  mask = np.concatenate([b["src_mask"], np.zeros((4, 3), np.int32)], axis=1)
  np.testing.assert_allclose(forward(params, src, mask), logits, rtol=1e-5, atol=1e-5)

  if name != "monotonic":  # Its decoding takes hard decisions (test_hard_monotonic_decoding_...).
    encode = jax.jit(lambda p, src, mask: nnx.merge(graphdef, p).encode(src, mask))
    one_step = jax.jit(lambda p, enc, st, y: nnx.merge(graphdef, p).decoder_step(enc, st, y))
    enc = encode(params, b["src"], b["src_mask"])
    state, steps = enc.init_state, []
    for t in range(b["tgt_in"].shape[1]):
      state, step_logits, _ = one_step(params, enc, state, jnp.asarray(b["tgt_in"][:, t]))
      steps.append(step_logits)
    np.testing.assert_allclose(np.stack(steps, 1), logits, rtol=2e-5, atol=2e-5)

  for beam in (1, 3):
    out = decoded(model, b, beam, max_len=9)
    assert bool(jnp.isfinite(out.scores).all()) and out.alpha.shape == (4, 9, 7)
    assert float(out.alpha.sum(-1).max()) <= 1 + 1e-5


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_is_finite_in_bfloat16(name):
  cfg, model = _random_model(name, "bfloat16")
  b = {k: jnp.asarray(v) for k, v in random_batch(seed=11, vocab=VOCAB).items()}
  graphdef, params = nnx.split(model)
  key = jax.random.key(0)  # The training path: hard attention samples, monotonic adds noise.

  def loss(params):
    logits, aux = nnx.merge(graphdef, params)(*b_args(b), return_aux=True, dropout_rng=key)
    total, tokens = objective.cross_entropy(logits, b["tgt_out"], b["tgt_mask"])
    return total / tokens, (logits, aux)

  (value, (logits, aux)), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  assert np.isfinite(float(value)) and bool(jnp.isfinite(logits).all())
  assert all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves((aux, grads)))


@pytest.mark.parametrize("name", ["local_m", "local_p"])
def test_local_attention_in_training_keeps_no_window_per_step(name):
  """A decoder scan of T steps differentiated through a local structure holds no [T, B, 2D + 1,
  H] array: the window's slice of the annotations is taken again in the backward pass."""
  T, H = 5, 32
  module, score = structure(name, window=1)
  _, annotations, mask = source()
  queries = jnp.asarray(np.random.default_rng(0).normal(size=(T, B, 32)), jnp.float32)
  graphdef, params = nnx.split((module, score))

  def loss(params):
    module, score = nnx.merge(graphdef, params)
    keys = module.keys(score, annotations, mask)

    def one(carry, query):
      total, state = carry
      att = module(score, query, keys, annotations, mask, state)
      return (total + jnp.sum(att.context**2), att.state), None

    return jax.lax.scan(one, (0.0, module.init_state(mask)), queries)[0][0]

  text = jax.jit(jax.grad(loss)).lower(params).compile().as_text()
  assert f"f32[{B},3,{H}]" in text  # One step's window is there: the check below is not vacuous.
  assert f"f32[{T},{B},3,{H}]" not in text

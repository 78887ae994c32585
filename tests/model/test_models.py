"""RNNsearch / RNNencdec: shapes, parameter counts, scan vs step loop, padding invariance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, compiled, random_batch, randomise

from configs import rnnencdec, rnnsearch
from seq2seq.model import models, scores
from seq2seq.training import objective

VOCAB = 50


def _model(cfg, name="rnnsearch", seed=0):
  cfg.model.name = name
  return build_model(cfg.model, VOCAB, VOCAB + 3, rngs=nnx.Rngs(seed))


@pytest.mark.parametrize("name", ["rnnsearch", "rnnencdec", "rnnencdec_bi"])
def test_output_shapes(tiny_config, name):
  model = _model(tiny_config, name)
  b = random_batch(vocab=VOCAB)
  forward = lambda **how: compiled(
    type(model).__call__, model, b["src"], b["src_mask"], b["tgt_in"], **how
  )
  logits = forward()
  assert logits.shape == (4, 6, VOCAB + 3) and logits.dtype == jnp.float32
  enc = compiled(type(model).encode, model, b["src"], b["src_mask"])
  directions = 1 if name == "rnnencdec" else 2
  assert enc.annotations.shape == (4, 7, directions * tiny_config.model.enc_hidden)
  assert enc.init_state.s.shape == (4, tiny_config.model.dec_hidden)
  if name == "rnnsearch":
    logits2, alpha = forward(return_alpha=True)
    assert alpha.shape == (4, 6, 7)
    np.testing.assert_array_equal(np.asarray(logits2), np.asarray(logits))
  else:
    with pytest.raises(ValueError, match="no attention"):
      forward(return_alpha=True)


@pytest.mark.parametrize(
  "name,score",
  [("rnnsearch", s) for s in scores.names()] + [(n, "additive") for n in models.ENCDEC_NAMES],
)
def test_scan_equals_step_by_step_loop(tiny_config, name, score):
  tiny_config.model.score = score
  model = randomise(_model(tiny_config, name))
  b = random_batch(seed=3, vocab=VOCAB)
  forward = lambda **how: compiled(
    type(model).__call__, model, b["src"], b["src_mask"], b["tgt_in"], **how
  )
  logits = forward()
  enc = compiled(type(model).encode, model, b["src"], b["src_mask"])
  state, step_logits, step_alpha = enc.init_state, [], []
  for t in range(b["tgt_in"].shape[1]):
    tokens = jnp.asarray(b["tgt_in"][:, t])
    state, lg, alpha = compiled(type(model).decoder_step, model, enc, state, tokens)
    step_logits.append(lg)
    step_alpha.append(alpha)
  np.testing.assert_allclose(np.asarray(logits), np.stack(step_logits, 1), rtol=2e-5, atol=2e-5)
  if name == "rnnsearch":
    _, alpha = forward(return_alpha=True)
    np.testing.assert_allclose(np.asarray(alpha), np.stack(step_alpha, 1), rtol=2e-5, atol=2e-6)


def test_encoder_equals_a_loop_over_each_direction(tiny_config):
  """The fused bidirectional scan against the definition: a forward loop and a backward loop of
  each GRU over the real words only; and `model.scan_unroll` changes no number."""
  model = randomise(_model(tiny_config))
  b = random_batch(seed=5, vocab=VOCAB)
  annotations, fwd_last, bwd_first = model.encoder(b["src"], b["src_mask"])
  enc = model.encoder
  emb = np.asarray(enc.embed(b["src"]))
  hidden = enc.fwd.hidden
  for row, length in enumerate(b["src_mask"].sum(1)):
    h_f = h_b = jnp.zeros((1, hidden))
    fwd, bwd = [], [None] * length
    for t in range(length):
      h_f = enc.fwd(h_f, enc.fwd.project(emb[row, t][None]))
      fwd.append(h_f[0])
    for t in reversed(range(length)):
      h_b = enc.bwd(h_b, enc.bwd.project(emb[row, t][None]))
      bwd[t] = h_b[0]
    want = np.concatenate([np.stack(fwd), np.stack(bwd)], axis=-1)
    np.testing.assert_allclose(annotations[row, :length], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fwd_last[row], fwd[-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bwd_first[row], bwd[0], rtol=1e-5, atol=1e-6)
  tiny_config.model.scan_unroll = 3
  unrolled = randomise(_model(tiny_config))
  b_logits = model(b["src"], b["src_mask"], b["tgt_in"])
  np.testing.assert_allclose(
    unrolled(b["src"], b["src_mask"], b["tgt_in"]), b_logits, rtol=1e-6, atol=1e-6
  )


@pytest.mark.parametrize("name", ["rnnsearch", *models.ENCDEC_NAMES])
def test_training_gradients_equal_a_step_by_step_loop(tiny_config, name):
  """The training pass hoists the embeddings, the GRU input projections and the deep output out
  of the scan and runs both encoder directions in one scan; its loss gradients equal those of
  the straightforward loop over `decoder_step`, which does every step's work inside the step."""
  graphdef, params, rest = nnx.split(randomise(_model(tiny_config, name)), nnx.Param, ...)
  b = random_batch(seed=6, vocab=VOCAB)
  loss = lambda logits: objective.cross_entropy(logits, b["tgt_out"], b["tgt_mask"])[0]

  def optimised(p):
    return loss(nnx.merge(graphdef, p, rest)(b["src"], b["src_mask"], b["tgt_in"]))

  def straightforward(p):
    model = nnx.merge(graphdef, p, rest)
    enc = model.encode(b["src"], b["src_mask"])
    state, logits = enc.init_state, []
    for t in range(b["tgt_in"].shape[1]):
      state, step_logits, _ = model.decoder_step(enc, state, jnp.asarray(b["tgt_in"][:, t]))
      logits.append(step_logits)
    return loss(jnp.stack(logits, 1))

  (want_loss, want), (got_loss, got) = (
    jax.jit(jax.value_and_grad(f))(params) for f in (straightforward, optimised)
  )
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
  flat_want = dict(jax.tree_util.tree_leaves_with_path(want))
  flat_got = dict(jax.tree_util.tree_leaves_with_path(got))
  assert flat_got.keys() == flat_want.keys()
  for path, g in flat_want.items():
    scale = float(np.max(np.abs(g))) + 1e-8
    np.testing.assert_allclose(flat_got[path], g, rtol=1e-4, atol=1e-5 * scale, err_msg=str(path))
  assert any(float(np.max(np.abs(g))) > 0 for g in flat_want.values())


def test_initial_state_is_tanh_of_backward_first_annotation(tiny_config):
  model = randomise(_model(tiny_config))
  b = random_batch(seed=4, vocab=VOCAB)
  enc = model.encode(b["src"], b["src_mask"])
  he = tiny_config.model.enc_hidden
  bwd_h1 = np.asarray(enc.annotations[:, 0, he:], np.float64)
  w, bias = np.asarray(model.init_proj.kernel[...]), np.asarray(model.init_proj.bias[...])
  np.testing.assert_allclose(np.asarray(enc.init_state.s), np.tanh(bwd_h1 @ w + bias), atol=1e-5)


@pytest.mark.parametrize("name", ["rnnsearch", *models.ENCDEC_NAMES])
def test_source_padding_changes_nothing(tiny_config, name):
  """Appending padding (of any token id) to the source leaves logits and attention unchanged."""
  model = randomise(_model(tiny_config, name))
  b = random_batch(seed=5, vocab=VOCAB)
  extra = 5
  src = np.concatenate([b["src"], np.full((4, extra), 17, np.int32)], axis=1)
  mask = np.concatenate([b["src_mask"], np.zeros((4, extra), np.int32)], axis=1)
  want = model(b["src"], b["src_mask"], b["tgt_in"])
  got = model(src, mask, b["tgt_in"])
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def _paper_count(v_src, v_tgt, e, he, d, a, m, attention, bidirectional=True):
  """Parameters of the paper's model, counted by hand from its equations (the one-direction
  RNNencdec of Cho et al. adds V in c = tanh(V h_Tx) and reads a context of size he)."""
  gru = lambda inp, h: inp * 3 * h + 3 * h + h * 2 * h + h * h  # W [z,r,h]+bias, U_zr, U
  ctx = 2 * he if bidirectional else he
  encoder = v_src * e + (2 * gru(e, he) if bidirectional else gru(e, he) + he * he)
  decoder = v_tgt * e + (he * d + d) + gru(e, d) + ctx * 3 * d  # embed, W_s, GRU, C [z,r,h]
  align = d * a + 2 * he * a + a if attention else 0  # W_a, U_a, v_a
  readout = (d * 2 * m + 2 * m) + e * 2 * m + ctx * 2 * m + (m * v_tgt + v_tgt)  # U_o V_o C_o W_o
  return encoder + decoder + align + readout


@pytest.mark.parametrize(
  "module,name,attention,bidirectional",
  [
    (rnnsearch, "rnnsearch", True, True),
    (rnnencdec, "rnnencdec", False, False),
    (rnnencdec, "rnnencdec_bi", False, True),
  ],
)
def test_paper_config_parameter_count(module, name, attention, bidirectional):
  cfg = module.get_config().model
  cfg.name = name
  v = module.get_config().data.src_vocab_size
  abstract = nnx.eval_shape(lambda: build_model(cfg, v, v, rngs=nnx.Rngs(0)))
  count = sum(x.size for x in jax.tree.leaves(nnx.state(abstract, nnx.Param)))
  want = _paper_count(
    v,
    v,
    cfg.emb_dim,
    cfg.enc_hidden,
    cfg.dec_hidden,
    cfg.attn_dim,
    cfg.maxout_dim,
    attention,
    bidirectional,
  )
  print(f"{cfg.name} paper config: {count:,} parameters")
  assert count == want


def test_paper_rnnencdec_is_cho_et_al(tiny_config):
  """The paper's baseline reads a one-direction GRU: c = tanh(V h_Tx) from the forward state at
  the last real word, s_0 = tanh(V' c), and c is the context of every decoder step."""
  model = randomise(_model(tiny_config, "rnnencdec"))
  assert model.encoder.bwd is None
  b = random_batch(seed=8, vocab=VOCAB)
  enc = model.encode(b["src"], b["src_mask"])
  emb = np.asarray(model.encoder.embed(b["src"]))
  he = tiny_config.model.enc_hidden
  v = np.asarray(model.summary_proj.kernel[...], np.float64)
  w_s, b_s = (
    np.asarray(x[...], np.float64) for x in (model.init_proj.kernel, model.init_proj.bias)
  )
  for row, length in enumerate(b["src_mask"].sum(1)):
    h = jnp.zeros((1, he))
    for t in range(length):
      h = model.encoder.fwd(h, model.encoder.fwd.project(emb[row, t][None]))
    c = np.tanh(np.asarray(h[0], np.float64) @ v)
    np.testing.assert_allclose(enc.fixed_context[row], c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(enc.init_state.s[row], np.tanh(c @ w_s + b_s), rtol=1e-5, atol=1e-6)
  assert enc.fixed_context.shape == (4, he)
  # Every step reads the same c: the decoder's context matrices take inputs of its size.
  assert model.context_proj.kernel.shape[0] == he and model.c_o.kernel.shape[0] == he


def test_paper_init(tiny_config):
  model = _model(tiny_config)
  assert float(jnp.abs(model.score.v_a.kernel[...]).max()) == 0.0
  u = np.asarray(model.cell.u_h.kernel[...])
  np.testing.assert_allclose(u.T @ u, np.eye(u.shape[0]), atol=1e-5)  # Orthogonal.
  zr = np.asarray(model.cell.u_zr.kernel[...])
  h = u.shape[0]
  np.testing.assert_allclose(zr[:, :h].T @ zr[:, :h], np.eye(h), atol=1e-5)
  assert 0.0005 < float(jnp.std(model.score.w_a.kernel[...])) < 0.002
  assert 0.005 < float(jnp.std(model.w_o.kernel[...])) < 0.02


def test_bfloat16_compute_keeps_float32_params(tiny_config):
  """The bfloat16 model's logits are the float32 model's to within 1% of their spread. The
  output bias is set as training leaves it, near the words' log-frequencies (about 6 above the
  spread here): a model that rounded its logits to bfloat16 after the bias would be off by
  several per cent, and the tolerance is checked to catch that."""
  tiny_config.model.dtype = "bfloat16"
  model = randomise(_model(tiny_config), scale=0.1)
  model.w_o.bias[...] = model.w_o.bias[...] + 6.0
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  b = random_batch(seed=6, vocab=VOCAB)
  logits, alpha = model(b["src"], b["src_mask"], b["tgt_in"], return_alpha=True)
  assert logits.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(logits)))
  tiny_config.model.dtype = "float32"
  ref = build_model(tiny_config.model, VOCAB, VOCAB + 3, rngs=nnx.Rngs(0))
  nnx.update(ref, nnx.state(model))
  want = np.asarray(ref(b["src"], b["src_mask"], b["tgt_in"]), np.float64)
  spread = np.abs(want - want.mean(-1, keepdims=True)).max()
  tolerance = 0.01 * spread
  np.testing.assert_allclose(np.asarray(logits), want, rtol=0, atol=tolerance)
  rounded = np.asarray(logits.astype(jnp.bfloat16).astype(jnp.float32), np.float64)
  assert np.abs(rounded - want).max() > 2 * tolerance  # A rounding bug the check would see.


def test_unknown_model_name(tiny_config):
  tiny_config.model.name = "transformer"
  with pytest.raises(
    ValueError, match="unknown model 'transformer'.*rnnencdec, rnnencdec_bi, rnnsearch"
  ):
    build_model(tiny_config.model, VOCAB, VOCAB, rngs=nnx.Rngs(0))


def test_maxout_takes_the_max_of_adjacent_pairs():
  from seq2seq.model import layers

  x = jnp.asarray([[1.0, 5.0, 3.0, 2.0, -1.0, -4.0]])
  np.testing.assert_array_equal(np.asarray(layers.maxout(x)), [[5.0, 3.0, -1.0]])


def test_bfloat16_logits_are_float32_and_the_loss_matches_float32(tiny_config):
  """The output projection accumulates in float32 and adds its bias in float32: the logits keep
  more than bfloat16's 8 bits, and the bf16 model's loss is within 1e-4 of the float32 model's
  (relative). The output bias is random around 6, as training leaves it, so the loss is far
  from the uniform one and a model that rounded its logits to bfloat16 would miss by 3e-4."""
  b = random_batch(seed=6, vocab=VOCAB)
  bias = np.random.default_rng(0).normal(size=VOCAB + 3) * 2.0 + 6.0
  losses = {}
  loss = lambda logits: float(
    np.divide(*objective.cross_entropy(logits, b["tgt_out"], b["tgt_mask"]))
  )
  for dtype in ("float32", "bfloat16"):
    tiny_config.model.dtype = dtype
    model = randomise(_model(tiny_config), scale=0.1)
    model.w_o.bias[...] = jnp.asarray(bias, jnp.float32)
    logits = model(b["src"], b["src_mask"], b["tgt_in"])
    assert logits.dtype == jnp.float32
    losses[dtype] = loss(logits)
  assert abs(losses["float32"] - np.log(VOCAB + 3)) > 1.0  # Far from the uniform loss.
  rounded = logits.astype(jnp.bfloat16).astype(jnp.float32)
  assert np.mean(np.asarray(logits) != np.asarray(rounded)) > 0.9, "bf16 logits: rounded"
  assert losses["bfloat16"] == pytest.approx(losses["float32"], rel=1e-4)
  assert loss(rounded) != pytest.approx(losses["float32"], rel=1e-4)  # The check can tell.


def test_bfloat16_matmul_is_the_float32_product_of_the_rounded_factors():
  """`layers.matmul` under bfloat16, forward and backward: each product is that of the factors
  rounded to bfloat16, accumulated in float32, and each gradient comes back in its factor's
  dtype without rounding."""
  from seq2seq.model import layers

  rng = np.random.default_rng(0)
  x, w, c = (
    jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((2, 6, 40), (40, 24), (2, 6, 24))
  )

  def loss(x, w):
    return jnp.sum(layers.matmul(x, w, jnp.bfloat16) * c)

  def bf(a):
    return np.asarray(a.astype(jnp.bfloat16).astype(jnp.float32), np.float64)

  out = layers.matmul(x, w, jnp.bfloat16)
  dx, dw = jax.grad(loss, argnums=(0, 1))(x, w)
  assert out.dtype == dx.dtype == dw.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(out), bf(x) @ bf(w), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(dx), bf(c) @ bf(w).T, rtol=1e-5, atol=1e-5)
  flat_x, flat_c = bf(x).reshape(-1, 40), bf(c).reshape(-1, 24)
  np.testing.assert_allclose(np.asarray(dw), flat_x.T @ flat_c, rtol=1e-5, atol=1e-5)
  # Not rounded to bfloat16 afterwards: most entries need more than its 8 bits.
  assert np.mean(np.asarray(dw) != bf(dw)) > 0.9

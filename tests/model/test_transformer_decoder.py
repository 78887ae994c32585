"""The Transformer decoder (`model.decoder="transformer(...)"`): against a float64 loop over one
sentence written here; decoding one position at a time from cached keys and values against the
whole target at once, for every registered score and normaliser per head; causality; the
reported layer and head; and the combinations it refuses."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import (
  build_model,
  check_trains,
  dense64,
  float64,
  layer_norm64,
  random_batch,
  randomise,
)

from configs import tiny
from seq2seq import settings
from seq2seq.model import models, normalisers, scores, transformer

VOCAB = 40


def _config(decoder="transformer(layers=2, heads=2, inner=24)", **model):
  cfg = tiny.get_config()
  cfg.model.encoder = "transformer(layers=1, heads=2, inner=24)"
  cfg.model.decoder, cfg.model.score = decoder, "scaled"
  for key, value in model.items():
    cfg.model[key] = value
  settings.validate(cfg)
  return cfg


def _model(cfg, seed=0):
  return randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(seed)))


def _batch(seed=5):
  return {k: jnp.asarray(v) for k, v in random_batch(seed=seed, vocab=VOCAB).items()}


# ---------------------------------------------------------------- a float64 reference
def _softmax(e):
  w = np.exp(e - e.max(-1, keepdims=True))
  return w / w.sum(-1, keepdims=True)


def _heads(att, q, k, v, heads, causal):
  """Scaled dot-product attention of q [T, D] over k, v [S, D], `heads` heads: (the outputs
  before the output projection [T, D], the weights [heads, T, S])."""
  dim = q.shape[-1] // heads
  outs, weights = [], []
  for h in range(heads):
    part = slice(h * dim, (h + 1) * dim)
    e = q[:, part] @ k[:, part].T / np.sqrt(dim)
    if causal:
      e = np.where(np.tril(np.ones(e.shape)) > 0, e, -np.inf)
    w = _softmax(e)
    outs.append(w @ v[:, part])
    weights.append(w)
  return dense64(att.out, np.concatenate(outs, -1)), np.stack(weights)


def _reference(model, annotations, tgt_row):
  """Logits [T, V] and each layer's cross-attention [heads, T, S] of one sentence, from its
  annotations [S, H] (real words only) and target input ids [T], as the paper writes the
  pre-norm decoder."""
  s = model.decoder.settings
  x = float64(model.embed.embedding)[tgt_row] @ float64(model.dec_project.kernel)
  x = x * np.sqrt(x.shape[-1])  # The paper's scaling of the embeddings.
  x = x + np.asarray(transformer.sinusoids(len(tgt_row), x.shape[-1]), np.float64)
  crosses = []
  for k in range(1, s.layers + 1):
    layer = getattr(model, f"dec_layer_{k}")
    n = layer_norm64(layer.self_norm, x)
    q = dense64(layer.self_attention.query, n)
    kk, v = np.split(dense64(layer.self_attention.key_value, n), 2, axis=-1)
    x = x + _heads(layer.self_attention, q, kk, v, s.heads, causal=True)[0]
    cross = layer.cross_attention
    q = dense64(cross.query, layer_norm64(layer.cross_norm, x))
    kk, v = np.split(dense64(cross.key_value, annotations), 2, axis=-1)
    out, weights = _heads(cross, q, kk, v, s.heads, causal=False)
    x, _ = x + out, crosses.append(weights)
    ff = layer.feed_forward
    hidden = np.maximum(dense64(ff.up, layer_norm64(layer.feed_forward_norm, x)), 0.0)
    x = x + dense64(ff.down, hidden)
  return dense64(model.w_o, layer_norm64(model.dec_norm, x)), crosses


def test_the_decoder_matches_a_float64_loop_over_one_sentence():
  cfg = _config()
  model = _model(cfg)
  b = _batch()
  logits, aux = model(b["src"], b["src_mask"], b["tgt_in"], return_aux=True)
  annotations = model.encoder(b["src"], b["src_mask"]).annotations
  for row, length in enumerate(np.asarray(b["src_mask"]).sum(1)):
    want, crosses = _reference(
      model, float64(annotations[row, :length]), np.asarray(b["tgt_in"][row])
    )
    np.testing.assert_allclose(logits[row], want, rtol=1e-4, atol=1e-5)
    # The reported attention: the top layer's heads averaged (alignment_layer=0, head=0).
    np.testing.assert_allclose(aux["alpha"][row, :, :length], crosses[-1].mean(0), atol=1e-5)
    assert not np.any(np.asarray(aux["alpha"][row, :, length:]))  # Padding: no weight.


# ------------------------------------------------- incremental decoding against the full pass
def _check_incremental(model, b, extra_slots=0):
  """Decoding position by position from caches of T + `extra_slots` slots gives the full
  pass's logits and reported attention at every position."""
  forced, alpha = model(b["src"], b["src_mask"], b["tgt_in"], return_alpha=True)
  steps = b["tgt_in"].shape[1]
  enc = model.encode(b["src"], b["src_mask"], steps=steps + extra_slots)
  state = enc.init_state
  step = nnx.jit(lambda m, e, s, y: m.decoder_step(e, s, y))
  for i in range(steps):
    state, logits, alpha_i = step(model, enc, state, b["tgt_in"][:, i])
    np.testing.assert_allclose(logits, forced[:, i], rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(alpha_i, alpha[:, i], rtol=2e-5, atol=2e-6)
  assert np.asarray(state.s.position).tolist() == [steps] * b["src"].shape[0]


@pytest.mark.parametrize("score", scores.names())
def test_incremental_decoding_equals_the_full_pass_for_every_score_per_head(score):
  cfg = _config(score=score)
  _check_incremental(_model(cfg), _batch(), extra_slots=3)


@pytest.mark.parametrize("normaliser", [n for n in normalisers.REGISTRY.names() if n != "softmax"])
def test_incremental_decoding_equals_the_full_pass_for_every_normaliser(normaliser):
  cfg = _config(normaliser=normaliser)
  model = _model(cfg)
  _check_incremental(model, _batch())
  alpha = model(*(_batch()[k] for k in ("src", "src_mask", "tgt_in")), return_alpha=True)[1]
  np.testing.assert_allclose(np.asarray(alpha).sum(-1), 1.0, rtol=1e-5)


def test_learned_positions_decode_as_they_train_and_stop_at_their_table():
  cfg = _config("transformer(layers=1, heads=4, positions=learned, max_positions=9)")
  model = _model(cfg)
  _check_incremental(model, _batch(), extra_slots=2)
  b = _batch()
  past = re.escape("10 positions are past the learned positions' 9 (model.decoder's")
  with pytest.raises(ValueError, match=past):  # Decoding up to 10 words.
    enc = model.encode(b["src"], b["src_mask"], steps=10)
    model.decoder_step(enc, enc.init_state, b["tgt_in"][:, 0])
  with pytest.raises(ValueError, match=past):  # Scoring 10 words.
    model(b["src"], b["src_mask"], jnp.zeros((4, 10), jnp.int32))


def test_the_fused_scaled_product_is_the_registry_score_run_per_head():
  cfg = _config()
  model = _model(cfg)
  cross = model.dec_layer_1.cross_attention
  assert cross.fused
  b = _batch()
  annotations = model.encoder(b["src"], b["src_mask"]).annotations
  memory = cross.prepare(annotations)
  q = jax.random.normal(jax.random.key(0), (4, 2, 6, cross.head_dim))
  np.testing.assert_allclose(
    cross.scores(q, memory), cross.scores(q, memory, fused=False), rtol=1e-5, atol=1e-6
  )


def test_a_target_word_changes_only_the_positions_after_it():
  model = _model(_config())
  b = _batch()
  changed = b["tgt_in"].at[:, 3].set((b["tgt_in"][:, 3] + 1) % VOCAB)
  before = model(b["src"], b["src_mask"], b["tgt_in"])
  after = model(b["src"], b["src_mask"], changed)
  np.testing.assert_array_equal(before[:, :3], after[:, :3])
  assert np.all(np.abs(np.asarray(before[:, 3:] - after[:, 3:])).max(-1) > 0)


@pytest.mark.parametrize("layer,head", [(1, 2), (2, 1), (1, 0)])
def test_the_reported_attention_is_the_chosen_layer_and_head(layer, head):
  spec = f"transformer(layers=2, heads=2, inner=24, alignment_layer={layer}, alignment_head={head})"
  model = _model(_config(spec))
  b = _batch()
  _, aux = model(b["src"], b["src_mask"], b["tgt_in"], return_aux=True)
  heads = aux["alpha_heads"]  # [B, T, heads, S] of the chosen layer.
  want = heads.mean(2) if head == 0 else heads[:, :, head - 1]
  np.testing.assert_array_equal(aux["alpha"], want)
  # The layer: its heads are what the layer's cross-attention gives.
  enc = model.encode(b["src"], b["src_mask"])
  x = model.decoder.project(model, model.embed(b["tgt_in"]))
  _, _, _, extras = model.decoder.teacher_forced(model, enc.decoder, x)
  np.testing.assert_array_equal(extras["alpha_heads"], heads)
  np.testing.assert_array_equal(extras["alpha_layers"][:, :, layer - 1], heads)


def test_guided_alignment_supervises_the_reported_head():
  """`train.loss_terms=supervision` reads the reported attention: with alignment_head=1, the
  supervision's gradient reaches the first head's query projection and not the second's."""
  from seq2seq.training import objective

  cfg = _config("transformer(layers=1, heads=2, inner=24, alignment_head=1)")
  model = _model(cfg)
  b = _batch()
  gold = jax.nn.one_hot(jnp.zeros(b["tgt_in"].shape, jnp.int32), b["src"].shape[1])

  def loss(m):
    _, aux = m(b["src"], b["src_mask"], b["tgt_in"], return_aux=True)
    return objective.attention_supervision_loss(aux["alpha"], gold)

  grads = nnx.jit(nnx.grad(loss))(model)  # One program (outside jit: 262 of them).
  kernel = np.asarray(grads.dec_layer_1.cross_attention.query.kernel[...])
  half = kernel.shape[1] // 2
  assert np.abs(kernel[:, :half]).max() > 0
  assert np.abs(kernel[:, half:]).max() == 0


def test_it_trains():
  cfg = _config(dropout=0.1)
  check_trains(cfg, random_batch(seed=2, vocab=VOCAB), VOCAB)


@pytest.mark.parametrize(
  "field,value,message",
  [
    ("name", "rnnencdec", "does not combine with model.name=rnnencdec"),
    ("attention", "local_m", "does not combine with model.attention=local_m"),
    ("features", "coverage", "does not combine with model.features=coverage"),
    ("addons", "intra", "model.addons=intra adds a context to every decoder step"),
  ],
)
def test_what_extends_one_recurrent_attention_is_refused_in_one_line(field, value, message):
  cfg = _config()
  cfg.model[field] = value
  if field == "features":
    cfg.model.score = "additive"
  with pytest.raises(ValueError, match=re.escape(message)) as refused:
    settings.validate(cfg)
  assert "\n" not in str(refused.value)


def test_a_second_source_is_refused_in_one_line():
  cfg = _config()
  with pytest.raises(ValueError, match="does not combine with a second source=en\\+de"):
    models.ModelSettings.from_config(cfg.model, sources=2)

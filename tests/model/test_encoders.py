"""The source encoder (`model.encoder`): GRU or LSTM cells, stacked layers, one direction or both,
the reversed source, residual connections, against a float64 loop over each sentence's real
words written here; and every combination in both decoders."""

import re

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import (
  build_model,
  check_steps_match_forced,
  check_trains,
  dense64,
  layer_norm64,
  random_batch,
  randomise,
  reference_cell_step,
)

from configs import tiny
from seq2seq import settings

VOCAB = 50


def _param(x) -> np.ndarray:
  return np.asarray(x[...], np.float64)


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _step(cell, kind, state, x):
  """One step of `cell` on the input x [I] (its projection included): the new state."""
  x_proj = x @ _param(cell.project.kernel) + _param(cell.project.bias)
  return reference_cell_step(cell, kind, state, x_proj)


def _run(cell, kind, xs, backwards):
  """Outputs [L, He] of one cell over xs [L, I] (in source order) and its last output."""
  he = cell.hidden
  state = (np.zeros(he), np.zeros(he)) if kind == "lstm" else np.zeros(he)
  outs = [None] * len(xs)
  order = range(len(xs) - 1, -1, -1) if backwards else range(len(xs))
  for t in order:
    state = _step(cell, kind, state, xs[t])
    outs[t] = state[0] if kind == "lstm" else state
  return np.stack(outs), outs[order[-1]]


def _reference(encoder, s, src_row, length):
  """Annotations [length, width] and (fwd last, bwd first) of one sentence's real words."""
  x = _param(encoder.embed.embedding)[src_row[:length]]
  fwd_last = bwd_first = None
  for k in range(1, s["layers"] + 1):
    fwd = encoder.fwd if k == 1 else getattr(encoder, f"fwd_{k}")
    if s["bidirectional"]:
      bwd = encoder.bwd if k == 1 else getattr(encoder, f"bwd_{k}")
      f_out, fwd_last = _run(fwd, s["cell"], x, backwards=False)
      b_out, bwd_first = _run(bwd, s["cell"], x, backwards=True)
      out = np.concatenate([f_out, b_out], axis=-1)
    else:
      out, last = _run(fwd, s["cell"], x, backwards=s["reverse"])
      fwd_last, bwd_first = (None, last) if s["reverse"] else (last, None)
    x = out + x if (k > 1 and s["residual"]) else out
  return x, fwd_last, bwd_first


ENCODERS = [
  {"cell": "gru", "layers": 1, "bidirectional": True, "residual": False, "reverse": False},
  {"cell": "lstm", "layers": 2, "bidirectional": True, "residual": True, "reverse": False},
  {"cell": "lstm", "layers": 3, "bidirectional": False, "residual": False, "reverse": True},
  {"cell": "gru", "layers": 2, "bidirectional": False, "residual": True, "reverse": False},
]


def _spec(s):
  return "rnn(" + ", ".join(f"{k}={str(v).lower()}" for k, v in s.items()) + ")"


def _name(s):
  way = "bi" if s["bidirectional"] else ("reversed" if s["reverse"] else "forward")
  return f"{s['cell']}{s['layers']}-{way}" + ("-residual" if s["residual"] else "")


def _config(encoder, decoder="paper", **model):
  cfg = tiny.get_config()
  spec = encoder if isinstance(encoder, str) else _spec(encoder)
  cfg.model.encoder, cfg.model.decoder, cfg.model.score = spec, decoder, "general"
  for key, value in model.items():
    cfg.model[key] = value
  settings.validate(cfg)
  return cfg


@pytest.mark.parametrize("encoder", ENCODERS, ids=_name)
def test_encoder_matches_a_float64_loop_over_the_real_words(encoder):
  cfg = _config(encoder)
  model = randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0)))
  b = random_batch(seed=4, vocab=VOCAB)
  enc = model.encoder(jnp.asarray(b["src"]), jnp.asarray(b["src_mask"]))
  width = (2 if encoder["bidirectional"] else 1) * cfg.model.enc_hidden
  assert enc.annotations.shape == (*b["src"].shape, width)
  for row, length in enumerate(b["src_mask"].sum(1)):
    want, fwd_last, bwd_first = _reference(model.encoder, encoder, b["src"][row], int(length))
    np.testing.assert_allclose(enc.annotations[row, :length], want, rtol=1e-5, atol=1e-6)
    for got, expected in ((enc.fwd_last, fwd_last), (enc.bwd_first, bwd_first)):
      assert (got is None) == (expected is None)
      if expected is not None:
        np.testing.assert_allclose(got[row], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("decoder", ["paper", "luong(layers=2)"])
@pytest.mark.parametrize("encoder", ENCODERS[1:], ids=_name)
def test_every_encoder_decodes_as_it_trains_in_both_decoders(encoder, decoder):
  cfg = _config(encoder, decoder)
  model = randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(1)))
  b = {k: jnp.asarray(v) for k, v in random_batch(seed=5, vocab=VOCAB).items()}
  check_steps_match_forced(model, b)


@pytest.mark.parametrize("encoder", ENCODERS[1:3], ids=_name)
def test_stacked_encoders_train_in_bfloat16_with_dropout_between_layers(encoder):
  cfg = _config(encoder, "luong(layers=2)", dtype="bfloat16", dropout=0.2)
  cfg.train.optimizer, cfg.train.learning_rate = "adam", 1e-2
  check_trains(cfg, random_batch(seed=3, vocab=VOCAB), VOCAB)


def test_encoder_settings_are_checked():
  cfg = tiny.get_config()
  for spec, message in [
    ("rnn(cell=rnn)", "cell must be one of gru, lstm"),
    ("rnn(layers=0)", "layers must be at least 1"),
    ("rnn(reverse=true)", "set bidirectional=false"),
    ("transformer(layers=0)", "layers and heads must be at least 1"),
    ("transformer(positions=rotary)", "positions must be one of sinusoidal, learned"),
  ]:
    cfg.model.encoder = spec
    with pytest.raises(ValueError, match=re.escape(message)):
      settings.validate(cfg)


# The Transformer encoder (`transformer(...)`), against a float64 loop over each sentence's real
# words: what padding adds to a batch changes nothing.
TRANSFORMER = "transformer(layers=2, heads=2, inner=24, positions=sinusoidal)"


def _attention(att, x):
  """Self-attention of x [L, D] over itself, all heads."""
  q = dense64(att.query, x)
  k, v = np.split(dense64(att.key_value, x), 2, axis=-1)
  heads = []
  for h in range(att.heads):
    part = slice(h * att.head_dim, (h + 1) * att.head_dim)
    scores = q[:, part] @ k[:, part].T / np.sqrt(att.head_dim)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    heads.append((weights / weights.sum(-1, keepdims=True)) @ v[:, part])
  return dense64(att.out, np.concatenate(heads, axis=-1))


def _transformer_reference(encoder, src_row, length):
  """Annotations [length, width] and the summary tanh(W_m mean h) of one sentence's words."""
  from seq2seq.model import transformer

  x = _param(encoder.embed.embedding)[src_row[:length]] @ _param(encoder.project.kernel)
  x = x * np.sqrt(encoder.width)  # The paper's scaling of the embeddings.
  x = x + np.asarray(transformer.sinusoids(length, encoder.width), np.float64)
  for k in range(1, encoder.settings.layers + 1):
    layer = getattr(encoder, f"layer_{k}")
    x = x + _attention(layer.attention, layer_norm64(layer.attention_norm, x))
    ff = layer.feed_forward
    hidden = np.maximum(dense64(ff.up, layer_norm64(layer.feed_forward_norm, x)), 0.0)
    x = x + dense64(ff.down, hidden)
  x = layer_norm64(encoder.final_norm, x)
  return x, np.tanh(dense64(encoder.summary, x.mean(0)))


def _transformer_config(decoder="paper", **model):
  return _config(TRANSFORMER, decoder, **model)


def test_the_transformer_encoder_matches_a_float64_loop_over_the_real_words():
  cfg = _transformer_config()
  model = randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0)))
  b = random_batch(seed=4, vocab=VOCAB)
  enc = model.encoder(jnp.asarray(b["src"]), jnp.asarray(b["src_mask"]))
  assert enc.annotations.shape == (*b["src"].shape, 2 * cfg.model.enc_hidden)
  assert enc.bwd_first is None  # Its summary stands as a one-direction encoder's last output.
  for row, length in enumerate(b["src_mask"].sum(1)):
    want, summary = _transformer_reference(model.encoder, b["src"][row], int(length))
    np.testing.assert_allclose(enc.annotations[row, :length], want, rtol=1e-4, atol=1e-5)
    assert not np.any(np.asarray(enc.annotations[row, length:]))  # Padding: zeros.
    np.testing.assert_allclose(enc.fwd_last[row], summary, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("decoder", ["paper", "luong(layers=2)"])
def test_the_transformer_encoder_decodes_as_it_trains_in_both_decoders(decoder):
  cfg = _transformer_config(decoder)
  model = randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(1)))
  b = {k: jnp.asarray(v) for k, v in random_batch(seed=5, vocab=VOCAB).items()}
  check_steps_match_forced(model, b)


def test_the_transformer_encoder_trains_in_bfloat16_with_dropout_and_learned_positions():
  cfg = _transformer_config("luong(layers=2)", dtype="bfloat16", dropout=0.2)
  cfg.model.encoder = "transformer(layers=2, heads=2, positions=learned, max_positions=64)"
  settings.validate(cfg)
  cfg.train.optimizer, cfg.train.learning_rate = "adam", 1e-2
  check_trains(cfg, random_batch(seed=3, vocab=VOCAB), VOCAB)


def test_transformer_heads_must_divide_the_width():
  cfg = tiny.get_config()
  cfg.model.encoder = "transformer(heads=5)"  # The tiny width, 2 x 16, is not a multiple of 5.
  with pytest.raises(ValueError, match=r"heads \(5\) must divide the model width \(32\)"):
    build_model(settings.validate(cfg).model, VOCAB, VOCAB, rngs=nnx.Rngs(0))

"""Tied target embeddings and layer-normalised GRUs (`model.tie_embeddings`, `model.layer_norm`),
and a bfloat16 train step through each output layer, decoder and attend-to switch."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, check_trains, random_batch, random_lexicon, randomise

from configs import tiny
from experiments.lib import configs
from seq2seq import settings
from seq2seq.data import lexicon
from seq2seq.model import layers
from seq2seq.training import train_state

VOCAB = 30


def test_tied_output_layer_reads_the_target_embeddings():
  cfg = tiny.get_config()
  cfg.model.tie_embeddings = True  # tiny: maxout 16 = emb 16.
  model = randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0)))
  assert not hasattr(model, "w_o")
  b = random_batch(seed=1, batch=2, src_len=5, tgt_len=4, vocab=VOCAB)
  args = [jnp.asarray(b[k]) for k in ("src", "src_mask", "tgt_in")]
  logits = np.asarray(model(*args))
  # Changing the embedding of word 9 changes exactly its logit column (and later steps' inputs
  # only where word 9 is fed, so compare at the first step, whose input is BOS).
  model.embed.embedding[...] = model.embed.embedding[...].at[9].multiply(2.0)
  changed = np.asarray(model(*args))
  assert not np.allclose(changed[:, 0, 9], logits[:, 0, 9])
  np.testing.assert_allclose(
    np.delete(changed[:, 0], 9, -1), np.delete(logits[:, 0], 9, -1), rtol=1e-6
  )
  cfg.model.maxout_dim = 8
  with pytest.raises(ValueError, match=r"model.maxout_dim \(8\) must equal model.emb_dim \(16\)"):
    settings.validate(cfg)


def test_gate_norm_normalises_each_gate_block_on_its_own():
  norm = layers.GateNorm(3, 4)
  x = jnp.asarray(np.random.default_rng(0).normal(3.0, 2.0, (2, 12)), jnp.float32)
  y = np.asarray(norm(x)).reshape(2, 3, 4)
  np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-5)
  np.testing.assert_allclose(y.std(-1), 1.0, atol=1e-3)


def test_a_layer_normalised_model_trains_and_starts_from_unit_gains():
  cfg = tiny.get_config()
  cfg.model.layer_norm = True
  cfg.train.optimizer, cfg.train.learning_rate = "adam", 1e-2
  state = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), VOCAB, VOCAB)
  gains = [v for p, v in nnx.to_flat_state(state.params) if p[-1] == "gain"]
  assert len(gains) == 3 * 3 and all(np.all(np.asarray(g[...]) == 1.0) for g in gains)  # 3 GRUs.
  b = {k: jnp.asarray(v) for k, v in random_batch(seed=2, vocab=VOCAB).items()}
  step = jax.jit(functools.partial(train_state.train_step, run=settings.validate(cfg)))
  first = None
  for i in range(40):
    state, metrics = step(state, b, jax.random.key(i))
    first = float(metrics["loss"]) if first is None else first
  assert float(metrics["loss"]) < 0.5 * first


def test_the_conditional_gru_decodes_step_by_step_as_it_trains():
  cfg = tiny.get_config()
  cfg.model.decoder = "cgru"
  model = randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0)))
  paths = {path[0] for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))}
  assert "cell2" in paths and "context_proj" not in paths
  b = random_batch(seed=3, batch=3, src_len=6, tgt_len=5, vocab=VOCAB)
  src, mask, tgt_in = (jnp.asarray(b[k]) for k in ("src", "src_mask", "tgt_in"))
  forced, alpha = model(src, mask, tgt_in, return_alpha=True)
  enc = model.encode(src, mask)
  state = enc.init_state
  step = nnx.jit(lambda m, e, s, y: m.decoder_step(e, s, y))  # One compilation for every step.
  for i in range(tgt_in.shape[1]):
    state, logits, step_alpha = step(model, enc, state, tgt_in[:, i])
    np.testing.assert_allclose(np.asarray(logits), np.asarray(forced[:, i]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(step_alpha), np.asarray(alpha[:, i]), atol=1e-6)
  # The attention is queried by s'_i, so it already depends on the step's own input word.
  changed = tgt_in.at[:, 0].set((tgt_in[:, 0] + 5) % (VOCAB - 4) + 4)
  _, alpha_changed = model(src, mask, changed, return_alpha=True)
  assert not np.allclose(np.asarray(alpha_changed[:, 0]), np.asarray(alpha[:, 0]))
  cfg.model.decoder = "lstm"
  with pytest.raises(
    ValueError, match=r"unknown decoder 'lstm' \(model.decoder\); valid: paper, cgru, luong"
  ):
    settings.validate(cfg)


def _bfloat16_config(overrides):
  """configs/tiny.py in bfloat16 with Adam and the dotted `overrides`, validated as a whole."""
  cfg = tiny.get_config()
  cfg.model.dtype = "bfloat16"
  cfg.train.optimizer, cfg.train.learning_rate = "adam", 1e-2
  cfg = configs.apply_overrides(cfg, overrides)
  settings.validate(cfg)
  return cfg


def _trains_in_bfloat16(cfg, batch, **state_args):
  """Eight bfloat16 train steps on one batch: finite losses that fall, float32 parameters."""
  check_trains(cfg, batch, VOCAB, **state_args)


@pytest.mark.parametrize(
  "overrides",
  [
    {},
    {"train.softmax": "sampled(size=12)"},
    {"model.tie_embeddings": True},
    {"model.decoder": "cgru", "model.layer_norm": True, "model.features": "coverage"},
    {"model.attention": "multihead"},
  ],
  ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain",
)
def test_a_bfloat16_train_step_compiles_runs_and_learns(overrides):
  """bfloat16 products accumulated in float32 (`layers.matmul`) through a whole train step of
  each output layer and decoder: XLA's CPU runtime has no bfloat16 x bfloat16 = float32 product
  outside its fast path, so a form it cannot execute fails here (the sampled softmax's gathered
  kernel would, without the barrier that keeps its gradients apart)."""
  _trains_in_bfloat16(_bfloat16_config(overrides), random_batch(seed=3, vocab=VOCAB))


@pytest.mark.parametrize("sources", [1, 2])
def test_what_attention_attends_to_trains_in_bfloat16(sources, tmp_path):
  """The switches of "what attention can attend to" through a bfloat16 train step: copying,
  the lexicon bias and intra-attention in one model (one compilation), two sources in another
  (they combine with none of the three)."""
  batch, state_args = random_batch(seed=3, vocab=VOCAB), {}
  if sources == 1:
    path = str(tmp_path / lexicon.FILE)
    random_lexicon(VOCAB).save(path)
    switches = {"model.addons": f"copy+lexicon(table={path})+intra(score=dot)"}
    cfg = _bfloat16_config(switches)
    state_args["copy_map"] = np.arange(VOCAB, dtype=np.int32)  # Every source word spelled alike.
  else:  # `src` [B, 2S]: two sentences side by side.
    two = {"data.local.src_lang": "en+de", "data.local.tgt_lang": "fr"}
    cfg = _bfloat16_config({"data.corpus": "local", "model.multi_source": "gate", **two})
    other = random_batch(seed=4, vocab=VOCAB)
    for key in ("src", "src_mask"):
      batch[key] = np.concatenate([batch[key], other[key]], axis=1)
  _trains_in_bfloat16(cfg, batch, **state_args)

"""Contracts every decoder (`decoders.REGISTRY`) and every add-on (`addons.REGISTRY`) keeps, on a
tiny model of each pair, parametrised from the registries so a new component is tested here for
free: search's step-by-step decoder gives the teacher-forced scores, a checkpoint restores the
same outputs, and a bfloat16 compute dtype runs with finite outputs. A pair the settings refuse
(intra-attention with Luong's decoder) is skipped, naming the refusal."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, check_steps_match_forced, random_batch, random_lexicon, randomise

from configs import tiny
from seq2seq import checkpoints, settings
from seq2seq.data import tokenizer as tok
from seq2seq.model import addons, decoders, models
from seq2seq.training import train_state

VOCAB = 30  # Source and target ids alike.
CASES = [(d, a) for d in decoders.names() for a in ("none", *addons.ORDER)]
IDS = [f"{d}-{a}" for d, a in CASES]


def config(decoder: str, addon: str, dtype: str = "float32"):
  """configs/tiny.py with `decoder`, the add-on turned on from its default spec (its name alone:
  `model.addons=NAME`) and the compute dtype; skips a pair the model settings refuse."""
  cfg = tiny.get_config()
  cfg.model.decoder, cfg.model.dtype = decoder, dtype
  if addon != "none":
    cfg.model.addons = addon
  try:
    models.ModelSettings.from_config(cfg.model)
  except ValueError as e:
    pytest.skip(f"refused by the settings: {e}")
  return cfg


def tables() -> dict:
  """What the add-ons store: a copy map (source ids 4..19 have target twins) and a lexicon."""
  copy_map = np.full(VOCAB, -1, np.int32)
  copy_map[[tok.PAD_ID, tok.BOS_ID, tok.EOS_ID]] = [tok.PAD_ID, tok.BOS_ID, tok.EOS_ID]
  copy_map[4:20] = np.arange(4, 20)
  return {"copy_map": copy_map, "lexicon": random_lexicon(VOCAB)}


def batch() -> dict:
  b = random_batch(seed=3, batch=3, src_len=6, tgt_len=5, vocab=VOCAB)
  return {k: jnp.asarray(v) for k, v in b.items()}


def test_every_addon_is_built_from_its_default_spec_and_only_when_listed():
  assert sorted(addons.ORDER) == sorted(addons.names())
  for name in addons.ORDER:
    cls = addons.get(name)
    cfg = tiny.get_config()
    plain = models.ModelSettings.from_config(cfg.model)
    assert not any(isinstance(a, cls) for a in addons.make_addons(plain, cls.kind).values())
    cfg.model.addons = name
    made = addons.make_addons(models.ModelSettings.from_config(cfg.model), cls.kind)
    assert isinstance(made.get(name), cls) and made[name].settings == cls.Settings()


@pytest.mark.parametrize("addon", addons.ORDER)
def test_the_settings_refuse_what_an_add_on_declares_it_cannot_serve(addon):
  """What an add-on declares it needs (`needs_attention`, `needs_tables`, `reads_two_sources`)
  is what `ModelSettings.check` refuses, each in one line naming the add-on."""
  cls = addons.get(addon)
  cfg = tiny.get_config()
  cfg.model.addons = addon
  cases = [("name", "rnnencdec", cls.needs_attention), ("name", "agreement", cls.needs_tables)]
  for field, value, refused in cases:
    changed = tiny.get_config()
    changed.model.addons, changed.model[field] = addon, value
    if refused:
      with pytest.raises(ValueError, match=f"model.addons={addon}"):
        models.ModelSettings.from_config(changed.model)
  if not cls.reads_two_sources:
    with pytest.raises(ValueError, match=f"do not combine with model.addons={addon}"):
      models.ModelSettings.from_config(cfg.model, sources=2)


def test_the_order_an_add_on_list_is_written_in_changes_nothing():
  """`model.addons` lists add-ons in any order: they are read in `addons.ORDER` (context
  providers, then output modifiers), so the model and its random initialisation are the same."""
  cfg = tiny.get_config()
  cfg.model.addons = "+".join(reversed(addons.ORDER))
  written = models.ModelSettings.from_config(cfg.model)
  assert [s.name for s in written.addons] == addons.ORDER
  cfg.model.addons = "+".join(addons.ORDER)
  assert models.ModelSettings.from_config(cfg.model) == written
  cfg.model.addons = f"{addons.ORDER[0]}+{addons.ORDER[0]}"
  with pytest.raises(ValueError, match="twice"):
    models.ModelSettings.from_config(cfg.model)


@pytest.mark.parametrize(("decoder", "addon"), CASES, ids=IDS)
def test_decoder_steps_give_the_forced_scores(decoder, addon):
  cfg = config(decoder, addon)
  model = build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0), **tables())
  check_steps_match_forced(randomise(model), batch())


@pytest.mark.parametrize(("decoder", "addon"), CASES, ids=IDS)
def test_a_checkpoint_restores_the_same_outputs(decoder, addon, tmp_path):
  run = settings.validate(config(decoder, addon))
  made = lambda seed: train_state.create_train_state(
    run, jax.random.key(seed), VOCAB, VOCAB, **tables()
  )
  state, fresh = made(0), made(1)
  state = state.replace(params=nnx.state(randomise(state.model()), nnx.Param))
  b = batch()
  outputs = lambda s: np.asarray(s.model()(b["src"], b["src_mask"], b["tgt_in"]))
  ckpt = checkpoints.Checkpointer(tmp_path, 1)
  ckpt.save(state, None)
  restored, data = ckpt.restore(fresh, with_data=False)
  ckpt.close()
  assert data is None and int(restored.step) == int(state.step)
  assert not np.array_equal(outputs(fresh), outputs(state))  # The restore has work to do.
  np.testing.assert_array_equal(outputs(restored), outputs(state))


@pytest.mark.parametrize(("decoder", "addon"), CASES, ids=IDS)
def test_bfloat16_compute_runs_with_finite_outputs(decoder, addon):
  cfg = config(decoder, addon, dtype="bfloat16")
  model = randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0), **tables()))
  b = batch()
  logits, alpha = model(b["src"], b["src_mask"], b["tgt_in"], return_alpha=True)
  assert logits.dtype == jnp.float32 and bool(jnp.isfinite(logits).all())
  assert bool(jnp.isfinite(alpha).all())
  enc = model.encode(b["src"], b["src_mask"], steps=b["tgt_in"].shape[1])
  _, step_logits, step_alpha = model.decoder_step(enc, enc.init_state, b["tgt_in"][:, 0])
  assert bool(jnp.isfinite(step_logits).all()) and bool(jnp.isfinite(step_alpha).all())
  # Close to the float32 model's distribution over the same parameters.
  full = build_model(config(decoder, addon).model, VOCAB, VOCAB, rngs=nnx.Rngs(0), **tables())
  nnx.update(full, nnx.state(model, nnx.Param))
  p16, p32 = jax.nn.softmax(logits, -1), jax.nn.softmax(full(b["src"], b["src_mask"], b["tgt_in"]))
  np.testing.assert_allclose(np.asarray(p16), np.asarray(p32), atol=0.05)

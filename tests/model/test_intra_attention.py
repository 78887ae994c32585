"""Intra-attention over the decoder's own past (Cheng et al. 2016, `model.addons=intra`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, compiled, random_batch, randomise

from configs import tiny
from seq2seq import settings
from seq2seq.decoding import decode
from seq2seq.model import attention

VOCAB = 30


def intra_model(score="dot", seed=0):
  cfg = tiny.get_config()
  cfg.model.addons = f"intra(score={score})"
  return randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(seed)), seed=seed)


def intra_context(model, state):
  """The intra-attention context d_i the step after `state` reads."""
  addon = dict(model.addons)["intra"]
  return addon.read(model, state.addons["intra"], state.s)


def batch_args(seed=1):
  b = random_batch(seed=seed, batch=3, src_len=6, tgt_len=5, vocab=VOCAB)
  return jnp.asarray(b["src"]), jnp.asarray(b["src_mask"]), jnp.asarray(b["tgt_in"])


@pytest.mark.parametrize("score", ["dot", "additive", "general"])
def test_step_by_step_decoding_equals_the_teacher_forced_pass(score):
  model = intra_model(score)
  src, mask, tgt_in = batch_args()
  forced = np.asarray(compiled(type(model).__call__, model, src, mask, tgt_in))
  enc = compiled(type(model).encode, model, src, mask, steps=tgt_in.shape[1])
  state = enc.init_state
  step = nnx.jit(lambda m, e, s, y: m.decoder_step(e, s, y))  # One compilation for every step.
  for i in range(tgt_in.shape[1]):
    state, logits, _ = step(model, enc, state, tgt_in[:, i])
    np.testing.assert_allclose(np.asarray(logits), forced[:, i], rtol=1e-5, atol=1e-5)
  assert (
    np.asarray(state.addons["intra"].count).tolist() == [tgt_in.shape[1]] * 3
  )  # Every state stored.


def test_changing_a_later_word_never_changes_an_earlier_step():
  model = intra_model()
  src, mask, tgt_in = batch_args(2)
  forward = lambda tgt: np.asarray(compiled(type(model).__call__, model, src, mask, tgt))
  before = forward(tgt_in)
  for t in range(1, tgt_in.shape[1]):
    changed = tgt_in.at[:, t].set((tgt_in[:, t] + 7) % (VOCAB - 4) + 4)
    after = forward(changed)
    np.testing.assert_array_equal(after[:, :t], before[:, :t])
    assert not np.allclose(after[:, t:], before[:, t:])


def run_steps(model, steps, seed=1):
  """The decoder state after `steps` teacher-forced decoder steps of a random batch."""
  src, mask, tgt_in = batch_args(seed)
  enc = model.encode(src, mask, steps=tgt_in.shape[1])
  state = enc.init_state
  for i in range(steps):
    state, _, _ = model.decoder_step(enc, state, tgt_in[:, i])
  return state


@pytest.mark.parametrize("score", ["dot", "cosine", "general"])
def test_the_query_attends_over_the_states_before_its_own(score):
  """At step i the memory holds s_1 .. s_{i-1} and the query is s_{i-1}, its last slot: the
  context is the masked softmax over s_1 .. s_{i-2} alone (float64 for dot, the score's own
  scores on the shorter memory otherwise), and the query's own slot gets no weight even when
  its state is made to dominate every match."""
  model = intra_model(score)
  state = run_steps(model, 4)
  values, keys, count = state.addons["intra"]
  assert np.asarray(count).tolist() == [4] * 3
  np.testing.assert_array_equal(np.asarray(values[:, 3]), np.asarray(state.s))  # Query = slot 4.
  got = np.asarray(intra_context(model, state))
  earlier = jnp.arange(values.shape[1])[None, :] < 3
  want = np.asarray(
    attention.attend(
      model.intra_score,
      state.s,
      values if keys is None else keys,
      values,
      jnp.broadcast_to(earlier, count.shape + earlier.shape[1:]),
    )[0]
  )
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  if score == "dot":
    v = np.asarray(values, np.float64)[:, :3]
    e = np.einsum("bld,bd->bl", v, np.asarray(state.s, np.float64))
    beta = np.exp(e - e.max(1, keepdims=True))
    beta /= beta.sum(1, keepdims=True)
    np.testing.assert_allclose(got, np.einsum("bl,bld->bd", beta, v), rtol=1e-4, atol=1e-5)
  # Scale the query (and its slot) up: it would take all the weight if it were attended.
  memory = state.addons["intra"]._replace(values=values.at[:, 3].multiply(50.0))
  big = state._replace(s=state.s * 50.0, addons={"intra": memory})
  got_big = np.asarray(intra_context(model, big))
  assert np.abs(got_big).max() <= 1.0 + 1e-5, "the context read the query's own (scaled) slot"


def test_the_first_two_steps_have_no_earlier_state_to_attend_to():
  """Steps 1 and 2 read a zero context: at step 2 the only stored state is the query s_1."""
  model = intra_model("dot")
  for steps in (0, 1):
    state = run_steps(model, steps)
    np.testing.assert_array_equal(np.asarray(intra_context(model, state)), 0.0)
  state = run_steps(model, 2)  # Step 3: one earlier state, s_1, and the context is exactly it.
  np.testing.assert_allclose(
    np.asarray(intra_context(model, state)),
    np.asarray(state.addons["intra"].values[:, 0]),
    atol=1e-6,
  )


@pytest.mark.parametrize(
  ("score", "keys_kept"), [("dot", False), ("scaled", False), ("general", True)]
)
def test_the_memory_stores_keys_only_where_they_differ_from_the_states(score, keys_kept):
  """Dot and scaled read the stored states as their keys; general keeps W s_k beside them."""
  model = intra_model(score)
  src, mask, tgt_in = batch_args()
  memory = model.encode(src, mask, steps=tgt_in.shape[1]).init_state.addons["intra"]
  assert (memory.keys is not None) == keys_kept
  if keys_kept:
    assert memory.keys.shape[:2] == memory.values.shape[:2]


def test_off_it_adds_no_parameter_and_on_it_decodes_with_beam_search():
  plain = nnx.state(build_model(tiny.get_config().model, VOCAB, VOCAB, rngs=nnx.Rngs(0)))
  assert not any("intra" in str(path) or "d_o" in str(path) for path, _ in nnx.to_flat_state(plain))
  off = tiny.get_config()
  off.model.addons = "none"  # A sweep's spelling of "off": the same plain model.
  named = nnx.state(build_model(off.model, VOCAB, VOCAB, rngs=nnx.Rngs(0)))
  assert jax.tree.structure(named) == jax.tree.structure(plain)
  model = intra_model("additive")
  src, mask, _ = batch_args(3)
  graphdef, params = nnx.split(model, nnx.Param)
  out = decode.jit_decode(graphdef, params, src, mask, beam_size=3, max_len=9)
  assert np.isfinite(np.asarray(out.scores)).all()


def test_intra_attention_settings_are_checked():
  cfg = tiny.get_config()
  cfg.model.addons = "intra(score=location)"
  with pytest.raises(ValueError, match="a positional score cannot attend"):
    settings.validate(cfg)
  cfg.model.addons = "intra(score=cosine(sharpness=5))"  # A score spec with its own settings.
  run = settings.validate(cfg)
  assert run.model.addon("intra").settings.score == "cosine(sharpness=5.0)"
  assert run.model.addon_spec == "intra(score=cosine(sharpness=5.0))"
  cfg.model.addons, cfg.model.decoder = "intra", "luong"
  with pytest.raises(ValueError, match="model.addons=intra adds a context to every decoder step"):
    settings.validate(cfg)


def test_the_memory_keeps_every_past_state_of_a_long_output():
  """Past 128 steps (no fixed memory size) the teacher-forced pass still attends over every
  earlier state: its logits equal those of a decoder step from the state that pass reached,
  with a memory holding all of that pass's states."""
  model = intra_model("dot")
  src, mask, _ = batch_args()
  length = 140
  rng = np.random.default_rng(3)
  tgt_in = jnp.asarray(rng.integers(4, VOCAB, size=(src.shape[0], length)), jnp.int32)
  forced = np.asarray(model(src, mask, tgt_in))
  enc = model.encode(src, mask, steps=length)
  step = nnx.jit(lambda m, e, s, y: m.decoder_step(e, s, y))
  state = enc.init_state
  for i in range(length):
    state, logits, _ = step(model, enc, state, tgt_in[:, i])
  np.testing.assert_allclose(np.asarray(logits), forced[:, -1], rtol=1e-4, atol=1e-4)
  assert np.asarray(state.addons["intra"].count).tolist() == [length] * 3
  np.testing.assert_allclose(
    np.asarray(state.addons["intra"].values[:, -1]), np.asarray(state.s), atol=1e-6
  )


def test_decoding_sizes_the_memory_to_its_longest_output():
  model = intra_model("dot")
  src, mask, _ = batch_args(4)
  with pytest.raises(ValueError, match="needs steps="):
    model.encode(src, mask)
  assert model.encode(src, mask, steps=150).init_state.addons["intra"].values.shape[1] == 150
  graphdef, params = nnx.split(model, nnx.Param)
  out = decode.jit_decode(graphdef, params, src, mask, beam_size=1, max_len=150)
  assert np.isfinite(np.asarray(out.scores)).all()

"""The sampled softmax of training (seq2seq/training/softmax.py, Jean et al. 2015)."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, random_batch, randomise

from configs import tiny
from seq2seq import settings
from seq2seq.data.tokenizer import EOS_ID, UNK_ID
from seq2seq.training import objective, softmax, train_state

VOCAB = 30


def batch_of(seed=0):
  return {k: jnp.asarray(v) for k, v in random_batch(seed=seed, batch=4, vocab=VOCAB).items()}


def test_candidates_hold_every_target_word_eos_and_unk_then_uniform_draws():
  b = batch_of()
  targets = set(np.asarray(b["tgt_out"])[np.asarray(b["tgt_mask"]) > 0].tolist())
  ids, missing = softmax.candidate_ids(b["tgt_out"], b["tgt_mask"], VOCAB, 20, jax.random.key(0))
  ids = np.asarray(ids).tolist()
  assert len(ids) == len(set(ids)) == 20 and int(missing) == 0
  assert targets | {EOS_ID, UNK_ID} <= set(ids)
  draws = {
    frozenset(np.asarray(softmax.candidate_ids(b["tgt_out"], b["tgt_mask"], VOCAB, 20, key)[0]))
    for key in jax.random.split(jax.random.key(1), 4)
  }
  assert len(draws) > 1  # The other words change with the key.
  few, missing = softmax.candidate_ids(b["tgt_out"], b["tgt_mask"], VOCAB, 3, jax.random.key(0))
  assert few.shape == (3,) and int(missing) == len(targets | {EOS_ID, UNK_ID}) - 3


def test_target_words_that_do_not_fit_are_left_out_at_random_not_by_id():
  """40 distinct target words for 12 candidates: EOS and UNK always kept, and the other ten
  a uniform draw of the 40, so the highest ids are kept as often as the lowest."""
  vocab, words = 100, np.arange(60, 100)
  targets = jnp.asarray(words[None, :], jnp.int32)
  mask = jnp.ones_like(targets)
  kept = np.zeros(vocab)
  draws = 200
  for key in jax.random.split(jax.random.key(0), draws):
    ids, missing = softmax.candidate_ids(targets, mask, vocab, 12, key)
    ids = np.asarray(ids)
    assert {EOS_ID, UNK_ID} <= set(ids.tolist()) and int(missing) == 30
    assert set(ids.tolist()) - {EOS_ID, UNK_ID} <= set(words.tolist())
    kept[ids] += 1
  share = kept[words] / draws  # 10 of 40 kept: 0.25 each on average.
  assert share[:20].mean() == pytest.approx(0.25, abs=0.05)
  assert share[20:].mean() == pytest.approx(0.25, abs=0.05)


def test_training_logs_a_sampled_loss_under_its_own_name(tmp_path):
  """A run with a sampled softmax writes "sampled_loss" on its train lines, never "loss", which
  would set it beside the full-vocabulary validation loss; a full-softmax run writes "loss"."""
  from helpers import run_main

  for spec, key in (("sampled(size=12)", "sampled_loss"), ("full", "loss")):
    workdir = tmp_path / spec.split("(")[0]
    run_main(workdir, "--config.train.num_steps=4", f"--config.train.softmax={spec}")
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r.get("split") == "train"]
    assert train and all(key in r for r in train)
    other = "loss" if key == "sampled_loss" else "sampled_loss"
    assert not any(other in r for r in train)


def test_logits_over_candidates_are_the_full_logits_columns():
  cfg = tiny.get_config()
  model = randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0)))
  b = batch_of(1)
  args = (b["src"], b["src_mask"], b["tgt_in"])
  ids = jnp.asarray([7, 2, 29, 3], jnp.int32)
  full = np.asarray(model(*args))
  np.testing.assert_allclose(
    np.asarray(model(*args, output_ids=ids)), full[..., ids], rtol=1e-5, atol=1e-6
  )


def _state_and_objective(spec, label_smoothing=0.0, **train):
  cfg = tiny.get_config()
  cfg.train.softmax, cfg.train.label_smoothing = spec, label_smoothing
  cfg.train.update(train)  # Before the state is built: its optimiser is made from them.
  state = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), VOCAB, VOCAB)
  state = state.replace(params=nnx.state(randomise(state.model()), nnx.Param))
  return cfg, state, objective.Objective.from_config(cfg)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_a_candidate_set_holding_every_word_gives_the_full_loss(label_smoothing):
  _, state, full = _state_and_objective("full", label_smoothing)
  _, _, sampled = _state_and_objective(f"sampled(size={VOCAB})", label_smoothing)
  b = batch_of(2)
  rng = jax.random.key(5)
  want = objective.loss_fn(state.params, state, b, rng, full)[0]
  got, (_, _, metrics) = objective.loss_fn(state.params, state, b, rng, sampled)
  assert float(got) == pytest.approx(float(want), rel=1e-5)
  assert float(metrics["sampled_missing"]) == 0.0
  # Without a key (a deterministic pass) the sampled softmax is the full one.
  assert float(objective.loss_fn(state.params, state, b, None, sampled)[0]) == pytest.approx(
    float(objective.loss_fn(state.params, state, b, None, full)[0]), rel=1e-6
  )


def test_training_with_a_sampled_softmax_lowers_the_full_loss():
  cfg, state, _ = _state_and_objective("sampled(size=12)", optimizer="adam", learning_rate=1e-2)
  b = batch_of(3)
  step = jax.jit(functools.partial(train_state.train_step, run=settings.validate(cfg)))
  evaluate = jax.jit(train_state.eval_step)
  before = evaluate(state, b)
  for i in range(60):
    state, metrics = step(state, b, jax.random.key(i))
  after = evaluate(state, b)
  per_token = lambda m: float(m["loss_sum"]) / float(m["tokens"])
  assert per_token(after) < 0.5 * per_token(before), (per_token(before), per_token(after))
  assert "sampled_missing" in metrics


def test_softmax_settings_are_checked():
  cfg = tiny.get_config()
  cfg.train.softmax = "sampled(size=1)"
  with pytest.raises(ValueError, match="size must be at least 2"):
    settings.validate(cfg)
  cfg.train.softmax = "importance"
  with pytest.raises(
    ValueError, match=r"unknown softmax 'importance' \(train.softmax\); valid: full, sampled"
  ):
    settings.validate(cfg)

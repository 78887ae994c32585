"""Gradient accumulation (`train.micro_batches`): k slices of a batch give the update of the whole
batch to rounding, and what slicing would change is refused in one line."""

import functools

import jax
import numpy as np
import pytest
from helpers import random_batch

from configs import tiny
from seq2seq import settings
from seq2seq.training import train_state


def two_steps(cfg, micro_batches, batch):
  """Loss, gradient norm and parameters after two train steps of `cfg` on `batch`."""
  cfg = cfg.copy_and_resolve_references()
  cfg.train.micro_batches = micro_batches
  run = settings.validate(cfg)
  state = train_state.create_train_state(run, jax.random.key(0), 30, 30)
  step = jax.jit(functools.partial(train_state.train_step, run=run))
  for i in range(2):
    state, metrics = step(state, batch, jax.random.key(i))
  return float(metrics["loss"]), float(metrics["grad_norm"]), float(metrics["tokens"]), state


@pytest.mark.parametrize("normalization", ["tokens", "sentences"])
@pytest.mark.parametrize("micro_batches", [2, 3, 7])
def test_slices_give_the_update_of_the_whole_batch(normalization, micro_batches):
  """A batch of 7 rows of ragged lengths (3 and 7 slices: padded with empty rows): the loss,
  gradient norm, token count and parameters of two Adam steps equal the whole batch's."""
  cfg = tiny.get_config()
  cfg.model.dropout = 0.0
  cfg.train.optimizer, cfg.train.learning_rate = "adam", 1e-2
  cfg.train.loss_normalization = normalization
  batch = random_batch(seed=4, batch=7, src_len=6, tgt_len=5, vocab=30, pad_rows=True)
  loss, norm, tokens, state = two_steps(cfg, 1, batch)
  sliced = two_steps(cfg, micro_batches, batch)
  np.testing.assert_allclose(sliced[:3], (loss, norm, tokens), rtol=2e-5)
  for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(sliced[3].params), strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-6)


@pytest.mark.parametrize("normalization", ["tokens", "sentences"])
def test_every_logged_metric_is_the_whole_batchs(normalization):
  """With the fertility and supervision terms, on a model 30 Adam steps away from the paper init
  (there every token's cross-entropy is near log V, and a wrong weighting of the slices hardly
  shows): every metric of a step over 3 slices of ragged rows equals the whole batch's, the
  per-token ones (ce_loss, fertility_loss, supervision_loss) under per-sentence normalisation
  too."""
  cfg = tiny.get_config()
  cfg.model.dropout = 0.0
  cfg.model.features = "coverage(fertility=true)"
  cfg.train.optimizer, cfg.train.learning_rate = "adam", 1e-2
  cfg.train.loss_normalization = normalization
  cfg.train.loss_terms = "fertility(weight=0.5)+supervision(weight=2)"
  batch = random_batch(seed=5, batch=7, src_len=6, tgt_len=5, vocab=30, pad_rows=True)
  links = np.random.default_rng(6).integers(0, 2, (7, 5, 6)) * batch["tgt_mask"][:, :, None]
  batch["align"] = (links * batch["src_mask"][:, None, :]).astype(np.float32)
  run = settings.validate(cfg)
  whole = jax.jit(functools.partial(train_state.train_step, run=run))
  state = train_state.create_train_state(run, jax.random.key(0), 30, 30)
  for i in range(30):
    state, _ = whole(state, batch, jax.random.key(i))
  cfg.train.micro_batches = 3
  sliced = jax.jit(functools.partial(train_state.train_step, run=settings.validate(cfg)))
  _, expected = whole(state, batch, jax.random.key(30))
  _, got = sliced(state, batch, jax.random.key(30))
  assert {"ce_loss", "fertility_loss", "supervision_loss"} <= set(expected)
  for key, value in expected.items():
    np.testing.assert_allclose(np.asarray(got[key]), np.asarray(value), rtol=2e-5, err_msg=key)

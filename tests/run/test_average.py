"""Checkpoint averaging (seq2seq/average.py) and the parameters' moving average
(`train.ema_decay`)."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from helpers import data_settings, final_params

from configs import tiny
from seq2seq import average, checkpoints, evaluation, restoring, settings, train
from seq2seq import sharding as rt
from seq2seq.data import input_pipeline
from seq2seq.data import tokenizer as tok
from seq2seq.training import optimisers, train_state


def checkpoint_params(workdir, step, subdir="checkpoints"):
  """{path: array} of the parameters saved at `step`."""
  tree = ocp.StandardCheckpointer().restore(workdir / subdir / str(step) / "state")
  leaves = jax.tree_util.tree_flatten_with_path(tree["params"])[0]
  return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}


@pytest.mark.slow
def test_averaging_one_checkpoint_is_the_identity_and_two_their_mean(trained, tmp_path):
  first, second = checkpoint_params(trained, 10), checkpoint_params(trained, 20)
  record = average.average_checkpoints(trained, tmp_path / "one", last=1)
  assert record["steps"] == [20]
  one = checkpoint_params(tmp_path / "one", 20)
  for key, value in second.items():
    np.testing.assert_array_equal(one[key], value, err_msg=key)

  average.average_checkpoints(trained, tmp_path / "two", steps_=[10, 20])
  two = checkpoint_params(tmp_path / "two", 20)
  assert set(two) == set(first)
  for key in first:
    want = (first[key].astype(np.float32) + second[key].astype(np.float32)) / 2
    np.testing.assert_allclose(two[key], want, rtol=1e-6, atol=1e-7, err_msg=key)
  assert json.loads((tmp_path / "two" / "average.json").read_text())["source"] == str(trained)


def test_the_best_checkpoint_is_read_without_a_data_iterator_state(trained, tmp_path):
  (best,) = [int(p.name) for p in (trained / "best").iterdir() if p.name.isdigit()]
  record = average.average_checkpoints(trained, tmp_path / "best", last=1, subdir="best")
  assert record["steps"] == [best]
  got, want = checkpoint_params(tmp_path / "best", best), checkpoint_params(trained, best, "best")
  for key, value in want.items():
    np.testing.assert_array_equal(got[key], value, err_msg=key)


def test_an_averaged_run_evaluates_with_the_averaged_parameters(trained, tmp_path):
  """The averaged run's test loss is the loss of the mean of checkpoints 10 and 20 (made here
  from the two checkpoints), not that of checkpoint 20, whose state the new run otherwise
  carries."""
  out = tmp_path / "avg"
  average.average_checkpoints(trained, out, last=2)
  config = tiny.get_config()
  config.decode.beam_size, config.decode.num_heatmaps = 1, 0
  results = evaluation.evaluate_splits(config, out)
  assert results["test"]["step"] == 20
  assert (out / "eval" / "test" / "hypotheses.txt").exists()

  runtime = rt.Runtime()
  data = rt.load_data(settings.validate(config), out)
  _, eval_fn = rt.compile_steps(settings.validate(config), runtime)
  fresh = rt.abstract_state(
    settings.validate(config), data.src_tokenizer.size, data.tgt_tokenizer.size, runtime
  )
  ckpt = checkpoints.Checkpointer(trained, config.train.keep_checkpoints)
  at10, at20 = (ckpt.restore(fresh, step, with_data=False)[0] for step in (10, 20))
  ckpt.close()
  mean = at20.replace(params=jax.tree.map(lambda a, b: (a + b) / 2, at10.params, at20.params))

  def test_loss(state):
    batches = input_pipeline.eval_batches(data, "test", data_settings(config))
    return evaluation.evaluate_loss(eval_fn, state, batches, runtime)["loss"]

  want, last = test_loss(mean), test_loss(at20)
  assert abs(want - last) > 1e-4  # The two can be told apart.
  assert results["test"]["loss"] == pytest.approx(want, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize(
  "kwargs,message",
  [
    ({"last": 3}, r"--last=3: the run keeps 2 checkpoint\(s\) \[10, 20\]"),
    ({"steps_": [15]}, r"no checkpoint of step\(s\) \[15\]; the run keeps \[10, 20\]"),
    ({}, "give either --last=K or --steps"),
  ],
)
def test_averaging_refuses_what_the_run_does_not_hold(trained, tmp_path, kwargs, message):
  with pytest.raises(ValueError, match=message):
    average.average_checkpoints(trained, tmp_path / "x", **kwargs)


@pytest.mark.slow
def test_the_moving_average_follows_its_schedule():
  config = tiny.get_config()
  config.train.ema_decay = 0.9
  state = rt.initial_state(settings.validate(config), 30, 30, rt.Runtime())
  decay = float(optimisers.ema_decay_at(0.9, 0))  # min(0.9, 1/10) at the first update.
  assert decay == pytest.approx(0.1) and float(
    optimisers.ema_decay_at(0.9, 10**6)
  ) == pytest.approx(0.9)
  plain = state.replace(ema=None)
  assert state.for_eval().params is state.ema and plain.for_eval() is plain
  batch = {
    "src": jnp.full((2, 5), 5, jnp.int32),
    "src_mask": jnp.ones((2, 5), jnp.int32),
    "tgt_in": jnp.full((2, 4), 6, jnp.int32),
    "tgt_out": jnp.full((2, 4), 7, jnp.int32),
    "tgt_mask": jnp.ones((2, 4), jnp.int32),
  }
  step = jax.jit(functools.partial(train_state.train_step, run=settings.validate(config)))
  after, _ = step(state, batch, jax.random.key(0))  # Op by op, this test took twice as long.
  leaves = [jax.tree.leaves(t) for t in (after.ema, state.params, after.params)]
  for e, p0, p1 in zip(*leaves, strict=True):
    np.testing.assert_allclose(e, decay * p0 + (1 - decay) * p1, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_a_run_with_a_moving_average_resumes_bit_identically_and_evaluates_with_it(tmp_path):
  def config(num_steps):
    c = tiny.get_config()
    c.train.ema_decay, c.train.num_steps = 0.95, num_steps
    c.train.final_eval, c.train.valid_bleu = False, False
    c.data.cache_dir = str(tmp_path / "data")
    return c

  train.train_and_evaluate(config(20), tmp_path / "full")
  train.train_and_evaluate(config(10), tmp_path / "resumed")
  train.train_and_evaluate(config(20), tmp_path / "resumed")
  trees = {}
  for name in ("full", "resumed"):
    trees[name] = ocp.StandardCheckpointer().restore(
      tmp_path / name / "checkpoints" / "20" / "state"
    )
  for a, b in zip(jax.tree.leaves(trees["full"]), jax.tree.leaves(trees["resumed"]), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  step, params = final_params(tmp_path / "full")
  ema_kernel = np.asarray(jax.tree.leaves(trees["full"]["ema"]["score"]["u_a"]["kernel"])[0])
  assert step == 20 and not np.allclose(ema_kernel, params["/score/u_a/kernel/value"])
  sizes = [tok.load(tmp_path / "full" / "vocab" / side).size for side in ("src", "tgt")]
  state = restoring.restore_for_eval(
    settings.validate(config(20)), tmp_path / "full", *sizes, rt.Runtime()
  )
  got = jax.tree.leaves(state.params["score"]["u_a"]["kernel"])[0]
  np.testing.assert_array_equal(np.asarray(got), ema_kernel)

  # --raw: the same checkpoint, evaluated with its training parameters instead of the average.
  record = average.average_checkpoints(tmp_path / "full", tmp_path / "raw", last=1, raw=True)
  raw_config = checkpoints.load_config(tmp_path / "raw")
  assert record["raw"] and record["steps"] == [20] and raw_config.train.ema_decay == 0
  state = restoring.restore_for_eval(
    settings.validate(raw_config), tmp_path / "raw", *sizes, rt.Runtime()
  )
  got = jax.tree.leaves(state.params["score"]["u_a"]["kernel"])[0]
  np.testing.assert_array_equal(np.asarray(got), params["/score/u_a/kernel/value"])
  with pytest.raises(ValueError, match="keeps no moving average"):
    average.average_checkpoints(tmp_path / "raw", tmp_path / "again", last=1, raw=True)


def test_a_fresh_state_s_moving_average_owns_its_buffers():
  """`create_train_state` outside a jit (the Python API, the benchmark): the average starts equal
  to the parameters but must not be the same buffers, or a step that donates the state gives
  one buffer twice ("Attempt to donate the same buffer twice", seen on multi30k_best)."""
  cfg = tiny.get_config()
  cfg.train.ema_decay = 0.9
  state = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), 30, 40)
  params, ema = jax.tree.leaves(state.params), jax.tree.leaves(state.ema)
  assert all(np.array_equal(p, e) for p, e in zip(params, ema, strict=True))
  pointers = {x.unsafe_buffer_pointer() for x in params}
  assert not pointers & {x.unsafe_buffer_pointer() for x in ema}
  donate = jax.jit(lambda s: jax.tree.map(lambda x: x + 1, s), donate_argnums=0)
  jax.block_until_ready(donate((state.params, state.ema)))


def test_averaging_a_run_without_checkpoints_is_one_error_and_leaves_the_run_as_it_was(
  trained, tmp_path
):
  """A run that has saved no checkpoint yet (config and vocabularies only): one ValueError
  naming the folder, and no empty checkpoints/ made in the source run."""
  import shutil

  run = tmp_path / "fresh"
  run.mkdir()
  shutil.copy(trained / "config.json", run / "config.json")
  shutil.copytree(trained / "vocab", run / "vocab")
  with pytest.raises(ValueError) as refused:
    average.average_checkpoints(run, tmp_path / "x", last=1)
  assert sorted(p.name for p in run.iterdir()) == ["config.json", "vocab"]
  assert not (tmp_path / "x").exists()
  assert "has no checkpoints/ to average: it has saved no checkpoint" in str(refused.value)

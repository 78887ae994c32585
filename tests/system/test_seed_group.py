"""Seeds trained together (seq2seq/seed_group.py): lone runs' models, ordinary workdirs."""

import json
import shutil

import jax
import numpy as np
import pytest
from helpers import final_params

from configs import tiny
from seq2seq import seed_group, settings, train
from seq2seq import sharding as rt


def _config(tmp_path, steps=6):
  c = tiny.get_config()
  c.data.cache_dir = str(tmp_path / "data")
  c.train.num_steps = steps
  c.train.log_every = 3
  c.train.eval_every = 3
  c.train.checkpoint_every = 3
  c.model.dropout = 0.2  # Dropout keys must follow each seed as in a lone run.
  c.decode.num_heatmaps = 0  # Nothing here reads them (they took some 2 s a split).
  return c


def _assert_params_close(a, b, **tol):
  assert a[0] == b[0] and a[1].keys() == b[1].keys()
  for name in a[1]:
    np.testing.assert_allclose(a[1][name], b[1][name], err_msg=name, **tol)


@pytest.mark.slow
def test_first_seed_matches_a_lone_run_workdirs_are_complete_and_groups_resume(tmp_path):
  config = _config(tmp_path)
  dirs = [tmp_path / "g" / "s0", tmp_path / "g" / "s5"]
  results = seed_group.train_together(config, [0, 5], dirs)
  lone, lone_config = tmp_path / "lone", config.copy_and_resolve_references()
  lone_config.train.final_eval = False  # Only its parameters are compared.
  train.train_and_evaluate(lone_config, lone)  # seed 0: the data order the group used.
  # Seed 0 of the group is the lone seed-0 run: same init, dropout keys and batches.
  _assert_params_close(final_params(dirs[0]), final_params(lone), rtol=2e-4, atol=2e-6)
  # Seed 5 is another model.
  p0, p5 = final_params(dirs[0])[1], final_params(dirs[1])[1]
  assert any(not np.allclose(p0[k], p5[k]) for k in p0)
  for wd, seed, result in zip(dirs, (0, 5), results, strict=True):
    assert json.loads((wd / "config.json").read_text())["seed"] == seed
    rows = [json.loads(line) for line in (wd / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["split"] == "train"] == [3, 6]
    assert all(r["seeds_together"] == 2 for r in rows if r["split"] == "train")
    assert [r["step"] for r in rows if r["split"] == "valid"] == [3, 6]
    assert (wd / "best").is_dir() and (wd / "vocab" / "src").is_dir()
    saved = json.loads((wd / "eval" / "test" / "results.json").read_text())
    assert saved["bleu"] == pytest.approx(result["test"]["bleu"])
  for side in ("src", "tgt"):  # One vocabulary: the same ids in every workdir.
    for f in (dirs[0] / "vocab" / side).iterdir():
      assert (dirs[1] / "vocab" / side / f.name).read_bytes() == f.read_bytes()

  # A group stopped after 3 steps and rerun resumes to the same models as the straight one.
  halves = [tmp_path / "h" / "s0", tmp_path / "h" / "s5"]
  first = _config(tmp_path, steps=3)
  first.train.final_eval = False
  assert seed_group.train_together(first, [0, 5], halves) == [{}, {}]
  # As if killed after member s0 had saved step 6 and before s5 did: the group resumes from the
  # step both hold, so s0's step 6 must go (saving it again raised StepAlreadyExistsError).
  shutil.copytree(halves[0] / "checkpoints" / "3", halves[0] / "checkpoints" / "6")
  seed_group.train_together(lone_config, [0, 5], halves)  # Resumes at step 3.
  for a, b in zip(dirs, halves, strict=True):
    _assert_params_close(final_params(a), final_params(b), rtol=1e-6, atol=1e-7)


def test_vmapped_step_equals_each_seed_alone(tmp_path):
  from helpers import random_batch

  config = _config(tmp_path)
  config.train.clip_norm = 0.01  # Below both seeds' gradient norms: each is clipped on its own.
  runtime = rt.Runtime()
  states = [
    rt.initial_state(settings.validate(config.copy_and_resolve_references()), 200, 200, runtime)
  ]
  other = config.copy_and_resolve_references()
  other.seed = 3
  states.append(rt.initial_state(settings.validate(other), 200, 200, runtime))
  train_fn, _ = rt.compile_steps(settings.validate(config), runtime, stacked=True)
  lone_fn, _ = rt.compile_steps(settings.validate(config), runtime)
  rngs = [jax.random.key(7), jax.random.key(8)]
  batch = runtime.put_batch(random_batch(seed=4, batch=16, vocab=200))
  grouped, metrics = train_fn(train.stack(states), batch, jax.numpy.stack(rngs))
  for k, (state, rng) in enumerate(zip(states, rngs, strict=True)):
    alone, m = lone_fn(state, batch, rng)
    np.testing.assert_allclose(metrics["loss"][k], m["loss"], rtol=1e-5)
    assert m["grad_norm"] > config.train.clip_norm
    for x, y in zip(
      jax.tree.leaves(train.unstack(grouped, k)), jax.tree.leaves(alone), strict=True
    ):
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6)


def test_bad_arguments():
  config = tiny.get_config()
  with pytest.raises(ValueError, match="distinct seeds"):
    seed_group.train_together(config, [1, 1], ["a", "b"])
  with pytest.raises(ValueError, match="distinct seeds"):
    seed_group.train_together(config, [1, 2], ["a"])

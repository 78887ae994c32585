"""Kills at exact points, damaged files, preemption, non-finite steps, one process a workdir
and extreme inputs: what a run can rely on (README, "What a run can rely on")."""

import functools
import json
import signal
import subprocess
import time
from pathlib import Path

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import (
  ROOT,
  build_model,
  final_params,
  main_command,
  metric_rows,
  randomise,
  run_main,
  subprocess_env,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq import cli, train
from seq2seq import settings as settings_lib
from seq2seq.common import files
from seq2seq.training import metric_writer, objective, train_state

FAST = ["--config.train.final_eval=false", "--config.train.valid_bleu=false"]
# A rerun compared with the trained run's rows and results, not its heatmaps: drawing them took
# some 2 s of each split its final evaluation decodes.
NO_HEATMAPS = "--config.decode.num_heatmaps=0"


def start_main(workdir, *overrides):
  cmd = main_command(workdir, *overrides)
  pipe = subprocess.PIPE
  env = subprocess_env()  # As run_main's runs, which the tests compare with.
  return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=pipe, stderr=pipe, text=True)


def wait_for(predicate, proc, timeout=300.0, poll=0.002):
  deadline = time.time() + timeout
  while time.time() < deadline:
    if predicate():
      return True
    if proc.poll() is not None:
      return False
    time.sleep(poll)
  raise AssertionError("timed out waiting")


@pytest.fixture(scope="module")
def reference(trained):
  """The parameters of an uninterrupted 20-step run."""
  return final_params(trained)


def assert_same_params(workdir, reference):
  step, params = final_params(workdir)
  assert step == reference[0]
  for key, value in reference[1].items():
    np.testing.assert_array_equal(params[key], value, err_msg=key)


def completed_checkpoints(workdir):
  ckpt = Path(workdir) / "checkpoints"
  return (
    [p for p in ckpt.glob("*") if p.name.isdigit() and (p / "commit_success.txt").exists()]
    if ckpt.exists()
    else []
  )


@pytest.mark.slow
def test_sigkill_during_training_then_rerun_matches(reference, tmp_path):
  workdir = tmp_path / "killed"
  args = ["--config.train.num_steps=20", *FAST]
  proc = start_main(workdir, *args)
  wait_for(lambda: completed_checkpoints(workdir), proc)
  time.sleep(np.random.default_rng().uniform(0.0, 0.5))
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  run_main(workdir, *args)
  assert_same_params(workdir, reference)
  steps = [r["step"] for r in metric_rows(workdir) if r["split"] == "train"]
  assert steps == sorted(set(steps))  # No duplicated lines from the killed run.


@pytest.mark.slow
def test_sigkill_during_checkpoint_write_then_rerun_matches(reference, tmp_path):
  workdir = tmp_path / "killed_in_write"
  args = ["--config.train.num_steps=20", "--config.train.checkpoint_every=1", *FAST]
  proc = start_main(workdir, *args)
  ckpt = workdir / "checkpoints"

  def writing():
    return ckpt.exists() and any("tmp" in p.name for p in ckpt.iterdir())

  caught = wait_for(writing, proc, poll=0.0005)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert caught, "the run ended before a checkpoint write could be interrupted"
  run_main(workdir, *args)
  assert_same_params(workdir, reference)


@pytest.mark.slow
def test_a_best_checkpoint_after_the_resumed_step_is_discarded(tmp_path):
  """A run killed after evaluating (and saving best/) at a step it had not checkpointed resumes
  from its last checkpoint: the best checkpoint of that discarded future goes with its metrics
  line, or the run would be evaluated on weights it no longer has a record of."""
  workdir = tmp_path / "run"
  args = ["--config.train.eval_every=2", "--config.train.checkpoint_every=4"]
  args += ["--config.train.final_eval=false", "--config.train.keep_checkpoints=5"]
  run_main(workdir, "--config.train.num_steps=6", *args)
  assert (workdir / "best" / "6").is_dir()  # Ties go to the later checkpoint: 6 is the best.
  # The first evaluation is a new best (step 2, no regular checkpoint due): saved as a regular
  # checkpoint too, so a resumed run never starts before its best checkpoint.
  assert (workdir / "checkpoints" / "2").is_dir()
  for path in sorted((workdir / "checkpoints" / "6").rglob("*"), reverse=True):
    path.rmdir() if path.is_dir() else path.unlink()  # Killed before checkpoint 6 was written.
  (workdir / "checkpoints" / "6").rmdir()
  run_main(workdir, "--config.train.num_steps=4", *args)
  assert not (workdir / "best" / "6").exists()
  assert max(r["step"] for r in metric_rows(workdir)) == 4


def poisoned_step(config, bad_step):
  """`train_state.train_step` whose parameters are NaN during update `bad_step` (1-based), so that
  step's loss and gradients are non-finite: the real step must then skip the update, which
  leaves the poisoned parameters in place; they are put back, as a skipped update keeps them."""

  run = settings_lib.validate(config)

  def step(state, batch, rng):
    bad = state.step + 1 == bad_step
    poison = lambda p: jnp.where(bad, p * jnp.nan, p)
    new, m = train_state.train_step(
      state.replace(params=jax.tree.map(poison, state.params)), batch, rng, run=run
    )
    keep = lambda n, p: jnp.where(bad, p, n)
    return new.replace(params=jax.tree.map(keep, new.params, state.params)), m

  return step


# The loop reads a step's finiteness flag one step late (no wait a step), and before every log
# line and checkpoint: a bad last step must still stop before its checkpoint, and be counted in
# the last train line.
@pytest.mark.parametrize("mode", ["stop", "skip"])
@pytest.mark.parametrize("bad_step", [7, 10])
def test_nonfinite_step(tmp_path, tiny_config, mode, bad_step):
  workdir = tmp_path / mode
  config = tiny_config
  config.train.num_steps, config.train.checkpoint_every = 10, 5
  config.train.nonfinite, config.train.final_eval, config.train.valid_bleu = mode, False, False
  step = poisoned_step(config, bad_step)
  if mode == "stop":
    with pytest.raises(
      train.NonFiniteError, match=f"non-finite loss or gradient at step {bad_step}"
    ) as e:
      train.train_and_evaluate(config, workdir, train_step=step)
    assert "step 5" in str(e.value)
    assert [int(p.name) for p in completed_checkpoints(workdir)] == [5]
  else:
    train.train_and_evaluate(config, workdir, train_step=step)
    train_lines = [r for r in metric_rows(workdir) if r["split"] == "train"]
    assert train_lines[-1]["skipped_updates"] == 1
    assert np.isfinite(train_lines[-1]["loss"]) == (bad_step != 10)  # Step 10's own loss is NaN.
  record = json.loads((workdir / "nonfinite" / f"step_{bad_step}_process_0.json").read_text())
  assert record["step"] == bad_step and len(record["train_example_indices"]) == 16


def test_empty_training_set_is_one_error_line(tmp_path):
  data = tmp_path / "text"
  data.mkdir()
  for split in ("train", "val", "test"):
    for lang in ("en", "fr"):
      (data / f"{split}.{lang}").write_text("" if split == "train" else "a b\n")
  proc = run_main(
    tmp_path / "run",
    "--config.data.corpus=local",
    f"--config.data.local.dir={data}",
    "--config.data.local.test=test",
    check=False,
  )
  assert proc.returncode == 1
  line = proc.stderr.strip().splitlines()[-1]
  assert line.startswith("error:") and "split 'train' has no usable pair" in line
  assert "Traceback" not in proc.stderr


def test_unusable_workdir_is_one_error_line(tmp_path):
  blocker = tmp_path / "a_file"
  blocker.write_text("not a directory")
  proc = run_main(blocker / "run", check=False)
  assert proc.returncode == 1
  line = proc.stderr.strip().splitlines()[-1]
  assert line.startswith("error:") and "a_file" in line and "Traceback" not in proc.stderr


# Two shapes, one of them 3 x 6 (any mask of a smaller shape is in it, padded with masked
# positions): each new shape and dtype compiles the loss's eager ops again, which took most of
# this test's time when every example had a shape of its own.
@settings(max_examples=40, deadline=None)
@given(
  st.sampled_from([(1, 1), (3, 6)]).flatmap(lambda shape: hnp.arrays(np.bool_, shape)),
  st.sampled_from([jnp.float32, jnp.bfloat16]),
  st.floats(0.0, 0.3),
)
def test_loss_is_finite_for_any_mask(mask, dtype, smoothing):
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(size=(*mask.shape, 7)) * 30, dtype)
  targets = rng.integers(0, 7, mask.shape)
  total, tokens = objective.cross_entropy(logits, targets, mask, smoothing)
  assert np.isfinite(float(total)) and float(tokens) == mask.sum()
  if not mask.any():
    assert float(total) == 0.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("src_len", [1, 200])
def test_loss_finite_for_extreme_lengths(tiny_config, dtype, src_len):
  tiny_config.model.dtype = dtype
  model = randomise(build_model(tiny_config.model, 40, 40, rngs=nnx.Rngs(0)), scale=0.2)
  rng = np.random.default_rng(0)
  src = rng.integers(4, 40, (2, src_len)).astype(np.int32)
  mask = np.ones_like(src)
  mask[1] = 0  # A fully masked source row as well.
  tgt = rng.integers(4, 40, (2, 5)).astype(np.int32)
  tmask = np.ones_like(tgt)
  tmask[1] = 0

  def loss(params):
    logits = nnx.merge(nnx.graphdef(model), params)(src, mask, tgt)
    total, tokens = objective.cross_entropy(logits, tgt, tmask)
    return total / jnp.maximum(tokens, 1.0)

  value, grads = jax.jit(jax.value_and_grad(loss))(nnx.state(model))
  assert np.isfinite(float(value))
  assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))


def test_same_seed_same_result(tiny_config):
  from helpers import random_batch

  batch = random_batch(seed=3, vocab=30)
  out = []
  step = jax.jit(functools.partial(train_state.train_step, run=settings_lib.validate(tiny_config)))
  for _ in range(2):
    state = train_state.create_train_state(
      settings_lib.validate(tiny_config), jax.random.key(0), 30, 30
    )
    state, m = step(state, batch, jax.random.key(1))
    out.append((float(m["loss"]), np.asarray(jax.tree.leaves(state.params)[0])))
  assert out[0][0] == out[1][0]
  np.testing.assert_array_equal(out[0][1], out[1][1])


def killed_at(point, workdir, *overrides):
  """main.py on `workdir`, SIGKILLed by itself at the write point `point` (`files.kill_point`);
  asserts it died there."""
  env = {**subprocess_env(), files.KILL_AT: point}
  cmd = main_command(workdir, *overrides)
  proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]


def test_a_kill_during_the_metrics_rewrite_of_a_resume_keeps_the_history(trained, tmp_path):
  """A resumed run rewrites metrics.jsonl without the lines past its checkpoint; killed in the
  middle of that rewrite, the file still holds the whole history, and the rerun's file is the
  uninterrupted run's."""
  import shutil

  workdir = tmp_path / "run"
  shutil.copytree(trained, workdir, ignore=shutil.ignore_patterns("eval"))
  before = (workdir / "metrics.jsonl").read_text()
  killed_at("metrics-rewrite", workdir, "--config.train.num_steps=20")
  assert (workdir / "metrics.jsonl").read_text() == before
  run_main(workdir, "--config.train.num_steps=20", NO_HEATMAPS)
  assert not list(workdir.glob(".metrics.jsonl.*"))  # The killed write's temporary file went.
  rows = [{k: r[k] for k in ("step", "split")} for r in metric_rows(workdir)]
  assert rows == [{k: r[k] for k in ("step", "split")} for r in metric_rows(trained)]


def test_a_metrics_line_cut_short_is_reported_and_skipped_never_fatal(trained, tmp_path, caplog):
  """A last line cut short (a kill mid-append) and a damaged line in the middle: reading skips
  both with a warning naming the file and line; the next append starts on a line of its own."""
  workdir = tmp_path / "run"
  workdir.mkdir()
  lines = (trained / "metrics.jsonl").read_text().splitlines()
  damaged = [*lines[:2], '{"step": 7, "spl', *lines[2:], lines[-1][:25]]
  (workdir / "metrics.jsonl").write_text("\n".join(damaged))  # No final newline: cut short.
  with caplog.at_level("WARNING"):
    rows = metric_writer.read_metrics(workdir)
  assert [json.dumps(r) for r in rows] == lines
  warned = [r.getMessage() for r in caplog.records]
  assert any("metrics.jsonl:3: damaged line skipped" in m for m in warned), warned
  assert any(f"metrics.jsonl:{len(damaged)}: damaged line skipped" in m for m in warned), warned
  writer = metric_writer.MetricWriter(workdir)  # Drops the cut-short tail before appending.
  writer.write(99, "train", {"loss": 1.0})
  writer.close()
  assert metric_writer.read_metrics(workdir)[-1] == {"step": 99, "split": "train", "loss": 1.0}
  assert len(metric_writer.read_metrics(workdir)) == len(lines) + 1


def test_a_second_process_on_a_workdir_fails_naming_the_holder_and_sigterm_saves(tmp_path):
  """While a training holds its workdir, a second training (or evaluation) of it ends at once
  with one error line naming the holder's pid. SIGTERM then makes the holder save a checkpoint
  and exit with cli.PREEMPTED, and the same command resumes from that checkpoint. (A killed
  holder's lock is taken over by the reruns of the SIGKILL tests above.)"""
  workdir = tmp_path / "busy"
  holder = start_main(workdir, "--config.train.num_steps=100000", *FAST)
  try:
    wait_for(lambda: completed_checkpoints(workdir), holder)
    for mode in ("train", "eval"):
      proc = run_main(workdir, f"--mode={mode}", check=False)
      assert proc.returncode == 1, proc.stderr[-2000:]
      line = proc.stderr.strip().splitlines()[-1]
      assert line.startswith("error:") and f"in use by process {holder.pid} on" in line, line
      assert "Traceback" not in proc.stderr
    holder.send_signal(signal.SIGTERM)
    _, err = holder.communicate(timeout=120)
  finally:
    if holder.poll() is None:
      holder.send_signal(signal.SIGKILL)
      holder.wait()
  assert holder.returncode == cli.PREEMPTED == 75, err[-2000:]  # Not 0: it has not finished.
  assert "checkpoint saved; rerun the same command to resume" in err
  saved = max(int(p.name) for p in completed_checkpoints(workdir))
  assert f"SIGTERM at step {saved}:" in err
  proc = run_main(workdir, f"--config.train.num_steps={saved + 2}", *FAST)
  assert f"resumed from step {saved}" in proc.stderr
  assert max(int(p.name) for p in completed_checkpoints(workdir)) == saved + 2


def copy_run(trained, to):
  import shutil

  shutil.copytree(trained, to, ignore=shutil.ignore_patterns("eval", ".lock"))
  return to


def rot(step_dir):
  """8 zero bytes in the middle of every file of a checkpoint's arrays (bit rot)."""
  hit = 0
  for path in (step_dir / "state").rglob("*"):
    if path.is_file() and path.stat().st_size > 64 and "d/" in path.as_posix():
      data = bytearray(path.read_bytes())
      middle = len(data) // 2
      data[middle : middle + 8] = bytes(8)
      path.write_bytes(bytes(data))
      hit += 1
  assert hit, "no array file to damage"


def test_a_damaged_best_checkpoint_is_set_aside_and_evaluation_falls_back(
  trained, tmp_path, caplog
):
  """Bit rot in best/ is caught by its checksums: the folder is named in a warning and moved to
  damaged/, and evaluation uses the intact regular checkpoint with the best validation BLEU.
  (In the test's process the warning reaches caplog; a process of its own writes it to stderr
  through absl's handler, as every warning.)"""
  workdir = copy_run(trained, tmp_path / "rotten")
  (best,) = [p for p in (workdir / "best").iterdir() if p.name.isdigit()]
  rot(best)
  proc = run_main(workdir, "--mode=eval")
  assert f"damaged checkpoint set aside: {best}/state" in caplog.text, caplog.text[-3000:]
  assert not best.exists() and len(list((workdir / "damaged").iterdir())) == 1
  assert "evaluating the checkpoints checkpoint (step" in proc.stderr
  result = json.loads((workdir / "eval" / "test" / "results.json").read_text())
  assert np.isfinite(result["loss"]) and result["step"] in (10, 20)


def test_a_checkpoint_that_cannot_be_read_is_named_and_skipped(trained, tmp_path):
  """A step without checksums (written before them, or killed before them) whose array file is
  cut short: evaluation names its folder in one warning, without the library's tracebacks,
  and takes the next checkpoint."""
  import shutil

  from seq2seq import checkpoints

  workdir = copy_run(trained, tmp_path / "cut")
  shutil.rmtree(workdir / "best")
  step20 = workdir / "checkpoints" / "20"
  (step20 / checkpoints.CHECKSUMS).unlink()
  for path in (step20 / "state").rglob("*"):
    if path.is_file() and path.stat().st_size > 64 and "d/" in path.as_posix():
      path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
  proc = run_main(workdir, "--mode=eval", own_process=True)
  assert f"checkpoint {step20} cannot be restored" in proc.stderr, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr and "Event loop is closed" not in proc.stderr, proc.stderr[
    -4000:
  ]
  result = json.loads((workdir / "eval" / "test" / "results.json").read_text())
  assert result["step"] == 10


def test_evaluation_refuses_unusable_parameters_and_keeps_earlier_results(trained, tmp_path):
  """A best checkpoint of NaN parameters (intact as files): evaluation stops with one error
  line and leaves eval/ as the earlier evaluation wrote it."""
  import shutil

  from seq2seq import checkpoints
  from seq2seq import sharding as rt
  from seq2seq.data import tokenizer as tok

  workdir = tmp_path / "nan"
  shutil.copytree(trained, workdir, ignore=shutil.ignore_patterns(".lock"))
  before = (workdir / "eval" / "test" / "results.json").read_text()
  config = checkpoints.load_config(workdir)
  sizes = [tok.load(workdir / "vocab" / side).size for side in ("src", "tgt")]
  fresh = rt.abstract_state(settings_lib.validate(config), *sizes, rt.Runtime())
  best = checkpoints.Checkpointer(workdir, 1, subdir="best")
  state, _ = best.restore(fresh, with_data=False)
  state = state.replace(params=jax.tree.map(lambda p: p * jnp.nan, state.params))
  shutil.rmtree(workdir / "best" / str(int(state.step)))
  best.close()
  best = checkpoints.Checkpointer(workdir, 1, subdir="best")
  best.save(state, None)
  best.close()
  proc = run_main(workdir, "--mode=eval", check=False)
  assert proc.returncode == 1
  line = proc.stderr.strip().splitlines()[-1]
  assert line.startswith("error:") and "parameters are unusable" in line, line
  assert (workdir / "eval" / "test" / "results.json").read_text() == before


@pytest.mark.slow
@pytest.mark.parametrize("point", ["best-checkpoint", "after-best-checkpoint"])
def test_a_kill_around_the_best_checkpoint_save_then_rerun_matches(
  trained, reference, tmp_path, point
):
  """Killed at step 10's validation, after its regular checkpoint and before (or just after)
  its best checkpoint, with its validation row unwritten: the rerun redoes that validation, so
  its metrics, best checkpoint, parameters and results are the uninterrupted run's."""
  workdir = tmp_path / point
  killed_at(point, workdir, "--config.train.num_steps=20")
  assert not any(r["split"] == "valid" for r in metric_rows(workdir))
  run_main(workdir, "--config.train.num_steps=20", NO_HEATMAPS)
  assert_same_params(workdir, reference)
  keys = ("step", "split", "loss", "bleu")
  rows = lambda w: [{k: r.get(k) for k in keys} for r in metric_rows(w)]
  assert rows(workdir) == rows(trained)
  best = lambda w: sorted(p.name for p in (w / "best").iterdir() if p.name.isdigit())
  assert best(workdir) == best(trained)
  for split in ("valid", "test"):
    got = json.loads((workdir / "eval" / split / "results.json").read_text())
    want = json.loads((trained / "eval" / split / "results.json").read_text())
    assert (got["step"], got["bleu"], got["loss"]) == (want["step"], want["bleu"], want["loss"])


@pytest.mark.slow
def test_a_run_resumes_from_the_newest_intact_checkpoint(trained, reference, tmp_path, caplog):
  """The newest checkpoint rots before a rerun: it is set aside with a warning naming it, and
  the run resumes from the one before, ending as the uninterrupted run."""
  workdir = copy_run(trained, tmp_path / "rotten")  # Checkpoints 10 and 20.
  rot(workdir / "checkpoints" / "20")
  proc = run_main(workdir, "--config.train.num_steps=20", *FAST)
  assert f"damaged checkpoint set aside: {workdir}/checkpoints/20/state" in caplog.text
  assert "resumed from step 10" in proc.stderr
  assert_same_params(workdir, reference)


def test_the_best_checkpoints_bleu_is_kept_beside_it(trained, tmp_path):
  """What a resumed run must beat is read from beside best/ (validation.json), so a
  metrics.jsonl that lost its validation rows cannot let a worse checkpoint replace the best."""
  workdir = copy_run(trained, tmp_path / "run")
  (best,) = [p for p in (workdir / "best").iterdir() if p.name.isdigit()]
  held = json.loads((best / train.BEST_BLEU).read_text())
  assert held["step"] == int(best.name) and "bleu" in held
  (best / train.BEST_BLEU).write_text(json.dumps({"step": held["step"], "bleu": 99.0}) + "\n")
  rows = [r for r in metric_rows(workdir) if r["split"] == "train"]  # Validation rows lost.
  (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  run_main(workdir, "--config.train.num_steps=30", *FAST[:1])
  assert [p.name for p in (workdir / "best").iterdir() if p.name.isdigit()] == [best.name]


def test_a_disk_too_full_for_the_next_checkpoint_stops_in_one_line_keeping_those_before(
  tmp_path, monkeypatch
):
  """The disk has room for the checkpoint of step 5 and not for step 10's: the run stops with
  one error line naming both sizes before Orbax starts a write it cannot finish, and step 5's
  checkpoint is intact (a rerun resumes from it)."""
  import collections
  import shutil

  from seq2seq import checkpoints

  usage, workdir = shutil.disk_usage, tmp_path / "run"
  saves = []

  def disk_usage(path):  # (Every user of shutil sees this one: count the checkpoints' only.)
    real = usage(path)
    if not str(path).startswith(str(workdir / "checkpoints")):
      return real
    saves.append(path)
    free = real.free if len(saves) == 1 else 1 << 20
    return collections.namedtuple("usage", "total used free")(real.total, real.used, free)

  monkeypatch.setattr(checkpoints.shutil, "disk_usage", disk_usage)
  steps = ("--config.train.num_steps=20", "--config.train.checkpoint_every=5")
  proc = run_main(workdir, *steps, "--config.train.final_eval=false", check=False)
  assert proc.returncode == 1
  lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
  assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
  assert "no room for the checkpoint of step 10" in lines[0] and "MiB free" in lines[0]
  assert checkpoints.Checkpointer(workdir, 5).manager.all_steps() == [5]


# main.py with the TensorBoard event files of a run on a full disk: every file opened for writing
# under the folder named first is /dev/full, which takes writes into its buffer and refuses them
# with ENOSPC when they reach the disk. The other arguments are main.py's.
FULL_TENSORBOARD = """
import builtins, runpy, sys
folder, sys.argv = sys.argv[1], ["main.py", *sys.argv[2:]]
real_open = builtins.open
def full_disk_open(file, mode="r", *args, **kwargs):
  if str(file).startswith(folder) and "w" in mode:
    file = "/dev/full"
  return real_open(file, mode, *args, **kwargs)
builtins.open = full_disk_open
runpy.run_path("main.py", run_name="__main__")
"""


def test_a_full_disk_under_the_tensorboard_events_is_one_line_and_nothing_at_exit(tmp_path):
  """The disk is full from the start for the run's TensorBoard events: the run stops with one
  error line naming the event file, and nothing is printed after it (tensorboardX's writer
  thread and its atexit hook printed a traceback each)."""
  if not Path("/dev/full").exists():
    pytest.skip("no /dev/full on this system")
  workdir = tmp_path / "run"
  cmd = main_command(workdir, "--config.train.num_steps=5", *FAST)
  cmd[1:2] = ["-c", FULL_TENSORBOARD, str(workdir / "tensorboard")]
  proc = subprocess.run(
    cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600
  )
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  line = proc.stderr.strip().splitlines()[-1]
  assert line.startswith("error:") and "No space left on device" in line, line
  assert f"{workdir / 'tensorboard'}/events.out.tfevents." in line, line

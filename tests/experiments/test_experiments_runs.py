"""A study's runs (experiments/lib/runs): when one is finished (checkpoints, results, the
splits it was evaluated on), its wall time and machines saved while it trains, and the exit
status of a preempted one."""

from __future__ import annotations

import json
import time

import pytest

from experiments.lib import runs as runs_lib
from experiments.lib.runs import Run


def test_a_run_kept_without_checkpoints_is_finished_at_its_last_step(tmp_path):
  run = Run("p-seed0", "configs/tiny.py", {"train.num_steps": 40}, tmp_path / "w")
  results = run.workdir / "eval" / "test" / "results.json"
  assert not runs_lib.is_finished(run)
  results.parent.mkdir(parents=True)
  results.write_text(json.dumps({"step": 20}))  # The best checkpoint's step, evaluated.

  def trained_to(step):
    rows = [{"step": s, "split": "train", "loss": 1.0} for s in range(10, step + 1, 10)]
    (run.workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

  trained_to(30)
  assert not runs_lib.is_finished(run)  # Stopped early (a wall budget), not at num_steps.
  trained_to(40)
  assert runs_lib.is_finished(run)  # A committed study's run: results, no weights.
  (run.workdir / "checkpoints" / "20").mkdir(parents=True)
  assert not runs_lib.is_finished(run)  # Weights present: they decide.


def test_a_run_evaluated_without_the_long_split_is_evaluated_again_or_refused(tmp_path):
  """A study that adds the long test split finds a shared baseline evaluated without it: with its
  last checkpoint the run is unfinished (resuming only evaluates); kept without checkpoints (as
  committed) it cannot be evaluated, and the study stops with one line instead of a KeyError."""
  long_split = {"data.long_test_min_words": 12, "data.long_test_max_words": 18}
  run = Run("p-seed0", "configs/tiny.py", {"train.num_steps": 20, **long_split}, tmp_path / "w")
  (run.workdir / "checkpoints" / "20").mkdir(parents=True)
  rows = [{"step": s, "split": "train", "loss": 1.0} for s in (10, 20)]
  (run.workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  for split in ("valid", "test"):
    (run.workdir / "eval" / split).mkdir(parents=True)
    (run.workdir / "eval" / split / "results.json").write_text(json.dumps({"step": 20}))
  plain = Run("p-seed0", "configs/tiny.py", {"train.num_steps": 20}, run.workdir)
  assert runs_lib.is_finished(plain) and not runs_lib.is_finished(run)
  (run.workdir / "checkpoints" / "20").rmdir()
  assert runs_lib.is_finished(plain)
  with pytest.raises(SystemExit, match="evaluated without test_long"):
    runs_lib.is_finished(run)
  (run.workdir / "eval" / "test_long").mkdir()
  (run.workdir / "eval" / "test_long" / "results.json").write_text(json.dumps({"step": 20}))
  assert runs_lib.is_finished(run)


def test_a_run_s_wall_time_is_saved_while_it_trains(tmp_path):
  """A session's end kills the study mid-run: the time spent so far must already be on disk."""
  workdirs = [tmp_path / "a", tmp_path / "b"]
  with runs_lib.timed(workdirs, every_s=0.05):
    time.sleep(0.3)
    during = [runs_lib.wall_time(w) for w in workdirs]
  assert all(0.05 <= s <= 0.3 / 2 for s in during)  # Two seeds together: a share each.
  with runs_lib.timed(workdirs[:1], every_s=10.0):  # A second invocation adds to the first.
    pass
  assert runs_lib.wall_time(workdirs[0]) >= 0.3 / 2 - 1e-6
  assert runs_lib.load_average(workdirs[0]) >= 0.0  # The machine's load, sampled meanwhile.
  assert runs_lib.machines(workdirs[0]) == [runs_lib.this_machine()]


def test_the_wall_time_file_is_never_read_half_written(tmp_path):
  """A study reads a run's wall time while the run saves it (the suite once failed on an empty
  file) and a kill can land mid-save: every read sees a whole record."""
  workdir, seen, errors = tmp_path / "a", 0, []
  with runs_lib.timed([workdir], every_s=0.0005):
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:
      try:
        seen += runs_lib.wall_time(workdir) >= 0.0
      except ValueError as error:  # json's error on an empty or partial file.
        errors.append(error)
  assert seen > 0 and not errors, f"{len(errors)} of {seen + len(errors)} reads failed"


def test_a_run_on_an_accelerator_names_it_beside_the_host(monkeypatch):
  """A run trained on a lent GPU is recorded as such, not as its host's CPU alone."""
  host = runs_lib.this_machine()  # Here: the CPU alone.

  class Device:
    device_kind = "NVIDIA H200"

  monkeypatch.setattr(runs_lib.jax, "default_backend", lambda: "gpu")
  monkeypatch.setattr(runs_lib.jax, "devices", lambda: [Device()])
  assert runs_lib.this_machine() == f"{host}, 1 x NVIDIA H200"


@pytest.mark.parametrize("together", [False, True])
def test_a_preempted_study_exits_as_a_scheduler_reruns(together, tmp_path, monkeypatch):
  """A run stopped by a signal after saving ends its sweep with cli.PREEMPTED (75), as main.py
  does, not with 1 (a failure): a scheduler requeues it and the rerun resumes."""
  from seq2seq import cli as seq2seq_cli
  from seq2seq import seed_group, train

  run = Run("p-seed0", "configs/tiny.py", {"train.num_steps": 40}, tmp_path / "w")
  monkeypatch.setattr(train, "train_and_evaluate", lambda *a, **k: {"preempted_at_step": 20})
  monkeypatch.setattr(seed_group, "train_together", lambda *a, **k: [{"preempted_at_step": 20}])
  with pytest.raises(SystemExit) as stopped:
    runs_lib.train_together([run]) if together else runs_lib.train_alone(run)
  assert stopped.value.code == seq2seq_cli.PREEMPTED == 75


def test_a_decoding_copy_resumes_under_its_own_decoding_time_switches(tmp_path):
  """A sweep's --decode model.addons=copy(eos=null) copies a run trained with eos=target and
  resumes it to evaluate: the copy's config is its own, so the resume check does not refuse the
  switch."""
  from seq2seq import checkpoints

  trained = {"model.addons": "copy(eos=target)"}
  source = Run("copy-seed0", "configs/tiny.py", trained, tmp_path / "a")
  (source.workdir / "checkpoints" / str(source.config().train.num_steps)).mkdir(parents=True)
  checkpoints.check_and_save_config(source.workdir, source.config())
  overrides = {"model.addons": "copy(eos=null)"}
  run = Run("copy+eos=null-seed0", "configs/tiny.py", overrides, tmp_path / "b")
  assert runs_lib.seed_from(run, source)
  checkpoints.check_and_save_config(run.workdir, run.config())  # What train's resume calls.
  saved = json.loads((run.workdir / "config.json").read_text())
  assert saved["model"]["addons"] == "copy(eos=null)"
  assert checkpoints.saved_config_differences(source.workdir, run.config()) == ["model.addons"]
  checkpoints.check_model_config(source.workdir, run.config())  # The same model decodes.

"""Clusters without hand-set ranks: main.py's `--distributed=auto` in a fake SLURM job of two
tasks, and a sweep's SLURM array task that is signalled before its time limit, requeues itself
and resumes, under a fake scheduler (a stand-in `scontrol` that records what it is asked)."""

import os
import signal
import socket
import subprocess
import time

import numpy as np
import pytest
from helpers import (
  ROOT,
  main_command,
  metric_rows,
  run_module,
  run_processes,
  subprocess_env,
  tiny_sweep_args,
)

from seq2seq.training import metric_writer


@pytest.mark.slow
def test_distributed_auto_reads_a_slurm_job_and_matches_one_process(trained, tmp_path):
  """Two processes given only SLURM's variables (job id, node list, task count, rank): JAX
  finds the coordinator, ranks and count itself, and the run matches the one-process run."""
  port = _free_port(range(61440, 65536))  # JAX's SLURM port: 61440 + job id % 4096.
  job = {"SLURM_JOB_ID": str(port - 61440), "SLURM_STEP_NODELIST": "127.0.0.1"}
  job |= {"SLURM_NTASKS": "2", "SLURM_STEP_NUM_NODES": "1"}
  workdir = tmp_path / "two"
  cmd = main_command(
    workdir, "--config.train.num_steps=20", "--config.train.final_eval=false", "--distributed=auto"
  )
  ranks = [{"SLURM_PROCID": str(i), "SLURM_LOCALID": str(i)} for i in range(2)]
  run_processes([cmd, cmd], [{**subprocess_env(), **job, **rank} for rank in ranks])
  np.testing.assert_allclose(
    [r["loss"] for r in metric_rows(workdir)], [r["loss"] for r in metric_rows(trained)], rtol=2e-4
  )


def test_auto_with_a_coordinator_is_one_error_line(tmp_path):
  cmd = main_command(tmp_path / "x", "--distributed=auto", "--coordinator_address=127.0.0.1:1")
  proc = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True)
  assert proc.returncode != 0
  assert "--distributed=auto finds the coordinator: drop --coordinator_address" in proc.stderr


@pytest.mark.slow
def test_a_signalled_array_task_requeues_itself_and_its_rerun_finishes(tmp_path, cache_flags):
  """TERM to the sbatch script (what SLURM sends before the time limit) reaches the training,
  which saves and exits 75; the script asks `scontrol requeue JOB_TASK` and exits 0. The
  requeued task resumes from the checkpoint and finishes without asking again, and the sweep
  collects."""
  out = tmp_path / "sweep"
  # The signal follows step 10's log line (the task stopped at step 17 when this was timed), so
  # 300 steps leave the rerun most of the run to resume: at 3,000 it trained for 95 s; the test
  # took 40 s at 600 steps and 30 s at 300 (2 loaded cores). The poll is short, so the signal
  # lands soon after step 10.
  steps = 300
  args = [*tiny_sweep_args(out, steps), "--set=train.log_every=10", *cache_flags]
  run_module("experiments.sweep", *args, "--launcher=jobs")
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  asked = tmp_path / "scontrol.txt"
  (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {asked}\n')
  (bin_dir / "scontrol").chmod(0o755)
  env = {**subprocess_env(), "JAX_PLATFORMS": "cpu", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
  env |= {"SLURM_ARRAY_JOB_ID": "41", "SLURM_ARRAY_TASK_ID": "0"}
  run = out / "runs" / "score=additive" / "seed_0"

  task = subprocess.Popen(["bash", str(out / "sbatch.sh")], env=env)
  deadline = time.monotonic() + 300
  while not any(r["split"] == "train" for r in _rows(run)):
    assert task.poll() is None and time.monotonic() < deadline, "no training step logged"
    time.sleep(0.05)
  task.send_signal(signal.SIGTERM)
  assert task.wait(timeout=300) == 0
  assert asked.read_text().split() == ["requeue", "41_0"]
  stopped = max(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
  assert 0 < stopped < steps

  subprocess.run(["bash", str(out / "sbatch.sh")], env=env, check=True, timeout=600)
  assert asked.read_text().split() == ["requeue", "41_0"]  # Not asked again.
  logged = [r["step"] for r in _rows(run) if r["split"] == "train"]
  assert logged[-1] == steps and logged == sorted(set(logged))  # Resumed, no step twice.
  run_module("experiments.sweep", *args, "--collect")
  assert (out / "sweep.json").exists()


def _rows(run):
  return metric_writer.read_metrics(run) if (run / "metrics.jsonl").exists() else []


def _free_port(candidates) -> int:
  """A port of `candidates` nothing listens on now, tried in a random order."""
  for port in np.random.default_rng().permutation(list(candidates))[:50]:
    with socket.socket() as s:
      try:
        s.bind(("127.0.0.1", int(port)))
      except OSError:
        continue
      return int(port)
  pytest.skip("no free port in SLURM's range")

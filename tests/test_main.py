"""The training program end to end on configs/tiny.py: files, resume, errors, devices."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_main(workdir, *overrides, env=None, check=True):
  cmd = [sys.executable, "main.py", "--config=configs/tiny.py", f"--workdir={workdir}", *overrides]
  proc = subprocess.run(
    cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=600
  )
  if check and proc.returncode != 0:
    raise AssertionError(f"exit {proc.returncode}\n{proc.stderr[-3000:]}")
  return proc


def metrics(workdir):
  return [json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]


def final_params(workdir):
  """The parameters of the latest checkpoint as a flat dict of arrays."""
  import orbax.checkpoint as ocp

  ckpt_dir = Path(workdir) / "checkpoints"
  step = max(int(p.name) for p in ckpt_dir.iterdir() if p.name.isdigit())
  tree = ocp.StandardCheckpointer().restore(ckpt_dir / str(step) / "state")
  flat = {}

  def walk(prefix, node):
    if isinstance(node, dict):
      for k, v in node.items():
        walk(f"{prefix}/{k}", v)
    else:
      flat[prefix] = np.asarray(node)

  walk("", tree["params"])
  return step, flat


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("run") / "full"
  run_main(workdir, "--config.train.num_steps=20")
  return workdir


def test_run_writes_every_promised_file(trained):
  config = json.loads((trained / "config.json").read_text())
  assert config["train"]["num_steps"] == 20
  assert (trained / "vocab").is_dir() and any((trained / "vocab").iterdir())
  assert sorted(p.name for p in (trained / "checkpoints").iterdir() if p.name.isdigit()) == [
    "10",
    "20",
  ]
  records = metrics(trained)
  train_rows = [r for r in records if r["split"] == "train"]
  assert [r["step"] for r in train_rows] == [5, 10, 15, 20]
  for r in train_rows:
    assert {"step", "split", "loss", "learning_rate", "grad_norm", "tokens_per_s"} <= set(r)
  valid_rows = [r for r in records if r["split"] == "valid"]
  assert [r["step"] for r in valid_rows] == [10, 20]
  assert all({"loss", "perplexity"} <= set(r) for r in valid_rows)
  assert any(p.name.startswith("events.out.tfevents") for p in (trained / "tensorboard").iterdir())
  for split in ("valid", "test"):
    result = json.loads((trained / "eval" / split / "results.json").read_text())
    assert result["step"] == 20 and np.isfinite(result["loss"]) and result["perplexity"] > 1


def test_resume_equals_uninterrupted_run(trained, tmp_path):
  workdir = tmp_path / "resumed"
  run_main(workdir, "--config.train.num_steps=10")
  proc = run_main(workdir, "--config.train.num_steps=20")  # Continues the finished run.
  assert "resumed from step 10" in proc.stderr
  step_a, full = final_params(trained)
  step_b, resumed = final_params(workdir)
  assert step_a == step_b == 20
  for key in full:
    np.testing.assert_array_equal(resumed[key], full[key], err_msg=key)

  def strip(rows):
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows]

  assert strip(metrics(workdir)) == strip(metrics(trained))


def test_changed_model_is_refused_with_the_field_names(trained, tmp_path):
  workdir = tmp_path / "changed"
  run_main(workdir, "--config.train.num_steps=5")
  proc = run_main(workdir, "--config.model.score=dot", "--config.model.emb_dim=8", check=False)
  assert proc.returncode == 1
  line = proc.stderr.strip().splitlines()[-1]
  assert line.startswith("error:") and "model.emb_dim" in line and "model.score" in line


@pytest.mark.parametrize(
  "overrides,message",
  [
    (["--config.model.score=bilinear"], "unknown score function 'bilinear'"),
    (["--config.data.corpus=local", "--config.data.local.dir=/nonexistent"], "/nonexistent"),
    (["--config.train.optimizer=lion"], "'lion' is not one of"),
  ],
)
def test_bad_settings_end_with_one_error_line(tmp_path, overrides, message):
  proc = run_main(tmp_path / "bad", *overrides, check=False)
  assert proc.returncode == 1
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error:") and message in last
  assert "Traceback" not in proc.stderr


def test_unknown_config_field_fails(tmp_path):
  proc = run_main(tmp_path / "bad", "--config.model.no_such_field=3", check=False)
  assert proc.returncode != 0
  assert "no_such_field" in proc.stderr


@pytest.mark.slow
def test_eight_devices_match_one(trained, tmp_path):
  workdir = tmp_path / "eight"
  env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
  run_main(workdir, "--config.train.num_steps=20", env=env)
  one = [r["loss"] for r in metrics(trained)]
  eight = [r["loss"] for r in metrics(workdir)]
  np.testing.assert_allclose(eight, one, rtol=2e-4, atol=2e-4)


@pytest.mark.slow
def test_two_processes_on_localhost_match_one(trained, tmp_path):
  """jax.distributed with two CPU processes, each feeding half of every batch."""
  import socket

  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  workdir = tmp_path / "two"
  cmd = [
    sys.executable,
    "main.py",
    "--config=configs/tiny.py",
    f"--workdir={workdir}",
    "--config.train.num_steps=20",
    f"--coordinator_address=127.0.0.1:{port}",
    "--num_processes=2",
  ]
  procs = [
    subprocess.Popen(
      [*cmd, f"--process_id={i}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    for i in range(2)
  ]
  outputs = [p.communicate(timeout=600) for p in procs]
  for p, (_, err) in zip(procs, outputs, strict=True):
    assert p.returncode == 0, err.decode()[-3000:]
  np.testing.assert_allclose(
    [r["loss"] for r in metrics(workdir)], [r["loss"] for r in metrics(trained)], rtol=2e-4
  )

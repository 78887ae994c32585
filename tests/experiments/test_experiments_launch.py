"""How a study's runs are launched (experiments/lib/launch and configs.run_command): a jobs
file's lines per point, group and seed, jobs pinned one to a core, a job's flags read back by the
parser, and a command run from the repository root."""

from __future__ import annotations

import os
import shutil

import pytest
from helpers import ROOT, tiny_sweep_args

from experiments import sweep as grid_sweep
from experiments.lib import driver, launch

needs_taskset = pytest.mark.skipif(
  shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2,
  reason="pinning jobs to cores needs taskset and two CPU cores",
)


@needs_taskset
def test_run_on_cores_pins_each_job_to_its_own_core_and_names_the_failures(tmp_path):
  record = "grep Cpus_allowed_list /proc/self/status > {}; sleep 0.2"
  lines = [record.format(tmp_path / f"job{i}") for i in range(5)]
  with pytest.raises(RuntimeError, match="1 of 6 jobs failed; the first: exit 3"):
    launch.run_on_cores([*lines[:2], "exit 3", *lines[2:]], processes=2)
  cores = sorted(os.sched_getaffinity(0))[:2]
  pinned = [(tmp_path / f"job{i}").read_text().split()[-1] for i in range(5)]  # Every line ran.
  assert set(pinned) <= {str(c) for c in cores}  # One core each, never the whole set.
  with pytest.raises(ValueError, match="this process may use"):
    launch.run_on_cores(lines, processes=len(os.sched_getaffinity(0)) + 1)


@pytest.mark.slow
@needs_taskset
def test_sweep_on_cores_trains_each_seed_in_its_own_process_then_reports(tmp_path, cache_flags):
  out = tmp_path / "cores"
  args = [*tiny_sweep_args(out, steps=2, seeds="0,1"), "--training", "sequential", *cache_flags]
  result = grid_sweep.main([*args, "--launcher=cores", "--processes", "2"])
  assert len((out / "jobs.txt").read_text().splitlines()) == 2  # A process per seed.
  assert sorted(p.name for p in (out / "logs").glob("*.log")) == [
    "score=additive-seed0.log",
    "score=additive-seed1.log",
  ]
  assert sorted(result["runs"]) == ["score=additive-seed0", "score=additive-seed1"]
  assert all(rec["results"]["test"]["step"] == 2 for rec in result["runs"].values())
  with pytest.raises(SystemExit):
    grid_sweep.main([*args, "--launcher=cores", "--only", "score=additive"])


def test_study_jobs_group_decoding_points_and_split_sequential_seeds(tmp_path):
  """The alignment study's gnmt-beam decodes additive's runs: it shares additive's job line;
  sequential training gives one line per group and seed."""
  from experiments import alignment_study

  out = tmp_path / "study"
  argv = ["--out", str(out), "--preset", "smoke", "--seeds", "0,1", "--launcher", "jobs"]
  argv += ["--variants", "additive,coverage,gnmt-beam", "--training", "sequential"]
  alignment_study.main(argv)
  lines = (out / "jobs.txt").read_text().splitlines()
  assert len(lines) == 4 and all("-m experiments.alignment_study" in line for line in lines)
  assert [line.count("--only=additive,gnmt-beam") for line in lines] == [1, 1, 0, 0]
  assert [line.split("--seeds=")[1].split()[0] for line in lines] == ["0", "1", "0", "1"]
  assert all("--preset=smoke" in line and "--training=sequential" in line for line in lines)


def test_job_flags_round_trip_through_the_parser():
  parser = driver.parser(grid_sweep.GridSweep(grid_sweep.__doc__))
  argv = ["--out=/x", "--config=configs/tiny.py", "--grid=model.score=a,b", "--set=train.x=1"]
  args = parser.parse_args([*argv, "--collect"])
  again = parser.parse_args(launch.flags(vars(args)))
  assert vars(again) == vars(args)


def test_run_command_runs_from_the_root_and_fails_in_one_line(capfd):
  """The experiments' one way to run a `python ...` command: from the repository root with this
  interpreter, printed first; a failure names the command and its exit code."""
  from experiments.lib.configs import run_command

  out = run_command(["python", "-c", "import pathlib; print(pathlib.Path.cwd())"])
  assert capfd.readouterr().out.splitlines() == [f"$ {out}", str(ROOT)]
  with pytest.raises(SystemExit, match="failed with exit code 3"):
    run_command("python -c 'raise SystemExit(3)'")


def test_a_sweep_keeps_only_the_points_named_and_refuses_unknown_ones(tmp_path):
  """`--points` keeps part of the cross product (Luong et al.'s Table 4 is not a whole one):
  the jobs, and so the definition, hold only those points."""
  out = tmp_path / "part"
  argv = ["--out", str(out), "--config=configs/tiny.py", "--launcher", "jobs", "--seeds", "0"]
  argv += ["--grid", "model.attention=soft,local_m", "--grid", "model.score=dot,location"]
  grid_sweep.main([*argv, "--points", "attention=soft+score=location,attention=local_m+score=dot"])
  only = [
    line.split("--only=")[1].split()[0] for line in (out / "jobs.txt").read_text().splitlines()
  ]
  assert only == ["attention=soft+score=location", "attention=local_m+score=dot"]
  with pytest.raises(SystemExit, match="unknown point"):
    grid_sweep.main([*argv, "--points", "attention=hard+score=dot"])

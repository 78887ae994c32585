"""A sweep handed to a scheduler: OUT/jobs.txt, one shell command a line, and OUT/sbatch.sh.

Each line trains one group of the sweep and nothing else: it changes to the repository root and
runs the sweep's own script (`python -m experiments.sweep ... --only POINT`) with the interpreter
that wrote the file, logging to OUT/logs/. A group is a trained point with every point that
decodes its runs; with `--training together` a line trains all seeds of its group as one
vmapped group, with `sequential` there is one line per group and seed. Lines depend on no other
line: they run alone, in any order and concurrently (GNU parallel, `xargs -P`, a SLURM job
array), and a line whose runs are finished trains nothing, so a failed array is rerun whole.

Shared state: the corpus every run reads from OUT/data (`data.cache_dir`) is built here, once,
before the file is written, so no two jobs build it at the same time (tfds does not coordinate
concurrent builds of one dataset: each process builds its own copy and renames it into place);
vocabularies live in each workdir; JAX's compilation cache may be shared (an entry read while
another process writes it is a miss, with a warning, not an error). Only groups with unfinished
runs get a line; `--collect` gathers the workdirs once every line has finished.

On one machine, `run_on_cores` runs the lines itself, a few at a time, each process pinned to one
CPU core (the sweep's `--launcher=cores`): on a small CPU, independent runs side by side on a core
each can finish sooner than one after another on all cores (the recurrences are many small
operations that two threads share poorly); `experiments/seed_timing.py --ways
sequential,processes` measures which is faster on a given machine.
"""

from __future__ import annotations

import os
import queue
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.lib import runs as runs_lib
from experiments.lib.configs import REPO_ROOT
from experiments.lib.sweeps import Sweep
from seq2seq import cli as seq2seq_cli
from seq2seq.data import builders, input_pipeline

JOBS_FILE = "jobs.txt"
SBATCH_FILE = "sbatch.sh"


def build_data(sweep: Sweep) -> list[Path]:
  """Builds every corpus that runs of the sweep share (those outside a run's own workdir), once
  per distinct data config and folder; the folders."""
  built: dict[tuple[str, str], Path] = {}
  for point in sweep.points:
    for run in sweep.runs(point):
      config = run.config()
      data_settings = input_pipeline.DataSettings.from_config(config)
      folder = input_pipeline.data_dir(data_settings, run.workdir).resolve()
      key = (str(folder), config.data.to_json())
      if key in built or folder.is_relative_to(run.workdir.resolve()):
        continue
      builders.prepare_corpus(data_settings, folder)
      built[key] = folder
  return sorted(set(built.values()))


def groups(sweep: Sweep) -> list[list[str]]:
  """Names of the points each job trains: a trained point, then the points decoding its runs."""
  out = [[p.name] for p in sweep.points if p.decode_from is None]
  for point in sweep.points:
    if point.decode_from is not None:
      next(g for g in out if g[0] == point.decode_from).append(point.name)
  return out


def flags(values: Mapping[str, Any]) -> list[str]:
  """Command-line flags from parsed arguments ({dest: value}, dest `a_b` -> `--a-b`): lists
  repeat the flag, True is a bare flag, False and None are left out."""
  out = []
  for dest, value in values.items():
    flag = "--" + dest.replace("_", "-")
    if isinstance(value, bool):
      out += [flag] if value else []
    elif isinstance(value, list | tuple):
      out += [f"{flag}={item}" for item in value]
    elif value is not None:
      out.append(f"{flag}={value}")
  return out


def job_line(module: str, arguments: Mapping[str, Any], log: Path) -> str:
  """A self-contained shell command: cd to the repository, run `module` with `arguments`."""
  argv = [sys.executable, "-m", module, *flags(arguments)]
  command = " ".join(shlex.quote(a) for a in argv)
  log_dir = shlex.quote(str(log.parent))
  # `exec`: the shell becomes the script, so a signal sent to the line reaches it.
  return (
    f"cd {shlex.quote(str(REPO_ROOT))} && mkdir -p {log_dir} && "
    f"exec {command} >> {shlex.quote(str(log))} 2>&1"
  )


def job_lines(sweep: Sweep, module: str, arguments: Mapping[str, Any]) -> list[str]:
  """The lines of the groups with unfinished runs. `arguments` are the parsed command line that
  planned the sweep (absolute paths); each line adds `--only` (and `--seeds` when sequential)."""
  base = {k: v for k, v in arguments.items() if k not in ("launcher", "collect", "only")}
  logs = sweep.out / "logs"
  lines = []
  for group in groups(sweep):
    runs = [run for name in group for run in sweep.runs(name)]
    if all(runs_lib.is_finished(run) for run in runs):
      continue
    only = ",".join(group)
    if sweep.training == "together":
      lines.append(job_line(module, {**base, "only": only}, logs / f"{group[0]}.log"))
      continue
    for seed in sweep.seeds:
      log = logs / f"{group[0]}-seed{seed}.log"
      lines.append(job_line(module, {**base, "only": only, "seeds": str(seed)}, log))
  return lines


SIGNAL_SECONDS = 120  # How long before the time limit SLURM is asked to send TERM.


def sbatch_script(jobs: Path, count: int) -> str:
  """A SLURM job array running line $SLURM_ARRAY_TASK_ID + 1 of `jobs` per task, which asks
  for TERM two minutes before its time limit, passes it to the line (training saves its
  checkpoint and exits with `cli.PREEMPTED`) and then puts the task back in the queue
  (`scontrol requeue`), where it resumes from that checkpoint."""
  logs = jobs.parent / "logs"
  return "\n".join(
    [
      "#!/bin/bash",
      f"#SBATCH --job-name={jobs.parent.name or 'sweep'}",
      f"#SBATCH --array=0-{count - 1}",
      f"#SBATCH --output={logs}/slurm-%A_%a.out",
      f"#SBATCH --signal=B:TERM@{SIGNAL_SECONDS}",
      "#SBATCH --requeue",
      "# Add the partition, time, memory and GPU requests of your cluster above this line.",
      "# Task i runs line i + 1 of the jobs file (each line cds to the repository itself).",
      "# TERM (from SLURM before the time limit, or scancel --signal=TERM --batch) goes to the",
      f"# line, whose training saves and exits with {seq2seq_cli.PREEMPTED}; the task then",
      "# requeues itself.",
      "set -uo pipefail",
      f'line=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" {shlex.quote(str(jobs))})',
      'bash -c "$line" &',
      "child=$!",
      "stopping=0",
      "trap 'stopping=1; kill -TERM \"$child\" 2>/dev/null' TERM",
      'wait "$child"; status=$?',
      "# A trapped TERM ends the first wait early; the second gets the line's own status.",
      'if [ "$stopping" = 1 ] && [ "$status" -gt 128 ]; then wait "$child"; status=$?; fi',
      f'if [ "$status" -eq {seq2seq_cli.PREEMPTED} ]; then',
      '  scontrol requeue "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}" && exit 0',
      "fi",
      'exit "$status"',
      "",
    ]
  )


def write_jobs(
  sweep: Sweep, module: str, arguments: Mapping[str, Any]
) -> tuple[list[str], list[Path]]:
  """Builds the shared data, writes OUT/jobs.txt and (with any line) OUT/sbatch.sh; the jobs'
  lines and the paths written."""
  build_data(sweep)
  lines = job_lines(sweep, module, arguments)
  jobs = sweep.out / JOBS_FILE
  jobs.write_text("".join(line + "\n" for line in lines))
  sbatch = sweep.out / SBATCH_FILE
  if not lines:
    sbatch.unlink(missing_ok=True)
    return lines, [jobs]
  (sweep.out / "logs").mkdir(exist_ok=True)
  sbatch.write_text(sbatch_script(jobs, len(lines)))
  sbatch.chmod(0o755)
  return lines, [jobs, sbatch]


def run_on_cores(lines: Sequence[str], processes: int) -> None:
  """Runs the shell `lines`, at most `processes` at once, the k-th worker's processes pinned to
  the k-th CPU core this process may use (`taskset -c`); each worker takes the next line when its
  last one ends. Raises naming the lines that failed, after every line has run."""
  cores = sorted(os.sched_getaffinity(0))
  if processes < 1 or processes > len(cores):
    raise ValueError(f"--processes {processes}: this process may use {len(cores)} CPU cores")
  if shutil.which("taskset") is None:
    raise ValueError("--launcher=cores pins each process with taskset, which is not installed")
  todo: queue.SimpleQueue[str] = queue.SimpleQueue()
  for line in lines:
    todo.put(line)
  failed: list[str] = []

  def worker(core: int) -> None:
    while True:
      try:
        line = todo.get_nowait()
      except queue.Empty:
        return
      if subprocess.run(["taskset", "-c", str(core), "sh", "-c", line]).returncode != 0:
        failed.append(line)

  threads = [threading.Thread(target=worker, args=(core,)) for core in cores[:processes]]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  if failed:
    raise RuntimeError(f"{len(failed)} of {len(lines)} jobs failed; the first: {failed[0]}")

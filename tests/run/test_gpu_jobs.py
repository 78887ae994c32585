"""experiments/gpu_jobs.sh, the way a lent GPU trains sweeps' jobs files, run here on fake jobs:
each point's first run starts before the point's other seeds (unless it fails first), the runs
still going at the deadline are stopped, and the archive holds what the studies commit and
nothing heavier."""

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A fake run: notes when it started, trains (prints a step line) after DELAY seconds, then
# finishes after WORK more with what a real run leaves: its results, a checkpoint, an explorer.
FAKE_RUN = """
import json, pathlib, sys, time
out, point, seed = sys.argv[1:4]
delay, work = float(sys.argv[4]), float(sys.argv[5])
run = pathlib.Path(out, "runs", point, "seed_" + seed)
run.mkdir(parents=True, exist_ok=True)
(run / "started").write_text(repr(time.time()))
if delay < 0:
  sys.exit("failed before training")
time.sleep(delay)
(run / "training").write_text(repr(time.time()))
print("step 1/2", flush=True)
time.sleep(work)
(run / "checkpoints").mkdir(exist_ok=True)
(run / "checkpoints" / "state").write_text("weights")
(run / "eval" / "test").mkdir(parents=True, exist_ok=True)
(run / "eval" / "test" / "results.json").write_text(json.dumps({"bleu": 1.0}))
(run / "eval" / "test" / "report.html").write_text("<html>")
"""


def _job(study: Path, point: str, seed: int, delay: float, work: float) -> str:
  script = study / "fake_run.py"
  log = study / "logs" / f"{point}-seed{seed}.log"
  return (
    f"cd {ROOT} && mkdir -p {study}/logs && exec {ROOT}/.venv/bin/python {script} {study} "
    f"{point} {seed} {delay} {work} --out={study} --only={point} >> {log} 2>&1"
  )


def test_gpu_jobs_starts_each_points_first_run_alone_and_packs_the_records(tmp_path: Path):
  study = tmp_path / "study"
  study.mkdir()
  (study / "fake_run.py").write_text(FAKE_RUN)
  jobs = study / "jobs.txt"
  lines = [
    _job(study, "a", 0, 1.5, 0.2),
    _job(study, "a", 1, 0.0, 0.2),
    _job(study, "b", 0, 1.5, 0.2),
    _job(study, "b", 1, 0.0, 60.0),  # Still running at the deadline.
    _job(study, "c", 0, -1.0, 0.0),  # Fails before it trains: nobody waits for it.
    _job(study, "c", 1, 0.0, 0.2),
  ]
  jobs.write_text("\n".join(lines) + "\n")
  out = tmp_path / "out"
  env = {**os.environ, "PY": sys.executable, "OUT": str(out), "POLL": "1"}
  start = time.time()
  done = subprocess.run(
    ["bash", "experiments/gpu_jobs.sh", "8", "2", str(jobs)],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert done.returncode == 0, done.stderr
  assert time.time() - start < 60  # The long run was stopped, not waited for.
  runs = study / "runs"
  for point in ("a", "b"):  # A point's second seed starts once its first trains.
    first_training = float((runs / point / "seed_0" / "training").read_text())
    assert float((runs / point / "seed_1" / "started").read_text()) >= first_training
  with tarfile.open(out / "records.tgz") as tar:
    names = {Path("/", name).relative_to(study).as_posix() for name in tar.getnames()}
  done_runs = ("a/seed_0", "a/seed_1", "b/seed_0", "c/seed_1")
  finished = {f"runs/{p}/eval/test/results.json" for p in done_runs}
  assert finished <= names
  assert "runs/b/seed_1/eval/test/results.json" not in names
  assert not [n for n in names if "checkpoints" in n or n.endswith("report.html")]
  assert "logs/b-seed1.log" in names
  assert json.loads((runs / "a" / "seed_0" / "eval" / "test" / "results.json").read_text())
  assert "finished: " + str(runs / "b" / "seed_0" / "eval" / "test" / "results.json") in done.stdout

"""A run: a config file with dotted overrides, trained in an ordinary workdir.

Every run the experiment scripts launch is what `main.py --config=FILE --workdir=DIR
--config.X=Y ...` would train (`Run.command` prints that command), so each can be inspected,
resumed or continued alone. Training goes through `seq2seq.train.train_and_evaluate`, or
`seq2seq.seed_group.train_together` for the seeds of one configuration; a rerun resumes an
unfinished run from its last checkpoint and leaves a finished one alone.

What a workdir holds that this module reads: `checkpoints/STEP`, `eval/SPLIT/results.json` and
`hypotheses.txt` (written by the final evaluation), `metrics.jsonl` (train and valid lines) and
`wall_time.json` (kept here: the seconds spent training it, summed over invocations). A run
committed with a study keeps instead its compact record, `record.json`, and its test outputs,
`hypotheses/SPLIT.txt.gz` (`experiments/lib/records.py`): every reader here takes the
workdir's own files where they are present and the record where they are not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import ml_collections

from experiments.lib import configs, records, reports
from seq2seq import cli as seq2seq_cli
from seq2seq import seed_group, train
from seq2seq.common import files
from seq2seq.data import builders, input_pipeline
from seq2seq.training import metric_writer

WALL_TIME_FILE = "wall_time.json"


@dataclasses.dataclass
class Run:
  """A config file (with its variant argument) plus dotted overrides, trained in `workdir`."""

  name: str
  config_file: str  # e.g. "configs/demo.py" or "configs/rnnsearch.py:maxlen=30".
  overrides: dict[str, Any]
  workdir: Path

  def config(self) -> ml_collections.ConfigDict:
    return configs.apply_overrides(configs.load_config(self.config_file), self.overrides)

  def command(self) -> str:
    """The main.py command that trains (or resumes) this run alone."""
    return configs.main_command(self.config_file, self.workdir, self.config())


# ---------------------------------------------------------------------- what a workdir holds
def checkpoint_steps(workdir: Path) -> list[int]:
  """Steps of the checkpoints kept in WORKDIR/checkpoints."""
  ckpt = workdir / "checkpoints"
  if not ckpt.is_dir():
    return []
  return sorted(int(p.name) for p in ckpt.iterdir() if p.name.isdigit())


def metrics(workdir: Path) -> list[dict[str, Any]]:
  """The run's metrics.jsonl rows, or its record's curves as those rows (`records`)."""
  workdir = Path(workdir)
  if (workdir / "metrics.jsonl").exists():
    return metric_writer.read_metrics(workdir)
  record = records.read_record(workdir)
  return records.metric_rows(record) if record else []


def read_results(workdir: Path) -> dict[str, Any] | None:
  """{split: results} from every WORKDIR/eval/SPLIT/results.json (valid, test and any other
  split evaluated, such as the long test split), else from the run's record; None while valid
  or test is missing."""
  found = {p.parent.name: p for p in sorted((workdir / "eval").glob("*/results.json"))}
  if {"valid", "test"} <= set(found):
    return {split: json.loads(path.read_text()) for split, path in found.items()}
  record = records.read_record(workdir)
  if record and {"valid", "test"} <= set(record["results"]):
    return record["results"]
  return None


def is_finished(run: Run, config: ml_collections.ConfigDict | None = None) -> bool:
  """Trained to `train.num_steps` and evaluated (test results newer than the last checkpoint,
  and results on the long test split where the config asks for one).

  A workdir kept without its checkpoints (a study's results committed to the repository, the
  weights left out) is finished when it has test results and its metrics reach step
  `train.num_steps` (the results themselves are of the best checkpoint, often an earlier step),
  so a study resumes from what is committed. Such a run evaluated without a split the config
  asks for (a baseline shared with a study that adds the long split) cannot be evaluated again:
  that stops the study with one line naming the workdir.
  """
  config = config or run.config()
  steps = checkpoint_steps(run.workdir)
  results = run.workdir / "eval" / "test" / "results.json"
  long = input_pipeline.LONG_TEST
  if not results.exists():
    record = records.read_record(run.workdir)
    if record is None or "test" not in record["results"]:
      return False
    # A converted run (`records`): its record says what it trained and evaluated.
    if (
      input_pipeline.has_long_test(input_pipeline.DataSettings.from_config(config))
      and long not in record["results"]
    ):
      _cannot_evaluate_again(run)
    return record["updates"] >= config.train.num_steps
  missing = (
    input_pipeline.has_long_test(input_pipeline.DataSettings.from_config(config))
    and not (run.workdir / "eval" / long / "results.json").exists()
  )
  if not steps:
    trained = max((r["step"] for r in metrics(run.workdir)), default=0)
    done = trained >= config.train.num_steps
    if done and missing:
      _cannot_evaluate_again(run)
    return done
  if steps[-1] != config.train.num_steps or missing:
    return False  # Resuming trains the rest, or only evaluates.
  last = run.workdir / "checkpoints" / str(steps[-1])
  return results.stat().st_mtime >= last.stat().st_mtime


def _cannot_evaluate_again(run: Run) -> None:
  """Stops the study: `run` lacks the long test split's results and keeps no checkpoint."""
  raise SystemExit(
    f"error: {run.workdir} was evaluated without {input_pipeline.LONG_TEST} and keeps no "
    "checkpoint to evaluate again: delete it to train the run again"
  )


def _wall_record(workdir: Path) -> dict[str, Any]:
  path = workdir / WALL_TIME_FILE
  if path.exists():
    return json.loads(path.read_text())
  record = records.read_record(workdir)
  if record is None:
    return {"seconds": 0.0}
  out = {"seconds": record["wall_s"], "machines": record["machines"]}
  if record["load_1min_mean"] is not None:
    out["load_1min_mean"] = record["load_1min_mean"]
  return out


def wall_time(workdir: Path) -> float:
  """Seconds spent training the run, over every invocation (0 if none was recorded)."""
  return _wall_record(workdir)["seconds"]


def train_time(workdir: Path) -> float | None:
  """The training clock at the run's last logged step (`elapsed_s` in metrics.jsonl, which a
  resumed run carries on from its checkpoint, so a cut-off invocation's time is kept); None
  where nothing was logged."""
  rows = metrics(workdir)
  return rows[-1].get("elapsed_s") if rows else None


def load_average(workdir: Path) -> float | None:
  """The machine's mean 1-minute load average while the run trained (sampled with its wall
  time; None for runs recorded before it was)."""
  return _wall_record(workdir).get("load_1min_mean")


def machines(workdir: Path) -> list[str]:
  """The machines the run trained on ("CPU model, N cores", one per distinct machine over its
  invocations: a study spans sessions, and the CPU changes between them); empty for runs
  recorded before this was."""
  return _wall_record(workdir).get("machines", [])


def this_machine() -> str:
  """This host as `machines` records it: its CPU, and the accelerators JAX computes on where
  they are not the CPU ("..., 16 cores, 1 x NVIDIA H200")."""
  host = f"{reports.cpu_info().get('cpu_model') or 'unknown CPU'}, {os.cpu_count()} cores"
  if jax.default_backend() == "cpu":
    return host
  devices = jax.devices()
  return f"{host}, {len(devices)} x {devices[0].device_kind}"


def _write_wall_time(workdir: Path, record: dict[str, Any]) -> None:
  if jax.process_index() == 0:
    workdir.mkdir(parents=True, exist_ok=True)
    # In one rename: a study reads the record while the run saves it, and a kill may come mid-save.
    files.write_atomic(workdir / WALL_TIME_FILE, json.dumps(record) + "\n")


@contextlib.contextmanager
def timed(workdirs: Sequence[Path], every_s: float = 30.0) -> Iterator[None]:
  """Adds the wall time spent inside to each workdir's record, an equal share each (seeds
  trained together), saved every `every_s` seconds as well as at the end: an invocation killed
  mid-run (a session's end) keeps what it spent, less at most `every_s`. (Saved only at the end,
  a killed invocation's time was lost.) Each save also samples the machine's 1-minute load
  average; the record keeps their mean over every invocation (`load_average`) and the machines
  it ran on (`machines`)."""
  before = [_wall_record(w) for w in workdirs]
  start, stop, loads = time.perf_counter(), threading.Event(), []
  machine = this_machine()

  def save() -> None:
    share = (time.perf_counter() - start) / len(workdirs)
    loads.append(os.getloadavg()[0])
    for workdir, old in zip(workdirs, before, strict=True):
      n = old.get("load_samples", 0)
      total = (old.get("load_1min_mean") or 0.0) * n + sum(loads)
      record = {"seconds": old["seconds"] + share}
      record |= {"load_1min_mean": total / (n + len(loads)), "load_samples": n + len(loads)}
      record |= {"machines": sorted({*old.get("machines", []), machine})}
      _write_wall_time(workdir, record)

  def keep_saving() -> None:
    while not stop.wait(every_s):
      save()

  thread = threading.Thread(target=keep_saving, daemon=True)
  thread.start()
  try:
    yield
  finally:
    stop.set()
    thread.join()
    save()


def workdir_hypotheses(workdir: Path, split: str = "test") -> list[str]:
  """The translations of `split` in a workdir (eval/SPLIT/hypotheses.txt, else its record's
  hypotheses/SPLIT.txt.gz), one line per sentence."""
  text = Path(workdir) / "eval" / split / "hypotheses.txt"
  if text.exists():
    return text.read_text().splitlines()
  record = records.read_record(workdir)
  if record is None or split not in record["hypotheses"]:
    raise FileNotFoundError(f"{workdir}: no {split} hypotheses")
  return records.read_gz_lines(Path(workdir) / record["hypotheses"][split])


def hypotheses(run: Run, split: str = "test") -> list[str]:
  """The run's translations of `split`, one line per sentence."""
  return workdir_hypotheses(run.workdir, split)


def test_examples(run: Run) -> list[builders.Example]:
  """The test split's pairs, from the run's (built) corpus."""
  config = run.config()
  data_settings = input_pipeline.DataSettings.from_config(config)
  folder = input_pipeline.data_dir(data_settings, run.workdir)
  corpus = builders.prepare_corpus(data_settings, folder)
  return list(corpus.read("test"))


def train_tokens_per_s(workdir: Path) -> list[float]:
  """tokens_per_s of a run's train lines, without the first (it includes compiling)."""
  values = [r["tokens_per_s"] for r in metrics(workdir) if r["split"] == "train"]
  return values[1:] if len(values) > 1 else values


def valid_curve(workdir: Path, key: str) -> dict[int, float]:
  """{step: value} of `key` ("bleu" or "loss") on the run's validation lines."""
  rows = metrics(workdir)
  return {r["step"]: r[key] for r in rows if r["split"] == "valid" and key in r}


def valid_rows(workdir: Path) -> list[dict[str, float]]:
  """Validation rows of a run: step, elapsed minutes, BLEU, loss, and the share of <unk> in the
  greedy output where the run logged it."""
  return [
    {"step": r["step"], "minutes": r["elapsed_s"] / 60}
    | {key: r[key] for key in ("bleu", "loss", "unk_rate") if key in r}
    for r in metrics(workdir)
    if r["split"] == "valid" and "bleu" in r
  ]


# ---------------------------------------------------------------------- training
def train_alone(run: Run) -> bool:
  """Trains and evaluates `run` unless it is finished; whether it trained."""
  config = run.config()
  if is_finished(run, config):
    return False
  print(f"[{run.name}] {run.command()}", flush=True)
  with timed([run.workdir]):
    outcome = train.train_and_evaluate(config, run.workdir)
  if "preempted_at_step" in outcome:
    _preempted(f"{run.name} preempted at step {outcome['preempted_at_step']}")
  return True


def train_in_process(run: Run) -> dict[str, Any]:
  """Trains `run` with its main.py command in a fresh process (a cold start, data and compiling
  included, as a user would run it), unless WORKDIR/run.json says it finished before.

  Returns WORKDIR/run.json: the command, its wall seconds and the resolved config.
  """
  record_path = run.workdir / "run.json"
  if record_path.exists():
    return json.loads(record_path.read_text())
  start = time.perf_counter()
  command = configs.run_command(run.command())
  wall_s = time.perf_counter() - start
  record = {
    "command": command,
    "process_wall_s": wall_s,
    "config": json.loads(run.config().to_json_best_effort()),
  }
  files.write_atomic(record_path, json.dumps(record, indent=2) + "\n")
  return record


def train_together(runs: Sequence[Run]) -> bool:
  """Trains the seeds of one configuration as one vmapped group (`seq2seq.seed_group`) unless
  every one is finished; whether it trained. Each workdir's wall time gets an equal share."""
  configs_ = [run.config() for run in runs]
  if all(is_finished(run, c) for run, c in zip(runs, configs_, strict=True)):
    return False
  print(f"[{runs[0].name} ...] {len(runs)} seeds together", flush=True)
  seeds = [c.seed for c in configs_]
  with timed([run.workdir for run in runs]):
    outcome = seed_group.train_together(configs_[0], seeds, [run.workdir for run in runs])
  if "preempted_at_step" in outcome[0]:
    _preempted(f"{runs[0].name} ... preempted at step {outcome[0]['preempted_at_step']}")
  return True


def _preempted(what: str) -> None:
  """Ends the study as main.py ends a training stopped by a signal after saving: with
  `cli.PREEMPTED`, which a scheduler reads as "requeue", not as a failure; the rerun resumes."""
  print(f"{what}; checkpoint saved, rerun the same command to resume", file=sys.stderr, flush=True)
  raise SystemExit(seq2seq_cli.PREEMPTED)


def seed_from(run: Run, source: Run) -> bool:
  """Starts `run` as a copy of `source`'s workdir (it then resumes to its own steps); whether it
  did (not when `run` exists already or `source` has no checkpoint it may start from). The
  copy's config is `run`'s own, written at its start: its decoding-time switches
  (`checkpoints.DECODING_SWITCHES`) may differ from the source's, which a resume would refuse."""
  steps = checkpoint_steps(source.workdir)
  if run.workdir.exists() or not steps or steps[-1] > run.config().train.num_steps:
    return False
  ignore = shutil.ignore_patterns("eval", records.RECORD, records.HYPOTHESES)
  shutil.copytree(source.workdir, run.workdir, ignore=ignore)
  (run.workdir / WALL_TIME_FILE).unlink(missing_ok=True)
  (run.workdir / "config.json").unlink(missing_ok=True)
  return True


# ---------------------------------------------------------------------- records
def record(run: Run) -> dict[str, Any]:
  """What a finished run is: name, workdir, main.py command, config, results, wall time.

  Raises FileNotFoundError when its evaluation is missing.
  """
  config = run.config()
  results = read_results(run.workdir)
  if results is None:
    raise FileNotFoundError(f"{run.workdir}/eval has no results: unfinished, or final_eval off")
  return {
    "name": run.name,
    "workdir": str(run.workdir),
    "command": configs.main_command(run.config_file, run.workdir, config),
    "config_file": run.config_file,
    "overrides": run.overrides,
    "config": json.loads(config.to_json_best_effort()),
    "results": results,
    "wall_s": wall_time(run.workdir),
    "train_s": train_time(run.workdir),
    "load_1min_mean": load_average(run.workdir),
    "machines": machines(run.workdir),
  }


def execute(run: Run) -> dict[str, Any]:
  """Trains `run` if it is unfinished, then its record with `reused` (it was finished before)."""
  trained = train_alone(run)
  return {**record(run), "reused": not trained}


def cached_measurement(
  run: Run, name: str, current: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
  """What a study measured of a finished run before (WORKDIR/`name`), if it still holds: the
  record's copy for a converted run (its eval folder pruned: measured before it was), or the
  file when it is newer than the run's last test evaluation and `current(cached)` accepts its
  settings; None: measure again."""
  results = run.workdir / "eval" / "test" / "results.json"
  record = records.read_record(run.workdir)
  if not results.exists() and record and name in record["extra"]:
    return record["extra"][name]
  path = run.workdir / name
  if path.exists() and path.stat().st_mtime >= results.stat().st_mtime:
    cached = json.loads(path.read_text())
    if current(cached):
      return cached
  return None

"""Experiment trackers: a run's config, metrics and evaluation results, copied to a tracker too.

`train.tracker` names one by a spec; "" (or "none") tracks nothing:

    mlflow(uri=PATH_OR_URI, experiment=seq2seq)

MLflow's client (mlflow-skinny, `pip install -r requirements-optional.txt`) is imported only
when a run turns it on; a run that turns it on without it fails at once, in one line. `uri` "" is
MLflow's file store in WORKDIR/mlruns, no server needed; a path is a file store too; any other
tracking URI (`sqlite:///runs.db`, `http://host:5000`) is MLflow's. MLflow 3.18 keeps its file
store in maintenance mode and refuses it unless MLFLOW_ALLOW_FILE_STORE=true: a tracker writing
one sets that for its own process, unless the environment says otherwise.

The metric writer hands a tracker every scalar it writes (`metric_writer.MetricWriter.track`),
named as in TensorBoard (`train/loss`, `valid/bleu`, `eval_test/bleu`) at its step, and each
split's final results.json (`eval/SPLIT/results.json`). The run's config is logged once as
params (dotted keys, `train.num_steps`) and as the artifact `config.json`. The MLflow run's id
is kept in WORKDIR/tracker.json, so a resumed run goes on in the same MLflow run.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib.util
import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from absl import logging

from seq2seq.common import console, files, registry

FIELD = "train.tracker"
RUN_FILE = "tracker.json"  # In the workdir: which tracker run this workdir's run is.
INSTALL = "pip install -r requirements-optional.txt"
STATUSES = ("finished", "killed", "failed")  # How a tracker run ends (`Tracker.close`).

REGISTRY: registry.Registry[type[Tracker]] = registry.Registry("tracker", field=FIELD)


def parse(text: str | registry.Spec) -> registry.Spec | None:
  """The tracker a `train.tracker` spec names, with its settings; None for "" or "none"."""
  if isinstance(text, registry.Spec):
    return text
  if str(text).strip().lower() in ("", "none"):
    return None
  return REGISTRY.spec(text)


def require(text: str | registry.Spec) -> None:
  """Raises ValueError, in one line, when the tracker `text` names cannot be imported."""
  spec = parse(text)
  package = REGISTRY.get(spec.name).package if spec is not None else None
  if package is not None and importlib.util.find_spec(package) is None:
    raise ValueError(
      f"{FIELD}={str(spec)!r} needs {package}, which is not installed: {INSTALL} (or set "
      f'{FIELD}="")'
    )


def start(text: str | registry.Spec, workdir: str | Path) -> Tracker | None:
  """The tracker run of the run in `workdir` (whose config.json is written): continued where
  WORKDIR/tracker.json names one the tracker still holds, else new. None when none is on."""
  spec = parse(text)
  if spec is None:
    return None
  require(spec)
  return REGISTRY.get(spec.name)(spec.settings, Path(workdir))


class Tracker(abc.ABC):
  """A tracker run. `new` says whether it began now (so holds none of the run's history)."""

  name: str
  package: str  # What `require` imports.
  new: bool

  @abc.abstractmethod
  def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
    """Scalars of one step, by name."""

  @abc.abstractmethod
  def log_file(self, path: Path, folder: str) -> None:
    """A file of the run, as the artifact FOLDER/NAME."""

  @abc.abstractmethod
  def close(self, status: str = "finished") -> None:
    """Ends the tracker run: one of `STATUSES`. A second close does nothing."""


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
  """A nested config dict as {"section.field": text}: strings as they are, the rest as JSON
  (true, 0.5, [1, 2])."""
  out = {}
  for key, value in config.items():
    if isinstance(value, Mapping):
      out.update(flat_params(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value if isinstance(value, str) else json.dumps(value)
  return out


def tracking_uri(uri: str, workdir: Path) -> str:
  """The MLflow tracking URI of `uri`: "" is WORKDIR/mlruns; a path (no scheme) is a file
  store, absolute from the current folder; a URI is kept as it is."""
  if not uri:
    return (workdir / "mlruns").resolve().as_uri()
  if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", uri):
    return uri
  return Path(uri).expanduser().resolve().as_uri()


@REGISTRY.register("mlflow")
class MLflow(Tracker):
  """An MLflow run: one per workdir, its id in WORKDIR/tracker.json."""

  package = "mlflow"

  @dataclasses.dataclass(frozen=True)
  class Settings:
    uri: str = ""  # "": WORKDIR/mlruns (a file store); a folder; or any MLflow tracking URI.
    experiment: str = "seq2seq"  # The MLflow experiment the run is filed under.

    def __post_init__(self):
      if not self.experiment.strip():
        raise ValueError("experiment must be a name, got ''")

  def __init__(self, settings: MLflow.Settings, workdir: Path):
    self.uri, self.workdir, self.closed = tracking_uri(settings.uri, workdir), workdir, False
    if self.uri.startswith("file:"):  # MLflow 3.18's file store wants its opt-in.
      os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient  # Only here: the tracker is optional.

    self._client = MlflowClient(tracking_uri=self.uri)
    run = self._saved_run()
    self.new = run is None
    if run is None:
      run = self._client.create_run(
        self._experiment_id(settings.experiment),
        run_name=workdir.name,
        tags={"seq2seq.workdir": str(workdir.resolve())},
      )
      record = {"tracker": self.name, "uri": self.uri, "run_id": run.info.run_id}
      files.write_atomic(workdir / RUN_FILE, json.dumps(record) + "\n")
    else:
      self._client.update_run(run.info.run_id, status="RUNNING")
    self.run_id = run.info.run_id
    self._log_config(run.data.params)
    how = "new" if self.new else "continued"
    console.say(f"tracker: MLflow run {self.run_id} ({how}) in {self.uri}")

  def _log_config(self, held: Mapping[str, str]) -> None:
    """WORKDIR/config.json as the artifact config.json, and as params where the run `held`
    none by that name: MLflow refuses a changed value, so a setting a resumed run changed
    (train.num_steps, say) keeps its first value as a param; the artifact is the current."""
    from mlflow.entities import Param
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

    config = json.loads((self.workdir / "config.json").read_text())
    params = [
      Param(key, value[:MAX_PARAM_VAL_LENGTH])
      for key, value in flat_params(config).items()
      if key not in held
    ]
    for i in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
      self._client.log_batch(self.run_id, params=params[i : i + MAX_PARAMS_TAGS_PER_BATCH])
    self.log_file(self.workdir / "config.json", "")

  def _saved_run(self):
    """The MLflow run WORKDIR/tracker.json names, if this store still holds it; else None."""
    from mlflow.exceptions import MlflowException

    path = self.workdir / RUN_FILE
    saved = files.read_jsonl(path) if path.exists() else []
    if not saved or saved[0].get("tracker") != self.name:
      return None
    if saved[0].get("uri") != self.uri:
      console.say(f"tracker: a new MLflow run in {self.uri} (the run's was in {saved[0]['uri']})")
      return None
    try:
      run = self._client.get_run(saved[0]["run_id"])
    except MlflowException:
      run = None
    if run is None or run.info.lifecycle_stage == "deleted":
      console.say(f"tracker: {self.uri} lost MLflow run {saved[0]['run_id']}: a new one starts")
      return None
    return run

  def _experiment_id(self, name: str) -> str:
    """The id of experiment `name`, created if need be (by another run at the same time too)."""
    from mlflow.exceptions import MlflowException

    found = self._client.get_experiment_by_name(name)
    if found is None:
      try:
        return self._client.create_experiment(name)
      except MlflowException:  # Created meanwhile by a run sharing the store.
        found = self._client.get_experiment_by_name(name)
        if found is None:
          raise
    if found.lifecycle_stage == "deleted":
      raise ValueError(
        f"MLflow experiment {name!r} in {self.uri} is deleted: restore it (mlflow experiments "
        f"restore) or name another ({FIELD}=mlflow(experiment=...))"
      )
    return found.experiment_id

  def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
    from mlflow.entities import Metric
    from mlflow.utils.validation import MAX_METRICS_PER_BATCH

    now = int(time.time() * 1000)
    points = [Metric(key, float(value), now, int(step)) for key, value in metrics.items()]
    for i in range(0, len(points), MAX_METRICS_PER_BATCH):
      self._client.log_batch(self.run_id, metrics=points[i : i + MAX_METRICS_PER_BATCH])

  def log_file(self, path: Path, folder: str) -> None:
    self._client.log_artifact(self.run_id, str(path), folder or None)

  def close(self, status: str = "finished") -> None:
    if status not in STATUSES:
      raise ValueError(f"a tracker run ends {STATUSES}, not {status!r}")
    if not self.closed:
      self.closed = True
      self._client.set_terminated(self.run_id, status.upper())
      logging.info("tracker: MLflow run %s %s", self.run_id, status)

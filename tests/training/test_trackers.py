"""The experiment tracker: its spec and one-line refusals, MLflow never imported unless a run
turns it on, and MLflow file stores read back with MLflow's own client: a writer's rows, the
history a run had before tracking was turned on, and a run of configs/tiny.py resumed in the
same MLflow run (MLflow is optional: those tests skip without it)."""

import importlib.util
import json
import subprocess
import sys

import pytest
from helpers import ROOT, metric_rows, run_main

from configs import tiny
from seq2seq import settings
from seq2seq.training import metric_writer, trackers

needs_mlflow = pytest.mark.skipif(
  importlib.util.find_spec("mlflow") is None,
  reason="mlflow (optional) is not installed: pip install -r requirements-optional.txt",
)


def mlflow_run(workdir):
  """(MLflow's client on the store WORKDIR/tracker.json names, the run it names)."""
  from mlflow.tracking import MlflowClient

  saved = json.loads((workdir / trackers.RUN_FILE).read_text())
  client = MlflowClient(tracking_uri=saved["uri"])
  return client, client.get_run(saved["run_id"])


def history(client, run_id, key) -> list[tuple[int, float]]:
  return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_the_spec_is_off_by_default_and_a_wrong_one_fails_in_one_line():
  assert tiny.get_config().train.tracker == ""
  assert trackers.parse("") is None and trackers.parse(" none ") is None
  spec = trackers.parse("mlflow(uri=/tmp/runs, experiment=wmt)")
  assert spec.settings == trackers.MLflow.Settings(uri="/tmp/runs", experiment="wmt")
  assert str(trackers.parse("mlflow(experiment=seq2seq)")) == "mlflow"
  for text, message in [
    ("tensorboard", r"unknown tracker 'tensorboard' \(train.tracker\); valid: mlflow"),
    ("mlflow(url=x)", "train.tracker: mlflow has no setting 'url'; valid: uri, experiment"),
    ("mlflow(experiment=)", "experiment must be a name"),
  ]:
    config = tiny.get_config()
    config.train.tracker = text
    with pytest.raises(ValueError, match=message) as error:
      settings.validate(config)
    assert "\n" not in str(error.value)


def test_the_tracking_uri_of_a_setting(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert trackers.tracking_uri("", tmp_path / "run") == (tmp_path / "run" / "mlruns").as_uri()
  assert trackers.tracking_uri("shared/mlruns", tmp_path) == (tmp_path / "shared/mlruns").as_uri()
  assert trackers.tracking_uri("sqlite:///runs.db", tmp_path) == "sqlite:///runs.db"


def test_mlflow_is_imported_only_by_a_run_that_turns_it_on():
  """The training loop, the settings and a validated config with the tracker on import no
  MLflow (a process of its own: another test here may have imported it)."""
  code = (
    "import sys\n"
    "from configs import tiny\n"
    "from seq2seq import cli, evaluation, settings, train\n"
    "config = tiny.get_config()\n"
    "config.train.tracker = 'mlflow'\n"
    "settings.validate(config)\n"
    "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'wandb')))\n"
  )
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.strip() == "[]"


def test_a_tracker_whose_package_is_missing_stops_the_run_in_one_line(tmp_path, monkeypatch):
  monkeypatch.setattr(trackers.MLflow, "package", "mlflow_is_not_installed")
  workdir = tmp_path / "run"
  proc = run_main(workdir, "--config.train.tracker=mlflow", check=False)
  assert proc.returncode == 1
  lines = proc.stderr.strip().splitlines()
  assert lines[-1] == (
    "error: train.tracker='mlflow' needs mlflow_is_not_installed, which is not installed: "
    'pip install -r requirements-optional.txt (or set train.tracker="")'
  )
  assert "Traceback" not in proc.stderr
  assert not (workdir / "config.json").exists()  # Refused before anything was written.


@needs_mlflow
def test_a_writer_copies_its_rows_and_a_new_mlflow_run_gets_the_history_before(tmp_path):
  """Tracking turned on at a resume: the new MLflow run gets the rows metrics.jsonl holds,
  then every row written; opened again it is the same run, and gets no row twice. A store
  elsewhere is a new run, with the whole history again."""
  config = {"seed": 3, "train": {"num_steps": 4, "tracker": "mlflow", "loss_terms": ""}}
  (tmp_path / "config.json").write_text(json.dumps(config))
  before = metric_writer.MetricWriter(tmp_path)
  before.write(1, "train", {"loss": 2.5, "learning_rate": 0.1})
  before.write(2, "valid", {"loss": 2.25, "bleu": 1.5, "note": "text", "best": None})
  before.close()

  writer = metric_writer.MetricWriter(tmp_path)
  writer.track(trackers.start("mlflow", tmp_path))
  writer.write(3, "train", {"loss": 2.0, "learning_rate": 0.1, "skipped_updates": 0})
  writer.write(3, "eval_valid", {"bleu": 4.0}, jsonl=False)
  (tmp_path / "results.json").write_text('{"bleu": 4.0}\n')
  writer.attach(tmp_path / "results.json", "eval/valid")
  writer.close("killed")
  client, run = mlflow_run(tmp_path)
  assert run.info.status == "KILLED" and run.info.run_name == tmp_path.name
  assert run.data.params == {
    "seed": "3",
    "train.num_steps": "4",
    "train.tracker": "mlflow",
    "train.loss_terms": "",
  }
  assert history(client, run.info.run_id, "train/loss") == [(1, 2.5), (3, 2.0)]
  assert history(client, run.info.run_id, "valid/bleu") == [(2, 1.5)]
  assert history(client, run.info.run_id, "eval_valid/bleu") == [(3, 4.0)]
  assert "valid/note" not in run.data.metrics and "valid/best" not in run.data.metrics
  artifacts = {f.path for f in client.list_artifacts(run.info.run_id)}
  assert artifacts == {"config.json", "eval"}
  results = client.download_artifacts(run.info.run_id, "eval/valid/results.json", str(tmp_path))
  assert json.loads(open(results).read()) == {"bleu": 4.0}

  again = trackers.start("mlflow", tmp_path)
  assert not again.new and again.run_id == run.info.run_id
  metric_writer.MetricWriter(tmp_path).track(again)
  again.close()
  assert history(client, run.info.run_id, "train/loss") == [(1, 2.5), (3, 2.0)]
  assert client.get_run(run.info.run_id).info.status == "FINISHED"

  elsewhere = trackers.start(f"mlflow(uri={tmp_path / 'other'})", tmp_path)
  metric_writer.MetricWriter(tmp_path).track(elsewhere)
  elsewhere.close()
  client, moved = mlflow_run(tmp_path)
  assert moved.info.run_id != run.info.run_id
  assert history(client, moved.info.run_id, "train/loss") == [(1, 2.5), (3, 2.0)]


@needs_mlflow
@pytest.mark.slow
def test_a_tracked_run_and_its_resume_fill_one_mlflow_run(tmp_path):
  """configs/tiny.py, 2 steps then resumed to 4 with the final evaluation: one MLflow run holds
  the config as params and as config.json, each metric of metrics.jsonl at its step, the final
  figures and each split's results.json."""
  workdir = tmp_path / "run"
  steps = [
    "--config.train.log_every=1",
    "--config.train.eval_every=2",
    "--config.train.tracker=mlflow",
  ]
  run_main(workdir, "--config.train.num_steps=2", "--config.train.final_eval=false", *steps)
  client, first = mlflow_run(workdir)
  assert first.info.status == "FINISHED"
  run_main(workdir, "--config.train.num_steps=4", *steps)
  client, run = mlflow_run(workdir)
  run_id = run.info.run_id
  assert run_id == first.info.run_id and run.info.status == "FINISHED"
  assert len(client.search_runs([run.info.experiment_id])) == 1

  config = json.loads((workdir / "config.json").read_text())
  assert run.data.params["model.emb_dim"] == str(config["model"]["emb_dim"]) == "16"
  assert run.data.params["train.tracker"] == "mlflow"
  assert run.data.params["train.num_steps"] == "2"  # The first; MLflow keeps a param's value.
  saved = client.download_artifacts(run_id, "config.json", str(tmp_path))
  assert json.loads(open(saved).read()) == config  # The current config, num_steps 4.

  expected = {}
  for row in metric_rows(workdir):
    for key, value in row.items():
      if key not in ("step", "split") and isinstance(value, int | float):
        expected.setdefault(f"{row['split']}/{key}", []).append((row["step"], float(value)))
  assert {"train/loss", "train/grad_norm", "valid/loss", "valid/bleu"} <= set(expected)
  assert [s for s, _ in expected["train/loss"]] == [1, 2, 3, 4]
  for key, points in expected.items():
    assert history(client, run_id, key) == sorted(points), key

  for split in ("valid", "test"):
    results = json.loads((workdir / "eval" / split / "results.json").read_text())
    logged = client.download_artifacts(run_id, f"eval/{split}/results.json", str(tmp_path))
    assert json.loads(open(logged).read()) == results
    assert history(client, run_id, f"eval_{split}/bleu") == [(4, results["bleu"])]
    assert history(client, run_id, f"eval_{split}/chrf") == [(4, results["chrf"])]


@needs_mlflow
def test_a_run_that_fails_ends_its_mlflow_run_failed(tmp_path, tiny_config):
  from seq2seq import train

  def step(state, batch, rng):
    raise RuntimeError("a step that fails")

  tiny_config.train.tracker = "mlflow"
  with pytest.raises(RuntimeError, match="a step that fails"):
    train.train_and_evaluate(tiny_config, tmp_path, train_step=step)
  _, run = mlflow_run(tmp_path)
  assert run.info.status == "FAILED"

"""The console (seq2seq/common/console.py, seq2seq/cli.py): a progress line per log interval with a
true ETA, decoding progress, library logs in WORKDIR/log.txt rather than on the terminal, the
closing table instead of JSON (JSON on request), and no false sacrebleu warning on the embedded
corpus. In-process, reading what was printed; exit codes through main.py."""

import contextlib
import io
import json
import logging
import pathlib
import re
import shutil
import sys

import pytest
from absl import logging as absl_logging
from helpers import metric_rows, run_main_py

from configs import tiny
from seq2seq import cli, evaluation, train
from seq2seq.common import console
from seq2seq.data import metrics


def test_the_results_table_and_where_to_look(tmp_path):
  results = {
    "valid": {"step": 1200, "num_sentences": 500, "bleu": 61.234, "chrf": 76.3, "aer": 0.1734},
    "test": {"step": 1200, "num_sentences": 1000, "bleu": 5.0, "chrf": 30.0, "bleu_no_unk": 7.5},
  }
  lines = console.results_table(results).splitlines()
  assert lines[0].split() == ["split", "step", "sentences", "BLEU", "chrF", "No-UNK", "BLEU", "AER"]
  assert lines[1].split() == ["valid", "1200", "500", "61.23", "76.30", "-", "0.173"]
  assert lines[2].split() == ["test", "1200", "1000", "5.00", "30.00", "7.50", "-"]
  assert len({len(line) for line in lines}) == 1  # Columns line up.
  out = tmp_path / "eval" / "test"
  (out / "alignments").mkdir(parents=True)
  for name in ("report.html", "results.json"):
    (out / name).write_text("")
  (tmp_path / "tensorboard").mkdir()
  run = {"tracker": "mlflow", "uri": "file:///runs/mlruns", "run_id": "abc"}
  (tmp_path / "tracker.json").write_text(json.dumps(run) + "\n")
  text = cli.closing_summary(results, tmp_path)
  assert "tracker:     mlflow run abc in file:///runs/mlruns" in text
  assert f"explorer:    {out / 'report.html'}" in text
  assert f"heatmaps:    {out / 'alignments'}/" in text
  assert f"TensorBoard: tensorboard --logdir {tmp_path / 'tensorboard'}" in text
  assert f"log:         {tmp_path / 'log.txt'}" in text and "{" not in text
  assert cli.closing_summary({"preempted_at_step": 7}, tmp_path).startswith("stopped at step 7")


def test_durations_read_as_a_person_reads_them():
  assert [console.duration(s) for s in (0.4, 45, 725, 3 * 3600 + 7 * 60 + 30)] == [
    "0s",
    "45s",
    "12m05s",
    "3h07m",
  ]


def test_eta_times_training_steps_alone_and_adds_the_passes_to_come():
  eta = train.Eta(100, 0.0, eval_every=50, checkpoint_every=100)
  eta.start_window(1, now=50.0)  # The first step ended after 50 s of compiling.
  assert eta.seconds(1, 50.0) == (None, False) and eta.text(1, 50.0) == "ETA -"
  eta.end_window(11, now=70.0)  # 2 s a step, compiling left out: 89 steps left.
  assert eta.seconds(11, 70.0) == (pytest.approx(178.0), False)
  eta.start_window(11, now=70.0)
  eta.end_window(21, now=80.0)  # The run got faster: the latest window counts.
  assert eta.seconds(21, 80.0) == (pytest.approx(79.0), False)
  eta.paused("eval", 30.0)  # Passes at steps 50 and 100 are still to come, a checkpoint at 100.
  eta.paused("checkpoint", 5.0)
  assert eta.seconds(21, 120.0) == (pytest.approx(79.0 + 2 * 30.0 + 5.0), False)
  assert eta.text(21, 120.0) == "ETA 2m24s"
  budget = train.Eta(100, 70.0, eval_every=1000, checkpoint_every=1000)
  budget.start_window(1, 50.0)
  budget.end_window(11, 60.0)
  assert budget.seconds(11, 60.0) == (10.0, True)  # The budget ends training first.
  assert budget.text(11, 60.0) == "ETA 10s (train.max_minutes)"


def test_decoding_progress_ends_with_one_line(capsys):
  shown = console.Progress("decoding test", 100, every_s=0.0)
  shown.advance(40)
  shown.advance(60)
  shown.close()
  lines = capsys.readouterr().err.splitlines()
  assert re.fullmatch(r"decoding test: 40/100 sentences, \d+s left", lines[0])
  assert lines[1:] == ["decoding test: 100 sentences in 0s"]


@pytest.fixture
def absl_terminal():
  """absl's terminal handler on the root logger, as `app.run` leaves it."""
  handler, root = absl_logging.get_absl_handler(), logging.getLogger()
  added = handler not in root.handlers
  if added:
    root.addHandler(handler)
  yield handler
  if added:
    root.removeHandler(handler)


def test_library_logs_go_to_the_log_file_and_verbosity_brings_them_back(
  tmp_path, capfd, absl_terminal
):
  tfds_record = logging.LogRecord(
    "absl", logging.WARNING, "/x/tensorflow_datasets/core/b.py", 1, "tfds chatter", None, None
  )
  with console.logged_to(tmp_path) as path:
    absl_logging.info("orbax chatter")
    absl_logging.warning("a warning for people")
    logging.getLogger("absl").handle(tfds_record)
    console.say("a console line")
  err = capfd.readouterr().err
  assert "orbax chatter" not in err and "tfds chatter" not in err
  assert "a warning for people" in err and err.count("a console line") == 1
  log = path.read_text()
  for text in ("orbax chatter", "tfds chatter", "a warning for people", "a console line"):
    assert log.count(text) == 1, text
  with console.logged_to(tmp_path, verbose=True):
    absl_logging.info("shown with --verbosity")
    console.say("said once")
  err = capfd.readouterr().err
  assert "shown with --verbosity" in err and err.count("said once") == 1
  assert absl_terminal.level == logging.NOTSET  # Put back as it was.


@pytest.mark.slow
def test_training_prints_one_line_per_log_interval_with_the_eta_down_the_budget(tmp_path, capsys):
  config = tiny.get_config()
  config.train.num_steps, config.train.max_minutes = 1_000_000, 0.25  # The budget ends it.
  config.train.log_every = 50
  config.train.eval_every = config.train.checkpoint_every = 1_000_000
  config.train.valid_bleu, config.train.final_eval = False, False
  assert train.train_and_evaluate(config, tmp_path) == {}
  err = capsys.readouterr().err.splitlines()
  pattern = re.compile(
    r"step (\d+)/1000000  loss \d+\.\d{4}  [\d,]+ tokens/s  elapsed \S+  "
    r"ETA (?:-|(?:(\d+)m)?(\d+)s \(train\.max_minutes\))"
  )
  steps = [pattern.fullmatch(line) for line in err if re.match(r"step \d+/", line)]
  assert steps and all(steps), err
  rows = [r for r in metric_rows(tmp_path) if r["split"] == "train"]
  assert [int(m.group(1)) for m in steps] == [r["step"] for r in rows]  # One per log interval.
  left = [60 * int(m.group(2) or 0) + int(m.group(3)) for m in steps[1:] if m.group(3)]
  assert left and all(s <= 15 for s in left)  # Counting down the 15 s budget, not the steps.
  assert left == sorted(left, reverse=True)
  assert f"train.max_minutes=0.25 reached at step {rows[-1]['step']}" in err
  assert any(re.fullmatch(rf"step {rows[-1]['step']}  valid loss .*", line) for line in err)


def test_sacrebleu_stays_quiet_on_the_pretokenised_corpus_with_the_same_score(caplog):
  refs = [f"le chat {i} dort ." for i in range(120)]
  hyps = [f"le chat {i} mange ." for i in range(120)]
  with caplog.at_level(logging.WARNING, logger="sacrebleu"):
    plain = metrics.bleu(hyps, refs)
  assert "tokenized period" in caplog.text  # The warning the embedded corpus would raise.
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger="sacrebleu"):
    quiet = metrics.bleu(hyps, refs, pretokenized=True)
  assert caplog.text == "" and quiet == plain  # Same score and signature.
  config = tiny.get_config()
  assert metrics.pretokenized(config.data.corpus)
  config.data.corpus = "local"
  assert not metrics.pretokenized(config.data.corpus)


def test_eval_ends_with_the_table_or_with_json(trained, tmp_path, capsys, caplog):
  workdir = tmp_path / "run"
  shutil.copytree(trained, workdir)
  config = tiny.get_config()
  config.train.num_steps = 20
  assert cli.run("eval", config, workdir) == 0
  out, err = capsys.readouterr()
  assert out.splitlines()[0].split()[:4] == ["split", "step", "sentences", "BLEU"]
  assert f"explorer:    {workdir / 'eval' / 'test' / 'report.html'}" in out and "{" not in out
  assert re.search(r"^decoding test: 64 sentences in \d+s$", err, re.M)
  assert "forgot to detokenize" not in err + caplog.text
  assert "CheckpointManager" in (workdir / "log.txt").read_text()  # Orbax, in the log only.
  assert "CheckpointManager" not in err
  assert cli.run("eval", config, workdir, as_json=True) == 0
  printed = json.loads(capsys.readouterr().out)
  assert printed["results"]["test"]["num_sentences"] == 64


@pytest.mark.parametrize(
  "args,message",
  [
    (["--mode=eval"], "error: --mode=eval needs --config"),
    (["--mode=eval", "--config=configs/tiny.py", "--workdir=/no/such/run"], "error: no run in"),
  ],
)
def test_a_mode_without_what_it_needs_says_so_in_one_line(tmp_path, args, message):
  cmd = [sys.executable, "main.py", f"--workdir={tmp_path}", *args]
  proc = run_main_py(cmd, check=False)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1].startswith(message) and "Traceback" not in proc.stderr
  assert not pathlib.Path("/no/such/run").exists()  # Nothing is created for a mistyped run.


def test_any_failure_is_one_error_line_with_its_traceback_in_the_log(trained, monkeypatch):
  """A failure that is no user's mistake (here a RuntimeError deep in evaluation) still ends in
  one error line naming it, exit status 1; the traceback goes to the log, and to the terminal
  only with --verbosity."""

  def boom(*args, **kwargs):
    raise RuntimeError("out of cheese\nsecond line")

  monkeypatch.setattr(evaluation, "evaluate_splits", boom)
  config = tiny.get_config()
  before = (trained / "log.txt").read_text()
  for verbose in (False, True):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
      status = cli.run("eval", config, trained, verbose=verbose)
    lines = err.getvalue().strip().splitlines()
    assert status == 1 and lines[-1] == "error: RuntimeError: out of cheese"
    assert ("Traceback" in err.getvalue()) == verbose
  log = (trained / "log.txt").read_text()[len(before) :]
  assert "Traceback" in log and "out of cheese" in log


def test_a_log_file_that_cannot_be_written_costs_one_line_not_a_traceback_a_record(tmp_path, capfd):
  """WORKDIR/log.txt on a full disk (/dev/full): records are lost, the terminal gets one line
  saying so, and none of logging's "--- Logging error ---" reports."""
  if not pathlib.Path("/dev/full").exists():
    pytest.skip("no /dev/full on this system")
  (tmp_path / console.LOG_FILE).symlink_to("/dev/full")
  with console.logged_to(tmp_path):
    for n in range(3):
      logging.getLogger("seq2seq.test").info("record %d", n)
  err = capfd.readouterr().err
  assert "Logging error" not in err and "Traceback" not in err, err
  assert err.count("log: cannot write") == 1 and "No space left on device" in err

"""The training program end to end on configs/tiny.py: files, resume, errors, devices."""

import itertools
import json
import pathlib

import numpy as np
import pytest
from helpers import (
  TEST_SENTENCES,
  final_params,
  main_command,
  metric_rows,
  run_main,
  run_processes,
  subprocess_env,
)

from seq2seq import checkpoints, settings
from seq2seq import sharding as rt
from seq2seq.data import metrics


def test_run_writes_every_promised_file(trained):
  config = json.loads((trained / "config.json").read_text())
  assert config["train"]["num_steps"] == 20
  assert (trained / "vocab").is_dir() and any((trained / "vocab").iterdir())
  assert sorted(p.name for p in (trained / "checkpoints").iterdir() if p.name.isdigit()) == [
    "10",
    "20",
  ]
  records = metric_rows(trained)
  train_rows = [r for r in records if r["split"] == "train"]
  assert [r["step"] for r in train_rows] == [5, 10, 15, 20]
  for r in train_rows:
    assert {"step", "split", "loss", "learning_rate", "grad_norm", "tokens_per_s"} <= set(r)
  valid_rows = [r for r in records if r["split"] == "valid"]
  assert [r["step"] for r in valid_rows] == [10, 20]
  assert all({"loss", "perplexity"} <= set(r) for r in valid_rows)
  assert any(p.name.startswith("events.out.tfevents") for p in (trained / "tensorboard").iterdir())
  assert all("bleu" in r for r in valid_rows)
  assert (trained / "best").is_dir()
  data = rt.load_data(settings.validate(checkpoints.load_config(trained)), trained)
  for split in ("valid", "test"):
    out = trained / "eval" / split
    result = json.loads((out / "results.json").read_text())
    assert result["step"] in (10, 20) and np.isfinite(result["loss"]) and result["perplexity"] > 1
    keys = {"bleu", "bleu_no_unk", "chrf", "num_sentences", "beam_size", "bleu_by_length", "aer"}
    assert keys <= set(result)
    assert result["num_sentences"] == 64 and 0.0 <= result["aer"] <= 1.0
    assert 0.0 <= result["aer_shift_minus1"] <= 1.0 and 0.0 <= result["aer_shift_plus1"] <= 1.0
    assert 0 <= result["under_translation"] <= result["source_words"]
    assert result["over_translation"] >= 0
    peaks = result["identical_word_peaks"]  # None when no output word has a source twin.
    assert result["identical_words"] >= 0 and (peaks is None or 0.0 <= peaks <= 1.0)
    offsets = result["identical_word_offsets"]
    assert (offsets is None) == (peaks is None) and (offsets is None or offsets["+0"] == peaks)
    assert sum(r["count"] for r in result["bleu_by_length"]) == 64
    assert all({"min_len", "max_len", "count", "bleu"} <= set(r) for r in result["bleu_by_length"])
    hyps = (out / "hypotheses.txt").read_text().splitlines()
    assert len(hyps) == 64
    # The reported BLEU is that of the hypotheses written, against the split's references.
    refs = [pair[1] for pair in data.raw(split)]
    assert result["bleu"] == pytest.approx(metrics.bleu(hyps, refs, pretokenized=True)[0])
    assert (out / "bleu_vs_length.png").stat().st_size > 0
    assert len(list((out / "alignments").glob("*.png"))) == 2  # decode.num_heatmaps


def test_translate_mode_keeps_lines_and_survives_bad_bytes(trained, tmp_path):
  source = tmp_path / "in.txt"
  source.write_bytes(b"the cat sleeps .\n\nthe dog does not eat apples .\n\xff\xfe bad\n\n")
  out, att = tmp_path / "out.txt", tmp_path / "att.jsonl"
  run_main(
    trained,
    "--mode=translate",
    f"--input={source}",
    f"--output={out}",
    f"--alignments={att}",
    "--config.train.num_steps=20",
  )
  lines = out.read_text().split("\n")[:-1]
  assert len(lines) == 5 and lines[1] == "" and lines[4] == "" and lines[0] != ""
  records = [json.loads(line) for line in att.read_text().splitlines()]
  assert len(records) == 5 and records[0]["source"] == "the cat sleeps ."
  first = np.asarray(records[0]["attention"])
  assert first.shape[1] == 5  # 4 source words + EOS.
  np.testing.assert_allclose(first.sum(axis=1), 1.0, atol=1e-3)


@pytest.mark.slow
def test_a_second_translate_loads_every_program_from_the_compilation_cache(trained, tmp_path):
  """--compilation_cache=DIR: the first process fills DIR, the second adds no entry (every
  program it ran was loaded, none compiled) and translates the same."""
  source, cache = tmp_path / "in.txt", tmp_path / "cache"
  source.write_text("the cat sleeps .\nthe dog does not eat apples .\n")
  entries, outputs = [], []
  for i in range(2):
    out = tmp_path / f"out{i}.txt"
    translate = ["--mode=translate", f"--input={source}", f"--output={out}"]
    run_main(
      trained,
      *translate,
      f"--compilation_cache={cache}",
      "--config.train.num_steps=20",
      own_process=True,
    )
    entries.append(sorted(p.name for p in cache.iterdir()))
    outputs.append(out.read_text())
  assert entries[0] and entries[1] == entries[0]
  assert outputs[1] == outputs[0] and outputs[0].count("\n") == 2


def test_resume_equals_uninterrupted_run(trained, tmp_path):
  workdir = tmp_path / "resumed"
  run_main(workdir, "--config.train.num_steps=10", "--config.train.final_eval=false")
  # Raising num_steps continues the finished run.
  proc = run_main(workdir, "--config.train.num_steps=20", "--config.train.final_eval=false")
  assert "resumed from step 10" in proc.stderr
  step_a, full = final_params(trained)
  step_b, resumed = final_params(workdir)
  assert step_a == step_b == 20
  for key in full:
    np.testing.assert_array_equal(resumed[key], full[key], err_msg=key)

  def strip(rows):
    timing = ("tokens_per_s", "elapsed_s")
    return [{k: v for k, v in r.items() if k not in timing} for r in rows]

  assert strip(metric_rows(workdir)) == strip(metric_rows(trained))


def test_changed_model_is_refused_with_the_field_names(trained, tmp_path):
  from configs import tiny
  from seq2seq import checkpoints

  workdir = tmp_path / "changed"
  workdir.mkdir()
  checkpoints.check_and_save_config(workdir, tiny.get_config())
  proc = run_main(workdir, "--config.model.score=dot", "--config.model.emb_dim=8", check=False)
  assert proc.returncode == 1
  line = proc.stderr.strip().splitlines()[-1]
  assert line.startswith("error:") and "model.emb_dim" in line and "model.score" in line


@pytest.mark.slow
def test_wall_clock_budget_stops_with_a_resumable_checkpoint(tmp_path):
  workdir = tmp_path / "budget"
  args = ["--config.train.num_steps=100000", "--config.train.valid_bleu=false"]
  args += ["--config.train.anneal=linear"]  # Annealed along the clock (not bit-reproducible).
  args += ["--config.decode.num_heatmaps=0"]  # Its evaluation's step is read, not its drawings.
  proc = run_main(workdir, *args, "--config.train.max_minutes=0.05")
  assert "max_minutes=0.05 reached" in proc.stderr
  rows = metric_rows(workdir)
  last = max(r["step"] for r in rows)
  assert 0 < last < 100000 and rows[-1]["elapsed_s"] >= 3.0
  steps = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
  assert steps[-1] == last  # The stopping step was checkpointed.
  assert json.loads((workdir / "eval" / "test" / "results.json").read_text())["step"] == last
  # The same budget again trains no further (the run is out of time) ...
  again = run_main(
    workdir, *args, "--config.train.max_minutes=0.05", "--config.train.final_eval=false"
  )
  assert f"resumed from step {last}" in again.stderr
  assert max(r["step"] for r in metric_rows(workdir)) == last
  # ... and a larger one continues the same run from there: 1.8 s more than the clock has spent
  # (the first run may overrun its 3 s by a slow step on a loaded machine).
  spent_s = rows[-1]["elapsed_s"]
  budget_s = spent_s + 1.8
  more = f"--config.train.max_minutes={budget_s / 60.0}"
  proc = run_main(workdir, *args, more, "--config.train.final_eval=false")
  assert f"resumed from step {last}" in proc.stderr
  # Each update's learning rate is at most base * (1 - the share of the budget spent before it),
  # and the clock goes on across the restart: the resumed steps start past `spent_s`.
  base = json.loads((workdir / "config.json").read_text())["train"]["learning_rate"]
  train_rows = [r for r in metric_rows(workdir) if r["split"] == "train"]
  for limit, part in ((3.0, [r for r in train_rows if r["step"] <= last]), (budget_s, train_rows)):
    for before, row in itertools.pairwise(part):
      spent = min(before["elapsed_s"] / limit, 1.0)
      assert row["learning_rate"] <= base * (1.0 - spent) + 1e-9, (row, before)
  resumed = [r["learning_rate"] for r in train_rows if r["step"] > last]
  assert resumed and max(resumed) <= base * (1.0 - spent_s / budget_s) + 1e-9


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


@pytest.mark.parametrize(
  "flag, message",
  [
    ("--config.model.no_such_field=3", "error: --config.model.no_such_field: no such config field"),
    (
      "--config.train.num_step=3",
      'error: --config.train.num_step: no such config field (did you mean "num_steps"?)',
    ),
    ("--config.train.num_steps=abc", "error: flag --config.train.num_steps=abc: invalid literal"),
  ],
)
def test_a_mistaken_config_flag_is_one_error_line(tmp_path, flag, message):
  proc = run_main(tmp_path / "bad", flag, check=False, own_process=True)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # One line, no traceback.
  assert proc.stderr.startswith(message), proc.stderr[-2000:]


@pytest.mark.slow
def test_eight_devices_match_one(trained, tmp_path):
  workdir = tmp_path / "eight"
  steps = ("--config.train.num_steps=20", "--config.train.final_eval=false")
  run_main(workdir, *steps, xla_flags="--xla_force_host_platform_device_count=8")
  one = [r["loss"] for r in metric_rows(trained)]
  eight = [r["loss"] for r in metric_rows(workdir)]
  np.testing.assert_allclose(eight, one, rtol=2e-4, atol=2e-4)


@pytest.mark.slow
def test_two_processes_on_localhost_match_one(trained, tmp_path):
  """jax.distributed with two CPU processes, each feeding half of every batch."""
  import socket

  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  workdir = tmp_path / "two"
  cmd = main_command(
    workdir,
    "--config.train.num_steps=20",
    "--config.train.final_eval=false",
    f"--coordinator_address=127.0.0.1:{port}",
    "--num_processes=2",
  )
  run_processes([[*cmd, f"--process_id={i}"] for i in range(2)], [subprocess_env()] * 2)
  np.testing.assert_allclose(
    [r["loss"] for r in metric_rows(workdir)], [r["loss"] for r in metric_rows(trained)], rtol=2e-4
  )


@pytest.mark.slow
def test_two_processes_translate_a_file_as_one_does(trained, tmp_path):
  """--mode=translate in two processes: each decodes half of the batches, process 0 writes,
  and the file is the one-process file."""
  import socket

  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  sources = [json.loads(line)["source"] for line in (trained / "eval/test/sentences.jsonl").open()]
  (tmp_path / "in.txt").write_text("".join(line + "\n" for line in sources))
  cmd = lambda out: [
    *main_command(trained, "--mode=translate", f"--input={tmp_path / 'in.txt'}"),
    f"--output={tmp_path / out}",
    "--config.decode.beam_size=3",
    "--config.decode.batch_size=8",
  ]
  run_processes([cmd("one.txt")], [subprocess_env()])
  two = [*cmd("two.txt"), f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2"]
  run_processes([[*two, f"--process_id={i}"] for i in range(2)], [subprocess_env()] * 2)
  assert (tmp_path / "two.txt").read_text() == (tmp_path / "one.txt").read_text()
  assert len(sources) == TEST_SENTENCES


def test_a_config_saved_before_a_field_existed_resumes_as_that_fields_old_behaviour(tmp_path):
  """config.json of a run saved before train.loss_normalization existed equals a config holding
  its old behaviour ("tokens"), and differs from one asking for "sentences"."""
  from configs import tiny
  from seq2seq import checkpoints

  config = tiny.get_config()
  saved = json.loads(config.to_json_best_effort())
  del saved["train"]["loss_normalization"]
  (tmp_path / "config.json").write_text(json.dumps(saved))
  checkpoints.check_and_save_config(tmp_path, config)
  (tmp_path / "config.json").write_text(json.dumps(saved))
  config.train.loss_normalization = "sentences"
  with pytest.raises(checkpoints.IncompatibleRunError, match="train.loss_normalization"):
    checkpoints.check_and_save_config(tmp_path, config)


def test_prepare_mode_makes_the_store_that_training_then_only_opens(tmp_path):
  workdir = tmp_path / "run"
  proc = run_main(workdir, "--mode=prepare", "--json")
  stats = json.loads(proc.stdout)["data"]
  assert stats["examples"]["train"] > 0 and (workdir / "vocab" / "src").is_dir()
  store_dir = stats["store"]["path"]
  files = {p.name: p.stat().st_mtime_ns for p in sorted(pathlib.Path(store_dir).iterdir())}
  run_main(workdir, "--config.train.num_steps=1", "--config.train.final_eval=false")
  assert {p.name: p.stat().st_mtime_ns for p in sorted(pathlib.Path(store_dir).iterdir())} == files
  log = (workdir / "log.txt").read_text()
  assert log.count("prepared in") == 1  # By --mode=prepare; training opened what it made.

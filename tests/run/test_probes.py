"""Bad input and misuse on the command line, probed as a careful new user and a hostile tester
would: every probe ends in one `error:` line with exit status 1 (no traceback), or in a correct
result. The kills, damaged checkpoints and races have their own tests
(tests/system/test_reliability.py); these are the quick cases, each a main.py command on the tiny
trained run (the averaging tool's are in tests/run/test_average.py)."""

from __future__ import annotations

import json

import pytest
from helpers import run_main

SOURCES = "the cat sleeps .\na big house .\n"


def one_error_line(proc, message: str) -> None:
  assert proc.returncode == 1, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert lines[-1].startswith("error:") and message in lines[-1], lines[-1]
  assert "Traceback" not in proc.stderr


@pytest.fixture
def files(tmp_path):
  """Input files of every shape a probe reads, in tmp_path."""
  made = {
    "src": SOURCES,
    "ref": "le chat dort .\nune grande maison .\n",
    "ref_short": "le chat dort .\n",
    "empty": "",
    "blank": "\n  \n\n",
    "html": "<script>alert(1)</script> the cat .\n",
  }
  for name, text in made.items():
    (tmp_path / f"{name}.txt").write_text(text)
  (tmp_path / "bad_utf8.txt").write_bytes(b"the \xff cat .\n")
  return tmp_path


# (probe, main.py flags given the files' folder F, the error's words); each ends in one line.
ERRORS = [
  ("missing input", ["--mode=translate", "--input=F/none.txt"], "No such file"),
  ("score without reference", ["--mode=score", "--input=F/src.txt"], "needs --reference"),
  (
    "score files of other lengths",
    ["--mode=score", "--input=F/src.txt", "--reference=F/ref_short.txt"],
    "has 2 lines but",
  ),
  ("nbest beyond the beam", ["--mode=translate", "--input=F/src.txt", "--nbest=9"], "nbest"),
  (
    "unwritable output",
    ["--mode=translate", "--input=F/src.txt", "--output=F/no/out.txt"],
    "cannot write",
  ),
  (
    "output is a folder",
    ["--mode=translate", "--input=F/src.txt", "--output=F"],
    "it is a directory",
  ),
  (
    "negative length norm",
    ["--config.decode.length_penalty=power(alpha=-1)"],
    "alpha must be >= 0",
  ),
  ("negative coverage penalty", ["--config.decode.coverage_penalty=-1"], "coverage_penalty"),
  ("zero beam", ["--config.decode.beam_size=0"], "decode.beam_size must be at least 1"),
  ("negative steps", ["--config.train.num_steps=-5"], "train.num_steps must be at least 0"),
  ("negative learning rate", ["--config.train.learning_rate=-1"], "learning_rate must be"),
  ("negative batch", ["--config.data.batch_size=-4"], "data.batch_size must be at least 1"),
  ("misspelt field", ["--config.train.num_step=3"], "no such config field"),
  ("a string for a number", ["--config.train.num_steps=many"], "invalid literal"),
  ("unknown score", ["--config.model.score=magic"], "unknown score function 'magic'"),
  ("unknown mode", ["--mode=fly"], "value should be one of"),
  (
    "another model's config",
    ["--mode=translate", "--input=F/src.txt", "--config.model.enc_hidden=24"],
    "--config differs from",
  ),
]


@pytest.mark.parametrize("flags, message", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_a_mistake_is_one_error_line(trained, files, flags, message):
  flags = [f.replace("F/", f"{files}/").replace("=F", f"={files}") for f in flags]
  proc = run_main(trained, *flags, check=False, own_process=True)
  one_error_line(proc, message)


def test_a_run_that_does_not_exist_is_one_error_line(tmp_path):
  proc = run_main(tmp_path / "none", "--mode=eval", check=False)
  one_error_line(proc, "no run in")


def test_resuming_with_another_config_is_one_error_line(trained, tmp_path):
  import shutil

  workdir = tmp_path / "run"
  shutil.copytree(trained, workdir, ignore=shutil.ignore_patterns("eval", ".lock"))
  proc = run_main(workdir, "--config.model.dec_hidden=24", check=False)
  one_error_line(proc, "different config in model.dec_hidden")


@pytest.mark.parametrize("name, lines", [("empty", 0), ("blank", 3), ("bad_utf8", 1), ("html", 1)])
def test_odd_input_gives_one_output_line_per_input_line(trained, files, name, lines):
  """Empty, blank, invalid UTF-8 and HTML input: exit 0, one output line per input line
  (blank in, blank out)."""
  out = files / f"{name}.out"
  run_main(trained, "--mode=translate", f"--input={files}/{name}.txt", f"--output={out}")
  got = out.read_text().split("\n")[:-1]
  assert len(got) == lines
  if name == "blank":
    assert got == ["", "", ""]


def test_score_mode_reports_blank_sides_on_their_line(trained, files):
  (files / "src2.txt").write_text("the cat .\n\n")
  (files / "ref2.txt").write_text("\nle chat .\n")
  out = files / "scores.jsonl"
  args = [f"--input={files}/src2.txt", f"--reference={files}/ref2.txt", f"--output={out}"]
  run_main(trained, "--mode=score", *args)
  records = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r["error"] for r in records] == ["empty target", "empty source"]
  assert all(r["score"] is None for r in records)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_a_config_json_edited_to_another_shape_is_one_error_line(trained, tmp_path, mode):
  """Probe 2i2: config.json edited to another model.dec_hidden, and the run given the same value
  on the command line, so the config agrees with config.json but not with the checkpoints'
  arrays. One error line naming an array, both shapes and config.json; not Orbax's tracebacks,
  its `strict=False` advice, nor "no intact checkpoint" (every checkpoint is intact)."""
  import shutil

  workdir = tmp_path / "run"
  shutil.copytree(trained, workdir, ignore=shutil.ignore_patterns("eval", ".lock"))
  saved = json.loads((workdir / "config.json").read_text())
  assert saved["model"]["dec_hidden"] == 32
  saved["model"]["dec_hidden"] = 24
  (workdir / "config.json").write_text(json.dumps(saved, indent=2))
  proc = run_main(
    workdir, f"--mode={mode}", "--config.model.dec_hidden=24", check=False, own_process=True
  )
  one_error_line(proc, "does not fit the model this config builds")
  line = proc.stderr.strip().splitlines()[-1]
  assert "params/" in line and "saved" in line and "config.json" in line, line
  assert "strict=False" not in proc.stderr, proc.stderr[-3000:]

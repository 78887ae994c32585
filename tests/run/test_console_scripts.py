"""The console scripts of pyproject.toml: each names a function that runs without arguments (as
an installed script calls it), is named after its module, and answers --help; `python -m` and
`python main.py` stay the same commands."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import tomllib

import pytest
from helpers import ROOT, subprocess_env

SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
TOOLS = [
  "serve",
  "average",
  "rerank",
  "build_lexicon",
  "build_alignments",
  "settings",
  "export",
  "attribute",
]


def _target(name: str):
  module, _, attr = SCRIPTS[name].partition(":")
  return module, getattr(importlib.import_module(module), attr)


def test_every_tool_and_main_has_a_script_named_after_its_module():
  expected = {f"seq2seq-{tool.replace('_', '-')}": f"seq2seq.{tool}:main" for tool in TOOLS}
  assert SCRIPTS == {"seq2seq": "seq2seq.__main__:main", **expected}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_script_target_is_callable_without_arguments(name):
  _, function = _target(name)
  assert callable(function)
  required = [
    p
    for p in inspect.signature(function).parameters.values()
    if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
  ]
  assert required == []


@pytest.mark.parametrize("name", sorted(set(SCRIPTS) - {"seq2seq"}))
def test_every_tool_script_reads_its_flags_from_the_command_line(name, monkeypatch, capsys):
  """Called as the installed script calls it: no arguments, the flags in sys.argv."""
  _, function = _target(name)
  monkeypatch.setattr(sys, "argv", [name, "--help"])
  with pytest.raises(SystemExit) as stopped:
    function()
  assert stopped.value.code == 0
  assert capsys.readouterr().out.startswith("usage:")


def test_the_seq2seq_script_is_main_py():
  """`main()` with no arguments parses sys.argv (absl's app.run), as `python main.py` does."""
  args = ["--mode=report", "--workdir=no/such/run"]
  script = f"import sys; sys.argv = {['seq2seq', *args]}; from seq2seq.__main__ import main; main()"
  for cmd in ([sys.executable, "-c", script], [sys.executable, "main.py", *args]):
    proc = subprocess.run(
      cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == "error: no run in no/such/run (no such directory)"

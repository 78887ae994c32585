"""The front door against the repository: the README and the documentation's hand-written pages
(docs/**/*.md, but the generated results pages) against the code. Their paths, links, config
fields and command-line flags must exist; the README stays under 200 lines and holds no measured
figure but its generated headline block (tests/experiments/test_results.py checks that block against
the data), and no hand-written docs page types a "mean ± sd" figure: those come from the results
pages, generated from the data.
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest
from helpers import ROOT

from configs import default
from seq2seq import saved_format

README = ROOT / "README.md"
# "57.55 ± 0.38", "323 ± 19", "57 ± 16%": the mean, its decimals, the sd and a percent sign.
MEAN_SD = re.compile(r"(?<![\w.])(-?\d+(?:\.(\d+))?) ± (\d+(?:\.\d+)?)(%?)")
RESULTS_PATH = re.compile(r"experiments/results/[\w./=+-]*[\w/]")
# configs/demo.py, tests/decoding/test_decode.py, ...: a file of this repository (another's is
# written with its name in front, GroundHog/experiments/nmt/encdec.py).
FILE_PATH = re.compile(
  r"(?<![\w./-])((?:configs|experiments|seq2seq|tests|docs)/[\w/.=+-]*\.(?:py|sh|md|json|png))"
)
LINK = re.compile(r"\]\(([^)#:]+)\)")  # Relative Markdown links (no scheme, no anchor).
DOCS = ROOT / "docs"
# The hand-written pages: not the generated results pages, nor what a build writes.
PAGES = sorted(
  p
  for p in DOCS.rglob("*.md")
  if not {"results", "_build", "_generated"} & set(p.relative_to(DOCS).parts[:-1])
)
FRONT = [README, *PAGES]


def _ids(paths: list[Path]) -> list[str]:
  return [str(p.relative_to(ROOT)) for p in paths]


def test_the_readme_is_short_and_its_only_figures_are_generated():
  from experiments import pages

  text = README.read_text()
  assert len(text.splitlines()) <= 200
  start, end = text.index(pages.HEADLINE_BEGIN), text.index(pages.HEADLINE_END)
  assert MEAN_SD.findall(text[:start] + text[end:]) == []
  assert MEAN_SD.findall(text[start:end]), "the headline block holds the paper's mean ± sd"


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_no_hand_written_docs_page_types_a_measured_figure(page):
  assert MEAN_SD.findall(page.read_text()) == []


@pytest.mark.parametrize("page", FRONT, ids=_ids(FRONT))
def test_every_path_and_relative_link_exists(page):
  """Repository paths are read from the root, links from the page's own folder."""
  text = re.sub(r"<!--.*?-->", "", page.read_text(), flags=re.S)
  named = {ROOT / p for p in RESULTS_PATH.findall(text) + FILE_PATH.findall(text)}
  named |= {page.parent / p for p in LINK.findall(text)}
  assert sorted(str(p) for p in named if not p.exists()) == []


@pytest.mark.parametrize("page", FRONT, ids=_ids(FRONT))
def test_every_config_field_named_exists_or_is_upgraded_from(page):
  """`model.score`, `--config.train.num_steps=...`: a field of configs/default.py, or an old one
  that `saved_format.upgrade` still reads from saved configs."""
  config = default.get_config()
  section = "|".join(config.keys())
  pattern = rf"(?<![\w./-])((?:{section})\.[a-z_][\w.]*[a-z_0-9])"
  named = set(re.findall(pattern, page.read_text()))
  old = {f"model.{f}" for f in (*saved_format._MOVED, *saved_format._FEATURE_FIELDS)}
  old |= {f"train.{f}" for f in saved_format._TERM_FIELDS} | set(saved_format.REMOVED_FIELDS)
  old |= set(saved_format.REPLACED_FIELDS)

  def exists(field: str) -> bool:
    node = config
    for part in field.split("."):
      if not hasattr(node, "keys") or part not in node:
        return False
      node = node[part]
    return True

  unknown = [f for f in named if not f.endswith((".py", ".md")) and f not in old and not exists(f)]
  assert sorted(unknown) == []


def _commands(text: str) -> list[tuple[str, set[str]]]:
  """(program, the flags written after it) for every `python main.py` and `python -m NAME` in the
  README's code: fenced blocks (backslash continuations joined) and inline code spans."""
  fenced = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
  inline = re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
  code = [block.replace("\\\n", " ") for block in fenced] + [" ".join(s.split()) for s in inline]
  commands = []
  for line in "\n".join(code).splitlines():
    for match in re.finditer(r"python (?:-m )?(main\.py|[a-z0-9_]+\.[\w.]*\w)(.*)", line):
      words = re.split(r"[|;&#`]", match.group(2))[0]
      commands.append((match.group(1), set(re.findall(r"(?<!\S)(--[a-z][\w-]*)", words))))
  return commands


def _module_flags(name: str, monkeypatch: pytest.MonkeyPatch) -> set[str]:
  """The options of `python -m name`: its argparse parser, caught as `main` starts parsing."""

  class Parsed(Exception):
    pass

  def catch(parser, *args, **kwargs):
    raise Parsed(parser)

  monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", catch)
  with pytest.raises(Parsed) as caught:
    importlib.import_module(name).main([])
  return set(caught.value.args[0]._option_string_actions)


def test_every_flag_of_every_command_in_the_front_door_exists(monkeypatch):
  """Every `python main.py ...` and `python -m NAME ...` of the README and the docs pages."""
  commands = [c for page in FRONT for c in _commands(page.read_text())]
  assert len(commands) > 20
  main = importlib.import_module("main")  # Defines main.py's absl flags.
  known = {"main.py": {f"--{name}" for name in main.FLAGS}}
  unknown = []
  for program, flags in commands:
    if program == "experiments.X":  # A page's placeholder for any script.
      continue
    if program not in known:
      known[program] = _module_flags(program, monkeypatch)
    unknown += [f"{program} {f}" for f in flags if f not in known[program]]
  assert sorted(set(unknown)) == []


def test_the_design_page_says_where_every_module_of_the_package_lives():
  table = (ROOT / "docs" / "design.md").read_text().split("## Where things live", 1)[1]
  modules = sorted(p.name for p in (ROOT / "seq2seq").glob("*.py") if p.name != "__init__.py")
  assert [m for m in modules if f"`{m}`" not in table] == []

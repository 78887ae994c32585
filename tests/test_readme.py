"""The README against the repository: its measured figures against the committed results they
cite, its paths, links, config fields and command-line flags, and its layout against the files.

Every "mean ± sd" in the README is a study's figure typed into prose or a table. A section (a
`##` or `###` heading and what follows it, up to the next) names the results it reports,
`experiments/results/...`; each of its "a ± b" must be a mean and standard deviation that one of
those folders' JSON files holds, printed to the README's decimals (a "%" figure as a share
times 100). A figure retyped wrongly, or left behind when a study's results change, fails here.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ROOT

from configs import default
from seq2seq import settings

README = ROOT / "README.md"
# "57.55 ± 0.38", "323 ± 19", "57 ± 16%": the mean, its decimals, the sd and a percent sign.
MEAN_SD = re.compile(r"(?<![\w.])(-?\d+(?:\.(\d+))?) ± (\d+(?:\.\d+)?)(%?)")
RESULTS_PATH = re.compile(r"experiments/results/[\w./=+-]*[\w/]")
# configs/demo.py, tests/test_decode.py, ...: a file of this repository (another's is written
# with its name in front, GroundHog/experiments/nmt/encdec.py).
FILE_PATH = re.compile(
  r"(?<![\w./-])((?:configs|experiments|seq2seq|tests|docs)/[\w/.=+-]*\.(?:py|sh|md|json|png))"
)
LINK = re.compile(r"\]\(([^)#:]+)\)")  # Relative Markdown links (no scheme, no anchor).


def _sections(text: str) -> list[str]:
  return re.split(r"\n(?=#{2,3} )", text)


def _is_number(value: object) -> bool:
  return isinstance(value, int | float) and not isinstance(value, bool)


def _mean_sd_pairs(node: object) -> Iterator[tuple[object, object]]:
  """Every (mean, sd) a results JSON holds: `x_mean` beside `x_std`, `mean` beside `std`, `x`
  beside `x_std` (Table 1's rows and Fig. 2's bins), and two-item lists ([mean, sd], as
  attention_sharpness.json and the offsets files write them)."""
  if isinstance(node, dict):
    for key, value in node.items():
      if (key == "mean" or key.endswith("_mean")) and key[: -len("mean")] + "std" in node:
        yield value, node[key[: -len("mean")] + "std"]
      elif f"{key}_std" in node:
        yield value, node[f"{key}_std"]
      yield from _mean_sd_pairs(value)
  elif isinstance(node, list):
    if len(node) == 2:
      yield node[0], node[1]
    for value in node:
      yield from _mean_sd_pairs(value)


def _cited_json(section: str) -> list[Path]:
  files: set[Path] = set()
  for cited in RESULTS_PATH.findall(section):
    path = ROOT / cited
    folder = path if path.is_dir() else path.parent
    files.update(folder.glob("*.json"))
  return sorted(files)


def unmatched_figures(text: str) -> list[str]:
  """The README's "a ± b" figures that no JSON cited in their section holds."""
  missing = []
  for section in _sections(text):
    figures = MEAN_SD.findall(section)
    if not figures:
      continue
    printed: set[str] = set()
    for path in _cited_json(section):
      for mean, sd in _mean_sd_pairs(json.loads(path.read_text())):
        if not (_is_number(mean) and _is_number(sd)):
          continue
        for decimals in range(4):
          for scale in (1, 100):  # A share printed as a percentage.
            printed.add(f"{mean * scale:.{decimals}f} ± {sd * scale:.{decimals}f}")
    heading = section.splitlines()[0]
    for mean, decimals, sd, _percent in figures:
      figure = f"{mean} ± {sd}"
      if len(sd.partition(".")[2]) != len(decimals) or figure not in printed:
        missing.append(f"{heading}: {figure}")
  return missing


def test_every_mean_and_sd_in_the_readme_is_in_the_results_its_section_cites():
  assert unmatched_figures(README.read_text()) == []


def test_a_figure_typed_wrong_is_caught():
  text = README.read_text()
  first = MEAN_SD.search(text)
  assert first is not None
  wrong = text[: first.start(3)] + "9" + text[first.start(3) :]  # The sd gains a leading digit.
  assert len(unmatched_figures(wrong)) == 1


def test_every_path_and_relative_link_in_the_readme_exists():
  text = README.read_text()
  named = set(RESULTS_PATH.findall(text)) | set(LINK.findall(text)) | set(FILE_PATH.findall(text))
  assert sorted(p for p in named if not (ROOT / p).exists()) == []


def test_the_layout_names_every_module_script_and_config():
  text = README.read_text()
  layout = text[text.index("## Layout") : text.index("### Extending")]
  patterns = ("seq2seq/**/*.py", "experiments/*.py", "experiments/*.sh", "configs/*.py")
  files = [path for pattern in patterns for path in ROOT.glob(pattern)]
  files += ROOT.glob("experiments/lib/*.py")  # The layout names these without their suffix.
  names = {p.stem if p.parent.name == "lib" else p.name for p in files if p.name != "__init__.py"}
  assert sorted(n for n in names if n not in layout) == []


def test_every_config_field_the_readme_names_exists_or_is_upgraded_from():
  """`model.score`, `--config.train.num_steps=...`: a field of configs/default.py, or an old one
  that `settings.upgrade` still reads from saved configs (the README tells of those too)."""
  config = default.get_config()
  section = "|".join(config.keys())
  named = set(
    re.findall(rf"(?<![\w./-])((?:{section})\.[a-z_][\w.]*[a-z_0-9])", README.read_text())
  )
  old = {f"model.{f}" for f in (*settings._MOVED, *settings._FEATURE_FIELDS)}
  old |= {f"train.{f}" for f in settings._TERM_FIELDS} | set(settings.REMOVED_FIELDS)

  def exists(field: str) -> bool:
    node = config
    for part in field.split("."):
      if not hasattr(node, "keys") or part not in node:
        return False
      node = node[part]
    return True

  unknown = [f for f in named if not f.endswith(".py") and f not in old and not exists(f)]
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


def test_every_flag_of_every_command_in_the_readme_exists(monkeypatch):
  commands = _commands(README.read_text())
  assert len(commands) > 20
  main = importlib.import_module("main")  # Defines main.py's absl flags.
  known = {"main.py": {f"--{name}" for name in main.FLAGS}}
  unknown = []
  for program, flags in commands:
    if program == "experiments.X":  # The README's placeholder for any script.
      continue
    if program not in known:
      known[program] = _module_flags(program, monkeypatch)
    unknown += [f"{program} {f}" for f in flags if f not in known[program]]
  assert sorted(set(unknown)) == []

"""What one study's page says beyond what every page reads from the study's data. Nothing but the
standard library is imported here: a script's child process in another environment may read it."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class StudyPage:
  """A study's title and prose, and the page code that is its own.

  `measurements`: the tables of a study without runs, drawn from its script's JSON in place of
  the page the script wrote from the same JSON; in a sweep's page, the tables its script adds to
  the results table. `conclusion`: its own sentences, after those
  every study with a report gets. `early`: a study run early in training that this one repeats
  at the plateau. `counterpart`: (study, how a sentence names it) whose points this study repeats
  with one thing changed. `page`: the whole page, where the study is unlike the others.
  """

  title: str
  about: str = ""  # What the study asks: prose without figures (every figure comes from data).
  note: str = ""  # The state of its data where it is not the final one (delete it once it is).
  measurements: Callable[[Path], list[str]] | None = None
  conclusion: Callable[[Path], list[str]] | None = None
  early: str = ""
  counterpart: tuple[str, str] | None = None
  page: Callable[[Path, Path], str] | None = None


def script_page(render: Callable[[dict[str, Any]], str], report: str) -> Callable[[Path], list]:
  """The `measurements` of a study whose script writes its own page: `render(record)` of
  STUDY/REPORT under a heading, past the script's own title, its figures linked from the study
  folder."""

  def table(study: Path) -> list[str]:
    record = json.loads((study / report).read_text())
    body = render(record)
    body = re.sub(r"\]\((\w+\.png)\)", rf"](../../experiments/results/{study.name}/\1)", body)
    return ["## Measurements", "", *body.split("\n", 2)[2].splitlines(), ""]

  return table

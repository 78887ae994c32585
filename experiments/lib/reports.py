"""What a result file says besides its numbers: formatted cells, Markdown tables, JSON, and the
environment it was measured in (package versions, devices, host, load, date, command line)."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

from experiments.lib import records
from seq2seq.common import files

PACKAGES = (
  "jax",
  "jaxlib",
  "flax",
  "optax",
  "orbax-checkpoint",
  "numpy",
  "grain",
  "tensorflow-datasets",
  "sacrebleu",
  "sentencepiece",
  "matplotlib",
)


def fmt(value: float | None, digits: int = 2, missing: str = "-") -> str:
  """`value` with `digits` decimals, or `missing` for None."""
  return missing if value is None else f"{value:.{digits}f}"


def mean_sd(row: Mapping[str, Any], key: str, digits: int = 2) -> str:
  """ "MEAN ± SD" of `row[key + "_mean"]` and `row[key + "_std"]`."""
  return f"{fmt(row[key + '_mean'], digits)} ± {fmt(row[key + '_std'], digits)}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
  """A Markdown table's lines: the first column left-aligned, the others (numbers) right."""
  lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
  lines += ["| " + " | ".join(row) + " |" for row in rows]
  return lines


def named_folders(text: str, folders: Mapping[str, str | Path | None]) -> str:
  """`text` (a recorded command, a run's path) with this machine's folders replaced by the names
  of their flags ({"RUN": "/work/run"}: "--workdir RUN"), as the results pages name them (a page
  holds no machine's paths); a folder of None is left out. Longer folders are replaced first,
  so one inside another keeps its own name."""
  for name, folder in sorted(folders.items(), key=lambda item: -len(str(item[1] or ""))):
    if folder:
      text = text.replace(str(folder), name)
  return text


def command_block(command: str) -> list[str]:
  """The lines of a page's closing command, as a bash code block."""
  return ["```bash", command, "```"]


def table_page(
  title: str, intro: str, header: Sequence[str], rows: Sequence[Sequence[str]], command: str
) -> str:
  """A script's page of one table: its title, what it shows, the table and the command."""
  return "\n".join(
    [f"# {title}", "", intro, "", *table(header, rows), "", *command_block(command), ""]
  )


def made_by(script: str, record: Mapping[str, Any]) -> str:
  """The opening of a study's page: the script that made it, when, on which CPU, and the load
  average at the start (`record`'s date, cpu and load_average)."""
  return (
    f"Made by `python -m experiments.{script}` (see its docstring) on {record['date']}, "
    f"{record['cpu'].get('cpu_model', '?')}, load average {record['load_average']['start']} at "
    "the start"
  )


def provenance(script: str, argv: Sequence[str] | None, load_start: Any) -> dict[str, Any]:
  """What every measurement records beside its figures: the CPU and its instruction sets, the
  load average at the start (`load_start`) and now, the date, and the command that made it
  (`python -m experiments.SCRIPT` with `argv`, or this process's arguments)."""
  words = list(argv) if argv is not None else sys.argv[1:]
  return {
    "cpu": cpu_info(),
    "load_average": {"start": load_start, "end": load_average()},
    "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    "command": " ".join([f"python -m experiments.{script}", *words]),
  }


def publish(path: Path, record: Mapping[str, Any], page: str) -> None:
  """A study's record as JSON at `path` (its folder made), its page beside it (`.md`), and the
  page printed; paths inside the repository written relative to its root (`records.relative`)."""
  path.parent.mkdir(parents=True, exist_ok=True)
  files.write_atomic(path, json.dumps(records.relative(record), indent=2) + "\n")
  page = records.relative(page)
  path.with_suffix(".md").write_text(page)
  print(page)


def write_json(path: Path, value: Any) -> None:
  """`value` as indented JSON (what json cannot encode written as its string), paths inside the
  repository written relative to its root (`records.relative`: results name no machine's path)."""
  files.write_atomic(path, json.dumps(records.relative(value), indent=2, default=str) + "\n")


def versions() -> dict[str, str]:
  """Versions of Python and the packages results depend on ("not installed" where absent)."""
  out = {"python": platform.python_version()}
  for name in PACKAGES:
    try:
      out[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      out[name] = "not installed"
  return out


def load_average() -> list[float] | None:
  """The host's 1, 5 and 15 minute load averages (other work competing for the cores)."""
  try:
    return [round(x, 2) for x in os.getloadavg()]
  except OSError:
    return None


def environment() -> dict[str, Any]:
  """Devices, host, CPU model and vector instruction sets, package versions, load and date:
  what a reader needs to compare runs."""
  return {
    **cpu_info(),
    "versions": versions(),
    "backend": jax.default_backend(),
    "cpu_count": os.cpu_count(),
    "devices": [repr(d) for d in jax.devices()],
    "host": platform.platform(),
    "load_average": load_average(),
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "argv": sys.argv,
  }


VECTOR_FLAGS = (
  "sse4_2",
  "avx",
  "avx2",
  "fma",
  "avx512f",
  "avx512bw",
  "avx512vl",
  "avx512_bf16",
  "amx_bf16",
)


def cpu_info() -> dict[str, Any]:
  """The CPU model and the vector instruction sets it has (from /proc/cpuinfo; empty elsewhere),
  recorded beside every timing since the development machine's CPU changes between sessions."""
  try:
    text = Path("/proc/cpuinfo").read_text()
  except OSError:
    return {}
  model = next(
    (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")),
    "",
  )
  flags = next(
    (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []
  )
  return {"cpu_model": model, "vector_isa": [f for f in VECTOR_FLAGS if f in flags]}

"""Config files, typed dotted overrides and the main.py command that trains a run alone.

A run's settings are a config file spec, as main.py's `--config` takes it
(`configs/rnnsearch.py:maxlen=30`: a file with an optional argument for its `get_config`), plus
dotted overrides (`{"model.score": "dot"}`). An override given as text (from `--set`, `--grid`)
takes the type of the field it replaces, so `train.valid_bleu=false` is a bool and
`train.learning_rate=3e-3` a float; an unknown field fails with one line naming it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_collections

from seq2seq.checkpoints import flatten

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIGS_DIR = REPO_ROOT / "configs"
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _config_path(path: str) -> Path:
  """The config file `path` names: as given (absolute or from the working directory), else
  relative to the repository root. Raises FileNotFoundError."""
  for candidate in (Path(path), REPO_ROOT / path):
    if candidate.is_file():
      return candidate.resolve()
  raise FileNotFoundError(f"config file {path!r} not found")


def normalize_spec(spec: str) -> str:
  """`spec` with its file named relative to the repository root when it lies inside it (as
  main.py, run from the root, takes it), else by its absolute path; the argument is kept."""
  path, sep, arg = spec.partition(":")
  file = _config_path(path)
  name = file.relative_to(REPO_ROOT) if file.is_relative_to(REPO_ROOT) else file
  return f"{name}{sep}{arg}"


def _module(file: Path) -> ModuleType:
  """The Python module of a config file: a file of `configs/` as that package's module (what
  the configs themselves import), any other file loaded from its path."""
  if file.parent == CONFIGS_DIR:
    return importlib.import_module(f"configs.{file.stem}")
  name = f"_config_{hashlib.sha256(str(file).encode()).hexdigest()[:12]}"
  spec = importlib.util.spec_from_file_location(name, file)
  if spec is None or spec.loader is None:
    raise ValueError(f"cannot load config file {file}")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load_config(spec: str) -> ml_collections.ConfigDict:
  """The config of `FILE[:ARG]`, as `main.py --config=SPEC` builds it."""
  path, _, arg = spec.partition(":")
  module = _module(_config_path(path))
  return module.get_config(arg) if arg else module.get_config()


def parse_value(old: Any, text: str, key: str) -> Any:
  """`text` read as the type of the field's current value `old`; ValueError naming `key`."""
  if isinstance(old, bool):
    if text.lower() not in _TRUE + _FALSE:
      raise ValueError(f"{key}={text}: expected true or false")
    return text.lower() in _TRUE
  kinds = ((int, "an integer"), (float, "a number"))
  for kind, what in kinds:
    if isinstance(old, kind):
      try:
        return kind(text)
      except ValueError:
        raise ValueError(f"{key}={text}: expected {what}") from None
  if isinstance(old, str):
    return text
  raise ValueError(f"{key}: a field of type {type(old).__name__} cannot be set from text")


def apply_overrides(
  config: ml_collections.ConfigDict, overrides: dict[str, Any]
) -> ml_collections.ConfigDict:
  """A copy of `config` with dotted fields set (`{"model.score": "dot"}`); text values take the
  field's type. Raises ValueError naming an unknown section or field."""
  config = config.copy_and_resolve_references()
  for key, value in overrides.items():
    *parents, leaf = key.split(".")
    node = config
    for part in parents:
      if part not in node or not isinstance(node[part], ml_collections.ConfigDict):
        raise ValueError(f"unknown config section {part!r} in {key!r}")
      node = node[part]
    if leaf not in node or isinstance(node[leaf], ml_collections.ConfigDict):
      raise ValueError(f"unknown config field {key!r}")
    if isinstance(value, str):
      value = parse_value(node[leaf], value, key)
    try:
      node[leaf] = value
    except TypeError as e:
      raise ValueError(f"{key}={value!r}: {e}") from None
  return config


def parse_sets(items: Sequence[str], flag: str = "--set") -> dict[str, str]:
  """`["train.num_steps=20", ...]` -> {"train.num_steps": "20", ...} (typed when applied)."""
  out = {}
  for item in items:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
      raise ValueError(f"{flag} {item!r}: expected key=value")
    out[key.strip()] = value.strip()
  return out


def _flag_value(value: Any) -> str:
  return str(value).lower() if isinstance(value, bool) else str(value)


def main_command(config_file: str, workdir: Path, config: ml_collections.ConfigDict) -> str:
  """`python main.py --config=FILE --workdir=DIR --config.X=Y ...`, one `--config.X` for every
  field of `config` that differs from FILE's config (shell-quoted where needed)."""
  base = flatten(load_config(config_file).to_dict())
  new = flatten(config.to_dict())
  parts = ["python main.py", f"--config={shlex.quote(config_file)}"]
  parts.append(f"--workdir={shlex.quote(str(workdir))}")
  for key in sorted(new):
    if new[key] != base.get(key):
      parts.append(f"--config.{key}={shlex.quote(_flag_value(new[key]))}")
  return " ".join(parts)


def run_command(command: str | Sequence[str]) -> str:
  """Runs a `python ...` command (a main.py or `-m` command, as text or words) from the
  repository root with this interpreter, printing it first; the command as text. A failure ends
  the caller with one line naming the command and its exit code."""
  words = shlex.split(command) if isinstance(command, str) else list(command)
  text = command if isinstance(command, str) else " ".join(shlex.quote(w) for w in words)
  print(f"$ {text}", flush=True)
  code = subprocess.run([sys.executable, *words[1:]], cwd=REPO_ROOT, check=False).returncode
  if code:
    raise SystemExit(f"{text} failed with exit code {code}")
  return text


def typed(config: ml_collections.ConfigDict, overrides: dict[str, Any]) -> dict[str, Any]:
  """`overrides` as the values they set in `config` (text read as its field's type)."""
  flat = flatten(apply_overrides(config, overrides).to_dict())
  return {key: flat[key] for key in overrides}

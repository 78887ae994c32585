"""Writes the generated reference pages before Sphinx reads the sources.

At `builder-inited` this extension writes Markdown into `docs/reference/_generated/` (ignored by
git, excluded from the page discovery and included by the pages in `docs/reference/`):

* `config.md`: every field of `configs/default.py` with its default and its comment, read from the
  source with `tokenize`, and for every other config in `configs/` the fields it changes;
* `components.md`: every component of every registry in the `seq2seq` package (what
  `python -m seq2seq.settings` lists), with its docstring and its settings, their types,
  defaults and comments;
* `cli.md`: `main.py`'s flags and the `--help` of every command-line module, from one
  subprocess (`cli_help.py`).

Nothing here is copied by hand: a field, a component or a flag added to the code appears in
the next build.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import io
import json
import os
import pkgutil
import re
import subprocess
import sys
import tokenize
import tomllib
import typing
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent.parent
ROOT = DOCS.parent
OUT = DOCS / "reference" / "_generated"

# The command-line modules whose --help the CLI reference shows, in the order shown.
CLI_MODULES = (
  (
    "Experiments",
    [
      "experiments.sweep",
      "experiments.sweep_scores",
      "experiments.alignment_study",
      "experiments.architectures_study",
      "experiments.structural_study",
      "experiments.reproduce_paper",
      "experiments.realtext",
      "experiments.best30",
      "experiments.benchmark",
      "experiments.decoding_study",
      "experiments.mbr_study",
      "experiments.seed_timing",
      "experiments.tabulate",
      "experiments.plateau",
      "experiments.attention_offsets",
      "experiments.attention_sharpness",
      "experiments.explorer_timing",
      "experiments.demo_run",
    ],
  ),
  (
    "Library tools",
    [
      "seq2seq.serve",
      "seq2seq.average",
      "seq2seq.export",
      "seq2seq.build_lexicon",
      "seq2seq.build_alignments",
      "seq2seq.rerank",
      "seq2seq.settings",
      "seq2seq.data.synthetic",
    ],
  ),
)


# ------------------------------------------------------------------------------------- Markdown
_MD_SPECIAL = re.compile(r"([\\*_<>\[\]|$#~])")


def md_text(text: str) -> str:
  """`text` as literal Markdown: code spans kept, every other special character escaped."""
  text = " ".join(text.split())
  if text.count("`") % 2:
    return _MD_SPECIAL.sub(r"\\\1", text).replace("`", "\\`")
  parts = text.split("`")
  for i in range(0, len(parts), 2):
    parts[i] = _MD_SPECIAL.sub(r"\\\1", parts[i])
  for i in range(1, len(parts), 2):
    parts[i] = parts[i].replace("|", "\\|")
  return "`".join(parts)


def md_code(text: str) -> str:
  """`text` as one inline code span (inside a table cell)."""
  text = text.replace("|", "\\|")
  fence = "``" if "`" in text else "`"
  pad = " " if text.startswith("`") or text.endswith("`") else ""
  return f"{fence}{pad}{text}{pad}{fence}"


def table(header: list[str], rows: list[list[str]]) -> str:
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(row) + " |" for row in rows]
  return "\n".join(lines)


def paragraphs(doc: str | None) -> str:
  """A docstring as escaped Markdown paragraphs (its indented blocks as code)."""
  if not doc:
    return ""
  out = []
  for block in re.split(r"\n\s*\n", inspect.cleandoc(doc)):
    lines = block.splitlines()
    if all(line.startswith("    ") for line in lines):
      out.append("```text\n" + "\n".join(line[4:] for line in lines) + "\n```")
    elif all(re.match(r"\s*[*-] ", line) or line.startswith("  ") for line in lines):
      items, current = [], []
      for line in lines:
        if re.match(r"\s*[*-] ", line) and current:
          items.append(" ".join(current))
          current = []
        current.append(re.sub(r"^\s*[*-] ", "", line).strip())
      items.append(" ".join(current))
      out.append("\n".join(f"- {md_text(item)}" for item in items))
    else:
      out.append(md_text(block))
  return "\n\n".join(out)


# ------------------------------------------------------------------------------ config fields
@dataclasses.dataclass
class Field:
  path: str  # "model.score", "seed".
  line: int
  comment: str  # Its own comment (the comment lines before it and the one on its lines).
  section: bool  # A ConfigDict of fields rather than a value.


def _continues(text: str) -> bool:
  """Whether a comment line continues the comment of the statement before it."""
  return bool(re.match(r"[a-z(]|\.\.\.", text))


def config_fields(source: str) -> list[Field]:
  """The fields a `get_config` assigns, in source order, with their comments."""
  tree = ast.parse(source)
  comments: dict[int, tuple[str, bool]] = {}  # line -> (text, whole line)
  lines = source.splitlines()
  for tok in tokenize.generate_tokens(io.StringIO(source).readline):
    if tok.type == tokenize.COMMENT:
      row = tok.start[0]
      whole = not lines[row - 1][: tok.start[1]].strip()
      comments[row] = (tok.string.lstrip("#").strip(), whole)
  func = next(
    n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "get_config"
  )
  aliases: dict[str, str] = {}

  def path(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
      return aliases.get(node.id, "")
    if isinstance(node, ast.Attribute):
      base = path(node.value)
      return None if base is None else (f"{base}.{node.attr}" if base else node.attr)
    return None

  fields: list[Field] = []
  previous_end, previous = func.body[0].lineno - 1, None
  for stmt in func.body:
    if not isinstance(stmt, ast.Assign):
      previous_end = stmt.end_lineno
      continue
    before = [
      comments[n][0]
      for n in range(previous_end + 1, stmt.lineno)
      if n in comments
      and comments[n][1]
      and not set(comments[n][0]) <= set("- ")
      and not re.match(r"-{4,}", comments[n][0])
    ]
    while before and previous is not None and previous.comment and _continues(before[0]):
      previous.comment += " " + before.pop(0)
    own = [comments[n][0] for n in range(stmt.lineno, stmt.end_lineno + 1) if n in comments]
    is_section = isinstance(stmt.value, ast.Call) and getattr(stmt.value.func, "attr", "") == (
      "ConfigDict"
    )
    target_path = None
    for target in stmt.targets:
      p = path(target)
      if isinstance(target, ast.Name):
        if is_section or target_path is not None:
          aliases[target.id] = target_path or ""
        continue
      if p:
        target_path = p
    if is_section:
      for target in stmt.targets:
        if isinstance(target, ast.Name):
          aliases[target.id] = target_path or ""
    previous_end = stmt.end_lineno
    if target_path:
      previous = Field(target_path, stmt.lineno, " ".join(before + own), is_section)
      fields.append(previous)
  return fields


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
  out = {}
  for key, value in config.items():
    name = f"{prefix}{key}"
    if hasattr(value, "items"):
      out.update(flatten(value, name + "."))
    else:
      out[name] = value
  return out


def show_value(value: Any) -> str:
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, str):
    return json.dumps(value)
  return repr(value)


def config_page() -> str:
  from configs import default

  fields = config_fields((ROOT / "configs" / "default.py").read_text())
  values = flatten(default.get_config())
  by_path = {f.path: f for f in fields}
  missing = sorted(set(values) - set(by_path))
  if missing:
    raise RuntimeError(f"configs/default.py: fields the parser did not find: {missing}")
  out = [
    "## Every field: `configs/default.py`",
    "",
    paragraphs(default.__doc__),
    "",
    "Each field below is set on the command line as `--config.FIELD=VALUE`; a spec field "
    "(a component's name and settings) is listed under {doc}`components`.",
    "",
  ]
  groups: list[tuple[str, str, list[list[str]]]] = [("Top level", "", [])]
  last_comment = ""
  for f in fields:
    if f.section:
      groups.append((f"`{f.path}`", f.comment, []))
      continue
    comment = f.comment or (f"As for {last_comment}." if last_comment else "")
    if f.comment:
      last_comment = f"`{f.path}`"
    groups[-1][2].append([md_code(f.path), md_code(show_value(values[f.path])), md_text(comment)])
  for title, note, rows in groups:
    if rows:
      out += [f"### {title}", ""] + ([md_text(note), ""] if note else [])
      out += [table(["field", "default", "what it is"], rows), ""]

  out += [
    "## The other configs",
    "",
    "Each imports `configs/default.py` (or another config) and changes only what differs: the "
    "tables list exactly those fields, with the value the config gives them and the default.",
    "",
  ]
  for path in sorted((ROOT / "configs").glob("*.py")):
    if path.stem in ("__init__", "default"):
      continue
    module = importlib.import_module(f"configs.{path.stem}")
    own = {f.path: f.comment for f in config_fields(path.read_text())}
    changed = flatten(module.get_config())
    rows = [
      [
        md_code(name),
        md_code(show_value(value)),
        md_code(show_value(values.get(name))),
        md_text(own.get(name, "")),
      ]
      for name, value in changed.items()
      if values.get(name) != value
    ]
    out += [
      f"### `configs/{path.name}`",
      "",
      paragraphs(module.__doc__),
      "",
      f"`--config=configs/{path.name}`: {len(rows)} fields differ from the defaults.",
      "",
      table(["field", "here", "default", "note"], rows),
      "",
    ]
  return "\n".join(out)


# --------------------------------------------------------------------------------- components
def registries() -> list[tuple[str, Any, str]]:
  """(config field, registry, module) of every registry in the package, in the order
  `python -m seq2seq.settings` lists them (any other registry after them)."""
  import seq2seq
  from seq2seq import settings
  from seq2seq.common import registry

  found: dict[str, tuple[Any, str]] = {}
  for info in pkgutil.walk_packages(seq2seq.__path__, "seq2seq."):
    module = importlib.import_module(info.name)
    for value in vars(module).values():
      if isinstance(value, registry.Registry) and value.field not in found:
        if getattr(module, "REGISTRY", None) is value:
          found[value.field] = (value, info.name)
  listed = [
    line[:-1] for line in settings.components_help().splitlines() if re.match(r"^\S+:$", line)
  ]
  order = listed + sorted(set(found) - set(listed))
  return [(field, *found[field]) for field in order if field in found]


def settings_comments(settings_cls: type) -> dict[str, str]:
  try:
    source = inspect.getsource(settings_cls)
  except (OSError, TypeError):
    return {}
  out = {}
  for line in source.splitlines():
    m = re.match(r"\s*(\w+)\s*:\s*[^=#]+=[^#]*#\s*(.*)$", line)
    if m:
      out[m.group(1)] = m.group(2).strip()
  return out


def type_name(kind: Any) -> str:
  return getattr(kind, "__name__", str(kind))


def components_page() -> str:
  from seq2seq.common import registry

  out = []
  for field, reg, module in registries():
    out += [
      f"## `{field}`: {reg.kind}s",
      "",
      f"Registered in `{module}` ({{py:mod}}`{module}`); the field takes "
      + (
        "a spec"
        if field not in ("model.features", "model.addons", "train.loss_terms")
        else 'a "+"-joined list of specs ("" is none)'
      )
      + f', e.g. `--config.{field}="{reg.names()[0]}"`.',
      "",
    ]
    # settings_help lists every name, then the aliases.
    lines = dict(zip(reg.names(), reg.settings_help().splitlines(), strict=False))
    for name in reg.names():
      cls = reg.get(name)
      settings_cls = getattr(cls, "Settings", registry.NoSettings)
      fields = dataclasses.fields(settings_cls)
      out += [f"### `{name}`", "", f"Spec with its defaults: `{lines[name]}`", ""]
      also = [alias for alias, canonical in reg.aliases().items() if canonical == name]
      out += [f"Also named: `{alias} (another name for {name})`" for alias in also]
      out += [""] if also else []
      doc = (
        cls.__doc__
        if cls.__doc__ and cls.__doc__ != getattr(cls.__base__, "__doc__", None)
        else None
      )
      if doc:
        out += [paragraphs(doc), ""]
      if fields:
        hints = typing.get_type_hints(settings_cls)
        comments = settings_comments(settings_cls)
        rows = [
          [
            md_code(f.name),
            md_code(type_name(hints.get(f.name, f.type))),
            md_code(show_value(f.default)),
            md_text(comments.get(f.name, "")),
          ]
          for f in fields
        ]
        out += [table(["setting", "type", "default", "what it is"], rows), ""]
      else:
        out += ["No settings of its own.", ""]
  return "\n".join(out)


# ------------------------------------------------------------------------------ command lines
def start_cli_help() -> subprocess.Popen:
  """`cli_help.py` started in a process of its own, to run while the other pages are written."""
  modules = [name for _, names in CLI_MODULES for name in names]
  return subprocess.Popen(
    [sys.executable, str(DOCS / "_ext" / "cli_help.py"), *modules],
    cwd=ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    env={**os.environ, "COLUMNS": "100", "JAX_PLATFORMS": "cpu"},
  )


def cli_page(process: subprocess.Popen | None = None) -> str:
  process = process or start_cli_help()
  stdout, stderr = process.communicate()
  if process.returncode:
    raise RuntimeError(f"docs/_ext/cli_help.py failed:\n{stderr[-3000:]}")
  helps = json.loads(stdout)
  out = [
    "## `main.py`",
    "",
    "The `seq2seq` command (`seq2seq/__main__.py`; `python -m seq2seq` is the same). Its flags "
    "besides the config's fields (every field of {doc}`config` is a flag too, "
    "`--config.SECTION.FIELD=VALUE`), as `python main.py --helpshort` prints them:",
    "",
    "```text",
    helps["main.py"].rstrip(),
    "```",
    "",
  ]
  scripts = console_scripts()
  for title, names in CLI_MODULES:
    out += [f"## {title}", "", "Run from the repository root as `python -m MODULE`.", ""]
    if any(name in scripts for name in names):
      out += [
        "Those with a console script (beside the title) run as that too, anywhere, once the "
        "package is installed (`pip install -e .`, which `make` runs).",
        "",
      ]
    for name in names:
      script = f" (`{scripts[name]}`)" if name in scripts else ""
      out += [f"### `python -m {name}`{script}", "", "```text", helps[name].rstrip(), "```", ""]
  return "\n".join(out)


def console_scripts() -> dict[str, str]:
  """pyproject.toml's console scripts by the module whose `main` each runs."""
  scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
  return {target.split(":")[0]: name for name, target in scripts.items()}


# ----------------------------------------------------------------------------------- the hook
def write_pages(app: Any = None) -> None:
  OUT.mkdir(parents=True, exist_ok=True)
  cli = start_cli_help()
  pages = (("config", config_page), ("components", components_page), ("cli", lambda: cli_page(cli)))
  for name, make in pages:
    text = make() + "\n"
    target = OUT / f"{name}.md"
    if not target.exists() or target.read_text() != text:  # Unchanged: no rebuild.
      target.write_text(text)


def setup(app: Any) -> dict[str, Any]:
  app.connect("builder-inited", write_pages)
  return {"parallel_read_safe": True, "parallel_write_safe": True}

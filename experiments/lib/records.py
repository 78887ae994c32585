"""Results as data: the committed form of a study and of each of its runs (schema version 1).

A study is one folder under the results root (`experiments/results/STUDY/`); the
vocabularies of every run lie once beside them, named by their content
(`experiments/results/vocab/HASH.gz`, the first 20 hex digits of its SHA-256):

    definition.json             what was run: command, config, grid, seeds, budget, machine
    sweep.json (or the study's  its report: rows, significance, curves, one entry per run
      own report JSON) + .md
    *.png                       figures drawn from the report
    runs/POINT/seed_S/          a run's workdir, kept as
      record.json               its compact record (config, results, learning curve, time)
      hypotheses/SPLIT.txt.gz   its test outputs, one line per sentence (significance tests)

A run's workdir holds more while it trains (checkpoints, metrics.jsonl, eval/, vocab/, ...);
`convert_run` writes record.json and the compressed hypotheses from those files, and `prune`
removes what the record replaces. Readers (`experiments/lib/runs.py`) take the workdir's own
files where they are present and the record where they are not, so a converted run is finished
to a sweep, and `--collect` reports on it. `RunRecord` and `StudyDefinition` below are the
schema: every field with its meaning (docs/results/schema.md is generated from them), checked by
`validate_run` and `validate_definition`. Nothing stored names a machine's path: paths inside the
repository are written relative to its root, and those in a folder beside it from there
(`relative`: ../shared/data/..., ../keep/RUN).

A study without runs of its own keeps what its script measured or drew from other studies: a
timing (`seed_timing/`, `explorer_timing/`, `benchmark/`), the final system of a script that
trains one (`multi30k_best/final.json`), or tables over several studies (`across_studies/`,
written by `experiments.tabulate`). Its definition names the script, the report where there is
one, and lists every other file under `files`; the command that wrote a file is in the file
where its script records one. No result lies loose beside the study folders.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from seq2seq.common import files

SCHEMA_VERSION = 1
REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_ROOT = REPO_ROOT / "experiments" / "results"
RECORD = "record.json"
DEFINITION = "definition.json"
HYPOTHESES = "hypotheses"  # WORKDIR/hypotheses/SPLIT.txt.gz
VOCAB = "vocab"  # ROOT/vocab/HASH.gz, shared by the studies under ROOT.
# The splits whose outputs a record keeps: what the significance tests pair (validation
# outputs only select checkpoints; their BLEU is in the results).
KEPT_SPLITS = ("test", "test_long")
# A run workdir's files that its record replaces (`prune` removes them).
REPLACED = (
  "config.json",
  "metrics.jsonl",
  "wall_time.json",
  "eval",
  "vocab",
  "valid_hypotheses",
  "log.txt",
  "console.txt",
  "run.json",
  ".lock",
)
# Report files of the study scripts, in the order a folder's report is looked for.
REPORTS = (
  "sweep.json",
  "alignment_study.json",
  "architectures_study.json",
  "study.json",
  "summary.json",
  "decoding.json",
  "tries.json",
  "multi30k.json",  # experiments.realtext
  "final.json",  # experiments.best30 --final
  "offsets.json",  # experiments.attention_offsets
  "demo.json",  # experiments.demo_run
)


def _field(doc: str, default: Any = dataclasses.MISSING) -> Any:
  if default is dataclasses.MISSING:
    return dataclasses.field(metadata={"doc": doc})
  return dataclasses.field(default=default, metadata={"doc": doc})


@dataclasses.dataclass
class RunRecord:
  """One run: RUN/record.json."""

  schema_version: int = _field("the schema's version (1)")
  kind: str = _field('"run"')
  name: str = _field("the run's name in its study's report (`POINT-seedS`)")
  point: str | None = _field("the point of the study it belongs to (None outside a grid)")
  seed: int | None = _field("config.seed")
  config_file: str | None = _field("the config file and its argument, as main.py takes it")
  overrides: dict | None = _field("the dotted overrides on top of config_file")
  command: str | None = _field("the main.py command that trains the run alone")
  config: dict = _field("the resolved config (config.json), paths relative to the repository")
  results: dict = _field("{split: the final evaluation's results.json}")
  curves: dict = _field(
    '{"train"|"valid": {column: [value per logged step]}}: metrics.jsonl by columns'
  )
  updates: int = _field("the last step trained (metrics.jsonl)")
  train_s: float | None = _field("the training clock at the last logged step (elapsed_s)")
  wall_s: float = _field("wall seconds of every invocation, training and evaluation")
  load_1min_mean: float | None = _field("the mean 1-minute load average while it ran")
  machines: list = _field('the machines it ran on ("CPU model, N cores")')
  hypotheses: dict = _field("{split: path, relative to the run folder, of its gzipped outputs}")
  vocab: dict = _field("{file of WORKDIR/vocab: its content's path, relative to the study}")
  extra: dict = _field("{file: content} of other small JSON files the run kept")


@dataclasses.dataclass
class Point:
  """One point of a study's grid."""

  name: str = _field("the point's name (`score=dot`)")
  overrides: dict = _field("its dotted config overrides")
  decode_from: str | None = _field("the trained point whose runs it decodes (no training)")
  linked: str | None = _field("the runs folder it links to, relative to the results root")
  runs: list = _field("[{seed, record}]: each seed's record.json, relative to the study")


@dataclasses.dataclass
class StudyDefinition:
  """One study: STUDY/definition.json."""

  schema_version: int = _field("the schema's version (1)")
  kind: str = _field('"study"')
  name: str = _field("the study's folder name")
  script: str | None = _field("the module that ran it (`experiments.sweep`)")
  command: str | None = _field("the exact command, paths relative to the repository root")
  config_file: str | None = _field("the config file (with its argument) every run starts from")
  preset: str | None = _field("the study preset, where it used one")
  grid: dict | None = _field("{dotted field: values} of a grid sweep")
  points: list = _field("the points (`Point`), in the report's order")
  seeds: list = _field("the seeds every point ran")
  baseline: str | None = _field("the point the others are tested against")
  training: str | None = _field("together (seeds vmapped) or sequential")
  sets: list = _field("--set overrides of every run")
  budget: dict = _field("{num_steps, max_minutes}: the first run's training budget")
  report: str | None = _field("the report JSON in the folder")
  tables: list = _field("the Markdown tables in the folder")
  figures: list = _field("the figures in the folder (PNG, relative to it)")
  date: str | None = _field("when the report was written (ISO 8601)")
  machines: dict = _field("{machine: runs that trained on it}")
  load_1min_mean: float | None = _field("mean 1-minute load over the runs that sampled it")
  environment: dict = _field("versions, backend, devices, CPU of the reporting process")
  files: list = _field("every other file of the folder (relative), for studies without runs")


def schema_fields(cls: type) -> list[tuple[str, str, str]]:
  """(name, type, meaning) of every field of a schema class (for the schema page)."""
  return [(f.name, str(f.type), f.metadata["doc"]) for f in dataclasses.fields(cls)]


def _validate(record: Mapping[str, Any], cls: type, where: str) -> list[str]:
  problems = []
  kinds = {"int": int, "str": str, "dict": dict, "list": list, "float": (int, float)}
  for f in dataclasses.fields(cls):
    if f.name not in record:
      if f.default is dataclasses.MISSING:
        problems.append(f"{where}: missing {f.name}")
      continue
    value, optional = record[f.name], "None" in str(f.type)
    kind = kinds[str(f.type).split(" ")[0]]
    if value is None and optional:
      continue
    if not isinstance(value, kind) or isinstance(value, bool):
      problems.append(f"{where}: {f.name} is {type(value).__name__}, expected {f.type}")
  unknown = set(record) - {f.name for f in dataclasses.fields(cls)}
  problems += [f"{where}: unknown field {name}" for name in sorted(unknown)]
  if record.get("schema_version") != SCHEMA_VERSION:
    problems.append(f"{where}: schema_version {record.get('schema_version')!r}")
  return problems


def machine_paths(value: Any, where: str) -> list[str]:
  """Strings in `value` that name a path of this checkout (absolute) or of a home folder."""
  found = []
  if isinstance(value, dict):
    for key, item in value.items():
      found += machine_paths(item, f"{where}.{key}")
  elif isinstance(value, list):
    for i, item in enumerate(value):
      found += machine_paths(item, f"{where}[{i}]")
  elif isinstance(value, str) and (_roots().search(value) or "/home/" in value):
    found.append(f"{where}: {value[:120]}")
  return found


def validate_run(record: Mapping[str, Any], where: str = "record") -> list[str]:
  """What is wrong with a run record (empty: nothing)."""
  problems = _validate(record, RunRecord, where)
  if record.get("kind") != "run":
    problems.append(f"{where}: kind {record.get('kind')!r}")
  if not {"valid", "test"} <= set(record.get("results", {})):
    problems.append(f"{where}: results lack valid or test")
  return problems + machine_paths(record, where)


def validate_definition(definition: Mapping[str, Any], where: str = "definition") -> list[str]:
  """What is wrong with a study definition (empty: nothing)."""
  problems = _validate(definition, StudyDefinition, where)
  if definition.get("kind") != "study":
    problems.append(f"{where}: kind {definition.get('kind')!r}")
  for i, point in enumerate(definition.get("points", [])):
    problems += _validate({"schema_version": SCHEMA_VERSION, **point}, _PointCheck, f"{where}.{i}")
  return problems + machine_paths(definition, where)


@dataclasses.dataclass
class _PointCheck(Point):
  schema_version: int = _field("")


# ---------------------------------------------------------------------- paths
def checkouts(repo: Path) -> list[Path]:
  """The working trees of `repo`'s git repository: `repo` first, then its other worktrees (a
  study run from a worktree, so that edits here cannot change it halfway, writes that tree's
  paths into its runs' configs). Only `repo` where git cannot tell."""
  try:
    listed = subprocess.run(
      ["git", "-C", str(repo), "worktree", "list", "--porcelain"],
      capture_output=True,
      text=True,
      check=True,
    ).stdout
  except (OSError, subprocess.CalledProcessError):
    listed = ""
  trees = [
    Path(line[len("worktree ") :]) for line in listed.splitlines() if line.startswith("worktree ")
  ]
  return [repo] + [tree for tree in trees if tree != repo]


@functools.cache
def _roots() -> re.Pattern[str]:
  """The roots of this checkout and its worktrees, each as a whole path or a path's start (not
  /work/main in /work/main2), longest first."""
  names = sorted({str(root) for root in checkouts(REPO_ROOT)}, key=len, reverse=True)
  return re.compile("(" + "|".join(map(re.escape, names)) + r")(/|(?![\w.-]))")


# The folders beside a checkout that records may name: the shared corpora (../shared/data) and
# runs kept outside the repository (../keep/RUN). Any other path is left as it is: a checkout in
# /tmp must not turn every /tmp/... path into ../... .
BESIDE = ("shared", "keep")


@functools.cache
def _beside() -> re.Pattern[str] | None:
  """The start of a path in a folder of `BESIDE` next to the checkout (/work/keep/ for
  /work/main); None where the checkout's parent is the filesystem's root."""
  parent = REPO_ROOT.parent
  if parent == parent.parent:
    return None
  folders = "|".join(map(re.escape, BESIDE))
  return re.compile(r"(?<![\w.~/-])" + re.escape(str(parent)) + rf"/(?=(?:{folders})/)")


def relative(value: Any) -> Any:
  """`value` with every string's paths inside the repository, or inside another working tree of
  it, written relative to its root, and those in a folder beside it from there (../keep/RUN), as
  a reader types them at the root of a checkout."""
  if isinstance(value, dict):
    return {key: relative(item) for key, item in value.items()}
  if isinstance(value, list | tuple):
    return [relative(item) for item in value]
  if isinstance(value, Path):
    value = str(value)
  if isinstance(value, str):
    value = _roots().sub(lambda m: "" if m.group(2) else ".", value)
    beside = _beside()
    return beside.sub("../", value) if beside else value
  return value


def dumps(value: Mapping[str, Any], compact: bool = False) -> str:
  """A record's JSON: indented, or (`compact`) one line per top-level field."""
  if not compact:
    return json.dumps(value, indent=1, default=str) + "\n"
  fields = [f" {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in value.items()]
  return "{\n" + ",\n".join(fields) + "\n}\n"


def write_json(path: Path, value: Any, compact: bool = False) -> None:
  """`value` as JSON (`dumps`), written only when it changed (a converter run twice rewrites
  nothing)."""
  text = dumps(value, compact)
  if not path.exists() or path.read_text() != text:
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomic(path, text)


def _write_gz(path: Path, data: bytes) -> None:
  packed = gzip.compress(data, compresslevel=9, mtime=0)  # The same bytes every time.
  if not path.exists() or path.read_bytes() != packed:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(packed)


def read_gz_lines(path: Path) -> list[str]:
  return gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()


# ---------------------------------------------------------------------- run records
def read_record(workdir: Path) -> dict[str, Any] | None:
  """WORKDIR/record.json, or None."""
  path = Path(workdir) / RECORD
  return json.loads(path.read_text()) if path.is_file() else None


def _metrics(workdir: Path) -> list[dict[str, Any]]:
  path = workdir / "metrics.jsonl"
  if not path.exists():
    return []
  rows = []
  for line in path.read_text().splitlines():
    try:
      rows.append(json.loads(line))
    except json.JSONDecodeError:
      continue  # A line cut short by a kill.
  return rows


def columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[Any]]]:
  """metrics.jsonl rows as {split: {column: values}} (None where a row lacks the column)."""
  out: dict[str, dict[str, list[Any]]] = {}
  for split in dict.fromkeys(r["split"] for r in rows):
    chosen = [r for r in rows if r["split"] == split]
    keys = list(dict.fromkeys(k for r in chosen for k in r if k != "split"))
    out[split] = {k: [r.get(k) for r in chosen] for k in keys}
  return out


def metric_rows(record: Mapping[str, Any]) -> list[dict[str, Any]]:
  """The record's curves as metrics.jsonl rows again, in step order (train before valid)."""
  rows = []
  for split, cols in record["curves"].items():
    n = len(next(iter(cols.values()), []))
    for i in range(n):
      row = {"split": split, **{k: v[i] for k, v in cols.items() if v[i] is not None}}
      rows.append(row)
  order = {"train": 0, "valid": 1}
  return sorted(rows, key=lambda r: (r["step"], order.get(r["split"], 2)))


def _store_vocab(workdir: Path, study: Path) -> dict[str, str]:
  """WORKDIR/vocab's files gzipped into ROOT/vocab/HASH.gz, beside the study folders (one copy
  per content, shared by every study); {file: its path relative to the study}."""
  out = {}
  folder = workdir / "vocab"
  for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
    if not path.is_file():
      continue
    data = path.read_bytes()
    name = f"{hashlib.sha256(data).hexdigest()[:20]}.gz"
    _write_gz(study.parent / VOCAB / name, data)
    out[str(path.relative_to(folder))] = f"../{VOCAB}/{name}"
  return out


def convert_run(
  workdir: Path,
  study: Path,
  name: str | None = None,
  entry: Mapping[str, Any] | None = None,
  point: str | None = None,
) -> dict[str, Any] | None:
  """Writes WORKDIR/record.json and WORKDIR/hypotheses/SPLIT.txt.gz from the workdir's files
  (their vocabularies into STUDY/vocab); the record, or None for a run without a final
  evaluation. Idempotent: a workdir already converted (no eval/ left) keeps its record as it is,
  and a second conversion of the same files rewrites nothing. `entry`: the run's entry in its
  study's report (config file, overrides, command), where there is one."""
  workdir = Path(workdir)
  results_dir = workdir / "eval"
  found = {p.parent.name: p for p in sorted(results_dir.glob("*/results.json"))}
  if not {"valid", "test"} <= set(found):
    return read_record(workdir)
  entry = entry or {}
  old = read_record(workdir) or {}
  config_path = workdir / "config.json"
  config = json.loads(config_path.read_text()) if config_path.exists() else entry.get("config")
  config = config or old.get("config") or {}
  rows = _metrics(workdir)
  wall_path = workdir / "wall_time.json"
  wall = json.loads(wall_path.read_text()) if wall_path.exists() else {}
  hypotheses = {}
  for split in KEPT_SPLITS:
    text = results_dir / split / "hypotheses.txt"
    if text.exists():
      _write_gz(workdir / HYPOTHESES / f"{split}.txt.gz", text.read_bytes())
      hypotheses[split] = f"{HYPOTHESES}/{split}.txt.gz"
  extra = {}
  for path in sorted(workdir.glob("*.json")):
    if path.name not in {RECORD, "config.json", "wall_time.json", "run.json"}:
      extra[path.name] = json.loads(path.read_text())
  seed = config.get("seed")
  point = point or old.get("point")
  # A run converted alone (its point unfinished, so not in the study's report) is named as the
  # sweep names its runs.
  alone = workdir.name if point is None or seed is None else f"{point}-seed{seed}"
  record = {
    "schema_version": SCHEMA_VERSION,
    "kind": "run",
    "name": name or entry.get("name") or old.get("name") or alone,
    "point": point,
    "seed": seed,
    "config_file": entry.get("config_file") or old.get("config_file"),
    "overrides": entry.get("overrides") or old.get("overrides"),
    "command": entry.get("command") or old.get("command"),
    "config": config,
    "results": {split: json.loads(path.read_text()) for split, path in found.items()},
    "curves": columns(rows),
    "updates": max((r["step"] for r in rows), default=0),
    "train_s": rows[-1].get("elapsed_s") if rows else entry.get("train_s"),
    "wall_s": wall.get("seconds", entry.get("wall_s", 0.0)),
    "load_1min_mean": wall.get("load_1min_mean", entry.get("load_1min_mean")),
    "machines": wall.get("machines", entry.get("machines") or []),
    "hypotheses": hypotheses,
    "vocab": _store_vocab(workdir, study),
    "extra": extra,
  }
  record = relative(record)
  write_json(workdir / RECORD, record, compact=True)
  return record


def prune(workdir: Path) -> list[Path]:
  """Removes the files of a converted workdir that its record replaces (`REPLACED`, and any
  other JSON its record keeps under `extra`); the paths removed. Checkpoints stay."""
  record = read_record(workdir)
  if record is None:
    return []
  removed = []
  names = [*REPLACED, *record.get("extra", {})]
  for name in names:
    path = workdir / name
    if path.is_dir() and not path.is_symlink():
      shutil.rmtree(path)
    elif path.exists():
      path.unlink()
    else:
      continue
    removed.append(path)
  return removed


# ---------------------------------------------------------------------- studies
def run_folders(study: Path) -> Iterator[Path]:
  """Every run folder of a study: runs/POINT/seed_S (or runs/NAME where a study has one run a
  name), links to other studies' runs left out, and, for studies evaluating workdirs of their
  own outside runs/ (the decoding study's ensemble), those."""
  runs = study / "runs"
  if runs.is_dir():
    for point in sorted(runs.iterdir()):
      if point.is_symlink() or not point.is_dir():
        continue
      seeds = sorted(p for p in point.iterdir() if p.is_dir() and p.name.startswith("seed_"))
      yield from seeds or [point]
  for child in sorted(study.iterdir()):
    if child.name == "runs" or not child.is_dir():
      continue
    if (child / "eval").is_dir() or (child / RECORD).is_file():
      yield child


def report_path(study: Path) -> Path | None:
  """The study's report JSON (`REPORTS`), or None."""
  for name in REPORTS:
    if (study / name).is_file():
      return study / name
  return None


def _entry_workdir(entry: Mapping[str, Any]) -> Path | None:
  workdir = entry.get("workdir")
  if not workdir:
    return None
  path = Path(workdir)
  return path if path.is_absolute() else REPO_ROOT / path


def report_entries(report: Mapping[str, Any]) -> dict[Path, dict[str, Any]]:
  """{resolved workdir: run entry} of a report's runs."""
  out: dict[Path, dict[str, Any]] = {}
  runs = report.get("runs")
  if not isinstance(runs, dict):
    return out  # The decoding study lists the runs it decoded, by workdir.
  for name, entry in runs.items():
    workdir = _entry_workdir(entry)
    if workdir is not None:
      out[workdir.resolve()] = {"name": name, **entry}
  return out


def _point_of(study: Path, workdir: Path) -> str | None:
  runs = study / "runs"
  try:
    parts = workdir.resolve().relative_to(runs.resolve()).parts
  except ValueError:
    return None
  return parts[0] if parts else None


def _budget(config: Mapping[str, Any]) -> dict[str, Any]:
  train = config.get("train", {})
  return {"num_steps": train.get("num_steps"), "max_minutes": train.get("max_minutes")}


ENVIRONMENT = ("cpu_model", "cpu_count", "vector_isa", "versions", "backend", "devices")


def definition(study: Path, report: Mapping[str, Any] | None, script: str | None) -> dict:
  """The study definition of folder `study` from its report (None: a folder of files only)."""
  study = Path(study)
  report = report or {}
  words = (report.get("command") or "").split()
  if script is None and words[:2] == ["python", "-m"] and len(words) > 2:
    script = words[2]
  runs_dir = study / "runs"
  entries = report_entries(report)
  points = []
  rows = report.get("configurations") or report.get("table1") or []
  names = [r["name"] for r in rows if "name" in r]
  if runs_dir.is_dir():
    names += [p.name for p in sorted(runs_dir.iterdir()) if p.name not in names]
  first_config: dict[str, Any] = {}
  for name in names:
    row = next((r for r in rows if r.get("name") == name), {})
    folder = runs_dir / name
    linked = None
    if folder.is_symlink():
      linked = os.path.relpath(folder.resolve(), study.resolve().parent)
    seeds = sorted(p for p in folder.glob("seed_*") if p.is_dir()) if folder.is_dir() else []
    seeds = seeds or ([folder] if (folder / RECORD).is_file() else [])
    runs = []
    for workdir in seeds:
      record = read_record(workdir)
      if record is None:
        continue
      first_config = first_config or record["config"]
      path = workdir.relative_to(study) / RECORD
      runs.append({"seed": record["seed"], "record": str(path)})
    overrides = row.get("overrides")
    if overrides is None:
      entry = next((e for w, e in entries.items() if _point_of(study, w) == name), {})
      overrides = entry.get("overrides", {})
    decode_from = row.get("decode_from")
    if decode_from is None and row.get("decode_only"):
      mine = [e for w, e in entries.items() if _point_of(study, w) == name]
      entry = next((e for e in mine if e.get("decode_only_from")), {})
      decode_from = (entry.get("decode_only_from") or "").rsplit("-seed", 1)[0] or None
    points.append(
      {
        "name": name,
        "overrides": relative({k: v for k, v in overrides.items() if k != "seed"}),
        "decode_from": decode_from,
        "linked": linked,
        "runs": runs,
      }
    )
  if not first_config and isinstance(report.get("runs"), dict):
    entry = next(iter(report["runs"].values()), {})
    first_config = entry.get("config", {})
  figures = sorted(str(p.relative_to(study)) for p in study.rglob("*.png") if "runs" not in p.parts)
  tables = sorted(p.name for p in study.glob("*.md"))
  listed = {DEFINITION, *(f for f in figures), *tables}
  if report_path(study):
    listed.add(report_path(study).name)
  files = sorted(
    str(p.relative_to(study))
    for p in study.rglob("*")
    if p.is_file()
    and "runs" not in p.relative_to(study).parts
    and p.relative_to(study).parts[0] not in {VOCAB, "data", "jax_cache", "logs"}
    and str(p.relative_to(study)) not in listed
    and not (p.parent / RECORD).exists()
    and HYPOTHESES not in p.relative_to(study).parts
  )
  seeds = report.get("seeds") or sorted({r["seed"] for p in points for r in p["runs"]})
  machines: dict[str, int] = dict(report.get("runs_machines") or {})
  if not machines and any(p["runs"] for p in points):
    for p in points:
      for r in p["runs"]:
        for m in json.loads((study / r["record"]).read_text())["machines"] or ["not recorded"]:
          machines[m] = machines.get(m, 0) + 1
  out = {
    "schema_version": SCHEMA_VERSION,
    "kind": "study",
    "name": study.name,
    "script": script,
    "command": report.get("command"),
    "config_file": report.get("config_file"),
    "preset": report.get("preset"),
    "grid": report.get("grid"),
    "points": points,
    "seeds": [s for s in seeds if s is not None],
    "baseline": report.get("baseline"),
    "training": report.get("training"),
    "sets": report.get("sets") or [],
    "budget": _budget(first_config),
    "report": report_path(study).name if report_path(study) else None,
    "tables": tables,
    "figures": figures,
    "date": report.get("date"),
    "machines": machines,
    "load_1min_mean": report.get("runs_load_1min_mean"),
    "environment": {k: report[k] for k in ENVIRONMENT if k in report},
    "files": files,
  }
  return relative(out)


def write_definition(study: Path, script: str | None = None) -> dict[str, Any]:
  """Writes STUDY/definition.json (from the study's report, keeping the script named before)."""
  study = Path(study)
  path = report_path(study)
  report = json.loads(path.read_text()) if path else None
  old = json.loads((study / DEFINITION).read_text()) if (study / DEFINITION).exists() else {}
  out = definition(study, report, script or old.get("script"))
  write_json(study / DEFINITION, out)
  return out


def convert_study(study: Path, script: str | None = None, prune_runs: bool = False) -> dict:
  """Converts every finished run folder of `study` (`convert_run`), relativises its report's
  paths, and writes its definition; with `prune_runs`, removes what the records replace.
  {"converted": [...], "skipped": [...], "pruned": n}."""
  study = Path(study)
  path = report_path(study)
  report = json.loads(path.read_text()) if path else {}
  entries = report_entries(report)
  done, skipped, pruned = [], [], 0
  for workdir in run_folders(study):
    entry = entries.get(workdir.resolve(), {})
    record = convert_run(workdir, study, entry.get("name"), entry, _point_of(study, workdir))
    if record is None:
      skipped.append(str(workdir))
      continue
    done.append(str(workdir))
    if prune_runs:
      pruned += len(prune(workdir))
  if path:
    write_json_like(path, relative(report))
  write_definition(study, script)
  return {"converted": done, "skipped": skipped, "pruned": pruned}


def write_json_like(path: Path, value: Any) -> None:
  """`value` as the study scripts write JSON (indent 2), only when it changed."""
  text = json.dumps(value, indent=2, default=str) + "\n"
  if path.read_text() != text:
    files.write_atomic(path, text)


def studies(root: Path = RESULTS_ROOT) -> list[Path]:
  """The study folders under the results root (those with a definition)."""
  return sorted(p.parent for p in Path(root).glob(f"*/{DEFINITION}"))


def load_definition(study: Path) -> dict[str, Any]:
  return json.loads((Path(study) / DEFINITION).read_text())


def load_report(study: Path) -> dict[str, Any] | None:
  path = report_path(Path(study))
  return json.loads(path.read_text()) if path else None


def same_file(a: Path, b: Path) -> bool:
  return os.path.realpath(a) == os.path.realpath(b)

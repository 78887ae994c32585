"""Converts committed studies, or single run folders, into results as data (`lib/records.py`).

    python -m experiments.convert_results [--prune] PATH [PATH ...]
    python -m experiments.convert_results --all [--prune]

A PATH is a study folder under the results root (every finished run folder in it converted,
its report's and other files' paths made relative to the repository, its definition.json
written) or one run folder, `STUDY/runs/POINT/seed_S`, that finished after its study was
converted (its record written, then the study's definition again). `--prune` removes what each
record replaces (metrics.jsonl, eval/, vocab/, config.json, wall_time.json, per-checkpoint
validation outputs; checkpoints stay, they are not committed). `--all`: every folder under the
results root. Converting twice changes nothing; an unfinished run (no final evaluation) is left
as it is and named.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from experiments.lib import records

TEXT_SUFFIXES = (".md", ".txt")


def relativise_files(folder: Path) -> list[Path]:
  """Rewrites the JSON, Markdown and text files of `folder` (not its runs, caches or vocab)
  with paths inside the repository relative to its root; the files changed."""
  changed = []
  skip = {"runs", "data", "jax_cache", "logs", records.VOCAB, "checkpoints", "best"}
  for path in sorted(folder.rglob("*")):
    parts = path.relative_to(folder).parts
    if not path.is_file() or path.is_symlink() or skip & set(parts[:-1]):
      continue
    if path.name == records.DEFINITION or (path.parent / records.RECORD).exists():
      continue
    if path.suffix == ".json":
      text = path.read_text()
      try:
        value = json.loads(text)
      except json.JSONDecodeError:
        continue
      new = records.relative(value)
      if new != value:
        path.write_text(json.dumps(new, indent=2, default=str) + "\n")
        changed.append(path)
    elif path.suffix in TEXT_SUFFIXES:
      text = path.read_text(errors="replace")
      new = records.relative(text)
      if new != text:
        path.write_text(new)
        changed.append(path)
  return changed


def study_of(run: Path) -> Path:
  """The study folder of a run folder: STUDY/runs/POINT/seed_S, STUDY/runs/NAME or STUDY/NAME."""
  if run.parent.parent.name == "runs":
    return run.parents[2]
  if run.parent.name == "runs":
    return run.parents[1]
  return run.parent


def is_run_folder(path: Path) -> bool:
  """A run's workdir (evaluated, converted, or still training), not a study folder."""
  if (path / "runs").is_dir():
    return False
  return "runs" in (path.parent.name, path.parent.parent.name) or any(
    (path / name).exists() for name in ("eval", records.RECORD)
  )


def convert(path: Path, prune: bool) -> str:
  """Converts one study or run folder; a line saying what it did."""
  if is_run_folder(path):
    study = study_of(path)
    report = records.load_report(study) or {}
    entry = records.report_entries(report).get(path.resolve(), {})
    point = path.parent.name if path.parent.parent.name == "runs" else None
    record = records.convert_run(path, study, entry.get("name"), entry, point)
    if record is None:
      return f"{path}: unfinished (no final evaluation): left as it is"
    removed = records.prune(path) if prune else []
    records.write_definition(study)
    return f"{path}: record written ({len(removed)} files pruned); {study}/definition.json"
  result = records.convert_study(path, prune_runs=prune)
  relativise_files(path)
  records.write_definition(path)
  skipped = "".join(f"\n  unfinished, left as it is: {s}" for s in result["skipped"])
  return (
    f"{path}: {len(result['converted'])} runs converted, {result['pruned']} files pruned" + skipped
  )


def main(argv: Sequence[str] | None = None) -> list[str]:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("paths", nargs="*", type=Path, help="study folders or run folders")
  p.add_argument("--all", action="store_true", help="every study under the results root")
  p.add_argument("--prune", action="store_true", help="remove what the records replace")
  args = p.parse_args(argv)
  paths = list(args.paths)
  if args.all:
    paths += [
      d for d in sorted(records.RESULTS_ROOT.iterdir()) if d.is_dir() and d.name != records.VOCAB
    ]
  if not paths:
    p.error("name a study or run folder, or --all")
  lines = []
  for path in paths:
    if not path.is_dir():
      raise SystemExit(f"error: {path}: no such folder")
    lines.append(convert(path, args.prune))
    print(lines[-1], flush=True)
  return lines


if __name__ == "__main__":
  main()

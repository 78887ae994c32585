"""The paired approximate randomisation added to the committed studies' reports: beside every
paired bootstrap of test BLEU or chrF a study's report holds (and each MBR row's against beam 5),
AR's p of the same pair from the committed test outputs (`stats.paired_ar`).

    python -m experiments.significance_ar [STUDY ...] [--trials 10000]

STUDY: folders under experiments/results (default: every one whose report holds such tests).
Before it writes, each test's bootstrap is computed again from the outputs and references it
reads: its p and difference must be the committed ones, so the pair, the sentences and the
references are those the report tested. A study whose outputs are not committed, or whose
bootstrap comes out differently, is named and left as it is. Only the report's JSON is rewritten
(and the MBR study's mbr.md, its script's page of it); `python -m experiments.pages` then draws the
results pages from it. A test that has AR's p already is
left alone, so a rerun adds only what is missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_collections

from experiments.lib import records, reports, stats
from experiments.lib import runs as runs_lib
from experiments.lib.pages.mbr_study import markdown as mbr_page
from seq2seq import saved_format
from seq2seq.data import builders, input_pipeline

REPORTS = ("sweep.json", "study.json", "alignment_study.json")  # Sweep-like: significance.
MBR = "mbr.json"


@dataclasses.dataclass
class Pair:
  """One committed test: its entry in the report, and what it compared."""

  entry: dict[str, Any]  # The report's test, where AR's p is written.
  point: str
  against: str
  split: str = "test"  # Whose outputs (and references).
  metric: str = "bleu"
  long: bool = False  # Only the long test sentences of the "test" split.


def sweep_pairs(report: dict[str, Any]) -> list[Pair]:
  """The tests of a sweep-like report (`driver.record`): against the baseline, per metric, the
  long test sentences, per split, and within groups."""
  sig, base = report["significance"], report["baseline"]
  within = sig.get("within") or {}
  groups = [
    (sig.get("per_configuration"), {}, {}),
    (sig.get("per_configuration_chrf"), {}, {"metric": "chrf"}),
    (sig.get("per_configuration_long"), {}, {"long": True}),
    *[(tests, {}, {"split": split}) for split, tests in sig.get("per_split", {}).items()],
    (within.get("per_configuration"), within.get("references"), {}),
    (within.get("per_configuration_chrf"), within.get("references"), {"metric": "chrf"}),
  ]
  return [
    Pair(entry, point, (references or {}).get(point, base), **how)
    for tests, references, how in groups
    for point, entry in (tests or {}).items()
    if entry.get("p_value") is not None
  ]


def point_outputs(study: Path, definition: dict[str, Any]) -> dict[str, dict[int, Path]]:
  """{point: {seed: its run folder}} from the study's definition (linked runs included)."""
  return {
    p["name"]: {r["seed"]: (study / r["record"]).parent for r in p["runs"]}
    for p in definition["points"]
  }


def test_examples(run_folder: Path) -> list[builders.Example]:
  """The test split's pairs of a committed run's corpus, built (where it is built) in a
  temporary folder rather than the run's cache_dir."""
  config = saved_format.upgrade(json.loads((run_folder / records.RECORD).read_text())["config"])
  settings = input_pipeline.DataSettings.from_config(ml_collections.ConfigDict(config))
  with tempfile.TemporaryDirectory() as folder:
    return list(builders.prepare_corpus(settings, folder).read("test"))


def long_indices(report: dict[str, Any], examples: Sequence[builders.Example]) -> list[int]:
  words = report.get("long_split_words") or report.get("long_split")
  return input_pipeline.long_test_indices([ex.src for ex in examples], *words).tolist()


def sweep_study(study: Path, report: dict[str, Any]) -> list[tuple[Pair, list, list, list]]:
  """Each test of a sweep-like study with its outputs: (pair, baseline seeds' outputs, the
  point's, references)."""
  definition = records.load_definition(study)
  folders = point_outputs(study, definition)
  pairs = sweep_pairs(report)
  missing = sorted({n for p in pairs for n in (p.point, p.against) if not folders.get(n)})
  if missing:
    raise ValueError(f"no committed outputs of {', '.join(missing)}")
  examples = test_examples(next(iter(folders[report["baseline"]].values())))
  long = long_indices(report, examples) if any(p.long or p.split != "test" for p in pairs) else []
  out = []
  for pair in pairs:
    seeds = pair.entry.get("seeds") or sorted(folders[pair.point])
    refs = [ex.tgt for ex in examples]
    pick = (lambda lines: lines) if not pair.long else (lambda lines: [lines[i] for i in long])
    if pair.split != "test" or pair.long:
      refs = [refs[i] for i in long]
    outputs = [
      [pick(runs_lib.workdir_hypotheses(folders[name][s], pair.split)) for s in seeds]
      for name in (pair.against, pair.point)
    ]
    out.append((pair, *outputs, refs))
  return out


def mbr_study(study: Path, report: dict[str, Any]) -> list[tuple[Pair, list, list, list]]:
  """Each MBR row's test against beam 5 (the first row) with its outputs: a decoding row's from
  its folder, a rerank row's from the texts it chose (`mbr_study.rerank_rows`)."""
  rows = report["rows"]

  def outputs(name: str) -> list[str]:
    if "workdir" in rows[name]:
      return runs_lib.workdir_hypotheses(study / rows[name]["workdir"], "test")
    tag = "reverse" if name.endswith("+ reverse model") else "plain"
    return records.read_gz_lines(study / "rerank" / f"test.{tag}.txt.gz")

  refs = [ex.tgt for ex in test_examples(records.REPO_ROOT / report["run"])]
  beam5 = next(iter(rows))
  return [
    (Pair(row["test_vs_beam5"], name, beam5), [outputs(beam5)], [outputs(name)], refs)
    for name, row in rows.items()
    if name != beam5 and row.get("test_vs_beam5", {}).get("p_value") is not None
  ]


def add_ar(study: Path, trials: int) -> str:
  """AR's p written beside each of the study's bootstrap tests that lacks it; what it did."""
  name = next((n for n in (*REPORTS, MBR) if (study / n).exists()), None)
  if name is None:
    return "no report with paired tests"
  report = json.loads((study / name).read_text())
  if name != MBR and not (report.get("significance") or {}):
    return "no significance tests"
  tests = (mbr_study if name == MBR else sweep_study)(study, report)
  started, added = time.perf_counter(), 0
  n_samples = (report.get("significance") or {}).get("n_samples", 1000)
  for pair, base, system, refs in tests:
    if "ar_p_value" in pair.entry:
      continue
    again = stats.paired_bootstrap(base, system, refs, n_samples, pair.metric)
    for key in ("p_value", "difference"):
      if key in pair.entry and abs(again.get(key, 0.0) - pair.entry[key]) > 1e-9:
        raise ValueError(
          f"{pair.point} against {pair.against} ({pair.metric}, {pair.split}"
          f"{', long' if pair.long else ''}): the bootstrap's {key} comes out "
          f"{again.get(key)}, committed {pair.entry[key]}"
        )
    pair.entry.update(stats.paired_ar(base, system, refs, trials, pair.metric))
    added += 1
  if name != MBR:
    report["significance"] = _with_ar_test(report["significance"], trials)
  if added:
    reports.write_json(study / name, report)
    if name == MBR:  # The script's own page beside its record, as it writes it.
      (study / "mbr.md").write_text(mbr_page(report))
  return f"{added} of {len(tests)} tests given AR's p ({time.perf_counter() - started:.1f} s)"


def _with_ar_test(sig: dict[str, Any], trials: int) -> dict[str, Any]:
  """The significance with AR named after the bootstrap's settings, as `driver.record` writes."""
  head = {k: sig[k] for k in ("test", "n_samples") if k in sig}
  return {**head, "ar_test": stats.AR, "ar_trials": sig.get("ar_trials", trials), **sig}


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("studies", nargs="*", help="folders under experiments/results (default all)")
  parser.add_argument("--trials", type=int, default=stats.AR_TRIALS, help="AR trials per test")
  args = parser.parse_args(argv)
  os.chdir(records.REPO_ROOT)  # Committed configs name the data relative to the repository.
  studies = [records.RESULTS_ROOT / s for s in args.studies] or records.studies()
  failed = []
  for study in studies:
    try:
      print(f"{study.name}: {add_ar(study, args.trials)}", flush=True)
    except (ValueError, FileNotFoundError) as e:
      failed.append(study.name)
      print(f"{study.name}: left as it is: {e}", flush=True)
  return 1 if failed and args.studies else 0


if __name__ == "__main__":
  sys.exit(main())

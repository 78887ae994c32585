"""The committed results as data (`experiments/lib/records.py`): every study folder against the
schema, the pages against the data they are generated from, and a run's conversion (the
committed form reads back as the workdir it came from; a sweep finds it finished)."""

from __future__ import annotations

import collections
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT

from experiments import convert_results, pages
from experiments.lib import records, sweeps
from experiments.lib import runs as runs_lib
from experiments.lib.pages import conclusions, sections
from experiments.lib.sweeps import Point, Sweep

RESULTS = ROOT / "experiments" / "results"
STUDIES = records.studies(RESULTS)
# Files a run folder keeps in its committed form (the rest is ignored by git, then pruned).
KEPT = {records.RECORD, records.HYPOTHESES}


def _committed_files(study: Path) -> list[Path]:
  """The study's files in their committed form: outside run folders, every file but caches;
  inside them, the record and the hypotheses."""
  out = []
  for path in sorted(study.rglob("*")):
    parts = path.relative_to(study).parts
    if not path.is_file() or {"data", "jax_cache", "checkpoints", "best"} & set(parts):
      continue
    if parts[0] == "runs" and len(parts) > 3 and parts[3] not in KEPT:
      continue  # A run's own files beside its record (a run still training).
    out.append(path)
  return out


def test_there_are_studies_and_every_folder_has_a_definition():
  folders = [d for d in RESULTS.iterdir() if d.is_dir() and d.name != records.VOCAB]
  assert len(STUDIES) >= 20
  assert sorted(folders) == STUDIES


def test_no_result_lies_loose_beside_the_study_folders():
  loose = [p.name for p in RESULTS.iterdir() if not p.is_dir() and p.name != ".gitignore"]
  assert loose == []


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.name)
def test_every_study_folder_validates_against_the_schema(study: Path):
  definition = records.load_definition(study)
  assert records.validate_definition(definition, study.name) == []
  assert definition["name"] == study.name
  for name in [definition["report"], *definition["tables"], *definition["figures"]]:
    assert name is None or (study / name).is_file(), name
  for point in definition["points"]:
    for run in point["runs"]:
      path = study / run["record"]
      record = json.loads(path.read_text())
      assert records.validate_run(record, str(path)) == []
      assert record["seed"] == run["seed"]
      for split, hyp in record["hypotheses"].items():  # One line per test sentence.
        lines = records.read_gz_lines(path.parent / hyp)
        assert len(lines) == record["results"][split]["num_sentences"]
      for stored in record["vocab"].values():
        assert (study / stored).is_file()


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.name)
def test_no_committed_file_names_a_machine_path_or_is_a_raw_run_file(study: Path):
  for record in study.glob(f"**/{records.RECORD}"):  # Converted runs keep nothing else.
    assert {p.name for p in record.parent.iterdir()} <= KEPT, record.parent
  for path in _committed_files(study):
    if path.suffix in {".json", ".md", ".txt"}:
      assert str(ROOT) not in path.read_text(errors="replace"), path


def test_no_file_of_the_results_is_stored_twice():
  digests = collections.defaultdict(list)
  for study in STUDIES:
    for path in _committed_files(study):
      digests[hashlib.sha256(path.read_bytes()).hexdigest()].append(path)
  for path in (RESULTS / records.VOCAB).glob("*"):
    digests[hashlib.sha256(path.read_bytes()).hexdigest()].append(path)
  twice = [paths for paths in digests.values() if len(paths) > 1]
  assert twice == []


def test_a_results_page_regenerated_from_the_data_is_the_committed_page():
  page = pages.OUT / "multi30k_scores.md"
  assert pages.study_page(RESULTS / "multi30k_scores") == page.read_text()
  assert pages.schema_page() == (pages.OUT / "schema.md").read_text()


# Studies without runs, each drawn by its own section of the pages from its script's JSON.
WITHOUT_RUNS = [
  "across_studies",
  "demo",
  "explorer_timing",
  "multi30k_attention_offsets",
  "multi30k_best",
  "multi30k_realtext",
  "seed_timing",
]


@pytest.mark.parametrize("name", WITHOUT_RUNS)
def test_a_study_without_runs_has_its_page_generated_from_its_files(name: str):
  study = RESULTS / name
  definition = records.load_definition(study)
  assert definition["script"] and not definition["points"]
  page = pages.study_page(study)
  assert page == (pages.OUT / f"{name}.md").read_text()
  for listed in [definition["report"], *definition["files"]]:
    assert listed is None or f"`experiments/results/{name}/{listed}`" in page
  assert "## Conclusion" in page or name in {"across_studies", "demo"}


def test_every_results_page_has_one_title_and_its_images_and_links_resolve():
  for page in sorted(pages.OUT.glob("*.md")):
    body = "".join(re.split(r"```.*?```", page.read_text(), flags=re.S))  # Code left out.
    assert sum(line.startswith("# ") for line in body.splitlines()) == 1, page
    for target in re.findall(r"\]\(([^)#:]+)\)", body):
      assert (page.parent / target).exists(), (page, target)


def test_no_results_page_has_an_empty_section_or_a_file_name_for_a_heading():
  for page in sorted(pages.OUT.glob("*.md")):
    sections = re.split(r"\n(?=## )", page.read_text())[1:]
    for section in sections:
      heading, _, rest = section.partition("\n")
      assert rest.strip(), (page.name, heading)
      if page.name != "schema.md":  # The schema's sections are the files it describes.
        assert not re.fullmatch(r"## \S+\.(md|json)", heading), (page.name, heading)


def test_no_results_page_says_a_section_twice():
  """A section whose text another section of the page holds (a script's tables drawn once from
  its JSON and again from the page it wrote) is there twice."""
  twice = {}
  for page in sorted(pages.OUT.glob("*.md")):
    sections = [s.partition("\n") for s in re.split(r"\n(?=## )", page.read_text())[1:]]
    for heading, _, body in sections:
      held = [h for h, _, other in sections if h != heading and body.strip() in other]
      if held:
        twice[f"{page.name}: {heading}"] = held
  assert twice == {}


# An absolute path (not a system file such as /proc/cpuinfo): a folder of the machine that made
# the page, which a reader's checkout has not.
MACHINE_PATH = re.compile(r"(?<![\w.~:/)\]-])/(?!(?:proc|sys|dev|usr|etc)/)[\w.-]+/[\w./=-]*")
# The project's issues, which a reader of the pages cannot look up.
ISSUE = re.compile(r"\bissues?\b|(?<![\w&])#\d+\b", re.IGNORECASE)


def test_no_results_page_names_a_machines_folder_or_an_issue():
  found = {}
  for page in sorted(pages.OUT.glob("*.md")):
    text = page.read_text()
    said = sorted(set(MACHINE_PATH.findall(text)) | {m.group() for m in ISSUE.finditer(text)})
    if said:
      found[page.name] = said
  assert found == {}


def test_attentions_zero_share_is_a_column_where_a_point_has_one():
  """A sparse normaliser's zero share is shown beside a linked baseline evaluated before it was
  measured ("-"); a study whose attention has no exact zeros gets no column of zeros."""

  def row(name, zeros):
    return {
      "name": name,
      "seeds": [0],
      "bleu_mean": 50.0,
      "bleu_std": 0.0,
      "attention_zero_share_mean": zeros,
      "attention_zero_share_std": 0.0,
    }

  report = {"baseline": "softmax", "configurations": [row("softmax", None), row("sparse", 0.95)]}
  lines = sections.results_table(report)
  assert lines[2].startswith("| point | seeds | test BLEU | zero weights |")
  assert "| softmax | 1 | 50.00 ± 0.00 | - | - |" in lines
  assert "| sparse | 1 | 50.00 ± 0.00 | 0.950 ± 0.000 | - |" in lines
  report["configurations"] = [row("softmax", 0.0), row("dot", 0.0)]
  assert "zero weights" not in sections.results_table(report)[2]


def _tested(difference, p):
  """A bootstrap result as a report stores it: the difference, an interval of +-1 and p."""
  return {
    "difference": difference,
    "difference_ci95": [difference - 1, difference + 1],
    "p_value": p,
  }


def test_the_significance_section_gives_chrf_and_twin_peaks_where_the_report_tested_them():
  report = {
    "baseline": "plain",
    "configurations": [{"name": "plain"}, {"name": "guided"}],
    "significance": {
      "n_samples": 1000,
      "per_configuration": {"guided": _tested(0.5, 0.2), "plain": {"p_value": None}},
      "per_configuration_chrf": {"guided": _tested(0.25, 0.3)},
      "per_configuration_twin_peaks": {"guided": _tested(0.125, 0.001)},
    },
  }
  recs = {
    name: [{"seed": 0, "results": {"test": {"bleu": bleu}}}]
    for name, bleu in (("plain", 50.0), ("guided", 50.5))
  }
  lines = sections.significance(report, recs)
  assert (
    "| point | difference vs plain | 95% interval | p | by seed | chrF difference (p) | "
    "twin peaks difference (p) |" in lines
  )
  assert (
    "| guided | +0.50 | -0.50 to +1.50 | 0.200 | +0.50 | +0.25 (0.300) | +0.125 (0.001) |" in lines
  )
  del report["significance"]["per_configuration_twin_peaks"]  # An older report: BLEU, chrF.
  assert (
    "| guided | +0.50 | -0.50 to +1.50 | 0.200 | +0.50 | +0.25 (0.300) |"
    in sections.significance(report, recs)
  )


def test_the_significance_section_gives_ar_p_beside_the_bootstraps_where_the_report_has_it():
  """AR's p in its own column to its trials' resolution, and whether the two tests put every
  point on the same side of 0.05; a report from before AR keeps its columns."""
  ar = lambda p: {"ar_p_value": p, "ar_trials": 10_000}
  report = {
    "baseline": "plain",
    "configurations": [{"name": n} for n in ("plain", "guided", "dot")],
    "significance": {
      "n_samples": 1000,
      "per_configuration": {
        "plain": {"p_value": None},
        "guided": {**_tested(0.5, 0.2), **ar(0.1234)},
        "dot": {**_tested(-2.0, 0.001), **ar(1 / 10_001)},
      },
    },
  }
  recs = {
    name: [{"seed": 0, "results": {"test": {"bleu": bleu}}}]
    for name, bleu in (("plain", 50.0), ("guided", 50.5), ("dot", 48.0))
  }
  lines = sections.significance(report, recs)
  assert "| point | difference vs plain | 95% interval | p | AR p | by seed |" in lines
  assert "| guided | +0.50 | -0.50 to +1.50 | 0.200 | 0.1234 | +0.50 |" in lines
  assert "| dot | -2.00 | -3.00 to -1.00 | 0.001 | 0.0001 | -2.00 |" in lines
  caption = lines[-2]
  assert "(10,000 trials" in caption and caption.endswith("the same side of p = 0.05.")
  report["significance"]["per_configuration"]["guided"]["ar_p_value"] = 0.04
  caption = sections.significance(report, recs)[-2]
  assert caption.endswith("for `guided` (bootstrap 0.200, AR 0.0400).")
  for test in report["significance"]["per_configuration"].values():
    test.pop("ar_p_value", None)
  lines = sections.significance(report, recs)
  assert "| point | difference vs plain | 95% interval | p | by seed |" in lines
  assert not any("AR p" in line for line in lines)


def test_a_study_tested_within_groups_shows_each_point_against_its_groups_baseline():
  names = ["paper+softmax", "paper+sparse", "luong+softmax", "luong+sparse"]
  report = {
    "baseline": "paper+softmax",
    "configurations": [{"name": n, "bleu_mean": 50.0} for n in names],
    "significance": {
      "n_samples": 1000,
      "per_configuration": {
        "paper+softmax": {"p_value": None},
        "paper+sparse": _tested(1.0, 0.01),
        "luong+softmax": _tested(-4.0, 0.001),
        "luong+sparse": _tested(-2.0, 0.001),
      },
      "within": {
        "key": "model.decoder",
        "references": {"paper+sparse": "paper+softmax", "luong+sparse": "luong+softmax"},
        "per_configuration": {
          "paper+sparse": _tested(1.0, 0.01),
          "luong+sparse": _tested(2.0, 0.002),
        },
        "per_configuration_chrf": {"luong+sparse": _tested(1.5, 0.004)},
      },
    },
  }
  bleu = {"paper+softmax": 50.0, "paper+sparse": 51.0, "luong+softmax": 46.0, "luong+sparse": 48.0}
  recs = {n: [{"seed": 0, "results": {"test": {"bleu": b}}}] for n, b in bleu.items()}
  lines = sections.significance(report, recs)
  assert "| luong+sparse | -2.00 | -3.00 to -1.00 | 0.001 | -2.00 |" in lines
  assert (
    "| point | against | difference | 95% interval | p | by seed | chrF difference (p) |" in lines
  )
  assert (
    "| luong+sparse | luong+softmax | +2.00 | +1.00 to +3.00 | 0.002 | +2.00 | +1.50 (0.004) |"
    in lines
  )
  said = conclusions.sweep_conclusion(report, recs)
  assert (
    "Within its `model.decoder`: `luong+sparse` against `luong+softmax`: +2.00 test BLEU (95% "
    "interval +1.00 to +3.00), p 0.002: ahead." in said
  )


def test_the_headline_table_reads_every_cell_from_the_data():
  table = pages.headline_table()
  paper = json.loads((ROOT / pages.HEADLINE_INPUTS["paper"]).read_text())
  search = next(r for r in paper["rows"] if r["model"] == "RNNsearch-50")
  assert f"{search['bleu_all']:.2f} ± {search['bleu_all_std']:.2f}" in table
  best = json.loads((ROOT / pages.HEADLINE_INPUTS["multi30k"]).read_text())
  assert f"| {best['test_bleu']:.2f} |" in table
  speeds = pages.headline_speeds(pages.HEADLINE_INPUTS["speed"])
  for path in speeds:
    bench = json.loads((ROOT / path).read_text())
    assert f"{bench['peer']['ratios']['train_tokens_per_s']['median']:.2f}x" in table
    assert f"both {bench['dtype']}" in table and f"`{path}`" in table
  decoders = json.loads((ROOT / pages.HEADLINE_INPUTS["decoders"]).read_text())
  for row in decoders["configurations"]:
    if row["overrides"]["model.normaliser"] == "softmax":
      assert f"{row['aer_mean']:.3f} ± {row['aer_std']:.3f}" in table
      assert f"{row['bleu_mean']:.2f}" in table
  assert len(table.splitlines()) == 2 + 3 + len(speeds)


def test_the_headline_gives_every_cpus_newest_like_for_like_speed_not_a_chosen_one():
  """One row per CPU the benchmark folder was measured on, its newest float32 comparison with
  the peer at the benchmark config: a slower machine's figure is not left out."""
  folder = ROOT / pages.HEADLINE_INPUTS["speed"]
  newest: dict[str, tuple[str, str]] = {}
  for path in folder.glob("*.json"):
    bench = json.loads(path.read_text())
    peer = bench.get("peer") or {}
    if not (peer.get("like_for_like") and peer.get("ratios") and bench["dtype"] == "float32"):
      continue
    cpu = bench["device"].get("cpu_model")
    if cpu and bench.get("preset") == "bench" and bench["date"] > newest.get(cpu, ("",))[0]:
      newest[cpu] = (bench["date"], str(path.relative_to(ROOT)))
  assert len(newest) >= 2  # This folder holds an AMD and an Intel machine's.
  assert sorted(pages.headline_speeds(pages.HEADLINE_INPUTS["speed"])) == sorted(
    p for _, p in newest.values()
  )


def test_the_headline_refuses_a_speed_measured_against_a_peer_in_another_dtype():
  """Our bfloat16 against the peer's float32 flatters us: such a benchmark is no headline."""
  inputs = dict(pages.HEADLINE_INPUTS)
  inputs["speed"] = "experiments/results/benchmark/2026-11-25_bf16_like_for_like.json"
  with pytest.raises(ValueError, match="dtypes differ"):
    pages.headline_table(inputs)


def test_the_readmes_headline_block_is_the_generated_table():
  text = (ROOT / "README.md").read_text()
  assert pages.readme_with_headline(text) == text, "run python -m experiments.pages"


# ---------------------------------------------------------------------- conversion
def _fake_run(tmp_path: Path) -> tuple[Sweep, runs_lib.Run]:
  """A finished run of a one-point sweep on configs/tiny.py, its workdir written by hand as
  training and the final evaluation write it (nothing trained)."""
  sweep = Sweep(
    "configs/tiny.py",
    [Point("score=dot", {"model.score": "dot"})],
    [0],
    tmp_path / "study",
    {"data.cache_dir": str(tmp_path / "study" / "data")},
    {"train.num_steps": 4},
  )
  [run] = sweep.runs("score=dot")
  work = run.workdir
  (work / "eval" / "test").mkdir(parents=True)
  (work / "eval" / "valid").mkdir(parents=True)
  (work / "config.json").write_text(run.config().to_json_best_effort())
  for split, bleu in (("valid", 20.0), ("test", 21.5)):
    results = {"step": 4, "bleu": bleu, "chrf": 40.0, "num_sentences": 3}
    (work / "eval" / split / "results.json").write_text(json.dumps(results))
    (work / "eval" / split / "hypotheses.txt").write_text("a b\nc\n\n")
  (work / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows()))
  wall = {"seconds": 3.0, "load_1min_mean": 1.5, "load_samples": 1, "machines": ["cpu, 2 cores"]}
  (work / "wall_time.json").write_text(json.dumps(wall))
  for side in ("src", "tgt"):
    (work / "vocab" / side).mkdir(parents=True)
    (work / "vocab" / side / "vocab.txt").write_text("<pad>\n<unk>\na\nb\nc\n")
  (work / "valid_hypotheses").mkdir()
  (work / "valid_hypotheses" / "4.txt.gz").write_bytes(b"")
  return sweep, run


def test_a_converted_run_reads_back_as_its_workdir_and_a_sweep_finds_it_finished(tmp_path):
  sweep, run = _fake_run(tmp_path)
  work = run.workdir

  def read() -> tuple:
    return (
      runs_lib.read_results(work),
      runs_lib.hypotheses(run),
      runs_lib.valid_curve(work, "bleu"),
      runs_lib.train_tokens_per_s(work),
      runs_lib.train_time(work),
      runs_lib.wall_time(work),
      runs_lib.load_average(work),
      runs_lib.machines(work),
    )

  before = read()
  assert runs_lib.is_finished(run) and sweeps.saved_config_differences(run) == []

  convert_results.main([str(sweep.out)])
  record_bytes = (work / records.RECORD).read_bytes()
  convert_results.main([str(sweep.out), "--prune"])  # Idempotent: the record is unchanged.
  assert (work / records.RECORD).read_bytes() == record_bytes
  assert sorted(p.name for p in work.iterdir()) == [records.HYPOTHESES, records.RECORD]
  assert sorted((tmp_path / records.VOCAB).glob("*.gz"))  # One file for both sides' vocab.
  assert len(list((tmp_path / records.VOCAB).glob("*.gz"))) == 1

  assert read() == before  # The committed form gives what the workdir gave.
  assert runs_lib.is_finished(run) and sweeps.unfinished(sweep) == []
  assert sweeps.saved_config_differences(run) == []
  record = records.read_record(work)
  assert records.validate_run(record) == [] and record["updates"] == 4
  assert records.metric_rows(record) == _rows()
  definition = records.load_definition(sweep.out)
  assert records.validate_definition(definition) == []
  assert definition["points"][0]["runs"] == [
    {"seed": 0, "record": "runs/score=dot/seed_0/record.json"}
  ]

  # Resuming with other model settings is refused from the record as from config.json.
  other = Sweep(
    sweep.config_file,
    [Point("score=dot", {"model.score": "general"})],
    [0],
    sweep.out,
    sweep.shared,
    sweep.sets,
  )
  with pytest.raises(ValueError, match="model.score"):
    other.check()
  # A run needing more updates than the record holds is unfinished.
  longer = runs_lib.Run(run.name, run.config_file, {**run.overrides, "train.num_steps": 8}, work)
  assert not runs_lib.is_finished(longer)


def _rows() -> list[dict]:
  return [
    {"step": 2, "split": "train", "loss": 3.0, "tokens_per_s": 100.0, "elapsed_s": 1.0},
    {"step": 4, "split": "train", "loss": 2.0, "tokens_per_s": 120.0, "elapsed_s": 2.0},
    {"step": 4, "split": "valid", "loss": 2.5, "bleu": 20.0, "elapsed_s": 2.5},
  ]


def test_an_unfinished_run_is_left_as_it_is(tmp_path):
  work = tmp_path / "study" / "runs" / "p" / "seed_0"
  work.mkdir(parents=True)
  (work / "metrics.jsonl").write_text('{"step": 2, "split": "train", "loss": 1.0}\n')
  [line] = convert_results.main([str(work), "--prune"])
  assert "unfinished" in line and sorted(p.name for p in work.iterdir()) == ["metrics.jsonl"]


def test_a_run_trained_in_another_worktree_is_recorded_with_relative_paths(tmp_path, monkeypatch):
  """A study run from a git worktree (so that edits to the main tree cannot change it halfway)
  writes that tree's paths into its runs' configs; converted in the main tree, they are written
  relative as this tree's are, and a sibling folder whose name starts with the root's is not
  taken for one inside it."""
  repo, tree = tmp_path / "repo", tmp_path / "repo_wt"
  git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
  repo.mkdir()
  for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "x"]):
    subprocess.run(git + args, check=True)
  subprocess.run(git + ["worktree", "add", "-q", "--detach", str(tree)], check=True)
  assert records.checkouts(repo) == [repo, tree]
  monkeypatch.setattr(records, "REPO_ROOT", repo)
  records._roots.cache_clear()
  records._beside.cache_clear()
  try:
    sweep, run = _fake_run(tmp_path)
    config = json.loads((run.workdir / "config.json").read_text())
    config["data"]["cache_dir"] = f"{tree}/experiments/results/study/data"
    config["workdir_note"] = f"{repo}2/elsewhere"
    (run.workdir / "config.json").write_text(json.dumps(config))
    record = records.convert_run(run.workdir, sweep.out)
  finally:
    records._roots.cache_clear()
    records._beside.cache_clear()
  assert record["config"]["data"]["cache_dir"] == "experiments/results/study/data"
  assert record["config"]["workdir_note"] == f"{repo}2/elsewhere"


def test_a_path_beside_the_checkout_is_recorded_relative_to_it(tmp_path, monkeypatch):
  """A run or data kept in the folders beside the checkout that records name (../keep/RUN,
  ../shared/data) is written as the path from the checkout's root, as a reader types it there;
  any other path is kept as it is, a scratch folder beside the checkout too (a clone in /tmp
  wrote pytest's /tmp/pytest-of-root/... folders as ../pytest-of-root/...)."""
  work = tmp_path / "work"
  monkeypatch.setattr(records, "REPO_ROOT", work / "main")
  records._roots.cache_clear()
  records._beside.cache_clear()
  try:
    got = records.relative(
      {
        "command": f"x --run {work}/keep/run --input={work}/main/in.txt --other {work}/main2/y",
        "run": work / "keep" / "run",
        "data": f"{work}/shared/data/multi30k",
        "scratch": f"{work}/pytest-of-root/pytest-35/run0",
        "elsewhere": [f"{tmp_path}/scratch/z", "/usr/bin/python3", f"/data{work}/keep"],
      }
    )
  finally:
    records._roots.cache_clear()
    records._beside.cache_clear()
  assert got == {
    "command": f"x --run ../keep/run --input=in.txt --other {work}/main2/y",
    "run": "../keep/run",
    "data": "../shared/data/multi30k",
    "scratch": f"{work}/pytest-of-root/pytest-35/run0",
    "elsewhere": [f"{tmp_path}/scratch/z", "/usr/bin/python3", f"/data{work}/keep"],
  }


def test_every_study_folder_has_its_page_entry_in_a_study_module():
  """A committed study is titled and described by the module of its script
  (`experiments/lib/pages/catalogue.py` gathers them), not by its folder's name."""
  from experiments.lib.pages import catalogue

  missing = [s.name for s in records.studies(RESULTS) if s.name not in catalogue.STUDIES]
  assert not missing, missing


@pytest.mark.skipif(
  not (ROOT.parent / "shared" / "data" / "multi30k").is_dir(), reason="../shared/data is absent"
)
def test_ar_is_added_to_a_committed_report_only_where_its_bootstrap_comes_out_the_same(tmp_path):
  """experiments.significance_ar on a copy of a committed study: AR's p beside the bootstrap's,
  added once; a report whose bootstrap the outputs do not give again is refused, named."""
  import shutil

  from experiments import significance_ar

  study = tmp_path / "multi30k_copy_eos"
  shutil.copytree(RESULTS / study.name, study)
  report = json.loads((study / "sweep.json").read_text())
  test = report["significance"]["per_configuration"]["copy=true+copy_eos=null"]
  for key in ("ar_p_value", "ar_trials"):  # The report as it was before AR.
    test.pop(key)
    report["significance"].pop(key.replace("p_value", "test"))
  (study / "sweep.json").write_text(json.dumps(report))
  assert significance_ar.add_ar(study, trials=50).startswith("1 of 1 tests")
  again = json.loads((study / "sweep.json").read_text())
  added = again["significance"]["per_configuration"]["copy=true+copy_eos=null"]
  assert added == {**test, "ar_p_value": 1 / 51, "ar_trials": 50}
  assert again["significance"]["ar_trials"] == 50
  assert significance_ar.add_ar(study, trials=50).startswith("0 of 1 tests")
  test["p_value"] = 0.5  # Not what the committed outputs give.
  (study / "sweep.json").write_text(json.dumps(report))
  with pytest.raises(ValueError, match="copy=true\\+copy_eos=null against copy=true .* p_value"):
    significance_ar.add_ar(study, trials=50)

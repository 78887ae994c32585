"""Smoke tests of the experiment scripts (`python -m experiments.X`, run through their
`main(argv)` in the test's process by `helpers.run_module`; a sweep's jobs file is run by xargs
and bash, as a user would) and of what they share (experiments/lib: sweeps, their jobs file,
statistics, tables).

The scripts run on configs/tiny.py for a few steps and use the session's persistent compilation
cache, so programs that main.py runs in other tests compiled are loaded, not rebuilt. XLA's
backend optimisations are turned down (`helpers.FAST_COMPILE`): these tests check the files and
keys written, not speed.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, run_module, subprocess_env

from experiments import attention_offsets, attention_sharpness, plateau, sweep_scores, tabulate
from experiments import sweep as grid_sweep
from experiments.lib import cli, launch, plots, records, stats, sweeps
from experiments.lib import runs as runs_lib
from experiments.lib.runs import Run
from experiments.lib.sweeps import Point, Sweep
from seq2seq import report, summary
from seq2seq import runtime as rt

TEST_SENTENCES = 64  # configs/tiny.py: data.synthetic.test_pairs.


@pytest.fixture(scope="module")
def compilation_cache() -> Path:
  """The session's cache (conftest.py), shared with main.py runs and the other test workers."""
  return Path(os.environ["JAX_COMPILATION_CACHE_DIR"])


def _cache(path: Path) -> list[str]:
  return ["--compilation-cache", str(path)]


def _is_score(value: object) -> bool:
  return isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 100.0


@pytest.mark.slow
def test_reproduce_paper_smoke(tmp_path: Path, compilation_cache: Path) -> None:
  out = tmp_path / "paper"
  args = ["--out", str(out), "--preset", "smoke", "--with-star", "--set", "train.log_every=2"]
  proc = run_module("experiments.reproduce_paper", *args, *_cache(compilation_cache))
  assert "RNNsearch-50*" in proc.stdout

  names = ["RNNencdec-30", "RNNsearch-30", "RNNencdec-50", "RNNsearch-50", "RNNsearch-50*"]
  table = json.loads((out / "table1.json").read_text())
  assert [r["model"] for r in table["rows"]] == names
  for row in table["rows"]:
    assert _is_score(row["bleu_all"]) and _is_score(row["bleu_no_unk"])
    assert row["num_sentences"] == TEST_SENTENCES and row["beam_size"] == 3
    if row["model"].startswith("RNNsearch"):
      assert 0.0 <= row["aer"] <= 1.0
    else:
      assert row["aer"] is None
  md = (out / "table1.md").read_text()
  assert all(f"| {name} |" in md for name in names)
  assert (out / "bleu_vs_length.png").stat().st_size > 0
  assert len(list((out / "alignments").glob("*.png"))) == 1  # The smoke preset draws one.
  # Learning curves, and how trained each model is, as every study reports them.
  assert (out / "learning_curves.png").stat().st_size > 0 and list(table["curves"]) == names
  search = table["curves"]["RNNsearch-30"]
  assert search["step"][-1] == table["rows"][1]["step"] and search["final"] == search["mean"][-1]
  assert "How trained: RNNsearch-30's validation" in md

  summary = json.loads((out / "summary.json").read_text())
  assert {"runs", "table1", "total_wall_s", "runs_wall_s", "versions", "date"} <= set(summary)
  assert {"jax", "flax", "sacrebleu"} <= set(summary["versions"])
  assert list(summary["runs"]) == names
  fig2 = summary["runs"]["RNNsearch-30"]["results"]["test"]["bleu_by_length"]
  assert list(table["fig2"]) == names  # Fig. 2's numbers, not only its picture.
  assert [b["bleu"] for b in table["fig2"]["RNNsearch-30"]] == [b["bleu"] for b in fig2]
  for name, rec in summary["runs"].items():
    workdir = Path(rec["workdir"])
    assert workdir.parent == out / "runs" and (workdir / "metrics.jsonl").exists()
    assert rec["command"].startswith("python main.py --config=configs/tiny.py")
    assert f"--workdir={workdir}" in rec["command"]
    assert rec["wall_s"] > 0 and not rec["reused"]
    assert set(rec["results"]) == {"valid", "test"}
    assert rec["results"]["test"]["num_sentences"] == TEST_SENTENCES
    assert sum(b["count"] for b in rec["results"]["test"]["bleu_by_length"]) == TEST_SENTENCES
    max_len = 30 if name.endswith("-30") else 50
    assert rec["config"]["data"]["max_len"] == max_len
    assert rec["config"]["model"]["name"] == name.split("-")[0].lower()
    assert rec["config"]["train"]["log_every"] == 2  # --set reaches every run.
  star, base = summary["runs"]["RNNsearch-50*"], summary["runs"]["RNNsearch-50"]
  assert star["config"]["train"]["num_steps"] == 2 * base["config"]["train"]["num_steps"]
  assert star["seeded_from"] == "RNNsearch-50"
  assert star["results"]["test"]["step"] == star["config"]["train"]["num_steps"]

  # A second invocation reuses the finished runs instead of training again, and keeps the
  # report of the invocation that trained them (not a rewrite with a total of 0 s).
  before = (out / "summary.json").read_bytes()
  again = run_module("experiments.reproduce_paper", *args, *_cache(compilation_cache))
  assert "reports on them all: kept" in again.stdout
  assert (out / "summary.json").read_bytes() == before
  assert json.loads((out / "table1.json").read_text()) == table  # Drawn again, the same.


def test_reproduce_paper_seeds_average_table1_and_fig2(tmp_path: Path) -> None:
  """--seeds: one workdir per model and seed; Table 1 and Fig. 2 are means over the seeds with
  sample standard deviations (checked on hand-made results, nothing trained)."""
  from experiments import reproduce_paper as rp

  runs = rp.build_runs("smoke", "synthetic", True, tmp_path, {}, [0, 1])
  assert list(runs) == [m.name for m in rp.MODELS] + ["RNNsearch-50*"]
  star = runs["RNNsearch-50*"][1]
  assert star.workdir == tmp_path / "runs" / "RNNsearch-50star" / "seed_1"
  assert star.config().seed == 1 and star.name == "RNNsearch-50* seed 1"
  assert [
    r.workdir.name for r in rp.build_runs("smoke", "synthetic", False, tmp_path, {})["RNNsearch-30"]
  ] == ["RNNsearch-30"]  # One seed, 0: the layout of before.
  with pytest.raises(ValueError, match="exclude each other"):
    rp.build_runs("smoke", "synthetic", False, tmp_path, {"seed": "3"}, [0, 1])

  def record(seed: int, bleu: float, short: float, aer: float | None) -> dict:
    bins = [
      {"min_len": 1, "max_len": 10, "count": 5, "bleu": short},
      {"min_len": 11, "max_len": 20, "count": 3, "bleu": bleu},
    ]
    test = {"bleu": bleu, "bleu_no_unk": bleu + 1, "chrf": 50.0, "aer": aer, "step": 10 + seed}
    test |= {"num_sentences": 8, "num_no_unk": 4, "beam_size": 3, "bleu_by_length": bins}
    return {"config": {"seed": seed}, "results": {"test": test}}

  records = {
    "RNNencdec-30": [record(0, 10.0, 20.0, None), record(1, 14.0, 22.0, None)],
    "RNNsearch-30": [record(0, 30.0, 40.0, 0.5), record(1, 34.0, 40.0, 0.3)],
  }
  rows = rp.table1(records)
  search = rows[1]
  assert search["seeds"] == [0, 1] and search["step"] == [10, 11]
  assert (search["bleu_all"], search["bleu_no_unk"], search["aer"]) == (32.0, 33.0, 0.4)
  assert search["bleu_all_std"] == pytest.approx(2.0 * math.sqrt(2.0))
  assert rows[0]["aer"] is None and rows[0]["aer_std"] is None
  md = rp.table1_markdown(rows, "smoke", "synthetic")
  assert "| RNNsearch-30 | 32.00 ± 2.83 | 33.00 ± 2.83 |" in md and "| 10, 11 |" in md
  curves = rp.fig2_curves(records)
  assert curves["RNNsearch-30"][0] == {
    "min_len": 1,
    "max_len": 10,
    "count": 5,
    "bleu": 40.0,
    "bleu_std": 0.0,
  }
  assert curves["RNNencdec-30"][1]["bleu"] == 12.0
  one = rp.fig2_curves({"RNNsearch-30": records["RNNsearch-30"][:1]})
  assert one["RNNsearch-30"][0]["bleu_std"] is None  # One seed: no band.
  from seq2seq import plots

  plots.bleu_vs_length(curves, tmp_path / "fig2.png", title="bands")
  assert (tmp_path / "fig2.png").stat().st_size > 0


def test_reproduce_paper_redraw_keeps_heatmaps_when_the_runs_have_none(tmp_path: Path) -> None:
  """A later checkout keeps a finished reproduction's results but not its runs' heatmaps (they
  are not committed): redrawing its report must not delete the committed Fig. 3 PNGs."""
  from experiments import reproduce_paper as rp

  kept, fresh = tmp_path / "alignments", tmp_path / "run" / "eval" / "test" / "alignments"
  kept.mkdir()
  (kept / "000.png").write_bytes(b"committed")
  rp.copy_heatmaps(fresh, kept)  # No such folder yet.
  assert (kept / "000.png").read_bytes() == b"committed"
  fresh.mkdir(parents=True)
  (fresh / "001.png").write_bytes(b"new")
  rp.copy_heatmaps(fresh, kept)  # A run that drew some replaces them all.
  assert sorted(p.name for p in kept.iterdir()) == ["001.png"]


# ---------------------------------------------------------------------- the generic sweep
TINY_SWEEP = ["--config=configs/tiny.py", "--grid", "model.score=additive,dot", "--seeds", "0,1"]
TINY_SWEEP += ["--set=train.num_steps=4", "--set=train.log_every=2", "--set=train.eval_every=2"]
TINY_SWEEP += ["--set=train.checkpoint_every=4", "--set=train.valid_bleu=0"]
TINY_SWEEP += ["--bootstrap-samples", "100"]


@pytest.mark.slow
def test_sweep_jobs_file_runs_concurrently_then_collects(tmp_path, compilation_cache):
  """--launcher=jobs, every line run by `xargs -P 2` from elsewhere, the sbatch script's line
  resumed as a no-op, then --collect: the table, the JSON and the learning curves."""
  out = tmp_path / "sweep"
  args = [*TINY_SWEEP, "--out", str(out), *_cache(compilation_cache)]
  run_module("experiments.sweep", *args, "--launcher=jobs")
  lines = (out / "jobs.txt").read_text().splitlines()
  assert len(lines) == 2 and not (out / "runs").exists()  # One line per point; nothing trained.
  assert (out / "data" / "synthetic_corpus").is_dir()  # The shared corpus is built first.
  for line, point in zip(lines, ("score=additive", "score=dot"), strict=True):
    assert line.startswith(f"cd {ROOT} && ") and "-m experiments.sweep" in line
    assert f"--only={point}" in line and f"--out={out}" in line and "--seeds=0,1" in line
  sbatch = (out / "sbatch.sh").read_text()
  assert "#SBATCH --array=0-1" in sbatch and "SLURM_ARRAY_TASK_ID + 1" in sbatch

  env = {**subprocess_env(), "JAX_PLATFORMS": "cpu"}
  with open(out / "jobs.txt") as jobs:
    proc = subprocess.run(
      ["xargs", "-d", "\n", "-P", "2", "-I{}", "sh", "-c", "{}"],
      stdin=jobs,
      cwd=tmp_path,  # The lines change to the repository themselves.
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
    )
  logs = {p.name: p.read_text()[-2000:] for p in (out / "logs").glob("*.log")}
  assert proc.returncode == 0, logs
  for point in ("score=additive", "score=dot"):
    for seed in (0, 1):
      rows = summary.read_metrics(out / "runs" / point / f"seed_{seed}")
      train_rows = [r for r in rows if r["split"] == "train"]
      assert [r["step"] for r in train_rows] == [2, 4]
      assert all(r["seeds_together"] == 2 for r in train_rows)  # Seeds trained as one group.

  # Task 1 of the job array runs line 2 again: its point is finished, so it trains nothing.
  ckpt = out / "runs" / "score=dot" / "seed_1" / "checkpoints" / "4"
  before, log = ckpt.stat().st_mtime_ns, out / "logs" / "score=dot.log"
  log_before = log.read_text()
  task = {**env, "SLURM_ARRAY_TASK_ID": "1"}
  subprocess.run(["bash", str(out / "sbatch.sh")], env=task, check=True, timeout=300)
  assert ckpt.stat().st_mtime_ns == before
  assert (
    "seeds together" in log_before and "seeds together" not in log.read_text()[len(log_before) :]
  )

  run_module("experiments.sweep", *args, "--collect")
  result = json.loads((out / "sweep.json").read_text())
  assert result["grid"] == {"model.score": ["additive", "dot"]} and result["seeds"] == [0, 1]
  assert result["baseline"] == "score=additive" and result["config_file"] == "configs/tiny.py"
  rows = {r["name"]: r for r in result["configurations"]}
  assert list(rows) == ["score=additive", "score=dot"]
  for name, row in rows.items():
    assert row["overrides"]["model.score"] == name.split("=")[1]
    assert (
      row["overrides"]["train.num_steps"] == 4 and row["overrides"]["train.valid_bleu"] is False
    )
    assert row["runs"] == [f"{name}-seed0", f"{name}-seed1"]
    for key in ("bleu", "chrf", "valid_bleu"):
      assert _is_score(row[f"{key}_mean"]) and row[f"{key}_std"] >= 0.0
    assert 0.0 <= row["aer_mean"] <= 1.0 and row["train_tokens_per_s_median"] > 0
  assert rows["score=additive"]["p_value_vs_baseline"] is None
  assert 0.0 < rows["score=dot"]["p_value_vs_baseline"] <= 1.0
  assert result["significance"]["n_samples"] == 100
  assert result["significance"]["per_configuration"]["score=dot"]["seeds"] == [0, 1]
  rec = result["runs"]["score=dot-seed1"]
  assert rec["workdir"] == str(out / "runs" / "score=dot" / "seed_1") and rec["wall_s"] > 0
  assert "--config.model.score=dot" in rec["command"] and "--config.seed=1" in rec["command"]
  assert rec["results"]["test"]["num_sentences"] == TEST_SENTENCES
  curve = result["curves"]["score=dot"]
  assert curve["metric"] == "loss" and curve["step"] == [2, 4] and len(curve["std"]) == 2
  md = (out / "sweep.md").read_text()
  assert (
    "| score=additive | 2 |" in md and "| score=dot | 2 |" in md and "p vs score=additive" in md
  )
  base = result["curves"]["score=additive"]
  assert f"How trained: score=additive's validation loss is {base['final']:.2f} at step 4" in md
  assert result["command"].startswith("python -m experiments.sweep --config=configs/tiny.py")
  assert result["command"].endswith("--collect") and f"Command: `{result['command']}`" in md
  assert "minutes of wall clock" in md
  train_min = rec["train_s"] / 60  # The training clock of the run's last logged step.
  assert rec["train_s"] == summary.read_metrics(rec["workdir"])[-1]["elapsed_s"]
  run_row = f"| score=dot-seed1 | {rec['results']['test']['bleu']:.2f} |"
  assert run_row in md and f"| 4 | {train_min:.1f} | {rec['wall_s'] / 60:.1f} |" in md
  assert "vector_isa" in result or not Path("/proc/cpuinfo").exists()  # With every timing.
  assert (out / "learning_curves.png").stat().st_size > 0
  # The report leaves the study in its committed form (experiments/lib/records.py).
  definition = records.load_definition(out)
  assert records.validate_definition(definition) == [] and len(definition["points"]) == 2
  run_record = records.read_record(out / "runs" / "score=dot" / "seed_1")
  assert records.validate_run(run_record) == [] and run_record["results"] == rec["results"]
  # The score study's table reads the same rows.
  table = sweep_scores.markdown(result)
  assert "| score=dot | 2 |" in table and "# Score functions (configs/tiny.py, test split)" in table

  # A study spanning sessions reports on its finished points while a third is still to run.
  grown = [a.replace("model.score=additive,dot", "model.score=additive,dot,general") for a in args]
  with pytest.raises(SystemExit, match="2 runs unfinished"):
    grid_sweep.main([*grown, "--collect"])
  grid_sweep.main([*grown, "--collect", "--partial"])
  partial = json.loads((out / "sweep.json").read_text())
  assert [r["name"] for r in partial["configurations"]] == ["score=additive", "score=dot"]
  assert partial["pending_points"] == ["score=general"]
  pending = "Not finished yet, so not in this table: `score=general`."
  assert pending in (out / "sweep.md").read_text()
  with pytest.raises(SystemExit, match="the baseline score=general has unfinished runs"):
    grid_sweep.main([*grown, "--collect", "--partial", "--baseline", "score=general"])

  # One table over several studies: this one (a point still pending) and one not run yet.
  tables = tmp_path / "tables" / "attend_to.md"
  absent = tmp_path / "absent" / "study.json"  # A study's report, by its file.
  tab = tabulate.main([str(out / "sweep.json"), str(absent), "--out", str(tables)])
  [line] = tab["lines"]  # The baseline has no line of its own.
  dot = partial["configurations"][1]
  test = partial["significance"]["per_configuration"]["score=dot"]
  assert (line["point"], line["baseline"], line["budget"]) == ("score=dot", "score=additive", 4)
  assert line["bleu_mean"] == dot["bleu_mean"] and line["p_value"] == test["p_value"]
  assert line["baseline_bleu_std"] == partial["configurations"][0]["bleu_std"]
  base_bleu = partial["configurations"][0]["bleu"]
  assert line["seed_differences"] == [d - b for d, b in zip(dot["bleu"], base_bleu, strict=True)]
  assert tab["pending"] == {"sweep": "untrained: score=general", "absent": "not run yet"}
  assert tab["studies"]["sweep"]["command"] == partial["command"]
  assert json.loads(tables.with_suffix(".json").read_text()) == tab
  table_md = tables.read_text()
  assert "| sweep | score=dot | score=additive | 4 |" in table_md
  assert f"{test['difference']:+.2f} [" in table_md and "- absent: not run yet" in table_md
  assert " / ".join(f"{d:+.2f}" for d in line["seed_differences"]) in table_md
  assert tab["command"].startswith("python -m experiments.tabulate ") and tab["command"] in table_md

  # Another study linking this one's baseline counts its runs' time as shared, not its own.
  linked = tmp_path / "linked"
  (linked / "runs").mkdir(parents=True)
  (linked / "runs" / "score=additive").symlink_to(out / "runs" / "score=additive")
  grid_sweep.main([*[str(linked) if a == str(out) else a for a in args], "--collect", "--partial"])
  shared = json.loads((linked / "sweep.json").read_text())
  assert shared["shared_runs"] == ["score=additive-seed0", "score=additive-seed1"]
  assert shared["shared_runs_wall_s"] == shared["runs_wall_s"] > 0
  assert "2 of these runs (the baseline's" in (linked / "sweep.md").read_text()

  # Attention sharpness at initialisation and after training, per point over its seeds.
  attention_sharpness.main([str(out), "--limit", "8"])
  sharp = json.loads((out / "attention_sharpness.json").read_text())
  assert sorted(sharp["runs"]) == ["score=additive", "score=dot"]
  assert sorted(sharp["runs"]["score=dot"]) == ["seed_0", "seed_1"]
  init = sharp["runs"]["score=additive"]["seed_0"]["init"]
  assert init["step"] == 0 and sharp["runs"]["score=additive"]["seed_0"]["trained"]["step"] == 4
  assert init["relative_entropy"] == pytest.approx(1.0)  # v_a starts at zero: uniform rows.
  mean, std = sharp["points"]["score=dot"]["trained_max_weight"]
  assert 0.0 < mean <= 1.0 and std >= 0.0
  assert init["score_scalars"] == {}  # Additive learns no scalar.


def test_score_scalars_reads_cosines_learned_sharpness(tiny_config):
  tiny_config.model.score = "cosine(sharpness=7)"
  state = rt.initial_state(tiny_config, 30, 30, rt.Runtime())
  assert attention_sharpness.score_scalars(state.params) == {"sharpness": pytest.approx(7.0)}


def test_attention_sharpness_is_one_for_uniform_rows_and_zero_for_one_hot():
  uniform, one_hot = np.full((2, 4), 0.25), np.eye(3)[:2]
  single = np.ones((5, 1))  # One source word: no choice to measure, left out.
  assert attention_sharpness.sharpness([uniform, single]) == pytest.approx(
    {"relative_entropy": 1.0, "max_weight": 0.25}
  )
  assert attention_sharpness.sharpness([one_hot]) == pytest.approx(
    {"relative_entropy": 0.0, "max_weight": 1.0}, abs=1e-9
  )


@pytest.mark.parametrize(
  "extra,message",
  [
    (["--grid", "model.no_such_field=1,2"], "unknown config field 'model.no_such_field'"),
    (["--grid", "model.score=additive", "--set", "train.num_steps=ten"], "expected an integer"),
    (["--grid", "model.score=additive,dot", "--baseline", "cosine"], "unknown point 'cosine'"),
    (["--grid", "model.score=additive", "--only", "dot"], "unknown point ['dot']"),
    ([], "--grid KEY=V1,V2,... is required"),
  ],
)
def test_sweep_refuses_bad_settings_in_one_line(tmp_path, extra, message):
  argv = ["--config=configs/tiny.py", "--out", str(tmp_path / "bad"), *extra]
  with pytest.raises(SystemExit) as exc:
    grid_sweep.main(argv)
  assert str(exc.value).startswith("error: ") and message in str(exc.value)
  assert "\n" not in str(exc.value) and not (tmp_path / "bad").exists()


def test_grid_points_cross_product_named_and_typed():
  grid = sweeps.parse_grid(
    ["model.score=additive,dot", "model.features=none,coverage(fertility=true,fertility_max=3)"]
  )
  points = sweeps.grid_points(grid)
  assert [p.name for p in points] == [
    "score=additive+features=none",
    "score=additive+features=coverage-fertility-true-fertility_max-3-",
    "score=dot+features=none",
    "score=dot+features=coverage-fertility-true-fertility_max-3-",
  ]
  assert points[1].overrides == {
    "model.score": "additive",
    "model.features": "coverage(fertility=true,fertility_max=3)",
  }
  same_leaf = sweeps.grid_points({"model.dropout": ["0.1"], "data.dropout": ["a/b"]})
  assert same_leaf[0].name == "model.dropout=0.1+data.dropout=a-b"
  for bad in (["model.score"], ["model.score="], ["a=1", "a=2"], ["a=1,1"]):
    with pytest.raises(ValueError):
      sweeps.parse_grid(bad)


needs_taskset = pytest.mark.skipif(
  shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2,
  reason="pinning jobs to cores needs taskset and two CPU cores",
)


@needs_taskset
def test_run_on_cores_pins_each_job_to_its_own_core_and_names_the_failures(tmp_path):
  record = "grep Cpus_allowed_list /proc/self/status > {}; sleep 0.2"
  lines = [record.format(tmp_path / f"job{i}") for i in range(5)]
  with pytest.raises(RuntimeError, match="1 of 6 jobs failed; the first: exit 3"):
    launch.run_on_cores([*lines[:2], "exit 3", *lines[2:]], processes=2)
  cores = sorted(os.sched_getaffinity(0))[:2]
  pinned = [(tmp_path / f"job{i}").read_text().split()[-1] for i in range(5)]  # Every line ran.
  assert set(pinned) <= {str(c) for c in cores}  # One core each, never the whole set.
  with pytest.raises(ValueError, match="this process may use"):
    launch.run_on_cores(lines, processes=len(os.sched_getaffinity(0)) + 1)


@pytest.mark.slow
@needs_taskset
def test_sweep_on_cores_trains_each_seed_in_its_own_process_then_reports(
  tmp_path, compilation_cache
):
  out = tmp_path / "cores"
  args = ["--config=configs/tiny.py", "--grid", "model.score=additive", "--seeds", "0,1"]
  args += ["--set=train.num_steps=2", "--set=train.eval_every=2", "--set=train.checkpoint_every=2"]
  args += ["--set=train.valid_bleu=0", "--bootstrap-samples", "10", "--out", str(out)]
  args += ["--training", "sequential", *_cache(compilation_cache)]
  result = grid_sweep.main([*args, "--launcher=cores", "--processes", "2"])
  assert len((out / "jobs.txt").read_text().splitlines()) == 2  # A process per seed.
  assert sorted(p.name for p in (out / "logs").glob("*.log")) == [
    "score=additive-seed0.log",
    "score=additive-seed1.log",
  ]
  assert sorted(result["runs"]) == ["score=additive-seed0", "score=additive-seed1"]
  assert all(rec["results"]["test"]["step"] == 2 for rec in result["runs"].values())
  with pytest.raises(SystemExit):
    grid_sweep.main([*args, "--launcher=cores", "--only", "score=additive"])


@pytest.mark.slow
def test_sweep_decodes_each_trained_point_again_without_training(tmp_path, compilation_cache):
  out = tmp_path / "decode"
  args = ["--config=configs/tiny.py", "--grid", "model.score=additive", "--seeds", "0"]
  args += ["--set=train.num_steps=4", "--set=train.eval_every=4", "--set=train.checkpoint_every=4"]
  args += ["--set=train.valid_bleu=0", "--bootstrap-samples", "10", "--out", str(out)]
  args += ["--decode", "decode.beam_size=1", *_cache(compilation_cache)]
  result = grid_sweep.main(args)
  names = [r["name"] for r in result["configurations"]]
  assert names == ["score=additive", "score=additive+beam_size=1"]
  decoded = result["runs"]["score=additive+beam_size=1-seed0"]
  assert decoded["decode_only_from"] == "score=additive-seed0"
  assert decoded["results"]["test"]["beam_size"] == 1 and decoded["results"]["test"]["step"] == 4
  assert result["runs"]["score=additive-seed0"]["results"]["test"]["beam_size"] > 1
  train_rows = [r for r in summary.read_metrics(decoded["workdir"]) if r["split"] == "train"]
  assert [r["step"] for r in train_rows] == [4]  # The source's training, copied: none of its own.
  # Rerun to resume a finished study: nothing to train, and its report (date, machines) stays.
  written = lambda: [(out / f"sweep.{ext}").stat().st_mtime_ns for ext in ("json", "md")]
  before = written()
  assert grid_sweep.main(args) is None and written() == before
  grid_sweep.main([*args, "--collect"])  # --collect rewrites it.
  assert all(now > then for now, then in zip(written(), before, strict=True))
  with pytest.raises(SystemExit, match=r"--decode sets decoding only \(decode\.\*\), not model"):
    grid_sweep.main([*args, "--decode", "model.score=dot"])
  # The finished run is not this study's once a setting it was trained with changes: the sweep
  # stops instead of reporting the old run under the new settings.
  with pytest.raises(SystemExit, match=r"trained with other settings \(train\.learning_rate\)"):
    grid_sweep.main([*args, "--set=train.learning_rate=0.5"])
  # Where the corpus is cached is not a setting the run was trained with.
  assert grid_sweep.main([*args, f"--set=data.cache_dir={tmp_path / 'moved'}"]) is None


def test_study_jobs_group_decoding_points_and_split_sequential_seeds(tmp_path):
  """The alignment study's gnmt-beam decodes additive's runs: it shares additive's job line;
  sequential training gives one line per group and seed."""
  from experiments import alignment_study

  out = tmp_path / "study"
  argv = ["--out", str(out), "--preset", "smoke", "--seeds", "0,1", "--launcher", "jobs"]
  argv += ["--variants", "additive,coverage,gnmt-beam", "--training", "sequential"]
  alignment_study.main(argv)
  lines = (out / "jobs.txt").read_text().splitlines()
  assert len(lines) == 4 and all("-m experiments.alignment_study" in line for line in lines)
  assert [line.count("--only=additive,gnmt-beam") for line in lines] == [1, 1, 0, 0]
  assert [line.split("--seeds=")[1].split()[0] for line in lines] == ["0", "1", "0", "1"]
  assert all("--preset=smoke" in line and "--training=sequential" in line for line in lines)


def test_score_study_points_are_named_by_score(tmp_path):
  out = tmp_path / "scores"
  argv = ["--out", str(out), "--preset", "smoke", "--scores", "additive,cosine", "--seeds", "3"]
  sweep_scores.main([*argv, "--launcher", "jobs"])
  lines = (out / "jobs.txt").read_text().splitlines()
  assert [line.split("--only=")[1].split()[0] for line in lines] == ["additive", "cosine"]
  assert all("-m experiments.sweep_scores" in line and "--seeds=3" in line for line in lines)
  with pytest.raises(SystemExit, match="unknown score"):
    sweep_scores.main([*argv, "--scores", "additive,bilinear"])


def test_bootstrap_pools_seeds_and_gives_identical_outputs_p_one(tmp_path):
  points = [Point("additive", {}), Point("coverage", {}), Point("copy", {}, decode_from="additive")]
  sweep = Sweep("configs/tiny.py", points, [0, 1], tmp_path, {}, {})
  for point in points:
    for run in sweep.runs(point):
      seed = int(run.name[-1])
      text = "a dog sleeps\n" if point.name == "coverage" and seed == 1 else f"the cat {seed}\n"
      (run.workdir / "eval" / "test").mkdir(parents=True)
      (run.workdir / "eval" / "test" / "hypotheses.txt").write_text(text)
  result = sweeps.bootstrap(sweep, "additive", ["the cat 0"], n_samples=20)
  assert result["copy"] == {"p_value": 1.0, "identical_to_baseline": True, "seeds": [0, 1]}
  assert 0.0 < result["coverage"]["p_value"] <= 1.0 and "signature" in result["coverage"]
  assert result["additive"] == {"p_value": None, "seeds": [0, 1]}


def write_hypotheses(sweep, point, lines_of_seed):
  for run, lines in zip(sweep.runs(point), lines_of_seed, strict=True):
    (run.workdir / "eval" / "test").mkdir(parents=True)
    (run.workdir / "eval" / "test" / "hypotheses.txt").write_text("\n".join(lines) + "\n")


def test_bootstrap_resamples_sentences_not_seed_copies(tmp_path):
  """Seeds share each resample of the test sentences: three seeds with the same outputs are
  one seed's evidence, not three times as many sentences (which shrank p: 0.106 -> 0.027)."""
  refs = [f"w{i} a b c d e" for i in range(30)]
  base = [f"w{i} a b c d e" if i % 3 else f"w{i} a x c d e" for i in range(30)]
  system = [f"w{i} a b c d e" if i % 2 else f"w{i} a x c d e" for i in range(30)]
  p = {}
  for seeds in ([0], [0, 1, 2]):
    points = [Point("base", {}), Point("system", {})]
    sweep = Sweep("configs/tiny.py", points, seeds, tmp_path / str(len(seeds)), {}, {})
    write_hypotheses(sweep, points[0], [base] * len(seeds))
    write_hypotheses(sweep, points[1], [system] * len(seeds))
    p[len(seeds)] = sweeps.bootstrap(sweep, "base", refs, n_samples=200)["system"]["p_value"]
  assert 0.0 < p[1] < 1.0 and p[3] == pytest.approx(p[1])


def test_bootstrap_p_is_one_for_equally_good_systems():
  """Two-sided and centred: systems with the same corpus BLEU (their errors on different
  sentences) differ by nothing, so p = 1; counting resamples whose absolute difference exceeds
  its mean read about 0.5 here."""
  refs = [f"w{i} a b c d e" for i in range(40)]
  base = [f"w{i} a b c d e" if i % 2 else f"w{i} a x c d e" for i in range(40)]
  system = [f"w{i} a x c d e" if i % 2 else f"w{i} a b c d e" for i in range(40)]
  result = stats.paired_bootstrap([base], [system], refs, n_samples=200)
  assert result["bleu"] == pytest.approx(result["baseline_bleu"]) and result["p_value"] == 1.0


def test_a_run_kept_without_checkpoints_is_finished_at_its_last_step(tmp_path):
  run = Run("p-seed0", "configs/tiny.py", {"train.num_steps": 40}, tmp_path / "w")
  results = run.workdir / "eval" / "test" / "results.json"
  assert not runs_lib.is_finished(run)
  results.parent.mkdir(parents=True)
  results.write_text(json.dumps({"step": 20}))  # The best checkpoint's step, evaluated.

  def trained_to(step):
    rows = [{"step": s, "split": "train", "loss": 1.0} for s in range(10, step + 1, 10)]
    (run.workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

  trained_to(30)
  assert not runs_lib.is_finished(run)  # Stopped early (a wall budget), not at num_steps.
  trained_to(40)
  assert runs_lib.is_finished(run)  # A committed study's run: results, no weights.
  (run.workdir / "checkpoints" / "20").mkdir(parents=True)
  assert not runs_lib.is_finished(run)  # Weights present: they decide.


def test_a_run_evaluated_without_the_long_split_is_evaluated_again_or_refused(tmp_path):
  """A study that adds the long test split finds a shared baseline evaluated without it: with its
  last checkpoint the run is unfinished (resuming only evaluates); kept without checkpoints (as
  committed) it cannot be evaluated, and the study stops with one line instead of a KeyError."""
  long_split = {"data.long_test_min_words": 12, "data.long_test_max_words": 18}
  run = Run("p-seed0", "configs/tiny.py", {"train.num_steps": 20, **long_split}, tmp_path / "w")
  (run.workdir / "checkpoints" / "20").mkdir(parents=True)
  rows = [{"step": s, "split": "train", "loss": 1.0} for s in (10, 20)]
  (run.workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  for split in ("valid", "test"):
    (run.workdir / "eval" / split).mkdir(parents=True)
    (run.workdir / "eval" / split / "results.json").write_text(json.dumps({"step": 20}))
  plain = Run("p-seed0", "configs/tiny.py", {"train.num_steps": 20}, run.workdir)
  assert runs_lib.is_finished(plain) and not runs_lib.is_finished(run)
  (run.workdir / "checkpoints" / "20").rmdir()
  assert runs_lib.is_finished(plain)
  with pytest.raises(SystemExit, match="evaluated without test_long"):
    runs_lib.is_finished(run)
  (run.workdir / "eval" / "test_long").mkdir()
  (run.workdir / "eval" / "test_long" / "results.json").write_text(json.dumps({"step": 20}))
  assert runs_lib.is_finished(run)


def test_the_plateau_budget_is_where_the_curve_stays_within_tolerance_of_its_best(tmp_path):
  steps = [500, 1000, 1500, 2000, 2500, 3000]
  bleu = [20.0, 30.5, 29.0, 30.2, 31.0, 30.4]  # 30.5 at 1000 is a lucky evaluation.
  assert stats.plateau_budget(steps, bleu) == 2000
  assert stats.plateau_budget(steps, bleu, tolerance=2.5) == 1000
  rows = [{"step": s, "split": "valid", "bleu": b} for s, b in zip(steps, bleu, strict=True)]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  out = run_module("experiments.plateau", str(tmp_path), "--json", str(tmp_path / "p.json"))
  assert (
    out.stdout.strip() == "2000" and json.loads((tmp_path / "p.json").read_text())["best"] == 31.0
  )
  # A curve that swings by 6 BLEU from one evaluation to the next is flat only at its last
  # evaluation read point by point; its trailing mean over 4 evaluations is flat from step 3,000.
  steps = [500 * (i + 1) for i in range(10)]
  swinging = [20.0, 60.0, 70.0, 77.0, 71.0, 77.0, 71.0, 77.0, 71.0, 77.0]
  assert stats.plateau_budget(steps, swinging) == steps[-1]
  assert stats.plateau_budget(steps, swinging, window=4) == 3000
  rows = [{"step": s, "split": "valid", "bleu": b} for s, b in zip(steps, swinging, strict=True)]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  plateau.main([str(tmp_path), "--window", "4", "--json", str(tmp_path / "w.json")])
  assert json.loads((tmp_path / "w.json").read_text())["budget"] == 3000
  # A curve that peaks and falls (overfitting) never stays near its best to the end: its budget
  # is the first step its trailing mean came within the tolerance of the best.
  falling = [20.0, 60.0, 70.0, 74.0, 73.0, 76.0, 75.0, 74.0, 66.0, 64.0]
  assert stats.plateau_budget(steps, falling) == 3000
  assert stats.plateau_budget(steps, falling, window=2) == 3000  # Means 74.5, best 75.5 (3,500).
  assert stats.plateau_budget(steps, falling, window=2, tolerance=0.5) == 3500
  rising = [{"step": s, "split": "valid", "bleu": float(s) / 100} for s in steps]  # No plateau.
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rising))
  with pytest.raises(SystemExit, match="no plateau seen; train the run longer"):
    plateau.main([str(tmp_path)])


def test_last_quarter_gain_reads_the_curve_at_three_quarters():
  steps, bleu = [500, 1000, 1500, 2000], [20.0, 30.0, 34.0, 34.5]
  assert stats.last_quarter_gain(steps, bleu) == 34.5 - 34.0  # The value at 1500 = 3/4 of 2000.
  steps, bleu = [1000, 2000, 2500, 3000], [40.0, 50.0, 52.0, 52.5]  # 3/4 of 3000: 2250.
  assert stats.last_quarter_gain(steps, bleu) == pytest.approx(52.5 - 51.0)  # Not from 2000.
  assert stats.last_quarter_gain([100], [1.0]) is None
  assert stats.last_quarter_gain([], []) is None


def test_curves_average_valid_bleu_over_seeds_at_shared_steps(tmp_path):
  sweep = Sweep("configs/tiny.py", [Point("a", {})], [0, 1], tmp_path, {}, {})
  for run, bleus in zip(sweep.runs("a"), ([1.0, 3.0, 5.0], [5.0, 7.0]), strict=True):
    run.workdir.mkdir(parents=True)
    steps = [5, 10, 15][-len(bleus) :]
    lines = [
      {"step": s, "split": "valid", "loss": b / 10, "bleu": b, "elapsed_s": 6.0 * s}
      for s, b in zip(steps, bleus, strict=True)
    ]
    lines.append({"step": 10, "split": "train", "loss": 2.0})
    (run.workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
  curve = sweeps.curves(sweep)["a"]
  assert curve["metric"] == "bleu" and curve["step"] == [10, 15]
  assert curve["mean"] == [4.0, 6.0] and curve["std"] == pytest.approx([math.sqrt(2.0)] * 2)
  assert curve["final"] == 6.0 and curve["gain_last_quarter"] == 1.5  # 6 at 15, 4.5 at 11.25
  assert curve["loss_mean"] == pytest.approx([0.4, 0.6]) and curve["minutes"] == [1.0, 1.5]
  plots.learning_curves({"a": curve}, tmp_path / "curves.png", "test")
  assert (tmp_path / "curves.png").stat().st_size > 0


def test_bar_charts_give_every_group_its_own_colour(tmp_path):
  """Up to 20 groups, none shares a colour (the default cycle repeats after 10)."""
  assert len(set(plots.distinct_colors(20))) == 20
  groups = {f"point {n}": {"+0": (0.5, 0.1), "+1": (0.2, 0.0)} for n in range(14)}
  plots.grouped_bars(groups, tmp_path / "bars.png", "test", "offset", "share")
  assert (tmp_path / "bars.png").stat().st_size > 0


def test_job_flags_round_trip_through_the_parser():
  parser = cli.parser(grid_sweep.GridSweep(grid_sweep.__doc__))
  argv = ["--out=/x", "--config=configs/tiny.py", "--grid=model.score=a,b", "--set=train.x=1"]
  args = parser.parse_args([*argv, "--collect"])
  again = parser.parse_args(launch.flags(vars(args)))
  assert vars(again) == vars(args)


def test_run_command_runs_from_the_root_and_fails_in_one_line(capfd):
  """The experiments' one way to run a `python ...` command: from the repository root with this
  interpreter, printed first; a failure names the command and its exit code."""
  from experiments.lib.configs import run_command

  out = run_command(["python", "-c", "import pathlib; print(pathlib.Path.cwd())"])
  assert capfd.readouterr().out.splitlines() == [f"$ {out}", str(ROOT)]
  with pytest.raises(SystemExit, match="failed with exit code 3"):
    run_command("python -c 'raise SystemExit(3)'")


@pytest.mark.slow
def test_structural_study_smoke(tmp_path: Path, compilation_cache: Path) -> None:
  out = tmp_path / "structures"
  args = ["--out", str(out), "--preset", "smoke", "--variants", "soft,hard", "--seeds", "0"]
  args += ["--decode-sentences", "4", "--bootstrap-samples", "100"]
  run_module("experiments.structural_study", *args, *_cache(compilation_cache))

  study = json.loads((out / "study.json").read_text())
  assert study["baseline"] == "soft" and study["long_split"] == [10, 18]
  assert study["total_wall_s"] >= sum(r["wall_s"] for r in study["runs"].values())
  rows = {r["name"]: r for r in study["configurations"]}
  assert list(rows) == ["soft", "hard"]
  for name, row in rows.items():
    assert row["overrides"]["model.attention"] == name and row["runs"] == [f"{name}-seed0"]
    assert _is_score(row["bleu_mean"]) and _is_score(row["long_bleu_mean"])
    assert row["bleu_std"] == 0.0 and row["long_sentences"] > 0
    for key in ("aer_mean", "long_aer_mean"):
      assert 0.0 <= row[key] <= 1.0
    assert row["attention_entropy_mean"] >= 0.0 and row["long_attention_entropy_mean"] >= 0.0
    assert row["train_tokens_per_s_median"] > 0
    assert row["decode_short_sent_per_s_mean"] > 0 and row["decode_long_sent_per_s_mean"] > 0
    assert 0 < row["step_ms_short_mean"] and 0 < row["step_ms_long_mean"]
  assert rows["soft"]["p_value_vs_baseline"] is None
  assert 0.0 < rows["hard"]["p_value_vs_baseline"] <= 1.0
  assert 0.0 < rows["hard"]["p_value_long_vs_baseline"] <= 1.0
  assert study["significance"]["n_samples"] == 100
  measured = study["measured"]["hard-seed0"]
  assert measured["decode_long_sentences"] == 4 and measured["decode_short_sentences"] == 4
  workdir = Path(study["runs"]["hard-seed0"]["workdir"])
  assert json.loads((workdir / "structural_study.json").read_text()) == measured
  assert "--config.model.attention=hard" in study["runs"]["hard-seed0"]["command"]
  md = (out / "study.md").read_text()
  assert "| soft |" in md and "| hard |" in md
  assert "Command: `python -m experiments.structural_study " in md  # Every study's footer.
  assert "How trained: soft's validation" in md and set(study["curves"]) == {"soft", "hard"}
  assert (out / "learning_curves.png").stat().st_size > 0  # Every study draws its curves.
  pngs = ("study_bleu.png", "study_bleu_long.png", "study_decode_long.png", "study_step_ms.png")
  for name in pngs:
    assert (out / name).stat().st_size > 0


@pytest.mark.slow
def test_alignment_study_smoke(tmp_path: Path, compilation_cache: Path) -> None:
  out = tmp_path / "study"
  variants = "additive,agreement,gnmt-beam"
  args = ["--out", str(out), "--preset", "smoke", "--variants", variants, "--seeds", "0"]
  args += ["--bootstrap-samples", "100"]
  run_module("experiments.alignment_study", *args, *_cache(compilation_cache))

  study = json.loads((out / "alignment_study.json").read_text())
  assert study["baseline"] == "additive" and study["long_split_words"] == [12, 18]
  trained = [r for r in study["runs"].values() if not r["decode_only_from"]]
  assert study["total_wall_s"] >= sum(r["wall_s"] for r in trained)
  rows = {r["name"]: r for r in study["configurations"]}
  assert list(rows) == variants.split(",")
  for row in rows.values():
    assert row["test_sentences"] == TEST_SENTENCES and 0 < row["test_long_sentences"] < 64
    for split in ("test", "test_long"):
      assert _is_score(row[f"{split}_bleu_mean"])
      no_unk = row[f"{split}_bleu_no_unk_mean"]  # None where every sentence has an unknown
      assert _is_score(no_unk) or (split == "test_long" and no_unk is None)  # word (smoke: long).
      assert row[f"{split}_bleu_std"] == 0.0  # One seed.
      for key in ("aer", "aer_shift_minus1", "aer_shift_plus1", "aer_threshold"):
        assert 0.0 <= row[f"{split}_{key}_mean"] <= 1.0
      assert row[f"{split}_attention_entropy_mean"] >= 0.0
      assert row[f"{split}_over_translation_mean"] >= 0
      assert row[f"{split}_under_translation_mean"] >= 0
    assert row["train_tokens_per_s_median"] > 0
  assert rows["additive"]["p_value_vs_baseline"] is None
  for name in ("agreement", "gnmt-beam"):
    assert 0.0 < rows[name]["p_value_vs_baseline"] <= 1.0
    assert 0.0 < rows[name]["p_value_long_vs_baseline"] <= 1.0
  assert rows["gnmt-beam"]["decode_only"] and not rows["agreement"]["decode_only"]
  assert "How trained: additive's validation" in (out / "alignment_study.md").read_text()
  assert (out / "learning_curves.png").stat().st_size > 0
  # The cross-study table reads this report too (its bootstrap is split by split).
  lines = {
    line["point"]: line for line in tabulate.tabulate([out / "alignment_study.json"])["lines"]
  }
  assert list(lines) == ["agreement", "gnmt-beam"] and lines["agreement"]["baseline"] == "additive"
  test = study["significance"]["per_split"]["test"]["agreement"]
  assert (
    lines["agreement"]["p_value"] == test["p_value"] == rows["agreement"]["p_value_vs_baseline"]
  )
  assert lines["agreement"]["bleu_mean"] == rows["agreement"]["bleu_mean"]

  runs = study["runs"]
  assert runs["agreement-seed0"]["config"]["model"]["name"] == "agreement"
  assert runs["agreement-seed0"]["config"]["data"]["long_test_min_words"] == 12
  gnmt, additive = runs["gnmt-beam-seed0"], runs["additive-seed0"]
  assert gnmt["decode_only_from"] == "additive-seed0"
  assert gnmt["config"]["decode"]["coverage_penalty"] == 0.2
  assert gnmt["results"]["test"]["step"] == additive["results"]["test"]["step"]
  assert set(gnmt["results"]) == {"valid", "test", "test_long"}
  md = (out / "alignment_study.md").read_text()
  assert all(f"| {name} |" in md for name in rows) and "12-18 source words" in md
  assert "Command: `python -m experiments.alignment_study " in md and "minutes of wall clock" in md
  for suffix in ("", "_long", "_aer"):
    assert (out / f"alignment_study{suffix}.png").stat().st_size > 0


def test_a_run_s_wall_time_is_saved_while_it_trains(tmp_path):
  """A session's end kills the study mid-run: the time spent so far must already be on disk."""
  workdirs = [tmp_path / "a", tmp_path / "b"]
  with runs_lib.timed(workdirs, every_s=0.05):
    time.sleep(0.3)
    during = [runs_lib.wall_time(w) for w in workdirs]
  assert all(0.05 <= s <= 0.3 / 2 for s in during)  # Two seeds together: a share each.
  with runs_lib.timed(workdirs[:1], every_s=10.0):  # A second invocation adds to the first.
    pass
  assert runs_lib.wall_time(workdirs[0]) >= 0.3 / 2 - 1e-6
  assert runs_lib.load_average(workdirs[0]) >= 0.0  # The machine's load, sampled meanwhile.
  assert runs_lib.machines(workdirs[0]) == [runs_lib.this_machine()]


def test_a_study_names_the_machines_its_runs_trained_on_not_the_one_reporting():
  """A study spans sessions on different CPUs: its footer reads each run's own record."""

  def rec(machines):
    return {"results": {"test": {"bleu": 50.0}}, "wall_s": 60.0, "machines": machines}

  runs = {"a": rec(["AMD EPYC, 2 cores"]), "b": rec(["Intel Xeon, 2 cores"]), "c": rec([])}
  result = {"curves": {}, "baseline": "a", "sets": [], "runs": runs, "command": "python -m x"}
  result |= {"date": "today", "runs_wall_s": 180.0, "cpu_model": "Reporter CPU", "cpu_count": 2}
  result["runs_machines"] = cli.runs_machines(runs.values())
  last = cli.footer(result)[-1]
  assert "AMD EPYC, 2 cores (1 run); Intel Xeon, 2 cores (1 run); not recorded (1 run)" in last
  assert "Reporter CPU" not in last
  result["runs_machines"] = cli.runs_machines([runs["b"]])
  assert "CPU: Intel Xeon, 2 cores)" in cli.footer(result)[-1]


def _sweep_row(name: str, std: float, **metrics) -> dict:
  """A sweep table row as `sweeps` writes it: BLEU, chrF and valid BLEU set, the other test
  metrics None unless given, each KEY_mean with KEY_std = `std`."""
  values = dict.fromkeys(sweeps.TEST_METRICS) | dict(bleu=50.0, chrf=70.0, valid_bleu=49.0)
  values |= metrics
  cells = {f"{k}_mean": v for k, v in values.items()} | {f"{k}_std": std for k in values}
  return {"name": name, "seeds": [0, 1], "p_value_vs_baseline": 0.5, **cells}


def _sweep_result(baseline: str, rows: list[dict], grid: dict[str, list[str]]) -> dict:
  """What `grid_sweep.markdown` reads: two seeds trained one after another."""
  return {
    "configurations": rows,
    "baseline": baseline,
    "config_file": "configs/multi30k.py",
    "seeds": [0, 1],
    "training": "sequential",
    "significance": {"n_samples": 1000},
    "grid": grid,
  }


@pytest.mark.parametrize(
  "grid", [{"model.features": ["none", "coverage"]}, {"model.attention": ["soft", "local_p"]}]
)
def test_feature_and_structure_sweeps_report_over_translation_and_unattended_words(grid):
  rows = [
    _sweep_row("features=none", 1.0, over_translation=340.0, under_translation=950.0),
    _sweep_row("features=coverage", 1.0, over_translation=300.0, under_translation=900.0),
  ]
  features = grid_sweep.markdown(_sweep_result("features=none", rows, grid))
  assert "| over-translated | unattended |" in features
  assert "| 300 ± 1 | 900 ± 1 |" in features
  scores = grid_sweep.markdown(
    _sweep_result("features=none", rows, {"model.score": ["additive", "dot"]})
  )
  assert "over-translated" not in scores


def test_sweeps_report_twin_peaks_once_every_point_has_them():
  """The share of identical-word links the attention finds: a column only when every row has it
  (runs evaluated before the metric existed have none)."""
  grid = {"model.score": ["additive", "general"]}
  both = [
    _sweep_row("score=additive", 0.01, identical_word_peaks=0.91),
    _sweep_row("score=general", 0.01, identical_word_peaks=0.46),
  ]
  md = grid_sweep.markdown(_sweep_result("score=additive", both, grid))
  assert "| twin peaks |" in md and "| 0.460 ± 0.010 |" in md and "Twin peaks:" in md
  half = [both[0], _sweep_row("score=general", 0.01, identical_word_peaks=None)]
  assert (
    "twin peaks" not in grid_sweep.markdown(_sweep_result("score=additive", half, grid)).lower()
  )


def _offset_run(study: Path, point: str, seed: int, peaks: list[int], *heads: list[int]) -> None:
  """A finished run whose test sentences.jsonl holds one sentence, "Anna saw Bob and Carl" ->
  "Anna a vu Bob et Carl", whose twins' attention rows peak on source words `peaks` (and, stored
  after that map as a multi-head run's are, each head's rows on `heads[n]`)."""
  src, out = ["Anna", "saw", "Bob", "and", "Carl", "</s>"], ["Anna", "a", "vu", "Bob", "et", "Carl"]
  named = [("attention", peaks)] + [(f"head {n + 1}", h) for n, h in enumerate(heads)]
  maps = []
  for name, twin_peaks in named:
    alpha = np.full((len(out) + 1, len(src)), 0.01)
    for t, j in zip((0, 3, 5), twin_peaks, strict=True):
      alpha[t, j] = 0.9
    maps.append({"name": name, **report.encode_map(alpha)})
  folder = study / "runs" / point / f"seed_{seed}" / "eval" / "test"
  folder.mkdir(parents=True)
  attention = {"source": src, "output": out + ["</s>"], "maps": maps}
  (folder / "sentences.jsonl").write_text(json.dumps({"attention": attention}) + "\n")
  (folder / "results.json").write_text("{}")


def test_attention_offsets_share_each_offset_over_seeds(tmp_path):
  study = tmp_path / "study"
  _offset_run(study, "score=a", 0, [0, 2, 4])  # Every twin on itself.
  _offset_run(study, "score=a", 1, [1, 3, 4])  # Two one word ahead.
  _offset_run(study, "score=b", 0, [4, 0, 0])  # +4, -2, -4.
  (study / "runs" / "alias").symlink_to("score=a")  # Another name for one point: counted once.
  out = tmp_path / "offsets.json"
  assert attention_offsets.main([str(study), "--json", str(out)]) == 0
  record = json.loads(out.read_text())
  a, b = record["points"]["study/score=a"], record["points"]["study/score=b"]
  assert set(record["points"]) == {"study/score=a", "study/score=b"} and a["seeds"] == 2
  assert a["+0"][0] == pytest.approx((1 + 1 / 3) / 2) and a["+1"][0] == pytest.approx(1 / 3)
  assert b["-2"][0] == b[">=+3"][0] == b["<=-3"][0] == pytest.approx(1 / 3) and b["+0"][0] == 0
  assert record["runs"]["study/score=a"]["seed_1"]["pairs"] == 3
  assert out.with_suffix(".png").stat().st_size > 0


def test_attention_offsets_count_each_head_when_asked(tmp_path):
  """A head that finds every twin while the mean of the heads lags one word: --heads shows it,
  ranking the heads of each run by their share on the twin."""
  study = tmp_path / "study"
  _offset_run(study, "attention=multihead", 0, [1, 3, 4], [1, 3, 5], [0, 2, 4])
  out = tmp_path / "offsets.json"
  assert attention_offsets.main([str(study), "--json", str(out)]) == 0
  assert list(json.loads(out.read_text())["points"]) == ["study/attention=multihead"]
  assert attention_offsets.main([str(study), "--heads", "--json", str(out)]) == 0
  record = json.loads(out.read_text())
  point = "study/attention=multihead"
  mean, first, second = (
    record["points"][point + s] for s in ("", " (head rank 1)", " (head rank 2)")
  )
  assert mean["+1"][0] == pytest.approx(2 / 3) and first["+0"][0] == pytest.approx(1.0)
  assert second["+1"][0] == pytest.approx(2 / 3) and second["<=-3"][0] == pytest.approx(1 / 3)
  assert record["runs"][point + " (head rank 1)"]["seed_0"]["head"] == "head 2"
  # Seven steps (six words and </s>): head 1's row for "Carl" peaks on the source's </s>, so among
  # the words its (even) row peaks on the first, -4; the untouched rows peak on the first word.
  assert second["end_peaks"][0] == pytest.approx(1 / 7) and mean["end_peaks"][0] == 0


@pytest.mark.parametrize("together", [False, True])
def test_a_preempted_study_exits_as_a_scheduler_reruns(together, tmp_path, monkeypatch):
  """A run stopped by a signal after saving ends its sweep with cli.PREEMPTED (75), as main.py
  does, not with 1 (a failure): a scheduler requeues it and the rerun resumes."""
  from seq2seq import cli as seq2seq_cli
  from seq2seq import seed_group, train

  run = Run("p-seed0", "configs/tiny.py", {"train.num_steps": 40}, tmp_path / "w")
  monkeypatch.setattr(train, "train_and_evaluate", lambda *a, **k: {"preempted_at_step": 20})
  monkeypatch.setattr(seed_group, "train_together", lambda *a, **k: [{"preempted_at_step": 20}])
  with pytest.raises(SystemExit) as stopped:
    runs_lib.train_together([run]) if together else runs_lib.train_alone(run)
  assert stopped.value.code == seq2seq_cli.PREEMPTED == 75

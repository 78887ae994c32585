"""The generic sweep (experiments.sweep over experiments/lib/sweeps) and the score study built
on it: a grid's points and their names, a jobs file run concurrently then collected (sweep.json,
sweep.md, the cross-study table and attention sharpness read from it), points decoded again
without training, a rerun that resumes, and settings refused in one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT, TEST_SENTENCES, is_score, run_module, subprocess_env, tiny_sweep_args

from experiments import attention_sharpness, sweep_scores, tabulate
from experiments import sweep as grid_sweep
from experiments.lib import driver, records, sweeps
from seq2seq.training import metric_writer

TINY_SWEEP = ["--config=configs/tiny.py", "--grid", "model.score=additive,dot", "--seeds", "0,1"]


TINY_SWEEP += ["--set=train.num_steps=4", "--set=train.log_every=2", "--set=train.eval_every=2"]


TINY_SWEEP += ["--set=train.checkpoint_every=4", "--set=train.valid_bleu=0"]


TINY_SWEEP += ["--set=decode.num_heatmaps=0"]  # No test here reads a run's heatmaps.


TINY_SWEEP += ["--bootstrap-samples", "100", "--ar-trials", "100"]


@pytest.mark.slow
def test_sweep_jobs_file_runs_concurrently_then_collects(tmp_path, cache_flags):
  """--launcher=jobs, every line run by `xargs -P 2` from elsewhere, the sbatch script's line
  resumed as a no-op, then --collect: the table, the JSON and the learning curves."""
  out = tmp_path / "sweep"
  args = [*TINY_SWEEP, "--out", str(out), *cache_flags]
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
      rows = metric_writer.read_metrics(out / "runs" / point / f"seed_{seed}")
      train_rows = [r for r in rows if r["split"] == "train"]
      assert [r["step"] for r in train_rows] == [2, 4]
      assert all(r["seeds_together"] == 2 for r in train_rows)  # Seeds trained as one group.

  # Task 1 of the job array runs line 2 again: its point is finished, so it trains nothing.
  ckpt = out / "runs" / "score=dot" / "seed_1" / "checkpoints" / "4"
  metrics = [out / "runs" / "score=dot" / f"seed_{seed}" / "metrics.jsonl" for seed in (0, 1)]
  before, trained = ckpt.stat().st_mtime_ns, [path.read_bytes() for path in metrics]
  task = {**env, "SLURM_ARRAY_TASK_ID": "1"}
  subprocess.run(["bash", str(out / "sbatch.sh")], env=task, check=True, timeout=300)
  assert ckpt.stat().st_mtime_ns == before
  assert [path.read_bytes() for path in metrics] == trained  # Not a step more, nor an evaluation.

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
      assert is_score(row[f"{key}_mean"]) and row[f"{key}_std"] >= 0.0
    assert 0.0 <= row["aer_mean"] <= 1.0 and row["train_tokens_per_s_median"] > 0
  assert rows["score=additive"]["p_value_vs_baseline"] is None
  assert 0.0 < rows["score=dot"]["p_value_vs_baseline"] <= 1.0
  assert result["significance"]["n_samples"] == 100
  assert result["significance"]["per_configuration"]["score=dot"]["seeds"] == [0, 1]
  chrf = result["significance"]["per_configuration_chrf"]["score=dot"]
  assert chrf["chrf"] == pytest.approx(rows["score=dot"]["chrf_mean"], abs=5) and chrf["p_value"]
  bleu = result["significance"]["per_configuration"]["score=dot"]  # AR beside the bootstrap.
  assert 0.0 < bleu["ar_p_value"] <= 1.0 and 0.0 < chrf["ar_p_value"] <= 1.0
  assert bleu["ar_trials"] == result["significance"]["ar_trials"] == 100
  twins = result["significance"]["per_configuration_twin_peaks"]
  pairs = {
    p: sum(result["runs"][f"{p}-seed{s}"]["results"]["test"]["identical_words"] for s in (0, 1))
    for p in rows
  }
  assert ("score=dot" in twins) == (min(pairs.values()) > 0), pairs  # Twin pairs in both points.
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
  assert rec["train_s"] == metric_writer.read_metrics(rec["workdir"])[-1]["elapsed_s"]
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


def test_sweep_decodes_again_under_the_models_decoding_time_switches(tmp_path):
  """--decode takes copying's eos (a setting checkpoints allow at decoding), not model.score,
  nor another add-on list."""
  grid = grid_sweep.GridSweep(grid_sweep.__doc__)
  args = ["--config=configs/tiny.py", "--grid", "model.addons=copy(eos=target)"]
  args += ["--out", str(tmp_path)]
  parse = lambda *more: driver.parser(grid).parse_args([*args, *more])
  points = grid.points(parse("--decode", "model.addons=copy(eos=null)"))
  assert [(p.name, p.decode_from) for p in points] == [
    ("addons=copy-eos-target-", None),
    ("addons=copy-eos-target-+addons=copy-eos-null-", "addons=copy-eos-target-"),
  ]
  assert points[1].overrides == {"model.addons": "copy(eos=null)"}
  with pytest.raises(ValueError, match=r"not model\.score"):
    grid.points(parse("--decode", "model.score=dot"))
  with pytest.raises(ValueError, match=r"with another model \(model\.addons\)"):
    driver.plan(grid, parse("--decode", "model.addons=copy+intra"))


@pytest.mark.slow
def test_sweep_decodes_each_trained_point_again_without_training(tmp_path, cache_flags):
  out = tmp_path / "decode"
  args = [*tiny_sweep_args(out, steps=4), "--decode", "decode.beam_size=1", *cache_flags]
  result = grid_sweep.main(args)
  names = [r["name"] for r in result["configurations"]]
  assert names == ["score=additive", "score=additive+beam_size=1"]
  decoded = result["runs"]["score=additive+beam_size=1-seed0"]
  assert decoded["decode_only_from"] == "score=additive-seed0"
  assert decoded["results"]["test"]["beam_size"] == 1 and decoded["results"]["test"]["step"] == 4
  assert result["runs"]["score=additive-seed0"]["results"]["test"]["beam_size"] > 1
  train_rows = [r for r in metric_writer.read_metrics(decoded["workdir"]) if r["split"] == "train"]
  assert [r["step"] for r in train_rows] == [4]  # The source's training, copied: none of its own.
  # Rerun to resume a finished study: nothing to train, and its report (date, machines) stays.
  written = lambda: [(out / f"sweep.{ext}").stat().st_mtime_ns for ext in ("json", "md")]
  before = written()
  assert grid_sweep.main(args) is None and written() == before
  grid_sweep.main([*args, "--collect"])  # --collect rewrites it.
  assert all(now > then for now, then in zip(written(), before, strict=True))
  with pytest.raises(
    SystemExit,
    match=r"--decode sets decoding only \(decode\.\*, model\.direction.*\), not model\.score",
  ):
    grid_sweep.main([*args, "--decode", "model.score=dot"])
  # The finished run is not this study's once a setting it was trained with changes: the sweep
  # stops instead of reporting the old run under the new settings.
  with pytest.raises(SystemExit, match=r"trained with other settings \(train\.learning_rate\)"):
    grid_sweep.main([*args, "--set=train.learning_rate=0.5"])
  # Where the corpus is cached is not a setting the run was trained with.
  assert grid_sweep.main([*args, f"--set=data.cache_dir={tmp_path / 'moved'}"]) is None


@pytest.mark.parametrize(
  "extra,message",
  [
    (["--grid", "model.no_such_field=1,2"], "unknown config field 'model.no_such_field'"),
    (["--grid", "model.score=additive", "--set", "train.num_steps=ten"], "expected an integer"),
    (["--grid", "model.score=additive,dot", "--baseline", "cosine"], "unknown point 'cosine'"),
    (["--grid", "model.score=additive", "--only", "dot"], "unknown point ['dot']"),
    (["--grid", "model.score=additive,dot", "--within", "model.dropout"], "not a --grid field"),
    (["--grid", "model.score=additive,dot", "--within", "model.score"], "no other field"),
    ([], "--grid KEY=V1,V2,... is required"),
  ],
)
def test_sweep_refuses_bad_settings_in_one_line(tmp_path, extra, message):
  argv = ["--config=configs/tiny.py", "--out", str(tmp_path / "bad"), *extra]
  with pytest.raises(SystemExit) as exc:
    grid_sweep.main(argv)
  assert str(exc.value).startswith("error: ") and message in str(exc.value)
  assert "\n" not in str(exc.value) and not (tmp_path / "bad").exists()


def test_the_sweep_table_ends_with_the_tests_within_groups():
  """The committed normalisers study, tested within each decoder: its sweep.md table is the
  sweep's own, then one line per point against softmax in its own decoder."""
  study = ROOT / "experiments" / "results" / "embedded_normalisers"
  result = json.loads((study / "sweep.json").read_text())
  md = grid_sweep.markdown(result)
  within = result["significance"]["within"]
  assert within["key"] == "model.decoder" and within["references"]
  for name, other in within["references"].items():
    diff = within["per_configuration"][name]["difference"]
    assert f"| {name} | {other} | {diff:+.2f} |" in md
  assert md + "\n".join(driver.footer(result)) + "\n" == (study / "sweep.md").read_text()


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


def test_score_study_points_are_named_by_score(tmp_path):
  out = tmp_path / "scores"
  argv = ["--out", str(out), "--preset", "smoke", "--scores", "additive,cosine", "--seeds", "3"]
  sweep_scores.main([*argv, "--launcher", "jobs"])
  lines = (out / "jobs.txt").read_text().splitlines()
  assert [line.split("--only=")[1].split()[0] for line in lines] == ["additive", "cosine"]
  assert all("-m experiments.sweep_scores" in line and "--seeds=3" in line for line in lines)
  with pytest.raises(SystemExit, match="unknown score"):
    sweep_scores.main([*argv, "--scores", "additive,bilinear"])


def test_set_trains_with_one_value_and_decode_decodes_copies_with_another(tmp_path):
  """`--set model.addons=copy(eos=target) --decode model.addons=copy(eos=null)`: the trained
  point keeps the --set value, its decoding copies the --decode one; a --set against a grid
  value is refused."""
  grid = grid_sweep.GridSweep(grid_sweep.__doc__)
  args = ["--config=configs/tiny.py", "--grid", "model.score=additive", "--out", str(tmp_path)]
  more = ["--set", "model.addons=copy(eos=target)", "--decode", "model.addons=copy(eos=null)"]
  sweep = driver.plan(grid, driver.parser(grid).parse_args([*args, *more]))
  trained, decoded = (sweep.runs(p)[0].config().model.addons for p in sweep.points)
  assert (trained, decoded) == ("copy(eos=target)", "copy(eos=null)")
  clash = driver.parser(grid).parse_args([*args, "--set", "model.score=dot"])
  with pytest.raises(ValueError, match=r"--set model\.score would override point score=additive's"):
    driver.plan(grid, clash)

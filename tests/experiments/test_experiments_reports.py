"""The tables and figures a study writes from its results (experiments/lib/driver, plots and the
sweep's Markdown): the footer's machines, the columns a grid's table adds, and bar colours."""

from __future__ import annotations

import pytest

from experiments import sweep as grid_sweep
from experiments.lib import driver, plots, sweeps


def test_a_study_names_the_machines_its_runs_trained_on_not_the_one_reporting():
  """A study spans sessions on different CPUs: its footer reads each run's own record."""

  def rec(machines):
    return {"results": {"test": {"bleu": 50.0}}, "wall_s": 60.0, "machines": machines}

  runs = {"a": rec(["AMD EPYC, 2 cores"]), "b": rec(["Intel Xeon, 2 cores"]), "c": rec([])}
  result = {"curves": {}, "baseline": "a", "sets": [], "runs": runs, "command": "python -m x"}
  result |= {"date": "today", "runs_wall_s": 180.0, "cpu_model": "Reporter CPU", "cpu_count": 2}
  result["runs_machines"] = driver.runs_machines(runs.values())
  last = driver.footer(result)[-1]
  assert "AMD EPYC, 2 cores (1 run); Intel Xeon, 2 cores (1 run); not recorded (1 run)" in last
  assert "Reporter CPU" not in last
  result["runs_machines"] = driver.runs_machines([runs["b"]])
  assert "CPU: Intel Xeon, 2 cores)" in driver.footer(result)[-1]


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


def test_sweeps_report_length_ratios_once_every_point_has_them():
  """Output over reference length on both splits: a column pair only when every row has it; a
  row written before the metric existed (no such key) leaves the table as it was."""
  grid = {"model.copy_eos": ["target", "null"]}
  ratios = dict(length_ratio=0.97, valid_length_ratio=0.96)
  rows = [_sweep_row("copy_eos=target", 0.01, **ratios), _sweep_row("copy_eos=null", 0.01)]
  table = grid_sweep.markdown(_sweep_result("copy_eos=target", rows[:1], grid))
  assert "| valid length ratio | test length ratio |" in table
  assert "| 0.960 ± 0.010 | 0.970 ± 0.010 |" in table
  old = {k: v for k, v in rows[1].items() if "length_ratio" not in k}
  assert "length ratio" not in grid_sweep.markdown(_sweep_result("copy_eos=target", [old], grid))
  assert "length ratio" not in grid_sweep.markdown(_sweep_result("copy_eos=target", rows, grid))


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


def test_bar_charts_give_every_group_its_own_colour(tmp_path):
  """Up to 20 groups, none shares a colour (the default cycle repeats after 10)."""
  assert len(set(plots.distinct_colors(20))) == 20
  groups = {f"point {n}": {"+0": (0.5, 0.1), "+1": (0.2, 0.0)} for n in range(14)}
  plots.grouped_bars(groups, tmp_path / "bars.png", "test", "offset", "share")
  assert (tmp_path / "bars.png").stat().st_size > 0

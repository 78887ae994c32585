"""Smoke tests of experiments/reproduce_paper.py, sweep_scores.py and alignment_study.py
(subprocesses).

The scripts run their `smoke` preset (configs/tiny.py, a few steps) and use the session's
persistent compilation cache, so the sweep's additive runs reuse the programs compiled for
RNNsearch, and programs that main.py runs in other tests compiled are loaded, not rebuilt. XLA's
backend optimisations are turned down: these tests check the files and keys written, not speed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_main import subprocess_env

from seq2seq import summary

ROOT = Path(__file__).resolve().parents[1]
TEST_SENTENCES = 64  # configs/tiny.py: data.synthetic.test_pairs.


@pytest.fixture(scope="module")
def compilation_cache() -> Path:
  """The session's cache (conftest.py), shared with main.py runs and the other test workers."""
  return Path(os.environ["JAX_COMPILATION_CACHE_DIR"])


def run_script(name: str, *args: str, cache: Path) -> subprocess.CompletedProcess:
  env = {**subprocess_env(), "JAX_PLATFORMS": "cpu"}
  cmd = [sys.executable, f"experiments/{name}", *args, "--compilation-cache", str(cache)]
  proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def _is_score(value: object) -> bool:
  return isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 100.0


def test_reproduce_paper_smoke(tmp_path: Path, compilation_cache: Path) -> None:
  out = tmp_path / "paper"
  args = ["--out", str(out), "--preset", "smoke", "--with-star", "--set", "decode.num_heatmaps=1"]
  proc = run_script("reproduce_paper.py", *args, cache=compilation_cache)
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
  assert len(list((out / "alignments").glob("*.png"))) == 1  # --set decode.num_heatmaps=1.

  summary = json.loads((out / "summary.json").read_text())
  assert {"runs", "table1", "total_wall_s", "runs_wall_s", "versions", "date"} <= set(summary)
  assert {"jax", "flax", "sacrebleu"} <= set(summary["versions"])
  assert list(summary["runs"]) == names
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
    assert rec["config"]["decode"]["num_heatmaps"] == 1  # --set reaches every run.
  star, base = summary["runs"]["RNNsearch-50*"], summary["runs"]["RNNsearch-50"]
  assert star["config"]["train"]["num_steps"] == 2 * base["config"]["train"]["num_steps"]
  assert star["seeded_from"] == "RNNsearch-50"
  assert star["results"]["test"]["step"] == star["config"]["train"]["num_steps"]

  # A second invocation reuses the finished runs instead of training again.
  run_script("reproduce_paper.py", *args, cache=compilation_cache)
  again = json.loads((out / "summary.json").read_text())
  assert all(rec["reused"] for rec in again["runs"].values())
  assert again["table1"] == summary["table1"]


def test_sweep_scores_smoke(tmp_path: Path, compilation_cache: Path) -> None:
  out = tmp_path / "sweep"
  args = ["--out", str(out), "--preset", "smoke", "--scores", "additive,dot", "--seeds", "0,1"]
  run_script("sweep_scores.py", *args, "--bootstrap-samples", "200", cache=compilation_cache)

  sweep = json.loads((out / "sweep.json").read_text())
  assert sweep["baseline"] == "additive" and sweep["seeds"] == [0, 1]
  assert sweep["training"] == "together"
  rows = {r["name"]: r for r in sweep["configurations"]}
  assert list(rows) == ["additive", "dot"]
  for name, row in rows.items():
    assert row["overrides"]["model.score"] == name
    assert row["seeds"] == [0, 1] and row["runs"] == [f"{name}-seed0", f"{name}-seed1"]
    assert _is_score(row["bleu_mean"]) and row["bleu_std"] >= 0.0
    assert 0.0 <= row["aer_mean"] <= 1.0 and row["attention_entropy_mean"] >= 0.0
    assert row["train_tokens_per_s_median"] > 0
  assert rows["additive"]["p_value_vs_baseline"] is None
  assert 0.0 < rows["dot"]["p_value_vs_baseline"] <= 1.0
  sig = sweep["significance"]
  assert sig["n_samples"] == 200 and sig["per_configuration"]["dot"]["seeds"] == [0, 1]
  for name in ("additive-seed0", "dot-seed0", "additive-seed1", "dot-seed1"):
    rec = sweep["runs"][name]
    assert rec["config"]["seed"] == int(name[-1]) and rec["wall_s"] > 0
    assert (Path(rec["workdir"]) / "eval" / "test" / "hypotheses.txt").exists()
    train_rows = [r for r in summary.read_metrics(rec["workdir"]) if r["split"] == "train"]
    assert train_rows and all(r["seeds_together"] == 2 for r in train_rows)
  assert "--config.model.score=dot" in sweep["runs"]["dot-seed0"]["command"]
  md = (out / "sweep.md").read_text()
  assert "| additive |" in md and "| dot |" in md
  assert (out / "sweep.png").stat().st_size > 0


def test_structural_study_smoke(tmp_path: Path, compilation_cache: Path) -> None:
  out = tmp_path / "structures"
  args = ["--out", str(out), "--preset", "smoke", "--variants", "soft,hard", "--seeds", "0"]
  args += ["--decode-sentences", "4", "--bootstrap-samples", "100"]
  run_script("structural_study.py", *args, cache=compilation_cache)

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
  pngs = ("study_bleu.png", "study_bleu_long.png", "study_decode_long.png", "study_step_ms.png")
  for name in pngs:
    assert (out / name).stat().st_size > 0


def test_alignment_study_smoke(tmp_path: Path, compilation_cache: Path) -> None:
  out = tmp_path / "study"
  variants = "additive,agreement,gnmt-beam"
  args = ["--out", str(out), "--preset", "smoke", "--variants", variants, "--seeds", "0"]
  run_script("alignment_study.py", *args, "--bootstrap-samples", "100", cache=compilation_cache)

  study = json.loads((out / "alignment_study.json").read_text())
  assert study["baseline"] == "additive" and study["long_split_words"] == [12, 18]
  trained = [r for r in study["runs"].values() if not r["decode_only_from"]]
  assert study["total_wall_s"] >= sum(r["wall_s"] for r in trained)
  rows = {r["name"]: r for r in study["configurations"]}
  assert list(rows) == variants.split(",")
  for row in rows.values():
    assert row["test_sentences"] == TEST_SENTENCES and 0 < row["test_long_sentences"] < 64
    for split in ("test", "test_long"):
      assert _is_score(row[f"{split}_bleu_mean"]) and _is_score(row[f"{split}_bleu_no_unk_mean"])
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
  for suffix in ("", "_long", "_aer"):
    assert (out / f"alignment_study{suffix}.png").stat().st_size > 0


def test_alignment_study_gives_identical_outputs_p_one(tmp_path: Path) -> None:
  from experiments import alignment_study as study

  variants = [v for v in study.VARIANTS if v.name in ("additive", "coverage", "gnmt-beam")]
  runs = study.build_runs("smoke", variants, [0, 1], tmp_path, {})
  for name, name_runs in runs.items():
    for run in name_runs:
      seed = run.config().seed
      text = f"the cat {seed}\n" if name != "coverage" or seed == 0 else "a dog\n"
      (run.workdir / "eval" / "test").mkdir(parents=True)
      (run.workdir / "eval" / "test" / "hypotheses.txt").write_text(text)
  significance = {name: {"p_value": 0.001} for name in runs}
  significance["additive"] = {"p_value": None}
  study.mark_identical(significance, runs, "test")
  assert significance["gnmt-beam"] == {"p_value": 1.0, "identical_to_baseline": True}
  assert significance["coverage"] == {"p_value": 0.001}  # Seed 1 differs.
  assert significance["additive"] == {"p_value": None}

"""experiments.reproduce_paper, the paper's Table 1 and Figs. 2 and 3: a smoke run of the
five models (JSON, Markdown, figures, a second invocation reusing them), means over seeds, and
the committed heatmaps kept on a redraw."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import TEST_SENTENCES, is_score, run_module


@pytest.mark.slow
def test_reproduce_paper_smoke(tmp_path: Path, cache_flags: list[str]) -> None:
  out = tmp_path / "paper"
  args = ["--out", str(out), "--preset", "smoke", "--with-star", "--set", "train.log_every=2"]
  run_module("experiments.reproduce_paper", *args, *cache_flags)

  names = ["RNNencdec-30", "RNNsearch-30", "RNNencdec-50", "RNNsearch-50", "RNNsearch-50*"]
  table = json.loads((out / "table1.json").read_text())
  assert [r["model"] for r in table["rows"]] == names
  for row in table["rows"]:
    assert is_score(row["bleu_all"]) and is_score(row["bleu_no_unk"])
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
  metrics = {name: Path(rec["workdir"], "metrics.jsonl") for name, rec in summary["runs"].items()}
  trained = {name: path.read_bytes() for name, path in metrics.items()}
  run_module("experiments.reproduce_paper", *args, *cache_flags)
  assert {name: path.read_bytes() for name, path in metrics.items()} == trained  # No step more.
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

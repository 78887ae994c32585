"""The statistics studies report (experiments/lib/stats and sweeps): the paired bootstrap and
approximate randomisation over seeds, the plateau budget of a learning curve (and
experiments.plateau), the last quarter's gain, and learning curves averaged over seeds."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import sacrebleu
from helpers import run_module

from experiments import plateau
from experiments.lib import plots, stats, sweeps
from experiments.lib.sweeps import Point, Sweep


def test_bootstrap_pools_seeds_and_gives_identical_outputs_p_one(tmp_path):
  points = [Point("additive", {}), Point("coverage", {}), Point("copy", {}, decode_from="additive")]
  sweep = Sweep("configs/tiny.py", points, [0, 1], tmp_path, {}, {})
  for point in points:
    for run in sweep.runs(point):
      seed = int(run.name[-1])
      text = "a dog sleeps\n" if point.name == "coverage" and seed == 1 else f"the cat {seed}\n"
      (run.workdir / "eval" / "test").mkdir(parents=True)
      (run.workdir / "eval" / "test" / "hypotheses.txt").write_text(text)
  result = sweeps.bootstrap(sweep, "additive", ["the cat 0"], n_samples=20, ar_trials=30)["bleu"]
  identical = {"p_value": 1.0, "identical_to_baseline": True, "ar_p_value": 1.0, "ar_trials": 30}
  assert result["copy"] == {**identical, "seeds": [0, 1]}
  assert 0.0 < result["coverage"]["p_value"] <= 1.0 and "signature" in result["coverage"]
  assert 0.0 < result["coverage"]["ar_p_value"] <= 1.0 and result["coverage"]["ar_trials"] == 30
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
    p[len(seeds)] = sweeps.bootstrap(sweep, "base", refs, n_samples=200)["bleu"]["system"][
      "p_value"
    ]
  assert 0.0 < p[1] < 1.0 and p[3] == pytest.approx(p[1])


def _systems(n: int = 80) -> tuple[list[str], list[str], list[str]]:
  """References and two systems whose errors fall on different sentences, unevenly (no two
  pseudo-systems of a trial tie by accident)."""
  refs = [f"w{i} the cat sat on the mat near {i % 7} dogs" for i in range(n)]
  base = [r.replace("cat", "dog") if i % 3 == 0 else r for i, r in enumerate(refs)]
  system = [r.replace("mat", "rug") if i % 5 == 1 else r for i, r in enumerate(refs)]
  system = [s + " too" if i % 11 == 0 else s for i, s in enumerate(system)]
  return refs, base, system


@pytest.mark.parametrize("metric, sacrebleu_metric", [("bleu", "BLEU"), ("chrf", "CHRF")])
def test_ar_of_one_seed_is_sacrebleus_paired_ar(metric, sacrebleu_metric, monkeypatch):
  """One seed against one: the p of `sacrebleu --paired-ar` with its default seed, exactly (the
  same draws, the same statistic; here no trial ties the observed difference)."""
  from sacrebleu.significance import PairedTest

  monkeypatch.delenv("SACREBLEU_SEED", raising=False)
  refs, base, system = _systems()
  ours = stats.paired_ar([base], [system], refs, n_trials=500, metric=metric)
  scorer = getattr(sacrebleu.metrics, sacrebleu_metric)(references=[refs])
  test = PairedTest([("base", base), ("system", system)], {metric: scorer}, None, "ar", 500)
  _, scores = test()
  theirs = next(v for k, v in scores.items() if k != "System")[1].p_value
  assert ours == {"ar_p_value": theirs, "ar_trials": 500} and 0.0 < theirs < 1.0


def test_ar_counts_a_tie_as_extreme_where_sacrebleu_does_not():
  """Systems that differ in one sentence: every trial's difference is the observed one, so
  nothing tells them apart (p = 1); sacrebleu counts only trials above it and reads
  1 / (trials + 1)."""
  from sacrebleu.significance import PairedTest

  refs, base, _ = _systems()
  system = [*base[:-1], refs[-1] + " extra"]
  assert stats.paired_ar([base], [system], refs, n_trials=200)["ar_p_value"] == 1.0
  scorer = sacrebleu.metrics.BLEU(references=[refs])
  _, scores = PairedTest([("b", base), ("s", system)], {"bleu": scorer}, None, "ar", 200)()
  assert scores["BLEU"][1].p_value == 1 / 201


def test_ar_swaps_a_sentences_seeds_together():
  """As in the bootstrap, the sentence is the unit: three seeds with the same outputs give one
  seed's p; and identical outputs give 1 without trials."""
  refs, base, system = _systems()
  one = stats.paired_ar([base], [system], refs, n_trials=300)
  assert stats.paired_ar([base] * 3, [system] * 3, refs, n_trials=300) == pytest.approx(one)
  assert 0.0 < one["ar_p_value"] < 1.0
  assert stats.paired_ar([base], [base], refs, n_trials=300)["ar_p_value"] == 1.0


def _decoder_grid(tmp_path):
  grid = {"model.decoder": ["paper", "luong"], "model.normaliser": ["softmax", "sparsemax"]}
  points = sweeps.grid_points(grid) + [
    Point("copy", {}, decode_from="decoder=paper+normaliser=softmax")
  ]
  return Sweep("configs/tiny.py", points, [0, 1], tmp_path, {}, {})


def test_within_pairs_each_point_with_its_groups_baseline(tmp_path):
  sweep = _decoder_grid(tmp_path)
  base = "decoder=paper+normaliser=softmax"
  # The baseline's own group is tested against the baseline already.
  assert sweeps.within_references(sweep, base, "model.decoder") == {
    "decoder=luong+normaliser=sparsemax": "decoder=luong+normaliser=softmax",
  }
  assert sweeps.within_references(sweep, base, "model.normaliser") == {
    "decoder=luong+normaliser=sparsemax": "decoder=paper+normaliser=sparsemax",
  }
  with pytest.raises(ValueError, match="--within model.score: no point sets it"):
    sweeps.within_references(sweep, base, "model.score")


def test_bootstrap_of_given_pairs_matches_each_pairs_own_baseline_test(tmp_path):
  """Tested within groups, a point gets the test it would get with its group's baseline as the
  study's baseline: the same resamples, the same p."""
  refs = [f"w{i} a b c d e" for i in range(30)]
  sweep = _decoder_grid(tmp_path)
  for k, point in enumerate(sweep.points):
    lines = [f"w{i} a b c d e" if i % (k + 2) else f"w{i} a x c d e" for i in range(30)]
    write_hypotheses(sweep, point, [lines, lines[::-1]])
  pairs = sweeps.within_references(sweep, "decoder=paper+normaliser=softmax", "model.decoder")
  n = {"n_samples": 100, "ar_trials": 100}
  within = sweeps.bootstrap(sweep, pairs, refs, **n, metrics=("bleu", "chrf"))
  assert set(within["bleu"]) == set(pairs) == set(within["chrf"])
  luong = "decoder=luong+normaliser=sparsemax"
  alone = sweeps.bootstrap(sweep, pairs[luong], refs, **n)["bleu"][luong]
  assert within["bleu"][luong] == alone and 0.0 < alone["p_value"] < 1.0


def test_bootstrap_p_is_one_for_equally_good_systems():
  """Two-sided and centred: systems with the same corpus BLEU (their errors on different
  sentences) differ by nothing, so p = 1; counting resamples whose absolute difference exceeds
  its mean read about 0.5 here."""
  refs = [f"w{i} a b c d e" for i in range(40)]
  base = [f"w{i} a b c d e" if i % 2 else f"w{i} a x c d e" for i in range(40)]
  system = [f"w{i} a x c d e" if i % 2 else f"w{i} a b c d e" for i in range(40)]
  result = stats.paired_bootstrap([base], [system], refs, n_samples=200)
  assert result["bleu"] == pytest.approx(result["baseline_bleu"]) and result["p_value"] == 1.0


def test_bootstrap_of_chrf_scores_the_pooled_seeds_as_sacrebleu_does():
  refs = [f"w{i} the cat sat on mats" for i in range(30)]
  base = [[f"w{i} a dog sat on rugs" for i in range(30)]] * 2
  system = [[f"w{i} the cat sat on rugs" for i in range(30)]]
  system.append([f"w{i} a cat sat" for i in range(30)])
  result = stats.paired_bootstrap(base, system, refs, n_samples=100, metric="chrf")
  pooled = sacrebleu.corpus_chrf(system[0] + system[1], [refs + refs]).score
  assert result["chrf"] == pytest.approx(pooled)
  assert result["baseline_chrf"] == pytest.approx(sacrebleu.corpus_chrf(base[0], [refs]).score)
  assert result["difference"] > 0 and result["p_value"] < 0.05 and "nc:6" in result["signature"]


def test_bootstrap_of_twin_peaks_pools_pairs_over_sentences_and_seeds():
  """The share is peaks over pairs of the resampled sentences, both seeds summed: here the
  baseline peaks on 2 of 8 pairs and the system on 6 of 8, a difference of +0.5."""
  base = [np.array([[2, 1], [0, 0], [2, 0]]), np.array([[2, 1], [0, 0], [2, 0]])]
  system = [np.array([[2, 2], [0, 0], [2, 1]]), np.array([[2, 2], [0, 0], [2, 1]])]
  result = stats.paired_bootstrap_twins(base, system, n_samples=200)
  assert result["identical_word_peaks"] == 0.75 and result["baseline_identical_word_peaks"] == 0.25
  assert result["difference"] == 0.5 and 0 < result["difference_ci95"][0] <= 0.5
  same = stats.paired_bootstrap_twins(base, base, n_samples=50)
  assert same["difference"] == 0 and same["p_value"] == 1.0


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


def test_spearman_is_the_correlation_of_mean_ranks_and_none_where_undefined():
  """Against ranks counted pair by pair (ties at their mean rank) and numpy's Pearson: random
  series with many ties, a perfect and a reversed order, and the undefined cases."""

  def reference(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    rank = lambda x: np.array([(x < v).sum() + ((x == v).sum() - 1) / 2 for v in x])  # noqa: E731
    return np.corrcoef(rank(a), rank(b))[0, 1]

  rng = np.random.default_rng(0)
  for n in (2, 3, 7, 20):
    a, b = rng.integers(0, 4, n), rng.normal(size=n)
    if len(set(a)) > 1:
      assert stats.spearman(a, b) == pytest.approx(reference(a, b), abs=1e-12)
  assert stats.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
  assert stats.spearman([1, 2, 3], [0.3, 0.2, 0.1]) == pytest.approx(-1.0)
  assert stats.spearman([0.5, 0.5, 0.5], [1, 2, 3]) is None  # A constant row ranks nothing.
  assert stats.spearman([1.0], [2.0]) is None
  with pytest.raises(ValueError, match="3 and 2"):
    stats.spearman([1, 2, 3], [1, 2])

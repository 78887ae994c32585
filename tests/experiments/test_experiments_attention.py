"""What the attention scripts measure from a study's runs: experiments.attention_sharpness
(relative entropy and largest weight, learned score scalars) and experiments.attention_offsets
(where identical words' attention peaks, per point and per head)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments import attention_offsets, attention_sharpness
from seq2seq import explorer, settings
from seq2seq import sharding as rt


def test_score_scalars_reads_cosines_learned_sharpness(tiny_config):
  tiny_config.model.score = "cosine(sharpness=7)"
  state = rt.initial_state(settings.validate(tiny_config), 30, 30, rt.Runtime())
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
    maps.append({"name": name, **explorer.encode_map(alpha)})
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

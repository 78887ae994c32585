"""Reranking n-best lists: the choice against sums worked out here, tuning that finds the weights
a constructed list needs, the reverse feature computed in process against main.py's score mode,
and the command line."""

import json
import math

import numpy as np
import pytest
from helpers import run_main, run_module

from seq2seq import rerank
from seq2seq.decoding.inference import Hypothesis
from seq2seq.translate import nbest_lines

# Two input lines (and a blank one between them), candidates best first by the model's score.
LISTS = [
  [("le chat dort", -1.0, -0.25), ("le chat dort bien .", -1.5, -0.25), ("chat", -3.0, -1.5)],
  [],
  [("une maison", -0.5, -0.17), ("une grande maison .", -2.0, -0.4)],
]


def write_nbest(path, lists=LISTS):
  """The list as translate mode writes it (`translate.nbest_lines`)."""
  lines = []
  for i, cands in enumerate(lists):
    hyps = [Hypothesis([], np.zeros((0, 0)), s, ns, text=t) for t, s, ns in cands]
    lines += nbest_lines(i, hyps)
  path.write_text("".join(line + "\n" for line in lines))
  return path


def test_the_choice_is_the_highest_weighted_sum(tmp_path):
  nbest = rerank.read_nbest(write_nbest(tmp_path / "n.txt"))
  assert nbest.texts[1] == [""] and nbest.features["score"][1] == [0.0]
  assert nbest.features["words"][0] == [3.0, 5.0, 1.0]
  assert rerank.choose(nbest, {"score": 1.0}) == [0, 0, 0]
  # score + 0.3 words: line 0 -1.0+0.9 | -1.5+1.5 | -3+0.3 -> 1; line 2 -0.5+0.6 | -2+1.2 -> 0.
  assert rerank.choose(nbest, {"score": 1.0, "words": 0.3}) == [1, 0, 0]
  assert rerank.choose(nbest, {"score": 1.0, "words": 0.8}) == [1, 0, 1]
  # A missing value of a weighted feature ranks its candidate last.
  nbest.add("other", [0.0, -math.inf, 0.0, 0.0, 0.0, 0.0])
  assert rerank.choose(nbest, {"score": 1.0, "words": 0.3, "other": 1.0}) == [0, 0, 0]
  assert rerank.choose(nbest, {"score": 1.0, "words": 0.3, "other": 0.0}) == [1, 0, 0]
  with pytest.raises(ValueError, match="feature x: 2 values for 6 n-best lines"):
    nbest.add("x", [1.0, 2.0])


def test_tuning_finds_the_weights_the_references_need(tmp_path):
  """References that are the longer candidates: with score alone BLEU is low; the tuned weights,
  each on the grid, pick every reference."""
  nbest = rerank.read_nbest(write_nbest(tmp_path / "n.txt"))
  references = ["le chat dort bien .", "", "une grande maison ."]
  first = rerank.METRICS["bleu"]([c[0] for c in nbest.texts], references)
  assert first < 60
  weights, value = rerank.tune(nbest, references)
  assert rerank.chosen_texts(nbest, weights) == references
  assert value == pytest.approx(100.0)
  assert weights["score"] == 1.0 and all(w in rerank.GRID for w in weights.values())
  assert rerank.tune(nbest, references) == (weights, value)  # Deterministic.


def test_the_nbest_reader_names_a_bad_line(tmp_path):
  bad = tmp_path / "bad.txt"
  bad.write_text("0 ||| a ||| -1.0 ||| -1.0\n2 ||| b ||| -1.0 ||| -1.0\n")
  with pytest.raises(ValueError, match="bad.txt, line 2: input line 2 out of order"):
    rerank.read_nbest(bad)
  bad.write_text("0 ||| a ||| x ||| -1.0\n")
  with pytest.raises(ValueError, match="line 1: not an n-best line"):
    rerank.read_nbest(bad)


def test_reverse_scores_are_what_score_mode_writes_and_the_cli_tunes_and_applies(trained, tmp_path):
  """The reverse feature computed in process equals `--feature=reverse=FILE` from main.py's
  score mode over the same pairs (candidates as input, sources as references), and the command
  line writes tuned weights and one translation per input line with them."""
  nbest_path = write_nbest(tmp_path / "n.txt")
  sources = ["the cat sleeps .", "", "a big house ."]
  (tmp_path / "src.txt").write_text("".join(s + "\n" for s in sources))
  nbest = rerank.read_nbest(nbest_path)
  in_process = rerank.reverse_scores(trained, nbest, sources)
  pairs = [(c, s) for cands, s in zip(nbest.texts, sources, strict=True) for c in cands]
  (tmp_path / "cands.txt").write_text("".join(c + "\n" for c, _ in pairs))
  (tmp_path / "srcs.txt").write_text("".join(s + "\n" for _, s in pairs))
  run_main(
    trained,
    "--config.train.num_steps=20",
    "--mode=score",
    f"--input={tmp_path}/cands.txt",
    f"--reference={tmp_path}/srcs.txt",
    f"--output={tmp_path}/reverse.jsonl",
  )
  from_file = rerank.read_score_feature(tmp_path / "reverse.jsonl")
  assert math.isinf(in_process[3]) and math.isinf(from_file[3])  # The blank line's "".
  np.testing.assert_allclose(in_process, from_file, rtol=1e-5)
  assert sum(math.isfinite(v) for v in in_process) == 5

  references = tmp_path / "ref.txt"
  references.write_text("le chat dort bien .\n\nune grande maison .\n")
  weights = tmp_path / "w.json"
  common = [f"--nbest={nbest_path}", f"--feature=rev={tmp_path}/reverse.jsonl"]
  run_module("seq2seq.rerank", *common, f"--references={references}", f"--tune={weights}")
  record = json.loads(weights.read_text())
  assert set(record["weights"]) == {"score", "norm_score", "words", "rev"}
  assert record["tuned"] >= record["first_best"]
  out = tmp_path / "out.txt"
  run_module("seq2seq.rerank", *common, f"--weights={weights}", f"--output={out}")
  chosen = out.read_text().split("\n")[:-1]
  nbest.add("rev", from_file)
  assert chosen == rerank.chosen_texts(nbest, record["weights"])
  refs = references.read_text().split("\n")[:-1]
  assert rerank.METRICS["bleu"](chosen, refs) == pytest.approx(record["tuned"])

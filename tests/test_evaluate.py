"""Metrics on hand-made examples: BLEU, No-UNK subset, length bins, AER, entropy, plots."""

import numpy as np
import pytest

from seq2seq import evaluate, plots
from seq2seq import tokenizer as tk

REFS = [
  "the cat sat on the mat .",
  "a dog barks at the moon tonight .",
  "le chat est sur le tapis rouge et noir ce soir .",
]


def test_bleu_of_reference_against_itself_is_100():
  score, signature = evaluate.bleu(REFS, REFS)
  assert score == pytest.approx(100.0, abs=1e-6)
  assert "tok:13a" in signature
  assert evaluate.tokenized_bleu(REFS, REFS) == pytest.approx(100.0, abs=1e-6)
  assert evaluate.chrf(REFS, REFS) == pytest.approx(100.0, abs=1e-6)
  assert evaluate.bleu(["x y z w"] * 3, REFS)[0] < 1.0


def test_no_unk_subset():
  assert evaluate.no_unk_subset([False, True, False, False], [False, False, True, False]) == [0, 3]


def test_bleu_by_length_bins_and_counts():
  hyps = [REFS[0], "completely wrong words here", REFS[2]]
  rows = evaluate.bleu_by_length(hyps, REFS, src_lengths=[7, 25, 28])
  assert [(r["min_len"], r["max_len"], r["count"]) for r in rows] == [(1, 10, 1), (21, 30, 2)]
  assert rows[0]["bleu"] == pytest.approx(100.0)
  want, _ = evaluate.bleu(hyps[1:], REFS[1:])
  assert rows[1]["bleu"] == pytest.approx(want)


def test_links_from_attention():
  alpha = np.array([[0.7, 0.2, 0.1], [0.1, 0.45, 0.45], [0.0, 0.1, 0.9]])
  assert evaluate.argmax_links(alpha) == {(0, 0), (1, 1), (2, 2)}
  assert evaluate.threshold_links(alpha, 0.4) == {(0, 0), (1, 1), (2, 1), (2, 2)}


def test_alignment_error_rate_hand_computed():
  gold = [{(0, 0), (1, 1), (2, 2)}]
  assert evaluate.alignment_error_rate(gold, gold) == 0.0
  assert evaluate.alignment_error_rate([{(0, 1), (1, 0)}], gold) == 1.0
  # Shifted by one target position: {(0,1),(1,2),(2,3)} shares (none) -> 1; a partial overlap:
  pred = [{(0, 0), (1, 1), (2, 1)}]  # |A|=3, |A&S|=2, |S|=3 -> 1 - 4/6.
  assert evaluate.alignment_error_rate(pred, gold) == pytest.approx(1 - 4 / 6)
  # Possible links count for precision only: (2,1) possible -> 1 - (2 + 3) / 6.
  assert evaluate.alignment_error_rate(pred, gold, [{(2, 1)}]) == pytest.approx(1 - 5 / 6)


def test_attention_entropy():
  uniform = np.full((2, 4), 0.25)
  assert evaluate.attention_entropy([uniform]) == pytest.approx(np.log(4))
  assert evaluate.attention_entropy([np.eye(3)]) == pytest.approx(0.0, abs=1e-9)


def test_plots_write_pngs(tmp_path):
  image = plots.alignment_heatmap(
    np.eye(3)[:, ::-1], ["a", "b", "c"], ["x", "y", "z"], tmp_path / "h.png"
  )
  assert (tmp_path / "h.png").stat().st_size > 0 and image.ndim == 3 and image.dtype == np.uint8
  rows = [{"min_len": 1, "max_len": 10, "count": 3, "bleu": 20.0}]
  plots.bleu_vs_length({"RNNsearch": rows}, tmp_path / "b.png")
  assert (tmp_path / "b.png").stat().st_size > 0


def test_bleu_is_on_detokenised_text(tmp_path):
  """Outputs equal to the references, written to a hypothesis file, score 100 against raw text."""
  refs = [
    "L'homme regarde aujourd'hui 3 chiens, qui courent.",
    "« Où est-il ? » demande l'enfant d'un air inquiet.",
    "Deux femmes, l'une en rouge, marchent.",
  ]
  vocab = tk.WordVocab.build(refs, 100, tk.Pretokenizer("moses", "fr"))
  src_vocab = tk.WordVocab.build(["x"], 10)
  hyps = [
    evaluate.output_text(
      evaluate.Translation(vocab.encode(r), np.zeros((0, 0))), "x", src_vocab, vocab
    )
    for r in refs
  ]
  path = tmp_path / "hypotheses.txt"
  path.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
  score, _ = evaluate.bleu(path.read_text(encoding="utf-8").splitlines(), refs)
  assert score == pytest.approx(100.0, abs=1e-6)
  joined = [" ".join(vocab.tokenize(r)) for r in refs]  # What scoring token ids would see.
  assert evaluate.bleu(joined, refs)[0] < 90.0

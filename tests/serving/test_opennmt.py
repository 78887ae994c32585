"""OpenNMT-py's REST format: what a body may hold, and the answer grouped by rank."""

import pytest

from seq2seq.serving import opennmt


def test_an_answer_holds_one_list_per_rank_each_in_input_order():
  hyps = [
    [{"text": "a1", "score": -1.0, "word_alignments": "0-0"}, {"text": "a2", "score": -2.0}],
    [{"text": "b1", "score": -0.5}, {"text": "b2", "score": -0.7}],
  ]
  out = opennmt.answer(["a", "b"], hyps)
  assert [[e["tgt"] for e in rank] for rank in out] == [["a1", "b1"], ["a2", "b2"]]
  assert out[0][0] == {"src": "a", "tgt": "a1", "n_best": 2, "pred_score": -1.0, "align": ["0-0"]}
  assert "align" not in out[0][1]


@pytest.mark.parametrize(
  ("body", "field"),
  [
    ({"src": "a"}, None),
    ([], None),
    (["a"], "[0].src"),
    ([{"src": 3}], "[0].src"),
    ([{"src": "a", "id": True}], "[0].id"),
    ([{"src": "a", "tgt": "b"}], "[0].tgt"),
  ],
)
def test_a_body_not_in_the_format_is_refused_naming_the_entry(body, field):
  with pytest.raises(opennmt.FormatError) as e:
    opennmt.sources(body)
  assert e.value.field == field


def test_the_sources_of_a_body_in_order():
  assert opennmt.sources([{"src": "a", "id": 100}, {"src": "b"}]) == ["a", "b"]

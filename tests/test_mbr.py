"""Minimum Bayes risk (`seq2seq.mbr`): expected utilities against values worked out by hand,
the choice of a consensus, the settings' checks, and MBR through the Python API."""

import numpy as np
import pytest

from configs import tiny
from seq2seq import mbr, settings

SAME = lambda hyp, ref: float(hyp == ref)  # Exact match: MBR then picks the most drawn text.


def test_expected_utilities_by_hand():
  # Uniform: a's evidence is {a, b}: (1 + 0) / 2; b's is {a, a}: 0.
  got = mbr.expected_utilities(["a", "a", "b"], SAME, np.ones(3))
  np.testing.assert_allclose(got, [0.5, 0.5, 0.0])
  # Weights 1, 2, 1: the first a's evidence is a (2) and b (1): 2/3; the second's 1/2.
  got = mbr.expected_utilities(["a", "a", "b"], SAME, np.array([1.0, 2.0, 1.0]))
  np.testing.assert_allclose(got, [2 / 3, 1 / 2, 0.0])
  np.testing.assert_allclose(mbr.expected_utilities(["a"], SAME, np.ones(1)), [0.0])


def test_model_evidence_weighs_by_probability():
  np.testing.assert_allclose(mbr.evidence_weights([np.log(0.2), np.log(0.4)], "model"), [0.5, 1])
  np.testing.assert_allclose(mbr.evidence_weights([-3.0, -1.0], "uniform"), [1, 1])


@pytest.mark.parametrize("utility", ["chrf", "bleu"])
def test_mbr_picks_the_consensus_not_the_most_probable(utility):
  texts = ["a dog runs home", "the cat sat on the mat", "the cat sat on a mat", "the cat sat"]
  scores = [-1.0, -5.0, -6.0, -7.0]  # The outlier is the most probable.
  order = mbr.order(texts, scores, mbr.Mbr(utility=utility))
  assert order[0] in (1, 2) and order[-1] == 0


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("mbr", "mbr(utility=ter)", "utility must be one of chrf, bleu"),
    ("mbr", "mbr(evidence=all)", "evidence must be one of uniform, model"),
    ("mbr", "rerank", "use '' \\(off\\) or mbr"),
  ],
)
def test_bad_mbr_specs_fail_with_one_clear_line(field, value, message):
  config = tiny.get_config()
  config.decode[field] = value
  with pytest.raises(ValueError, match=message):
    settings.validate(config)


def test_mbr_needs_several_candidates():
  config = tiny.get_config()
  config.decode.mbr = "mbr"
  config.decode.beam_size = 1
  with pytest.raises(ValueError, match="chooses among candidates"):
    settings.validate(config)
  config.decode.sampling = "sample(n=8)"
  assert settings.validate(config).decode.candidates() == 8

"""Minimum Bayes risk (`seq2seq.decoding.mbr`): expected utilities against values worked out by hand
and a brute-force reference, the choice of a consensus, the settings' checks."""

import numpy as np
import pytest

from configs import tiny
from seq2seq import settings
from seq2seq.decoding import mbr

SAME = lambda hyp, ref: float(hyp == ref)  # Exact match: MBR then picks the most drawn text.


def test_expected_utilities_by_hand():
  # Uniform: the evidence is a (mass 2 of 3) and b (1 of 3), each candidate's own text included.
  got = mbr.expected_utilities(["a", "a", "b"], SAME, np.ones(3))
  np.testing.assert_allclose(got, [2 / 3, 2 / 3, 1 / 3])
  # Weights 1, 2, 1: a pools 3 of 4, b has 1 of 4; both a's score alike.
  got = mbr.expected_utilities(["a", "a", "b"], SAME, np.array([1.0, 2.0, 1.0]))
  np.testing.assert_allclose(got, [3 / 4, 3 / 4, 1 / 4])
  np.testing.assert_allclose(mbr.expected_utilities(["a"], SAME, np.ones(1)), [1.0])


def test_model_evidence_weighs_by_probability():
  np.testing.assert_allclose(mbr.evidence_weights([np.log(0.2), np.log(0.4)], "model"), [0.5, 1])
  np.testing.assert_allclose(mbr.evidence_weights([-3.0, -1.0], "uniform"), [1, 1])


def brute_force(texts, probs, utility):
  """Kumar and Byrne's expected utility, plainly: E(i) = sum over distinct texts t of
  P(t) u(c_i, t), P the candidates' probabilities merged by text and normalised."""
  mass = {}
  for text, p in zip(texts, probs, strict=True):
    mass[text] = mass.get(text, 0.0) + float(p)
  total = sum(mass.values())
  return [sum(p / total * utility(hyp, ref) for ref, p in mass.items()) for hyp in texts]


@pytest.mark.parametrize(
  "utility, texts",  # u(first, second) > u(second, first): a candidate's own mass decides.
  [("chrf", ["the cat sat on the mat", "the cat sat"]), ("bleu", ["the cat", "the cat sat"])],
)
def test_model_evidence_keeps_each_candidates_own_probability(utility, texts):
  # Kumar and Byrne (2004, eq. 2): with p 0.1 and 0.9, the 0.9 candidate is the choice.
  u = mbr.UTILITIES[utility]()
  assert u(*texts) > u(*texts[::-1])
  order = mbr.order(texts, np.log([0.1, 0.9]), mbr.Mbr(utility=utility, evidence="model"))
  assert order == [1, 0]


def test_identical_texts_get_identical_expected_utility():
  texts = ["a b c", "a b d", "a b c", "x y"]
  for weights in (np.ones(4), np.array([0.4, 0.3, 0.1, 0.2])):
    got = mbr.expected_utilities(texts, mbr.UTILITIES["chrf"](), weights)
    assert got[0] == got[2]


@pytest.mark.parametrize(
  "texts, probs",
  [
    (["a b", "b c"], [0.9, 0.1]),
    (["the cat sat", "the cat sat on the mat", "a cat sat", "the cat sat"], [0.3, 0.1, 0.2, 0.4]),
    (["one two three", "one two", "four", "one two", "one two three"], [0.05, 0.3, 0.4, 0.1, 0.15]),
    (["x", "x", "y"], [1.0, 1.0, 1.0]),  # Uniform: x weighs twice what y does.
    (["only"], [1.0]),
  ],
)
@pytest.mark.parametrize("utility", ["chrf", "bleu"])
def test_expected_utilities_match_brute_force(texts, probs, utility):
  u = mbr.UTILITIES[utility]()
  want = brute_force(texts, probs, u)
  np.testing.assert_allclose(mbr.expected_utilities(texts, u, np.array(probs)), want, rtol=1e-12)
  scores = np.log(probs)  # Model evidence from log-probabilities: the same expectations.
  weights = mbr.evidence_weights(scores, "model")
  np.testing.assert_allclose(mbr.expected_utilities(texts, u, weights), want, rtol=1e-12)
  order = mbr.order(texts, scores, mbr.Mbr(utility=utility, evidence="model"))
  assert order == sorted(range(len(texts)), key=lambda i: -want[i])


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


def test_model_evidence_is_refused_over_samples():
  # Samples are drawn in proportion to p: weighting them by p again would use p squared.
  config = tiny.get_config()
  config.decode.mbr = "mbr(evidence=model)"
  config.decode.sampling = "sample(n=8)"
  with pytest.raises(ValueError, match="evidence=model weighs an n-best list"):
    settings.validate(config)
  config.decode.mbr = "mbr(evidence=uniform)"
  assert settings.validate(config).decode.candidates() == 8
  config.decode.mbr, config.decode.sampling, config.decode.beam_size = "mbr(evidence=model)", "", 4
  assert settings.validate(config).decode.candidates() == 4

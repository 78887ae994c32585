"""sacrebleu's private API that experiments/lib/stats.py scores with: the paired bootstrap and
approximate randomisation take each sentence's statistics from `_extract_corpus_statistics` and
a corpus score from summed ones with `_compute_score_from_stats`. sacrebleu may change either in
any release; these tests fail first, naming the version and the name that changed, rather than
the study tables going wrong quietly."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import sacrebleu
from sacrebleu.metrics import BLEU, CHRF

from experiments.lib import stats

# The private names stats.py calls, with the parameters it passes (after self).
USED = {
  "_extract_corpus_statistics": ["hypotheses", "references"],
  "_compute_score_from_stats": ["stats"],
}
HYPOTHESES = ["the cat sat on the mat", "a dog ran in the park today"]
REFERENCES = ["the cat is on the mat", "the dog ran in the park"]
# What sacrebleu 2.6.0 gives for them. BLEU: hypothesis and reference length, then n-gram
# matches and totals for n = 1..4; chrF: per n-gram order (characters 1..6) hypothesis,
# reference and matching counts.
KNOWN = {
  BLEU: (
    [[6, 6, 5, 3, 1, 0, 6, 5, 4, 3], [7, 6, 5, 4, 3, 2, 7, 6, 5, 4]],
    49.93187332111509,
  ),
  CHRF: (
    [
      [17, 16, 15, 16, 15, 12, 15, 14, 10, 14, 13, 8, 13, 12, 6, 12, 11, 4],
      [21, 18, 16, 20, 17, 14, 19, 16, 13, 18, 15, 12, 17, 14, 11, 16, 13, 10],
    ],
    72.0613831511655,
  ),
}


def changed(what: str) -> str:
  return (
    f"sacrebleu {sacrebleu.__version__}: {what}. experiments/lib/stats.py's paired bootstrap and "
    "approximate randomisation call this private API (written against sacrebleu 2.6.0): adapt "
    "them to the new version, or pin sacrebleu==2.6.0."
  )


@pytest.mark.parametrize("scorer", [BLEU, CHRF], ids=lambda c: c.__name__)
def test_the_private_methods_stats_calls_exist_with_its_parameters(scorer):
  for name, params in USED.items():
    method = getattr(scorer, name, None)
    if not callable(method):
      pytest.fail(changed(f"{scorer.__name__}.{name} is gone"))
    found = list(inspect.signature(method).parameters)[1:]
    if found != params:
      pytest.fail(changed(f"{scorer.__name__}.{name} takes {found}, not {params}"))


def call(scorer: type, name: str, *args: object) -> object:
  try:
    return getattr(scorer(), name)(*args)
  except Exception as e:  # Whatever a changed method raises, said with the version.
    pytest.fail(changed(f"{scorer.__name__}.{name} raises {e!r}"))


@pytest.mark.parametrize("scorer", [BLEU, CHRF], ids=lambda c: c.__name__)
def test_the_private_methods_give_the_known_numbers(scorer):
  statistics, score = KNOWN[scorer]
  found = call(scorer, "_extract_corpus_statistics", HYPOTHESES, [REFERENCES])
  if [[int(x) for x in s] for s in found] != statistics:
    pytest.fail(
      changed(f"{scorer.__name__}._extract_corpus_statistics gives {found}, not {statistics}")
    )
  result = call(scorer, "_compute_score_from_stats", list(np.sum(statistics, axis=0)))
  if getattr(result, "score", None) != pytest.approx(score, rel=1e-12):
    pytest.fail(changed(f"{scorer.__name__}._compute_score_from_stats gives {result}, not {score}"))


@pytest.mark.parametrize("metric, scorer", [("bleu", BLEU), ("chrf", CHRF)])
def test_stats_scores_as_sacrebleus_public_corpus_score(metric, scorer):
  """What stats.py builds from the private methods (statistics pooled, then scored) is the
  score sacrebleu's public `corpus_score` gives the same text."""
  scorer_, score = stats._scorer(metric)
  pooled = stats.pooled_statistics(scorer_, [HYPOTHESES], REFERENCES)
  public = scorer().corpus_score(HYPOTHESES, [REFERENCES]).score
  if score(pooled.sum(0)) != pytest.approx(public, rel=1e-12):
    pytest.fail(
      changed(
        f"{metric} from summed `_extract_corpus_statistics` through `_compute_score_from_stats` "
        f"is {score(pooled.sum(0))}, corpus_score {public}"
      )
    )

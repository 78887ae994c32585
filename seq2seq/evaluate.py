"""Translation and alignment metrics, the paper's ways.

* `bleu`: sacrebleu corpus BLEU on detokenised text (13a tokenisation, signature kept), and
  `tokenized_bleu` on whitespace-tokenised text as the paper reports it (multi-bleu style).
* `no_unk_subset`: the sentences with no unknown word in the source or the reference (the
  paper's "No UNK" column).
* `bleu_by_length`: BLEU per bin of source length (bins of 10 words, the paper's Fig. 2).
* `alignment_error_rate`: AER of attention-derived links against gold links (Och and Ney), with
  argmax and thresholded attention; `attention_entropy`.

Alignment links are (source index, target index) pairs, 0-based, as the corpus writes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import sacrebleu

Link = tuple[int, int]


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
  """(corpus BLEU, sacrebleu signature) with sacrebleu's default 13a tokenisation."""
  metric = sacrebleu.metrics.BLEU()
  score = metric.corpus_score(list(hypotheses), [list(references)])
  return float(score.score), str(metric.get_signature())


def tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """BLEU on text that is already tokenised (split on whitespace only), as multi-bleu.perl."""
  metric = sacrebleu.metrics.BLEU(tokenize="none", force=True)
  return float(metric.corpus_score(list(hypotheses), [list(references)]).score)


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """Corpus chrF (sacrebleu defaults)."""
  return float(sacrebleu.metrics.CHRF().corpus_score(list(hypotheses), [list(references)]).score)


def no_unk_subset(src_has_unk: Sequence[bool], ref_has_unk: Sequence[bool]) -> list[int]:
  """Indices of sentences with no unknown word on either side."""
  return [i for i, (s, r) in enumerate(zip(src_has_unk, ref_has_unk, strict=True)) if not (s or r)]


def bleu_by_length(
  hypotheses: Sequence[str],
  references: Sequence[str],
  src_lengths: Sequence[int],
  bin_width: int = 10,
) -> list[dict]:
  """BLEU per source-length bin [1-10], [11-20], ...: {"min_len", "max_len", "count", "bleu"}.

  Empty bins are left out; bins run up to the longest source.
  """
  lengths = np.asarray(src_lengths)
  rows = []
  top = int(lengths.max()) if len(lengths) else 0
  for lo in range(1, top + 1, bin_width):
    hi = lo + bin_width - 1
    idx = np.flatnonzero((lengths >= lo) & (lengths <= hi))
    if len(idx):
      score, _ = bleu([hypotheses[i] for i in idx], [references[i] for i in idx])
      rows.append({"min_len": lo, "max_len": hi, "count": len(idx), "bleu": score})
  return rows


def argmax_links(alpha_TS: np.ndarray) -> set[Link]:
  """One link per target word: the source position with the highest attention weight."""
  return {(int(j), t) for t, j in enumerate(np.argmax(alpha_TS, axis=1))}


def threshold_links(alpha_TS: np.ndarray, threshold: float = 0.3) -> set[Link]:
  """Every (source, target) pair whose attention weight reaches `threshold`."""
  ts, ss = np.nonzero(alpha_TS >= threshold)
  return {(int(s), int(t)) for t, s in zip(ts, ss, strict=True)}


def alignment_error_rate(
  predicted: Iterable[set[Link]], sure: Iterable[set[Link]], possible=None
) -> float:
  """Corpus AER = 1 - (|A & S| + |A & P|) / (|A| + |S|); P defaults to S (gold links only).

  0 for a perfect alignment, 1 for a disjoint one.
  """
  predicted, sure = list(predicted), list(sure)
  possible = sure if possible is None else list(possible)
  a_s = a_p = a = s = 0
  for pred, gold_s, gold_p in zip(predicted, sure, possible, strict=True):
    gold_p = gold_p | gold_s
    a_s += len(pred & gold_s)
    a_p += len(pred & gold_p)
    a += len(pred)
    s += len(gold_s)
  return 1.0 - (a_s + a_p) / max(a + s, 1)


def attention_entropy(alphas: Iterable[np.ndarray]) -> float:
  """Mean over target words of the entropy (nats) of their attention distribution."""
  values = []
  for alpha in alphas:
    p = np.clip(np.asarray(alpha, np.float64), 1e-12, 1.0)
    values.extend((-(p * np.log(p)).sum(axis=1)).tolist())
  return float(np.mean(values)) if values else 0.0

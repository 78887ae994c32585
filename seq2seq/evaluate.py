"""Translation and alignment metrics, the paper's ways.

* `bleu`: sacrebleu corpus BLEU on detokenised text (13a tokenisation, signature kept), the
  headline figure, and `tokenized_bleu` on text split into the target side's words as the paper
  reports it (multi-bleu.perl on tokenised text): `bleu_words` says how each tokenizer kind
  splits, `bleu_conventions` writes every figure's convention into results.json.
* `no_unk_subset`: the sentences with no unknown word in the source or the reference. The
  paper's "No UNK" column (`bleu_no_unk`) scores them decoded again with UNK forbidden
  (GroundHog's --ignore-unk); `bleu_no_unk_plain` scores the same sentences from the ordinary
  decoding.
* `bleu_by_length`: BLEU per bin of source length (bins of 10 words, the paper's Fig. 2).
* `alignment_error_rate`: AER of attention-derived links against gold links (Och and Ney), with
  argmax and thresholded attention, and after `shift_links` moves them one target position
  either way (`shifted_aer`; Koehn and Knowles 2017: attention often points at the word before
  or after);
  `attention_entropy`.
* `over_translation` (output words repeated beyond their count in the reference) and
  `under_translation` (source content words that no output word attends to most).
* `identical_word_offsets`: where no gold links exist (real text), the output words spelled like a
  source word (names, numbers, cognates) are links known without an aligner; where the attention
  that produced such a word peaks, counted from its source twin (`twin_figures`: the share on it,
  "twin peaks", and one or two words either side).

Alignment links are (source index, target index) pairs, 0-based, as the corpus writes them: they
index whitespace words. With SentencePiece the attention over pieces is mapped to words first
(`pieces_to_words`: a source word sums its pieces, a target word averages them), for AER,
entropy and under-translation alike; results.json records it as `aer_subword_mapping`.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import jax
import numpy as np
import sacrebleu
from flax import nnx

from seq2seq import console, copying, decode, files, input_pipeline, models, plots, report
from seq2seq import tokenizer as tok
from seq2seq.data import builders, synthetic
from seq2seq.decode import replace_unknowns

Link = tuple[int, int]


UNK_SCORED = "\u2047"  # "⁇": one 13a and Moses token, in no reference.


def scored_text(hypotheses: Sequence[str]) -> list[str]:
  """The hypotheses as every metric reads them: each "<unk>" written "⁇" (SentencePiece's mark
  for an unknown piece), one word that matches nothing, as multi-bleu.perl counts GroundHog's
  UNK. sacrebleu's 13a and Moses split the text "<unk>" into three words, "< unk >", which
  lengthen the output and cost 1.7 BLEU on Multi30k's validation set at 1.5% unknown words."""
  return [h.replace(tok.UNK, UNK_SCORED) for h in hypotheses]


def bleu(
  hypotheses: Sequence[str],
  references: Sequence[str],
  *,
  pretokenized: bool = False,
  lowercase: bool = False,
) -> tuple[float, str]:
  """(corpus BLEU, sacrebleu signature) with sacrebleu's default 13a tokenisation, of the
  lowercased texts with `lowercase` (the convention of the published Multi30k figures).

  `pretokenized` says the texts are written tokenised by design (`pretokenized(config)`: the
  embedded corpus), which turns off sacrebleu's warning about tokenised input; the score and
  signature are the same either way.
  """
  metric = sacrebleu.metrics.BLEU(force=pretokenized, lowercase=lowercase)
  score = metric.corpus_score(scored_text(hypotheses), [list(references)])
  return float(score.score), str(metric.get_signature())


def pretokenized(config) -> bool:
  """Whether the run's corpus text is written tokenised: the embedded corpus is generated with
  its punctuation as words of their own ("le chat dort ."), so that text is both its plain and
  its tokenised form and the sacrebleu warning that lines "end in a tokenized period" is a
  false alarm. Local text and WMT'14 are plain text (detokenised hypotheses are scored)."""
  return config.data.corpus == "synthetic"


def bleu_words(text: str, tokenizer: tok.Tokenizer | None = None, lang: str = "") -> list[str]:
  """The words of plain `text` that tokenised BLEU counts n-grams of.

  A word vocabulary splits as it does for training (`tokenizer.tokenize`: whitespace, or Moses
  for its language with `data.pretokenizer="moses"`), so "chat." is "chat ." when the run saw it
  so. SentencePiece pieces are not words (n-grams of pieces would inflate the score), so a
  SentencePiece run splits with the Moses tokenizer of `lang`, the target language: the
  multi-bleu.perl convention on real text. On the embedded corpus, written pre-split, that is
  the whitespace split except for words with an apostrophe ("l'" -> "l '", "'s" -> "' s",
  "aujourd'hui" -> "aujourd' hui"). Without a tokenizer the text is taken as already tokenised.
  """
  if tokenizer is None:
    return text.split()
  if isinstance(tokenizer, tok.SentencePieceTokenizer):
    return tok.moses_tokenizer(lang).tokenize(text, escape=False)
  return tokenizer.tokenize(text)


def tokenized_bleu(
  hypotheses: Sequence[str],
  references: Sequence[str],
  tokenizer: tok.Tokenizer | None = None,
  lang: str = "",
) -> float:
  """BLEU on both sides split by `bleu_words(text, tokenizer, lang)` and joined with single
  spaces, scored without further tokenisation (sacrebleu tokenize="none"): what multi-bleu.perl
  computes on tokenised text. Without a tokenizer the texts must already be tokenised."""
  split = lambda texts: [" ".join(bleu_words(t, tokenizer, lang)) for t in texts]
  metric = sacrebleu.metrics.BLEU(tokenize="none", force=True)
  return float(metric.corpus_score(split(scored_text(hypotheses)), [split(references)]).score)


def bleu_conventions(
  tokenizer: tok.Tokenizer, lang: str = "", pretokenized: bool = False
) -> dict[str, str]:
  """One line per BLEU-like figure of results.json saying which tokenisation it scores."""
  if isinstance(tokenizer, tok.SentencePieceTokenizer):
    words = f"sacremoses' Moses tokenizer ({lang or 'en'}; SentencePiece pieces are not words)"
  elif isinstance(tokenizer, tok.WordVocab) and tokenizer.pretokenizer.name == "moses":
    words = f"the target vocabulary's moses pretokenizer ({tokenizer.pretokenizer.lang})"
  else:
    words = "whitespace (the target vocabulary's word split)"
  detok = "sacrebleu 13a on detokenised text (signature in bleu_signature)"
  if pretokenized:
    detok += (
      "; the embedded corpus is written tokenised (punctuation split off), so its text is "
      "scored as it is, with sacrebleu's tokenised-input warning off (force=True: same score)"
    )
  return {
    "bleu": detok,
    "bleu_no_unk": (
      f"{detok}, sentences with no <unk> in source or reference, decoded again with <unk> "
      "forbidden (the paper's protocol, GroundHog's --ignore-unk)"
    ),
    "bleu_no_unk_plain": f"{detok}, the same sentences from the ordinary decoding",
    "bleu_by_length": f"{detok}, per source-length bin (source words split on whitespace)",
    "bleu_tokenized": f"sacrebleu tokenize=none (multi-bleu.perl) on both sides split by {words}",
    "chrf": "sacrebleu chrF defaults on detokenised text (character n-grams, spaces ignored)",
    "bleu_lowercase": f"{detok}, both sides lowercased",
    "chrf_lowercase": "sacrebleu chrF defaults on detokenised text, both sides lowercased",
  }


def chrf(hypotheses: Sequence[str], references: Sequence[str], *, lowercase: bool = False) -> float:
  """Corpus chrF (sacrebleu defaults; of the lowercased texts with `lowercase`)."""
  metric = sacrebleu.metrics.CHRF(lowercase=lowercase)
  return float(metric.corpus_score(scored_text(hypotheses), [list(references)]).score)


def count_unk(ids) -> int:
  """How many <unk> ids `ids` holds."""
  return int(np.count_nonzero(np.asarray(ids) == tok.UNK_ID))


def no_unk_subset(src_has_unk: Sequence[bool], ref_has_unk: Sequence[bool]) -> list[int]:
  """Indices of sentences with no unknown word on either side."""
  return [i for i, (s, r) in enumerate(zip(src_has_unk, ref_has_unk, strict=True)) if not (s or r)]


def bleu_by_length(
  hypotheses: Sequence[str],
  references: Sequence[str],
  src_lengths: Sequence[int],
  bin_width: int = 10,
  *,
  pretokenized: bool = False,
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
      hyps, refs = [hypotheses[i] for i in idx], [references[i] for i in idx]
      score, _ = bleu(hyps, refs, pretokenized=pretokenized)
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


def shift_links(links: Iterable[Link], shift: int, num_target: int) -> set[Link]:
  """Links moved `shift` target positions, (s, t) -> (s, t + shift); those leaving
  [0, num_target) are dropped."""
  return {(s, t + shift) for s, t in links if 0 <= t + shift < num_target}


def shifted_aer(
  predicted: Sequence[set[Link]], gold: Sequence[set[Link]], shift: int, num_targets: Sequence[int]
) -> float:
  """Corpus AER of the predicted links moved `shift` target positions (`shift_links`), against
  the gold links of the target words a moved link can reach: shifted back (-1) no step's link
  lands on the last word, shifted forward (+1) none on the first, so their gold links, which
  no alignment could match, are left out. Attention exactly one word off scores 0."""
  moved, reachable = [], []
  for links, sure, n in zip(predicted, gold, num_targets, strict=True):
    moved.append(shift_links(links, shift, n))
    reachable.append({(s, t) for s, t in sure if 0 <= t - shift < n})
  return alignment_error_rate(moved, reachable)


def over_translation(hypothesis: Sequence[str], reference: Sequence[str]) -> int:
  """Repeated output words beyond the reference: sum_w max(0, n_hyp(w) - max(1, n_ref(w))).

  Output words holding `<unk>` are left out: each stands for a word the vocabulary lacks,
  perhaps a different one each time, and matches nothing (as in every other metric)."""
  hyp = collections.Counter(w for w in hypothesis if tok.UNK not in w)
  ref = collections.Counter(reference)
  return sum(max(0, n - max(1, ref[w])) for w, n in hyp.items())


def identical_word_offsets(
  alpha_TS: np.ndarray, output_words: Sequence[str], source_words: Sequence[str]
) -> list[int]:
  """For each output word spelled like a source word (case and SentencePiece's "▁" ignored)
  that occurs once in the output and once in the source, holds a letter or digit and is no
  `<unk>`: where its attention row peaks, counted from that source word (0: on it; +1: on the
  word after it; -1: on the word before).

  Such a pair is a link known without gold alignments (a name, a number, a cognate such as
  "orange"), so the share of zeros ("twin peaks") measures on any corpus whether attention points
  where the word came from, and the other offsets whether attention that misses is shifted
  (Koehn and Knowles 2017) or lost. alpha_TS: attention of the output words over the source
  words [T, S'] (S' >= the number of source words; extra columns, such as the source EOS, are
  ignored).
  """

  def norm(words):
    return [w.replace(WORD_START, "").lower() for w in words]

  out, src = norm(output_words), norm(source_words)
  out_n, src_n = collections.Counter(out), collections.Counter(src)
  alpha = np.asarray(alpha_TS)[:, : len(src)]
  return [
    int(np.argmax(alpha[t])) - src.index(w)
    for t, w in enumerate(out)
    if out_n[w] == src_n[w] == 1 and tok.UNK not in w and any(c.isalnum() for c in w)
  ]


TWIN_OFFSETS = (-2, -1, 0, 1, 2)  # The offsets whose shares results.json reports.


def twin_figures(offsets: Sequence[int]) -> dict:
  """results.json's twin-word figures from `identical_word_offsets` over a split: the number of
  pairs, the share that peaks on the twin, and the share at each of TWIN_OFFSETS (None without
  pairs)."""
  n = len(offsets)
  counts = collections.Counter(offsets)
  return {
    "identical_words": n,
    "identical_word_peaks": counts[0] / n if n else None,
    "identical_word_offsets": {f"{k:+d}": counts[k] / n for k in TWIN_OFFSETS} if n else None,
  }


CONTENT_RANK = 50  # Content words: source words outside the 50 most frequent ones.
CONTENT_SAMPLE = 20_000  # Training sentences whose words `frequent_words` counts.


def under_translation(
  alpha_TS: np.ndarray,
  src_ids: Sequence[int],
  src_spans: Sequence[tuple[int, int]] | None = None,
  frequent: set[tuple[int, ...]] | None = None,
) -> int:
  """Source content words that are the argmax of no output word's attention.

  alpha_TS: attention of the output words over the source words [T, S'] (S' >= the number of
  source words; extra columns, such as the source EOS, are ignored). src_ids: the source ids
  [L]; src_spans: the [start, end) range of each source word in them (default: one id a word).
  A content word is one outside the CONTENT_RANK most frequent source words. By default that
  is read off a frequency-ranked word vocabulary: id >= 4 + CONTENT_RANK (so <unk>, id 3,
  counts as frequent). SentencePiece ids do not rank words, so subword runs pass `frequent`,
  the most frequent words as tuples of their ids (`frequent_words`), and a word is content when
  its ids are not among them.
  """
  ids = np.asarray(src_ids).tolist()
  spans = [(i, i + 1) for i in range(len(ids))] if src_spans is None else list(src_spans)
  if not spans:
    return 0
  attended = set(np.argmax(np.asarray(alpha_TS)[:, : len(spans)], axis=1).tolist())
  if frequent is None:
    content = [ids[a] >= tok.NUM_SPECIALS + CONTENT_RANK for a, _ in spans]
  else:
    content = [tuple(ids[a:b]) not in frequent for a, b in spans]
  return sum(c and j not in attended for j, c in enumerate(content))


def frequent_words(
  split: input_pipeline.Split,
  tokenizer: tok.Tokenizer,
  top: int = CONTENT_RANK,
  max_sentences: int = CONTENT_SAMPLE,
) -> set[tuple[int, ...]]:
  """The `top` most frequent source words of the first `max_sentences` sentences of `split`
  (the training split), each as the tuple of its ids (`id_spans` groups pieces into words).

  With the embedded corpus these are its most frequent whitespace words (up to ties): the
  words a word vocabulary would give ids below 4 + `top`. Ties go to the word seen first.
  """
  counts: collections.Counter[tuple[int, ...]] = collections.Counter()
  for i in range(min(len(split), max_sentences)):
    ids = split.src.row(i).tolist()
    counts.update(tuple(ids[a:b]) for a, b in id_spans(tokenizer, ids))
  return {word for word, _ in counts.most_common(top)}


def attention_entropy(alphas: Iterable[np.ndarray]) -> float:
  """Mean over target words of the entropy (nats) of their attention distribution, each row
  renormalised first: local-p's Gaussian leaves rows summing to less than 1, which would read
  as sharper attention than it is (rows of zeros are left out)."""
  values = []
  for alpha in alphas:
    rows = np.asarray(alpha, np.float64).reshape(-1, np.shape(alpha)[-1])
    total = rows.sum(axis=1)
    p = np.clip(rows[total > 0] / total[total > 0, None], 1e-12, 1.0)
    values.extend((-(p * np.log(p)).sum(axis=1)).tolist())
  return float(np.mean(values)) if values else 0.0


# ----------------------------------------------------------------- subword pieces as words

WORD_START = "\u2581"  # SentencePiece's mark ("▁") on a piece that starts a word.

Span = tuple[int, int]


def word_spans(pieces: Sequence[str]) -> list[Span]:
  """The [start, end) range of each word of SentencePiece `pieces` [L].

  A word is a maximal run of pieces starting at one that begins with "▁" (U+2581, which
  SentencePiece puts where the text had a space, and at its start). Pieces before the first
  such piece make a word of their own. SentencePiece never lets a piece cross a space and
  writes the "▁" of a word that starts with an unknown character as a piece of its own, so the
  words are the text's whitespace words; on the embedded corpus (configs/tiny.py, every split,
  both sides, 200 pieces) their number equals the whitespace word count of every sentence.
  """
  spans: list[list[int]] = []
  for i, piece in enumerate(pieces):
    if piece.startswith(WORD_START) or not spans:
      spans.append([i, i + 1])
    else:
      spans[-1][1] = i + 1
  return [(a, b) for a, b in spans]


def token_spans(tokenizer: tok.Tokenizer, tokens: Sequence[str]) -> list[Span]:
  """Word ranges of a tokenizer's `tokens` [L]: SentencePiece pieces grouped by `word_spans`;
  a word vocabulary's tokens are words (one token each)."""
  if isinstance(tokenizer, tok.SentencePieceTokenizer):
    return word_spans(tokens)
  return [(i, i + 1) for i in range(len(tokens))]


def id_spans(tokenizer: tok.Tokenizer, ids: Sequence[int] | np.ndarray) -> list[Span]:
  """Word ranges of ids [L] without specials other than UNK. An <unk> piece does not start a
  word: SentencePiece writes the "▁" before an unknown character as a piece of its own (seen
  with unigram and BPE models), so ids group as the text's pieces do."""
  if isinstance(tokenizer, tok.SentencePieceTokenizer):
    return word_spans(tokenizer.decode_tokens(ids))
  return [(i, i + 1) for i in range(len(ids))]


def span_words(tokens: Sequence[str], spans: Sequence[Span]) -> list[str]:
  """The words of `tokens` (their pieces joined), one per span."""
  return ["".join(tokens[a:b]) for a, b in spans]


def pieces_to_words(
  alpha_TS: np.ndarray, tgt_spans: Sequence[Span], src_spans: Sequence[Span]
) -> np.ndarray:
  """Attention between pieces [T, S] as attention between words [len(tgt_spans),
  len(src_spans)] (float64), for comparing with gold links, which index words.

  Source side: a word gets the sum of its pieces' weights, the mass the step put on the word,
  so each row stays a distribution over the source words (less what went to columns outside
  the spans, such as the source EOS, as with word tokens). Target side: a word gets the mean
  of its pieces' rows; every piece is one decoder step whose row is a distribution, their mean
  is one too, and a word cut into many pieces weighs no more than a whole one. Rows and columns
  outside the spans (the EOS step, the source EOS) drop out; with one token a word this is
  alpha_TS[:len(tgt_spans), :len(src_spans)].
  """
  alpha = np.asarray(alpha_TS, np.float64)
  src_map_SW = np.zeros((alpha.shape[1], len(src_spans)))
  for w, (a, b) in enumerate(src_spans):
    src_map_SW[a:b, w] = 1.0
  tgt_map_WT = np.zeros((len(tgt_spans), alpha.shape[0]))
  for w, (a, b) in enumerate(tgt_spans):
    tgt_map_WT[w, a:b] = 1.0 / (b - a)
  return tgt_map_WT @ alpha @ src_map_SW


def subword_mapping(src_tok: tok.Tokenizer, tgt_tok: tok.Tokenizer) -> str:
  """How `pieces_to_words` maps attention for these tokenizers, in words for results.json."""
  pieces = lambda t: isinstance(t, tok.SentencePieceTokenizer)
  src = "sum over a word's pieces" if pieces(src_tok) else "tokens are words"
  tgt = "mean over a word's pieces" if pieces(tgt_tok) else "tokens are words"
  return f"source: {src}; target: {tgt}"


# ------------------------------------------------------------------------ evaluating a model


@dataclasses.dataclass
class Translation:
  """One decoded sentence: output ids (no EOS), their attention [len(ids) + 1, S_real] (one row
  fewer when it never ended) and the search's scores (`decode.DecodeResult`: summed
  log-probability and ranking score)."""

  ids: list[int]
  alpha: np.ndarray
  score: float = float("nan")
  norm_score: float = float("nan")
  finished: bool = True  # Ended with EOS (False: cut at the length limit).


def output_text(
  tr: Translation,
  src_text: str,
  src_tok: tok.Tokenizer,
  tgt_tok: tok.Tokenizer,
  replace_unk: bool = False,
) -> str:
  """The plain text of one translation (detokenised; UNKs replaced by attention if asked).

  With `replace_unk` each <unk> output becomes the real source word it attends to most: the
  attention's last column (the source EOS) is never copied, nor a word cut from a line longer
  than the score addresses (`translate`), and a source of no words leaves the <unk> as it is.
  Models without attention are refused earlier (`check_replace_unk`). A copying model's extended
  id V + j is source token j (`copying.output_tokens`).
  """
  tokens = output_tokens(tr.ids, src_text, src_tok, tgt_tok)
  if replace_unk and tr.alpha.size:  # Copied from the first source's real words (no EOS).
    src_tokens = src_tok.tokenize(builders.split_sources(src_text)[0])
    src_tokens = src_tokens[: tr.alpha.shape[1] - 1]  # Those decoded: a long line is truncated.
    tokens = replace_unknowns(tokens, tr.alpha, src_tokens, unk_id=tok.UNK)
  return tgt_tok.detokenize(tokens)


def oov_recall(
  hyps: Sequence[str], refs: Sequence[str], tgt_tok: tok.Tokenizer
) -> tuple[float | None, int]:
  """(share of the references' out-of-vocabulary tokens that the hypotheses produce, how many
  there are): per sentence, each reference token the target vocabulary lacks counts as produced
  as often as the hypothesis holds it (clipped, as BLEU clips n-gram matches). None when the
  references have no such token. What copying and UNK replacement are for."""
  produced = total = 0
  for hyp, ref in zip(hyps, refs, strict=True):
    tokens = tgt_tok.tokenize(ref)
    ids = tgt_tok.encode_tokens(tokens)
    missing = collections.Counter(t for t, i in zip(tokens, ids, strict=True) if i == tok.UNK_ID)
    if missing:
      found = collections.Counter(tgt_tok.tokenize(hyp))
      produced += sum(min(n, found[t]) for t, n in missing.items())
      total += sum(missing.values())
  return (produced / total if total else None), total


def source_tokens(src_text: str, src_tok: tok.Tokenizer) -> list[str]:
  """The tokens the attention's columns stand for: each source's tokens and EOS (a multi-source
  example's two sources one after the other, as `Translation.alpha` keeps their columns)."""
  texts = builders.split_sources(src_text)
  return [t for text in texts for t in [*src_tok.tokenize(text), tok.EOS]]


def output_tokens(
  ids: Sequence[int] | np.ndarray, src_text: str, src_tok: tok.Tokenizer, tgt_tok: tok.Tokenizer
) -> list[str]:
  """The tokens of output `ids` (cut at EOS, PAD and BOS dropped); a copying model's extended
  id V + j is token j of `src_text`."""
  if max(ids, default=0) >= tgt_tok.size:
    return copying.output_tokens(ids, src_tok.tokenize(src_text), tgt_tok)
  return tgt_tok.decode_tokens(ids)


def check_replace_unk(config, model: nnx.Module | None = None) -> None:
  """Raises ValueError when `decode.replace_unk` is set for a model without attention.

  UNK replacement copies the source word an output attends to most; RNNencdec (any model whose
  `uses_attention` is False) has no attention, so it would copy an arbitrary word. `model` is
  the model that will decode; without one, the model `config.model` describes is built
  abstractly (shapes only, no parameters), so callers can check before loading anything.
  """
  if not config.decode.replace_unk:
    return
  if model is None:
    size = tok.NUM_SPECIALS + 1
    build = lambda: models.build_model(config.model, size, size, rngs=nnx.Rngs(0))
    model = nnx.eval_shape(build)
  if not model.uses_attention:
    raise ValueError(
      f"decode.replace_unk needs attention: model.name={config.model.name} has none "
      "(set --config.decode.replace_unk=False)"
    )


def translate_split(
  state,
  split: input_pipeline.Split,
  config,
  *,
  ban_unk: bool = False,
  progress: str | None = None,
) -> list[Translation]:
  """Decodes every sentence of `split` in order with the `config.decode` settings (never
  producing UNK with `ban_unk`), showing progress on the console under the label `progress`
  if one is given."""
  out: list[Translation | None] = [None] * len(split)
  shown = console.Progress(progress, len(split)) if progress else None
  for batch in input_pipeline.iter_batches(
    split, config.decode.batch_size, config.data.bucket_step
  ):
    result = jax.device_get(decode.decode_batch(state, batch, config, ban_unk=ban_unk))
    for row, index in enumerate(batch["index"]):
      if index >= 0:
        out[index] = _translation(result, (row,), batch["src_mask"][row])
    if shown:
      shown.advance(int((batch["index"] >= 0).sum()))
  if shown:
    shown.close()
  return out


def _translation(
  result: decode.DecodeResult, at: tuple[int, ...], src_mask_S: np.ndarray
) -> Translation:
  """The hypothesis at index `at` ((row,) or (row, rank)) of a host-side `DecodeResult`, whose
  source row has mask src_mask_S [S]."""
  hyp = decode.DecodeResult(*(x[at] for x in result))
  n_out = int(hyp.lengths)
  ids = [int(t) for t in hyp.tokens[:n_out] if t not in (tok.EOS_ID, tok.PAD_ID)]
  alpha = np.asarray(hyp.alpha[:n_out][:, np.flatnonzero(src_mask_S)])  # Real columns only.
  finished = bool(n_out) and int(hyp.tokens[n_out - 1]) == tok.EOS_ID
  return Translation(ids, alpha, float(hyp.scores), float(hyp.norm_scores), finished)


def nbest_split(
  state, split: input_pipeline.Split, config, nbest: int, *, progress: str | None = None
) -> list[list[Translation]]:
  """The `nbest` best translations of every sentence of `split` in order, best first, with the
  `config.decode` settings (`decode.beam_search_nbest`; greedy's one for beam_size 1). A list
  is shorter than `nbest` only where fewer hypotheses finished within the length limit; its
  first is what `translate_split` returns. Progress shows under the label `progress`."""
  decode.check_nbest(nbest, int(config.decode.beam_size))
  out: list[list[Translation]] = [[] for _ in range(len(split))]
  shown = console.Progress(progress, len(split)) if progress else None
  for batch in input_pipeline.iter_batches(
    split, config.decode.batch_size, config.data.bucket_step
  ):
    result = jax.device_get(decode.decode_batch(state, batch, config, nbest=nbest))
    for row, index in enumerate(batch["index"]):
      for rank in range(nbest if index >= 0 else 0):
        if rank == 0 or np.isfinite(result.scores[row, rank]):  # Empty slots score -inf.
          out[index].append(_translation(result, (row, rank), batch["src_mask"][row]))
    if shown:
      shown.advance(int((batch["index"] >= 0).sum()))
  if shown:
    shown.close()
  return out


@dataclasses.dataclass
class Forced:
  """One given translation scored by the model (forced decoding): the log-probability of each
  target token, EOS included [T + 1], their sum, the ranking score search would give it
  (`decode.ranking_score`) and the attention [T + 1, S_real]."""

  token_scores: np.ndarray
  score: float
  norm_score: float
  alpha: np.ndarray


def score_split(state, split: input_pipeline.Split, config) -> list[Forced]:
  """Scores the target of every pair of `split` given its source, in order (`decode.score_batch`
  with the `config.decode` ranking settings), in batches of `decode.batch_size` padded to
  multiples of `data.bucket_step`, so few shapes compile."""
  out: list[Forced | None] = [None] * len(split)
  for batch in input_pipeline.iter_batches(
    split, config.decode.batch_size, config.data.bucket_step
  ):
    result = jax.device_get(decode.score_batch(state, batch, config))
    for row, index in enumerate(batch["index"]):
      if index < 0:
        continue
      n_tgt, real = int(batch["tgt_mask"][row].sum()), np.flatnonzero(batch["src_mask"][row])
      out[index] = Forced(
        np.asarray(result.token_scores[row, :n_tgt]),
        float(result.scores[row]),
        float(result.norm_scores[row]),
        np.asarray(result.alpha[row, :n_tgt][:, real]),
      )
  return out


def _teacher_forced(state, split: input_pipeline.Split, config, output: str):
  """(index, the model's teacher-forced aux `output` for that sentence [T_pad, ...]) for every
  sentence of `split`, in batches of `decode.batch_size` padded to `data.bucket_step` (jitted:
  one compilation per padded shape)."""
  model_fn = jax.jit(
    lambda params, b: state.replace(params=params).model()(
      b["src"], b["src_mask"], b["tgt_in"], return_aux=True
    )[1][output]
  )
  for batch in input_pipeline.iter_batches(
    split, config.decode.batch_size, config.data.bucket_step
  ):
    keys = {k: batch[k] for k in ("src", "src_mask", "tgt_in")}
    values = np.asarray(jax.device_get(model_fn(state.params, keys)))
    for row, index in enumerate(batch["index"]):
      if index >= 0:
        yield int(index), values[row]


def teacher_forced_attention(state, split: input_pipeline.Split, config) -> list[np.ndarray]:
  """alpha [T, S] of the reference translations over the split's tokens (words or pieces; the
  target EOS step and the source EOS column dropped). `word_attention` maps them to words."""
  out: list[np.ndarray | None] = [None] * len(split)
  for index, alpha in _teacher_forced(state, split, config, "alpha"):
    n_tgt, n_src = len(split.tgt.row(index)), len(split.src.row(index))
    out[index] = alpha[:n_tgt, :n_src]
  return out


def word_attention(state, data, split_name: str, config) -> list[np.ndarray]:
  """Teacher-forced attention of the references between words [T', S'], whatever the tokens:
  `teacher_forced_attention` mapped by `pieces_to_words` (the identity for word tokens)."""
  split = data.splits[split_name]
  forced = teacher_forced_attention(state, split, config)
  return [
    pieces_to_words(
      alpha,
      id_spans(data.tgt_tokenizer, split.tgt.row(i)),
      id_spans(data.src_tokenizer, split.src.row(i)),
    )
    for i, alpha in enumerate(forced)
  ]


def gold_links(raw) -> list[set[Link]] | None:
  """The gold links of every pair of a split's `raw` rows, or None unless all have them."""
  if not raw or not all(r[2] is not None for r in raw):
    return None
  return [set(synthetic.parse_alignment(r[2])) for r in raw]


def attention_figures(state, data, split_name: str, config, translations, raw, forced=None) -> dict:
  """Over- and under-translation of the decoded `translations`, and, with gold links, AER and
  entropy of the references' teacher-forced attention; all over words (`pieces_to_words`).
  `forced`: that attention (`word_attention`) if the caller has it already."""
  split = data.splits[split_name]
  src_tok, tgt_tok = data.src_tokenizer, data.tgt_tokenizer
  src_spans = [id_spans(src_tok, split.src.row(i)) for i in range(len(split))]
  subword = isinstance(src_tok, tok.SentencePieceTokenizer)
  frequent = frequent_words(data.splits["train"], src_tok) if subword else None
  over = under = 0
  offsets = []
  for i, (tr, r) in enumerate(zip(translations, raw, strict=True)):
    out, ref = output_tokens(tr.ids, r[0], src_tok, tgt_tok), tgt_tok.tokenize(r[1])
    out_spans = token_spans(tgt_tok, out)
    out_words = span_words(out, out_spans)
    over += over_translation(out_words, span_words(ref, token_spans(tgt_tok, ref)))
    alpha = pieces_to_words(tr.alpha, out_spans, src_spans[i])
    under += under_translation(alpha, split.src.row(i), src_spans[i], frequent)
    src = src_tok.tokenize(builders.split_sources(r[0])[0])  # Its words, <unk> ones spelled.
    src_words = span_words(src, token_spans(src_tok, src))[: len(src_spans[i])]  # As decoded.
    offsets += identical_word_offsets(alpha, out_words, src_words)
  content = (
    f"not among the {CONTENT_RANK} most frequent source words (pieces grouped at '▁') of the "
    f"first {CONTENT_SAMPLE} training sentences"
    if subword
    else f"word id >= {tok.NUM_SPECIALS + CONTENT_RANK}: outside the {CONTENT_RANK} most "
    "frequent training words (<unk> counts as frequent)"
  )
  results = {
    "over_translation": over,
    "under_translation": under,
    "under_translation_content": content,
    "source_words": sum(len(spans) for spans in src_spans),
    **twin_figures(offsets),
    "aer_subword_mapping": subword_mapping(src_tok, tgt_tok),
  }
  gold = gold_links(raw)
  if gold is None:
    return results
  if forced is None:
    forced = word_attention(state, data, split_name, config)
  for i, (alpha, r) in enumerate(zip(forced, raw, strict=True)):
    if alpha.shape != (len(r[1].split()), len(r[0].split())):
      raise ValueError(
        f"{split_name} sentence {i}: attention over {alpha.shape[1]} source and "
        f"{alpha.shape[0]} target words, but the gold links index {len(r[0].split())} and "
        f"{len(r[1].split())} whitespace words"
      )
  links = [argmax_links(a) for a in forced]
  results["aer"] = alignment_error_rate(links, gold)
  for name, shift in (("aer_shift_minus1", -1), ("aer_shift_plus1", 1)):
    results[name] = shifted_aer(links, gold, shift, [len(a) for a in forced])
  results["aer_threshold"] = alignment_error_rate([threshold_links(a) for a in forced], gold)
  results["attention_entropy"] = attention_entropy(forced)
  return results


def evaluate_split(
  state, data, split_name: str, config, out_dir: Path, *, extra=None, writer=None, write=True
) -> dict:
  """Decodes a split and scores it: BLEU (all / No UNK / tokenised / by length), chrF, and
  for models with attention over/under-translation and (gold links) AER and entropy.

  Writes OUT_DIR/results.json, hypotheses.txt (one line per source line), sentences.jsonl (one
  record per sentence: texts, sentence scores and attention, `sentence_records`, which the
  explorer shows), bleu_vs_length.png and alignments/*.png (heatmaps of the first
  `decode.num_heatmaps` sentences) when `write`; `extra` (loss, step, ...) is merged into the
  results first.
  """
  check_replace_unk(config, state.model())
  split = data.splits[split_name]
  raw = data.raw(split_name)
  tgt_tok = data.tgt_tokenizer
  tgt_lang = input_pipeline.languages(config.data)[0 if data.reverse else 1]
  plain = pretokenized(config)
  translations = translate_split(state, split, config, progress=f"decoding {split_name}")
  hyps = [
    output_text(tr, src, data.src_tokenizer, tgt_tok, config.decode.replace_unk)
    for tr, (src, _, _) in zip(translations, raw, strict=True)
  ]
  refs = [r[1] for r in raw]
  src_lengths = [len(builders.split_sources(r[0])[0].split()) for r in raw]  # First source's.
  score, signature = bleu(hyps, refs, pretokenized=plain)
  recall, oov_refs = oov_recall(hyps, refs, tgt_tok)
  keep = no_unk_subset(  # Every source of a multi-source split counts.
    [any(count_unk(src.row(i)) for src in split.sources) for i in range(len(split))],
    [bool(count_unk(split.tgt.row(i))) for i in range(len(split))],
  )
  no_unk_hyps = []
  if keep:  # The paper's protocol: the subset decoded again with UNK forbidden (--ignore-unk).
    sub = input_pipeline.subset(split, keep)
    label = f"decoding {split_name}'s No-UNK subset with <unk> forbidden"
    again = translate_split(state, sub, config, ban_unk=True, progress=label)
    no_unk_hyps = [
      output_text(tr, raw[i][0], data.src_tokenizer, tgt_tok)
      for tr, i in zip(again, keep, strict=True)
    ]
  kept_bleu = lambda texts: bleu(texts, [refs[i] for i in keep], pretokenized=plain)[0]
  results = dict(extra or {})
  results.update(
    {
      "bleu": score,
      "bleu_signature": signature,
      "bleu_tokenized": tokenized_bleu(hyps, refs, tgt_tok, tgt_lang),
      "bleu_no_unk": kept_bleu(no_unk_hyps) if keep else None,
      "bleu_no_unk_plain": kept_bleu([hyps[i] for i in keep]) if keep else None,
      "num_no_unk": len(keep),
      "chrf": chrf(hyps, refs),
      "bleu_lowercase": bleu(hyps, refs, pretokenized=plain, lowercase=True)[0],
      "chrf_lowercase": chrf(hyps, refs, lowercase=True),
      "oov_recall": recall,
      "oov_reference_tokens": oov_refs,
      "num_sentences": len(hyps),
      "beam_size": int(config.decode.beam_size),
      "bleu_by_length": bleu_by_length(hyps, refs, src_lengths, pretokenized=plain),
      "bleu_conventions": bleu_conventions(tgt_tok, tgt_lang, pretokenized=plain),
    }
  )
  attends = state.model().uses_attention
  forced = heads = None
  if attends:
    if gold_links(raw) is not None:
      forced = word_attention(state, data, split_name, config)
    results.update(attention_figures(state, data, split_name, config, translations, raw, forced))
    heads = decoded_heads(state, split, translations, config)
  if not write:
    return results
  out_dir.mkdir(parents=True, exist_ok=True)
  files.write_atomic(out_dir / "hypotheses.txt", "".join(h + "\n" for h in hyps))
  files.write_atomic(out_dir / "results.json", json.dumps(results, indent=2) + "\n")
  records = sentence_records(
    data, split_name, translations, hyps, plain, attends=attends, heads=heads, forced=forced
  )
  report.write_sentences(out_dir, records)
  plots.bleu_vs_length(
    {config.model.name: results["bleu_by_length"]}, out_dir / "bleu_vs_length.png"
  )
  step = int(jax.device_get(state.step))
  for i in range(min(config.decode.num_heatmaps, len(hyps)) if attends else 0):
    tr = translations[i]
    src_words = source_tokens(raw[i][0], data.src_tokenizer)
    out_words = output_tokens(tr.ids, raw[i][0], data.src_tokenizer, tgt_tok) + [tok.EOS]
    if not tr.alpha.size:
      continue
    maps = {"": tr.alpha}  # The attention used (multi-head: the mean of the heads), each head's.
    maps |= {
      "_" + head_name(n).replace(" ", ""): a for n, a in enumerate(heads[i] if heads else [])
    }
    for suffix, alpha in maps.items():
      image = plots.alignment_heatmap(
        alpha, src_words, out_words[: len(alpha)], out_dir / "alignments" / f"{i:03d}{suffix}.png"
      )
      if writer is not None:
        writer.write_image(step, f"{split_name}/alignment_{i}{suffix}", image)
  return results


def head_name(n: int) -> str:
  """Head n's name (n from 0) in sentences.jsonl and the explorer, and, without its space, in
  heatmap file names (000_head1.png): one place, so the two count heads alike."""
  return f"head {n + 1}"


def decoded_heads(
  state, split: input_pipeline.Split, translations: Sequence[Translation], config
) -> list[list[np.ndarray]] | None:
  """Each head's attention over every decoded sentence: per sentence a list of N arrays
  [len(tr.alpha), S_real], or None unless the attention structure has several heads
  ("alpha_heads").

  Attention at a step depends only on the output before it, so forcing the decoder through each
  translation's own words (in batches, as `teacher_forced_attention` does with the references)
  reproduces the heads that decoding (greedy or beam) used; their mean is `tr.alpha`.
  """
  if getattr(state.model().structure, "num_heads", 1) < 2:
    return None
  outputs = input_pipeline.Ragged.from_lists([tr.ids for tr in translations])
  forced = input_pipeline.Split(split.name, split.src, outputs, split.line)
  out: list[list[np.ndarray] | None] = [None] * len(split)
  for index, heads_TNS in _teacher_forced(state, forced, config, "alpha_heads"):
    n_out, n_src = translations[index].alpha.shape
    heads_TNS = heads_TNS[:n_out, :, :n_src]
    out[index] = [heads_TNS[:, n] for n in range(heads_TNS.shape[1])]
  return out


# ---------------------------------------------------------------------- sentence by sentence


def sentence_records(
  data,
  split_name: str,
  translations: Sequence[Translation],
  hyps: Sequence[str],
  pretokenized: bool = False,
  *,
  attends: bool = True,
  heads: Sequence[Sequence[np.ndarray]] | None = None,
  forced: Sequence[np.ndarray] | None = None,
) -> list[dict]:
  """One JSON-able record per sentence of an evaluated split, in corpus order: what the
  explorer (`seq2seq.report`) shows and OUT_DIR/sentences.jsonl holds.

  Each has `index`, `line` (in the corpus files), `source`, `reference`, `hypothesis`, sentence
  `bleu` (sacrebleu, effective order: short sentences are not zero for a missing 4-gram) and
  `chrf`, `source_words`, `unk` (<unk> tokens in the source (all its sources), the reference
  and the output; the No-UNK subset is the sentences with none in the first two), and, for
  models with attention:
  `entropy` (mean over output steps of the decoded attention's entropy, nats) and `attention`
  (the decoded attention's tokens and maps: the one used, then each head's when there are
  several, `report.encode_map`); with gold links also `aer` (argmax links of the reference's
  teacher-forced attention `forced`, as results.json's `aer` but for one sentence) and
  `reference_attention` (that attention over the whitespace words of reference and source, with
  the gold links).
  """
  split, raw = data.splits[split_name], data.raw(split_name)
  src_tok, tgt_tok = data.src_tokenizer, data.tgt_tokenizer
  gold = gold_links(raw) if forced is not None else None
  sentence_bleu = sacrebleu.metrics.BLEU(effective_order=True, force=pretokenized)
  sentence_chrf = sacrebleu.metrics.CHRF()
  records = []
  scored = scored_text(hyps)
  for i, (tr, hyp, (src, ref, _)) in enumerate(zip(translations, hyps, raw, strict=True)):
    record = {
      "index": i,
      "line": int(split.line[i]),
      "source": src,
      "reference": ref,
      "hypothesis": hyp,
      "bleu": float(sentence_bleu.sentence_score(scored[i], [ref]).score),
      "chrf": float(sentence_chrf.sentence_score(scored[i], [ref]).score),
      "source_words": len(builders.split_sources(src)[0].split()),
      "unk": {
        "source": sum(count_unk(src.row(i)) for src in split.sources),
        "reference": count_unk(split.tgt.row(i)),
        "output": count_unk(tr.ids),
      },
    }
    if attends and tr.alpha.size:
      maps = [("attention", tr.alpha)]
      maps += [(head_name(n), a) for n, a in enumerate(heads[i] if heads else [])]
      record["entropy"] = attention_entropy([tr.alpha])
      record["attention"] = {
        "source": source_tokens(src, src_tok),
        "output": (output_tokens(tr.ids, src, src_tok, tgt_tok) + [tok.EOS])[: len(tr.alpha)],
        "maps": [{"name": name, **report.encode_map(a)} for name, a in maps],
      }
    if gold is not None:
      record["aer"] = alignment_error_rate([argmax_links(forced[i])], [gold[i]])
      record["reference_attention"] = {  # Over the whitespace words of reference and source.
        "map": report.encode_map(forced[i]),
        "gold": sorted([s, t] for s, t in gold[i]),
      }
    records.append(record)
  return records

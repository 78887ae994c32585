"""Translation and alignment metrics, the paper's ways.

* `bleu`: sacrebleu corpus BLEU on detokenised text (13a tokenisation, signature kept), the
  headline figure (`length_ratio`: its output over reference length), and `tokenized_bleu` on
  text split into the target side's words as the paper reports it (multi-bleu.perl on tokenised
  text): `bleu_words` says how each tokenizer kind splits, `bleu_conventions` writes every
  figure's convention into results.json.
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
import itertools
from collections.abc import Iterable, Sequence

import numpy as np
import sacrebleu

from seq2seq.data import tokenizer as tok

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

  `pretokenized` says the texts are written tokenised by design (`pretokenized(corpus)`: the
  embedded corpus), which turns off sacrebleu's warning about tokenised input; the score and
  signature are the same either way.
  """
  score, metric = _corpus_bleu(hypotheses, references, pretokenized, lowercase)
  return float(score.score), str(metric.get_signature())


def length_ratio(
  hypotheses: Sequence[str], references: Sequence[str], *, pretokenized: bool = False
) -> float:
  """Output length over reference length in words of `bleu`'s 13a tokenisation (sacrebleu's
  `ratio`): below 1 the brevity penalty applies; what a change to when decoding stops moves."""
  score, _ = _corpus_bleu(hypotheses, references, pretokenized, False)
  return float(score.sys_len / max(score.ref_len, 1))


def _corpus_bleu(hypotheses, references, pretokenized, lowercase):
  metric = sacrebleu.metrics.BLEU(force=pretokenized, lowercase=lowercase)
  return metric.corpus_score(scored_text(hypotheses), [list(references)]), metric


def pretokenized(corpus: str) -> bool:
  """Whether the text of the run's `data.corpus` is written tokenised: the embedded corpus is
  generated with its punctuation as words of their own ("le chat dort ."), so that text is both
  its plain and its tokenised form and the sacrebleu warning that lines "end in a tokenized
  period" is a false alarm. Local text and WMT'14 are plain text (detokenised hypotheses are
  scored)."""
  return corpus == "synthetic"


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
    "length_ratio": "output words over reference words in bleu's tokenisation (sacrebleu's ratio)",
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


def twin_figures(by_sentence: Sequence[Sequence[int]]) -> dict:
  """results.json's twin-word figures from `identical_word_offsets` of each sentence of a split:
  the number of pairs, the share that peaks on the twin, the share at each of TWIN_OFFSETS (None
  without pairs), and per sentence with pairs its pairs and those peaking on the twin
  (`identical_words_by_sentence`: sentence indices, pairs, peaks; `twin_counts` reads it), for
  a paired test between systems on the same sentences."""
  offsets = [o for sentence in by_sentence for o in sentence]
  n = len(offsets)
  counts = collections.Counter(offsets)
  kept = [i for i, sentence in enumerate(by_sentence) if sentence]
  return {
    "identical_words": n,
    "identical_word_peaks": counts[0] / n if n else None,
    "identical_word_offsets": {f"{k:+d}": counts[k] / n for k in TWIN_OFFSETS} if n else None,
    "identical_words_by_sentence": {
      "sentence": kept,
      "pairs": [len(by_sentence[i]) for i in kept],
      "peaks": [by_sentence[i].count(0) for i in kept],
    },
  }


def twin_counts(results: dict, num_sentences: int) -> np.ndarray | None:
  """[num_sentences, 2]: each sentence's twin pairs and pairs peaking on the twin, from a
  results.json's `identical_words_by_sentence` (None where it has none)."""
  kept = results.get("identical_words_by_sentence")
  if kept is None:
    return None
  out = np.zeros((num_sentences, 2), np.int64)
  out[kept["sentence"], 0] = kept["pairs"]
  out[kept["sentence"], 1] = kept["peaks"]
  return out


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
  source_rows: Iterable[Sequence[int]],
  tokenizer: tok.Tokenizer,
  top: int = CONTENT_RANK,
  max_sentences: int = CONTENT_SAMPLE,
) -> set[tuple[int, ...]]:
  """The `top` most frequent source words of the first `max_sentences` of `source_rows` (the
  training split's source ids, sentence by sentence), each as the tuple of its ids (`id_spans`
  groups pieces into words).

  With the embedded corpus these are its most frequent whitespace words (up to ties): the
  words a word vocabulary would give ids below 4 + `top`. Ties go to the word seen first.
  """
  counts: collections.Counter[tuple[int, ...]] = collections.Counter()
  for row in itertools.islice(source_rows, max_sentences):
    ids = [int(i) for i in row]
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


def zero_share(alphas: Iterable[np.ndarray]) -> float:
  """The share of attention weights that are exactly zero, over every (output step, source
  position) cell of every sentence: how sparse the attention is (softmax: 0 but for underflow;
  sparsemax and 1.5-entmax: the positions left out of each step's support)."""
  zeros = cells = 0
  for alpha in alphas:
    a = np.asarray(alpha)
    zeros += int(np.sum(a == 0.0))
    cells += a.size
  return zeros / cells if cells else 0.0


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

"""A lexical translation table p(target word | source word), learned from the training split, and
the shortlists it gives decoding.

The table is IBM Model 1 (Brown et al. 1993) trained by EM over the training pairs' token ids,
with a NULL source word in every sentence. Why IBM Model 1 rather than the trained model's own
attention: it needs no trained model (a shortlist or a lexicon-biased model can exist before
training), its EM is a few vectorised passes over the corpus here (seconds on Multi30k), and it
is the standard source of the lexical shortlists of Marian and Sockeye (fast_align / eflomal
are reparametrised Model 2s; the diagonal prior matters for alignment, little for "which target
words may appear"). It is written here in NumPy to add no dependency.

Each EM pass, with t(f | e) for target word f and source word e (including NULL):
  posterior of a link (f at position i, e at position j) = t(f | e) / sum_j' t(f | e_j'),
  t(f | e) <- sum of those posteriors over the corpus, normalised over f for every e.

The start is not Model 1's. Brown et al. start from one t for every pair, so the first E-step
gives each link of a target word 1/(|s| + 1); here t(f | e) starts at 1/n_e over the n_e target
words that co-occur with e anywhere, so the first E-step already favours the links of rare
source words (few co-occurring targets). EM then runs from a different point; after the
default five passes the two starts give the same best translation for all but a few rare words.

`Lexicon` keeps the top `k` targets of every source id with their probabilities (rows [Vs, k]),
and is saved as WORKDIR/lexicon.npz by `python -m seq2seq.build_lexicon --workdir=runs/a` (from
the run's own config.json, vocabularies and corpus).

`shortlist(lexicon, src_ids, frequent, per_word)`: a batch's candidate target vocabulary, the
special ids first at their own positions (so decoding can run in candidate indices), then the
`frequent` most frequent target ids, then each source word's `per_word` best translations.
`sentence_candidates` marks which of them belong to each sentence's own shortlist
(`decode.shortlist_scope="sentence"`).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np

from seq2seq.data import input_pipeline
from seq2seq.data import tokenizer as tok

FILE = "lexicon.npz"


@dataclasses.dataclass(frozen=True)
class Lexicon:
  """The best `k` target ids of every source id and their probabilities (rows sorted by
  probability; -1 / 0 pad rows with fewer), and the target ids by training frequency."""

  ids: np.ndarray  # [Vs, k] int32
  probs: np.ndarray  # [Vs, k] float32
  by_frequency: np.ndarray  # [Vt] int32: target ids, most frequent first.

  def save(self, path: Path) -> None:
    np.savez_compressed(path, ids=self.ids, probs=self.probs, by_frequency=self.by_frequency)

  @classmethod
  def load(cls, path: str | Path) -> Lexicon:
    path = Path(path)
    if not path.exists():
      raise FileNotFoundError(
        f"no lexical table {path}: build it with "
        f"python -m seq2seq.build_lexicon --workdir={path.parent}"
      )
    with np.load(path) as f:
      lexicon = cls(f["ids"], f["probs"], f["by_frequency"])
    if not (lexicon.ids >= 0).any():
      raise ValueError(f"the lexical table {path} is empty")
    return lexicon


def ibm1(
  src: input_pipeline.Ragged,
  tgt: input_pipeline.Ragged,
  src_vocab: int,
  tgt_vocab: int,
  *,
  iterations: int = 5,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """IBM Model 1 by EM: (source ids, target ids, t(target | source)) of every co-occurring pair.

  NULL is source id `src_vocab`. Every (sentence, target position, source position) link is one
  entry of flat arrays, so a pass is a handful of NumPy reductions.
  """
  n = len(src)
  src_rows = [np.append(src.row(i), src_vocab) for i in range(n)]  # NULL at the end.
  tgt_rows = [tgt.row(i) for i in range(n)]
  link_src, link_tgt, link_word = [], [], []
  word = 0  # Index of the target token instance a link belongs to.
  for s_row, t_row in zip(src_rows, tgt_rows, strict=True):
    if len(t_row) == 0:
      continue
    link_src.append(np.tile(s_row, len(t_row)))
    link_tgt.append(np.repeat(t_row, len(s_row)))
    link_word.append(np.repeat(np.arange(word, word + len(t_row)), len(s_row)))
    word += len(t_row)
  if not link_src:
    raise ValueError("no training pairs to learn a lexical table from")
  e = np.concatenate(link_src).astype(np.int64)
  f = np.concatenate(link_tgt).astype(np.int64)
  instance = np.concatenate(link_word)
  pair_key = e * tgt_vocab + f
  keys, pair = np.unique(pair_key, return_inverse=True)
  pair_src, pair_tgt = keys // tgt_vocab, keys % tgt_vocab
  # t(f | e) = 1/n_e over e's n_e co-occurring targets (not Model 1's start: module docstring).
  prob = np.ones(len(keys), np.float64)
  prob /= np.bincount(pair_src, prob, src_vocab + 1)[pair_src]
  for _ in range(iterations):
    link_prob = prob[pair]
    denom = np.bincount(instance, link_prob, word)
    posterior = link_prob / denom[instance]
    counts = np.bincount(pair, posterior, len(keys))
    prob = counts / np.bincount(pair_src, counts, src_vocab + 1)[pair_src]
  return pair_src, pair_tgt, prob


def top_translations(
  pair_src: np.ndarray, pair_tgt: np.ndarray, prob: np.ndarray, src_vocab: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
  """The `k` most probable targets of every source id: ids [Vs, k] (-1 pad), probs [Vs, k]."""
  real = pair_src < src_vocab  # NULL's translations are not a source word's.
  order = np.lexsort((-prob[real], pair_src[real]))
  s, t, p = pair_src[real][order], pair_tgt[real][order], prob[real][order]
  starts = np.searchsorted(s, np.arange(src_vocab))
  rank = np.arange(len(s)) - starts[s]
  keep = rank < k
  ids = np.full((src_vocab, k), -1, np.int32)
  probs = np.zeros((src_vocab, k), np.float32)
  ids[s[keep], rank[keep]] = t[keep]
  probs[s[keep], rank[keep]] = p[keep]
  return ids, probs


def build(data: input_pipeline.Data, *, top: int = 100, iterations: int = 5) -> Lexicon:
  """The lexical table of `data`'s training split."""
  train = data.splits["train"]
  src_vocab, tgt_vocab = data.src_tokenizer.size, data.tgt_tokenizer.size
  pair_src, pair_tgt, prob = ibm1(train.src, train.tgt, src_vocab, tgt_vocab, iterations=iterations)
  ids, probs = top_translations(pair_src, pair_tgt, prob, src_vocab, top)
  counts = np.bincount(train.tgt.values, minlength=tgt_vocab)
  by_frequency = np.argsort(-counts, kind="stable").astype(np.int32)
  return Lexicon(ids, probs, by_frequency)


@functools.lru_cache(maxsize=4)
def load_cached(path: str) -> Lexicon:
  """`Lexicon.load(path)`, read once per process (decoding asks for it every batch)."""
  return Lexicon.load(path)


SHORTLIST_SCOPES = ("batch", "sentence")  # `decode.shortlist_scope`.


def candidates(lexicon: Lexicon, src_ids: np.ndarray, frequent: int, per_word: int) -> np.ndarray:
  """[V] bool: the target words a shortlist of the source ids `src_ids` (any shape; PAD and the
  other specials ignored) offers besides the specials: the `frequent` most frequent target
  words and each source word's `per_word` best translations."""
  words = np.unique(np.asarray(src_ids))
  words = words[(words >= tok.NUM_SPECIALS) & (words < len(lexicon.ids))]
  translations = lexicon.ids[words, :per_word].reshape(-1)
  chosen = np.zeros(len(lexicon.by_frequency), bool)
  chosen[translations[translations >= 0]] = True
  chosen[lexicon.by_frequency[:frequent]] = True
  chosen[: tok.NUM_SPECIALS] = False
  return chosen


def sentence_candidates(
  lexicon: Lexicon, src_BS: np.ndarray, ids_N: np.ndarray, frequent: int, per_word: int
) -> np.ndarray:
  """[B, N] bool: which of a batch shortlist's ids `ids_N` (`shortlist` of the whole batch)
  belong to each sentence's own shortlist (`candidates` of its row of `src_BS`, the specials
  always): decoding over the batch's ids with the others masked out is decoding over the
  sentence's own shortlist."""
  own = np.stack([candidates(lexicon, row, frequent, per_word) for row in np.asarray(src_BS)])
  own[:, : tok.NUM_SPECIALS] = True
  return own[:, ids_N]


def shortlist(
  lexicon: Lexicon, src_ids: np.ndarray, frequent: int, per_word: int, multiple: int = 64
) -> np.ndarray:
  """The candidate target ids [N] of a batch of sources (any shape of ids; PAD ignored): the
  specials at their own positions (ids 0..3 first), the `frequent` most frequent target ids,
  and the `per_word` best translations of every source id present, each once; N is rounded up
  to a multiple of `multiple` (padded with further frequent ids) so few shapes compile."""
  chosen = candidates(lexicon, src_ids, frequent, per_word)
  vocab = len(chosen)
  rest = np.flatnonzero(chosen)
  size = min(vocab, -(-(tok.NUM_SPECIALS + len(rest)) // multiple) * multiple)
  if tok.NUM_SPECIALS + len(rest) < size:  # Pad with the next most frequent words.
    ranked = lexicon.by_frequency
    extra = ranked[(ranked >= tok.NUM_SPECIALS) & ~chosen[ranked]]
    rest = np.sort(np.concatenate([rest, extra[: size - tok.NUM_SPECIALS - len(rest)]]))
  return np.concatenate([np.arange(tok.NUM_SPECIALS), rest]).astype(np.int32)

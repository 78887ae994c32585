"""Tokenizers: the paper's word shortlist and a SentencePiece option, with shared special ids.

Word-level vocabularies split text with a pretokenizer: "none" (whitespace, for the embedded
corpus, which is written pre-split) or "moses" (sacremoses, per language, so punctuation and
elisions such as "l'homme" become tokens of their own). `detokenize` undoes the split, so
outputs are scored as plain text against the raw references.

Both kinds map text to ids in `[0, size)` where the first four ids are fixed:

  PAD_ID = 0 "<pad>", BOS_ID = 1 "<s>", EOS_ID = 2 "</s>", UNK_ID = 3 "<unk>".

`size` is the id space the model's embedding and output layers use (`config.data.*_vocab_size`,
specials included). A corpus with fewer word types than `size - 4` leaves the top ids unused.
A word vocabulary of `size` 0 keeps every word of its training texts (its size is then their
number of word types plus the four specials): the whole vocabulary, with no UNK in training.

A vocabulary directory holds `tokenizer.json` (kind, size and details) plus `vocab.txt` (word
level: one piece per line, id = line number, the four specials first) or `spm.model`
(SentencePiece). `load_or_build` loads such a directory or builds and saves one, and refuses to
load a vocabulary whose kind or size differs from the requested one.
"""

from __future__ import annotations

import abc
import collections
import functools
import io
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import sentencepiece as spm
from absl import logging

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)  # Indexed by id.
NUM_SPECIALS = len(SPECIALS)

META_FILE = "tokenizer.json"
KINDS = ("word", "sentencepiece")
SP_MODEL_TYPES = ("unigram", "bpe")
PRETOKENIZERS = ("none", "moses")

Ids = Sequence[int] | np.ndarray


def strip_specials(ids: Ids) -> list[int]:
  """Returns `ids` [L] cut before the first EOS, without PAD and BOS ids."""
  if isinstance(ids, np.ndarray):
    ids = ids.tolist()
  out = []
  for i in ids:
    i = int(i)
    if i == EOS_ID:
      break
    if i not in (PAD_ID, BOS_ID):
      out.append(i)
  return out


@functools.cache
def moses_tokenizer(lang: str):
  """sacremoses' tokenizer for `lang` (English by default), built once. sacremoses is imported
  here, not with this module: compiling its patterns costs every process 0.4 s, and runs on
  the embedded corpus never use it."""
  import sacremoses

  return sacremoses.MosesTokenizer(lang or "en")


@functools.cache
def moses_detokenizer(lang: str):
  """sacremoses' detokenizer for `lang` (English by default), built once."""
  import sacremoses

  return sacremoses.MosesDetokenizer(lang or "en")


MOSES_MEMO_SIZE = 1 << 15  # Sentences whose Moses split a Pretokenizer remembers (LRU).


class Pretokenizer:
  """Splits raw text into word tokens and joins them back: whitespace ("none") or Moses.

  Moses splits are remembered for the last MOSES_MEMO_SIZE sentences: building a vocabulary
  splits every training sentence, and encoding the training split right after split them all
  again (9 of the 30 s Multi30k's data took to load, before any step).
  """

  def __init__(self, name: str = "none", lang: str = ""):
    if name not in PRETOKENIZERS:
      raise ValueError(f"unknown pretokenizer {name!r}; known pretokenizers: {PRETOKENIZERS}")
    self.name, self.lang = name, lang if name == "moses" else ""
    if name == "moses":
      self._tok, self._detok = moses_tokenizer(lang), moses_detokenizer(lang)
      self._moses_split = functools.lru_cache(MOSES_MEMO_SIZE)(self._moses_words)

  def _moses_words(self, text: str) -> tuple[str, ...]:
    return tuple(self._tok.tokenize(text, escape=False))

  def split(self, text: str) -> list[str]:
    if self.name == "none":
      return text.split()
    return list(self._moses_split(text))

  def join(self, tokens: Sequence[str]) -> str:
    if self.name == "none":
      return " ".join(tokens)
    return self._detok.detokenize(list(tokens))


class Tokenizer(abc.ABC):
  """Text <-> ids in `[0, size)`; ids 0-3 are PAD, BOS, EOS, UNK.

  `encode` never adds BOS/EOS (the input pipeline does); `decode` stops at the first EOS and
  drops PAD and BOS, so a model's padded output row decodes as it should.
  """

  kind: ClassVar[str]

  def __init__(self, size: int):
    if size <= NUM_SPECIALS:
      raise ValueError(f"vocabulary size must exceed the {NUM_SPECIALS} special ids, got {size}")
    self._size = int(size)

  @property
  def size(self) -> int:
    """Size of the id space (specials included)."""
    return self._size

  def is_unk(self, token_id: int) -> bool:
    return int(token_id) == UNK_ID

  @abc.abstractmethod
  def encode(self, text: str) -> list[int]:
    """Returns the ids [L] of `text`, without BOS or EOS."""

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    """Encodes many texts; the same as `[encode(t) for t in texts]`."""
    return [self.encode(t) for t in texts]

  @abc.abstractmethod
  def decode(self, ids: Ids) -> str:
    """Returns the text of `ids` [L], cut at the first EOS, PAD and BOS dropped."""

  @abc.abstractmethod
  def tokenize(self, text: str) -> list[str]:
    """The tokens (words or pieces) of `text`, one per id of `encode(text)`."""

  @abc.abstractmethod
  def detokenize(self, tokens: Sequence[str]) -> str:
    """Plain text from tokens (the inverse of `tokenize` up to whitespace normalisation)."""

  @abc.abstractmethod
  def encode_tokens(self, tokens: Sequence[str]) -> list[int]:
    """Returns the ids [L] of already split tokens (words or pieces); unknown ones -> UNK."""

  @abc.abstractmethod
  def decode_tokens(self, ids: Ids) -> list[str]:
    """Returns the tokens (words or pieces) of `ids` [L], cut at EOS, PAD and BOS dropped."""

  @abc.abstractmethod
  def _metadata(self) -> dict[str, Any]:
    """Kind-specific fields of `tokenizer.json`."""

  @abc.abstractmethod
  def _save_files(self, directory: Path) -> None:
    """Writes the vocabulary files other than `tokenizer.json`."""

  def save(self, directory: str | os.PathLike[str], *, origin: str = "") -> None:
    """Writes the vocabulary to `directory`; `tokenizer.json` goes last, marking it complete.

    `origin` (optional) names the data the vocabulary was built from; it is stored in
    `tokenizer.json` for `load_or_build`'s check.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    self._save_files(directory)
    meta = {"kind": self.kind, "size": self.size, **self._metadata(), "origin": origin}
    _write_atomic(directory / META_FILE, (json.dumps(meta, indent=2) + "\n").encode())

  def _check_id(self, token_id: int) -> int:
    if not 0 <= token_id < self._size:
      raise ValueError(f"id {token_id} is outside the vocabulary [0, {self._size})")
    return token_id


class WordVocab(Tokenizer):
  """Words (split by a `Pretokenizer`); the `size - 4` most frequent training words get ids.

  Every other word (and the literal text "<unk>") maps to UNK. The literal texts "<pad>", "<s>"
  and "</s>" are not control symbols on input: they map to UNK as well.
  """

  kind = "word"
  VOCAB_FILE = "vocab.txt"

  def __init__(self, words: Sequence[str], size: int, pretokenizer: Pretokenizer | None = None):
    """`words`: the shortlist in id order (without specials), at most `size - 4` of them."""
    super().__init__(size)
    self.pretokenizer = pretokenizer or Pretokenizer()
    words = list(words)
    if len(words) > size - NUM_SPECIALS:
      raise ValueError(f"{len(words)} words do not fit a vocabulary of size {size}")
    bad = [w for w in words if not w or w in SPECIALS or w.split() != [w]]
    if bad:
      raise ValueError(f"invalid vocabulary words (empty, special or with whitespace): {bad[:5]}")
    if len(set(words)) != len(words):
      raise ValueError("vocabulary words are not unique")
    self._pieces = list(SPECIALS) + words
    self._ids = {w: i for i, w in enumerate(words, start=NUM_SPECIALS)}
    self._ids[UNK] = UNK_ID

  @classmethod
  def build(
    cls, texts: Iterable[str], size: int, pretokenizer: Pretokenizer | None = None
  ) -> WordVocab:
    """Counts the words of `texts` and keeps the `size - 4` most frequent (`from_counts`)."""
    pretokenizer = pretokenizer or Pretokenizer()
    counts: collections.Counter[str] = collections.Counter()
    for text in texts:
      counts.update(pretokenizer.split(text))
    return cls.from_counts(counts, size, pretokenizer)

  @classmethod
  def from_counts(
    cls, counts: collections.Counter[str], size: int, pretokenizer: Pretokenizer | None = None
  ) -> WordVocab:
    """The `size - 4` most frequent words of `counts` (every word if `size` is 0, the id space
    then fitting them exactly), split by `pretokenizer` when counted.

    Ties are broken by the word itself (Unicode code point order), so the ids are a pure
    function of the corpus. The special pieces are never counted.
    """
    counts = collections.Counter(counts)
    for special in SPECIALS:
      counts.pop(special, None)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    size = size or len(ranked) + NUM_SPECIALS
    return cls([w for w, _ in ranked[: size - NUM_SPECIALS]], size, pretokenizer)

  @property
  def num_words(self) -> int:
    """Number of shortlisted words (ids `4 .. 4 + num_words - 1`)."""
    return len(self._pieces) - NUM_SPECIALS

  def id_to_piece(self, token_id: int) -> str:
    """The word of `token_id`; unused ids of the id space read as "<unk>"."""
    token_id = self._check_id(int(token_id))
    return self._pieces[token_id] if token_id < len(self._pieces) else UNK

  def tokenize(self, text: str) -> list[str]:
    return self.pretokenizer.split(text)

  def detokenize(self, tokens: Sequence[str]) -> str:
    return self.pretokenizer.join(tokens)

  def encode(self, text: str) -> list[int]:
    return self.encode_tokens(self.tokenize(text))

  def encode_tokens(self, tokens: Sequence[str]) -> list[int]:
    get = self._ids.get
    return [get(t, UNK_ID) for t in tokens]

  def decode_tokens(self, ids: Ids) -> list[str]:
    return [self.id_to_piece(i) for i in strip_specials(ids)]

  def decode(self, ids: Ids) -> str:
    return self.detokenize(self.decode_tokens(ids))

  def _metadata(self) -> dict[str, Any]:
    return {
      "num_words": self.num_words,
      "pretokenizer": self.pretokenizer.name,
      "lang": self.pretokenizer.lang,
    }

  def _save_files(self, directory: Path) -> None:
    text = "".join(p + "\n" for p in self._pieces)
    _write_atomic(directory / self.VOCAB_FILE, text.encode("utf-8"))

  @classmethod
  def load(cls, directory: str | os.PathLike[str]) -> WordVocab:
    directory = Path(directory)
    meta = read_metadata(directory)
    lines = (directory / cls.VOCAB_FILE).read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
      lines.pop()
    if tuple(lines[:NUM_SPECIALS]) != SPECIALS:
      raise ValueError(f"{directory / cls.VOCAB_FILE} does not start with the specials {SPECIALS}")
    pretokenizer = Pretokenizer(meta.get("pretokenizer", "none"), meta.get("lang", ""))
    return cls(lines[NUM_SPECIALS:], meta["size"], pretokenizer)


class SentencePieceTokenizer(Tokenizer):
  """A SentencePiece model (unigram or BPE) with PAD/BOS/EOS/UNK forced to ids 0/1/2/3.

  Unknown characters decode as "<unk>". `size` is the requested vocabulary size; on a corpus too
  small to support it the model ends up smaller and the top ids stay unused.
  """

  kind = "sentencepiece"
  MODEL_FILE = "spm.model"

  def __init__(self, model_proto: bytes, size: int, model_type: str):
    super().__init__(size)
    self._proto = bytes(model_proto)
    self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
    self.model_type = model_type
    got = (self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id(), self._sp.unk_id())
    if got != (PAD_ID, BOS_ID, EOS_ID, UNK_ID) or self._sp.get_piece_size() > size:
      raise ValueError(
        f"SentencePiece model has special ids {got} and {self._sp.get_piece_size()} pieces; "
        f"expected {(PAD_ID, BOS_ID, EOS_ID, UNK_ID)} and at most {size}"
      )

  @classmethod
  def train(
    cls,
    texts: Iterable[str],
    size: int,
    *,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    max_sentences: int = 2_000_000,
    num_threads: int = 2,
  ) -> SentencePieceTokenizer:
    """Trains a model on `texts` (an in-memory iterator; nothing is written to disk).

    Args:
      texts: training sentences (one per item; empty ones are ignored).
      size: vocabulary size including the four specials.
      model_type: "unigram" (default) or "bpe".
      character_coverage: fraction of characters covered by single-character pieces.
      max_sentences: sentences sampled for training when the corpus is larger (SentencePiece's
        own sampling; corpora up to this size train deterministically).
      num_threads: trainer threads.
    """
    if model_type not in SP_MODEL_TYPES:
      raise ValueError(f"unknown SentencePiece model type {model_type!r}; use {SP_MODEL_TYPES}")
    model = io.BytesIO()
    with open(os.devnull, "w") as log:
      spm.SentencePieceTrainer.train(
        sentence_iterator=(t for t in texts if t.strip()),
        model_writer=model,
        logstream=log,
        vocab_size=size,
        hard_vocab_limit=False,
        model_type=model_type,
        character_coverage=character_coverage,
        input_sentence_size=max_sentences,
        shuffle_input_sentence=True,
        num_threads=num_threads,
        pad_id=PAD_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        unk_id=UNK_ID,
        pad_piece=PAD,
        bos_piece=BOS,
        eos_piece=EOS,
        unk_piece=UNK,
        unk_surface=UNK,
      )
    return cls(model.getvalue(), size, model_type)

  @property
  def num_pieces(self) -> int:
    """Pieces in the trained model (specials included); at most `size`."""
    return self._sp.get_piece_size()

  def encode(self, text: str) -> list[int]:
    return self._sp.encode(text, out_type=int)

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    return self._sp.encode(list(texts), out_type=int)

  def sample(self, ids: Ids, alpha: float, nbest_size: int, rng: np.random.Generator) -> list[int]:
    """Another segmentation of the text that `ids` (no specials, no <unk>) spell, drawn by `rng`
    from the unigram model's `nbest_size` best segmentations x with probability proportional to
    P(x)**alpha (subword regularisation, Kudo 2018). The draw is numpy's: SentencePiece's own
    sampler does not repeat across processes for a given seed."""
    text = self._sp.decode(list(ids))
    nbest = self._sp.nbest_encode(text, nbest_size=nbest_size, return_type="proto").nbests
    weights = alpha * np.array([n.score for n in nbest], np.float64)
    weights = np.exp(weights - weights.max())
    pick = rng.choice(len(nbest), p=weights / weights.sum())
    return [piece.id for piece in nbest[pick].pieces]

  def tokenize(self, text: str) -> list[str]:
    return self._sp.encode(text, out_type=str)

  def detokenize(self, tokens: Sequence[str]) -> str:
    return self._sp.decode_pieces(list(tokens))

  def encode_tokens(self, tokens: Sequence[str]) -> list[int]:
    return [self._sp.piece_to_id(t) for t in tokens]

  def _valid(self, ids: Ids) -> list[int]:
    ids = [self._check_id(i) for i in strip_specials(ids)]
    return [i if i < self.num_pieces else UNK_ID for i in ids]

  def decode_tokens(self, ids: Ids) -> list[str]:
    return [self._sp.id_to_piece(i) for i in self._valid(ids)]

  def decode(self, ids: Ids) -> str:
    return self._sp.decode(self._valid(ids))

  def _metadata(self) -> dict[str, Any]:
    return {"model_type": self.model_type, "num_pieces": self.num_pieces}

  def _save_files(self, directory: Path) -> None:
    _write_atomic(directory / self.MODEL_FILE, self._proto)

  @classmethod
  def load(cls, directory: str | os.PathLike[str]) -> SentencePieceTokenizer:
    directory = Path(directory)
    meta = read_metadata(directory)
    proto = (directory / cls.MODEL_FILE).read_bytes()
    return cls(proto, meta["size"], meta["model_type"])


_CLASSES: dict[str, type[WordVocab] | type[SentencePieceTokenizer]] = {
  WordVocab.kind: WordVocab,
  SentencePieceTokenizer.kind: SentencePieceTokenizer,
}


def read_metadata(directory: str | os.PathLike[str]) -> dict[str, Any]:
  """Returns the contents of `directory/tokenizer.json`."""
  return json.loads((Path(directory) / META_FILE).read_text(encoding="utf-8"))


def has_vocabulary(directory: str | os.PathLike[str]) -> bool:
  """Whether `directory` holds a complete saved vocabulary."""
  return (Path(directory) / META_FILE).is_file()


def load(directory: str | os.PathLike[str]) -> Tokenizer:
  """Loads the vocabulary saved in `directory`, whatever its kind."""
  kind = read_metadata(directory)["kind"]
  if kind not in _CLASSES:
    raise ValueError(f"{directory}: unknown tokenizer kind {kind!r}; known kinds: {KINDS}")
  return _CLASSES[kind].load(directory)


def build(
  kind: str,
  size: int,
  texts: Iterable[str],
  *,
  sp_model_type: str = "unigram",
  pretokenizer: Pretokenizer | None = None,
) -> Tokenizer:
  """Builds a tokenizer of `kind` ("word" or "sentencepiece") from training `texts`.

  `pretokenizer` splits words for the word kind (SentencePiece reads raw text).
  """
  if kind == WordVocab.kind:
    return WordVocab.build(texts, size, pretokenizer)
  if kind == SentencePieceTokenizer.kind:
    if not size:
      raise ValueError("a vocabulary size of 0 (every word) needs the word tokenizer")
    return SentencePieceTokenizer.train(texts, size, model_type=sp_model_type)
  raise ValueError(f"unknown tokenizer kind {kind!r}; known kinds: {KINDS}")


def load_or_build(
  vocab_dir: str | os.PathLike[str],
  kind: str,
  size: int,
  texts_fn: Callable[[], Iterable[str]],
  *,
  sp_model_type: str = "unigram",
  pretokenizer: Pretokenizer | None = None,
  origin: str = "",
  counts_fn: Callable[[Pretokenizer], collections.Counter[str]] | None = None,
) -> Tokenizer:
  """Loads the vocabulary in `vocab_dir`, or builds it from `texts_fn()` and saves it there.

  A saved vocabulary is never rebuilt: if its kind, size (or SentencePiece model type) differs
  from the request, this raises ValueError naming the mismatch, since other ids would silently
  invalidate checkpoints trained with the saved ones.

  Args:
    vocab_dir: directory of the vocabulary (created when building).
    kind: "word" or "sentencepiece".
    size: id space including the four specials; 0: every word of the texts (word kind), and a
      saved vocabulary of any size.
    texts_fn: returns the training texts; only called when building.
    sp_model_type: SentencePiece model, "unigram" or "bpe".
    pretokenizer: word splitting of the word kind (default whitespace); part of the check.
    origin: names the training data (e.g. a dataset name and config); stored with a new
      vocabulary, and a loaded one built from another origin logs a warning (its ids are kept).
  """
  if kind not in KINDS:
    raise ValueError(f"unknown tokenizer kind {kind!r}; known kinds: {KINDS}")
  if has_vocabulary(vocab_dir):
    meta = read_metadata(vocab_dir)
    wanted = {"kind": kind, "size": size} if size else {"kind": kind}
    if kind == SentencePieceTokenizer.kind:
      wanted["model_type"] = sp_model_type
    else:
      pretokenizer = pretokenizer or Pretokenizer()
      wanted["pretokenizer"] = pretokenizer.name
      wanted["lang"] = pretokenizer.lang
    saved = {"pretokenizer": "none", "lang": "", **meta}  # Vocabularies older than the field.
    diffs = [
      f"{k}={saved.get(k)!r} (requested {v!r})" for k, v in wanted.items() if saved.get(k) != v
    ]
    if diffs:
      raise ValueError(
        f"the vocabulary saved in {vocab_dir} does not match the configuration: "
        f"{', '.join(diffs)}. Use another workdir or delete that directory to rebuild it."
      )
    if origin and meta.get("origin", "") != origin:
      logging.warning(
        "the vocabulary in %s was built from %r, not from %r; keeping its ids",
        vocab_dir,
        meta.get("origin", ""),
        origin,
      )
    return load(vocab_dir)
  if kind == WordVocab.kind and counts_fn is not None:
    pretokenizer = pretokenizer or Pretokenizer()
    tokenizer = WordVocab.from_counts(counts_fn(pretokenizer), size, pretokenizer)
  else:
    tokenizer = build(
      kind, size, texts_fn(), sp_model_type=sp_model_type, pretokenizer=pretokenizer
    )
  tokenizer.save(vocab_dir, origin=origin)
  return tokenizer


def _write_atomic(path: Path, data: bytes) -> None:
  tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
  tmp.write_bytes(data)
  os.replace(tmp, path)

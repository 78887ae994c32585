"""Input pipeline: tokenised corpora in memory, a checkpointable grain training iterator, and
evaluation batches in corpus order.

Every batch is a dict of numpy int32 arrays with a fixed number of rows B:

  src      [B, S]  source ids followed by EOS (the encoder sees where the sentence ends), then PAD
  src_mask [B, S]  1 on real positions (the tokens and that EOS), 0 on padding
  tgt_in   [B, T]  BOS followed by the target ids (decoder inputs under teacher forcing)
  tgt_out  [B, T]  the target ids followed by EOS (what the decoder predicts)
  tgt_mask [B, T]  1 on real positions of tgt_in/tgt_out
  index    [B]     example index within its split; -1 marks an empty padding row (masks all 0)

A multi-source corpus (`data.local.src_lang="en+de"`) packs both sources in `src` and `src_mask`,
[B, 2 S']: source 1 from column 0, source 2 from column S'. A copying model's `tgt_out` holds
extended ids V + j for target words outside the vocabulary spelled like source word j
(`seq2seq.data.copying`).

PAD is 0. S and T are the longest row of the (global) batch rounded up to a multiple of
`data.bucket_step`, so training (lengths at most `data.max_len` + 1) compiles at most
`max_len // bucket_step + 1` distinct sizes per axis.

The corpus is read and tokenised once by `load_data` and kept as flat int32 arrays with row
offsets; batches are gathered from those arrays with numpy, never re-tokenised.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grain
import ml_collections
import numpy as np
from absl import logging
from grain._src.python.experimental.index_shuffle.python import (
  index_shuffle_module as _index_shuffle,
)

from seq2seq.common import registry
from seq2seq.data import builders, copying, store, synthetic, wmt14
from seq2seq.data import tokenizer as tokenizer_lib

SPLIT_NAMES = tuple(builders.SPLITS)  # "train", "valid", "test"
BATCH_KEYS = ("src", "src_mask", "tgt_in", "tgt_out", "tgt_mask", "index")
BATCHINGS = ("paper", "tokens")

Batch = dict[str, np.ndarray]
Ragged = store.Ragged  # Where the rows of every split are kept (in memory or mapped).


# ------------------------------------------------------------------------------ in-memory corpus


@dataclasses.dataclass(frozen=True)
class Split:
  """One tokenised split: source/target ids (no BOS/EOS) and each pair's line in the corpus."""

  name: str
  src: Ragged
  tgt: Ragged
  line: np.ndarray  # [N] int64: 0-based line of the pair in the corpus files (local text keeps
  # the original numbering across skipped lines; otherwise equal to the index).
  align: Ragged | None = None  # Gold links per pair, flattened (s0, t0, s1, t1, ...): loaded
  # for the training split when attention is supervised (`train.loss_terms="supervision"`).
  src2: Ragged | None = None  # The second source of a multi-source corpus (`data.local.src_lang`
  # "en+de"): batches pack both sources side by side (`make_batch`).
  copy_tgt: Ragged | None = None  # A copying model's targets (`copying.copy_targets`): `tgt`
  # with <unk>s spelled like a source word as extended ids; the batch's `tgt_out` reads them.

  def __len__(self) -> int:
    return len(self.src)

  @property
  def src_lengths(self) -> np.ndarray:
    return self.src.lengths

  @property
  def sources(self) -> tuple[Ragged, ...]:
    """Every source's ids: (src,), or (src, src2) for a multi-source corpus."""
    return (self.src,) if self.src2 is None else (self.src, self.src2)

  @property
  def tgt_lengths(self) -> np.ndarray:
    return self.tgt.lengths


@dataclasses.dataclass
class Data:
  """Everything the trainer and evaluator need from the data layer.

  Attributes:
    src_tokenizer, tgt_tokenizer: the vocabularies (saved under WORKDIR/vocab/{src,tgt}).
    splits: "train", "valid", "test" -> tokenised `Split`.
    corpus: the prepared tfds corpus (raw text, gold alignments).
    stats: JSON-able counts: examples per split, pairs skipped while building (local text:
      invalid UTF-8 / empty side), training pairs dropped as longer than `data.max_len`, UNK
      rates and token counts.
  """

  src_tokenizer: tokenizer_lib.Tokenizer
  tgt_tokenizer: tokenizer_lib.Tokenizer
  splits: dict[str, Split]
  corpus: builders.Corpus
  stats: dict[str, Any]
  # Evaluation splits drawn from another: name -> (corpus split, indices of its examples).
  subsets: dict[str, tuple[str, np.ndarray]] = dataclasses.field(default_factory=dict)
  reverse: bool = False  # The corpus read target -> source (`reversed_data`).

  def raw(self, split: str) -> list[tuple[str, str, str | None]]:
    """`(src_text, tgt_text, align_text or None)` of every example of `split`, in order.

    The i-th entry is the example with `index == i` in `eval_batches(split)`. Alignments are
    Pharaoh "i-j" pairs (0-based source-target word positions); only the synthetic corpus has
    them. With `reverse`, sides are swapped and links transposed.
    """
    parent, keep = self.subsets.get(split, (split, None))
    rows = [(ex.src, ex.tgt, ex.align) for ex in self.corpus.read(parent)]
    if keep is not None:
      rows = [rows[i] for i in keep]
    if self.reverse:
      rows = [(t, s, None if a is None else _transpose_links(a)) for s, t, a in rows]
    return rows


def _transpose_links(text: str) -> str:
  """Pharaoh "s-t" links as "t-s", sorted."""
  links = sorted((t, s) for s, t in synthetic.parse_alignment(text))
  return synthetic.format_alignment(links)


def reversed_data(data: Data) -> Data:
  """The same corpus read target -> source: tokenizers, split sides and gold links swapped (for
  the reverse model of an agreement run)."""

  def swap(split: Split) -> Split:
    align = split.align
    if align is not None:
      pairs = align.values.reshape(-1, 2)[:, ::-1]
      align = Ragged(np.ascontiguousarray(pairs).reshape(-1), align.offsets)
    if split.copy_tgt is not None or split.src2 is not None:
      raise ValueError("a copying or multi-source model's data cannot be read target -> source")
    return Split(split.name, split.tgt, split.src, split.line, align)

  return dataclasses.replace(
    data,
    src_tokenizer=data.tgt_tokenizer,
    tgt_tokenizer=data.src_tokenizer,
    splits={name: swap(split) for name, split in data.splits.items()},
    reverse=not data.reverse,
  )


def subset(split: Split, keep: Sequence[int] | np.ndarray, name: str | None = None) -> Split:
  """The examples `keep` [N'] of `split` (every field: both sources of a multi-source corpus),
  in that order, as a split called `name` (default: the same name)."""
  keep = np.asarray(keep, np.int64)
  rows = lambda ragged: None if ragged is None else Ragged.from_lists([ragged.row(i) for i in keep])
  return Split(
    split.name if name is None else name,
    rows(split.src),
    rows(split.tgt),
    split.line[keep],
    rows(split.align),
    rows(split.src2),
    rows(split.copy_tgt),
  )


LONG_TEST = "test_long"  # The long-sentence evaluation split (`data.long_test_min_words`).


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """The `config.data` section, typed (configs/default.py says what each field means), with the
  two settings from elsewhere that loading the data reads: the run's `seed` (folded into the
  shuffle) and whether `model.addons` copies (copying targets). `from_config` builds it once
  from a run's config; everything below it reads this."""

  corpus: str
  src_vocab_size: int
  tgt_vocab_size: int
  tokenizer: str
  pretokenizer: str
  sp_model_type: str
  subword_sampling: str
  max_len: int
  batch_size: int
  batching: str
  pool_batches: int
  max_tokens: int
  bucket_step: int
  shuffle_seed: int
  cache_dir: str
  train_pairs: int
  long_test_min_words: int
  long_test_max_words: int
  synthetic: builders.SyntheticSettings
  local: builders.LocalSettings
  wmt14: wmt14.Wmt14Settings
  seed: int = 0
  copy: bool = False

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict | DataSettings) -> DataSettings:
    """The typed data settings of a run's config (itself if typed already)."""
    if isinstance(config, DataSettings):
      return config
    d = config.data
    sections = {
      "synthetic": registry.typed_section(
        builders.SyntheticSettings, dict(d.synthetic.items()), "data.synthetic"
      ),
      "local": registry.typed_section(builders.LocalSettings, dict(d.local.items()), "data.local"),
      "wmt14": registry.typed_section(wmt14.Wmt14Settings, dict(d.wmt14.items()), "data.wmt14"),
    }
    return registry.typed_section(
      cls,
      {**dict(d.items()), **sections},
      "data",
      seed=int(config.seed),
      copy=copying.asked(config.model.addons),
    )

  @property
  def sources(self) -> int:
    """How many source languages the corpus has (`num_sources`)."""
    return num_sources(self)


@dataclasses.dataclass(frozen=True)
class SubwordSampling:
  """`data.subword_sampling="sample(alpha=A, nbest_size=N)"`: training pairs segmented anew at
  every draw, from the unigram model's N best segmentations with probability proportional to
  P(x)**A (`tokenizer.SentencePieceTokenizer.sample`; Kudo 2018, whose l = 64 is the default)."""

  alpha: float = 0.1
  nbest_size: int = 64

  def __post_init__(self):
    if not 0.0 < self.alpha <= 1.0:
      raise ValueError(f"alpha must be in (0, 1], got {self.alpha}")
    if self.nbest_size < 2:
      raise ValueError(f"nbest_size must be at least 2 (64 is Kudo's), got {self.nbest_size}")


def subword_sampling(d: DataSettings) -> SubwordSampling | None:
  """The subword sampling of the settings, or None ("" or "none": the deterministic
  segmentation). ValueError in
  one line for a spec that is not `sample(...)` or a tokenizer that cannot sample."""
  if d.subword_sampling in ("", "none"):
    return None
  name = d.subword_sampling.partition("(")[0].strip()
  if name != "sample":
    raise ValueError(
      f'data.subword_sampling={d.subword_sampling!r}: use "sample(alpha=A, nbest_size=N)" or ""'
    )
  sampling = registry.parse_settings(SubwordSampling, d.subword_sampling, "data.subword_sampling")
  if d.tokenizer != "sentencepiece":
    raise ValueError(
      f'data.subword_sampling samples SentencePiece segmentations: data.tokenizer="{d.tokenizer}" '
      'has one segmentation (use data.tokenizer="sentencepiece")'
    )
  if d.sp_model_type != "unigram":
    raise ValueError(
      "data.subword_sampling draws from a unigram model's n best segmentations: "
      f'data.sp_model_type="{d.sp_model_type}" has none (use "unigram")'
    )
  if d.copy:
    raise ValueError(
      "data.subword_sampling and model.addons=copy are not combined (copy targets are "
      "spelled in the deterministic segmentation)"
    )
  return sampling


def has_long_test(data_config: DataSettings) -> bool:
  """Whether the data settings ask for the long test split (`data.long_test_min_words`)."""
  return data_config.long_test_min_words > 0


def long_test_indices(sources: Sequence[str], lo: int, hi: int) -> np.ndarray:
  """Indices of the source texts whose (first) source has between `lo` and `hi` whitespace
  words."""
  words = [len(builders.split_sources(src)[0].split()) for src in sources]
  return np.asarray([i for i, n in enumerate(words) if lo <= n <= hi], np.int64)


def languages(data_config: builders.CorpusSettings) -> tuple[str, str]:
  """Source and target language codes of `data.corpus` (Moses splits words per language); a
  multi-source corpus's first source language."""
  if data_config.corpus == "local":
    return builders.source_languages(data_config.local.src_lang)[0], data_config.local.tgt_lang
  return "en", "fr"


def source_vocab_size(data_config: DataSettings) -> int:
  """The size of the source vocabulary: `data.src_vocab_size` per source language, so two
  sources share one joint vocabulary of their words that holds twice as many (the specials
  once), and switching `data.local.src_lang` from "en" to "en+de" covers each language about as
  well as before; 0 (every training word) stays 0."""
  size, sources = data_config.src_vocab_size, num_sources(data_config)
  if size <= 0 or sources == 1:
    return size
  return tokenizer_lib.NUM_SPECIALS + sources * (size - tokenizer_lib.NUM_SPECIALS)


def num_sources(data_config: builders.CorpusSettings) -> int:
  """How many source languages the corpus has (2 for a multi-source "en+de")."""
  if data_config.corpus == "local":
    return len(builders.source_languages(data_config.local.src_lang))
  return 1


def parse_links(text: str, src_len: int, tgt_len: int, where: str) -> list[int]:
  """Pharaoh "s-t" pairs as a flat list (s0, t0, s1, t1, ...), each checked against the lengths.

  Raises ValueError naming `where` (file and line), the pair and the sentence lengths.
  """
  out = []
  for item in text.split():
    s, sep, t = item.partition("-")
    if not (sep and s.isdigit() and t.isdigit() and s.isascii() and t.isascii()):
      raise ValueError(f"{where}: malformed alignment pair {item!r}: expected 'i-j'")
    if int(s) >= src_len or int(t) >= tgt_len:
      raise ValueError(
        f"{where}: alignment pair {item!r} is out of range for a source of {src_len} and a "
        f"target of {tgt_len} tokens"
      )
    out += [int(s), int(t)]
  return out


def load_alignments(d: DataSettings, examples: Iterable[builders.Example], split: Split) -> Ragged:
  """The gold links of the training split: the corpus's own (embedded corpus) or, for local
  text, the file DIR/PREFIX.`data.local.align`, or the file `data.local.align` names where it is
  a path (one Pharaoh line per line of the text files).

  Positions index the tokens of the configured word tokenizer.
  """
  examples = list(examples)
  if d.corpus == "local":
    if not d.local.align:
      raise ValueError(
        "the supervision loss term on local text needs data.local.align: the suffix of the "
        "alignment file DIR/PREFIX.SUFFIX (one 'i-j ...' line per sentence pair)"
      )
    path = Path(d.local.align)  # A file of its own (`seq2seq.build_alignments` writes one),
    if len(path.parts) == 1:  # or a suffix of the training files'.
      path = Path(d.local.dir) / f"{d.local.train}.{d.local.align}"
    if not path.is_file():
      raise FileNotFoundError(f"alignment file {path} not found (data.local.align)")
    lines = path.read_text(encoding="utf-8").split("\n")
    texts = [
      (lines[ex.line] if ex.line < len(lines) else "", f"{path}:{ex.line + 1}") for ex in examples
    ]
  elif all(ex.align is not None for ex in examples):
    texts = [(ex.align, f"{d.corpus} train pair {i}") for i, ex in enumerate(examples)]
  else:
    raise ValueError(f"the {d.corpus} corpus has no alignments for the supervision loss term")
  src_len, tgt_len = split.src_lengths, split.tgt_lengths
  return Ragged.from_lists(
    [parse_links(text, src_len[i], tgt_len[i], where) for i, (text, where) in enumerate(texts)]
  )


def data_dir(d: DataSettings, workdir: str | os.PathLike[str]) -> Path:
  """Where built datasets live: `data.cache_dir`, or WORKDIR/data when that is empty."""
  return Path(d.cache_dir or Path(workdir) / "data")


_SIDES = ("src", "tgt", "src2")  # A split's id fields, the second source last (multi-source).


def _unk_rate(ragged: Ragged) -> float:
  return float(np.mean(ragged.values == tokenizer_lib.UNK_ID)) if ragged.values.size else 0.0


def length_filter(split: Split, max_len: int) -> np.ndarray:
  """[N] bool: pairs whose sources and target all have at most `max_len` tokens."""
  keep = (split.src_lengths <= max_len) & (split.tgt_lengths <= max_len)
  return keep if split.src2 is None else keep & (split.src2.lengths <= max_len)


def load_data(
  d: DataSettings,
  workdir: str | os.PathLike[str],
  *,
  batch_keys: Sequence[str] = (),
  verify: bool = True,
) -> Data:
  """Builds (or reuses) the tfds corpus, the vocabularies and the corpus store, and opens every
  split from the store; `batch_keys` are the extra batch keys the objective reads
  (`objective.Objective.batch_keys`: "align" loads the training split's gold alignments).

  Datasets go to `data_dir(d, workdir)`, vocabularies to WORKDIR/vocab/src and
  WORKDIR/vocab/tgt (built from the training split on first use; a saved vocabulary of another
  kind or size raises ValueError), and the tokenised splits to the store under
  `data_dir(d, workdir)`/store (`seq2seq.data.store`: prepared once, in parallel, then mapped
  from disk at every start, so no text is read or tokenised again). `verify`: check the
  store's checksums as well as its file sizes.
  """
  start = time.perf_counter()
  root = data_dir(d, workdir)
  corpus = builders.prepare_corpus(d, root)
  built = time.perf_counter()
  examples = functools.partial(_examples, d, corpus)
  vocab_dirs = (Path(workdir) / "vocab" / "src", Path(workdir) / "vocab" / "tgt")
  src_tok, tgt_tok = _vocabularies(d, corpus, vocab_dirs)
  vocabularies = time.perf_counter()

  parts = store.key(
    corpus, vocab_dirs, train_pairs=d.train_pairs, sources=num_sources(d), copy=d.copy
  )
  stored, manifest = store.prepared(root / "store", parts, corpus, vocab_dirs, verify=verify)
  splits = {
    name: Split(
      name,
      sides.sides["src"],
      sides.sides["tgt"],
      sides.line,
      src2=sides.sides.get("src2"),
      copy_tgt=sides.sides.get("copy_tgt"),
    )
    for name, sides in stored.items()
  }
  if "align" in batch_keys:  # A term of the objective reads gold links.
    links = load_alignments(d, examples("train"), splits["train"])
    splits["train"] = dataclasses.replace(splits["train"], align=links)
  subsets = {}
  if has_long_test(d):
    lo, hi = d.long_test_min_words, d.long_test_max_words
    keep = long_test_indices([ex.src for ex in examples("test")], lo, hi)
    if keep.size == 0:
      raise ValueError(
        f"no test pair has {lo} to {hi} source words (data.long_test_min_words/max_words); "
        "the embedded corpus makes longer sentences with data.synthetic.max_len"
      )
    splits[LONG_TEST] = subset(splits["test"], keep, LONG_TEST)
    subsets[LONG_TEST] = ("test", keep)
  opened = time.perf_counter()

  stats = _stats(d, splits, manifest)
  stats["seconds"] = {
    "corpus": built - start,
    "vocabularies": vocabularies - built,
    "store": opened - vocabularies,
  }
  stats["store"] = {"path": str(store.store_dir(root / "store", parts)), **manifest["prepared"]}
  logging.info(
    "data: %s; %d training pairs longer than max_len=%d are dropped; skipped while building: %s;"
    " corpus %.1fs, vocabularies %.1fs, store %.1fs",
    stats["examples"],
    stats["train_too_long"],
    d.max_len,
    stats["skipped_while_building"],
    built - start,
    vocabularies - built,
    opened - vocabularies,
  )
  return Data(src_tok, tgt_tok, splits, corpus, stats, subsets)


def _examples(
  d: DataSettings, corpus: builders.Corpus | builders.TextCorpus, name: str
) -> Iterator[builders.Example]:
  """The pairs of split `name` as text, in order: of the training split its first
  `data.train_pairs` where that is positive (the vocabularies are built from them too)."""
  read = corpus.read(name)
  limit = d.train_pairs if name == "train" else 0
  return itertools.islice(read, limit) if limit > 0 else read


def _vocabularies(
  d: DataSettings, corpus: builders.Corpus | builders.TextCorpus, vocab_dirs: tuple[Path, Path]
) -> tuple[tokenizer_lib.Tokenizer, tokenizer_lib.Tokenizer]:
  """The source and target vocabularies saved in `vocab_dirs`, built from the training split
  first where missing (words counted in worker processes for a large corpus)."""
  identity = corpus.identity()
  origin = f"{identity['corpus']}/{identity['config']} train"

  def texts(side: str):
    train = _examples(d, corpus, "train")
    if side == "tgt":
      return (ex.tgt for ex in train)
    sources = num_sources(d)
    return (text for ex in train for text in builders.split_sources(ex.src, sources))

  def vocabulary(side: str, size: int, name: str, lang: str) -> tokenizer_lib.Tokenizer:
    return tokenizer_lib.load_or_build(
      vocab_dirs[side == "tgt"],
      d.tokenizer,
      size,
      lambda: texts(side),
      sp_model_type=d.sp_model_type,
      pretokenizer=tokenizer_lib.Pretokenizer(d.pretokenizer, lang),
      origin=f"{origin} {name}",
      counts_fn=lambda pretokenizer: store.count_words(texts(side), pretokenizer),
    )

  src_lang, tgt_lang = languages(d)
  return (
    vocabulary("src", source_vocab_size(d), "source", src_lang),
    vocabulary("tgt", d.tgt_vocab_size, "target", tgt_lang),
  )


def _stats(d: DataSettings, splits: dict[str, Split], manifest: dict[str, Any]) -> dict[str, Any]:
  """The JSON-able counts of `Data.stats`: the store's per split, the long test split's."""
  counts = {name: manifest["splits"][name] for name in SPLIT_NAMES}
  if LONG_TEST in splits:
    long_split = splits[LONG_TEST]
    counts[LONG_TEST] = {
      "tokens": {side: int(getattr(long_split, side).values.size) for side in _sides(long_split)},
      "unk_rate": {side: _unk_rate(getattr(long_split, side)) for side in _sides(long_split)},
    }
  per_side = lambda field: {
    f"{name}_{side}": c[field][side]
    for name, c in counts.items()
    for side in _SIDES
    if side in c[field]
  }
  return {
    "corpus": d.corpus,
    "examples": {name: len(split) for name, split in splits.items()},
    "skipped_while_building": manifest["skipped"],
    "train_too_long": int(np.sum(~length_filter(splits["train"], d.max_len))),
    "unk_rate": per_side("unk_rate"),
    "tokens": per_side("tokens"),
  }


def _sides(split: Split) -> tuple[str, ...]:
  """The id fields `split` has: src, tgt and (multi-source) src2."""
  return _SIDES[: 2 + (split.src2 is not None)]


# ------------------------------------------------------------------------------ batch assembly


def round_up(n: int, step: int) -> int:
  """The smallest multiple of `step` that is >= max(n, 1)."""
  return -(-max(int(n), 1) // step) * step


def _fill(
  out: np.ndarray,
  ragged: Ragged,
  ids: np.ndarray,
  out_rows: np.ndarray,
  start_col: int,
  eos_after: bool,
) -> None:
  """Writes the sequences `ids` [n] of `ragged` into rows `out_rows` [n] of `out` [b, W].

  Each starts at column `start_col` and, with `eos_after`, is followed by EOS. Vectorised: one
  fancy-indexed assignment for all tokens.
  """
  lengths = ragged.lengths[ids]
  rows = np.repeat(out_rows, lengths)
  within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
  out[rows, within + start_col] = ragged.values[np.repeat(ragged.offsets[ids], lengths) + within]
  if eos_after:
    out[out_rows, lengths + start_col] = tokenizer_lib.EOS_ID


def make_batch(split: Split, ids: np.ndarray, bucket_step: int, rows: slice = slice(None)) -> Batch:
  """Assembles the batch of examples `ids` [B] (-1: empty padding row); see the module doc.

  The padded lengths S and T come from all B rows, so every process that assembles its own
  `rows` of the same global batch gets the same shapes.

  A multi-source split packs its two sources side by side: src [b, 2 S'], source 1 (and its EOS)
  from column 0, source 2 from column S', each padded to S' (`models` splits them there).

  Returns:
    src, src_mask [b, S]; tgt_in, tgt_out, tgt_mask [b, T]; index [b]; b = rows of `rows`.
  """
  ids = np.asarray(ids, np.int64)
  real = ids >= 0
  safe = np.where(real, ids, 0)
  sources = [split.src] if split.src2 is None else [split.src, split.src2]
  src_lens = [np.where(real, ragged.lengths[safe] + 1, 0) for ragged in sources]  # + EOS
  tgt_len = np.where(real, split.tgt.lengths[safe] + 1, 0)  # + BOS (in) / EOS (out)
  s = round_up(max(n.max(initial=0) for n in src_lens), bucket_step)
  t = round_up(tgt_len.max(initial=0), bucket_step)

  ids, tgt_len = ids[rows], tgt_len[rows]
  (live_rows,) = np.nonzero(ids >= 0)
  live = ids[live_rows]
  src = np.zeros((len(ids), s * len(sources)), np.int32)
  src_mask = np.zeros(src.shape, np.int32)
  for k, (ragged, src_len) in enumerate(zip(sources, src_lens, strict=True)):
    _fill(src, ragged, live, live_rows, k * s, eos_after=True)
    src_mask[:, k * s : (k + 1) * s] = np.arange(s) < src_len[rows][:, None]
  tgt_in = np.zeros((len(ids), t), np.int32)
  tgt_out = np.zeros((len(ids), t), np.int32)
  tgt_in[live_rows, 0] = tokenizer_lib.BOS_ID
  _fill(tgt_in, split.tgt, live, live_rows, 1, eos_after=False)
  out_ids = split.tgt if split.copy_tgt is None else split.copy_tgt
  _fill(tgt_out, out_ids, live, live_rows, 0, eos_after=True)
  batch = {
    "src": src,
    "src_mask": src_mask,
    "tgt_in": tgt_in,
    "tgt_out": tgt_out,
    "tgt_mask": (np.arange(t) < tgt_len[:, None]).astype(np.int32),
    "index": ids.astype(np.int32),
  }
  if split.align is not None:  # Gold links as a 0/1 matrix [b, T, S]: align[t, s] = 1.
    align = np.zeros((len(ids), t, s), np.float32)
    counts = split.align.lengths[live] // 2
    pairs = np.concatenate([split.align.row(i) for i in live]).reshape(-1, 2) if len(live) else []
    if len(pairs):
      align[np.repeat(live_rows, counts), pairs[:, 1], pairs[:, 0]] = 1.0
    batch["align"] = align
  return batch


def process_rows(batch_size: int, process_index: int, process_count: int) -> slice:
  """The rows of a global batch that process `process_index` of `process_count` assembles."""
  if process_count < 1 or not 0 <= process_index < process_count:
    raise ValueError(f"process_index={process_index} is not in [0, process_count={process_count})")
  if batch_size % process_count:
    raise ValueError(
      f"data.batch_size={batch_size} is not divisible by process_count={process_count}; "
      "every process must get the same number of rows"
    )
  per_process = batch_size // process_count
  return slice(process_index * per_process, (process_index + 1) * per_process)


# ------------------------------------------------------------------------------ training


def _pool_order(pool: np.ndarray, split: Split) -> np.ndarray:
  """`pool` [P] sorted by target length, then source length (stable)."""
  return pool[np.lexsort((split.src_lengths[pool], split.tgt_lengths[pool]))]


def paper_batches(pool: np.ndarray, split: Split, batch_size: int) -> list[np.ndarray]:
  """Splits a pool of `pool_batches * batch_size` example ids into length-sorted batches [B]."""
  return list(_pool_order(pool, split).reshape(-1, batch_size))


def token_batches(
  pool: np.ndarray, split: Split, batch_size: int, max_tokens: int, bucket_step: int
) -> list[np.ndarray]:
  """Splits a pool into batches [B] of consecutive length-sorted examples under a token budget.

  A batch takes examples while `rows * T <= max_tokens` (T: its padded target length) and
  `rows <= batch_size`; the rest of its B rows are padding (-1), so every batch keeps the
  shape [B, T]. The budget thus caps the real target tokens of an update (long sentences
  come in smaller batches); it cannot raise the row count above B.
  """
  ordered = _pool_order(pool, split)
  padded_t = -(-(split.tgt_lengths[ordered] + 1) // bucket_step) * bucket_step
  batches, start = [], 0
  while start < len(ordered):
    end = start + 1
    while (
      end < len(ordered)
      and end - start < batch_size
      and (end + 1 - start) * padded_t[end] <= max_tokens
    ):
      end += 1
    batch = np.full(batch_size, -1, np.int64)
    batch[: end - start] = ordered[start:end]
    batches.append(batch)
    start = end
  return batches


class _Unpool(grain.experimental.FlatMapTransform):
  """Turns a pool (a list of (pool index, id batch)) into one element per batch."""

  def __init__(self, max_fan_out: int):
    self.max_fan_out = max_fan_out

  def flat_map(self, element: list[tuple[int, np.ndarray]]) -> list[tuple[int, np.ndarray]]:
    return element


def sampled_batch(
  data: Data,
  split: Split,
  ids: np.ndarray,
  draw: int,
  d: DataSettings,
  sampling: SubwordSampling,
  rows: slice = slice(None),
) -> Batch:
  """`make_batch` of the examples `ids` with every side segmented anew by `sampling`, seeded by
  the run's seed, `data.shuffle_seed`, `draw` (which pool of the stream drew them), the example
  and the side, so the same batch of the stream is the same batch in any run or resume. An
  example whose sampled segmentation is longer than `data.max_len` keeps its deterministic one,
  as does a side holding <unk> (its text cannot be spelled again)."""
  ids = np.asarray(ids, np.int64)
  live = [int(i) for i in ids if i >= 0]
  sides = {"src": (split.src, data.src_tokenizer), "tgt": (split.tgt, data.tgt_tokenizer)}
  if split.src2 is not None:
    sides["src2"] = (split.src2, data.src_tokenizer)
  resampled = {}
  for k, (side, (ragged, tok)) in enumerate(sides.items()):
    out = []
    for i in live:
      row = ragged.row(i)
      if (row == tokenizer_lib.UNK_ID).any():
        out.append(row)
        continue
      rng = np.random.default_rng([d.seed, d.shuffle_seed, draw, i, k])
      pieces = tok.sample(row, sampling.alpha, sampling.nbest_size, rng)
      out.append(pieces if 0 < len(pieces) <= d.max_len else row)
    resampled[side] = Ragged.from_lists(out)
  drawn = Split(
    split.name,
    resampled["src"],
    resampled["tgt"],
    split.line[live],
    src2=resampled.get("src2"),
  )
  positions = np.full(len(ids), -1, np.int64)
  positions[ids >= 0] = np.arange(len(live))
  batch = make_batch(drawn, positions, d.bucket_step, rows)
  batch["index"] = ids[rows].astype(np.int32)  # The examples' indices in the training split.
  return batch


def shuffled_positions(pool: int, size: int, n: int, seed: int) -> np.ndarray:
  """[size] int64: the example positions (in [0, n)) at stream positions [pool size, (pool + 1)
  size) of the epochs shuffled one after another, epoch e by grain's index shuffle seeded
  (seed + e) mod 2**32, as grain's `ShuffleMapDataset` under `repeat` orders them."""
  out = np.empty(size, np.int64)
  shuffle = _index_shuffle.index_shuffle
  for k, position in enumerate(range(pool * size, (pool + 1) * size)):
    epoch, index = divmod(position, n)
    out[k] = shuffle(index, n - 1, (seed + epoch) % 2**32, 4)
  return out


def _shuffle_seed(d: DataSettings) -> int:
  """A 32-bit seed folding the run's `seed` with `data.shuffle_seed`."""
  return int(np.random.SeedSequence([d.seed, d.shuffle_seed]).generate_state(1)[0])


def train_dataset(
  data: Data,
  d: DataSettings,
  *,
  process_index: int = 0,
  process_count: int = 1,
) -> grain.IterDataset:
  """The infinite training stream of batches (see the module doc for the batch layout).

  Pipeline (grain):
    1. pairs with either side longer than `data.max_len` tokens are dropped (counted in
       `data.stats["train_too_long"]`);
    2. the remaining example ids are shuffled with a new permutation every epoch
       (`MapDataset.shuffle(...).repeat()`, seeded by `seed` and `data.shuffle_seed`);
    3. the stream is cut into pools of `pool_batches * batch_size` ids;
    4. each pool is sorted by (target, source) length and split into batches: `batching=
       "paper"` gives `pool_batches` full batches, `"tokens"` as many as the token budget
       `max_tokens` needs (see `token_batches`); the order of a pool's batches is shuffled
       (seeded by the pool index);
    5. each process assembles its rows `process_rows(...)` of every global batch, with
       `data.subword_sampling` segmenting its pairs anew (`sampled_batch`).

  Pools run across epoch boundaries, so no pair is dropped at the end of an epoch.
  """
  if d.batching not in BATCHINGS:
    raise ValueError(f"unknown data.batching {d.batching!r}; use one of {BATCHINGS}")
  rows = process_rows(d.batch_size, process_index, process_count)
  split = data.splits["train"]
  keep = np.flatnonzero(length_filter(split, d.max_len))
  if keep.size == 0:
    raise ValueError(f"no training pair has both sides within data.max_len={d.max_len} tokens")
  longest_t = round_up(d.max_len + 1, d.bucket_step)
  if d.batching == "tokens" and d.max_tokens < longest_t:
    raise ValueError(
      f"data.max_tokens={d.max_tokens} cannot hold one target of the padded length "
      f"{longest_t} (data.max_len={d.max_len}, data.bucket_step={d.bucket_step})"
    )

  seed = _shuffle_seed(d)
  pool_size = d.pool_batches * d.batch_size
  if d.batching == "paper":
    split_pool = functools.partial(paper_batches, split=split, batch_size=d.batch_size)
  else:
    split_pool = functools.partial(
      token_batches,
      split=split,
      batch_size=d.batch_size,
      max_tokens=d.max_tokens,
      bucket_step=d.bucket_step,
    )

  def pool_to_batches(pool_index: int, positions: np.ndarray) -> list[tuple[int, np.ndarray]]:
    batches = split_pool(keep[positions])
    order = np.random.default_rng([seed, pool_index]).permutation(len(batches))
    return [(pool_index, batches[i]) for i in order]

  sampling = subword_sampling(d)
  if sampling is None:
    assemble = lambda item: make_batch(split, item[1], d.bucket_step, rows)
  else:
    assemble = lambda item: sampled_batch(data, split, item[1], item[0], d, sampling, rows)
  # Pool p holds positions [p P, (p + 1) P) of the endless stream of shuffled epochs: what
  # grain's `MapDataset.range(n).shuffle(seed).repeat().batch(P)` yields, computed here with
  # grain's own index shuffle without its per-element datasets (which cost five times the
  # batch assembly), so the order, and the iterator state a checkpoint keeps, are unchanged.
  pools = grain.MapDataset.range(sys.maxsize // pool_size)
  ds = pools.map(lambda p: pool_to_batches(p, shuffled_positions(p, pool_size, len(keep), seed)))
  ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
  ds = grain.experimental.FlatMapIterDataset(ds, _Unpool(max_fan_out=pool_size))
  return ds.map(assemble)


def train_iterator(
  data: Data,
  d: DataSettings,
  *,
  process_index: int = 0,
  process_count: int = 1,
) -> grain.DatasetIterator:
  """A checkpointable iterator over `train_dataset` batches.

  `it.get_state()` is a small dict of ints (JSON-serialisable); `it.set_state(state)` on a fresh
  iterator built with the same data and settings resumes at exactly the next batch.
  """
  ds = train_dataset(data, d, process_index=process_index, process_count=process_count)
  return iter(ds)


# ------------------------------------------------------------------------------ evaluation


def eval_batches(
  data: Data,
  split: str,
  d: DataSettings,
  *,
  batch_size: int | None = None,
  process_index: int = 0,
  process_count: int = 1,
) -> Iterator[Batch]:
  """Batches of `split` ("valid" or "test"; "train" works too) in corpus order, once.

  No filtering and no shuffling: the examples appear in order, each exactly once (`index`),
  and the last batch is completed with empty rows (index -1, masks 0). `batch_size` defaults to
  `data.batch_size`; with several processes each gets its rows of every batch.
  """
  if split not in data.splits:
    raise ValueError(f"unknown split {split!r}; use one of {tuple(data.splits)}")
  size = batch_size or d.batch_size
  rows = process_rows(size, process_index, process_count)
  return iter_batches(data.splits[split], size, d.bucket_step, rows)


def iter_batches(
  split: Split, batch_size: int, bucket_step: int, rows: slice = slice(None)
) -> Iterator[Batch]:
  """Every example of `split` once, in order, in batches of `batch_size` (last one padded)."""
  for start in range(0, len(split), batch_size):
    ids = np.full(batch_size, -1, np.int64)
    stop = min(start + batch_size, len(split))
    ids[: stop - start] = np.arange(start, stop)
    yield make_batch(split, ids, bucket_step, rows)


# ------------------------------------------------------------------------------ decoding order

# How decoding walks a split: "length" decodes its sentences longest first, so a batch holds
# sentences of about one length (less padding, and no short sentence waits on a long one's
# steps); "file" decodes them in the split's order. Results come back in the split's order
# either way (each batch's `index`).
DECODE_ORDERS = ("length", "file")


def longest_first(split: Split) -> np.ndarray:
  """The split's indices [N] by source length, longest first (a multi-source pair by its longer
  source); a stable sort, so sentences of one length keep the split's order."""
  src = np.max([ragged.lengths for ragged in split.sources], axis=0)
  return np.argsort(-src, kind="stable")


def row_sizes(batch_size: int, multiple: int = 1) -> list[int]:
  """The row counts a decoding batch under a token budget may have, largest first:
  `batch_size` and its halvings, each rounded up to a multiple of `multiple` (the devices a
  batch is split over), down to `multiple`; about log2(batch_size) of them, so few shapes
  compile."""
  sizes, rows = [], batch_size
  while True:
    size = round_up(rows, multiple)
    if not sizes or size < sizes[-1]:
      sizes.append(size)
    if size <= multiple:
      return sizes
    rows //= 2


def decoding_batches(
  split: Split,
  batch_size: int,
  bucket_step: int,
  *,
  order: str = "file",
  max_tokens: int = 0,
  multiple: int = 1,
) -> Iterator[Batch]:
  """Every example of `split` once, in batches for decoding, in `order` (`DECODE_ORDERS`).

  Without a budget (`max_tokens` 0) a batch takes `batch_size` examples in `round_up(batch_size,
  multiple)` rows, the last one padded with empty rows (index -1), as `iter_batches`. With one, a
  batch takes consecutive examples while its `src` array (rows times padded source columns) holds
  at most `max_tokens` tokens, padding included, and at most `batch_size` examples; its rows are
  the fewest of `row_sizes` that hold them (one example over the budget goes alone, in the
  fewest rows). Either way every batch has rows divisible by `multiple`.
  """
  if order not in DECODE_ORDERS:
    raise ValueError(f"unknown decoding order {order!r}; use one of {DECODE_ORDERS}")
  ids = longest_first(split) if order == "length" else np.arange(len(split))
  if not max_tokens:
    rows = round_up(batch_size, multiple)
    for start in range(0, len(ids), batch_size):
      batch = np.full(rows, -1, np.int64)
      chunk = ids[start : start + batch_size]
      batch[: len(chunk)] = chunk
      yield make_batch(split, batch, bucket_step)
    return
  sizes = row_sizes(batch_size, multiple)[::-1]  # Fewest rows first.
  fits = lambda n: next(size for size in sizes if size >= n)  # The fewest rows holding n.
  columns = np.max([ragged.lengths for ragged in split.sources], axis=0) + 1  # + EOS.
  columns = (-(-columns // bucket_step) * bucket_step * len(split.sources))[ids]
  start = 0
  while start < len(ids):
    end, widest = start + 1, columns[start]
    while end < len(ids) and end - start < batch_size:
      wider = max(widest, columns[end])
      if fits(end + 1 - start) * wider > max_tokens:
        break
      end, widest = end + 1, wider
    batch = np.full(fits(end - start), -1, np.int64)
    batch[: end - start] = ids[start:end]
    yield make_batch(split, batch, bucket_step)
    start = end

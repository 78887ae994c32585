"""The corpora: tfds builders written as array_record and read back with `tfds.data_source`, and
local text read from its files.

Three corpora, chosen by `config.data.corpus`:

- "synthetic": `SyntheticCorpus`, the embedded generator (`seq2seq/data/synthetic.py`) with
  gold word alignments. Its BuilderConfig name encodes every generator setting and a hash of the
  generator's source, so a changed setting or generator never reuses a stale build.
- "local": `TextCorpus`, two line-aligned UTF-8 files per split (`DIR/PREFIX.SRC_LANG` and
  `DIR/PREFIX.TGT_LANG`), read straight from the files (no tfds copy: the corpus store is the
  one prepared form). Its config name encodes the languages, prefixes and a hash of the files'
  paths and contents.
- "wmt14": WMT'14 English -> French as in the paper (`seq2seq/data/wmt14.py`), by one of two
  readers (`config.data.wmt14.reader`). "raw" is `Wmt14Text`: statmt.org's files, unpacked by
  the user, read straight from them as streams (plain, gzip, SGML) like local text. "tfds" is
  tfds' own WMT builder: the catalogue's `wmt14_translate/fr-en`, or a custom configuration of
  `wmt_translate` for other splits. Preparing it downloads the archives, which needs internet
  access; where that is missing, prepare the catalogue's elsewhere with
  `tfds build wmt14_translate/fr-en --file_format=array_record --data_dir=DIR` and set
  `config.data.cache_dir=DIR`. Reading it back needs neither.

Every builder of this module keeps the generation order (`disable_shuffling=True`), so
evaluation outputs line up with their inputs; tfds' WMT builders store a hashed order. Nothing
here needs TensorFlow.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import gzip
import hashlib
import inspect
import io
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import tensorflow_datasets as tfds
from absl import logging

from seq2seq.common import files
from seq2seq.data import synthetic, wmt14

# Pipeline split names -> tfds split names.
SPLITS = {"train": "train", "valid": "validation", "test": "test"}
# Reasons a local pair is skipped, in the order they are checked.
SKIP_REASONS = ("invalid_utf8", "empty")
FILE_FORMAT = "array_record"
_READ_CHUNK = 4096


def _config_name(*parts: Any) -> str:
  """A tfds-safe BuilderConfig name (letters, digits, `_ - + .`) from `parts`."""
  return re.sub(r"[^\w\-+.]", "_", "-".join(str(p) for p in parts))


def _short_hash(*parts: Any) -> str:
  return hashlib.sha256(repr(parts).encode("utf-8")).hexdigest()[:12]


class _Info(tfds.core.DatasetInfo):
  """DatasetInfo of a corpus built here. For a dataset not yet prepared, tfds first makes a temp
  folder, which it never removes (one empty folder per builder made), and then asks its GCS
  bucket for the info (a lookup tfds keeps switched off). These corpora are never in the
  bucket, so the lookup is skipped."""

  def initialize_from_bucket(self) -> None:
    pass


class _Builder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Base of this module's builders: array_record text datasets that download nothing."""

  # tfds' default `code_path` probes the `importlib_resources` backport (not installed on
  # Python >= 3.9) for builders defined inside a package. It only locates download checksums,
  # which these builders do not have.
  code_path = None

  def _text_info(self, metadata=None, **extra_features) -> tfds.core.DatasetInfo:
    """Corpus-ordered info with "src" and "tgt" text features plus `extra_features`."""
    features = {"src": tfds.features.Text(), "tgt": tfds.features.Text(), **extra_features}
    return _Info(
      builder=self,
      description=self.__doc__,
      features=tfds.features.FeaturesDict(features),
      metadata=metadata,
      disable_shuffling=True,
    )


# ------------------------------------------------------------------------------ synthetic corpus


@dataclasses.dataclass(frozen=True)
class SyntheticSettings:
  """The `config.data.synthetic` section, typed (configs/default.py says what each means)."""

  train_pairs: int
  valid_pairs: int
  test_pairs: int
  vocab_size: int
  min_len: int
  max_len: int
  seed: int


@dataclasses.dataclass(frozen=True)
class LocalSettings:
  """The `config.data.local` section, typed."""

  dir: str
  src_lang: str
  tgt_lang: str
  train: str
  valid: str
  test: str
  align: str


class CorpusSettings(Protocol):
  """What building a corpus reads of the data settings (`input_pipeline.DataSettings`)."""

  corpus: str
  synthetic: SyntheticSettings
  local: LocalSettings
  wmt14: wmt14.Wmt14Settings


@dataclasses.dataclass(eq=False)
class SyntheticConfig(tfds.core.BuilderConfig):
  """Generator settings of the embedded corpus (see `config.data.synthetic`)."""

  train_pairs: int = 0
  valid_pairs: int = 0
  test_pairs: int = 0
  vocab_size: int = 0
  min_len: int = 0
  max_len: int = 0
  seed: int = 0

  @classmethod
  def from_settings(cls, settings: SyntheticSettings) -> SyntheticConfig:
    """Builds the config from `config.data.synthetic`; the name encodes every field."""
    s = settings
    generator = _short_hash(inspect.getsource(synthetic))[:8]
    name = _config_name(
      f"n{s.train_pairs}.{s.valid_pairs}.{s.test_pairs}",
      f"v{s.vocab_size}",
      f"len{s.min_len}.{s.max_len}",
      f"seed{s.seed}",
      f"gen{generator}",
    )
    return cls(
      name=name,
      description="Synthetic parallel corpus with gold alignments.",
      train_pairs=s.train_pairs,
      valid_pairs=s.valid_pairs,
      test_pairs=s.test_pairs,
      vocab_size=s.vocab_size,
      min_len=s.min_len,
      max_len=s.max_len,
      seed=s.seed,
    )


class SyntheticCorpus(_Builder):
  """The embedded corpus: features "src", "tgt" (space-separated words), "align" (Pharaoh).

  "align" holds `src_index-tgt_index` pairs, 0-based, e.g. "0-0 1-2 2-1".
  """

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "First version."}

  def _info(self) -> tfds.core.DatasetInfo:
    return self._text_info(align=tfds.features.Text())

  def _split_generators(self, dl_manager: Any) -> dict[str, Iterator[tuple[int, dict[str, str]]]]:
    del dl_manager  # Nothing to download.
    c = self.builder_config
    sizes = {"train": c.train_pairs, "valid": c.valid_pairs, "test": c.test_pairs}
    return {SPLITS[s]: self._generate_examples(s, n) for s, n in sizes.items()}

  def _generate_examples(self, split: str, num_pairs: int) -> Iterator[tuple[int, dict[str, str]]]:
    c = self.builder_config
    pairs = synthetic.generate(
      num_pairs,
      seed=c.seed,
      split=split,
      vocab_size=c.vocab_size,
      min_len=c.min_len,
      max_len=c.max_len,
    )
    for i, pair in enumerate(pairs):
      yield (
        i,
        {
          "src": " ".join(pair.src),
          "tgt": " ".join(pair.tgt),
          "align": synthetic.format_alignment(pair.align),
        },
      )


# ------------------------------------------------------------------------------ local text


@dataclasses.dataclass(eq=False)
class LocalTextConfig(tfds.core.BuilderConfig):
  """Where the local parallel text lives (see `config.data.local`)."""

  directory: str = ""
  src_lang: str = ""
  tgt_lang: str = ""
  prefixes: tuple[tuple[str, str], ...] = ()  # (pipeline split, file prefix) pairs.

  @classmethod
  def from_settings(
    cls, settings: LocalSettings, digests: str | os.PathLike[str] | None = None
  ) -> LocalTextConfig:
    """Builds the config from `config.data.local`, checking that every file exists.

    The name encodes the languages, the prefixes and a hash of the files' resolved paths and
    contents: edited files get a fresh build, and a fresh copy of the same files (new
    modification times) reuses the old one. Hashing reads every file (Multi30k's 6 MB: about
    4 ms; 10M pairs, 2.7 GB: 3.9 s); with `digests`, a JSON file of the digests found before
    (`DigestCache`), a file whose size, modification time and inode are unchanged is not read
    again.

    Raises:
      FileNotFoundError: a split file is missing (the message names it).
    """
    s = settings
    directory = Path(s.dir).expanduser().resolve()
    prefixes = tuple((split, str(getattr(s, split))) for split in SPLITS)
    config = cls(
      name="unnamed",
      description=f"Parallel text from {directory}.",
      directory=str(directory),
      src_lang=s.src_lang,
      tgt_lang=s.tgt_lang,
      prefixes=prefixes,
    )
    known = DigestCache(digests)
    fingerprint = [(str(p), known.digest(p)) for paths in config.files().values() for p in paths]
    known.save()
    langs = f"{s.src_lang}.{s.tgt_lang}"
    name = _config_name(directory.name, langs, _short_hash(prefixes, fingerprint))
    return dataclasses.replace(config, name=name)

  def files(self) -> dict[str, tuple[Path, ...]]:
    """Maps each pipeline split to its (source file, ..., target file): one source file per
    language of `src_lang` ("en+de": two, multi-source).

    Raises:
      FileNotFoundError: a file is missing.
    """
    out = {}
    for split, prefix in self.prefixes:
      paths = tuple(Path(self.directory) / f"{prefix}.{lang}" for lang in self.langs)
      for path in paths:
        if not path.is_file():
          raise FileNotFoundError(
            f"parallel text file {path} not found (split {split!r}); set "
            f"config.data.local.dir (now {self.directory!r}), .{split}, .src_lang or "
            f".tgt_lang so that DIR/PREFIX.LANG names the files"
          )
      out[split] = paths
    return out

  @property
  def langs(self) -> tuple[str, ...]:
    """The source languages, then the target's."""
    return (*source_languages(self.src_lang), self.tgt_lang)


class DigestCache:
  """The SHA-256 of files by path, kept in a JSON file (`path`; None: nothing kept) with the
  size, modification time (ns) and inode each had when it was read: a file that still has all
  three is not read again. An edit changes the modification time, so it is read again; a tool
  that edits a file and then sets its time back would go unseen (delete the JSON file to read
  everything again)."""

  def __init__(self, path: str | os.PathLike[str] | None):
    self.path = None if path is None else Path(path)
    self.entries: dict[str, dict[str, Any]] = {}
    self.changed = False
    if self.path is not None and self.path.is_file():
      try:
        self.entries = json.loads(self.path.read_text(encoding="utf-8"))
      except (ValueError, UnicodeDecodeError):  # A damaged cache is only a slower start.
        self.entries = {}

  def digest(self, path: Path) -> str:
    stat = path.stat()
    seen = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "inode": stat.st_ino}
    entry = self.entries.get(str(path))
    if entry is not None and all(entry.get(k) == v for k, v in seen.items()):
      return entry["sha256"]
    with path.open("rb") as f:
      digest = hashlib.file_digest(f, "sha256").hexdigest()
    self.entries[str(path)] = {**seen, "sha256": digest}
    self.changed = True
    return digest

  def save(self) -> None:
    """Writes the entries back where they changed (whole or not at all)."""
    if self.path is not None and self.changed:
      self.path.parent.mkdir(parents=True, exist_ok=True)
      files.write_atomic(self.path, json.dumps(self.entries, indent=1, sort_keys=True) + "\n")
      self.changed = False


# Joins a multi-source example's sources in its `src` text: the ASCII unit separator, a control
# character no caption holds (each source has any replaced by a space when joined).
SOURCE_SEPARATOR = "\x1f"


def source_languages(src_lang: str) -> tuple[str, ...]:
  """The languages of `data.local.src_lang`: "en" -> ("en",), "en+de" -> ("en", "de")."""
  return tuple(lang.strip() for lang in src_lang.split("+"))


def join_sources(texts: Sequence[str]) -> str:
  """One example's `src` text from its sources' texts (one or more): each with any
  SOURCE_SEPARATOR it holds replaced by a space, joined by SOURCE_SEPARATOR, so `split_sources`
  gives them back whatever the number of sources."""
  return SOURCE_SEPARATOR.join(" ".join(text.split(SOURCE_SEPARATOR)) for text in texts)


def split_sources(src: str, count: int = 2) -> list[str]:
  """A (multi-source) example's `src` text as its sources' texts (`join_sources` keeps the
  separator out of every source; `count` 1 takes a corpus built before it did as it is)."""
  return [src] if count == 1 else src.split(SOURCE_SEPARATOR)


def count_lines(path: str | os.PathLike[str]) -> int:
  """Lines in a file: newline characters, plus one for a last line without a newline."""
  count, last = 0, b"\n"
  with open(path, "rb") as f:
    while chunk := f.read(1 << 20):
      count += chunk.count(b"\n")
      last = chunk[-1:]
  return count + (last != b"\n")


def check_line_counts(files: Mapping[str, tuple[Path, ...]]) -> dict[str, int]:
  """Returns the line count of every split, checking all its files agree.

  Raises:
    ValueError: two files of a split have different line counts (names both, with counts).
  """
  counts = {}
  for split, paths in files.items():
    lines = [count_lines(path) for path in paths]
    for path, n in zip(paths[1:], lines[1:], strict=True):
      if n != lines[0]:
        raise ValueError(
          f"parallel files of split {split!r} differ in length: {paths[0]} has {lines[0]} "
          f"lines, {path} has {n}; the pairs would be misaligned"
        )
    counts[split] = lines[0]
  return counts


@contextlib.contextmanager
def open_lines(path: str | os.PathLike[str]) -> Iterator[Iterable[bytes]]:
  """The lines of a text file as bytes, read as a stream: a plain file's, a gzip file's
  (`.gz`), or the segments of a WMT SGML file (`.sgm`, `wmt14.sgml_segments`)."""
  path = Path(path)
  if path.suffix == ".gz":
    with gzip.open(path, "rb") as f:
      yield f
  elif path.suffix == ".sgm":
    with path.open("rb") as f:
      yield wmt14.sgml_segments(f, str(path))
  else:
    with path.open("rb") as f:
      yield f


def read_parallel(
  paths: Sequence[str | os.PathLike[str]], skipped: collections.Counter[str]
) -> Iterator[tuple[int, list[str]]]:
  """Yields `(line_number, [text of each file])` for the usable lines of aligned files, each
  read as a stream by `open_lines` (plain, gzip or SGML).

  Lines are split on "\\n" only (a trailing "\\r" and surrounding whitespace are stripped, as
  is a UTF-8 byte-order mark on the first line). A line is skipped, and counted once in
  `skipped` under the first reason that applies, when any file's text is not valid UTF-8
  ("invalid_utf8") or any is empty after stripping ("empty").

  Raises:
    ValueError: a file ends before the others (naming them), once the lines they share are
      read; `check_line_counts` finds it before reading any.
  """
  end = object()
  with contextlib.ExitStack() as stack:
    files = [stack.enter_context(open_lines(path)) for path in paths]
    for number, raws in enumerate(itertools.zip_longest(*files, fillvalue=end)):
      if any(raw is end for raw in raws):
        ended = [str(path) for path, raw in zip(paths, raws, strict=True) if raw is end]
        going = [str(path) for path, raw in zip(paths, raws, strict=True) if raw is not end]
        raise ValueError(
          f"parallel files differ in length: {', '.join(ended)} ended after {number} lines, "
          f"{', '.join(going)} did not; the pairs would be misaligned"
        )
      try:
        texts = [raw.decode("utf-8") for raw in raws]
      except UnicodeDecodeError:
        skipped["invalid_utf8"] += 1
        continue
      if number == 0:
        texts = [text.lstrip("\ufeff") for text in texts]
      texts = [text.strip() for text in texts]
      if not all(texts):
        skipped["empty"] += 1
        continue
      yield number, texts


class TextCorpus:
  """Local parallel text, read straight from its files: two (or, multi-source, more) line-aligned
  UTF-8 files per split, no copy of them written. The corpus store (`seq2seq.data.store`) is
  what turns them into ids, once; a tfds array_record copy on the way would cost as much again
  in time and disk at the paper's scale (about 4,000 pairs/s here: 45 minutes for 10M pairs).

  Pairs with invalid UTF-8 or an empty side are skipped and counted (`skipped`, filled as a
  split is read to its end; the store keeps the counts). Reading a split first checks that its
  files have the same number of lines (ValueError naming both otherwise), and a split with no
  usable pair raises ValueError when read to its end.
  """

  name = "local_text"
  version = "1.0.0"

  def __init__(self, config: LocalTextConfig | Wmt14RawConfig):
    self.config = config
    self._skipped: dict[str, dict[str, int]] = {}
    self.kept: dict[str, dict[str, int]] = {}  # Per split read to its end: pairs per corpus.

  def identity(self) -> dict[str, str]:
    """What names the corpus and its contents (the config name hashes the files)."""
    return {"corpus": self.name, "version": self.version, "config": self.config.name}

  def parts(self, split: str) -> tuple[tuple[str, tuple[Path, ...]], ...]:
    """The (name, files) of each corpus the split reads, one after another: here its own."""
    paths = self.config.files()[split]
    check_line_counts({split: paths})  # Before a line is read.
    return ((split, paths),)

  def read(self, split: str) -> Iterator[Example]:
    """Yields the usable pairs of `split` in file order, each with its 0-based line number
    (counted on through the split's corpora)."""
    skipped: collections.Counter[str] = collections.Counter()
    kept: dict[str, int] = {}
    start = 0  # The line of the split at which this corpus starts.
    for name, paths in self.parts(split):
      before, kept[name] = sum(skipped.values()), 0
      for number, texts in read_parallel(paths, skipped):
        kept[name] += 1
        yield Example(join_sources(texts[:-1]), texts[-1], None, start + number)
      start += kept[name] + sum(skipped.values()) - before  # Every line: kept or skipped.
    counts = {reason: skipped[reason] for reason in SKIP_REASONS}
    self._skipped[split], self.kept[split] = counts, kept
    log = logging.warning if any(counts.values()) else logging.info
    log(
      "%s %s (%s): kept %d pairs, skipped %s",
      self.name,
      split,
      ", ".join(f"{name} {n}" for name, n in kept.items()),
      sum(kept.values()),
      ", ".join(f"{n} {reason}" for reason, n in counts.items()),
    )
    if not sum(kept.values()):
      raise ValueError(
        f"{self.name}: split {split!r} has no usable pair (empty files, or every pair skipped)"
      )

  @property
  def skipped(self) -> dict[str, dict[str, int]]:
    """Pairs skipped per split and reason, for the splits read to their end (zeros elsewhere)."""
    zeros = dict.fromkeys(SKIP_REASONS, 0)
    return {split: dict(self._skipped.get(split, zeros)) for split in SPLITS}


# ------------------------------------------------------------------------------ WMT'14


@dataclasses.dataclass(eq=False)
class Wmt14RawConfig(tfds.core.BuilderConfig):
  """Where statmt.org's WMT'14 files live and which corpora make each split."""

  directory: str = ""
  parts: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (pipeline split, corpus names) pairs.

  @classmethod
  def from_settings(cls, settings: wmt14.Wmt14Settings) -> Wmt14RawConfig:
    """Builds the config from `config.data.wmt14`, checking that every file exists.

    The name encodes the folder's name and a hash of the corpora and of each file's
    `wmt14.fingerprint` (its size and first and last megabyte): cheap for files of gigabytes,
    and a fresh copy of the same files reuses the build.

    Raises:
      ValueError: no folder set, or a corpus name `wmt14.FILES` does not know.
      FileNotFoundError: a file is missing (the message names it and its archive).
    """
    if not settings.dir:
      raise ValueError(
        'data.wmt14.reader="raw" reads statmt.org\'s files: set data.wmt14.dir to the folder '
        "the WMT'14 archives were unpacked in"
      )
    directory = Path(settings.dir).expanduser().resolve()
    parts = tuple((split, settings.parts(split)) for split in SPLITS)
    config = cls(
      name="unnamed",
      description=f"WMT'14 English-French from {directory}.",
      directory=str(directory),
      parts=parts,
    )
    prints = [
      (str(path.relative_to(directory)), wmt14.fingerprint(path))
      for files in config.files().values()
      for _, *paths in files
      for path in paths
    ]
    return dataclasses.replace(
      config, name=_config_name(directory.name, _short_hash(parts, prints))
    )

  def files(self) -> dict[str, tuple[tuple[str, Path, Path], ...]]:
    """Maps each pipeline split to its corpora, each (name, English file, French file)."""
    return {
      split: tuple((name, *wmt14.part_files(self.directory, name)) for name in names)
      for split, names in self.parts
    }


class Wmt14Text(TextCorpus):
  """WMT'14 English -> French from statmt.org's files, read straight from them as `TextCorpus`
  reads local text: each split is its corpora's files one after another (plain, gzip or SGML,
  `open_lines`), a pair's line counted on through them (an SGML file's lines are its segments).
  Two files of a corpus that end at different lines raise ValueError when reading reaches the
  end of the shorter."""

  name = "wmt14_raw"

  def parts(self, split: str) -> tuple[tuple[str, tuple[Path, ...]], ...]:
    return tuple((name, (en, fr)) for name, en, fr in self.config.files()[split])


@functools.cache
def _tfds_wmt() -> tuple[type[tfds.core.DatasetBuilder], type[tfds.core.DatasetBuilder], Any]:
  """tfds' WMT builders, `wmt14_translate` (the catalogue's splits) and `wmt_translate` (any),
  under their own names, so they read and write the folders `tfds build` does; and tfds'
  `translate.wmt` module.

  Two things differ from tfds' classes, as in `_Builder`. Their `code_path` is off: tfds finds
  a builder's download checksums through it, by way of the `importlib_resources` backport,
  which is not installed (the downloads are still checked against the checksums tfds ships for
  every catalogue URL). And their info is an `_Info`, which skips the GCS lookup and its
  leftover temp folder. Importing tfds' WMT modules here, not at the top, keeps them (and
  dm-tree) out of runs that read other corpora.
  """
  from tensorflow_datasets.translate import wmt
  from tensorflow_datasets.translate import wmt14 as catalogue

  def info(builder: tfds.core.DatasetBuilder, tfds_info: tfds.core.DatasetInfo) -> _Info:
    return _Info(
      builder=builder,
      description=tfds_info.description,
      features=tfds_info.features,
      supervised_keys=tfds_info.supervised_keys,
      homepage=tfds_info.homepage,
      citation=tfds_info.citation,
    )

  class Wmt14Translate(catalogue.Wmt14Translate, skip_registration=True):
    name = "wmt14_translate"
    code_path = None

    def _info(self) -> tfds.core.DatasetInfo:
      return info(self, super()._info())

  class WmtTranslate(wmt.WmtTranslate, skip_registration=True):
    name = "wmt_translate"
    code_path = None

    def _info(self) -> tfds.core.DatasetInfo:
      return info(self, super()._info())

  return Wmt14Translate, WmtTranslate, wmt


def wmt14_tfds_builder(
  settings: wmt14.Wmt14Settings, data_dir: str | os.PathLike[str]
) -> tfds.core.DatasetBuilder:
  """tfds' builder of the WMT'14 splits `settings` names: the catalogue's
  `wmt14_translate/fr-en` for the catalogue's corpora, else a custom
  `wmt_translate/fr-en.subsets_HASH` of the corpora named (tfds' names, `wmt.DATASET_MAP`), as
  the paper's validation set needs.

  Raises:
    ValueError: a corpus tfds does not know for French-English.
  """
  catalogue, custom, wmt = _tfds_wmt()
  data_dir = os.fspath(data_dir)
  if settings.is_catalogue:
    return catalogue(config="fr-en", data_dir=data_dir, file_format=FILE_FORMAT)
  subsets = {SPLITS[split]: list(settings.parts(split)) for split in SPLITS}
  for name in itertools.chain(*subsets.values()):
    known = wmt.DATASET_MAP.get(name)
    if known is None or known.target != "en" or "fr" not in known.sources:
      french = [n for n, d in wmt.DATASET_MAP.items() if d.target == "en" and "fr" in d.sources]
      raise ValueError(
        f"data.wmt14: tfds has no French-English corpus {name!r}; it has {', '.join(french)}"
      )
  config = wmt.WmtConfig(
    name=f"subsets_{_short_hash(sorted(subsets.items()))}",
    language_pair=("fr", "en"),
    version=tfds.core.Version("1.0.0"),
    description=f"WMT'14 French-English: {subsets}.",
    subsets=subsets,
  )
  return custom(config=config, data_dir=data_dir, file_format=FILE_FORMAT)


# ------------------------------------------------------------------------------ reading


class Example(NamedTuple):
  """One pair as text; `align` is Pharaoh "i-j" pairs or None; `line` the 0-based line number."""

  src: str
  tgt: str
  align: str | None
  line: int


@dataclasses.dataclass(frozen=True)
class Corpus:
  """A prepared tfds dataset and which features hold the source, target and alignment."""

  builder: tfds.core.DatasetBuilder
  src_key: str = "src"
  tgt_key: str = "tgt"
  align_key: str | None = None
  line_key: str | None = None

  def identity(self) -> dict[str, str]:
    """What names the corpus and its contents: the tfds name, version and config (whose name
    encodes the generator's settings and source)."""
    builder = self.builder
    config = getattr(builder.builder_config, "name", "")
    return {"corpus": builder.name, "version": str(builder.version), "config": config}

  def data_source(self, split: str) -> Any:
    """The random-access tfds data source of a pipeline split ("train", "valid", "test")."""
    if split not in SPLITS:
      raise ValueError(f"unknown split {split!r}; use one of {tuple(SPLITS)}")
    return self.builder.as_data_source(split=SPLITS[split])

  def read(self, split: str) -> Iterator[Example]:
    """Yields the examples of `split` in stored (corpus) order."""
    source = self.data_source(split)
    for start in range(0, len(source), _READ_CHUNK):
      indices = range(start, min(start + _READ_CHUNK, len(source)))
      for index, record in zip(indices, source.__getitems__(list(indices)), strict=True):
        yield Example(
          src=record[self.src_key].decode("utf-8"),
          tgt=record[self.tgt_key].decode("utf-8"),
          align=record[self.align_key].decode("utf-8") if self.align_key else None,
          line=int(record[self.line_key]) if self.line_key else index,
        )

  @property
  def skipped(self) -> dict[str, dict[str, int]]:
    """Pairs skipped while building, per split and reason (zeros where nothing is checked)."""
    stored = self.builder.info.metadata or {}
    stored = stored.get("skipped", {})
    return {
      split: {reason: int(stored.get(split, {}).get(reason, 0)) for reason in SKIP_REASONS}
      for split in SPLITS
    }


CORPORA = ("synthetic", "local", "wmt14")


def feature_keys(data_config: CorpusSettings) -> dict[str, str]:
  """Which features of the corpus's dataset hold what (`Corpus` fields)."""
  if data_config.corpus == "synthetic":
    return {"align_key": "align"}
  if data_config.corpus == "wmt14" and data_config.wmt14.reader == "tfds":
    return {"src_key": "en", "tgt_key": "fr"}
  return {"line_key": "line"}


def make_builder(
  data_config: CorpusSettings, data_dir: str | os.PathLike[str]
) -> tfds.core.DatasetBuilder:
  """The builder of `data_config.corpus` under `data_dir` (not yet prepared)."""
  data_dir = os.fspath(data_dir)
  corpus = data_config.corpus
  if corpus == "synthetic":
    config = SyntheticConfig.from_settings(data_config.synthetic)
    return SyntheticCorpus(config=config, data_dir=data_dir, file_format=FILE_FORMAT)
  if corpus == "wmt14" and data_config.wmt14.reader == "tfds":
    return wmt14_tfds_builder(data_config.wmt14, data_dir)
  raise ValueError(f"unknown corpus {corpus!r}; known corpora: {CORPORA}")


DIGESTS = "file_digests.json"  # In the data folder: the local text's digests (`DigestCache`).


def prepare_corpus(
  data_config: CorpusSettings, data_dir: str | os.PathLike[str]
) -> Corpus | TextCorpus:
  """Builds `data_config.corpus` under `data_dir` unless already built (local text is read from
  its files, nothing built); returns its reader.

  Raises:
    FileNotFoundError: (local, raw WMT'14) a file is missing.
    ValueError: unknown corpus, (local, raw WMT'14) two parallel files differ in line count,
      or a split has no usable pair (empty files, or every pair skipped).
  """
  if data_config.corpus == "local":
    digests = Path(data_dir) / DIGESTS
    return TextCorpus(LocalTextConfig.from_settings(data_config.local, digests))
  if data_config.corpus == "wmt14" and data_config.wmt14.reader == "raw":
    return Wmt14Text(Wmt14RawConfig.from_settings(data_config.wmt14))
  builder = make_builder(data_config, data_dir)
  printed = io.StringIO()  # tfds prints where it builds to standard output: log it instead.
  built = builder.is_prepared()
  try:
    # Runs sharing `data.cache_dir` build a corpus once: the others wait here, then find it.
    with files.waiting_lock(Path(data_dir) / f"{builder.name}.lock"):
      if not built and builder.is_prepared():
        logging.info("corpus: %s was built by another process sharing %s", builder.name, data_dir)
        builder = make_builder(data_config, data_dir)  # Its info read again, now built.
      with contextlib.redirect_stdout(printed):
        builder.download_and_prepare(file_format=FILE_FORMAT)
  except AssertionError as e:  # tfds' way of saying a split yielded nothing.
    if "No examples were yielded" not in str(e):
      raise
    raise ValueError(
      f"{data_config.corpus} corpus: {e} (empty files, or every pair skipped)"
    ) from e
  finally:
    if printed.getvalue().strip():
      logging.info("tfds: %s", printed.getvalue().strip())
  return Corpus(builder, **feature_keys(data_config))

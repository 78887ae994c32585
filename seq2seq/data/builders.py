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
- "wmt14": the tfds catalogue's `wmt14_translate/fr-en` (English -> French as in the paper;
  validation = newstest2013, test = newstest2014). tfds downloads and prepares it on first use,
  which needs internet access (and possibly TensorFlow, for the catalogue builder's one-off
  preparation). Where that is missing, prepare it elsewhere with
  `tfds build wmt14_translate/fr-en --file_format=array_record --data_dir=DIR` and set
  `config.data.cache_dir=DIR`; reading it back goes through the same `Corpus` code as the
  others and needs neither. (Untested here: no internet.)

Every builder keeps the generation order (`disable_shuffling=True`), so evaluation outputs line
up with their inputs. Nothing here needs TensorFlow.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import inspect
import io
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import tensorflow_datasets as tfds
from absl import logging

from seq2seq.data import synthetic

# Pipeline split names -> tfds split names.
SPLITS = {"train": "train", "valid": "validation", "test": "test"}
# Reasons a local pair is skipped, in the order they are checked.
SKIP_REASONS = ("invalid_utf8", "empty")
FILE_FORMAT = "array_record"
WMT14_NAME = "wmt14_translate/fr-en"
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
  def from_settings(cls, settings: LocalSettings) -> LocalTextConfig:
    """Builds the config from `config.data.local`, checking that every file exists.

    The name encodes the languages, the prefixes and a hash of the files' resolved paths and
    contents: edited files get a fresh build, and a fresh copy of the same files (new
    modification times) reuses the old one. Hashing reads every file once per call (Multi30k's
    6 MB: about 4 ms).

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
    fingerprint = []
    for paths in config.files().values():
      for path in paths:
        with path.open("rb") as f:
          fingerprint.append((str(path), hashlib.file_digest(f, "sha256").hexdigest()))
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


def read_parallel(
  paths: Sequence[str | os.PathLike[str]], skipped: collections.Counter[str]
) -> Iterator[tuple[int, list[str]]]:
  """Yields `(line_number, [text of each file])` for the usable lines of aligned files.

  Lines are split on "\\n" only (a trailing "\\r" and surrounding whitespace are stripped, as
  is a UTF-8 byte-order mark on the first line). A line is skipped, and counted once in
  `skipped` under the first reason that applies, when any file's text is not valid UTF-8
  ("invalid_utf8") or any is empty after stripping ("empty"). Call `check_line_counts` first:
  this reader stops at the shortest file.
  """
  with contextlib.ExitStack() as stack:
    files = [stack.enter_context(open(path, "rb")) for path in paths]
    for number, raws in enumerate(zip(*files, strict=False)):
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

  def __init__(self, config: LocalTextConfig):
    self.config = config
    self._skipped: dict[str, dict[str, int]] = {}

  def identity(self) -> dict[str, str]:
    """What names the corpus and its contents (the config name hashes the files)."""
    return {"corpus": self.name, "version": self.version, "config": self.config.name}

  def pairs(self, split: str) -> int:
    """The lines of `split`'s files: at least its pairs (skipped lines are not pairs)."""
    return count_lines(self.config.files()[split][0])

  def read(self, split: str) -> Iterator[Example]:
    """Yields the usable pairs of `split` in file order, each with its 0-based line number."""
    paths = self.config.files()[split]
    check_line_counts({split: paths})
    skipped: collections.Counter[str] = collections.Counter()
    kept = 0
    for number, texts in read_parallel(paths, skipped):
      kept += 1
      yield Example(join_sources(texts[:-1]), texts[-1], None, number)
    counts = {reason: skipped[reason] for reason in SKIP_REASONS}
    self._skipped[split] = counts
    log = logging.warning if any(counts.values()) else logging.info
    log(
      "local text %s (%s): kept %d pairs, skipped %s",
      split,
      ", ".join(map(str, paths)),
      kept,
      ", ".join(f"{n} {reason}" for reason, n in counts.items()),
    )
    if not kept:
      raise ValueError(
        f"local corpus: split {split!r} has no usable pair (empty files, or every pair skipped)"
      )

  @property
  def skipped(self) -> dict[str, dict[str, int]]:
    """Pairs skipped per split and reason, for the splits read to their end (zeros elsewhere)."""
    zeros = dict.fromkeys(SKIP_REASONS, 0)
    return {split: dict(self._skipped.get(split, zeros)) for split in SPLITS}


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

  def pairs(self, split: str) -> int:
    """The pairs of `split`."""
    return len(self.data_source(split))

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


# Which features of each corpus hold what (`Corpus` fields).
_FEATURE_KEYS: dict[str, dict[str, str]] = {
  "synthetic": {"align_key": "align"},
  "wmt14": {"src_key": "en", "tgt_key": "fr"},
}
CORPORA = ("synthetic", "local", "wmt14")


def make_builder(
  data_config: CorpusSettings, data_dir: str | os.PathLike[str]
) -> tfds.core.DatasetBuilder:
  """The builder of `data_config.corpus` under `data_dir` (not yet prepared)."""
  data_dir = os.fspath(data_dir)
  corpus = data_config.corpus
  if corpus == "synthetic":
    config = SyntheticConfig.from_settings(data_config.synthetic)
    return SyntheticCorpus(config=config, data_dir=data_dir, file_format=FILE_FORMAT)
  if corpus == "wmt14":
    # The lean `import tensorflow_datasets` does not register the catalogue's translation
    # builders; importing the module does.
    from tensorflow_datasets.translate import wmt14  # noqa: F401

    return tfds.builder(WMT14_NAME, data_dir=data_dir, file_format=FILE_FORMAT)
  raise ValueError(f"unknown corpus {corpus!r}; known corpora: {CORPORA}")


def prepare_corpus(
  data_config: CorpusSettings, data_dir: str | os.PathLike[str]
) -> Corpus | TextCorpus:
  """Builds `data_config.corpus` under `data_dir` unless already built (local text is read from
  its files, nothing built); returns its reader.

  Raises:
    FileNotFoundError: (local) a split file is missing.
    ValueError: unknown corpus, (local) the two files of a split differ in line count, or a
      split has no usable pair (empty files, or every pair skipped).
  """
  if data_config.corpus == "local":
    return TextCorpus(LocalTextConfig.from_settings(data_config.local))
  builder = make_builder(data_config, data_dir)
  printed = io.StringIO()  # tfds prints where it builds to standard output: log it instead.
  try:
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
  return Corpus(builder, **_FEATURE_KEYS[data_config.corpus])

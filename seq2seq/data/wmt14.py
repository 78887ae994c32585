"""WMT'14 English->French, the paper's corpus (Bahdanau et al. 2014, section 4.1): which corpora
make each split, where statmt.org's archives put their files, and WMT's SGML test-set format.

`config.data.wmt14` (`Wmt14Settings`) picks one of two readers, both built by
`seq2seq.data.builders`:

- "tfds": tensorflow_datasets' own WMT builder. With the catalogue's splits (`CATALOGUE`) it is
  `wmt14_translate/fr-en`, so a dataset `tfds build` prepared elsewhere is read as it is. Any
  other choice of corpora (the paper's validation set, say) is a custom configuration of tfds'
  `wmt_translate`. Preparing either downloads the archives from statmt.org.
- "raw": the files of the archives (`FILES`), downloaded and unpacked into `data.wmt14.dir` by
  the user. Plain text, gzip (`.gz`) and SGML (`.sgm`) files are read as streams.

What differs between the two: the catalogue's validation set is newstest2013 alone (the paper's
is newstest2012 + newstest2013), and tfds stores each split in a hashed order, not the files'
order. The raw reader keeps the files' order, so its test split is newstest2014 line by line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

READERS = ("tfds", "raw")
# The corpora of each split of the tfds catalogue's `wmt14_translate/fr-en` (its subsets that
# have French; newsdev2014, also listed for validation there, is Hindi only).
CATALOGUE = {
  "train": ("europarl_v7", "commoncrawl", "multiun", "newscommentary_v9", "gigafren"),
  "valid": ("newstest2013",),
  "test": ("newstest2014",),
}
# The paper's split (section 4.1): the same five training corpora, validation on newstest2012
# and newstest2013 concatenated, test on newstest2014.
PAPER = {**CATALOGUE, "valid": ("newstest2012", "newstest2013")}


class Part(NamedTuple):
  """One corpus of the raw reader: its English and French files, relative to `data.wmt14.dir`,
  and the statmt.org archive that holds them (unpacked in that folder)."""

  en: str
  fr: str
  archive: str


# Names as in tfds' WMT builder (tensorflow_datasets/translate/wmt.py), paths as its archives
# hold them.
FILES = {
  "europarl_v7": Part(
    "training/europarl-v7.fr-en.en",
    "training/europarl-v7.fr-en.fr",
    "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
  ),
  "commoncrawl": Part(
    "commoncrawl.fr-en.en",
    "commoncrawl.fr-en.fr",
    "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
  ),
  "multiun": Part(
    "un/undoc.2000.fr-en.en",
    "un/undoc.2000.fr-en.fr",
    "http://www.statmt.org/wmt13/training-parallel-un.tgz",
  ),
  "newscommentary_v9": Part(
    "training/news-commentary-v9.fr-en.en",
    "training/news-commentary-v9.fr-en.fr",
    "http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
  ),
  "gigafren": Part(
    "giga-fren.release2.fixed.en.gz",
    "giga-fren.release2.fixed.fr.gz",
    "http://www.statmt.org/wmt10/training-giga-fren.tar",
  ),
  "newstest2012": Part(
    "dev/newstest2012.en", "dev/newstest2012.fr", "http://www.statmt.org/wmt14/dev.tgz"
  ),
  "newstest2013": Part(
    "dev/newstest2013.en", "dev/newstest2013.fr", "http://www.statmt.org/wmt14/dev.tgz"
  ),
  # The test set as evaluated in 2014 and the full one released after (sacrebleu's "wmt14" and
  # "wmt14/full"); English source and French reference.
  "newstest2014": Part(
    "test/newstest2014-fren-src.en.sgm",
    "test/newstest2014-fren-ref.fr.sgm",
    "http://www.statmt.org/wmt14/test-filtered.tgz",
  ),
  "newstest2014_full": Part(
    "test-full/newstest2014-fren-src.en.sgm",
    "test-full/newstest2014-fren-ref.fr.sgm",
    "http://www.statmt.org/wmt14/test-full.tgz",
  ),
}


@dataclasses.dataclass(frozen=True)
class Wmt14Settings:
  """The `config.data.wmt14` section, typed (configs/default.py says what each field means)."""

  reader: str
  dir: str
  train: str
  valid: str
  test: str

  def __post_init__(self):
    if self.reader not in READERS:
      raise ValueError(f"data.wmt14.reader={self.reader!r}: use one of {READERS}")
    for split in CATALOGUE:
      if not self.parts(split):
        raise ValueError(f"data.wmt14.{split} names no corpus")

  def parts(self, split: str) -> tuple[str, ...]:
    """The corpora of a pipeline split ("train", "valid", "test"), in order."""
    return tuple(name.strip() for name in getattr(self, split).split("+") if name.strip())

  @property
  def is_catalogue(self) -> bool:
    """Whether the splits are those of the catalogue's `wmt14_translate/fr-en`."""
    return all(self.parts(split) == names for split, names in CATALOGUE.items())


def part_files(directory: str | Path, name: str) -> tuple[Path, Path]:
  """The (English, French) files of corpus `name` in `directory`. A file found only gzipped
  (`NAME.gz`), or only unpacked where `FILES` names it gzipped, is taken as it is.

  Raises:
    ValueError: `name` is not in `FILES`.
    FileNotFoundError: a file is missing (the message names it and the archive that holds it).
  """
  if name not in FILES:
    raise ValueError(f"unknown WMT'14 corpus {name!r}; known: {', '.join(FILES)}")
  part = FILES[name]
  found = []
  for relative in (part.en, part.fr):
    path = Path(directory) / relative
    other = path.with_suffix("") if path.suffix == ".gz" else Path(f"{path}.gz")
    if not path.is_file() and not other.is_file():
      raise FileNotFoundError(
        f"WMT'14 file {path} not found ({name}); unpack {part.archive} in {directory} "
        "(config.data.wmt14.dir)"
      )
    found.append(path if path.is_file() else other)
  return found[0], found[1]


# XML's five named entities and numeric character references: what an SGML segment escapes.
_ENTITY = re.compile(rb"&(amp|lt|gt|quot|apos|#[0-9]+|#[xX][0-9a-fA-F]+);")
_NAMED = {b"amp": b"&", b"lt": b"<", b"gt": b">", b"quot": b'"', b"apos": b"'"}
_SEGMENT = re.compile(rb"^\s*<seg\b[^>]*>(.*)</seg>\s*$", re.DOTALL)


def _entity(match: re.Match[bytes]) -> bytes:
  name = match.group(1)
  if name in _NAMED:
    return _NAMED[name]
  code = int(name[2:], 16) if name[1:2] in b"xX" else int(name[1:])
  if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:  # No such character: left as written.
    return match.group(0)
  return chr(code).encode("utf-8")


def unescape_xml(text: bytes) -> bytes:
  """`text` (UTF-8) with XML's named entities and numeric references replaced by their
  characters. Only those: a bare "&" (as in "AT&T") or an HTML name ("&eacute;") stays."""
  return _ENTITY.sub(_entity, text)


def sgml_segments(lines: Iterable[bytes], where: str = "") -> Iterator[bytes]:
  """The text of each `<seg id="N">...</seg>` line of a WMT SGML file, in order, its XML
  entities unescaped; the document and paragraph tags between segments are skipped. WMT writes
  one segment a line, as tfds and sacrebleu read them too.

  Raises:
    ValueError: a `<seg` line without its `</seg>` (a segment over several lines), naming
      `where` and the line.
  """
  for number, line in enumerate(lines, 1):
    if b"<seg" not in line:
      continue
    match = _SEGMENT.match(line)
    if match is None:
      raise ValueError(f"{where}:{number}: a <seg> that does not end on its line")
    yield unescape_xml(match.group(1))


def fingerprint(path: Path, edge: int = 1 << 20) -> str:
  """A cheap identity of a large file: its size and a hash of its first and last `edge` bytes
  (the whole file when smaller). WMT'14's training files hold gigabytes, and a build is keyed
  on every run start: hashing all of them would take minutes each time."""
  size = path.stat().st_size
  digest = hashlib.sha256(str(size).encode())
  with path.open("rb") as f:
    digest.update(f.read(edge))
    if size > 2 * edge:
      f.seek(size - edge)
    digest.update(f.read())
  return digest.hexdigest()[:16]

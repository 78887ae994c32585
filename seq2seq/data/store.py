"""The prepared corpus: every split tokenised once into flat id arrays on disk, opened mapped.

A corpus at the paper's scale (WMT'14 English-French: 348M words) cannot be read into Python
lists and tokenised again at every start. `prepare` streams each split of a corpus through
worker processes that tokenise chunks of pairs in parallel, writing the ids as they come, so its
memory is bounded by the chunks in flight whatever the corpus size; `open_store` maps the files
(`numpy.memmap`), so a process reads only the pages of the rows it batches, and a start costs
the same at 29k pairs as at 10M.

Why memory-mapped flat arrays rather than array_record through grain: a batch is a gather of
rows by index (`input_pipeline.make_batch`), which numpy does over a mapped array in one
vectorised read with nothing to decode, and the ragged rows of a split (ids plus row offsets)
are already the in-memory layout of `input_pipeline.Ragged`, so training, evaluation and
resume read the store through the code they always had. array_record would add a serialised
record and a Python decode per pair, for a random access grain's shuffle does not need (it
shuffles indices).

A store lives in DIR/store/NAME/, DIR being `data.cache_dir` (or WORKDIR/data) and NAME the
corpus's name and a hash of everything that determines the ids (`key`): the corpus build (its
tfds name, version and config, which hashes local files' contents and the generator's settings),
the two vocabularies' contents, `data.train_pairs`, the number of sources and whether copying
targets are kept. A changed setting thus never reuses a stale store. Its files:

  manifest.json      written last (its presence marks the store complete): the key's parts,
                     per split the rows, tokens and UNK rate of each side, and every file's
                     byte size and CRC-32
  SPLIT.SIDE.ids     the ids of every row, flat: uint16 where both vocabularies fit 65,536 ids
                     (half the bytes of int32), else int32
  SPLIT.SIDE.offsets int64 [rows + 1]: row i is ids[offsets[i]:offsets[i + 1]]
  SPLIT.line         int64 [rows]: each pair's 0-based line in the corpus files

SIDE is "src" and "tgt", plus "src2" (a multi-source corpus's second source) and "copy_tgt" (a
copying model's targets, `copying.copy_targets`) where the settings ask for them.

A preparation writes into a folder of its own and renames it into place when complete, so a
killed one leaves no store, and the next start prepares it again from the beginning (removing
what the killed one left). Opening checks every file's size, and the CRC-32 of every file where
asked (`verify`: on by default; in a multi-host run only process 0 checks them, before the others
open the store, so those read only the rows they batch): a damaged store is removed and
prepared again, with one warning saying so.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import hashlib
import itertools
import json
import multiprocessing
import os
import shutil
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from absl import logging

from seq2seq.common import files
from seq2seq.data import builders, copying
from seq2seq.data import tokenizer as tokenizer_lib

FORMAT = 1  # Bump when the layout or what goes into the ids changes: older stores are ignored.
MANIFEST = "manifest.json"
CHUNK_PAIRS = 8192  # Pairs a worker tokenises at a time.
# Chunks a worker may have queued beyond the one it tokenises: what bounds preparation's memory.
CHUNKS_AHEAD = 2
# A split is tokenised in the preparing process itself until this many of its pairs are read:
# starting the worker processes (a second or two each) would cost a small corpus more than it
# saves.
PARALLEL_FROM = 4 * CHUNK_PAIRS
_CRC_BLOCK = 1 << 24


@dataclasses.dataclass(frozen=True)
class Ragged:
  """Variable-length int sequences stored flat: row i is `values[offsets[i]:offsets[i + 1]]`.

  The arrays are either in memory or mapped from a store's files (read-only, paged in as rows are
  read)."""

  values: np.ndarray  # [total tokens] int32, or uint16 from a store
  offsets: np.ndarray  # [N + 1] int64, offsets[0] == 0

  @classmethod
  def from_lists(cls, rows: Sequence[Sequence[int]]) -> Ragged:
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = (t for r in rows for t in r)
    values = np.fromiter(flat, dtype=np.int32, count=int(offsets[-1]))
    return cls(values, offsets)

  def __len__(self) -> int:
    return len(self.offsets) - 1

  @functools.cached_property
  def lengths(self) -> np.ndarray:
    """[N] int64 row lengths."""
    return np.diff(self.offsets)

  def row(self, i: int) -> np.ndarray:
    return self.values[self.offsets[i] : self.offsets[i + 1]]


@dataclasses.dataclass(frozen=True)
class Sides:
  """One split as the store holds it: each side's rows and each pair's corpus line."""

  sides: dict[str, Ragged]  # "src", "tgt" and, where kept, "src2" and "copy_tgt".
  line: np.ndarray  # [N] int64


# ------------------------------------------------------------------------------ the key


def vocabulary_fingerprint(directory: str | os.PathLike[str]) -> str:
  """A hash of a saved vocabulary's contents (its files, and its metadata but for `origin`,
  which names where it came from without changing an id)."""
  directory = Path(directory)
  digest = hashlib.sha256()
  meta = {k: v for k, v in tokenizer_lib.read_metadata(directory).items() if k != "origin"}
  digest.update(json.dumps(meta, sort_keys=True).encode())
  for path in sorted(directory.iterdir()):
    if path.name != tokenizer_lib.META_FILE and path.is_file():
      digest.update(path.name.encode())
      digest.update(path.read_bytes())
  return digest.hexdigest()


def key(
  corpus: builders.Corpus | builders.TextCorpus,
  vocab_dirs: tuple[Path, Path],
  *,
  train_pairs: int,
  sources: int,
  copy: bool,
) -> dict[str, Any]:
  """Everything that determines a store's ids, as a JSON-able dict (`store_dir` hashes it)."""
  return {
    "format": FORMAT,
    **corpus.identity(),
    "src_vocab": vocabulary_fingerprint(vocab_dirs[0]),
    "tgt_vocab": vocabulary_fingerprint(vocab_dirs[1]),
    "train_pairs": int(train_pairs),
    "sources": int(sources),
    "copy": bool(copy),
  }


def store_dir(root: str | os.PathLike[str], parts: dict[str, Any]) -> Path:
  """Where the store of the key `parts` lives under `root` (DIR/store)."""
  digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
  return Path(root) / f"{parts['corpus']}-{digest}"


# ------------------------------------------------------------------------------ tokenising


@dataclasses.dataclass(frozen=True)
class _Job:
  """What a worker needs to tokenise chunks: where the vocabularies are and what to keep."""

  vocab_dirs: tuple[str, str]
  sources: int
  copy: bool


def _tokenizers(job: _Job) -> tuple[tokenizer_lib.Tokenizer, tokenizer_lib.Tokenizer, _Job]:
  return (*(tokenizer_lib.load(d) for d in job.vocab_dirs), job)


def _encode(state: tuple, pairs: list[tuple[str, str]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  return encode_pairs(pairs, *state)


def encode_pairs(
  pairs: Sequence[tuple[str, str]],
  src_tok: tokenizer_lib.Tokenizer,
  tgt_tok: tokenizer_lib.Tokenizer,
  job: _Job,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """Each side's (flat int32 ids, int64 row lengths) of the (source text, target text) `pairs`."""
  texts = [builders.split_sources(src, job.sources) for src, _ in pairs]
  rows = {"src": src_tok.encode_batch([t[0] for t in texts])}
  if job.sources > 1:
    rows["src2"] = src_tok.encode_batch([t[1] for t in texts])
  rows["tgt"] = tgt_tok.encode_batch([tgt for _, tgt in pairs])
  if job.copy:  # Only targets holding an <unk> are tokenised again, to find what they copy.
    rows["copy_tgt"] = [
      copying.copy_targets(ids, tgt_tok.tokenize(tgt), src_tok.tokenize(src), tgt_tok.size)
      if tokenizer_lib.UNK_ID in ids
      else ids
      for ids, (src, tgt) in zip(rows["tgt"], pairs, strict=True)
    ]
  out = {}
  for side, ids in rows.items():
    lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
    flat = np.fromiter((t for r in ids for t in r), np.int32, count=int(lengths.sum()))
    out[side] = (flat, lengths)
  return out


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
  chunk = []
  for item in items:
    chunk.append(item)
    if len(chunk) == size:
      yield chunk
      chunk = []
  if chunk:
    yield chunk


_worker_state: dict[str, Any] = {}


def _start_worker(setup: Callable[..., Any], args: tuple) -> None:
  _worker_state["state"] = setup(*args)


def _in_worker(task: Callable[[Any, Any], Any], payload: Any) -> Any:
  return task(_worker_state["state"], payload)


class _Workers:
  """Runs `task(state, payload)` over chunks in order, `state` being `setup(*args)`: here while
  the input is small, then in `workers` worker processes, started once the chunks read reach
  PARALLEL_FROM items (starting them costs a second or two each, more than a small corpus
  takes), with at most CHUNKS_AHEAD chunks per worker waiting, which bounds the memory whatever
  the input's size. `setup` and `task` are module-level functions (the workers import them)."""

  def __init__(self, setup: Callable[..., Any], args: tuple, task: Callable, workers: int | None):
    if workers is None:
      workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    self.setup, self.args, self.task, self.workers = setup, args, task, workers
    self.local: Any = None
    self.pool: concurrent.futures.ProcessPoolExecutor | None = None
    self.started = 0

  def map(
    self, chunks: Iterable[list[Any]], payload: Callable[[list[Any]], Any] = lambda c: c
  ) -> Iterator[tuple[list[Any], Any]]:
    """Each chunk with its result (the task run on `payload(chunk)`), in order."""
    window: collections.deque = collections.deque()
    read = 0
    for chunk in chunks:
      read += len(chunk)
      if self.pool is None and self.workers and read > PARALLEL_FROM:
        # Spawned, not forked: the calling process may hold JAX's threads.
        self.pool = concurrent.futures.ProcessPoolExecutor(
          self.workers,
          mp_context=multiprocessing.get_context("spawn"),
          initializer=_start_worker,
          initargs=(self.setup, self.args),
        )
        self.started = self.workers
      if self.pool is None:
        if self.local is None:
          self.local = self.setup(*self.args)
        yield chunk, self.task(self.local, payload(chunk))
        continue
      window.append((chunk, self.pool.submit(_in_worker, self.task, payload(chunk))))
      if len(window) > CHUNKS_AHEAD * self.workers:
        done, future = window.popleft()
        yield done, future.result()
    while window:
      done, future = window.popleft()
      yield done, future.result()

  def close(self) -> None:
    if self.pool is not None:
      self.pool.shutdown(cancel_futures=True)


def _pretokenizer(name: str, lang: str) -> tokenizer_lib.Pretokenizer:
  return tokenizer_lib.Pretokenizer(name, lang)


def _count(pretokenizer: tokenizer_lib.Pretokenizer, texts: list[str]) -> collections.Counter:
  counts: collections.Counter[str] = collections.Counter()
  for text in texts:
    counts.update(pretokenizer.split(text))
  return counts


def count_words(
  texts: Iterable[str], pretokenizer: tokenizer_lib.Pretokenizer, *, workers: int | None = None
) -> collections.Counter:
  """How often each word of `texts` occurs, split by `pretokenizer`, in worker processes for a
  large corpus (`_Workers`; the Moses split costs as much as tokenising itself)."""
  counts: collections.Counter[str] = collections.Counter()
  pool = _Workers(_pretokenizer, (pretokenizer.name, pretokenizer.lang), _count, workers)
  try:
    for _, chunk_counts in pool.map(_chunks(texts, CHUNK_PAIRS)):
      counts.update(chunk_counts)
  finally:
    pool.close()
  return counts


class _SplitWriter:
  """Appends a split's rows to its files, keeping every file's CRC-32 and the statistics."""

  def __init__(self, folder: Path, split: str, dtype: np.dtype):
    self.folder, self.split, self.dtype = folder, split, dtype
    self.files: dict[str, Any] = {}
    self.crc: dict[str, int] = {}
    self.rows = 0
    self.tokens: collections.Counter[str] = collections.Counter()
    self.unks: collections.Counter[str] = collections.Counter()
    self.totals: dict[str, int] = {}

  def _write(self, name: str, array: np.ndarray) -> None:
    if name not in self.files:
      self.files[name] = open(self.folder / name, "wb")  # noqa: SIM115 (closed by `close`)
      self.crc[name] = 0
    data = memoryview(np.ascontiguousarray(array)).cast("B")
    self.files[name].write(data)
    self.crc[name] = zlib.crc32(data, self.crc[name])

  def add(self, chunk: list[builders.Example], sides: dict[str, tuple[np.ndarray, np.ndarray]]):
    for side, (flat, lengths) in sides.items():
      offsets_name = f"{self.split}.{side}.offsets"
      if offsets_name not in self.files:
        self._write(offsets_name, np.zeros(1, np.int64))
        self.totals[side] = 0
      self._write(f"{self.split}.{side}.ids", flat.astype(self.dtype))
      self._write(offsets_name, self.totals[side] + np.cumsum(lengths))
      self.totals[side] += int(flat.size)
      self.tokens[side] += int(flat.size)
      self.unks[side] += int(np.count_nonzero(flat == tokenizer_lib.UNK_ID))
    lines = np.fromiter((ex.line for ex in chunk), np.int64, count=len(chunk))
    self._write(f"{self.split}.line", lines)
    self.rows += len(chunk)

  def close(self) -> dict[str, Any]:
    for f in self.files.values():
      f.close()
    return {
      "rows": self.rows,
      "tokens": dict(self.tokens),
      "unk_rate": {
        s: self.unks[s] / self.tokens[s] if self.tokens[s] else 0.0 for s in self.tokens
      },
    }


# ------------------------------------------------------------------------------ preparing


def prepare(
  folder: Path,
  parts: dict[str, Any],
  splits: dict[str, Iterable[builders.Example]],
  vocab_dirs: tuple[Path, Path],
  *,
  workers: int | None = None,
  corpus: builders.Corpus | builders.TextCorpus | None = None,
) -> None:
  """Tokenises `splits` (name -> the examples in order) into a store at `folder`, replacing any:
  written in a folder of its own beside it and renamed when complete. `workers`: tokenising
  processes for a large split (None: one per core this process may use; 0: none, everything
  here); `corpus`: where the pairs came from, whose `skipped` counts the manifest keeps."""
  start = time.perf_counter()
  partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
  shutil.rmtree(partial, ignore_errors=True)
  partial.mkdir(parents=True)
  job = _Job((str(vocab_dirs[0]), str(vocab_dirs[1])), parts["sources"], parts["copy"])
  tokenisers = _Workers(_tokenizers, (job,), _encode, workers)
  fits = max(tokenizer_lib.load(d).size for d in vocab_dirs) <= np.iinfo(np.uint16).max + 1
  dtype = np.dtype(np.uint16 if fits else np.int32)
  stats, crc = {}, {}
  texts = lambda chunk: [(ex.src, ex.tgt) for ex in chunk]
  try:
    for name, examples in splits.items():
      writer = _SplitWriter(partial, name, dtype)
      for chunk, sides in tokenisers.map(_chunks(examples, CHUNK_PAIRS), texts):
        writer.add(chunk, sides)
      stats[name] = writer.close()
      crc.update(writer.crc)
  finally:
    tokenisers.close()
  files = {
    name: {"bytes": (partial / name).stat().st_size, "crc32": value} for name, value in crc.items()
  }
  manifest = {
    "key": parts,
    "dtype": dtype.name,
    "splits": stats,
    "skipped": {} if corpus is None else corpus.skipped,
    "files": files,
    "prepared": {"seconds": round(time.perf_counter() - start, 3), "workers": tokenisers.started},
  }
  (partial / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
  shutil.rmtree(folder, ignore_errors=True)
  os.replace(partial, folder)


# ------------------------------------------------------------------------------ opening


def read_manifest(folder: Path) -> dict[str, Any] | None:
  """The store's manifest, or None where there is no complete store."""
  try:
    return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
  except (FileNotFoundError, json.JSONDecodeError):
    return None


def damage(folder: Path, manifest: dict[str, Any], *, verify: bool) -> str | None:
  """What is wrong with the store's files (a missing file, a size or, with `verify`, a CRC-32
  other than the manifest's), or None."""
  for name, expected in manifest["files"].items():
    path = folder / name
    if not path.is_file():
      return f"{name} is missing"
    if path.stat().st_size != expected["bytes"]:
      return f"{name} holds {path.stat().st_size} bytes, not {expected['bytes']}"
    if verify:
      value = 0
      with open(path, "rb") as f:
        while block := f.read(_CRC_BLOCK):
          value = zlib.crc32(block, value)
      if value != expected["crc32"]:
        return f"{name}'s CRC-32 is {value:08x}, not {expected['crc32']:08x}"
  return None


def open_store(folder: Path, manifest: dict[str, Any]) -> dict[str, Sides]:
  """Every split of the store, its arrays mapped read-only."""
  dtype = np.dtype(manifest["dtype"])

  def mapped(name: str, kind: np.dtype) -> np.ndarray:
    if manifest["files"][name]["bytes"] == 0:  # An empty file cannot be mapped.
      return np.zeros(0, kind)
    # A plain array over the map: numpy's memmap subclass costs a view object per index.
    return np.memmap(folder / name, dtype=kind, mode="r").view(np.ndarray)

  out = {}
  for split, stats in manifest["splits"].items():
    sides = {
      side: Ragged(
        mapped(f"{split}.{side}.ids", dtype), mapped(f"{split}.{side}.offsets", np.dtype(np.int64))
      )
      for side in stats["tokens"]
    }
    out[split] = Sides(sides, mapped(f"{split}.line", np.dtype(np.int64)))
  return out


def prepared(
  root: Path,
  parts: dict[str, Any],
  corpus: builders.Corpus | builders.TextCorpus,
  vocab_dirs: tuple[Path, Path],
  *,
  verify: bool = True,
  workers: int | None = None,
) -> tuple[dict[str, Sides], dict[str, Any]]:
  """The store of `parts` under `root` (its splits and manifest), prepared from every split of
  `corpus` (the first `parts["train_pairs"]` training pairs where that is positive) if it is
  missing, incomplete or damaged. `verify`: check the files' CRC-32 as well as their sizes."""
  folder = store_dir(root, parts)
  # Runs sharing `data.cache_dir` (a study's seeds side by side) prepare a store once: the
  # others wait here, then find it complete.
  with files.waiting_lock(folder.with_name(f"{folder.name}.lock")):
    manifest = read_manifest(folder)
    if manifest is not None:
      problem = damage(folder, manifest, verify=verify)
      if problem is None:
        return open_store(folder, manifest), manifest
      logging.warning("the corpus store %s is damaged (%s): preparing it again", folder, problem)
    for stale in folder.parent.glob(f"{folder.name}.partial-*"):  # Left by a killed preparation.
      shutil.rmtree(stale, ignore_errors=True)
    limit = parts["train_pairs"]
    examples = {name: corpus.read(name) for name in builders.SPLITS}
    if limit > 0:
      examples["train"] = itertools.islice(examples["train"], limit)
    prepare(folder, parts, examples, vocab_dirs, workers=workers, corpus=corpus)
  manifest = read_manifest(folder)
  logging.info(
    "corpus store %s prepared in %.1fs (%d worker processes)",
    folder,
    manifest["prepared"]["seconds"],
    manifest["prepared"]["workers"],
  )
  return open_store(folder, manifest), manifest

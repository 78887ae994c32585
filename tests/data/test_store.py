"""The corpus store: the splits tokenised once into mapped files, the same ids as tokenising in
memory, reused without tokenising again, keyed by what determines the ids, and prepared again
when killed halfway or damaged."""

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import data_config, data_settings

from seq2seq.data import builders, store
from seq2seq.data import input_pipeline as ip
from seq2seq.data import tokenizer as tk


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
  """A tiny run's data (its store prepared on first load), its settings and its workdir."""
  workdir = tmp_path_factory.mktemp("workdir")
  d = data_settings(data_config())
  return ip.load_data(d, workdir), d, workdir


def _store_folder(data: ip.Data) -> Path:
  return Path(data.stats["store"]["path"])


def test_the_store_holds_the_ids_of_tokenising_each_pair(loaded):
  data, _, _ = loaded
  for name in ip.SPLIT_NAMES:
    split, raw = data.splits[name], data.raw(name)
    assert len(split) == len(raw) > 0
    assert isinstance(split.src.values.base, np.memmap)  # Mapped from the store's files,
    assert isinstance(split.tgt.offsets.base, np.memmap)  # not read into memory.
    for i, (src, tgt, _) in enumerate(raw):
      assert split.src.row(i).tolist() == data.src_tokenizer.encode(src)
      assert split.tgt.row(i).tolist() == data.tgt_tokenizer.encode(tgt)
    np.testing.assert_array_equal(split.line, np.arange(len(split)))


def test_a_second_start_maps_the_store_and_tokenises_nothing(loaded, monkeypatch):
  data, d, workdir = loaded
  folder = _store_folder(data)
  written = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}

  def refuse(*args, **kwargs):
    raise AssertionError("a prepared corpus was tokenised again")

  monkeypatch.setattr(tk.WordVocab, "encode", refuse)
  monkeypatch.setattr(tk.WordVocab, "encode_batch", refuse)
  again = ip.load_data(d, workdir)
  assert _store_folder(again) == folder
  assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == written
  for name in ip.SPLIT_NAMES:
    np.testing.assert_array_equal(again.splits[name].src.values, data.splits[name].src.values)
    np.testing.assert_array_equal(again.splits[name].tgt.offsets, data.splits[name].tgt.offsets)
  assert again.stats["unk_rate"] == data.stats["unk_rate"]
  assert again.stats["tokens"] == data.stats["tokens"]


def test_the_key_changes_with_what_determines_the_ids(loaded, tmp_path):
  data, d, workdir = loaded
  fewer = ip.load_data(dataclasses.replace(d, train_pairs=50), workdir)
  assert _store_folder(fewer) != _store_folder(data)
  assert len(fewer.splits["train"]) == 50
  np.testing.assert_array_equal(
    fewer.splits["train"].src.values,
    data.splits["train"].src.values[: data.splits["train"].src.offsets[50]],
  )
  # Another vocabulary (another workdir, a smaller size) gets another store in the same cache.
  other = ip.load_data(
    dataclasses.replace(d, cache_dir=str(workdir / "data"), tgt_vocab_size=40), tmp_path
  )
  assert _store_folder(other).parent == _store_folder(data).parent
  assert _store_folder(other) != _store_folder(data)


def test_a_damaged_store_is_found_and_prepared_again(loaded, caplog):
  data, d, workdir = loaded
  folder = _store_folder(data)
  ids = folder / "train.tgt.ids"
  good, want = ids.read_bytes(), np.array(data.splits["train"].tgt.values)  # A copy: the map
  # sees the damage written in place below.
  flipped = bytearray(good)
  flipped[len(flipped) // 2] ^= 0xFF
  ids.write_bytes(bytes(flipped))
  with caplog.at_level("WARNING"):
    again = ip.load_data(d, workdir)
  assert "is damaged (train.tgt.ids's CRC-32 is" in caplog.text
  assert ids.read_bytes() == good
  np.testing.assert_array_equal(again.splits["train"].tgt.values, want)
  # A truncated file is found by its size alone, without reading the checksums.
  ids.write_bytes(good[:-2])
  caplog.clear()
  with caplog.at_level("WARNING"):
    ip.load_data(d, workdir, verify=False)
  assert f"train.tgt.ids holds {len(good) - 2} bytes, not {len(good)}" in caplog.text
  assert ids.read_bytes() == good


def test_a_killed_preparation_leaves_no_store_and_the_next_start_finishes_it(loaded, monkeypatch):
  data, d, workdir = loaded
  folder = _store_folder(data)
  shutil.rmtree(folder)
  real = store._SplitWriter.add
  calls = []

  def killed(self, chunk, sides):
    calls.append(1)
    if self.split == "valid":
      raise KeyboardInterrupt  # As a job cut off halfway through the corpus.
    real(self, chunk, sides)

  monkeypatch.setattr(store._SplitWriter, "add", killed)
  with pytest.raises(KeyboardInterrupt):
    ip.load_data(d, workdir)
  assert not folder.exists() and store.read_manifest(folder) is None
  assert list(folder.parent.glob(f"{folder.name}.partial-*"))  # What the killed one left.
  monkeypatch.setattr(store._SplitWriter, "add", real)
  again = ip.load_data(d, workdir)
  assert not list(folder.parent.glob(f"{folder.name}.partial-*"))
  for name in ip.SPLIT_NAMES:
    np.testing.assert_array_equal(again.splits[name].src.values, data.splits[name].src.values)


def test_worker_processes_write_the_files_tokenising_here_writes(loaded, tmp_path, monkeypatch):
  data, d, workdir = loaded
  vocab_dirs = (workdir / "vocab" / "src", workdir / "vocab" / "tgt")
  corpus = builders.prepare_corpus(d, ip.data_dir(d, workdir))
  parts = store.key(corpus, vocab_dirs, train_pairs=0, sources=1, copy=True)
  examples = {name: list(corpus.read(name)) for name in ip.SPLIT_NAMES}
  monkeypatch.setattr(store, "CHUNK_PAIRS", 7)  # Many chunks, several in flight per worker,
  monkeypatch.setattr(store, "PARALLEL_FROM", 30)  # the workers started after the first five.
  for workers in (0, 2):
    store.prepare(tmp_path / f"w{workers}", parts, examples, vocab_dirs, workers=workers)
  here, there = (json.loads((tmp_path / f"w{w}" / store.MANIFEST).read_text()) for w in (0, 2))
  assert here["files"] == there["files"] and here["splits"] == there["splits"]
  assert there["prepared"]["workers"] == 2
  for name in here["files"]:
    assert (tmp_path / "w0" / name).read_bytes() == (tmp_path / "w2" / name).read_bytes()
  assert "train.copy_tgt.ids" in here["files"] and here["dtype"] == "uint16"


def test_ids_beyond_uint16_are_stored_as_int32(tmp_path):
  words = [f"w{i}" for i in range(70_000)]
  for side in ("src", "tgt"):
    tk.WordVocab(words, len(words) + tk.NUM_SPECIALS).save(tmp_path / side)
  example = builders.Example("w0 w69999", "w12345", None, 0)
  parts = {"sources": 1, "copy": False}
  vocab_dirs = (tmp_path / "src", tmp_path / "tgt")
  store.prepare(tmp_path / "s", parts, {"train": [example]}, vocab_dirs, workers=0)
  manifest = store.read_manifest(tmp_path / "s")
  opened = store.open_store(tmp_path / "s", manifest)["train"]
  assert manifest["dtype"] == "int32"
  assert opened.sides["src"].row(0).tolist() == [4, 70_003]


def test_the_store_is_read_only_to_its_readers(loaded):
  data, _, _ = loaded
  with pytest.raises(ValueError, match="read-only"):
    data.splits["train"].src.values[0] = 1
  assert os.access(_store_folder(data) / store.MANIFEST, os.R_OK)


def test_words_counted_in_worker_processes_make_the_vocabulary_counting_here_makes(
  loaded, monkeypatch
):
  data, _, _ = loaded
  texts = [src for src, _, _ in data.raw("train")]
  moses = tk.Pretokenizer("moses", "en")
  monkeypatch.setattr(store, "CHUNK_PAIRS", 50)
  monkeypatch.setattr(store, "PARALLEL_FROM", 200)  # Workers from the fifth chunk on.
  here = store.count_words(texts, moses, workers=0)
  there = store.count_words(texts, moses, workers=2)
  assert there == here and sum(here.values()) > len(texts)
  built = tk.WordVocab.build(texts, 300, moses)
  counted = tk.WordVocab.from_counts(there, 300, moses)
  assert [counted.id_to_piece(i) for i in range(300)] == [built.id_to_piece(i) for i in range(300)]


@pytest.mark.parametrize("rank", [0, 1])
def test_in_a_multi_host_run_only_process_0_reads_the_whole_store_to_check_it(
  loaded, rank, monkeypatch, caplog
):
  """Process 0 checks the CRC-32s (and repairs) before the barrier; the others, opening after
  it, check sizes only, so each reads no more of the store than the rows it batches."""
  import types

  from jax.experimental import multihost_utils

  from seq2seq import sharding

  data, d, workdir = loaded
  ids = _store_folder(data) / "train.src.ids"
  good = ids.read_bytes()
  flipped = bytearray(good)
  flipped[len(flipped) // 2] ^= 0xFF
  ids.write_bytes(bytes(flipped))
  monkeypatch.setattr(sharding.jax, "process_count", lambda: 2)
  monkeypatch.setattr(sharding.jax, "process_index", lambda: rank)
  monkeypatch.setattr(multihost_utils, "sync_global_devices", lambda name: None)
  run = types.SimpleNamespace(data=d, objective=types.SimpleNamespace(batch_keys=()))
  try:
    with caplog.at_level("WARNING"):
      sharding.load_data(run, workdir)
    checked = "is damaged (train.src.ids's CRC-32 is" in caplog.text
    assert checked == (rank == 0)
    assert (ids.read_bytes() == good) == (rank == 0)  # Only process 0 prepares it again.
  finally:
    ids.write_bytes(good)

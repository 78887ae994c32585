"""Input pipeline: batch layout, paper/token batching, filtering, resumable state, sharding,
evaluation order, and the local-text builder's handling of bad input."""

import itertools
import json
import os
import tempfile
from pathlib import Path

import grain
import numpy as np
import pytest
from helpers import data_config, data_settings

from seq2seq.data import builders
from seq2seq.data import input_pipeline as ip
from seq2seq.data import tokenizer as tk

SHARED_DATA = Path(__file__).parents[3] / "shared" / "data"


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
  config = data_config()
  return ip.load_data(data_settings(config), tmp_path_factory.mktemp("workdir")), config


def _take(it, n):
  return list(itertools.islice(it, n))


def _lengths(batch):
  """Source and target token counts [B] (without EOS/BOS) of a batch's rows."""
  return batch["src_mask"].sum(1) - 1, batch["tgt_mask"].sum(1) - 1


def _check_row(batch, r, split):
  """Row r of `batch` holds example batch["index"][r] of `split` as the module doc promises."""
  i = batch["index"][r]
  src, tgt = split.src.row(i), split.tgt.row(i)
  n, m = len(src), len(tgt)
  np.testing.assert_array_equal(batch["src"][r, :n], src)
  assert batch["src"][r, n] == tk.EOS_ID and not batch["src"][r, n + 1 :].any()
  np.testing.assert_array_equal(batch["src_mask"][r], np.arange(batch["src"].shape[1]) <= n)
  assert batch["tgt_in"][r, 0] == tk.BOS_ID
  np.testing.assert_array_equal(batch["tgt_in"][r, 1 : m + 1], tgt)
  np.testing.assert_array_equal(batch["tgt_out"][r, :m], tgt)
  assert batch["tgt_out"][r, m] == tk.EOS_ID
  assert not batch["tgt_in"][r, m + 1 :].any() and not batch["tgt_out"][r, m + 1 :].any()
  np.testing.assert_array_equal(batch["tgt_mask"][r], np.arange(batch["tgt_in"].shape[1]) <= m)


def _check_padding_row(batch, r):
  assert batch["index"][r] == -1
  for key in ip.BATCH_KEYS[:-1]:
    assert not batch[key][r].any(), key


def test_training_batch_layout(tiny_data):
  data, config = tiny_data
  b, step = config.data.batch_size, config.data.bucket_step
  for batch in _take(ip.train_iterator(data, data_settings(config)), 10):
    assert set(batch) == set(ip.BATCH_KEYS)
    assert all(v.dtype == np.int32 for v in batch.values())
    s, t = batch["src"].shape[1], batch["tgt_in"].shape[1]
    assert s % step == 0 and t % step == 0
    assert batch["src_mask"].shape == (b, s) and batch["index"].shape == (b,)
    assert batch["tgt_in"].shape == batch["tgt_out"].shape == batch["tgt_mask"].shape == (b, t)
    # The padded lengths are the smallest multiples of the step that hold the longest row.
    assert batch["src_mask"].sum(1).max() > s - step and batch["tgt_mask"].sum(1).max() > t - step
    for r in range(b):
      _check_row(batch, r, data.splits["train"])


def test_batch_tokens_match_the_raw_text(tiny_data):
  data, config = tiny_data
  raw = data.raw("valid")
  batch = next(ip.eval_batches(data, "valid", data_settings(config)))
  for r, i in enumerate(batch["index"]):
    src, tgt, align = raw[i]
    n, m = len(src.split()), len(tgt.split())
    np.testing.assert_array_equal(batch["src"][r, :n], data.src_tokenizer.encode(src))
    np.testing.assert_array_equal(batch["tgt_out"][r, :m], data.tgt_tokenizer.encode(tgt))
    links = [tuple(map(int, link.split("-"))) for link in align.split()]
    assert all(0 <= j < n and 0 <= k < m for j, k in links)


def test_paper_pools_are_sorted_by_length_and_full(tiny_data):
  data, config = tiny_data
  pools = config.data.pool_batches
  batches = _take(ip.train_iterator(data, data_settings(config)), 3 * pools)
  for p in range(3):
    pool = batches[p * pools : (p + 1) * pools]
    assert all((b["index"] >= 0).all() for b in pool)
    ids = np.concatenate([b["index"] for b in pool])
    assert len(set(ids.tolist())) == len(ids)
    # Within a pool the batches cut one (target, source)-length-sorted list into pieces.
    keys = [list(zip(*_lengths(b)[::-1], strict=True)) for b in pool]
    assert all(k == sorted(k) for k in keys)
    ordered = sorted(keys, key=lambda k: k[0])
    flat = [x for k in ordered for x in k]
    assert flat == sorted(flat)
  # The pool's batch order is shuffled, not always shortest first.
  firsts = [[_lengths(b)[1][0] for b in batches[p * pools : (p + 1) * pools]] for p in range(3)]
  assert any(f != sorted(f) for f in firsts)


def test_length_filter_drops_and_counts_long_pairs(tmp_path):
  config = data_config(max_len=8)
  data = ip.load_data(data_settings(config), tmp_path)
  split = data.splits["train"]
  too_long = (split.src_lengths > 8) | (split.tgt_lengths > 8)
  assert data.stats["train_too_long"] == too_long.sum() > 0
  b = config.data.batch_size
  kept = int((~too_long).sum())
  # Within the first epoch every pair is seen at most once, and never a long one.
  batches = _take(ip.train_iterator(data, data_settings(config)), kept // b)
  ids = np.concatenate([x["index"] for x in batches])
  assert len(set(ids.tolist())) == len(ids) and not too_long[ids].any()
  for batch in batches:
    src_len, tgt_len = _lengths(batch)
    assert src_len.max() <= 8 and tgt_len.max() <= 8
    assert batch["src"].shape[1] <= 10  # 8 tokens + EOS rounded up to the bucket step.


def test_each_epoch_is_a_new_permutation_of_the_kept_pairs(tiny_data):
  data, _ = tiny_data
  # One pair per batch and per pool: the batches follow the shuffled stream itself.
  config = data_config(batch_size=1, pool_batches=1, max_len=8)
  keep = np.flatnonzero(ip.length_filter(data.splits["train"], 8))
  it = ip.train_iterator(data, data_settings(config))
  stream = np.array([batch["index"][0] for batch in _take(it, 2 * len(keep))])
  first, second = stream[: len(keep)], stream[len(keep) :]
  np.testing.assert_array_equal(np.sort(first), keep)
  np.testing.assert_array_equal(np.sort(second), keep)
  assert not np.array_equal(first, second)
  assert not np.array_equal(first, keep)
  other = ip.train_iterator(
    data, data_settings(data_config(batch_size=1, pool_batches=1, max_len=8, shuffle_seed=1))
  )
  assert not np.array_equal([batch["index"][0] for batch in _take(other, len(keep))], first)


@pytest.mark.parametrize("batching", ["paper", "tokens"])
@pytest.mark.parametrize("skip", [0, 3, 9])
def test_iterator_state_restores_exactly_through_json(tiny_data, batching, skip):
  data, _ = tiny_data
  config = data_config(batching=batching, max_tokens=200)
  it = ip.train_iterator(data, data_settings(config))
  _take(it, skip)
  state = json.loads(json.dumps(it.get_state()))
  expected = _take(it, 6)
  resumed = ip.train_iterator(data, data_settings(config))
  resumed.set_state(state)
  for want, got in zip(expected, _take(resumed, 6), strict=True):
    for key in ip.BATCH_KEYS:
      np.testing.assert_array_equal(got[key], want[key])


def test_token_budget_batching(tiny_data):
  data, _ = tiny_data
  config = data_config(batching="tokens", max_tokens=150)
  b = config.data.batch_size
  seen_partial = False
  for batch in _take(ip.train_iterator(data, data_settings(config)), 40):
    real = batch["index"] >= 0
    assert batch["src"].shape[0] == b and real[: real.sum()].all()  # Padding rows come last.
    assert real.sum() * batch["tgt_in"].shape[1] <= 150
    for r in np.flatnonzero(~real):
      _check_padding_row(batch, r)
    seen_partial |= not real.all()
  assert seen_partial
  with pytest.raises(ValueError, match="max_tokens=20"):
    ip.train_iterator(data, data_settings(data_config(batching="tokens", max_tokens=20)))


def test_distinct_batch_shapes_over_an_epoch_are_bounded(tiny_data):
  data, config = tiny_data
  d = config.data
  kept = int(ip.length_filter(data.splits["train"], d.max_len).sum())
  batches = _take(
    ip.train_iterator(data, data_settings(config)), kept // d.batch_size + d.pool_batches
  )
  s_sizes = {x["src"].shape[1] for x in batches}
  t_sizes = {x["tgt_in"].shape[1] for x in batches}
  bound = d.max_len // d.bucket_step + 1
  assert len(s_sizes) <= bound and len(t_sizes) <= bound
  assert len({(s, t) for s in s_sizes for t in t_sizes}) <= bound**2


@pytest.mark.parametrize("process_count", [2, 4])
def test_processes_get_disjoint_rows_of_the_global_batch(tiny_data, process_count):
  data, config = tiny_data
  global_batches = _take(ip.train_iterator(data, data_settings(config)), 5)
  local = [
    _take(
      ip.train_iterator(data, data_settings(config), process_index=p, process_count=process_count),
      5,
    )
    for p in range(process_count)
  ]
  for k, want in enumerate(global_batches):
    parts = [local[p][k] for p in range(process_count)]
    ids = [set(part["index"].tolist()) for part in parts]
    assert all(a.isdisjoint(b) for a, b in itertools.combinations(ids, 2))
    for key in ip.BATCH_KEYS:
      np.testing.assert_array_equal(np.concatenate([part[key] for part in parts]), want[key])


def test_batch_size_not_divisible_by_process_count_raises(tiny_data):
  data, config = tiny_data
  with pytest.raises(ValueError, match="batch_size=16 is not divisible by process_count=3"):
    ip.train_iterator(data, data_settings(config), process_index=0, process_count=3)
  with pytest.raises(ValueError, match="process_index=2"):
    ip.train_iterator(data, data_settings(config), process_index=2, process_count=2)


@pytest.mark.parametrize("split", ["valid", "test"])
def test_eval_batches_cover_every_example_once_in_order(tiny_data, split):
  data, config = tiny_data
  b = 24  # 64 examples: two full batches and a padded one.
  batches = list(ip.eval_batches(data, split, data_settings(config), batch_size=b))
  n = len(data.splits[split])
  assert len(batches) == -(-n // b)
  index = np.concatenate([x["index"] for x in batches])
  np.testing.assert_array_equal(index[:n], np.arange(n))
  assert (index[n:] == -1).all() and len(index) == len(batches) * b
  for batch in batches:
    assert batch["src"].shape[0] == b and batch["src"].shape[1] % config.data.bucket_step == 0
    for r in range(b):
      if batch["index"][r] >= 0:
        _check_row(batch, r, data.splits[split])
      else:
        _check_padding_row(batch, r)
  assert len(data.raw(split)) == n
  # Two processes: each gets half the rows of every batch.
  halves = [
    list(
      ip.eval_batches(
        data, split, data_settings(config), batch_size=b, process_index=p, process_count=2
      )
    )
    for p in range(2)
  ]
  for whole, first, second in zip(batches, *halves, strict=True):
    for key in ip.BATCH_KEYS:
      np.testing.assert_array_equal(np.concatenate([first[key], second[key]]), whole[key])


def test_longest_first_is_a_stable_sort_by_source_length():
  ragged = ip.Ragged.from_lists
  src = ragged([[1] * n for n in (3, 5, 3, 1, 5, 3)])
  tgt = ragged([[1] * n for n in (2, 1, 4, 0, 1, 2)])  # Targets (prefixes) do not count.
  split = ip.Split("t", src, tgt, np.arange(6))
  assert ip.longest_first(split).tolist() == [1, 4, 0, 2, 5, 3]  # Ties in the split's order.
  two = ip.Split("t", src, tgt, np.arange(6), src2=ragged([[1] * n for n in (9, 0, 0, 0, 0, 0)]))
  assert ip.longest_first(two)[0] == 0  # A multi-source pair counts its longer source.


@pytest.mark.parametrize(
  ("batch_size", "multiple", "sizes"),
  [(64, 1, [64, 32, 16, 8, 4, 2, 1]), (12, 2, [12, 6, 4, 2]), (5, 2, [6, 2]), (1, 1, [1])],
)
def test_budgeted_decoding_batches_take_few_row_counts(batch_size, multiple, sizes):
  assert ip.row_sizes(batch_size, multiple) == sizes


@pytest.mark.parametrize("order", ip.DECODE_ORDERS)
@pytest.mark.parametrize(("max_tokens", "multiple"), [(0, 1), (0, 5), (100, 1), (100, 2)])
def test_decoding_batches_hold_every_example_once_within_the_budget(
  tiny_data, order, max_tokens, multiple
):
  data, config = tiny_data
  split, step, b = data.splits["test"], config.data.bucket_step, 12
  batches = list(
    ip.decoding_batches(split, b, step, order=order, max_tokens=max_tokens, multiple=multiple)
  )
  index = np.concatenate([x["index"] for x in batches])
  taken = index[index >= 0]
  assert sorted(taken.tolist()) == list(range(len(split)))
  want = ip.longest_first(split) if order == "length" else np.arange(len(split))
  np.testing.assert_array_equal(taken, want)  # Batch after batch, in the order asked.
  sizes = ip.row_sizes(b, multiple) if max_tokens else [ip.round_up(b, multiple)]
  for batch in batches:
    rows, columns = batch["src"].shape
    real = batch["index"] >= 0
    assert rows in sizes and rows % multiple == 0 and 1 <= real.sum() <= b
    assert real[: real.sum()].all()  # Padding rows come last.
    if max_tokens and real.sum() > 1:
      assert rows * columns <= max_tokens
    for r in range(rows):
      if real[r]:
        _check_row(batch, r, split)
      else:
        _check_padding_row(batch, r)
  if not max_tokens:  # Only the last batch has empty rows.
    assert all((x["index"] >= 0).sum() == b for x in batches[:-1])
  with pytest.raises(ValueError, match="unknown decoding order 'random'"):
    next(ip.decoding_batches(split, b, step, order="random"))


def test_decoding_longest_first_pads_less(tiny_data):
  """Sorted, a batch's sentences share about one length: fewer padded source columns in all."""
  data, config = tiny_data
  split, step = data.splits["test"], 2
  padded = {
    order: sum(x["src"].size for x in ip.decoding_batches(split, 8, step, order=order))
    for order in ip.DECODE_ORDERS
  }
  assert padded["length"] < padded["file"]


def test_eval_keeps_long_pairs(tmp_path):
  config = data_config(max_len=6)
  data = ip.load_data(data_settings(config), tmp_path)
  batches = list(ip.eval_batches(data, "valid", data_settings(config)))
  lengths = np.concatenate([_lengths(x)[0][x["index"] >= 0] for x in batches])
  assert len(lengths) == len(data.splits["valid"]) and lengths.max() > 6


def test_long_test_split_holds_the_test_pairs_of_that_source_length(tmp_path):
  config = data_config(long_test_min_words=12, long_test_max_words=15)
  data = ip.load_data(data_settings(config), tmp_path)
  test, long = data.raw("test"), data.raw(ip.LONG_TEST)
  keep = [i for i, (src, _, _) in enumerate(test) if 12 <= len(src.split()) <= 15]
  assert 0 < len(keep) < len(test)  # Tiny sentences run from 3 to 18 words.
  assert long == [test[i] for i in keep]
  split, whole = data.splits[ip.LONG_TEST], data.splits["test"]
  assert len(split) == len(keep) and data.stats["examples"][ip.LONG_TEST] == len(keep)
  for row, i in enumerate(keep):
    np.testing.assert_array_equal(split.src.row(row), whole.src.row(i))
    np.testing.assert_array_equal(split.tgt.row(row), whole.tgt.row(i))
  batches = list(ip.eval_batches(data, ip.LONG_TEST, data_settings(config)))
  assert sum(int((b["index"] >= 0).sum()) for b in batches) == len(keep)
  assert (
    ip.LONG_TEST not in ip.load_data(data_settings(data_config()), tmp_path).splits
  )  # Off by default.
  with pytest.raises(ValueError, match="no test pair has 40 to 80 source words"):
    ip.load_data(data_settings(data_config(long_test_min_words=40)), tmp_path)


def test_reversed_data_swaps_the_sides_and_transposes_the_links(tiny_data):
  data, _ = tiny_data
  rev = ip.reversed_data(data)
  assert rev.src_tokenizer is data.tgt_tokenizer and rev.tgt_tokenizer is data.src_tokenizer
  for name in ("valid", "test"):
    np.testing.assert_array_equal(rev.splits[name].src.values, data.splits[name].tgt.values)
    np.testing.assert_array_equal(rev.splits[name].tgt.offsets, data.splits[name].src.offsets)
  (src, tgt, align), (rsrc, rtgt, ralign) = data.raw("valid")[0], rev.raw("valid")[0]
  assert (rsrc, rtgt) == (tgt, src)
  links = {tuple(map(int, x.split("-"))) for x in align.split()}
  assert {tuple(map(int, x.split("-")))[::-1] for x in ralign.split()} == links
  assert ip.reversed_data(rev).raw("valid")[0] == (src, tgt, align)


def test_sentencepiece_pipeline_round_trips_the_raw_text(tmp_path):
  config = data_config(tokenizer="sentencepiece")
  data = ip.load_data(data_settings(config), tmp_path)
  assert isinstance(data.tgt_tokenizer, tk.SentencePieceTokenizer)
  raw = data.raw("valid")
  checked = 0
  for batch in ip.eval_batches(data, "valid", data_settings(config)):
    for r, i in enumerate(batch["index"]):
      if i >= 0 and tk.UNK_ID not in batch["tgt_out"][r] and tk.UNK_ID not in batch["src"][r]:
        assert data.tgt_tokenizer.decode(batch["tgt_out"][r]) == raw[i][1]
        assert data.src_tokenizer.decode(batch["src"][r]) == raw[i][0]
        checked += 1
  assert checked > len(raw) // 2


def test_synthetic_builds_are_keyed_by_their_settings():
  base = data_config().data.synthetic
  other = data_config().data.synthetic
  other.seed += 1
  names = {builders.SyntheticConfig.from_settings(s).name for s in (base, other)}
  assert len(names) == 2


def test_reloading_reuses_the_dataset_and_vocabulary(tmp_path):
  config = data_config()
  first = ip.load_data(data_settings(config), tmp_path)
  second = ip.load_data(data_settings(config), tmp_path)
  assert len(list((tmp_path / "data" / "synthetic_corpus").iterdir())) == 1
  for side in ("src", "tgt"):
    assert tk.has_vocabulary(tmp_path / "vocab" / side)
  for name, split in first.splits.items():
    np.testing.assert_array_equal(second.splits[name].src.values, split.src.values)
    np.testing.assert_array_equal(second.splits[name].tgt.offsets, split.tgt.offsets)
  assert first.src_tokenizer.size == config.data.src_vocab_size
  assert first.stats["unk_rate"]["train_src"] > 0  # The 200-id shortlist leaves unknown words.
  config.data.src_vocab_size = 300
  with pytest.raises(ValueError, match=r"size=200 \(requested 300\)"):
    ip.load_data(data_settings(config), tmp_path)


# ------------------------------------------------------------------------------ local text


def _write_split(directory, prefix, src_lines, tgt_lines):
  for lang, lines in (("en", src_lines), ("fr", tgt_lines)):
    data = b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines)
    (directory / f"{prefix}.{lang}").write_bytes(data)


def _localdata_config(directory, **data_overrides):
  config = data_config(corpus="local", **data_overrides)
  config.data.local.dir = str(directory)
  config.data.local.valid = "val"
  config.data.local.test = "test"
  return config


def _sentences(n, offset=0):
  words = "a small dog runs in the big green park with two red balls".split()
  return [" ".join(words[(i + offset) % 7 : (i + offset) % 7 + 3 + i % 5]) for i in range(n)]


@pytest.fixture
def local_files(tmp_path):
  directory = tmp_path / "text"
  directory.mkdir()
  for prefix, n in (("train", 60), ("val", 10), ("test", 10)):
    _write_split(directory, prefix, _sentences(n), [s.upper() for s in _sentences(n, 1)])
  return directory


def test_local_text_builds_and_batches(local_files, tmp_path):
  config = _localdata_config(local_files)
  data = ip.load_data(data_settings(config), tmp_path / "work")
  assert data.stats["examples"] == {"train": 60, "valid": 10, "test": 10}
  assert data.raw("valid")[3] == (_sentences(10)[3], _sentences(10, 1)[3].upper(), None)
  batch = next(ip.train_iterator(data, data_settings(config)))
  assert batch["src"].shape[0] == config.data.batch_size
  np.testing.assert_array_equal(data.splits["test"].line, np.arange(10))


def test_local_text_mismatched_line_counts_raise_before_a_store_is_made(local_files, tmp_path):
  _write_split(local_files, "val", _sentences(10), _sentences(9))
  with pytest.raises(ValueError, match=r"val\.en has 10 lines, .*val\.fr has 9"):
    ip.load_data(data_settings(_localdata_config(local_files)), tmp_path / "work")
  assert not list((tmp_path / "work" / "data" / "store").glob("*/manifest.json"))


def test_local_text_missing_file_names_path_and_setting(local_files, tmp_path):
  (local_files / "test.fr").unlink()
  with pytest.raises(FileNotFoundError, match=r"test\.fr.*config\.data\.local\.dir"):
    ip.load_data(data_settings(_localdata_config(local_files)), tmp_path / "work")


def test_local_text_skips_and_counts_bad_lines(local_files, tmp_path):
  src = _sentences(60)
  tgt = [s.upper() for s in _sentences(60, 1)]
  src[5] = b"caf\xe9 latin-1"  # Invalid UTF-8 on the source side.
  tgt[6] = b"\xff\xfe"  # Invalid UTF-8 on the target side.
  src[7] = ""  # Empty source.
  tgt[8] = "   \t"  # Whitespace-only target.
  src[9], tgt[9] = "", b"\xc3"  # Both problems: counted once, as invalid UTF-8.
  _write_split(local_files, "train", src, tgt)
  data = ip.load_data(data_settings(_localdata_config(local_files)), tmp_path / "work")
  assert data.stats["skipped_while_building"]["train"] == {"invalid_utf8": 3, "empty": 2}
  assert data.stats["skipped_while_building"]["valid"] == {"invalid_utf8": 0, "empty": 0}
  assert data.stats["examples"]["train"] == 55
  kept = [i for i in range(60) if i not in range(5, 10)]
  np.testing.assert_array_equal(data.splits["train"].line, kept)
  assert [ex.src for ex in data.corpus.read("train")] == [src[i] for i in kept]


def test_local_text_rebuilds_when_files_change(local_files, tmp_path):
  config = _localdata_config(local_files)
  first = builders.prepare_corpus(data_settings(config), tmp_path).identity()
  _write_split(local_files, "test", _sentences(11), _sentences(11))
  assert builders.prepare_corpus(data_settings(config), tmp_path).identity() != first


def test_local_text_build_is_keyed_by_content_not_modification_time(local_files, tmp_path):
  """A fresh copy of the same files (new mtimes, as each session's shared data has) reuses the
  build; an edit that keeps the size rebuilds."""
  config = _localdata_config(local_files)
  first = builders.prepare_corpus(data_settings(config), tmp_path).identity()
  path = local_files / "train.fr"
  data = path.read_bytes()
  stat = path.stat()
  os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**10))
  assert builders.prepare_corpus(data_settings(config), tmp_path).identity() == first
  path.write_bytes(data.replace(b"A", b"B", 1))
  os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
  assert builders.prepare_corpus(data_settings(config), tmp_path).identity() != first


def test_making_a_builder_leaves_nothing_in_the_temp_folder(tmp_path, monkeypatch):
  """tfds looks an unbuilt dataset up in its GCS bucket through a fresh temp folder that it
  never removes: one empty folder per builder, some 1,800 of them after a few test runs."""
  temp = tmp_path / "temp"
  temp.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(temp))
  builders.make_builder(data_settings(data_config()), tmp_path / "data")
  assert list(temp.iterdir()) == []


def test_unknown_corpus_raises(tmp_path):
  with pytest.raises(ValueError, match="unknown corpus 'europarl'"):
    ip.load_data(data_settings(data_config(corpus="europarl")), tmp_path)


@pytest.mark.skipif(not (SHARED_DATA / "multi30k").is_dir(), reason="../shared/data is absent")
def test_multi30k_first_lines(tmp_path):
  """Builds from the first 200 lines of each Multi30k split (copied, so the test stays fast)."""
  source = SHARED_DATA / "multi30k"
  config = data_config(corpus="local")
  local = config.data.local
  local.dir = str(tmp_path / "multi30k")
  Path(local.dir).mkdir()
  lines = {}
  for prefix in (local.train, local.valid, local.test):
    for lang in (local.src_lang, local.tgt_lang):
      with open(source / f"{prefix}.{lang}", "rb") as f:
        head = list(itertools.islice(f, 200))
      (Path(local.dir) / f"{prefix}.{lang}").write_bytes(b"".join(head))
      lines[prefix, lang] = [x.decode().strip() for x in head]
  data = ip.load_data(data_settings(config), tmp_path / "work")
  assert data.stats["examples"] == {"train": 200, "valid": 200, "test": 200}
  raw = data.raw("test")
  assert [r[0] for r in raw] == lines[local.test, local.src_lang]
  assert [r[1] for r in raw] == lines[local.test, local.tgt_lang]
  batches = list(ip.eval_batches(data, "valid", data_settings(config)))
  assert sum(int((x["index"] >= 0).sum()) for x in batches) == 200


def test_the_shuffled_stream_is_grains_shuffle_repeated_epoch_after_epoch():
  """`shuffled_positions` computes without grain's per-element datasets the order those gave
  (and that runs trained before it keep in their checkpoints): every epoch a new permutation."""
  n, size, seed = 37, 16, 12345
  stream = grain.MapDataset.range(n).shuffle(seed=seed).repeat()
  for pool in (0, 1, 2, 5, 9):
    want = [stream[i] for i in range(pool * size, (pool + 1) * size)]
    assert ip.shuffled_positions(pool, size, n, seed).tolist() == want


def test_runs_sharing_a_cache_build_the_corpus_once_and_say_who_built_it(tmp_path, caplog):
  """Two runs (threads here) preparing one embedded corpus in one fresh `data.cache_dir`: one
  builds while the other waits, then finds it built and says so in the log."""
  import threading
  import time

  config = data_config()
  prepare = builders.SyntheticCorpus.download_and_prepare
  inside, most = [0], [0]

  def counted(self, *args, **kwargs):
    inside[0] += 1
    most[0] = max(most[0], inside[0])
    time.sleep(0.5)  # Long enough for the other run to arrive.
    try:
      return prepare(self, *args, **kwargs)
    finally:
      inside[0] -= 1

  builders.SyntheticCorpus.download_and_prepare = counted
  try:
    corpora, failed = [], []

    def run():
      try:
        corpora.append(builders.prepare_corpus(data_settings(config), tmp_path / "cache"))
      except BaseException as e:  # (Seen by the test below, not lost in the thread.)
        failed.append(e)

    with caplog.at_level("INFO"):
      threads = [threading.Thread(target=run) for _ in range(2)]
      for t in threads:
        t.start()
      for t in threads:
        t.join()
  finally:
    builders.SyntheticCorpus.download_and_prepare = prepare
  assert not failed, failed
  assert most[0] == 1
  assert caplog.text.count("was built by another process sharing") == 1
  pairs = config.data.synthetic.valid_pairs
  assert [sum(1 for _ in c.read("valid")) for c in corpora] == [pairs, pairs]


def test_local_text_is_hashed_once_until_a_file_changes(tmp_path, monkeypatch):
  """With a digest cache, a second start reads no file to name the corpus and gets the same
  name; a file edited to the same size (a new modification time) is read again and changes it."""
  import hashlib

  text = tmp_path / "text"
  text.mkdir()
  for split in ("train", "val", "test"):
    for lang in ("en", "fr"):
      (text / f"{split}.{lang}").write_text(f"{split} {lang} a b\n")
  local = builders.LocalSettings(str(text), "en", "fr", "train", "val", "test", "")
  cache = tmp_path / "data" / builders.DIGESTS
  first = builders.LocalTextConfig.from_settings(local, cache).name
  assert builders.LocalTextConfig.from_settings(local).name == first  # The same without one.

  read = []
  file_digest = hashlib.file_digest
  monkeypatch.setattr(
    hashlib, "file_digest", lambda f, name: read.append(f.name) or file_digest(f, name)
  )
  assert builders.LocalTextConfig.from_settings(local, cache).name == first
  assert read == []
  edited = text / "train.fr"
  before = edited.stat().st_mtime_ns
  edited.write_text("train fr a c\n")  # The same size.
  os.utime(edited, ns=(before + 10**9, before + 10**9))
  assert builders.LocalTextConfig.from_settings(local, cache).name != first
  assert read == [str(edited)]

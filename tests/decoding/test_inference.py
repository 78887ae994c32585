"""Decoding a split longest first (`decode.order`) under a token budget and on several devices,
on the tiny trained run: the translations of the file's order, returned in that order."""

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT, subprocess_env

import seq2seq
from seq2seq import checkpoints, settings, translate
from seq2seq import sharding as rt
from seq2seq.data import input_pipeline
from seq2seq.decoding import decode


@pytest.fixture(scope="module")
def lines(trained) -> list[str]:
  """The trained run's test sources (64 sentences of 1 to 18 words)."""
  raw = rt.load_data(settings.validate(checkpoints.load_config(trained)), trained).raw("test")
  return [r[0] for r in raw]


@pytest.fixture(scope="module")
def loaded(trained):
  return seq2seq.load(trained)


def check_same(one, other, indices=None) -> None:
  """The best translations `one` and `other` (`Translator.translate`'s) of the sentences
  `indices` (all by default) are the same: words, scores and attention."""
  for i in range(len(one)) if indices is None else indices:
    a, b = one[i][0], other[i][0]
    assert a.ids == b.ids and a.finished == b.finished, i
    np.testing.assert_allclose([a.score, a.norm_score], [b.score, b.norm_score], rtol=1e-5)
    np.testing.assert_allclose(a.attention, b.attention, atol=1e-6)


def test_decoding_takes_the_longest_sentences_first_and_answers_in_input_order(
  loaded, lines, monkeypatch
):
  seen = []
  decode_batch = decode.decode_batch

  def recording(state, batch, dec, **kwargs):
    seen.append(batch["index"][batch["index"] >= 0])
    return decode_batch(state, batch, dec, **kwargs)

  monkeypatch.setattr(decode, "decode_batch", recording)
  found = loaded.translate(lines, batch_size=8)
  order = np.concatenate(seen)
  lengths = np.array([len(lines[i].split()) for i in order])
  assert sorted(order.tolist()) == list(range(len(lines)))
  assert (np.diff(lengths) <= 0).all(), lengths  # Longest first, batch after batch.
  seen.clear()
  in_file_order = loaded.translate(lines, batch_size=8, order="file")
  assert np.concatenate(seen).tolist() == list(range(len(lines)))
  check_same(found, in_file_order)


@pytest.mark.parametrize(
  ("beam_size", "batch_size", "max_tokens"), [(1, 16, 0), (3, 5, 0), (3, 16, 48)]
)
def test_longest_first_gives_the_translations_of_file_order(
  loaded, lines, beam_size, batch_size, max_tokens
):
  """configs/tiny.py pads every source to 24 positions (`data.bucket_step`), so every batch
  decodes for as many steps: each sentence's translation is the same in any batch (a budget of
  48 tokens: batches of 2 rows)."""
  how = {"beam_size": beam_size, "batch_size": batch_size, "max_tokens": max_tokens}
  by_length = loaded.translate(lines, order="length", **how)
  by_file = loaded.translate(lines, order="file", **how)
  check_same(by_length, by_file)


def test_where_padded_lengths_differ_only_the_length_limit_changes_a_translation(trained, lines):
  """With sources padded to multiples of 4, a batch decodes for as many steps as its longest
  source allows (`decode.output_limit`), so a sentence's limit follows its batch-mates. The
  20-step model runs to the limit often: where the two orders translate a sentence differently,
  its two limits differ and the shorter cut one translation (greedy's search is the same up to
  it); every other sentence is translated the same."""
  config = checkpoints.load_config(trained)
  config.data.bucket_step = 4
  t = seq2seq.load(trained, config)
  found, limits = {}, {}
  for order in input_pipeline.DECODE_ORDERS:
    found[order] = t.translate(lines, beam_size=1, order=order)
    limits[order] = translate.output_limits(t, lines, beam_size=1, order=order)
  differ = [i for i in range(len(lines)) if found["length"][i][0].ids != found["file"][i][0].ids]
  assert differ  # Not vacuous: the untrained model's outputs reach their limits.
  for i in differ:
    shorter = min(input_pipeline.DECODE_ORDERS, key=lambda order: limits[order][i])
    assert limits["length"][i] != limits["file"][i], i
    cut = found[shorter][i][0]
    assert not cut.finished and len(cut.ids) == limits[shorter][i], i
  check_same(found["length"], found["file"], [i for i in range(len(lines)) if i not in differ])


# Run with two host devices: translate and score the test sources as `loaded` does on one, each
# batch's rows split over both (5 sentences a batch: 6 rows, 3 on each device).
TWO_DEVICES = """
import json, sys
import jax
import seq2seq
from seq2seq.decoding import decode

workdir, lines = sys.argv[1], json.loads(sys.argv[2])
placed, jit_decode = set(), decode.jit_decode

def recording(graphdef, params, src, mask, **kwargs):
  placed.add((src.shape[0], len(src.sharding.device_set), len(mask.sharding.device_set)))
  return jit_decode(graphdef, params, src, mask, **kwargs)

decode.jit_decode = recording
t = seq2seq.load(workdir)
found = t.translate(lines, batch_size=5)
scored = t.score(lines, [hyps[0].text for hyps in found])
print(json.dumps({
  "devices": jax.device_count(),
  "placed": sorted(placed),
  "texts": [hyps[0].text for hyps in found],
  "scores": [hyps[0].score for hyps in found],
  "forced": [r.score for r in scored],
}))
"""


@pytest.mark.slow
def test_two_devices_each_decode_part_of_every_batch_and_translate_as_one(trained, loaded, lines):
  proc = subprocess.run(
    [sys.executable, "-c", TWO_DEVICES, str(trained), json.dumps(lines)],
    cwd=ROOT,
    env=subprocess_env("--xla_force_host_platform_device_count=2"),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  two = json.loads(proc.stdout.strip().splitlines()[-1])
  assert two["devices"] == 2
  assert two["placed"] == [[6, 2, 2]]  # Every batch's rows split over both devices.
  one = loaded.translate(lines)
  assert two["texts"] == [hyps[0].text for hyps in one]
  np.testing.assert_allclose(two["scores"], [hyps[0].score for hyps in one], rtol=1e-5)
  forced = loaded.score(lines, two["texts"])
  np.testing.assert_allclose(two["forced"], [r.score for r in forced], rtol=1e-5)


def test_processes_sharing_a_decoding_each_decode_their_share_and_all_return_every_result(
  loaded, lines, monkeypatch
):
  """Two processes of a job (threads here, each with its own process index) inside
  `processes.shared()`: each decodes about half the batches, and both return the one-process
  translations of every sentence."""
  import threading

  from seq2seq.decoding import processes

  alone = loaded.translate(lines, batch_size=8)
  local, slots, meet = threading.local(), [None, None], threading.Barrier(2, timeout=120)

  def allgather(value):
    slots[local.rank] = value
    meet.wait()
    found = list(slots)
    meet.wait()
    return found

  decoded = [0, 0]
  decode_batch = decode.decode_batch

  def counting(state, batch, dec, **kwargs):
    decoded[local.rank] += int((batch["index"] >= 0).sum())
    return decode_batch(state, batch, dec, **kwargs)

  monkeypatch.setattr(processes.jax, "process_count", lambda: 2)
  monkeypatch.setattr(processes.jax, "process_index", lambda: local.rank)
  monkeypatch.setattr(processes, "allgather", allgather)
  monkeypatch.setattr(decode, "decode_batch", counting)
  found, failed = [None, None], []

  def process(rank):
    local.rank = rank
    try:
      with processes.shared():
        found[rank] = loaded.translate(lines, batch_size=8)
    except BaseException as e:  # (Seen by the test below, not lost in the thread.)
      failed.append(e)
      meet.abort()

  threads = [threading.Thread(target=process, args=(rank,)) for rank in range(2)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not failed, failed
  assert sum(decoded) == len(lines) and 0 < decoded[0] < len(lines), decoded
  check_same(found[0], alone)
  check_same(found[1], alone)

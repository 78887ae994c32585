"""The batcher that gathers the service's requests: batches by key and size, errors reaching
their own job, closing, the bounded queue, and the batch shapes it pads to."""

import threading
import time

import pytest

from seq2seq.serving import batcher as batching


# The batcher, on a function that records what it was given.
class Recorder:
  def __init__(self, hold_first=False):
    self.calls = []
    self.release = threading.Event()
    self.started = threading.Event()
    self.hold_first = hold_first

  def __call__(self, key, items):
    self.calls.append((key, list(items)))
    if self.hold_first and len(self.calls) == 1:
      self.started.set()
      assert self.release.wait(10)
    if "bad" in items:
      raise ValueError("bad item")
    return [f"{key}:{item}" for item in items]


def held_batcher(max_batch=8, wait_s=0.0):
  """A batcher whose first batch (the job "first") runs until `release` is set, so the jobs
  submitted meanwhile queue up."""
  run = Recorder(hold_first=True)
  batcher = batching.Batcher(run, max_batch=max_batch, wait_s=wait_s)
  first = batcher.submit("k", ["first"])
  assert run.started.wait(10)
  return batcher, run, first


def test_queued_jobs_of_one_key_run_as_one_batch_and_each_gets_its_own_results():
  batcher, run, first = held_batcher()
  jobs = [batcher.submit("k", [f"a{i}", f"b{i}"]) for i in range(3)]
  run.release.set()
  assert first.result(10) == ["k:first"]
  assert [j.result(10) for j in jobs] == [[f"k:a{i}", f"k:b{i}"] for i in range(3)]
  assert [len(items) for _, items in run.calls] == [1, 6]
  batcher.close()


def test_batches_hold_at_most_max_batch_items_and_keys_are_not_mixed():
  batcher, run, first = held_batcher(max_batch=4)
  jobs = [batcher.submit(key, [key] * 2) for key in ("k", "x", "k", "k", "x")]
  run.release.set()
  results = [j.result(10) for j in jobs]
  assert results == [[f"{key}:{key}"] * 2 for key in ("k", "x", "k", "k", "x")]
  later = run.calls[1:]
  assert all(set(items) == {k} for k, items in later)
  # In arrival order: the first job's key "k" fills a batch (2 jobs), then "x" (both x jobs),
  # then the "k" left over.
  assert [(k, len(items)) for k, items in later] == [("k", 4), ("x", 4), ("k", 2)]
  batcher.close()


def test_an_error_reaches_only_the_job_that_caused_it():
  batcher, run, first = held_batcher()
  good = batcher.submit("k", ["a"])
  bad = batcher.submit("k", ["bad"])
  other = batcher.submit("k", ["b"])
  run.release.set()
  assert good.result(10) == ["k:a"] and other.result(10) == ["k:b"]
  with pytest.raises(ValueError, match="bad item"):
    bad.result(10)
  batcher.close()


def test_a_lone_job_waits_for_company_only_wait_s():
  run = Recorder()
  batcher = batching.Batcher(run, max_batch=8, wait_s=0.05)
  start = time.monotonic()
  assert batcher.submit("k", ["a"]).result(10) == ["k:a"]
  assert time.monotonic() - start < 5  # Bounded; not a timing test: 0.05 s is the wait.
  batcher.close()


def test_close_answers_what_is_queued_then_refuses():
  batcher, run, first = held_batcher()
  queued = batcher.submit("k", ["a"])
  closer = threading.Thread(target=batcher.close)
  closer.start()
  run.release.set()
  closer.join(10)
  assert not closer.is_alive()
  assert queued.result(0) == ["k:a"]
  with pytest.raises(RuntimeError, match="closed"):
    batcher.submit("k", ["b"])


def test_batch_size_for_picks_the_smallest_bucket_that_fits():
  counts = (1, 2, 4, 5, 9, 16, 17, 33, 64)
  assert [batching.batch_size_for(n, 64) for n in counts] == [1, 4, 4, 8, 16, 16, 32, 64, 64]
  assert batching.batch_size_for(10, 8) == 8  # Never past max_batch.
  assert batching.batch_size_for(70, 64) == 64


def test_past_its_bound_the_queue_refuses_a_job_at_once_and_counts_what_waits():
  """With max_waiting, the sentences waiting (not the one batch running) are bounded: a job that
  would pass the bound raises QueueFull at once, naming what waits; the jobs queued before are
  answered, and a job alone on an empty queue is taken whatever its size."""
  batcher, run, first = held_batcher()
  batcher.max_waiting = 4
  queued = [batcher.submit("k", ["a", "b"]), batcher.submit("x", ["c"])]
  assert batcher.waiting() == (2, 3)
  with pytest.raises(
    batching.QueueFull, match="3 sentences are waiting: the queue holds at most 4"
  ):
    batcher.submit("k", ["d", "e"])
  batcher.submit("k", ["f"])  # Exactly at the bound.
  run.release.set()
  assert [j.result(10) for j in queued] == [["k:a", "k:b"], ["x:c"]]
  batcher.close()
  assert batcher.waiting() == (0, 0)
  lone = batching.Batcher(Recorder(), max_batch=8, wait_s=0.0, max_waiting=2)
  assert lone.submit("k", list("abcde")).result(10) == [f"k:{c}" for c in "abcde"]
  lone.close()


def test_the_stats_count_batches_by_size_items_and_seconds():
  batcher, run, first = held_batcher()
  jobs = [batcher.submit("k", ["a", "b"]), batcher.submit("k", ["c"])]
  run.release.set()
  [j.result(10) for j in jobs]
  batcher.close()
  stats = batcher.stats
  assert stats.sizes == {1: 1, 3: 1} and stats.items == 4 and stats.seconds > 0


def test_turns_go_round_the_owners_so_one_client_s_many_jobs_hold_back_no_one():
  """Client a queues three jobs (other keys: no batch joins them), client b one after them: b's
  runs second, not fourth."""
  batcher, run, first = held_batcher()
  jobs = [batcher.submit(f"k{i}", [f"a{i}"], owner="a") for i in range(3)]
  jobs.append(batcher.submit("kb", ["b0"], owner="b"))
  run.release.set()
  [j.result(10) for j in jobs]
  batcher.close()
  assert [items for _, items in run.calls] == [["first"], ["a0"], ["b0"], ["a1"], ["a2"]]


def test_a_job_cancelled_while_it_waits_is_never_run():
  batcher, run, first = held_batcher()
  gone, kept = batcher.submit("x", ["gone"]), batcher.submit("y", ["kept"])
  assert gone.cancel()
  run.release.set()
  assert kept.result(10) == ["y:kept"]
  batcher.close()
  assert ["gone"] not in [items for _, items in run.calls]

"""Requests gathered into batches on one decoding thread, behind a bounded queue."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

BATCH_SIZES = (1, 4, 8, 16, 32, 64)  # The service's default compiled batch shapes.


class QueueFull(Exception):
  """A job refused because the items already waiting and its own would pass the bound."""

  def __init__(self, waiting: int, bound: int):
    super().__init__(f"{waiting} sentences are waiting: the queue holds at most {bound}")
    self.waiting, self.bound = waiting, bound


@dataclasses.dataclass
class BatchStats:
  """What the batches run so far did: their count by size, the items and the seconds."""

  sizes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  items: int = 0
  seconds: float = 0.0

  def add(self, size: int, seconds: float) -> None:
    self.sizes[size] += 1
    self.items += size
    self.seconds += seconds


@dataclasses.dataclass(eq=False)
class _Job:
  key: Hashable
  items: list[Any]
  owner: Hashable = None  # Who asked (a client's address): turns go round the owners waiting.
  future: concurrent.futures.Future = dataclasses.field(default_factory=concurrent.futures.Future)


class Batcher:
  """One thread that runs `run_batch(key, items)` (a list of results, one per item) over the
  items of jobs submitted with the same `key`: a job waits up to `wait_s` for others to join it,
  until `max_batch` items are gathered (a larger job runs alone). Jobs of other keys wait their
  turn in arrival order, except that the next batch starts with the first job of another
  `owner` than the last batch's where one waits, so one client's many jobs do not hold back
  everyone else's. When a batch of several jobs raises, each of them runs alone, so an error
  reaches the job that caused it only. A job cancelled before its batch starts (its client gave
  up) is dropped.

  With `max_waiting`, the items waiting (not yet running) are bounded: a job that would take
  them past it raises `QueueFull` at once, unless nothing waits (a job alone always queues)."""

  def __init__(
    self,
    run_batch: Callable[[Hashable, list[Any]], list[Any]],
    max_batch: int,
    wait_s: float,
    max_waiting: int | None = None,
  ):
    self._run_batch, self._max_batch, self._wait_s = run_batch, max_batch, wait_s
    self.max_waiting = max_waiting
    self._queue: collections.deque[_Job] = collections.deque()
    self._waiting_items = 0
    self._ready = threading.Condition()
    self._closed = False
    self.stats = BatchStats()
    self._last_owner: Hashable = None
    self._thread = threading.Thread(target=self._loop, name="seq2seq-batcher", daemon=True)
    self._thread.start()

  def submit(
    self, key: Hashable, items: Sequence[Any], owner: Hashable = None
  ) -> concurrent.futures.Future:
    job = _Job(key, list(items), owner)
    with self._ready:
      if self._closed:
        raise RuntimeError("the batcher is closed")
      bound, waiting = self.max_waiting, self._waiting_items
      if bound is not None and waiting and waiting + len(job.items) > bound:
        raise QueueFull(waiting, bound)
      self._queue.append(job)
      self._waiting_items += len(job.items)
      self._ready.notify()
    return job.future

  def waiting(self) -> tuple[int, int]:
    """(jobs, items) waiting to run."""
    with self._ready:
      return len(self._queue), self._waiting_items

  def close(self) -> None:
    """Runs what is queued, then stops the thread."""
    with self._ready:
      self._closed = True
      self._ready.notify()
    self._thread.join()

  def _take(self, job: _Job) -> None:
    self._queue.remove(job)
    self._waiting_items -= len(job.items)

  def _loop(self) -> None:
    while True:
      with self._ready:
        while not self._queue and not self._closed:
          self._ready.wait()
        if not self._queue:
          return
        first = next((j for j in self._queue if j.owner != self._last_owner), self._queue[0])
        self._last_owner = first.owner
        self._take(first)
      jobs = self._gather(first)
      self._run(jobs)

  def _gather(self, first: _Job) -> list[_Job]:
    jobs, size = [first], len(first.items)
    deadline = time.monotonic() + self._wait_s
    with self._ready:
      while True:
        full = False
        for job in [j for j in self._queue if j.key == first.key]:
          if size + len(job.items) > self._max_batch:
            full = True  # The next of this key would not fit: it starts the next batch.
            break
          self._take(job)
          jobs.append(job)
          size += len(job.items)
        left = deadline - time.monotonic()
        if full or size >= self._max_batch or left <= 0 or self._closed:
          return jobs
        self._ready.wait(left)

  def _run(self, jobs: list[_Job]) -> None:
    jobs = [j for j in jobs if j.future.set_running_or_notify_cancel()]
    if len(jobs) <= 1:
      for job in jobs:
        self._run_alone(job)
      return
    items = [item for job in jobs for item in job.items]
    start = time.monotonic()
    try:
      results = self._run_batch(jobs[0].key, items)
    except Exception:
      for job in jobs:  # Each alone, so the error reaches its own job.
        self._run_alone(job)
      return
    self.stats.add(len(items), time.monotonic() - start)
    begin = 0
    for job in jobs:
      job.future.set_result(results[begin : begin + len(job.items)])
      begin += len(job.items)

  def _run_alone(self, job: _Job) -> None:
    start = time.monotonic()
    try:
      results = self._run_batch(job.key, job.items)
    except Exception as e:
      job.future.set_exception(e)
      return
    self.stats.add(len(job.items), time.monotonic() - start)
    job.future.set_result(results)


def batch_size_for(count: int, max_batch: int, sizes: Sequence[int] = BATCH_SIZES) -> int:
  """The smallest of `sizes` that holds `count` sentences, or `max_batch` of them for a larger
  job (decoded in batches); without one (`ServeSettings` refuses such sizes), that count."""
  need = max(min(count, max_batch), 1)
  return min((b for b in sizes if b >= need), default=need)

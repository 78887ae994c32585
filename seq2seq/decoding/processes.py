"""Decoding a split between the processes of a multi-process job.

Every process of a job runs the same command over the same input: validation BLEU during
training, `--mode=eval`, `--mode=translate` and `--mode=score`. Inside `shared()`, the split
functions of `seq2seq.decoding.inference` give each process every P-th batch of the split
(`share`: the batches come longest first, so the shares are about equal work), decode those on
the process's own devices, and then exchange the results (`gathered`), so that every process
returns every sentence's result in the split's order; process 0 alone writes files. Each batch
holds the sentences one process would have batched together, so the translations are those of
a one-process run.

Outside `shared()` (the default: the Python API and the service, where the processes of a
program may translate different sentences) a process decodes whatever it is given, alone, and
nothing waits on the others.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import pickle
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import jax
import numpy as np
from jax.experimental import multihost_utils

T = TypeVar("T")

_SHARED = contextvars.ContextVar("seq2seq_decoding_shared", default=False)


@contextlib.contextmanager
def shared() -> Iterator[None]:
  """Within the block, the split functions decode this process's share and exchange results
  with the other processes, which must run the same calls over the same splits (a no-op with
  one process)."""
  token = _SHARED.set(jax.process_count() > 1)
  try:
    yield
  finally:
    _SHARED.reset(token)


def active() -> bool:
  """Whether decoding is being shared between processes now."""
  return _SHARED.get()


def writes() -> bool:
  """Whether this process writes a shared decoding's output files: process 0, or any process
  decoding alone."""
  return not active() or jax.process_index() == 0


def share(batches: Iterable[T]) -> Iterator[T]:
  """This process's batches of `batches` inside `shared()`: every process_count-th, starting at
  its index; all of them otherwise."""
  if not active():
    return iter(batches)
  return itertools.islice(batches, jax.process_index(), None, jax.process_count())


def gathered(mine: dict[int, T], size: int) -> list[T]:
  """The results of sentences 0 ... size - 1 in order, from `mine` (sentence index -> this
  process's result) and, inside `shared()`, from every other process's."""
  parts = allgather(mine) if active() else [mine]  # (Every process's, this one's included.)
  found = {index: result for part in parts for index, result in part.items()}
  if len(found) != size:
    raise RuntimeError(f"decoding returned {len(found)} of the split's {size} sentences")
  return [found[i] for i in range(size)]


def allgather(value: Any) -> list[Any]:
  """`value` of every process, in process order (pickled for the exchange: two collective
  calls, one for the sizes and one for the padded bytes)."""
  data = np.frombuffer(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
  sizes = np.asarray(multihost_utils.process_allgather(np.int32(data.size))).reshape(-1)
  padded = np.zeros(int(sizes.max()), np.uint8)
  padded[: data.size] = data
  rows = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(sizes), -1)
  return [pickle.loads(rows[i, : sizes[i]].tobytes()) for i in range(len(sizes))]

"""Wall-clock timing of jitted functions, their device work waited for."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax


def timed_calls(fn: Callable[[], Any], repeats: int) -> list[float]:
  """Seconds of each of `repeats` calls of `fn()`, its results waited for. Warm up (compile)
  before calling this."""
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
  return times


def median_seconds(fn: Callable[..., Any], args: Sequence[Any], repeats: int) -> float:
  """Median seconds of `fn(*args)` over `repeats` calls after a compiling one."""
  jax.block_until_ready(fn(*args))
  return float(statistics.median(timed_calls(lambda: fn(*args), repeats)))

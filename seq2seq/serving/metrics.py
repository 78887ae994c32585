"""The service's own figures in the Prometheus text format (version 0.0.4), as GET /metrics
serves them: requests by route and status, batch sizes, queue depth, decoding time and
throughput. Counted in the process; nothing is sent anywhere."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence

from seq2seq.serving import batcher as batching

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Requests:
  """Answered requests counted by (route, status); a path that is not one of `routes` (the
  application's, set once it has them) counts as "other", so a scan of made-up paths adds no
  series."""

  def __init__(self, routes: Iterable[str] = ()):
    self.routes = frozenset(routes)
    self.counts: collections.Counter[tuple[str, int]] = collections.Counter()

  def add(self, path: str, status: int) -> None:
    self.counts[(path if path in self.routes else "other", status)] += 1


class Counting:
  """ASGI middleware: counts every HTTP response by its route and status in `requests`, the
  refusals of the middleware inside it included."""

  def __init__(self, app, requests: Requests):
    self.app, self.requests = app, requests

  async def __call__(self, scope, receive, send) -> None:
    if scope["type"] != "http":
      await self.app(scope, receive, send)
      return

    async def counted(message):
      if message["type"] == "http.response.start":
        self.requests.add(scope.get("path", ""), int(message["status"]))
      await send(message)

    await self.app(scope, receive, counted)


def _family(name: str, kind: str, help_text: str) -> list[str]:
  return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def _number(x: float) -> str:
  return repr(float(x)) if isinstance(x, float) else str(x)


def render(
  requests: Requests,
  stats: batching.BatchStats,
  waiting: tuple[int, int],
  queue_bound: int | None,
  batch_sizes: Sequence[int],
  program_clears: int = 0,
) -> str:
  """The exposition text of the service's figures now."""
  lines = _family(
    "seq2seq_requests_total", "counter", "HTTP requests answered, by route and status."
  )
  for (route, status), count in sorted(requests.counts.items()):
    lines.append(f'seq2seq_requests_total{{route="{route}",status="{status}"}} {count}')
  lines += _family(
    "seq2seq_batch_sentences", "histogram", "Sentences (or pairs) per batch the decoder ran."
  )
  for bound in sorted(batch_sizes):
    below = sum(n for size, n in stats.sizes.items() if size <= bound)
    lines.append(f'seq2seq_batch_sentences_bucket{{le="{bound}"}} {below}')
  batches = sum(stats.sizes.values())
  lines.append(f'seq2seq_batch_sentences_bucket{{le="+Inf"}} {batches}')
  lines.append(f"seq2seq_batch_sentences_sum {stats.items}")
  lines.append(f"seq2seq_batch_sentences_count {batches}")
  figures = [
    ("seq2seq_sentences_total", "counter", "Sentences decoded (or pairs scored).", stats.items),
    (
      "seq2seq_decode_seconds_total",
      "counter",
      "Seconds the decoding thread spent running batches.",
      stats.seconds,
    ),
    (
      "seq2seq_sentences_per_second",
      "gauge",
      "Sentences per second of decoding time, over every batch so far.",
      stats.items / stats.seconds if stats.seconds else 0.0,
    ),
    (
      "seq2seq_program_cache_clears_total",
      "counter",
      "Times the compiled decoding programs were cleared (past --max_option_sets).",
      program_clears,
    ),
    ("seq2seq_queue_requests", "gauge", "Requests waiting for the decoder.", waiting[0]),
    ("seq2seq_queue_sentences", "gauge", "Sentences waiting for the decoder.", waiting[1]),
  ]
  if queue_bound is not None:
    figures.append(
      ("seq2seq_queue_limit_sentences", "gauge", "The most sentences that may wait.", queue_bound)
    )
  for name, kind, help_text, value in figures:
    lines += _family(name, kind, help_text)
    lines.append(f"{name} {_number(value)}")
  return "\n".join(lines) + "\n"

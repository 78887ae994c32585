"""What the service can take on: the seconds a full batch takes (timed after the warm-up), and
from them the queue's bound, a request's estimated decoding time and the wait to suggest to a
client refused; and the bound on the decoding options whose compiled programs it keeps."""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable, Hashable, Sequence

# Seconds a full batch is assumed to take before one is timed: it sizes the queue of a service
# started without warm-up.
UNTIMED_BATCH_S = 1.0


@dataclasses.dataclass
class Capacity:
  max_batch: int  # Sentences per full batch.
  timeout_s: float  # What a request is answered within, or refused.
  max_option_sets: int  # Option combinations whose compiled programs are kept.
  clear_programs: Callable[[], None]  # Frees every compiled decoding program.
  batch_s: float = UNTIMED_BATCH_S
  # (words per sentence, hypotheses per sentence) the batch was timed at; None until it is.
  timed_at: tuple[int, int] | None = None
  option_sets: collections.OrderedDict = dataclasses.field(default_factory=collections.OrderedDict)
  program_clears: int = 0  # How often `note_options` cleared the compiled programs.

  def timed(self, seconds: float, words: int, width: int) -> None:
    """A full batch of `words`-word sentences with `width` hypotheses each took `seconds`."""
    self.batch_s, self.timed_at = max(seconds, 1e-3), (words, width)

  def queue_bound(self) -> int:
    """The sentences that can wait and still be decoded within the timeout, in full batches:
    at least one batch."""
    return max(int(self.timeout_s / self.batch_s), 1) * self.max_batch

  def retry_after_s(self, waiting: int) -> int:
    """Seconds until `waiting` sentences have been decoded, in full batches: at least 1."""
    return max(math.ceil(math.ceil(waiting / self.max_batch) * self.batch_s), 1)

  def estimated_s(self, sentences: Sequence[str], width: int) -> float | None:
    """Seconds the decoder would take on `sentences` with `width` hypotheses each: the timed
    batch's, scaled by the batches they fill, the width and the longest sentence (the steps of
    each batch). None before a batch is timed."""
    if self.timed_at is None:
      return None
    words, timed_width = self.timed_at
    batches = math.ceil(len(sentences) / self.max_batch)
    longest = max(len(s.split()) for s in sentences)
    return self.batch_s * batches * (width / timed_width) * ((longest + 1) / (words + 1))

  def note_options(self, key: Hashable) -> bool:
    """Counts a batch decoded with the option combination `key` (the run's own settings are
    never counted: the caller leaves them out). Each new combination compiles programs that JAX
    keeps, so past `max_option_sets` of them every compiled decoding program is cleared and the
    combinations forgotten; whether it cleared them."""
    if key in self.option_sets:
      self.option_sets.move_to_end(key)
      return False
    cleared = len(self.option_sets) >= self.max_option_sets
    if cleared:
      self.clear_programs()
      self.option_sets.clear()
      self.program_clears += 1
    self.option_sets[key] = None
    return cleared

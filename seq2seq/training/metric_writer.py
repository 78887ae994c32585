"""Where metrics go: `metrics.jsonl` (one JSON object a line) and TensorBoard event files.

metrics.jsonl is appended a line at a time (`files.append_line`); a line a kill cut short is
dropped before the next append and skipped, with a warning naming it, when read. A resumed run
drops the lines past its checkpoint in one atomic rewrite, so a kill during that rewrite leaves
the whole history.

The event files are written by `Events`, in the caller's thread: tensorboardX's `SummaryWriter`
writes from a thread of its own and flushes again from an atexit hook, so a full disk that had
already stopped a run in one line printed two tracebacks more (that thread's, and the hook's
at exit).

With `train.tracker` on, `track` hands an experiment tracker (`trackers.Tracker`) every scalar
written from then on, and the files `attach` names."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np
from absl import logging
from tensorboardX import summary
from tensorboardX.proto import event_pb2
from tensorboardX.record_writer import RecordWriter

from seq2seq.common import files


class MetricWriter:
  """Writes the same scalars to WORKDIR/metrics.jsonl and to TensorBoard (WORKDIR/tensorboard)."""

  def __init__(self, workdir: str | Path, *, enabled: bool = True):
    self.enabled = enabled
    self.path = Path(workdir) / "metrics.jsonl"
    self._tb = Events(Path(workdir) / "tensorboard") if enabled else None
    self.tracker = None
    if enabled:
      files.repair_tail(self.path)

  def track(self, tracker) -> None:
    """Copies every scalar written from now on to `tracker` (`trackers.Tracker`) as well. A
    tracker run that began now (`tracker.new`) first gets the rows metrics.jsonl holds: a run
    that turned tracking on as it resumed is tracked from its first step."""
    self.tracker = tracker
    if tracker.new and self.path.exists():
      for row in read_metrics(self.path.parent):
        tracker.log_metrics(row["step"], _numbers(row))

  def write(
    self, step: int, split: str, scalars: dict[str, Any], *, jsonl: bool = True
  ) -> dict[str, Any]:
    """Appends `{"step", "split", **scalars}` (to TensorBoard only with `jsonl=False`)."""
    record = {"step": int(step), "split": split}
    record.update({k: _plain(v) for k, v in scalars.items()})
    if self.enabled:
      if jsonl:
        files.append_line(self.path, json.dumps(record))
      numbers = _numbers(record)
      self._tb.write(step, [summary.scalar(tag, value) for tag, value in numbers.items()])
      if self.tracker is not None:
        self.tracker.log_metrics(step, numbers)
    return record

  def truncate_after(self, step: int) -> None:
    """Drops the lines of steps after `step` (written by a run killed after its checkpoint)."""
    if self.enabled and self.path.exists():
      kept = [r for r in read_metrics(self.path.parent) if r["step"] <= step]
      text = "".join(json.dumps(r) + "\n" for r in kept)
      files.write_atomic(self.path, text, kill_name="metrics-rewrite")

  def write_image(self, step: int, tag: str, image_HWC: np.ndarray) -> None:
    """An RGB(A) uint8 image [H, W, C] to TensorBoard."""
    if self.enabled:
      self._tb.write(step, [summary.image(tag, image_HWC, dataformats="HWC")])

  def attach(self, path: Path, folder: str) -> None:
    """The file `path` (an evaluation's results.json) to the tracker, as FOLDER/NAME."""
    if self.enabled and self.tracker is not None:
      self.tracker.log_file(path, folder)

  def close(self, status: str = "finished") -> None:
    """Closes the event file, and ends the tracker run with `status` (`trackers.STATUSES`)."""
    if self._tb is not None:
      self._tb.close()
    if self.tracker is not None:
      self.tracker.close(status)


class Events:
  """A TensorBoard event file in `folder` (events.out.tfevents.TIME.HOST, as tensorboardX names
  it), each write flushed to disk before it returns. A write the disk refuses raises OSError
  naming the file, after closing it with what it could not take, so nothing is left to fail
  again at exit; later writes are dropped (the error was raised once)."""

  def __init__(self, folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    self.path = folder / f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
    self._file = RecordWriter(str(self.path))
    self._closed = False
    self._write([event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")])

  def write(self, step: int, summaries: list) -> None:
    """Each `tensorboardX.summary` protobuf of `summaries` as an event of `step`."""
    now = time.time()
    self._write([event_pb2.Event(summary=s, step=int(step), wall_time=now) for s in summaries])

  def _write(self, events: list) -> None:
    if self._closed:
      return
    try:
      for event in events:
        self._file.write(event.SerializeToString())
      self._file.flush()
    except OSError as e:
      self.close()
      raise OSError(e.errno, e.strerror, str(self.path)) from e

  def close(self) -> None:
    if not self._closed:
      self._closed = True
      try:
        self._file.close()
      except OSError:  # The disk that refused a write (raised then): those events are lost.
        pass


def _numbers(record: dict[str, Any]) -> dict[str, float]:
  """The numbers of a metrics record by their TensorBoard tag, SPLIT/KEY."""
  return {
    f"{record['split']}/{key}": value
    for key, value in record.items()
    if key not in ("step", "split") and isinstance(value, int | float)
  }


def _plain(value: Any) -> Any:
  if isinstance(value, np.generic | np.ndarray) or hasattr(value, "item"):
    value = np.asarray(value).item()
  return value


def validations(rows: list[dict[str, Any]], until: int, key: str) -> list[dict[str, Any]]:
  """The validation rows of `rows` (`read_metrics`) up to step `until` that hold `key`, in
  order: what a rule fed at every evaluation reads again when a run resumes."""
  return [r for r in rows if r.get("split") == "valid" and r["step"] <= until and key in r]


def read_metrics(workdir: str | Path) -> list[dict[str, Any]]:
  """The records of WORKDIR/metrics.jsonl, in order; a damaged line (or one without a step
  and split) is skipped with a warning naming it (`files.read_jsonl`)."""
  path = Path(workdir) / "metrics.jsonl"
  records = []
  for r in files.read_jsonl(path):
    if isinstance(r.get("step"), int) and isinstance(r.get("split"), str):
      records.append(r)
    else:
      logging.warning("%s: a record without a step and split skipped: %s", path, r)
  return records

"""Where metrics go: `metrics.jsonl` (one JSON object a line) and TensorBoard event files.

metrics.jsonl is appended a line at a time (`files.append_line`); a line a kill cut short is
dropped before the next append and skipped, with a warning naming it, when read. A resumed run
drops the lines past its checkpoint in one atomic rewrite, so a kill during that rewrite leaves
the whole history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from absl import logging
from tensorboardX import SummaryWriter

from seq2seq.common import files


class MetricWriter:
  """Writes the same scalars to WORKDIR/metrics.jsonl and to TensorBoard (WORKDIR/tensorboard)."""

  def __init__(self, workdir: str | Path, *, enabled: bool = True):
    self.enabled = enabled
    self.path = Path(workdir) / "metrics.jsonl"
    self._tb = SummaryWriter(str(Path(workdir) / "tensorboard")) if enabled else None
    if enabled:
      files.repair_tail(self.path)

  def write(
    self, step: int, split: str, scalars: dict[str, Any], *, jsonl: bool = True
  ) -> dict[str, Any]:
    """Appends `{"step", "split", **scalars}` (to TensorBoard only with `jsonl=False`)."""
    record = {"step": int(step), "split": split}
    record.update({k: _plain(v) for k, v in scalars.items()})
    if self.enabled:
      if jsonl:
        files.append_line(self.path, json.dumps(record))
      for key, value in record.items():
        if key not in ("step", "split") and isinstance(value, int | float):
          self._tb.add_scalar(f"{split}/{key}", value, step)
      self._tb.flush()
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
      self._tb.add_image(tag, image_HWC, step, dataformats="HWC")
      self._tb.flush()

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()


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

"""Where metrics go: `metrics.jsonl` (one JSON object a line) and TensorBoard event files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from tensorboardX import SummaryWriter


class MetricWriter:
  """Writes the same scalars to WORKDIR/metrics.jsonl and to TensorBoard (WORKDIR/tensorboard)."""

  def __init__(self, workdir: str | Path, *, enabled: bool = True):
    self.enabled = enabled
    self.path = Path(workdir) / "metrics.jsonl"
    self._tb = SummaryWriter(str(Path(workdir) / "tensorboard")) if enabled else None

  def write(
    self, step: int, split: str, scalars: dict[str, Any], *, jsonl: bool = True
  ) -> dict[str, Any]:
    """Appends `{"step", "split", **scalars}` (to TensorBoard only with `jsonl=False`)."""
    record = {"step": int(step), "split": split}
    record.update({k: _plain(v) for k, v in scalars.items()})
    if self.enabled:
      if jsonl:
        with self.path.open("a") as f:
          f.write(json.dumps(record) + "\n")
      for key, value in record.items():
        if key not in ("step", "split") and isinstance(value, int | float):
          self._tb.add_scalar(f"{split}/{key}", value, step)
      self._tb.flush()
    return record

  def truncate_after(self, step: int) -> None:
    """Drops the lines of steps after `step` (written by a run killed after its checkpoint)."""
    if self.enabled and self.path.exists():
      kept = [r for r in read_metrics(self.path.parent) if r["step"] <= step]
      self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))

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


def read_metrics(workdir: str | Path) -> list[dict[str, Any]]:
  """The records of WORKDIR/metrics.jsonl, in order."""
  path = Path(workdir) / "metrics.jsonl"
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

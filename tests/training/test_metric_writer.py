"""The metric writer's TensorBoard event file: what TensorBoard reads back from it."""

import errno
import struct
from pathlib import Path

import numpy as np
import pytest
from tensorboardX.proto import event_pb2
from tensorboardX.record_writer import RecordWriter

from seq2seq.training import metric_writer


def read_events(path) -> list[event_pb2.Event]:
  """The events of a TFRecord event file: each record a length (8 bytes), its CRC (4), the
  event and its CRC (4)."""
  data, events, at = path.read_bytes(), [], 0
  while at < len(data):
    (length,) = struct.unpack("Q", data[at : at + 8])
    events.append(event_pb2.Event.FromString(data[at + 12 : at + 12 + length]))
    at += 12 + length + 4
  return events


def test_scalars_and_images_reach_the_event_file(tmp_path):
  writer = metric_writer.MetricWriter(tmp_path)
  writer.write(5, "train", {"loss": 2.5, "note": "text", "tokens": np.int64(7)})
  writer.write_image(5, "heatmap/0", np.zeros((4, 6, 3), np.uint8))
  writer.close()
  (path,) = (tmp_path / "tensorboard").iterdir()
  assert path.name.startswith("events.out.tfevents.")
  header, *events = read_events(path)
  assert header.file_version == "brain.Event:2"
  got = [(e.step, v.tag) for e in events for v in e.summary.value]
  assert got == [(5, "train/loss"), (5, "train/tokens"), (5, "heatmap/0")]
  scalars = [v.simple_value for e in events[:2] for v in e.summary.value]
  assert scalars == [2.5, 7.0]
  image = events[2].summary.value[0].image
  assert (image.height, image.width, image.colorspace) == (4, 6, 3)


def test_an_event_file_the_disk_refuses_is_named(tmp_path, monkeypatch):
  """The event file on a full disk (/dev/full takes writes and refuses them at the flush):
  OSError ENOSPC naming the file, raised as the file opens (its header is flushed then)."""
  if not Path("/dev/full").exists():
    pytest.skip("no /dev/full on this system")
  monkeypatch.setattr(metric_writer, "RecordWriter", lambda path: RecordWriter("/dev/full"))
  with pytest.raises(OSError, match="No space left on device") as e:
    metric_writer.Events(tmp_path)
  assert e.value.errno == errno.ENOSPC
  assert e.value.filename.startswith(f"{tmp_path}/events.out.tfevents.")

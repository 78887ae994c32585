"""Files a run writes, written so that a kill at any moment leaves the old content or the new,
never part of either, and read so that a damaged line is reported, not fatal.

* `write_atomic(path, text)`: a temporary file beside `path`, flushed and fsynced, renamed over
  it, then the folder fsynced: readers see the old file or the new one (a killed write leaves
  its temporary file, which the next write of that path removes). Used for config.json,
  results.json, hypotheses, translations and every other whole-file write of a run.
* `append_line(path, line)`: one line appended and fsynced. A kill mid-append can leave a
  partial last line; `repair_tail` (called before the next append) cuts it off, and
  `read_jsonl` skips a damaged line with a warning naming the file and line.
* `kill_point(name)`: where the tests kill a process at an exact point of a write (the
  environment variable SEQ2SEQ_KILL_AT names the point; unset, it does nothing).
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

from absl import logging

KILL_AT = "SEQ2SEQ_KILL_AT"


def kill_point(name: str) -> None:
  """SIGKILLs this process when SEQ2SEQ_KILL_AT is `name` (for the tests' kills)."""
  if os.environ.get(KILL_AT) == name:
    os.kill(os.getpid(), signal.SIGKILL)


def _fsync_dir(folder: Path) -> None:
  try:
    fd = os.open(folder, os.O_RDONLY)
  except OSError:  # Not every filesystem lets a folder be opened.
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def write_atomic(path: str | Path, content: str | bytes, *, kill_name: str = "") -> None:
  """Replaces `path` with `content` (text as UTF-8) in one rename; `kill_name` names the
  `kill_point` between the finished temporary file and the rename."""
  path = Path(path)
  data = content.encode("utf-8") if isinstance(content, str) else content
  for leftover in path.parent.glob(f".{path.name}.*.tmp"):  # An earlier write's, killed.
    leftover.unlink(missing_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    if kill_name:
      kill_point(kill_name)
    os.replace(tmp, path)
  except BaseException:
    Path(tmp).unlink(missing_ok=True)
    raise
  _fsync_dir(path.parent)


def repair_tail(path: str | Path) -> None:
  """Cuts a partial last line (no final newline: an append cut short) off `path`, with a
  warning; a file that ends in a newline, or does not exist, is left alone."""
  path = Path(path)
  if not path.exists() or path.stat().st_size == 0:
    return
  data = path.read_bytes()
  if data.endswith(b"\n"):
    return
  kept = data[: data.rfind(b"\n") + 1]
  lines = data.count(b"\n") + 1
  logging.warning("%s:%d: a line cut short by a kill, dropped", path, lines)
  write_atomic(path, kept)


def append_line(path: str | Path, line: str) -> None:
  """Appends `line` and a newline to `path`, flushed to disk."""
  with open(path, "a", encoding="utf-8") as f:
    f.write(line + "\n")
    f.flush()
    os.fsync(f.fileno())


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
  """The JSON objects of `path`, one a line, in order; a line that is not one (cut short,
  overwritten) is skipped with a warning naming the file and line. [] when `path` is absent."""
  path = Path(path)
  if not path.exists():
    return []
  records = []
  text = path.read_text(encoding="utf-8", errors="replace")
  for number, line in enumerate(text.splitlines(), 1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError as error:
      logging.warning("%s:%d: damaged line skipped (%s)", path, number, error.msg)
      continue
    if not isinstance(record, dict):
      logging.warning("%s:%d: damaged line skipped (not a JSON object)", path, number)
      continue
    records.append(record)
  return records

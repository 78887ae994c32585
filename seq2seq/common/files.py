"""Files a run writes, written so that a kill at any moment leaves the old content or the new,
never part of either, and read so that a damaged line is reported, not fatal.

* `write_atomic(path, text)`: a temporary file beside `path`, flushed and fsynced, renamed over
  it, then the folder fsynced: readers see the old file or the new one (a killed write leaves
  its temporary file, which the next write of that path removes). Used for config.json,
  results.json, hypotheses and every other whole-file write of a run; `atomic_file(path)` does
  the same for a file written in pieces (translations, a chunk of lines at a time).
* `append_line(path, line)`: one line appended and fsynced. A kill mid-append can leave a
  partial last line; `repair_tail` (called before the next append) cuts it off, and
  `read_jsonl` skips a damaged line with a warning naming the file and line.
* `kill_point(name)`: where the tests kill a process at an exact point of a write (the
  environment variable SEQ2SEQ_KILL_AT names the point; unset, it does nothing).
* `workdir_lock(workdirs)`: one process a run; training and evaluation hold it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

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
  data = content.encode("utf-8") if isinstance(content, str) else content
  with atomic_file(path, kill_name=kill_name) as f:
    f.write(data)


@contextlib.contextmanager
def atomic_file(path: str | Path, *, kill_name: str = "") -> Iterator[BinaryIO]:
  """A binary file to fill in pieces that replaces `path` in one rename when the block ends, as
  `write_atomic` does (a translation written a chunk at a time); when the block raises, the
  temporary file is removed and `path` left as it was."""
  path = Path(path)
  for leftover in path.parent.glob(f".{path.name}.*.tmp"):  # An earlier write's, killed.
    leftover.unlink(missing_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
  try:
    with os.fdopen(fd, "wb") as f:
      yield f
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
  """Appends `line` and a newline to `path`, flushed to disk. An OSError names `path` (a write
  refused by a full disk names no file of its own)."""
  try:
    with open(path, "a", encoding="utf-8") as f:
      f.write(line + "\n")
      f.flush()
      os.fsync(f.fileno())
  except OSError as e:
    if e.filename is not None:
      raise
    raise OSError(e.errno, e.strerror, str(path)) from e


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


# --------------------------------------------------------------------------- one process a run
LOCK_FILE = ".lock"
_held: dict[Path, Any] = {}  # Workdirs this process holds, with their open lock files.


class WorkdirBusyError(OSError):
  """Another live process holds the workdir."""


@contextlib.contextmanager
def workdir_lock(workdirs: Sequence[str | Path], *, enabled: bool = True) -> Iterator[None]:
  """Holds WORKDIR/.lock of every workdir for the duration: a second process asking for one
  fails at once with `WorkdirBusyError`, naming the holder (pid, host, start time). The lock is
  the kernel's (`fcntl.flock`), so a process that dies, however it dies, releases it and the
  next run takes it over. Taking a workdir this process holds already is a no-op, so nested
  users (training, then its final evaluation) share one lock. `enabled` false (processes other
  than the first of a multi-host run, which share the folder): nothing is taken."""
  taken = []
  try:
    for workdir in workdirs if enabled else ():
      folder = Path(workdir).absolute()
      if folder in _held:
        continue
      folder.mkdir(parents=True, exist_ok=True)
      f = open(folder / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 (held open while locked)
      try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise WorkdirBusyError(
          f"{folder} is in use by {holder}; wait for it to end or use another --workdir"
        ) from None
      f.seek(0)
      f.truncate()
      started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
      f.write(f"process {os.getpid()} on {socket.gethostname()} since {started}\n")
      f.flush()
      _held[folder] = f
      taken.append(folder)
    yield
  finally:
    for folder in taken:
      f = _held.pop(folder)
      fcntl.flock(f.fileno(), fcntl.LOCK_UN)
      f.close()


@contextlib.contextmanager
def waiting_lock(path: str | Path) -> Iterator[None]:
  """Holds the kernel lock (`fcntl.flock`) of the file `path`, made if missing, for the block,
  waiting while another process (or another open of it in this one) holds it: what processes
  sharing a cache take to build something once. A holder that dies, however it dies, releases
  it."""
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(path, "a", encoding="utf-8") as f:
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def check_writable(path: str | Path) -> None:
  """Raises OSError (one line naming `path`) unless a file can be written there: a run checks
  its output paths before the work that fills them."""
  path = Path(path)
  if path.is_dir():
    raise IsADirectoryError(f"cannot write {path}: it is a directory")
  folder = path.parent
  if not folder.is_dir():
    raise FileNotFoundError(f"cannot write {path}: no folder {folder}")
  try:
    fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
  except OSError as e:
    raise PermissionError(f"cannot write {path}: {e.strerror}") from None
  os.close(fd)
  os.unlink(probe)

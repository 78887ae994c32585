"""What a person at the terminal sees: a line for each thing worth knowing, the rest in a log.

`main.py` runs inside `logged_to(workdir, verbose)`. Every log record, ours and the libraries'
(Orbax's checkpoint-manager dumps, tfds, JAX, the resolved config), goes to WORKDIR/log.txt; the
terminal shows warnings (but tfds's about its own workings), errors and the console's own lines
(`say`): the run's data, training progress with a true ETA, validation, decoding progress
(`Progress`) and, at the end, a short table of the results (`results_table`) with where the
report, heatmaps and TensorBoard logs are (`where_to_look`). `--verbosity=0` (or higher) puts
the INFO records and those warnings on the terminal as well.

Console lines go to standard error, so standard output carries only results (the table, or
`--json`, or translations written to "-").
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

LOG_FILE = "log.txt"
# The console's lines as log records: they reach the log file only (the terminal has them already).
_LOGGER = logging.getLogger("seq2seq.common.console")
_LOGGER.propagate = False
_LOGGER.setLevel(logging.INFO)


def say(message: str) -> None:
  """One line for the person at the terminal (standard error), also written to the log."""
  print(message, file=sys.stderr, flush=True)
  _LOGGER.info(message)


# Libraries whose warnings are about their own workings (tfds: "Using custom data
# configuration ..."): on the terminal only with --verbosity or from ERROR up; always in the log.
QUIET_LIBRARIES = ("tensorflow_datasets",)


class _QuietLibraries(logging.Filter):
  def filter(self, record: logging.LogRecord) -> bool:
    quiet = any(f"/{name}/" in record.pathname for name in QUIET_LIBRARIES)
    return not quiet or record.levelno >= logging.ERROR


class _LogFile(logging.FileHandler):
  """WORKDIR/log.txt. A record it cannot write (a full disk) costs one line on the terminal,
  the first time, instead of logging's traceback for every record after it."""

  failed = False

  def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
    if not self.failed:
      self.failed = True
      problem = sys.exc_info()[1]
      print(f"log: cannot write {self.baseFilename} ({problem}): records lost", file=sys.stderr)

  def close(self) -> None:
    try:
      super().close()
    except OSError:  # Its last flush, on that disk: told once already, or nothing was lost.
      self.stream = None


@contextlib.contextmanager
def logged_to(workdir: str | Path, verbose: bool = False) -> Iterator[Path]:
  """Within the block, log records of INFO and above go to WORKDIR/log.txt (appended); the
  terminal handler (absl's, which `app.run` installs) shows only warnings and errors unless
  `verbose`. Yields the log file's path; everything is put back afterwards."""
  from absl import logging as absl_logging

  path = Path(workdir) / LOG_FILE
  path.parent.mkdir(parents=True, exist_ok=True)
  file_handler = _LogFile(path, encoding="utf-8")
  file_handler.setFormatter(
    logging.Formatter("%(asctime)s %(levelname).1s %(filename)s:%(lineno)d] %(message)s")
  )
  root = logging.getLogger()
  terminal = absl_logging.get_absl_handler()
  saved = (root.level, terminal.level)
  quiet = _QuietLibraries()
  root.addHandler(file_handler)
  _LOGGER.addHandler(file_handler)
  if root.level == logging.NOTSET or root.level > logging.INFO:
    root.setLevel(logging.INFO)
  if not verbose:
    terminal.setLevel(logging.WARNING)
    terminal.addFilter(quiet)
  try:
    yield path
  finally:
    root.removeHandler(file_handler)
    _LOGGER.removeHandler(file_handler)
    terminal.removeFilter(quiet)
    file_handler.close()
    root.setLevel(saved[0])
    terminal.setLevel(saved[1])


def log_only(message: str, *, exc_info: bool = False) -> None:
  """A record for the log file alone (not the terminal): e.g. the traceback behind an error the
  terminal shows in one line."""
  _LOGGER.error(message, exc_info=exc_info)


def hide_library_progress() -> None:
  """Turns off tfds's progress bars (building a corpus says so in one console line instead)."""
  import tensorflow_datasets as tfds

  tfds.disable_progress_bar()


def duration(seconds: float) -> str:
  """Seconds as a person reads them: "45s", "12m05s", "3h07m"."""
  s = max(0, round(seconds))
  if s < 60:
    return f"{s}s"
  if s < 3600:
    return f"{s // 60}m{s % 60:02d}s"
  return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
  """Progress of `total` items of work on the terminal, e.g. "decoding test: 320/1000".

  On a terminal the line is redrawn in place (at most every `every_s` seconds); into a file or
  pipe a line is written every `every_s * 100` seconds, so logs stay short. `close` writes the
  final line ("decoding test: 1000 sentences in 52s"), which also goes to the log.
  """

  def __init__(self, label: str, total: int, unit: str = "sentences", every_s: float = 0.25):
    self.label, self.total, self.unit = label, total, unit
    self.done = 0
    self.start = self._last = time.perf_counter()
    self.tty = sys.stderr.isatty()
    self.every_s = every_s if self.tty else every_s * 100

  def advance(self, n: int) -> None:
    self.done += n
    now = time.perf_counter()
    if now - self._last < self.every_s or self.done >= self.total:
      return
    self._last = now
    rate = self.done / max(now - self.start, 1e-9)
    left = (self.total - self.done) / max(rate, 1e-9)
    line = f"{self.label}: {self.done}/{self.total} {self.unit}, {duration(left)} left"
    if self.tty:
      print(f"\r{line}\033[K", end="", file=sys.stderr, flush=True)
    else:
      print(line, file=sys.stderr, flush=True)

  def close(self) -> None:
    line = f"{self.label}: {self.done} {self.unit} in {duration(time.perf_counter() - self.start)}"
    if self.tty:
      print("\r\033[K", end="", file=sys.stderr)
    say(line)


# ------------------------------------------------------------------------- closing summary

COLUMNS = (  # (heading, results.json key, format)
  ("split", None, "{}"),
  ("step", "step", "{:d}"),
  ("sentences", "num_sentences", "{:d}"),
  ("BLEU", "bleu", "{:.2f}"),
  ("chrF", "chrf", "{:.2f}"),
  ("No-UNK BLEU", "bleu_no_unk", "{:.2f}"),
  ("AER", "aer", "{:.3f}"),
)


def results_table(results: Mapping[str, Mapping[str, Any]]) -> str:
  """{split: results.json} as an aligned text table, one row per split ("-" where a figure is
  missing, e.g. AER without gold alignments)."""
  rows = [[heading for heading, _, _ in COLUMNS]]
  for split, result in results.items():
    row = [split]
    for _, key, fmt in COLUMNS[1:]:
      value = result.get(key)
      row.append("-" if value is None else fmt.format(value))
    rows.append(row)
  widths = [max(len(r[c]) for r in rows) for c in range(len(COLUMNS))]
  pad = lambda c, cell: cell.ljust(widths[c]) if c == 0 else cell.rjust(widths[c])
  return "\n".join("  ".join(pad(c, cell) for c, cell in enumerate(r)).rstrip() for r in rows)


def where_to_look(workdir: str | Path, splits: list[str], prefix: str = "eval") -> str:
  """Lines saying where a run's report, heatmaps, TensorBoard logs, tracker run, results and log
  are."""
  workdir = Path(workdir)
  shown = "test" if "test" in splits or not splits else splits[-1]
  out = workdir / prefix / shown
  lines = []
  if (out / "report.html").exists():
    others = f"  (every split: {workdir / prefix}/*/report.html)" if len(splits) > 1 else ""
    lines.append(f"explorer:    {out / 'report.html'}{others}")
  if (out / "alignments").is_dir():
    lines.append(f"heatmaps:    {out / 'alignments'}/")
  if (workdir / "tensorboard").is_dir():
    lines.append(f"TensorBoard: tensorboard --logdir {workdir / 'tensorboard'}")
  try:  # The tracker run of train.tracker (trackers.RUN_FILE), where there is one.
    run = json.loads((workdir / "tracker.json").read_text())
    lines.append(f"tracker:     {run['tracker']} run {run['run_id']} in {run['uri']}")
  except (OSError, ValueError, KeyError, TypeError):
    pass
  if (out / "results.json").exists():
    lines.append(f"results:     {out / 'results.json'}  (--json prints every figure)")
  lines.append(f"log:         {workdir / LOG_FILE}")
  return "\n".join(lines)

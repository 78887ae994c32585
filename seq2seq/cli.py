"""What `main.py` runs: one mode on one workdir, with the console set up around it.

`run` routes the logs to WORKDIR/log.txt (`console.logged_to`), runs the mode, turns a user's
mistake into one `error: ...` line and exit status 1, and ends train and eval with the results
table and where to look (or, with `as_json`, the results as JSON on standard output). `logged` is
that console around any job: the service's command (`seq2seq.serve`) runs through it too.

Exit statuses: 0 done; 1 a mistake or a failure, reported in one `error:` line (its traceback in
WORKDIR/log.txt, and on the terminal with --verbosity); `PREEMPTED` (75,
sysexits' EX_TEMPFAIL) training stopped by SIGTERM or SIGINT after saving its checkpoint, so a
script or scheduler does not read it as finished: rerun the same command to resume.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import traceback
from pathlib import Path
from typing import Any

import ml_collections
from absl import logging

from seq2seq import explorer
from seq2seq.common import console

MODES = ("train", "eval", "translate", "score", "report", "prepare")
PREEMPTED = 75  # Exit status of a training stopped by a signal after saving (see above).

# Errors that describe a user's mistake: reported as one line, exit status 1.
# OSError covers an unwritable or full workdir (checkpoints are written to a temporary
# directory and renamed when complete, so a failed write is never loaded).
USER_ERRORS = (ValueError, KeyError, TypeError, OSError)


def run(
  mode: str,
  config: ml_collections.ConfigDict | None,
  workdir: str | Path,
  *,
  input_path: str = "-",
  output_path: str = "-",
  alignments_path: str | None = None,
  nbest: int = 0,
  links_path: str | None = None,
  links_threshold: float = 0.0,
  prefixes_path: str | None = None,
  constraints_path: str | None = None,
  reference_path: str | None = None,
  compare: str | None = None,
  as_json: bool = False,
  verbose: bool = False,
  compilation_cache: str | None = None,
) -> int:
  """Runs `mode` ("train", "eval", "translate", "score", "report" or "prepare") on `workdir`;
  returns the
  exit status (0, or 1 after a one-line error). `config` may be None for "report".

  `compilation_cache`: where JAX keeps the compiled programs for the next process
  (`runtime.enable_compilation_cache`): "workdir" for WORKDIR/jax_cache, unless this process
  already has a cache folder; a folder; None or "none" for no cache."""
  if mode not in MODES:
    raise ValueError(f"mode {mode!r} is not one of {MODES}")
  workdir = Path(workdir)
  problem = _usage_problem(mode, config, workdir, reference_path, prefixes_path or constraints_path)
  if problem:
    print(f"error: {problem}", file=sys.stderr)
    return 1
  if mode == "report":  # Reads files only: nothing to log, nothing written beside the report.
    return _guarded(lambda: _report(workdir, compare))
  links = {"links_path": links_path, "links_threshold": links_threshold}
  # Validated once, before the workdir (or its log) is touched; every mode reads the result.
  run_settings = validated(config)
  if run_settings is None:
    return 1
  if mode == "translate":
    guides = {"prefixes_path": prefixes_path, "constraints_path": constraints_path}
    job = lambda: _translate(
      run_settings, workdir, input_path, output_path, alignments_path, nbest, links | guides
    )
  elif mode == "score":
    job = lambda: _score(
      run_settings, workdir, input_path, reference_path, output_path, alignments_path, links
    )
  elif mode == "prepare":
    job = lambda: _prepare(run_settings, workdir, as_json)
  else:
    job = lambda: _train_or_eval(mode, run_settings, workdir, as_json)
  return logged(mode, config, workdir, job, verbose, compilation_cache)


def logged(
  name: str,
  config: ml_collections.ConfigDict,
  workdir: Path,
  job,
  verbose: bool = False,
  compilation_cache: str | None = "workdir",
) -> int:
  """Runs `job` (named `name`) with its logs in WORKDIR/log.txt and the compilation cache on;
  returns its exit status, 1 after a one-line error (`seq2seq.serve`'s command runs through it
  too)."""

  def logged_job():  # An unusable workdir (a file, no permission) fails here: one error line.
    with console.logged_to(workdir, verbose) as log_path:
      _use_compilation_cache(compilation_cache, workdir)
      logging.info("config:\n%s", config)
      if not verbose:
        console.hide_library_progress()
      console.say(f"{name}: {workdir}  (log: {log_path})")
      try:
        return job()
      except Exception:
        console.log_only(f"{name} failed", exc_info=True)  # The traceback, in the log file.
        raise

  return _guarded(logged_job, verbose)


def _usage_problem(mode, config, workdir: Path, reference_path, guided) -> str | None:
  """What in the command line stops `mode` before anything runs, or None."""
  if config is None and mode != "report":
    return f"--mode={mode} needs --config"
  if (
    mode not in ("train", "prepare")
    and not workdir.is_dir()
    and not (config and config.decode.ensemble)
  ):
    return f"no run in {workdir} (no such directory)"  # An ensemble's workdir is made.
  if mode == "score" and not reference_path:
    return "--mode=score needs --reference=FILE, the translations to score"
  if mode != "translate" and guided:
    return "--prefixes and --constraints steer --mode=translate only"
  return None


def _use_compilation_cache(where: str | None, workdir: Path) -> None:
  from seq2seq import sharding as runtime

  if where == "workdir":
    runtime.enable_compilation_cache(workdir / "jax_cache", replace=False)
  else:
    runtime.enable_compilation_cache(where)


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing for main.py, with a mistake in a flag (a misspelt config field, a
  value of the wrong type) ending in one `error:` line and exit status 1 rather than the
  config library's chained traceback."""
  from absl import flags

  if moved := serve_command(argv):
    print(f"error: the service has a command of its own: {moved}", file=sys.stderr)
    sys.exit(1)
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    message = str(e).splitlines()[0]
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    text = str(e).replace("\\'", "'")
    names = [a.split("=")[0] for a in argv[1:] if a.startswith("--config.")]
    parts = lambda name: name.removeprefix("--config.").split(".")
    named = [n for n in names if any(f"'{part}'" in text for part in parts(n))]
    guess = re.search(r'Did you mean "([^"]+)"', text)
    if named:
      message = f"{named[0]}: no such config field"
      message += f' (did you mean "{guess.group(1)}"?)' if guess else ""
    else:
      message = " ".join(text.replace("\\n", " ").split())
  print(f"error: {message}", file=sys.stderr)
  sys.exit(1)


def serve_command(argv: list[str]) -> str | None:
  """For `main.py --mode=serve ...` (how the service was started before it had its own command),
  the command that does the same now: its flags lost the `serve_` prefix; else None."""
  args = list(argv[1:])
  if "--mode=serve" in args:
    args.remove("--mode=serve")
  elif any(a == "--mode" and b == "serve" for a, b in zip(args, args[1:], strict=False)):
    del args[args.index("--mode") : args.index("--mode") + 2]
  else:
    return None
  args = [re.sub(r"^--(no)?serve_", lambda m: "--no_" if m[1] else "--", a) for a in args]
  return shlex.join(["python", "-m", "seq2seq.serve", *args])


def _guarded(job, verbose: bool = False) -> int:
  """Runs `job`; any exception ends in one `error:` line (a user's mistake as its message,
  anything else with its type too) and exit status 1, its traceback on the terminal only with
  `verbose` (--verbosity), and in WORKDIR/log.txt always."""
  try:
    status = job()
  except Exception as e:
    _report_error(e, verbose)
    return 1
  return status or 0


def validated(config):
  """`settings.validate(config)`, or None once its error line is printed."""
  from seq2seq import settings

  try:
    return settings.validate(config)
  except Exception as e:
    _report_error(e, verbose=False)
    return None


def _report_error(e: Exception, verbose: bool) -> None:
  if isinstance(e, USER_ERRORS):
    _say_error(f"error: {e}", verbose)
  else:  # A failure that is no user's mistake: still one line.
    text = str(e).strip().splitlines()
    _say_error(f"error: {type(e).__name__}: {text[0] if text else 'no message'}", verbose)


def _say_error(line: str, verbose: bool) -> None:
  if verbose:
    traceback.print_exc()
  print(line, file=sys.stderr, flush=True)


def _train_or_eval(mode: str, run_settings, workdir: Path, as_json: bool) -> int:
  from seq2seq import (
    evaluation,
    restoring,
    train,
  )  # JAX and the data stack: not needed by report mode.

  if mode == "train":
    results = train.train_and_evaluate(run_settings, workdir)
  else:
    results = evaluation.evaluate_splits(run_settings, workdir)
  if as_json:
    print(json.dumps({"workdir": str(workdir), "results": results}, indent=2, sort_keys=True))
  else:
    print(closing_summary(results, workdir, prefix=restoring.eval_prefix(run_settings.model)))
  return PREEMPTED if "preempted_at_step" in results else 0


def closing_summary(results: dict[str, Any], workdir: Path, prefix: str = "eval") -> str:
  """The lines train and eval end with: the results table and where to look, or what stopped
  training before its evaluation."""
  if "preempted_at_step" in results:
    return (
      f"stopped at step {results['preempted_at_step']}: checkpoint saved; rerun the same "
      "command to resume"
    )
  if not results:
    return "no final evaluation (train.final_eval=false)\n" + console.where_to_look(workdir, [])
  table = console.results_table(results)
  return f"{table}\n\n{console.where_to_look(workdir, list(results), prefix)}"


def _prepare(run_settings, workdir: Path, as_json: bool) -> int:
  """Builds the corpus, the vocabularies (WORKDIR/vocab) and the corpus store once, so that
  training, evaluation and every process of a job only open them (`seq2seq.data.store`)."""
  from seq2seq import sharding

  stats = sharding.load_data(run_settings, workdir).stats
  if as_json:
    print(json.dumps({"workdir": str(workdir), "data": stats}, indent=2, sort_keys=True))
    return 0
  examples = ", ".join(f"{n:,} {name}" for name, n in stats["examples"].items())
  seconds = ", ".join(f"{name} {t:.1f}s" for name, t in stats["seconds"].items())
  print(f"prepared {stats['corpus']}: {examples} pairs\nstore: {stats['store']['path']}\n{seconds}")
  return 0


def _translate(
  run_settings, workdir: Path, input_path, output_path, alignments_path, nbest, options
) -> None:
  from seq2seq import translate

  counts = translate.translate_file(
    run_settings, workdir, input_path, output_path, alignments_path, nbest, **options
  )
  logging.info("translated: %s", counts)
  console.say(
    f"translated {counts['lines']} lines ({counts['empty']} empty, "
    f"{counts['invalid_utf8']} with invalid UTF-8, {counts['truncated']} truncated, "
    f"{counts['too_long']} too long to translate)"
  )


def _score(
  run_settings, workdir: Path, input_path, reference_path, output_path, alignments_path, links
):
  from seq2seq import translate

  counts = translate.score_file(
    run_settings, workdir, input_path, reference_path, output_path, alignments_path, **links
  )
  logging.info("scored: %s", counts)
  console.say(f"scored: {counts}")


def _report(workdir: Path, compare: str | None) -> None:
  written = explorer.write_reports(workdir, compare=None if compare is None else Path(compare))
  for path in written:
    print(path)

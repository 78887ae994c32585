"""A finished run decoded again: its corpus's pairs and references, `main.py --mode=eval` with
decoding settings, and how fast it decodes warm in this process (the decoding, MBR and
translation timing studies share these)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from experiments.lib.configs import run_command

SPLITS = ("valid", "test")


def pairs(run: Path, split: str) -> list[Any]:
  """The pairs (`builders.Example`: source and reference text) of a split of `run`'s corpus."""
  from seq2seq import checkpoints
  from seq2seq.data import builders, input_pipeline

  config = checkpoints.load_config(run)
  data_settings = input_pipeline.DataSettings.from_config(config)
  corpus = builders.prepare_corpus(data_settings, input_pipeline.data_dir(data_settings, run))
  return list(corpus.read(split))


def references(run: Path) -> dict[str, list[str]]:
  """The reference lines of every split of `run`'s corpus, in order."""
  return {split: [ex.tgt for ex in pairs(run, split)] for split in SPLITS}


def decoding_speed(
  run: Path, settings: dict[str, dict[str, str]], rounds: int = 3, lines: list[str] | None = None
) -> dict:
  """{name: sentences per second} of each of `settings` (decode.* fields) decoding `lines` (by
  default the run's test sources) warm, in this process: a first pass of each compiles, then
  `rounds` timed passes go round the settings in turn (so a change of the machine's load falls
  on all of them) and the median is kept. Start-up, compilation and the No-UNK pass are left
  out, which the eval minutes include."""
  import seq2seq
  from seq2seq import translate

  t = seq2seq.load(run)
  lines = [ex.src for ex in pairs(run, "test")] if lines is None else lines
  go = lambda s: translate.translate_lines(t, lines, progress=None, **s)
  for s in settings.values():
    go(s)
  seconds: dict[str, list[float]] = {name: [] for name in settings}
  for _ in range(rounds):
    for name, s in settings.items():
      start = time.perf_counter()
      go(s)
      seconds[name].append(time.perf_counter() - start)
  return {name: len(lines) / sorted(v)[len(v) // 2] for name, v in seconds.items()}


def evaluate(
  config_file: str, workdir: Path, overrides: dict[str, str], *, reuse: bool = False
) -> str:
  """main.py --mode=eval of `workdir` with `overrides`; the command. With `reuse` (a workdir
  whose parameters never change: an average written once) results of every split that exist
  already are kept, so a rerun of the study resumes; an ensemble or shortlist over the runs is
  always decoded again, since their best checkpoints may have moved."""
  command = ["python", "main.py", f"--config={config_file}", f"--workdir={workdir}"]
  command += ["--mode=eval", *(f"--config.{k}={v}" for k, v in overrides.items())]
  if reuse and all((workdir / "eval" / split / "results.json").exists() for split in SPLITS):
    print("# evaluated already:", " ".join(command), flush=True)
    return " ".join(command)
  return run_command(command)

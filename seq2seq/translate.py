"""Translate mode: raw text in (one sentence a line), translations out, one line per input line.

Input is tokenised the way training text was (the run's saved source vocabulary). An empty input
line gives an empty output line. Invalid UTF-8 is decoded with replacement characters (counted
and logged), never a crash. Lines longer than the model can address (only the `location` score
has a limit, `location(max_len=N)`) are truncated with a warning; every other line is translated
in full.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ml_collections
import numpy as np
from absl import logging

from seq2seq import ensemble, eval_run, evaluate, input_pipeline, scores, settings
from seq2seq import runtime as rt
from seq2seq import tokenizer as tok


def _read_lines(path: str) -> tuple[list[str], int]:
  """Lines of `path` ("-" for standard input) and how many held invalid UTF-8."""
  raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
  lines, invalid = [], 0
  for line in raw.splitlines():
    try:
      lines.append(line.decode("utf-8"))
    except UnicodeDecodeError:
      invalid += 1
      lines.append(line.decode("utf-8", errors="replace"))
  return lines, invalid


def translate_file(
  config: ml_collections.ConfigDict,
  workdir: str | Path,
  input_path: str,
  output_path: str,
  alignments_path: str | None = None,
) -> dict[str, int]:
  """Translates `input_path` with the run in `workdir` (best checkpoint, else latest).

  Writes one output line per input line to `output_path` ("-" for standard output) and, when
  `alignments_path` is given, one JSON object per line with `source`, `target` and `attention`
  (a list per output word, EOS included, of weights over the source words and EOS).
  Returns counts: lines, empty, invalid_utf8, truncated. An agreement run translates with its
  `model.direction` model ("reverse": target-language text into the source language).
  """
  settings.validate(config)  # Before loading anything.
  ensemble.prepare_workdir(config, workdir)
  workdir = Path(workdir)
  vocab = {side: tok.load(workdir / "vocab" / side) for side in ("src", "tgt")}
  state = eval_run.restore_for_eval(
    config, workdir, vocab["src"].size, vocab["tgt"].size, rt.Runtime()
  )
  state = rt.host_local(eval_run.direction_state(state, config.model.direction))
  src_tok, tgt_tok = vocab["src"], vocab["tgt"]
  if config.model.direction == "reverse":  # Target-language text in, source language out.
    src_tok, tgt_tok = tgt_tok, src_tok
  lines, invalid = _read_lines(input_path)
  score = scores.spec(config.model.score)
  positions = scores.get(score.name).source_limit(score.settings)
  limit = None if positions is None else positions - 1  # Room for EOS.
  ids, keep, truncated = [], [], 0
  for i, line in enumerate(lines):
    if not line.strip():
      continue
    encoded = src_tok.encode(line)
    if limit is not None and len(encoded) > limit:
      truncated += 1
      encoded = encoded[:limit]
    ids.append(encoded)
    keep.append(i)
  if invalid:
    logging.warning("%d input lines held invalid UTF-8 (decoded with replacements)", invalid)
  if truncated:
    logging.warning("%d lines truncated to the location score's max_len=%d", truncated, limit + 1)
  split = input_pipeline.Split(
    "translate",
    input_pipeline.Ragged.from_lists(ids),
    input_pipeline.Ragged.from_lists([[] for _ in ids]),
    np.asarray(keep, np.int64),
  )
  translations = (
    evaluate.translate_split(state, split, config, progress="translating") if ids else []
  )
  outputs = [""] * len(lines)
  records = [{"source": line, "target": "", "attention": []} for line in lines]
  for i, tr in zip(keep, translations, strict=True):
    outputs[i] = evaluate.output_text(tr, lines[i], src_tok, tgt_tok, config.decode.replace_unk)
    records[i].update(target=outputs[i], attention=np.round(tr.alpha, 4).tolist())
  text = "".join(o + "\n" for o in outputs)
  if output_path == "-":
    sys.stdout.write(text)
  else:
    Path(output_path).write_text(text, encoding="utf-8")
  if alignments_path:
    with open(alignments_path, "w", encoding="utf-8") as f:
      for record in records:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
  return {
    "lines": len(lines),
    "empty": len(lines) - len(keep),
    "invalid_utf8": invalid,
    "truncated": truncated,
  }

"""The explorer: one self-contained HTML file per evaluated split, WORKDIR/eval/SPLIT/report.html.

It holds a sortable, filterable table of the split's sentences (source, reference, hypothesis,
sentence BLEU and chrF, source length, UNK count, attention entropy, AER), the attention heatmap
of the selected sentence (one per head for multi-head models, and the reference's teacher-forced
attention with the gold links where the corpus has them), the run's training curves from
metrics.jsonl, BLEU by source length and the config. `write_reports(workdir, compare=other)`
puts two runs side by side on the same sentences instead, sortable by their difference in
sentence BLEU (`main.py --mode=report --compare=OTHER`).

Nothing is fetched: the page's script (explorer.js) and style (explorer.css, both shipped beside
this module) are inlined and the data is embedded as JSON. The one exception is the live page
(`live_page`) that the translation service serves: its what-if and beam views ask the service
that sent it for new translations, and nothing else. Every string from the data is shown
as text, never parsed as markup: the JSON sits in a <script type="application/json"> with `<`,
`>` and `&` written as \\u escapes (so a corpus line holding "</script>" cannot end it), the
script builds the page with createElement and textContent only, and a Content-Security-Policy
lets only that script (by its hash) and that style run.

The data comes from files only: each split's sentences.jsonl (`write_sentences`, written by
`evaluation.evaluate_split`) and results.json, and the run's metrics.jsonl and config.json, so
the report can be written again without a model. Attention maps are stored as their weights
rounded to 1/254 (a byte each, runs of zeros shortened, base64: `encode_map`), which keeps
3,000 sentences to a few MB.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from seq2seq.common import files
from seq2seq.training import metric_writer

SENTENCES = "sentences.jsonl"
REPORT = "report.html"
LEVELS = 254  # An attention weight w is stored as the byte round(w * 254) ...
ZERO_RUN, MAX_RUN = 255, 257  # ... and a run of n zeros (2 <= n <= 257) as the bytes 255, n - 2.

# Figures of results.json shown in the page's header (all of them stay in results.json).
HEADLINE = (
  "step",
  "num_sentences",
  "beam_size",
  "bleu",
  "chrf",
  "bleu_no_unk",
  "num_no_unk",
  "bleu_tokenized",
  "aer",
  "attention_entropy",
  "loss",
  "perplexity",
  "bleu_signature",
)


# ----------------------------------------------------------------------------- attention maps


def row_shares(psi_TS: np.ndarray) -> np.ndarray:
  """An attribution [T, S] (any sign and scale) drawn as a map: each row's magnitudes |psi_tj|
  as shares of the row's sum (a row of zeros stays zeros), so it reads as attention does."""
  magnitude = np.abs(np.asarray(psi_TS, np.float64))
  total = magnitude.sum(axis=-1, keepdims=True)
  return np.divide(magnitude, total, out=np.zeros_like(magnitude), where=total > 0)


def encode_map(alpha_TS: np.ndarray) -> dict[str, Any]:
  """An attention map [T, S] as {"rows": T, "cols": S, "data": base64 of its weights, row by
  row}: each weight w is one byte round(w * 254) (1/254 is finer than a heatmap's shades), and
  a run of n >= 2 zero bytes, common where attention is sharp, is written as the two bytes
  255, n - 2 (runs longer than 257 as several), which shrinks trained models' maps about
  threefold."""
  alpha = np.clip(np.nan_to_num(np.asarray(alpha_TS, np.float64)), 0.0, 1.0)
  if alpha.ndim != 2:
    raise ValueError(f"an attention map is [T, S]; got shape {alpha.shape}")
  flat = np.rint(alpha * LEVELS).astype(np.uint8).ravel()
  edges = np.flatnonzero(np.diff(np.concatenate([[0], flat == 0, [0]]).astype(np.int8)))
  out, pos = bytearray(), 0
  for start, end in zip(edges[::2], edges[1::2], strict=True):  # Each run of zeros.
    out += flat[pos:start].tobytes()
    n = int(end - start)
    while n >= 2:
      k = min(n, MAX_RUN)
      out += bytes([ZERO_RUN, k - 2])
      n -= k
    out += bytes(n)  # A lone zero stays one byte.
    pos = int(end)
  out += flat[pos:].tobytes()
  data = base64.b64encode(bytes(out)).decode("ascii")
  return {"rows": int(alpha.shape[0]), "cols": int(alpha.shape[1]), "data": data}


def decode_map(encoded: dict[str, Any]) -> np.ndarray:
  """The weights [T, S] of an `encode_map` record (to within 1/508)."""
  raw = base64.b64decode(encoded["data"])
  levels, i = [], 0
  while i < len(raw):
    if raw[i] == ZERO_RUN:
      levels.extend([0] * (raw[i + 1] + 2))
      i += 2
    else:
      levels.append(raw[i])
      i += 1
  values = np.asarray(levels, np.float64) / LEVELS
  return values.reshape(encoded["rows"], encoded["cols"])


# ------------------------------------------------------------------------------- run files


def write_sentences(out_dir: str | Path, records: Sequence[dict[str, Any]]) -> Path:
  """OUT_DIR/sentences.jsonl: one record a line (`evaluate.sentence_records`)."""
  path = Path(out_dir) / SENTENCES
  files.write_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
  return path


def read_sentences(split_dir: str | Path) -> list[dict[str, Any]]:
  path = Path(split_dir) / SENTENCES
  if not path.exists():
    raise FileNotFoundError(f"no {path}: evaluate the run first (--mode=eval)")
  with path.open(encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def _read_json(path: Path) -> Any:
  return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def curves(workdir: str | Path) -> dict[str, list[dict[str, float]]]:
  """The run's metrics.jsonl as curves: "train" rows (step, minutes, loss) and "valid" rows
  (step, minutes, loss, bleu where computed); minutes are wall-clock minutes of training."""
  rows = metric_writer.read_metrics(workdir)
  out: dict[str, list[dict[str, float]]] = {"train": [], "valid": []}
  for r in rows:
    if r.get("split") not in out:
      continue
    point = {"step": r["step"], "minutes": r.get("elapsed_s", 0.0) / 60.0, "loss": r.get("loss")}
    if "bleu" in r:
      point["bleu"] = r["bleu"]
    out[r["split"]].append(point)
  return out


def run_summary(workdir: str | Path, prefix: str, split: str) -> dict[str, Any]:
  """What the page shows of one run besides its sentences: its name and workdir, the headline
  figures of SPLIT's results.json, BLEU by source length, the curves and the saved config."""
  workdir = Path(workdir)
  results = _read_json(workdir / prefix / split / "results.json") or {}
  return {
    "name": workdir.resolve().name,
    "workdir": str(workdir),
    "results": {k: results[k] for k in HEADLINE if k in results},
    "bleu_by_length": results.get("bleu_by_length", []),
    "curves": curves(workdir),
    "config": _read_json(workdir / "config.json"),
  }


def check_same_sentences(a: Sequence[dict], b: Sequence[dict], names: tuple[str, str]) -> None:
  """Raises ValueError unless two runs' records are the same sentences in the same order."""
  if len(a) != len(b):
    raise ValueError(f"{names[0]} has {len(a)} sentences and {names[1]} {len(b)}: not comparable")
  for x, y in zip(a, b, strict=True):
    if x["source"] != y["source"] or x["reference"] != y["reference"]:
      raise ValueError(
        f"sentence {x['index']} differs between {names[0]} and {names[1]} "
        f"({x['source'][:40]!r} vs {y['source'][:40]!r}): not the same test set"
      )


# ---------------------------------------------------------------------------------- the page


def embed_json(data: Any) -> str:
  """`data` as JSON that is safe inside <script type="application/json">: every "<", ">" and
  "&" (and the line separators U+2028/U+2029) written as \\u escapes, so no string in it can
  close the element or open a comment; JSON.parse reads back the same strings."""
  text = json.dumps(_finite(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
  for char in "<>&\u2028\u2029":
    text = text.replace(char, f"\\u{ord(char):04x}")
  return text


def _finite(value: Any) -> Any:
  """`value` with every NaN or infinite float replaced by None (JSON has no such numbers)."""
  if isinstance(value, float):
    return value if np.isfinite(value) else None
  if isinstance(value, dict):
    return {k: _finite(v) for k, v in value.items()}
  if isinstance(value, list | tuple):
    return [_finite(v) for v in value]
  return value


def _asset(name: str) -> str:
  return resources.files("seq2seq").joinpath(name).read_text(encoding="utf-8")


def _csp_hash(text: str) -> str:
  return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def render(data: dict[str, Any]) -> str:
  """The HTML page of `data` (`page_data`): explorer.css and explorer.js inlined, the data as
  JSON, and a Content-Security-Policy that allows that script and style and nothing else (and,
  for a live page, requests to the server that sent it)."""
  script, style = _asset("explorer.js"), _asset("explorer.css")
  csp = "; ".join(
    [
      "default-src 'none'",
      f"script-src {_csp_hash(script)}",
      f"style-src {_csp_hash(style)}",
      "img-src data:",
      "base-uri 'none'",
      "form-action 'none'",
      *(["connect-src 'self'"] if data.get("live") else []),
    ]
  )
  title = html.escape(data.get("title", "seq2seq report"))
  return (
    '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
    f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
    '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
    f"<title>{title}</title>\n<style>{style}</style>\n</head>\n<body>\n"
    "<noscript>This report needs JavaScript (it builds the page from the data below).</noscript>\n"
    f'<script type="application/json" id="report-data">{embed_json(data)}</script>\n'
    f"<script>{script}</script>\n</body>\n</html>\n"
  )


def page_data(
  runs: Sequence[dict[str, Any]], sentences: Sequence[Sequence[dict]], split: str
) -> dict[str, Any]:
  """The JSON the page is built from: one run (a report) or two (a comparison, whose
  `sentences[1]` holds the same sentences as `sentences[0]`)."""
  if len(runs) not in (1, 2) or len(runs) != len(sentences):
    raise ValueError("a report shows one run, or two side by side")
  if len(runs) == 2:
    check_same_sentences(*sentences, names=(runs[0]["workdir"], runs[1]["workdir"]))
  names = " vs ".join(r["name"] for r in runs)
  return {
    "title": f"{names} · {split}",
    "split": split,
    "runs": list(runs),
    "sentences": [list(s) for s in sentences],
  }


def write_report(workdir: str | Path, prefix: str, split: str) -> Path:
  """WORKDIR/PREFIX/SPLIT/report.html from that split's files (see the module doc)."""
  out = Path(workdir) / prefix / split
  data = page_data([run_summary(workdir, prefix, split)], [read_sentences(out)], split)
  path = out / REPORT
  files.write_atomic(path, render(data))
  return path


def live_page(workdir: str | Path, split: str | None = None, beam_size: int = 5) -> str:
  """The explorer as the translation service serves it (`seq2seq.serve`, GET /explorer): the
  report of the run's evaluated `split` (without one, its first: valid before test; with none
  evaluated, no sentences), with the what-if and beam views, which ask the service for new
  translations (beam size `beam_size` unless changed on the page). FileNotFoundError names a
  split the run has not evaluated."""
  splits = evaluated_splits(workdir)
  if split is not None:
    splits = [(prefix, name) for prefix, name in splits if name == split]
    if not splits:
      raise FileNotFoundError(f"{workdir} has no evaluated split {split!r}")
  prefix, name = splits[0] if splits else ("eval", "none")
  records = read_sentences(Path(workdir) / prefix / name) if splits else []
  data = page_data([run_summary(workdir, prefix, name)], [records], name)
  data["live"] = {"beam_size": beam_size}
  return render(data)


def compare_name(other: Path) -> str:
  """The file name of a comparison with the run in `other`: compare_NAME.html, NAME the other
  workdir's name with anything but letters, digits, ".", "_" and "-" replaced by "_"."""
  return "compare_" + re.sub(r"[^A-Za-z0-9._-]", "_", other.resolve().name) + ".html"


def evaluated_splits(workdir: str | Path) -> list[tuple[str, str]]:
  """(prefix, split) of every evaluated split of a run that has sentences.jsonl, e.g.
  ("eval", "test"), in a stable order."""
  workdir = Path(workdir)
  found = [
    (p.parent.parent.name, p.parent.name) for p in sorted(workdir.glob(f"eval*/*/{SENTENCES}"))
  ]
  order = {"valid": 0, "test": 1}
  return sorted(found, key=lambda ps: (ps[0], order.get(ps[1], 2), ps[1]))


def write_reports(workdir: str | Path, compare: str | Path | None = None) -> list[Path]:
  """Writes the report of every evaluated split of the run in `workdir` again, or, with
  `compare`, a comparison with that run for every split both evaluated
  (WORKDIR/eval/SPLIT/compare_NAME.html). Returns the files written."""
  workdir = Path(workdir)
  splits = evaluated_splits(workdir)
  if not splits:
    raise FileNotFoundError(
      f"no evaluated split with {SENTENCES} under {workdir}/eval*/: run --mode=eval first"
    )
  if compare is None:
    return [write_report(workdir, prefix, split) for prefix, split in splits]
  other = Path(compare)
  theirs = evaluated_splits(other)
  shared = [s for s in splits if s in theirs]
  if not shared:
    raise FileNotFoundError(f"{other} has no evaluated split in common with {workdir}")
  written = []
  for prefix, split in shared:
    runs = [run_summary(w, prefix, split) for w in (workdir, other)]
    sentences = [read_sentences(w / prefix / split) for w in (workdir, other)]
    path = workdir / prefix / split / compare_name(other)
    files.write_atomic(path, render(page_data(runs, sentences, split)))
    written.append(path)
  return written

"""Reranking n-best lists: every candidate gets features, the translation is the candidate with
the highest weighted sum of them, and the weights are tuned on validation data.

    python -m seq2seq.rerank --nbest=valid.nbest --references=valid.fr \
        [--reverse=RUN --sources=valid.en] [--feature=NAME=FILE ...] --tune=weights.json
    python -m seq2seq.rerank --nbest=test.nbest --weights=weights.json \
        [--reverse=RUN --sources=test.en] [--feature=NAME=FILE ...] --output=test.txt

The n-best lists are what `main.py --mode=translate --nbest=N` writes. A candidate's features:

* `score`: its log-probability under the model that wrote the list (the list's third field);
* `norm_score`: what that model's beam search ranked it by (the fourth);
* `words`: its length in words (split at whitespace), so that a weight can favour longer or
  shorter outputs;
* `reverse`: log p(source | candidate) under a model of the other direction (`--reverse=RUN`, a
  run trained from the target language into the source language), by forced decoding in this
  process, as `--mode=score` computes it;
* `NAME` for every `--feature=NAME=FILE`: the `score` of each record of a `--mode=score`
  JSON-lines file with one record per n-best line (another model's or an ensemble's scores).

Tuning keeps the weight of `score` at 1 (only the ratios of the weights change a choice) and sets
each other weight in turn to the value of a grid (0 and +-2^k for k = -6 .. 3) that gives the
highest corpus BLEU (or chrF) of the chosen candidates against the references, pass after pass
until no weight changes: coordinate ascent, MERT's line search (Och 2003) reduced to a grid. A
change is kept only where it raises the metric, the grid tried from its smallest magnitude up;
the earlier candidate of a list wins a tie. A candidate with a missing (unscorable) value of a
feature whose weight is not 0 ranks last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seq2seq import api, translate
from seq2seq.common import files
from seq2seq.data import metrics

BUILT_IN = ("score", "norm_score", "words")
GRID = (0.0, *(s * 2.0**k for k in range(-6, 4) for s in (1.0, -1.0)))
METRICS = {"bleu": lambda h, r: metrics.bleu(h, r)[0], "chrf": metrics.chrf}


@dataclasses.dataclass
class NBest:
  """The candidates of every input line (`texts[i]`, best first as the list has them) and their
  features (`features[name][i][k]`: candidate k of line i)."""

  texts: list[list[str]]
  features: dict[str, list[list[float]]]

  def add(self, name: str, values: Sequence[float]) -> None:
    """Adds a feature given per n-best line, in the list's order."""
    count = sum(len(c) for c in self.texts)
    if len(values) != count:
      raise ValueError(f"feature {name}: {len(values)} values for {count} n-best lines")
    it = iter(values)
    self.features[name] = [[float(next(it)) for _ in cands] for cands in self.texts]

  def matrix(self, names: Sequence[str]) -> np.ndarray:
    """[lines, most candidates, features] float64, -inf where a line has fewer candidates."""
    width = max((len(c) for c in self.texts), default=0)
    out = np.full((len(self.texts), width, len(names)), -np.inf)
    for f, name in enumerate(names):
      for i, values in enumerate(self.features[name]):
        out[i, : len(values), f] = values
    return out


def read_nbest(path: str | Path) -> NBest:
  """The n-best list `translate.nbest_lines` writes: `index ||| text ||| score ||| norm_score`,
  the lines of input line i together, i = 0, 1, ... ValueError naming the first line that is
  not so."""
  texts: list[list[str]] = []
  score: list[list[float]] = []
  norm: list[list[float]] = []
  for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
    fields = line.split(translate.NBEST_SEPARATOR)
    try:
      index, text, s, ns = int(fields[0]), fields[1], float(fields[2]), float(fields[3])
    except (IndexError, ValueError):
      raise ValueError(
        f"{path}, line {n}: not an n-best line (index ||| text ||| score ||| norm)"
      ) from None
    if len(fields) != 4 or index not in (len(texts) - 1, len(texts)):
      raise ValueError(f"{path}, line {n}: input line {index} out of order or a field too many")
    if index == len(texts):
      for column in (texts, score, norm):
        column.append([])
    texts[index].append(text)
    score[index].append(s)
    norm[index].append(ns)
  words = [[float(len(t.split())) for t in cands] for cands in texts]
  return NBest(texts, {"score": score, "norm_score": norm, "words": words})


def read_score_feature(path: str | Path) -> list[float]:
  """The `score` of every record of a `--mode=score` JSON-lines file (-inf where unscored)."""
  out = []
  for line in Path(path).read_text(encoding="utf-8").splitlines():
    score = json.loads(line).get("score")
    out.append(-math.inf if score is None else float(score))
  return out


def reverse_scores(workdir: str | Path, nbest: NBest, sources: Sequence[str]) -> list[float]:
  """log p(source | candidate) of every n-best line under the run in `workdir` (a model of the
  other direction), -inf where a pair cannot be scored (an empty candidate)."""
  if len(sources) != len(nbest.texts):
    raise ValueError(f"{len(sources)} sources for an n-best list of {len(nbest.texts)} lines")
  pairs = [(c, s) for cands, s in zip(nbest.texts, sources, strict=True) for c in cands]
  scored = api.load(workdir).score([c for c, _ in pairs], [s for _, s in pairs])
  return [-math.inf if r.score is None else r.score for r in scored]


def choose(nbest: NBest, weights: dict[str, float]) -> list[int]:
  """The index of the chosen candidate of every line: the highest weighted sum of features, the
  earlier on ties; a candidate missing a weighted feature only where every one does."""
  names = [n for n, w in weights.items() if w != 0]
  if not names:
    return [0] * len(nbest.texts)
  feats = nbest.matrix(names)
  w = np.asarray([weights[n] for n in names])
  valid = np.isfinite(feats).all(-1)
  totals = np.where(valid, np.where(valid[..., None], feats, 0.0) @ w, -np.inf)
  return [int(i) for i in np.argmax(totals, axis=1)] if feats.shape[1] else []


def chosen_texts(nbest: NBest, weights: dict[str, float]) -> list[str]:
  """The chosen candidate's text of every line (`choose`)."""
  return [cands[k] for cands, k in zip(nbest.texts, choose(nbest, weights), strict=True)]


def tune(
  nbest: NBest, references: Sequence[str], metric: str = "bleu", max_passes: int = 10
) -> tuple[dict[str, float], float]:
  """(weights, the metric they reach) by coordinate ascent over `GRID` (module docstring), the
  weight of `score` fixed at 1, every other feature of `nbest` starting at 0."""
  if len(references) != len(nbest.texts):
    raise ValueError(f"{len(references)} references for an n-best list of {len(nbest.texts)}")
  if metric not in METRICS:
    raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
  measure = lambda w: METRICS[metric](chosen_texts(nbest, w), list(references))
  weights = {name: (1.0 if name == "score" else 0.0) for name in nbest.features}
  best = measure(weights)
  for _ in range(max_passes):
    changed = False
    for name in weights:
      if name == "score":
        continue
      for value in sorted(GRID, key=abs):
        trial = {**weights, name: value}
        got = measure(trial)
        if got > best:
          best, weights, changed = got, trial, True
    if not changed:
      break
  return weights, best


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m seq2seq.rerank", description=__doc__)
  parser.add_argument("--nbest", required=True, help="an n-best list (main.py --nbest=N)")
  parser.add_argument("--reverse", help="a run of the other direction: the reverse feature")
  parser.add_argument("--sources", help="the source lines the n-best list translates")
  parser.add_argument(
    "--feature", action="append", default=[], help="NAME=FILE: a --mode=score JSON-lines file"
  )
  parser.add_argument("--references", help="--tune: the references of the n-best list's lines")
  parser.add_argument("--metric", default="bleu", choices=sorted(METRICS))
  parser.add_argument("--tune", metavar="WEIGHTS_OUT", help="tune weights, write them here")
  parser.add_argument("--weights", help="weights written by --tune: rerank with them")
  parser.add_argument("--output", default="-", help="the chosen translations (- = stdout)")
  args = parser.parse_args(argv)
  if bool(args.tune) == bool(args.weights):
    parser.error("give --tune=FILE (with --references) or --weights=FILE")
  nbest = read_nbest(args.nbest)
  for spec in args.feature:
    name, _, path = spec.partition("=")
    if not name or not path or name in BUILT_IN:
      parser.error(f"--feature={spec}: give NAME=FILE, NAME not one of {', '.join(BUILT_IN)}")
    nbest.add(name, read_score_feature(path))
  if args.reverse:
    if not args.sources:
      parser.error("--reverse needs --sources, the lines the n-best list translates")
    sources = Path(args.sources).read_text(encoding="utf-8").splitlines()
    nbest.add("reverse", reverse_scores(args.reverse, nbest, sources))
  if args.tune:
    if not args.references:
      parser.error("--tune needs --references")
    references = Path(args.references).read_text(encoding="utf-8").splitlines()
    weights, value = tune(nbest, references, args.metric)
    first = METRICS[args.metric]([c[0] if c else "" for c in nbest.texts], references)
    record = {"weights": weights, "metric": args.metric, "tuned": value, "first_best": first}
    files.write_atomic(args.tune, json.dumps(record, indent=1) + "\n")
    print(f"{args.metric} {first:.2f} (first best) -> {value:.2f} (reranked): {args.tune}")
    return
  weights = json.loads(Path(args.weights).read_text())["weights"]
  if missing := sorted(n for n, w in weights.items() if w and n not in nbest.features):
    parser.error(f"the weights use features not given here: {', '.join(missing)}")
  text = "".join(t + "\n" for t in chosen_texts(nbest, weights))
  if args.output == "-":
    print(text, end="")
  else:
    files.write_atomic(args.output, text)


if __name__ == "__main__":
  main()

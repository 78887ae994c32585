"""A parallel corpus at the paper's scale, made here: the embedded generator's English-French
pairs, at least 10 million of them with no source line twice, as plain text files the "local"
corpus reads.

    python -m experiments.scale_corpus --out DIR [--pairs 10000000] [--prefixes 29000,1000000]

The generator (`seq2seq.data.synthetic`, a 40,000-type English lexicon and its French
counterpart, sentences of 8 to 50 words) runs in one process per core, each on a stream of its
own seed, writing shards; the shards are then joined with every repeated source line (and its
pair) left out, until `--pairs` pairs remain. Validation and test sets of 3,000 pairs each come
from the generator's own valid and test streams (no source sentence is in two splits). Each of
`--prefixes` gets a folder of its own holding the first N training pairs (and the same
validation and test sets), so that a small corpus is measured as a small corpus, not as a
slice of the large one. DIR/corpus.json records what was made: pairs, words, the seconds it took.

The files are never part of the repository: they are made again from the seeds.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from seq2seq.data import synthetic

VOCAB_SIZE = 40_000  # English word types the generator may draw (the default).
MIN_LEN, MAX_LEN = 8, 50  # Source words: long enough that repeats are rare; the paper's 50.
EVAL_PAIRS = 3_000  # Validation and test pairs (newstest2012 has 3,003).
SPARE = 1.03  # Pairs generated per pair kept: the repeats left out are fewer than 3 %.


def _shard(out: Path, index: int, pairs: int, split: str) -> tuple[int, int]:
  """Writes `pairs` pairs of the stream of seed `index` to OUT.{en,fr}; (pairs, words)."""
  words = 0
  with (
    open(f"{out}.en", "w", encoding="utf-8") as en,
    open(f"{out}.fr", "w", encoding="utf-8") as fr,
  ):
    for pair in synthetic.generate(
      pairs, seed=index, split=split, vocab_size=VOCAB_SIZE, min_len=MIN_LEN, max_len=MAX_LEN
    ):
      en.write(" ".join(pair.src) + "\n")
      fr.write(" ".join(pair.tgt) + "\n")
      words += len(pair.src) + len(pair.tgt)
  return pairs, words


def _join(shards: Sequence[Path], out: Path, wanted: int) -> dict[str, int]:
  """Joins the shards' pairs into OUT.{en,fr}, leaving out every source line seen before, until
  `wanted` pairs are written."""
  seen: set[int] = set()
  kept = repeats = words = 0
  with (
    open(f"{out}.en", "w", encoding="utf-8") as en,
    open(f"{out}.fr", "w", encoding="utf-8") as fr,
  ):
    for shard in shards:
      with (
        open(f"{shard}.en", encoding="utf-8") as src,
        open(f"{shard}.fr", encoding="utf-8") as tgt,
      ):
        for s, t in zip(src, tgt, strict=True):
          if kept == wanted:
            break
          h = hash(s)
          if h in seen:
            repeats += 1
            continue
          seen.add(h)
          en.write(s)
          fr.write(t)
          kept += 1
          words += s.count(" ") + t.count(" ") + 2
  if kept < wanted:
    raise RuntimeError(f"only {kept} distinct pairs of {wanted}: raise SPARE")
  return {"pairs": kept, "repeats_left_out": repeats, "words": words}


def _head(source: Path, out: Path, lines: int) -> None:
  with open(source, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as g:
    for _, line in zip(range(lines), f, strict=False):
      g.write(line)


def make(out: Path, pairs: int, prefixes: Sequence[int], workers: int) -> dict:
  """Makes the corpus in OUT/full and each prefix's folder; returns what corpus.json records."""
  start = time.perf_counter()
  tmp = out / "shards"
  tmp.mkdir(parents=True, exist_ok=True)
  per = -(-int(pairs * SPARE) // workers)
  with concurrent.futures.ProcessPoolExecutor(workers) as pool:
    jobs = [pool.submit(_shard, tmp / f"train{i}", i, per, "train") for i in range(workers)]
    jobs += [pool.submit(_shard, tmp / name, 0, EVAL_PAIRS, name) for name in ("valid", "test")]
    for job in jobs:
      job.result()
  generated = time.perf_counter()
  full = out / "full"
  full.mkdir(exist_ok=True)
  joined = _join([tmp / f"train{i}" for i in range(workers)], full / "train", pairs)
  for name in ("valid", "test"):
    for lang in ("en", "fr"):
      shutil.copy(tmp / f"{name}.{lang}", full / f"{name}.{lang}")
  for n in prefixes:
    folder = out / f"first{n}"
    folder.mkdir(exist_ok=True)
    for lang in ("en", "fr"):
      _head(full / f"train.{lang}", folder / f"train.{lang}", n)
      for name in ("valid", "test"):
        shutil.copy(full / f"{name}.{lang}", folder / f"{name}.{lang}")
  shutil.rmtree(tmp)
  record = {
    **joined,
    "words_per_pair": round(joined["words"] / joined["pairs"], 2),
    "generator": {"vocab_size": VOCAB_SIZE, "min_len": MIN_LEN, "max_len": MAX_LEN},
    "eval_pairs": EVAL_PAIRS,
    "prefixes": list(prefixes),
    "workers": workers,
    "seconds": {
      "generate": round(generated - start, 1),
      "join": round(time.perf_counter() - generated, 1),
    },
  }
  (out / "corpus.json").write_text(json.dumps(record, indent=2) + "\n")
  return record


def main(argv: Sequence[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--out", required=True, type=Path)
  p.add_argument("--pairs", type=int, default=10_000_000)
  p.add_argument("--prefixes", default="29000,1000000", help="comma-separated pair counts")
  p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
  args = p.parse_args(argv)
  prefixes = [int(n) for n in args.prefixes.split(",") if n]
  print(json.dumps(make(args.out, args.pairs, prefixes, args.workers), indent=2))


if __name__ == "__main__":
  main()

"""Word alignments read from attribution, beside those read from attention: for each (source,
target) pair, every target word linked to the source word whose embedding moves its probability
most (`seq2seq.decoding.attribution`: Ding et al. 2019's word saliency, optionally smoothed).

    python -m seq2seq.attribute --workdir=runs/a --sources=test.en --targets=test.fr \
        --out=test.saliency.align [--method=grad_x_input] [--samples=1] [--noise=0.15] \
        [--gold=test.align]

Writes one Pharaoh line ("i-j": source word i, target word j) per pair, an empty line for a
pair that cannot be scored. With `--gold` (Pharaoh lines of sure links), prints the corpus AER
of the attribution's links and of the attention's (each target word to its most attended
source word, as `--alignments` writes them), on the same pairs. From Python:
`translate.saliency_links(seq2seq.load(run), sources, targets, method=...)`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from seq2seq.data import metrics
from seq2seq.decoding import attribution


def read_links(line: str) -> set[metrics.Link]:
  """The links of a Pharaoh line ("i-j ..."), as (source, target) pairs."""
  return {(int(i), int(j)) for i, j in (pair.split("-") for pair in line.split())}


def attention_links(t, sources: Sequence[str], targets: Sequence[str]) -> list[str | None]:
  """Each pair's Pharaoh line read from the model's teacher-forced attention (argmax)."""
  from seq2seq import translate

  out: list[str | None] = []
  for source, scored in zip(sources, translate.score_lines(t, sources, targets), strict=True):
    if scored.error is not None:
      out.append(None)
      continue
    out.append(translate.pharaoh_line(t, source, scored.attention, scored.tokens[:-1], 0.0))
  return out


def compare(gold: Sequence[str], lines: dict[str, Sequence[str | None]]) -> dict[str, float | int]:
  """Corpus AER of each way's lines against `gold`, over the pairs every way linked."""
  kept = [i for i in range(len(gold)) if all(way[i] is not None for way in lines.values())]
  sure = [read_links(gold[i]) for i in kept]
  aer = {
    f"aer_{name}": metrics.alignment_error_rate([read_links(way[i]) for i in kept], sure)
    for name, way in lines.items()
  }
  return {**aer, "pairs": len(kept)}


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m seq2seq.attribute", description=__doc__)
  parser.add_argument("--workdir", required=True, help="the trained run")
  parser.add_argument("--sources", required=True, help="source sentences, one per line")
  parser.add_argument("--targets", required=True, help="their translations, one per line")
  parser.add_argument("--out", required=True, help="the Pharaoh file to write")
  parser.add_argument("--method", default="grad_x_input", choices=attribution.METHODS)
  parser.add_argument(
    "--samples",
    type=int,
    default=1,
    help="SmoothGrad copies (1: none), or integrated gradients' points along the path",
  )
  parser.add_argument("--noise", type=float, default=0.15, help="SmoothGrad's noise, relative")
  parser.add_argument("--gold", default=None, help="gold Pharaoh lines: print both AERs")
  args = parser.parse_args(argv)
  import seq2seq
  from seq2seq import translate

  try:
    sources = Path(args.sources).read_text(encoding="utf-8").splitlines()
    targets = Path(args.targets).read_text(encoding="utf-8").splitlines()
    gold = Path(args.gold).read_text(encoding="utf-8").splitlines() if args.gold else None
    if args.samples < 1:
      raise ValueError(f"--samples must be at least 1, got {args.samples}")
    if gold is not None and len(gold) != len(sources):
      raise ValueError(f"{len(gold)} gold lines for {len(sources)} sources")
    t = seq2seq.load(args.workdir)
    settings = {"method": args.method, "samples": args.samples, "noise": args.noise}
    lines = translate.saliency_links(t, sources, targets, **settings)
  except (ValueError, OSError) as e:
    raise SystemExit(f"error: {e}") from None
  Path(args.out).write_text("".join(f"{line or ''}\n" for line in lines), encoding="utf-8")
  if gold is not None:
    ways = {"saliency": lines, "attention": attention_links(t, sources, targets)}
    print(json.dumps(compare(gold, ways)))


if __name__ == "__main__":
  main()

"""Learns a trained run's lexical table (IBM Model 1, `seq2seq.data.lexicon`) from its training
split:

    python -m seq2seq.build_lexicon --workdir=runs/a [--top=100] [--iterations=5] [--out=FILE]

reads the run's own config.json, vocabularies and corpus and writes WORKDIR/lexicon.npz (or
FILE), the table `decode.shortlist` and `model.addons=lexicon(table=FILE)` take.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from seq2seq import checkpoints, settings
from seq2seq import sharding as rt
from seq2seq.data import lexicon


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m seq2seq.build_lexicon", description=__doc__)
  parser.add_argument("--workdir", required=True, help="a trained run (its vocab/ and corpus)")
  parser.add_argument("--top", type=int, default=100, help="translations kept per source word")
  parser.add_argument("--iterations", type=int, default=5, help="EM passes")
  parser.add_argument(
    "--out", default=None, help=f"the table's file (default WORKDIR/{lexicon.FILE})"
  )
  args = parser.parse_args(argv)
  workdir = Path(args.workdir)
  data = rt.load_data(settings.validate(checkpoints.load_config(workdir)), workdir)
  table = lexicon.build(data, top=args.top, iterations=args.iterations)
  out = Path(args.out) if args.out else workdir / lexicon.FILE
  table.save(out)
  print(f"{out}: {int((table.ids >= 0).sum())} entries, top {args.top} per word")


if __name__ == "__main__":
  main()

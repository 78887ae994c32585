"""Word alignments of a corpus's training split, learned by eflomal, for guided alignment
(the supervision loss term) on text that has no gold links:

    python -m seq2seq.build_alignments --workdir=runs/a [--symmetrize=grow-diag-final-and]
        [--out=FILE]

reads the training split of the run in WORKDIR (its config.json, vocabularies and corpus: a
run of the same data settings trained for 0 updates makes them; docs/howto/guided_alignment.md
has the recipe), splits each side
into the tokens of the run's tokenizer, aligns both directions with eflomal (Östling and
Tiedemann 2016; an optional dependency, GPLv3, installed on its own with
`pip install eflomal==2.0.0`), joins them (`SYMMETRIZE`) and writes WORKDIR/train.align (or
FILE): one Pharaoh line `i-j ...` (source token i, target token j, 0-based) per line of the
training files, empty for lines training skips.
Train with it by `--config.data.local.align=FILE` and a supervision term
(`--config.train.loss_terms="supervision(weight=...)"`); `input_pipeline.load_alignments`
reads it.
"""

from __future__ import annotations

import argparse
import io
import tempfile
from collections.abc import Sequence
from pathlib import Path

from seq2seq import checkpoints, settings
from seq2seq import sharding as rt
from seq2seq.common import files
from seq2seq.data import input_pipeline, metrics

Links = set[metrics.Link]
SYMMETRIZE = ("grow-diag-final-and", "intersect", "union", "forward", "reverse")
_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def grow_diag_final_and(forward: Links, reverse: Links) -> Links:
  """Koehn et al. (2005)'s symmetrisation: start from the links both directions agree on, add
  neighbouring (also diagonal) links of either direction that align a word not yet aligned,
  until none is left, then any link of either direction whose two words are both unaligned."""
  union, links = forward | reverse, forward & reverse
  src_aligned, tgt_aligned = {i for i, _ in links}, {j for _, j in links}

  def add(i: int, j: int) -> None:
    links.add((i, j))
    src_aligned.add(i)
    tgt_aligned.add(j)

  grown = True
  while grown:
    grown = False
    for i, j in sorted(links):
      for di, dj in _NEIGHBOURS:
        p = (i + di, j + dj)
        if p in union and p not in links:
          if p[0] not in src_aligned or p[1] not in tgt_aligned:
            add(*p)
            grown = True
  for direction in (forward, reverse):
    for i, j in sorted(direction - links):
      if i not in src_aligned and j not in tgt_aligned:
        add(i, j)
  return links


def symmetrized(forward: Links, reverse: Links, how: str) -> Links:
  """The links of `how` (`SYMMETRIZE`) from the two directions' links."""
  if how == "grow-diag-final-and":
    return grow_diag_final_and(forward, reverse)
  joined = {
    "intersect": forward & reverse,
    "union": forward | reverse,
    "forward": forward,
    "reverse": reverse,
  }
  if how not in joined:
    raise ValueError(f"--symmetrize must be one of {', '.join(SYMMETRIZE)}, got {how!r}")
  return set(joined[how])


def _read_links(path: Path) -> list[Links]:
  return [
    {tuple(int(x) for x in pair.split("-")) for pair in line.split()}
    for line in path.read_text().splitlines()
  ]


def align(
  src: Sequence[Sequence[str]], tgt: Sequence[Sequence[str]], how: str = "grow-diag-final-and"
) -> list[Links]:
  """The links (source position, target position) of every pair of token lists, by eflomal in
  both directions, joined by `how`. ImportError in one line without eflomal."""
  try:
    import eflomal
  except ImportError:
    raise ImportError(
      "seq2seq.build_alignments needs eflomal, an optional dependency (GPLv3): "
      "pip install eflomal==2.0.0"
    ) from None
  if len(src) != len(tgt) or not src:
    raise ValueError(f"{len(src)} source and {len(tgt)} target sentences: give pairs")
  text = lambda sentences: io.StringIO("".join(" ".join(s) + "\n" for s in sentences))
  with tempfile.TemporaryDirectory() as tmp:
    fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
    eflomal.Aligner().align(
      text(src), text(tgt), links_filename_fwd=str(fwd), links_filename_rev=str(rev)
    )
    forward, reverse = _read_links(fwd), _read_links(rev)
  return [symmetrized(f, r, how) for f, r in zip(forward, reverse, strict=True)]


def pharaoh_lines(data: input_pipeline.Data, how: str) -> list[str]:
  """One Pharaoh line per line of the training files (empty where training skips the line):
  the training split's pairs, split into the tokens of the run's tokenizers and aligned."""
  examples = list(data.corpus.read("train"))
  src = [data.src_tokenizer.tokenize(ex.src) for ex in examples]
  tgt = [data.tgt_tokenizer.tokenize(ex.tgt) for ex in examples]
  links = align(src, tgt, how)
  lines = [""] * (max(ex.line for ex in examples) + 1)
  for ex, found in zip(examples, links, strict=True):
    lines[ex.line] = " ".join(f"{i}-{j}" for i, j in sorted(found))
  return lines


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m seq2seq.build_alignments", description=__doc__)
  parser.add_argument("--workdir", required=True, help="a run (its config.json, vocab/, corpus)")
  parser.add_argument("--symmetrize", default="grow-diag-final-and", choices=SYMMETRIZE)
  parser.add_argument("--out", default=None, help="the links' file (default WORKDIR/train.align)")
  args = parser.parse_args(argv)
  workdir = Path(args.workdir)
  run = settings.validate(checkpoints.load_config(workdir))
  if run.data.sources > 1:
    parser.error("a two-source run: align each source with a single-source run of its own")
  lines = pharaoh_lines(rt.load_data(run, workdir), args.symmetrize)
  out = Path(args.out) if args.out else workdir / "train.align"
  files.write_atomic(out, "".join(line + "\n" for line in lines))
  print(f"{out}: {sum(bool(line) for line in lines)} aligned pairs ({args.symmetrize})")


if __name__ == "__main__":
  main()

"""Where attention that misses a word's source twin lands: on the word after it, before it, or
far away.

    python -m experiments.attention_offsets STUDY_DIR [STUDY_DIR ...] [--split test]
        [--heads] [--json OUT.json] [--png OUT.png]

Twin peaks (`metrics.identical_word_offsets`) asks whether an output word spelled like a word
of its source (a name, a number, a cognate) was produced with the attention peaking on that
word. This script asks where it peaks instead, counting from the twin: for every finished run
under each STUDY_DIR/runs/POINT/seed_S it reads the decoded attention that evaluation stored in
eval/SPLIT/sentences.jsonl and reports, per point (mean and sd over seeds), the share of twin
pairs whose peak is 0, +-1, +-2 or further words from the twin. A consistent shift (Koehn and
Knowles 2017 found attention often one word off) is attention that still follows the source in
order, one step early or late; a spread is attention that has lost it. The stored maps hold each
weight to within 1/508 (`explorer.encode_map`), so a near tie can fall the other way and a share
can differ from results.json's by a pair or two. Runs with two sources (a row holds one
distribution per source) are left out. With --heads, a multi-head run's heads (stored beside
their mean, the attention that alignment figures and UNK replacement read) are counted one by
one too: whether one head finds the twin where the mean misses it. Heads are interchangeable
(seed 0's second head need not do the work of seed 1's), so within each run they are ranked by
their share on the twin and the points are "POINT (head rank r)", each run recording which head
holds the rank. Each point also reports the share of output steps (every output word and the end
of sentence) whose attention peaks on the source's </s>, whose annotation's forward half has
read the whole sentence. Reads evaluation output only; selects on nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from experiments.lib import plots, stats
from seq2seq import explorer
from seq2seq.data import metrics
from seq2seq.data import tokenizer as tok

BINS = ("<=-3", "-2", "-1", "+0", "+1", "+2", ">=+3")  # Offsets of the peak from the twin.


def bin_name(offset: int) -> str:
  return BINS[min(max(offset, -3), 3) + 3]


def sentence_offsets(record: dict, heads: bool = False) -> dict[str, dict] | None:
  """Where one sentences.jsonl record's attention peaks, by map name: "attention" (the decoded
  attention; multi-head: the mean of the heads) and, with `heads`, each stored head's ("head
  1", ...). Each gives `offsets` (of its twin pairs, words grouped from pieces first:
  `metrics.pieces_to_words`), `steps` (output steps, the end of sentence included) and `end`
  (those whose peak is the source's </s>). None when the record has no attention or two
  sources."""
  attention = record.get("attention")
  if attention is None:
    return None
  src, out = attention["source"], attention["output"]
  if src.count(tok.EOS) != 1:
    return None  # Two sources.
  end = src.index(tok.EOS)
  src, out = src[:end], out[: out.index(tok.EOS) if tok.EOS in out else len(out)]
  src_spans, out_spans = spans(src), spans(out)
  src_words, out_words = metrics.span_words(src, src_spans), metrics.span_words(out, out_spans)
  found = {}
  for stored in attention["maps"] if heads else attention["maps"][:1]:
    alpha = explorer.decode_map(stored)
    words = metrics.pieces_to_words(alpha, out_spans, src_spans)
    found[stored.get("name", "attention")] = {
      "offsets": metrics.identical_word_offsets(words, out_words, src_words),
      "steps": len(alpha),
      "end": int((alpha.argmax(axis=1) == end).sum()),
    }
  return found


def spans(tokens: Sequence[str]) -> list[tuple[int, int]]:
  """Word ranges: SentencePiece pieces grouped at "▁", otherwise one token a word."""
  if any(t.startswith(metrics.WORD_START) for t in tokens):
    return metrics.word_spans(tokens)
  return [(i, i + 1) for i in range(len(tokens))]


def run_shares(path: Path, heads: bool = False) -> dict[str, dict] | None:
  """One run's pair count, the share of its twin pairs in each of BINS and the share of its
  output steps whose attention peaks on the source's </s>, by map name (`sentence_offsets`);
  heads as "head rank r", the first the most often on the twin, naming the head they rank."""
  totals: dict[str, dict] = {}
  with path.open(encoding="utf-8") as f:
    for line in f:
      found = sentence_offsets(json.loads(line), heads)
      if found is None:
        return None
      for name, sentence in found.items():
        total = totals.setdefault(name, {"offsets": [], "steps": 0, "end": 0})
        total["offsets"] += sentence["offsets"]
        total["steps"] += sentence["steps"]
        total["end"] += sentence["end"]
  if not any(total["offsets"] for total in totals.values()):
    return None
  shares = {}
  for name, total in totals.items():
    bins = [bin_name(o) for o in total["offsets"]]
    shares[name] = {
      "pairs": len(bins),
      "shares": {b: bins.count(b) / len(bins) for b in BINS},
      "end_peaks": total["end"] / total["steps"],
    }
  heads_found = sorted(
    (name for name in shares if name != "attention"), key=lambda n: -shares[n]["shares"]["+0"]
  )
  for rank, name in enumerate(heads_found, start=1):
    shares[f"head rank {rank}"] = {"head": name, **shares.pop(name)}
  return shares


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("studies", type=Path, nargs="+", help="studies' --out folders (runs/POINT/seed_S)")
  p.add_argument("--split", default="test")
  p.add_argument("--heads", action="store_true", help="also each head of multi-head runs")
  p.add_argument(
    "--json", type=Path, default=Path("experiments/results/multi30k_attention_offsets/offsets.json")
  )
  p.add_argument("--png", type=Path, default=None, help="default: the JSON's path, .png")
  args = p.parse_args(argv)
  start = time.time()
  pattern = f"runs/*/seed_*/eval/{args.split}/{explorer.SENTENCES}"
  found = [path for study in args.studies for path in sorted(study.glob(pattern))]
  # path: STUDY/runs/POINT/seed_S/eval/SPLIT/sentences.jsonl.
  real = {path.resolve() for path in found if not path.parents[3].is_symlink()}
  runs: dict[str, dict[str, dict]] = {}
  for path in found:
    study, point, run = path.parents[5], path.parents[3], path.parents[2]
    if not (path.parent / "results.json").is_file():
      continue  # Still evaluating.
    if point.is_symlink() and path.resolve() in real:
      continue  # A point shared with another study (a baseline's symlink): counted there.
    shares = run_shares(path, args.heads)
    if shares is None:
      print(f"{run}: skipped (no attention, or two sources)")
      continue
    for name, run_record in shares.items():
      key = f"{study.name}/{point.name}" + ("" if name == "attention" else f" ({name})")
      runs.setdefault(key, {})[run.name] = run_record
  points = {
    point: {
      "seeds": len(seeds),
      **{b: stats.mean_std([s["shares"][b] for s in seeds.values()]) for b in BINS},
      "end_peaks": stats.mean_std([s["end_peaks"] for s in seeds.values()]),
    }
    for point, seeds in runs.items()
  }
  record = {
    "command": "python -m experiments.attention_offsets " + " ".join(argv or sys.argv[1:]),
    "split": args.split,
    "bins": list(BINS),
    "points": points,
    "runs": runs,
    "minutes": (time.time() - start) / 60,
  }
  args.json.parent.mkdir(parents=True, exist_ok=True)
  args.json.write_text(json.dumps(record, indent=2) + "\n")
  plots.grouped_bars(
    {point: {b: row[b] for b in BINS} for point, row in points.items()},
    args.png or args.json.with_suffix(".png"),
    f"Where the attention peaks, counted from the output word's source twin ({args.split})",
    xlabel="peak offset from the twin (source words)",
    ylabel="share of twin pairs",
  )
  for point, row in points.items():
    cells = "  ".join(f"{b} {row[b][0]:.3f}±{row[b][1]:.3f}" for b in BINS)
    end = row["end_peaks"]
    print(f"{point} ({row['seeds']} seeds): {cells}  on </s> {end[0]:.3f}±{end[1]:.3f}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())

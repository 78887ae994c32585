"""Alignments read from attribution against those read from attention, by AER on gold links.

    python main.py --config=configs/demo.py --workdir=runs/demo          # 1,200 updates
    nice python -m experiments.attribution_aer --run runs/demo \
        --out experiments/results/attribution_aer [--split test] [--smooth-samples 8]

On the first `--sentences` pairs of the run's `--split` (the embedded corpus has gold links for
every pair), each target word of the reference is linked to one source word by each way:
`attention` (the teacher-forced attention's argmax, as `--alignments` writes links),
`grad_x_input` and `grad_norm` (Ding et al. 2019's word saliency and the gradient's norm,
`seq2seq.decoding.attribution`), and `smoothgrad` (word saliency averaged over
`--smooth-samples` copies with noise 0.15, SmoothGrad). Nothing is tuned: the settings are the
defaults. Reported per way: the corpus AER against the gold links and the seconds it took.
Writes OUT/attribution_aer.json and its page.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib import reports
from experiments.lib.pages.attribution_aer import page


def examples_of(t: Any, split: str, count: int) -> list[Any]:
  """The first `count` pairs of the run's `split`, from its prepared corpus."""
  from seq2seq import checkpoints
  from seq2seq.data import builders, input_pipeline

  d = input_pipeline.DataSettings.from_config(checkpoints.load_config(t.workdir))
  corpus = builders.prepare_corpus(d, input_pipeline.data_dir(d, t.workdir))
  return list(corpus.read(split))[:count]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--run", required=True, help="a trained run on a corpus with gold links")
  p.add_argument("--out", required=True, help="the study folder to write")
  p.add_argument("--split", default="test")
  p.add_argument("--sentences", type=int, default=1000)
  p.add_argument("--smooth-samples", type=int, default=8)
  args = p.parse_args(argv)

  import numpy as np

  import seq2seq
  from seq2seq import attribute, translate

  load_start = reports.load_average()
  t = seq2seq.load(args.run)
  examples = [e for e in examples_of(t, args.split, args.sentences) if e.align is not None]
  if not examples:
    p.error(f"the run's {args.split} split has no gold links")
  sources, targets = [e.src for e in examples], [e.tgt for e in examples]
  ways = {
    "attention": lambda: attribute.attention_links(t, sources, targets),
    "grad_x_input": lambda: translate.saliency_links(t, sources, targets),
    "grad_norm": lambda: translate.saliency_links(t, sources, targets, method="grad_norm"),
    "smoothgrad": lambda: translate.saliency_links(
      t, sources, targets, samples=args.smooth_samples
    ),
  }
  lines, seconds = {}, {}
  for name, way in ways.items():
    start = time.perf_counter()
    lines[name] = way()
    seconds[name] = time.perf_counter() - start
    print(f"{name}: {seconds[name]:.0f} s", flush=True)
  figures = attribute.compare([e.align for e in examples], lines)
  gold_links = [attribute.read_links(e.align) for e in examples]
  result = {
    "command": " ".join(["python -m experiments.attribution_aer", *(argv or sys.argv[1:])]),
    "run_step": int(np.asarray(t.state.step)),
    "split": args.split,
    "pairs": figures["pairs"],
    "gold_links_per_pair": float(np.mean([len(g) for g in gold_links])),
    "smooth_samples": args.smooth_samples,
    "ways": [
      {"way": name, "aer": figures[f"aer_{name}"], "seconds": seconds[name]} for name in ways
    ],
    "cpu": reports.cpu_info(),
    "versions": reports.versions(),
    "load_average": {"start": load_start, "end": reports.load_average()},
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
  }
  reports.publish(Path(args.out) / "attribution_aer.json", result, page(result))
  return result


if __name__ == "__main__":
  main()

"""Minimum Bayes risk against beam search on a trained run: beam 5, MBR (chrF utility) over the
beam's 10-best and over 16 and 32 samples, each against beam 5 with a paired bootstrap.

    python -m experiments.mbr_study --run RUN --out experiments/results/multi30k_mbr \
        [--config configs/multi30k.py] [--samples 16,32] [--nbest 10] [--utility chrf]

Every row is one `main.py --mode=eval` of the run's checkpoint (as an ensemble of that one run,
`decode.ensemble`, so the evaluation goes to OUT/ROW and the run is not touched) with the row's
decoding settings on `valid` and `test`; rows that are evaluated already are kept, so a rerun
resumes. Each row gives BLEU and chrF of both splits, the paired bootstrap of its test BLEU
against beam 5 (`experiments.lib.stats.paired_bootstrap`, 1000 resamples), and its wall
minutes and sentences per second (both splits and the No-UNK pass decoded, one row after
another on one machine). Samples are unbiased (temperature 1, nothing truncated) with seed 0.
Selection is on `valid`; nothing is tuned on `test`.

Writes OUT/mbr.json (every figure, command, the CPU and its load) and OUT/mbr.md.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.decoding_study import SPLITS, evaluate, references
from experiments.lib import reports, stats

RESAMPLES = 1000


def rows_to_run(samples: Sequence[int], nbest: int, utility: str) -> dict[str, dict[str, str]]:
  """{row name: its decode overrides}; the first is the baseline."""
  choose = f"mbr(utility={utility})"
  rows = {
    "beam 5": {"decode.beam_size": "5"},
    f"MBR {utility}, beam {nbest} n-best": {"decode.beam_size": str(nbest), "decode.mbr": choose},
  }
  for n in samples:
    rows[f"MBR {utility}, {n} samples"] = {
      "decode.sampling": f"sample(n={n})",
      "decode.mbr": choose,
    }
  return rows


def _figures(workdir: Path) -> dict[str, Any]:
  from experiments.lib import runs as runs_lib

  found = runs_lib.read_results(workdir)
  return {split: {k: found[split].get(k) for k in ("bleu", "chrf")} for split in SPLITS}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--run", required=True, help="a trained run with a checkpoint")
  p.add_argument("--config", default="configs/multi30k.py", help="the run's config file")
  p.add_argument("--out", required=True)
  p.add_argument("--samples", default="16,32", help="sample counts, comma-separated")
  p.add_argument("--nbest", type=int, default=10, help="the beam whose n-best MBR reads")
  p.add_argument("--utility", default="chrf", choices=["chrf", "bleu"])
  args = p.parse_args(argv)
  from experiments.lib import runs as runs_lib

  run, out = Path(args.run).resolve(), Path(args.out).resolve()
  out.mkdir(parents=True, exist_ok=True)
  saved = json.loads((run / "config.json").read_text())
  shared = {"data.cache_dir": saved["data"]["cache_dir"], "decode.ensemble": str(run)}
  refs = references(run)
  samples = [int(n) for n in args.samples.split(",") if n.strip()]
  load_start, rows = reports.load_average(), {}
  sentences = sum(len(refs[s]) for s in SPLITS)
  for i, (name, overrides) in enumerate(rows_to_run(samples, args.nbest, args.utility).items()):
    workdir = out / f"row{i}"
    done = all((workdir / "eval" / s / "results.json").exists() for s in SPLITS)
    started = time.perf_counter()
    command = evaluate(args.config, workdir, {**shared, **overrides}, reuse=True)
    row = {"command": command, "workdir": workdir.name, **_figures(workdir)}
    if not done:
      row["eval_minutes"] = (time.perf_counter() - started) / 60
      row["sentences_per_second"] = sentences / (row["eval_minutes"] * 60)
    rows[name] = row
  baseline = next(iter(rows))
  base_hyps = runs_lib.workdir_hypotheses(out / rows[baseline]["workdir"], "test")
  for name, row in rows.items():
    if name != baseline:
      hyps = runs_lib.workdir_hypotheses(out / row["workdir"], "test")
      row["test_vs_beam5"] = stats.paired_bootstrap([base_hyps], [hyps], refs["test"], RESAMPLES)
  kept = out / "mbr.json"
  if kept.exists():  # Timings of rows evaluated in an earlier pass stay as they were measured.
    for name, old in json.loads(kept.read_text())["rows"].items():
      for key in ("eval_minutes", "sentences_per_second"):
        if name in rows and key in old and key not in rows[name]:
          rows[name][key] = old[key]
  record = {
    "run": str(run),
    "cpu": reports.cpu_info(),
    "load_average": {"start": load_start, "end": reports.load_average()},
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    "rows": rows,
  }
  reports.publish(kept, record, markdown(record))
  return record


def markdown(record: dict[str, Any]) -> str:
  fmt = reports.fmt
  lines = [
    "# Minimum Bayes risk against beam search",
    "",
    f"{reports.made_by('mbr_study', record)}. BLEU and chrF: sacrebleu on detokenised "
    "output; p: paired bootstrap of test BLEU against beam 5.",
    "",
    "| system | valid BLEU | valid chrF | test BLEU | test chrF | p vs beam 5 | sentences/s |",
    "|---|---:|---:|---:|---:|---:|---:|",
  ]
  for name, row in record["rows"].items():
    v, t = row["valid"], row["test"]
    p = row.get("test_vs_beam5", {}).get("p_value")
    speed = row.get("sentences_per_second")
    lines.append(
      f"| {name} | {fmt(v['bleu'])} | {fmt(v['chrf'])} | {fmt(t['bleu'])} | {fmt(t['chrf'])} | "
      f"{'-' if p is None else fmt(p, 3)} | {'-' if speed is None else fmt(speed)} |"
    )
  lines += ["", "Commands:", ""]
  lines += [f"    {row['command']}" for row in record["rows"].values()]
  return "\n".join(lines) + "\n"


if __name__ == "__main__":
  main()

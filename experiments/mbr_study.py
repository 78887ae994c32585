"""Minimum Bayes risk and reranking against beam search on a trained run: beam 5, MBR (chrF
utility) over the beam's 10-best and over 16 and 32 samples, and (with `--reverse`) the 10-best
reranked, each against beam 5 with a paired bootstrap and approximate randomisation.

    python -m experiments.mbr_study --run RUN --out experiments/results/multi30k_mbr \
        [--config configs/multi30k.py] [--samples 16,32] [--nbest 10] [--utility chrf] \
        [--reverse REVERSE_RUN]

Every row is one `main.py --mode=eval` of the run's checkpoint (as an ensemble of that one run,
`decode.ensemble`, so the evaluation goes to OUT/ROW and the run is not touched) with the row's
decoding settings on `valid` and `test`; rows that are evaluated already are kept, so a rerun
resumes. Each row gives BLEU and chrF of both splits, the paired bootstrap of its test BLEU
against beam 5 (`experiments.lib.stats.paired_bootstrap`, 1000 resamples, with the paired
approximate randomisation's p beside it: `stats.paired_ar`, 10,000 trials), its wall minutes
(both splits and the No-UNK pass decoded, start-up and compilation included, one row after
another on one machine) and its decoding speed: the test split's sentences per second decoded
warm in this process (`experiments.lib.decoding.decoding_speed`), greedy's beside them. Samples
are unbiased (temperature 1, nothing truncated) with seed 0.
Selection is on `valid`; nothing is tuned on `test`.

Reranking (`--reverse`, a run trained from the target language into the source language): the
beam's n-best lists of both splits (`main.py --mode=translate --nbest=N`, in OUT/rerank), then
`python -m seq2seq.rerank` with weights tuned for BLEU on `valid` and applied to `test`, once on
the list's own features (score, length-normalised score, length in words) and once with the
reverse model's log p(source | candidate) added. Their valid figures are those the weights were
tuned on. A rerank row's minutes are its commands' (the n-best translation counted in both rows,
as each would cost alone; the No-UNK pass is not made).

Writes OUT/mbr.json (every figure, command, the CPU and its load) and OUT/mbr.md.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib import configs, reports, stats
from experiments.lib.configs import run_command
from experiments.lib.decoding import SPLITS, decoding_speed, evaluate, pairs, references
from experiments.lib.pages.mbr_study import markdown
from seq2seq.common import files

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
  rows["greedy"] = {"decode.beam_size": "1"}  # Last: the rows' folders are numbered in order.
  return rows


def rerank_rows(
  run: Path, reverse: Path, config_file: str, out: Path, nbest: int, cache_dir: str
) -> dict[str, dict[str, Any]]:
  """The reranking rows (module docstring): {name: commands, figures, minutes, and the texts
  chosen for each split under "texts"}; what exists in OUT/rerank already is not made again."""
  from seq2seq.data import metrics

  folder = out / "rerank"
  folder.mkdir(parents=True, exist_ok=True)
  refs, translating, minutes, fresh = references(run), [], 0.0, True
  for split in SPLITS:
    src, nbest_file = folder / f"{split}.src", folder / f"{split}.nbest"
    if not src.exists():
      # The references first: the source file's presence says both are whole.
      files.write_atomic(folder / f"{split}.ref", "".join(r + "\n" for r in refs[split]))
      files.write_atomic(src, "".join(ex.src + "\n" for ex in pairs(run, split)))
    command = ["python", "main.py", f"--config={config_file}", f"--workdir={run}"]
    command += ["--mode=translate", f"--input={src}", f"--output={nbest_file}", f"--nbest={nbest}"]
    command += [f"--config.decode.beam_size={nbest}", f"--config.data.cache_dir={cache_dir}"]
    started = time.perf_counter()
    fresh &= not nbest_file.exists()
    translating.append(" ".join(command) if nbest_file.exists() else run_command(command))
    minutes += (time.perf_counter() - started) / 60
  rows = {}
  for name, tag, extra in (
    (f"rerank {nbest}-best: score, length", "plain", []),
    (f"rerank {nbest}-best: + reverse model", "reverse", [f"--reverse={reverse}"]),
  ):
    weights, commands = folder / f"weights_{tag}.json", list(translating)
    started, made = time.perf_counter(), fresh and not weights.exists()
    for split in SPLITS:
      chosen = folder / f"{split}.{tag}.txt"
      command = ["python", "-m", "seq2seq.rerank", f"--nbest={folder / f'{split}.nbest'}", *extra]
      command += [f"--sources={folder / f'{split}.src'}"] * bool(extra)
      if split == "valid":
        tune = [*command, f"--references={folder / 'valid.ref'}", f"--tune={weights}"]
        commands.append(" ".join(tune) if weights.exists() else run_command(tune))
      command += [f"--weights={weights}", f"--output={chosen}"]
      commands.append(" ".join(command) if chosen.exists() else run_command(command))
    row: dict[str, Any] = {"command": " && ".join(commands), "texts": {}}
    row["weights"] = json.loads(weights.read_text())["weights"]
    for split in SPLITS:
      texts = (folder / f"{split}.{tag}.txt").read_text(encoding="utf-8").splitlines()
      row["texts"][split] = texts
      row[split] = {
        "bleu": metrics.bleu(texts, refs[split])[0],
        "chrf": metrics.chrf(texts, refs[split]),
      }
    if made:  # Timed only where every command of the row ran in this pass.
      row["eval_minutes"] = minutes + (time.perf_counter() - started) / 60
    rows[name] = row
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
  p.add_argument("--reverse", help="a run of the other direction: also the reranking rows")
  p.add_argument(
    "--speed-rounds", type=int, default=3, help="timed passes of the warm decoding (median kept)"
  )
  args = p.parse_args(argv)
  from experiments.lib import runs as runs_lib

  run, out = Path(args.run).resolve(), Path(args.out).resolve()
  out.mkdir(parents=True, exist_ok=True)
  saved = json.loads((run / "config.json").read_text())
  shared = {"data.cache_dir": saved["data"]["cache_dir"], "decode.ensemble": str(run)}
  refs = references(run)
  samples = [int(n) for n in args.samples.split(",") if n.strip()]
  load_start, rows = reports.load_average(), {}
  decodings = rows_to_run(samples, args.nbest, args.utility)
  for i, (name, overrides) in enumerate(decodings.items()):
    workdir = out / f"row{i}"
    done = all((workdir / "eval" / s / "results.json").exists() for s in SPLITS)
    started = time.perf_counter()
    command = evaluate(args.config, workdir, {**shared, **overrides}, reuse=True)
    row = {"command": command, "workdir": workdir.name, **_figures(workdir)}
    if not done:
      row["eval_minutes"] = (time.perf_counter() - started) / 60
    rows[name] = row
  texts = {
    name: runs_lib.workdir_hypotheses(out / row["workdir"], "test") for name, row in rows.items()
  }
  if args.reverse:
    reranked = rerank_rows(
      run, Path(args.reverse).resolve(), args.config, out, args.nbest, shared["data.cache_dir"]
    )
    for name, row in reranked.items():
      texts[name] = row.pop("texts")["test"]
      rows[name] = row
  baseline = next(iter(rows))
  for name, row in rows.items():
    if name != baseline:
      pair = [texts[baseline]], [texts[name]], refs["test"]
      row["test_vs_beam5"] = {**stats.paired_bootstrap(*pair, RESAMPLES), **stats.paired_ar(*pair)}
  kept = out / "mbr.json"
  earlier = json.loads(kept.read_text()) if kept.exists() else {"rows": {}}
  if not all("test_sentences_per_s" in earlier["rows"].get(name, {}) for name in decodings):
    config = configs.load_config(args.config)
    fields = lambda o: {k.removeprefix("decode."): v for k, v in configs.typed(config, o).items()}
    speeds = decoding_speed(
      run, {name: fields(o) for name, o in decodings.items()}, args.speed_rounds
    )
    for name, speed in speeds.items():
      rows[name]["test_sentences_per_s"] = speed
  # Timings of rows measured in an earlier pass stay as they were measured.
  for name, old in earlier["rows"].items():
    for key in ("eval_minutes", "test_sentences_per_s"):
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


if __name__ == "__main__":
  main()

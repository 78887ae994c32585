"""Decoding-time toolkit measured on trained runs: an ensemble of seeds against each seed alone,
shortlist decoding against full decoding, and checkpoint averaging against the last checkpoint.

    python -m experiments.decoding_study \
        --runs experiments/results/multi30k_scores/runs/score=additive/seed_{0,1,2} \
        --out experiments/results/multi30k_decoding [--average 4]

Every figure comes from `main.py --mode=eval` (the runs' own decoding settings: beam size,
length normalisation, UNK replacement), on `valid` and `test`:

* each run alone: its own final evaluation (`RUN/eval/SPLIT/results.json`, written when it
  finished training);
* the ensemble of all runs (`decode.ensemble`, the mean of the members' probabilities), in
  OUT/ensemble;
* the first run decoded over lexical shortlists (`decode.shortlist`: the table learned by
  `python -m seq2seq.build_lexicon` from its training split, with the default 1,000 frequent
  words and 10 translations per source word), as an ensemble of that one run (equal to the run
  itself, `tests/decoding/test_ensemble.py`): one shortlist per batch in OUT/shortlist, each
  sentence's own (`decode.shortlist_scope=sentence`) in OUT/shortlist_sentence, and, to time them
  against, the full vocabulary in OUT/full. The three evaluations run one after another and each row
  gives its command's wall minutes (both splits, No-UNK pass included);
* with `--average K`, each run's last checkpoint alone (`python -m seq2seq.average --last 1`, the
  identity) and the mean of its last K checkpoints (`--last K`), in OUT/average/last1_seed_I and
  OUT/average/lastK_seed_I. A run's own row is its best checkpoint by validation BLEU, often an
  earlier one, so the averages are compared with the last checkpoint they end at.

With `--only shortlists` (one run given) the three seed-0 rows of full vocabulary and shortlists
are decoded alone and the other rows of OUT/decoding.json are kept as they were, with where and
when they were made; the new rows' machine and date go under "shortlists".

Writes OUT/decoding.json (every result, command, the CPU and load) and OUT/decoding.md. Nothing is
tuned here: the test rows are reported beside the validation rows they would be selected on.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib import reports
from experiments.lib.configs import run_command
from experiments.lib.decoding import SPLITS, decoding_speed, evaluate, references

KEYS = ("bleu", "chrf", "bleu_no_unk", "step")  # "step": the checkpoint decoded.


def results(workdir: Path, references: dict[str, list[str]], tgt_tok) -> dict[str, dict]:
  """{split: the figures of KEYS} from WORKDIR/eval/SPLIT/results.json (or the run's record),
  and the share of the references' out-of-vocabulary words the hypotheses produce
  (`metrics.oov_recall`, computed here from the hypotheses so runs evaluated before it existed
  get it too)."""
  from experiments.lib import runs as runs_lib
  from seq2seq.data import metrics

  out = {}
  found = runs_lib.read_results(workdir) or {}
  for split in SPLITS:
    r = found[split]
    hyps = runs_lib.workdir_hypotheses(workdir, split)
    recall, _ = metrics.oov_recall(hyps, references[split], tgt_tok)
    out[split] = {**{k: r.get(k) for k in KEYS}, "oov_recall": recall}
  return out


def timed_evaluate(config_file: str, workdir: Path, overrides: dict[str, str]) -> dict[str, Any]:
  """`evaluate` of `workdir`, its command and wall minutes, and its results."""
  started = time.perf_counter()
  command = evaluate(config_file, workdir, overrides)
  return {"command": command, "eval_minutes": (time.perf_counter() - started) / 60}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--runs", nargs="+", required=True, help="finished runs of one configuration")
  p.add_argument("--config", default="configs/multi30k.py", help="the runs' config file")
  p.add_argument("--out", required=True)
  p.add_argument("--average", type=int, default=0, help="also the mean of each run's last K")
  p.add_argument(
    "--only",
    choices=["shortlists"],
    help="decode the seed-0 rows of full vocabulary and shortlists alone, keeping every other row "
    "of OUT/decoding.json as it is (one --runs: the ensemble's members need not exist)",
  )
  p.add_argument(
    "--speed-rounds", type=int, default=3, help="timed passes of the warm decoding (median kept)"
  )
  args = p.parse_args(argv)
  out = Path(args.out).resolve()
  out.mkdir(parents=True, exist_ok=True)
  runs = [Path(r).resolve() for r in args.runs]
  saved = json.loads((runs[0] / "config.json").read_text())
  shared = {"data.cache_dir": saved["data"]["cache_dir"]}
  load_start = reports.load_average()
  started = time.perf_counter()

  from experiments.lib import runs as runs_lib
  from seq2seq.data import tokenizer

  refs, tgt_tok = references(runs[0]), tokenizer.load(runs[0] / "vocab" / "tgt")
  kept = out / "decoding.json"
  if args.only and kept.exists():
    rows: dict[str, Any] = json.loads(kept.read_text())["rows"]
  elif args.only:
    rows = {}
  else:
    rows = {
      f"seed {i}": {"workdir": str(r), **results(r, refs, tgt_tok)} for i, r in enumerate(runs)
    }
    members = ",".join(str(r) for r in runs)
    command = evaluate(args.config, out / "ensemble", {**shared, "decode.ensemble": members})
    rows["ensemble"] = {"command": command, **results(out / "ensemble", refs, tgt_tok)}

  table = out / "lexicon.npz"
  lexicon = ["python", "-m", "seq2seq.build_lexicon", f"--workdir={runs[0]}", f"--out={table}"]
  lexicon = " ".join(lexicon) if table.exists() else run_command(lexicon)
  alone = {**shared, "decode.ensemble": str(runs[0])}
  listed = {**alone, "decode.shortlist": str(table)}
  decodings = (
    ("seed 0, full vocabulary", "full", alone),
    ("seed 0, shortlist", "shortlist", listed),
    (
      "seed 0, shortlist per sentence",
      "shortlist_sentence",
      {**listed, "decode.shortlist_scope": "sentence"},
    ),
  )
  for name, folder, overrides in decodings:
    row = timed_evaluate(args.config, out / folder, overrides)
    if "shortlist" in name:
      row["command"] = f"{lexicon} && {row['command']}"
    rows[name] = {**row, "workdir": str(runs[0]), **results(out / folder, refs, tgt_tok)}
  decode_fields = lambda o: {
    k.removeprefix("decode."): v
    for k, v in o.items()
    if k != "decode.ensemble" and k.startswith("decode.")
  }
  speeds = decoding_speed(
    runs[0], {name: decode_fields(o) for name, _, o in decodings}, args.speed_rounds
  )
  for name, speed in speeds.items():
    rows[name]["test_sentences_per_s"] = speed

  if args.average and not args.only:
    for k in (1, args.average):
      for i, r in enumerate(runs):
        workdir = out / "average" / f"last{k}_seed_{i}"
        average = ["python", "-m", "seq2seq.average", f"--workdir={r}", f"--last={k}"]
        average.append(f"--out={workdir}")
        if not (workdir / "average.json").exists():
          shutil.rmtree(workdir, ignore_errors=True)
          run_command(average)
        command = evaluate(args.config, workdir, shared, reuse=True)
        averaged = json.loads((workdir / "average.json").read_text())["steps"]
        name = f"seed {i}, last checkpoint" if k == 1 else f"seed {i}, mean of last {k}"
        rows[name] = {"command": f"{' '.join(average)} && {command}"}
        rows[name].update(results(workdir, refs, tgt_tok))
        for split in SPLITS:
          rows[name][split]["step"] = "+".join(map(str, averaged))

  # The ensemble's own state has no step: its rows name the members' checkpoints.
  seed0 = runs_lib.read_results(runs[0])["test"]["step"]
  steps = [rows[f"seed {i}"]["test"]["step"] for i in range(len(runs))] if not args.only else []
  for split in SPLITS:
    if steps:
      rows["ensemble"][split]["step"] = "/".join(map(str, steps))
    for name in ("seed 0, full vocabulary", "seed 0, shortlist", "seed 0, shortlist per sentence"):
      rows[name][split]["step"] = seed0
  made = {
    "runs": [str(r) for r in runs],
    "cpu": reports.cpu_info(),
    "load_average": {"start": load_start, "end": reports.load_average()},
    "minutes": (time.perf_counter() - started) / 60,
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
  }
  if args.only and kept.exists():  # The other rows keep where and when they were made.
    record = {**json.loads(kept.read_text()), "rows": rows, "shortlists": made}
  else:
    record = {**made, "rows": rows}
  reports.publish(kept, record, markdown(record))
  return record


def markdown(record: dict[str, Any]) -> str:
  fmt = reports.fmt
  lines = [
    "# Ensembles and shortlists on trained runs",
    "",
    f"{reports.made_by('decoding_study', record)} and {record['load_average']['end']} at "
    "the end. BLEU and chrF: sacrebleu 13a on detokenised output; No-UNK: the paper's subset "
    "decoded with <unk> forbidden; OOV produced: the share of the test references' words "
    "outside the target vocabulary that the output holds. Eval minutes: the wall time of the "
    "row's `main.py --mode=eval` (valid and test, No-UNK pass included), the three seed-0 "
    "rows run one after another. Sentences/s: the test split decoded warm in one process "
    "(`decoding_speed`: compilation and start-up left out, the median of three passes taken in "
    "turn across the rows).",
  ]
  if "shortlists" in record:
    made = record["shortlists"]
    lines[-1] += (
      f" The seed-0 rows of full vocabulary and shortlists were decoded later "
      f"(`--only shortlists`) on {made['date']}, {made['cpu'].get('cpu_model', '?')}, load "
      f"average {made['load_average']['start']} at the start, from {made['runs'][0]}: compare "
      "them with each other."
    )
  lines += [
    "",
    "| system | checkpoint step | valid BLEU | valid chrF | test BLEU | test chrF | "
    "test BLEU No-UNK | test OOV produced | eval minutes | sentences/s |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ]
  for name, row in record["rows"].items():
    v, t = row["valid"], row["test"]
    minutes = fmt(row["eval_minutes"]) if "eval_minutes" in row else "-"
    speed = fmt(row["test_sentences_per_s"]) if "test_sentences_per_s" in row else "-"
    lines.append(
      f"| {name} | {t['step'] if t['step'] is not None else '-'} | {fmt(v['bleu'])} | "
      f"{fmt(v['chrf'])} | {fmt(t['bleu'])} | {fmt(t['chrf'])} | "
      f"{fmt(t['bleu_no_unk'])} | {fmt(t['oov_recall'], 3)} | {minutes} | {speed} |"
    )
  lines += _means(record["rows"])
  lines += ["", "Commands:", ""]
  lines += [f"    {row['command']}" for row in record["rows"].values() if "command" in row]
  return "\n".join(lines) + "\n"


def _means(rows: dict[str, Any]) -> list[str]:
  """Lines giving the mean test BLEU over the seeds of each kind of row ("seed I" alone, "seed I,
  last checkpoint", "seed I, mean of last K"), for kinds every seed has."""
  kinds: dict[str, list[float]] = {}
  for name, row in rows.items():
    if name.startswith("seed ") and "shortlist" not in name:
      kind = name.split(",", 1)[1].strip() if "," in name else "best checkpoint"
      kinds.setdefault(kind, []).append(row["test"]["bleu"])
  seeds = max((len(v) for v in kinds.values()), default=0)
  if seeds < 2 or len(kinds) < 2:
    return []
  lines = ["", f"Mean test BLEU over the {seeds} seeds:", ""]
  for kind, values in kinds.items():
    if len(values) == seeds:
      lines.append(f"- {kind}: {reports.fmt(sum(values) / seeds)}")
  return lines


if __name__ == "__main__":
  main()

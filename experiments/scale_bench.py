"""The data path at the paper's scale: preparing a 10-million-pair corpus once, then starting,
training, producing batches and resuming from its store, against the in-memory loading it
replaced.

    python -m experiments.scale_bench --corpus DIR --out experiments/results/scale \
        [--work WORK] [--baseline COMMIT] [--stages prepare,start,batches,resume,baseline]

DIR is what `experiments.scale_corpus` made: DIR/full (10M pairs) and DIR/first29000,
DIR/first1000000 (its first pairs, as corpora of their own). Every size is a "local" corpus
with 30,000-word vocabularies a side (`data.src_vocab_size`/`tgt_vocab_size` 30,004 with the
four specials), the whitespace pretokenizer (the generator's text is tokenised already) and
configs/tiny.py's model (the data path is measured, not the model), in WORK (default a temp
folder).

Stages, each recorded in OUT/scale_bench.json as it finishes (a rerun skips the finished ones):

* prepare: `main.py --mode=prepare` at each size in a fresh process: wall seconds, words/s, and
  the peak resident memory of the process and of its largest worker;
* start: `main.py --mode=train` for one update on the prepared store at each size, in a fresh
  process: wall seconds from process start to the end (an upper bound on start to the first
  update: it includes JAX's start, compiling the step and the final checkpoint), the data's
  own seconds (corpus, vocabularies, store), and the peak resident memory over 50 updates;
* batches: the training iterator alone over the 10M store, in target tokens (real, not
  padding) per second over 3,000 batches, after 100 to warm up;
* resume: the iterator restored from its state after 2,000 batches at 10M (in the middle of the
  first epoch's 125,000): seconds to the next batch from a fresh process's view (loading the
  data and restoring), and whether the next 50 batches equal the uninterrupted ones bit for bit;
* baseline: `input_pipeline.load_data` as it was at COMMIT (default f55ced3, before the store),
  run from a worktree of that commit, at 29k and 1M pairs: a first start (building the tfds
  copy and tokenising) and a second (reading and tokenising again, as every start did), each
  with its peak memory; its 10M figures are extrapolated linearly and labelled as such.

Every timing records the CPU model, its vector instruction sets and the load average.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib import records, reports
from experiments.lib.configs import REPO_ROOT
from experiments.lib.pages.scale_bench import page

SIZES = {"29k": "first29000", "1M": "first1000000", "10M": "full"}  # --sizes: name=folder,...
VOCAB = 30_004  # 30,000 words and the four specials.
STAGES = ("prepare", "start", "batches", "resume", "baseline")
BASELINE = "f55ced3"


def overrides(corpus: Path) -> list[str]:
  """The config flags of a size's corpus: local text, 30k vocabularies, the paper's 50 words."""
  return [
    "--config=configs/tiny.py",
    "--config.data.corpus=local",
    f"--config.data.local.dir={corpus}",
    "--config.data.local.src_lang=en",
    "--config.data.local.tgt_lang=fr",
    "--config.data.local.train=train",
    "--config.data.local.valid=valid",
    "--config.data.local.test=test",
    f"--config.data.src_vocab_size={VOCAB}",
    f"--config.data.tgt_vocab_size={VOCAB}",
    "--config.data.pretokenizer=none",
    "--config.data.max_len=50",
    "--config.data.bucket_step=10",
    "--config.data.batch_size=80",
    "--config.data.pool_batches=20",
  ]


# A process whose own peak memory (and its children's: the tokenising workers) is printed as
# its last line: `main.py` run inside it.
_MEASURED = """
import json, resource, runpy, sys
sys.argv = sys.argv[1:]
try:
  runpy.run_path("main.py", run_name="__main__")
except SystemExit as e:
  status = e.code or 0
else:
  status = 0
peak = lambda who: resource.getrusage(who).ru_maxrss * 1024
print(json.dumps({"status": status, "peak_rss": peak(resource.RUSAGE_SELF),
                  "peak_rss_children": peak(resource.RUSAGE_CHILDREN)}))
sys.exit(status)
"""


def measured(args: list[str], cwd: Path = REPO_ROOT) -> dict[str, Any]:
  """`main.py ARGS` in a fresh process: its wall seconds, peak memory and stdout."""
  load = reports.load_average()
  start = time.perf_counter()
  proc = subprocess.run(
    [sys.executable, "-c", _MEASURED, "main.py", *args],
    cwd=cwd,
    capture_output=True,
    text=True,
  )
  wall = time.perf_counter() - start
  if proc.returncode != 0:
    raise RuntimeError(f"main.py {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
  lines = proc.stdout.strip().splitlines()
  return {"seconds": round(wall, 2), **json.loads(lines[-1]), "stdout": lines[:-1], "load": load}


def _data_stats(stdout: list[str]) -> dict[str, Any]:
  return json.loads("\n".join(stdout))["data"]


def stage_prepare(corpus: Path, work: Path) -> dict[str, Any]:
  out = {}
  for size, folder in SIZES.items():
    run = measured(
      [*overrides(corpus / folder), f"--workdir={work / size}", "--mode=prepare", "--json"]
    )
    stats = _data_stats(run.pop("stdout"))
    words = sum(
      stats["tokens"][f"{split}_{side}"]
      for split in ("train", "valid", "test")
      for side in ("src", "tgt")
    )
    out[size] = {
      **run,
      "pairs": stats["examples"],
      "words": words,
      "words_per_second": round(words / run["seconds"]),
      "data_seconds": stats["seconds"],
      "workers": stats["store"]["workers"],
      "store_bytes": sum(p.stat().st_size for p in Path(stats["store"]["path"]).iterdir()),
    }
    print(size, json.dumps(out[size]), flush=True)
  return out


def stage_start(corpus: Path, work: Path) -> dict[str, Any]:
  out = {}
  for size in SIZES:
    common = ["--config.train.final_eval=false", "--config.train.valid_bleu=false"]
    common += ["--config.train.eval_every=100000", "--config.train.checkpoint_every=100000"]
    common += ["--config.train.log_every=1", "--config.train.num_steps=50"]
    _fresh_run(work / size)
    began = time.time()  # In the prepared workdir: its vocabularies and store are opened.
    run = measured([*overrides(corpus / SIZES[size]), *common, f"--workdir={work / size}"])
    log = (work / size / "log.txt").read_text()
    out[size] = {
      "start_to_first_update": round(_first_step_time(log) - began, 2),
      "data_seconds": _logged_data_seconds(log),
      "peak_rss_50_updates": run["peak_rss"],
      "seconds_50_updates": run["seconds"],
      "load": run["load"],
    }
    print(size, json.dumps(out[size]), flush=True)
  return out


def _fresh_run(workdir: Path) -> None:
  """Leaves a prepared workdir its vocabularies and data only (a run trained there before
  would be resumed, not started)."""
  for path in workdir.iterdir():
    if path.name not in ("vocab", "data", "log.txt"):
      shutil.rmtree(path) if path.is_dir() else path.unlink()


def _first_step_time(log: str) -> float:
  """When the run's log says its first update is done (the "step 1/N" line, logged once the
  update's result is back), as seconds since the epoch."""
  line = [line for line in log.splitlines() if "] step 1/" in line][-1]  # The latest run's.
  stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
  return stamp.timestamp()  # Local time, as logging writes it.


def _logged_data_seconds(log: str) -> dict[str, float]:
  """The data's seconds (corpus, vocabularies, store) of the latest run in a workdir's log (the
  training loop's JSON data line; the log holds --mode=prepare's lines too)."""
  lines = [line for line in log.splitlines() if "train.py" in line and "] data: {" in line]
  return json.loads(lines[-1].split("] data: ", 1)[1])["seconds"]


def _iterator(corpus: Path, work: Path):
  """The 10M run's data and training iterator, as `train` makes them (in this process)."""
  from seq2seq import settings
  from seq2seq.data import input_pipeline as ip

  config = _config(corpus)
  run = settings.validate(config)
  data = ip.load_data(run.data, work / _largest())
  return data, run.data, ip.train_iterator(data, run.data)


def _largest() -> str:
  return list(SIZES)[-1]


def _config(corpus: Path):
  from configs import tiny

  c = tiny.get_config()
  for flag in overrides(corpus / SIZES[_largest()])[1:]:
    path, value = flag.removeprefix("--config.").split("=", 1)
    section, field = path.rsplit(".", 1)
    node = c
    for part in section.split("."):
      node = node[part]
    node[field] = type(node[field])(value)
  return c


def stage_batches(corpus: Path, work: Path, count: int = 3000, warm: int = 100) -> dict[str, Any]:
  _, _, it = _iterator(corpus, work)
  for _ in range(warm):
    next(it)
  load = reports.load_average()
  tokens, start = 0, time.perf_counter()
  for _ in range(count):
    tokens += int(next(it)["tgt_mask"].sum())
  seconds = time.perf_counter() - start
  return {
    "batches": count,
    "target_tokens": tokens,
    "seconds": round(seconds, 3),
    "target_tokens_per_second": round(tokens / seconds),
    "batches_per_second": round(count / seconds, 1),
    "load": load,
  }


def stage_resume(corpus: Path, work: Path, at: int = 2000, check: int = 50) -> dict[str, Any]:
  import numpy as np

  from seq2seq.data import input_pipeline as ip

  _, d, it = _iterator(corpus, work)
  for _ in range(at):
    next(it)
  state = json.loads(json.dumps(it.get_state()))  # As a checkpoint keeps it.
  want = [next(it) for _ in range(check)]
  load = reports.load_average()
  start = time.perf_counter()
  data = ip.load_data(d, work / _largest())
  fresh = ip.train_iterator(data, d)
  fresh.set_state(state)
  first = next(fresh)
  seconds = time.perf_counter() - start
  got = [first] + [next(fresh) for _ in range(check - 1)]
  same = all(
    set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
    for a, b in zip(want, got, strict=True)
  )
  return {
    "after_batches": at,
    "epoch_batches": int(len(data.splits["train"]) // d.batch_size),
    "seconds_to_next_batch": round(seconds, 3),
    "next_batches_identical": bool(same),
    "batches_compared": check,
    "load": load,
  }


_BASELINE = """
import json, resource, sys, time
from configs import tiny
from seq2seq.data import input_pipeline as ip
config = tiny.get_config()  # The commit's own config, with the benchmark's data fields.
for path, value in json.loads(sys.argv[1]).items():
  section, field = path.rsplit(".", 1)
  node = config
  for part in section.split("."):
    node = node[part]
  node[field] = value
d = ip.DataSettings.from_config(config)
start = time.perf_counter()
data = ip.load_data(d, sys.argv[2])
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "stats_seconds": data.stats["seconds"],
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def stage_baseline(corpus: Path, work: Path, commit: str) -> dict[str, Any]:
  tree = work / f"baseline-{commit}"
  if not tree.exists():
    subprocess.run(
      ["git", "worktree", "add", "--detach", str(tree), commit], cwd=REPO_ROOT, check=True
    )
  out = {}
  for size in list(SIZES)[:-1]:
    config = {}
    for flag in overrides(corpus / SIZES[size])[1:]:
      path, value = flag.removeprefix("--config.").split("=", 1)
      config[path] = int(value) if value.isdigit() else value
    runs = []
    for _ in ("first", "second"):
      load = reports.load_average()
      proc = subprocess.run(
        [sys.executable, "-c", _BASELINE, json.dumps(config), str(work / f"baseline-{size}")],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
      )
      runs.append({**json.loads(proc.stdout.strip().splitlines()[-1]), "load": load})
    out[size] = {"first_start": runs[0], "every_later_start": runs[1]}
    print(size, json.dumps(out[size]), flush=True)
  measured_pairs = _pairs(corpus / SIZES[size])
  ratio = _pairs(corpus / SIZES[_largest()]) / measured_pairs
  later = out[size]["every_later_start"]
  out[f"{_largest()}_extrapolated"] = {
    "note": f"extrapolated linearly from {size} (x{ratio:g}), not measured",
    "every_later_start_seconds": round(later["seconds"] * ratio, 1),
    "peak_rss": int(later["peak_rss"] * ratio),
  }
  subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO_ROOT, check=False)
  return out


def _pairs(folder: Path) -> int:
  with open(folder / "train.en", "rb") as f:
    return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b""))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--corpus", required=True, type=Path)
  p.add_argument("--out", required=True, type=Path)
  p.add_argument("--work", type=Path, default=None)
  p.add_argument("--baseline", default=BASELINE)
  p.add_argument("--stages", default=",".join(STAGES))
  p.add_argument("--sizes", default=",".join(f"{k}={v}" for k, v in SIZES.items()))
  args = p.parse_args(argv)
  SIZES.clear()
  SIZES.update(item.split("=", 1) for item in args.sizes.split(","))
  work = args.work or Path(tempfile.mkdtemp(prefix="scale-"))
  args.out.mkdir(parents=True, exist_ok=True)
  path = args.out / "scale_bench.json"
  record = json.loads(path.read_text()) if path.exists() else {}
  record.setdefault("corpus", json.loads((args.corpus / "corpus.json").read_text()))
  if "date" not in record:  # A rerun finishing the stages keeps the first run's provenance.
    record.update(reports.provenance("scale_bench", argv, reports.load_average()))
    # The folders are this machine's: the page names them by their flags.
    record["command"] = reports.named_folders(
      record["command"], {"CORPUS": args.corpus, "WORK": work}
    )
  record.update(cpu_count=os.cpu_count(), baseline_commit=args.baseline, sizes=dict(SIZES))
  for stage in args.stages.split(","):
    if stage in record.get("stages", {}):
      continue
    if stage == "baseline":
      result = stage_baseline(args.corpus, work, args.baseline)
    else:
      result = globals()[f"stage_{stage}"](args.corpus, work)
    record.setdefault("stages", {})[stage] = {**result, "cpu": reports.cpu_info()}
    reports.publish(path, record, page(record))  # After every stage: a cut loses one.
  records.write_definition(args.out, "experiments.scale_bench")
  return record


if __name__ == "__main__":
  resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
  main()

"""The data path at the paper's scale (`python -m experiments.scale_bench`): the page the script
writes, drawn again on the results page."""

from __future__ import annotations

from typing import Any

from experiments.lib import reports
from experiments.lib.pages.study import StudyPage, script_page

GIB = 2**30


def _gib(value: float | None) -> str:
  return "-" if value is None else f"{value / GIB:.2f}"


def _load(load: list[float] | None) -> str:
  return "-" if not load else f"{load[0]:.1f}"


def page(record: dict[str, Any]) -> str:
  fmt, stages, corpus = reports.fmt, record.get("stages", {}), record["corpus"]
  sizes = ", ".join(record.get("sizes", {}))
  lines = [
    "# The data path at the paper's scale",
    "",
    f"{reports.made_by('scale_bench', record)}. The corpus: {corpus['pairs']:,} training pairs "
    f"of the embedded generator ({corpus['words']:,} words, {corpus['words_per_pair']} a pair, "
    f"no source line twice: {corpus['repeats_left_out']:,} repeats left out), English-French, "
    f"30,000-word vocabularies a side; the corpora measured: {sizes} (the smaller ones the "
    "first pairs of the largest, as corpora of their own). The load average (1 minute) stands "
    "beside every timing: the 2 cores were shared.",
    "",
  ]
  if "prepare" in stages:
    cells = [
      [
        size,
        f"{r['pairs']['train']:,}",
        f"{r['words']:,}",
        fmt(r["seconds"], 1),
        f"{r['words_per_second']:,}",
        _gib(r["peak_rss"]),
        _gib(r["peak_rss_children"]),
        str(r["workers"]),
        _gib(r["store_bytes"]),
        _load(r["load"]),
      ]
      for size, r in stages["prepare"].items()
      if isinstance(r, dict) and "pairs" in r
    ]
    header = ["corpus", "train pairs", "words", "wall s", "words/s", "peak GiB", "worker peak GiB"]
    lines += [
      "## Preparing the store once (`--mode=prepare`)",
      "",
      *reports.table([*header, "workers", "store GiB", "load"], cells),
      "",
    ]
  if "start" in stages:
    cells = [
      [
        size,
        fmt(r["start_to_first_update"], 1),
        fmt(r["data_seconds"].get("store"), 2),
        fmt(r["data_seconds"].get("corpus"), 2),
        fmt(r["data_seconds"].get("vocabularies"), 2),
        _gib(r["peak_rss_50_updates"]),
        _load(r["load"]),
      ]
      for size, r in stages["start"].items()
      if isinstance(r, dict) and "start_to_first_update" in r
    ]
    header = ["corpus", "start to 1st update s", "store s", "corpus s", "vocabularies s"]
    lines += [
      "## Starting and training from the store",
      "",
      "A fresh `main.py` process on the prepared store: seconds from the process's start to its "
      "first update (JAX's start and the step's compilation included), the data's own seconds "
      "within them, and the peak resident memory over 50 updates.",
      "",
      *reports.table([*header, "peak GiB (50 updates)", "load"], cells),
      "",
    ]
  if "batches" in stages:
    b = stages["batches"]
    lines += [
      "## Batches alone",
      "",
      f"The training iterator over the largest store, training switched off: "
      f"**{b['target_tokens_per_second']:,} target tokens/s** ({b['batches_per_second']} "
      f"batches/s of 80 pairs over {b['batches']:,} batches; load {_load(b['load'])}).",
      "",
    ]
  if "resume" in stages:
    r = stages["resume"]
    same = "identical" if r["next_batches_identical"] else "NOT identical"
    lines += [
      "## Resuming in the middle of an epoch",
      "",
      f"After {r['after_batches']:,} of the epoch's {r['epoch_batches']:,} batches: "
      f"{fmt(r['seconds_to_next_batch'], 2)} s from opening the data to the next batch, and "
      f"the next {r['batches_compared']} batches {same} to the uninterrupted run's "
      f"(load {_load(r['load'])}).",
      "",
    ]
  if "baseline" in stages:
    base = stages["baseline"]
    cells = []
    for size, r in base.items():
      if isinstance(r, dict) and "first_start" in r:
        first, later = r["first_start"], r["every_later_start"]
        cells.append(
          [
            size,
            fmt(first["seconds"], 1),
            fmt(later["seconds"], 1),
            _gib(later["peak_rss"]),
            _load(later["load"]),
          ]
        )
    extrapolated = [(k, v) for k, v in base.items() if k.endswith("_extrapolated")]
    for size, r in extrapolated:
      cells.append(
        [
          f"{size.removesuffix('_extrapolated')} (extrapolated)",
          "-",
          fmt(r["every_later_start_seconds"], 0),
          _gib(r["peak_rss"]),
          "-",
        ]
      )
    lines += [
      "## Before the store: every start read and tokenised the corpus",
      "",
      f"`input_pipeline.load_data` as it was at `{record.get('baseline_commit', '?')}`, from a "
      "worktree of that commit: the first start built the tfds copy and tokenised it, every "
      "later one read and tokenised it again and kept it in memory as Python lists first.",
      "",
      *reports.table(["corpus", "first start s", "every later start s", "peak GiB", "load"], cells),
      "",
    ]
  lines += ["```bash", record.get("command", ""), "```"]
  return "\n".join(lines) + "\n"


STUDIES = {
  "scale": StudyPage(
    "The data path at the paper's scale",
    "A 10-million-pair corpus prepared once into the store, then started from, trained on, "
    "batched and resumed, beside the in-memory loading it replaced.",
    measurements=script_page(page, "scale_bench.json"),
  ),
}

"""Minimum Bayes risk and reranking on Multi30k (`python -m experiments.mbr_study`): the page the
script writes, drawn again on the results page."""

from __future__ import annotations

from typing import Any

from experiments.lib import reports
from experiments.lib.pages import sections
from experiments.lib.pages.study import StudyPage, script_page


def markdown(record: dict[str, Any]) -> str:
  fmt = reports.fmt
  rows = record["rows"]
  # A timing column only where some row was timed (a resumed study keeps results, not the
  # eval minutes of rows evaluated before).
  timings = {
    "eval_minutes": (
      "eval minutes",
      "Eval minutes: the wall time of the row's commands (valid and test, start-up and "
      "compilation included). ",
    ),
    "test_sentences_per_s": (
      "decoding sentences/s",
      "Decoding sentences/s: the test split decoded warm in one process, compilation left out "
      "(the median of three passes taken in turn across the rows). ",
    ),
  }
  timings = {k: t for k, t in timings.items() if any(k in row for row in rows.values())}
  tests = {name: row.get("test_vs_beam5", {}) for name, row in rows.items()}
  trials = sorted({t["ar_trials"] for t in tests.values() if "ar_p_value" in t})
  with_ar = bool(trials)  # Records before the approximate randomisation have the bootstrap only.
  trials_text = ", ".join(f"{k:,}" for k in trials)
  lines = [
    "# Minimum Bayes risk against beam search",
    "",
    f"{reports.made_by('mbr_study', record)} and {record['load_average']['end']} at the end. "
    "BLEU and chrF: sacrebleu on detokenised output; p: paired bootstrap of test BLEU against "
    "beam 5"
    + (
      f"; AR p: paired approximate randomisation of the same ({trials_text} trials, sacrebleu's). "
      if with_ar
      else ". "
    )
    + "".join(explained for _, explained in timings.values())
    + "A rerank row's valid figures are those its weights were tuned on.",
    "",
  ]
  header = ["system", "valid BLEU", "valid chrF", "test BLEU", "test chrF", "p vs beam 5"]
  header += ["AR p"] * with_ar
  cells = []
  for name, row in rows.items():
    v, t = row["valid"], row["test"]
    p = tests[name].get("p_value")
    cells.append(
      [name, fmt(v["bleu"]), fmt(v["chrf"]), fmt(t["bleu"]), fmt(t["chrf"])]
      + ["-" if p is None else fmt(p, 3)]
      + [sections.ar_text(tests[name])] * with_ar
      + ["-" if row.get(k) is None else fmt(row[k]) for k in timings]
    )
  lines += reports.table(header + [heading for heading, _ in timings.values()], cells)
  weights = {n: r["weights"] for n, r in rows.items() if "weights" in r}
  if weights:
    lines += ["", "Weights tuned on valid (`seq2seq.rerank`; score's fixed at 1):", ""]
    lines += [
      f"- {n}: " + ", ".join(f"{k} {fmt(w, 3)}" for k, w in ws.items()) for n, ws in weights.items()
    ]
  lines += ["", "Commands:", ""]
  lines += [f"    {row['command']}" for row in rows.values()]
  return "\n".join(lines) + "\n"


STUDIES = {
  "multi30k_mbr": StudyPage(
    "Minimum Bayes risk and reranking on Multi30k",
    "Beam 5 against MBR over the 10-best and over 16 and 32 samples, and the 10-best reranked "
    "with weights tuned on validation, with and without a French-to-English model's score, on "
    "the score study's additive model; each with its decoding speed beside greedy's.",
    measurements=script_page(markdown, "mbr.json"),
  ),
}

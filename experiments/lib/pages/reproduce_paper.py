"""The paper's Table 1 and Fig. 2 on the embedded corpus
(`python -m experiments.reproduce_paper`)."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.lib.pages.study import StudyPage


def paper_conclusion(study: Path) -> list[str]:
  path = study / "table1.json"
  if not path.exists():
    return []
  table = json.loads(path.read_text())
  rows = {r["model"]: r for r in table["rows"]}

  def cell(name: str) -> str:
    r = rows[name]
    sd = r.get("bleu_all_std")
    return f"{r['bleu_all']:.2f}" + ("" if sd is None else f" ± {sd:.2f}")

  out = []
  for n in (30, 50):
    search, encdec = f"RNNsearch-{n}", f"RNNencdec-{n}"
    if search in rows and encdec in rows:
      out.append(
        f"Trained on sentences up to {n} words, RNNsearch reaches {cell(search)} test BLEU "
        f"against RNNencdec's {cell(encdec)}."
      )
  fig2 = table.get("fig2") or {}
  if "RNNsearch-50" in fig2 and "RNNencdec-50" in fig2:
    s, e = fig2["RNNsearch-50"], fig2["RNNencdec-50"]
    bins = [b for b in s if b.get("bleu") is not None]
    if bins:
      last = bins[-1]
      other = next((b for b in e if b.get("max_len") == last.get("max_len")), None)
      if other and other.get("bleu") is not None:
        out.append(
          f"By source length (Fig. 2), on the longest sentences ({last.get('min_len')} to "
          f"{last.get('max_len')} words) RNNsearch-50 scores {last['bleu']:.2f} and "
          f"RNNencdec-50 {other['bleu']:.2f}."
        )
  return out


STUDIES = {
  "paper_cpu_seeds": StudyPage(
    "The paper's Table 1 and Fig. 2 on the embedded corpus",
    "The paper's four models (RNNencdec and RNNsearch, trained on sentences up to 30 and 50 "
    "words) at the demo config's sizes with Adam, the same number of steps each, three seeds.",
    conclusion=paper_conclusion,
  ),
  "paper_cpu": StudyPage(
    "The paper's Table 1 and Fig. 2 on the embedded corpus (one seed)",
    "The first reproduction, one seed per model.",
    conclusion=paper_conclusion,
  ),
}

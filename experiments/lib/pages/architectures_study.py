"""Attention against attribution across architectures (`python -m experiments.architectures_study`):
its two tables of its own, which the script's Markdown and the results page both draw from
architectures_study.json, and the page's prose."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.lib import reports
from experiments.lib.pages.study import StudyPage
from experiments.lib.reports import fmt, mean_sd

REPORT = "architectures_study.json"


def attribution_table(result: Mapping[str, Any]) -> list[str]:
  """Per point: AER of the attention's and of the word saliency's links on the same test pairs,
  and how alike the two rank the source words."""
  rows = result["configurations"]
  header = ["point", "seeds", "pairs", "AER: attention", "AER: saliency", "Spearman"]
  cells = [
    [r["name"], str(len(r["seeds"])), str(r["attribution_pairs"])]
    + [mean_sd(r, "attribution_attention_aer", 3), mean_sd(r, "attribution_saliency_aer", 3)]
    + [mean_sd(r, "attribution_spearman", 3)]
    for r in rows
  ]
  return [
    "## Attention against attribution on the first test pairs",
    "",
    *reports.table(header, cells),
    "",
    "Mean ± sample standard deviation over seeds, on the first test pairs (`pairs`, at most "
    f"`--attribution-sentences` = {result['attribution_sentences']}), their references forced. "
    "Each target word is linked to one source word by the reported attention's argmax, and by "
    "word saliency's: (dp/de_j) . e_j, gradient times input (Ding et al. 2019). AER: against "
    "the gold links of those pairs. Spearman: the rank correlation of a target word's attention "
    "row with its saliency row over the source words, averaged over the target words (Jain and "
    "Wallace 2019's comparison); rows where either is constant are left out.",
    "",
  ]


def heads_table(result: Mapping[str, Any]) -> list[str]:
  """Per Transformer point: test AER of the reported attention, of the head (or layer mean)
  with the best validation AER, and of each layer's mean of heads. Empty without one."""
  rows = [r for r in result["configurations"] if r.get("layers")]
  if not rows:
    return []
  depth = max(r["layers"] for r in rows)
  header = ["point", "reported", "best on valid", "chosen (by seed)", "its valid AER"]
  header += [f"layer {k} mean" for k in range(1, depth + 1)]
  cells = []
  for r in rows:
    chosen = " / ".join(f"`{c}`" for c in r["best_heads"])
    layers = [
      mean_sd(r, f"layer{k}_aer", 3) if k <= r["layers"] else "-" for k in range(1, depth + 1)
    ]
    cells.append(
      [r["name"], mean_sd(r, "aer", 3), mean_sd(r, "head_aer_best", 3), chosen]
      + [mean_sd(r, "head_aer_best_valid", 3), *layers]
    )
  return [
    "## Transformer heads: test AER",
    "",
    *reports.table(header, cells),
    "",
    "Teacher-forced cross-attention of the references against the gold links (argmax). "
    "reported: the attention the run reports (the top layer's mean of heads, or the one head "
    "`alignment_layer` and `alignment_head` name). best on valid: of every layer's heads and "
    "each layer's mean (`L1H2`: layer 1, head 2; `L2mean`: layer 2's mean), the one with the "
    "lowest AER on the validation split, chosen per seed, then measured on the test split; its "
    "valid AER is the one it was chosen by. Nothing is chosen on the test split.",
    "",
  ]


def tables(result: Mapping[str, Any]) -> list[str]:
  return [*attribution_table(result), *heads_table(result)]


def study_tables(study: Path) -> list[str]:
  """The results page's measurements: the study's own tables from its report."""
  return tables(json.loads((study / REPORT).read_text()))


def lower(rows: Sequence[Mapping[str, Any]], key: str, than: str) -> list[str]:
  return [f"`{r['name']}`" for r in rows if (r[f"{key}_mean"] or 0) < (r[f"{than}_mean"] or 0)]


def conclusion(study: Path) -> list[str]:
  """Where word saliency aligns better than attention, and where a head chosen on validation
  aligns better than the reported attention."""
  path = study / REPORT
  if not path.exists():
    return []
  rows = json.loads(path.read_text())["configurations"]
  better = lower(rows, "attribution_saliency_aer", "attribution_attention_aer")
  out = [
    f"Word saliency's links have a lower mean AER than attention's in {len(better)} of "
    f"{len(rows)} points" + (f" ({', '.join(better)})." if better else ".")
  ]
  heads = [r for r in rows if r.get("layers")]
  if heads:
    chosen = lower(heads, "head_aer_best", "aer")
    out.append(
      f"A head chosen on validation aligns better on test than the reported attention in "
      f"{len(chosen)} of {len(heads)} Transformer points"
      + (f" ({', '.join(chosen)}); " if chosen else "; ")
      + "; ".join(
        f"`{r['name']}` {fmt(r['head_aer_best_mean'], 3)} against {fmt(r['aer_mean'], 3)}"
        for r in heads
      )
      + "."
    )
  return out


STUDIES = {
  "architectures": StudyPage(
    "Attention against attribution across architectures (early in training)",
    "RNNsearch (the paper's decoder), Luong et al.'s decoder and a Transformer, plain and with "
    "one head supervised by the gold links (Garg et al. 2019), on the embedded corpus at the "
    "cpu preset: how well each one's attention aligns, how well gradient-based word saliency "
    "aligns on the same pairs, how alike the two rank the source words, and which of a "
    "Transformer's heads aligns best when chosen on the validation split.",
    measurements=study_tables,
    conclusion=conclusion,
  ),
}

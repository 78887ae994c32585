"""The first 30-minute Multi30k system (`python -m experiments.realtext`)."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.lib.pages.study import StudyPage


def realtext_conclusion(study: Path) -> list[str]:
  path = study / "multi30k.json"
  if not path.exists():
    return []
  r = json.loads(path.read_text())
  d, ref = r["chosen_decode"], r["reference"]
  unk = "on" if d["replace_unk"] else "off"
  best = max(r["exploration"].items(), key=lambda kv: kv[1]["best_valid_bleu"])
  return [
    f"Of the settings explored for {r['explore_minutes']:g} minutes each, `{best[0]}` reached "
    f"the best validation BLEU ({best[1]['best_valid_bleu']:.2f}).",
    f"`configs/multi30k.py` trained for {r['train_minutes']:.1f} minutes ({r['steps']:,} "
    f"updates, {r['epochs']:.1f} epochs) reaches test BLEU {r['test_bleu']:.2f}, chrF "
    f"{r['test_chrf']:.2f}, decoded with beam {d['beam_size']}, length normalisation "
    f"{d['length_norm_alpha']:g} and UNK replacement {unk} (chosen on validation).",
    f"The run to beat, {ref['system']}: {ref['test_bleu']} test BLEU, {ref['test_chrf']} chrF.",
  ]


STUDIES = {
  "multi30k_realtext": StudyPage(
    "Multi30k in 30 minutes: the first system",
    "Settings explored on validation for ten minutes each, then `configs/multi30k.py` trained "
    "for its 30 minutes, its decoding chosen on validation and the test split decoded once.",
    conclusion=realtext_conclusion,
  ),
}

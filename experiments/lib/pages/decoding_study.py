"""The decoding choices on Multi30k (`python -m experiments.decoding_study`)."""

from __future__ import annotations

from experiments.lib.pages.study import StudyPage

STUDIES = {
  "multi30k_decoding": StudyPage(
    "Decoding choices on Multi30k",
    "Beam, length normalisation, checkpoint averaging, ensembles and shortlists, decoded from "
    "the score study's additive runs.",
  ),
}

"""The studies on the embedded corpus (scores, normalisers, alignment, structures) and the early
studies that the later ones repeat at the plateau."""

from __future__ import annotations

from experiments.lib.pages.study import StudyPage

# `early`: the study run early in training that a later study repeats at the plateau.
STUDIES = {
  "embedded_scores": StudyPage(
    "Score functions on the embedded corpus at the plateau",
    "Additive against cosine on the embedded synthetic corpus, trained to its plateau.",
    early="sweep",
  ),
  "embedded_normalisers": StudyPage(
    "Attention normalisers in both decoders, on the embedded corpus",
    "Softmax, sparsemax and 1.5-entmax with the additive score in the paper's decoder and in "
    "Luong et al.'s, three seeds each at the embedded studies' budget: AER against the corpus's "
    "gold alignments (Luong et al. report AER for their variants) and the share of exactly "
    "zero attention weights.",
  ),
  "embedded_alignment": StudyPage(
    "Attention trained to align, on the embedded corpus",
    "Alignment features and decoding-time coverage against the additive model, with the "
    "corpus's gold alignments.",
    early="alignment",
  ),
  "embedded_structures": StudyPage(
    "Where attention may look, on the embedded corpus",
    "Attention structures against soft attention, on the test split and its long sentences.",
    early="structures",
  ),
  "alignment": StudyPage(
    "Attention trained to align (early study)",
    "The first alignment study, on the embedded corpus, early in training.",
  ),
  "structures": StudyPage(
    "Attention structures (early study)",
    "The first structures study, on the embedded corpus, early in training.",
  ),
  "sweep": StudyPage(
    "Score functions on the embedded corpus, early in training",
    "The six score functions after a short budget: how fast models start, not where they end.",
  ),
}

"""Training and decoding speed (`python -m experiments.benchmark`), and the cost of
intra-attention."""

from __future__ import annotations

from experiments.lib.pages.study import StudyPage

STUDIES = {
  "benchmark": StudyPage(
    "Training and decoding speed",
    "Throughput at the benchmark config beside an idiomatic PyTorch RNNsearch, on the "
    "development CPU, and once on a GPU.",
  ),
  "intra_timing": StudyPage(
    "Intra-attention timing",
    "The cost of intra-attention per update.",
  ),
}

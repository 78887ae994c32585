"""The Multi30k studies of `python -m experiments.sweep` (scores, features, structures, copying,
lexicons, sources, decoders, normalisers): their titles and prose, the studies each repeats with one
thing changed, and the score study's attention sharpness."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.lib.pages.study import StudyPage


def sharpness_conclusion(study: Path) -> list[str]:
  path = study / "attention_sharpness.json"
  if not path.exists():
    return []
  points = json.loads(path.read_text())["points"]
  trained = {n: p["trained_relative_entropy"][0] for n, p in points.items()}
  order = sorted(trained, key=trained.get)
  text = ", ".join(f"`{n}` {trained[n]:.3f}" for n in order)
  out = [
    "Attention after training, relative entropy of its rows (1: uniform, 0: one word; "
    f"`attention_sharpness.json`), sharpest first: {text}."
  ]
  for name, p in points.items():
    if "trained_score_sharpness" in p:
      m, s = p["trained_score_sharpness"]
      out.append(f"`{name}`'s learned scale ends at {m:.2f} ± {s:.2f}.")
  return out


# Where a study repeats another with one thing changed (`counterpart`): the en→de score study
# against the en→fr one; the scores and normalisers in Luong's decoder against the paper's.
STUDIES = {
  "multi30k_scores": StudyPage(
    "Score functions on Multi30k English→French",
    "The six alignment score functions (additive, dot, general, scaled, cosine, location) on "
    "real text, three seeds each, trained to where the additive baseline has flattened.",
    conclusion=sharpness_conclusion,
  ),
  "multi30k_scores_en_de": StudyPage(
    "Score functions on Multi30k English→German",
    "The same six score functions on the second language pair, to see whether the ranking "
    "found into French transfers.",
    counterpart=("multi30k_scores", "into French"),
  ),
  "multi30k_features": StudyPage(
    "Alignment features on Multi30k",
    "Coverage (a running sum of past attention in the keys), previous attention and both, on "
    "the additive score; the additive runs are linked in as the baseline.",
  ),
  "multi30k_structures": StudyPage(
    "Where attention may look, on Multi30k",
    "Local-p (a predicted window with a Gaussian prior) and multi-head additive attention "
    "against soft attention over the whole source.",
  ),
  "multi30k_copy": StudyPage(
    "Copying and unknown-word replacement on Multi30k",
    "A copy mechanism and `<unk>` replacement, each on and off: what they do to the words "
    "outside the target vocabulary.",
  ),
  "multi30k_copy_eos": StudyPage(
    "Where copying sends the attention on the source EOS",
    "A copying run trained with the source EOS copied as the target EOS, decoded that way and "
    "with that attention copied as nothing (`model.copy_eos`): output length and BLEU, on which "
    "the default was chosen (validation rows only).",
  ),
  "multi30k_lexicon": StudyPage(
    "Lexicon bias on Multi30k (all training pairs)",
    "A lexical translation table added to the output's logits, against none.",
  ),
  "multi30k_lexicon_5k": StudyPage(
    "Lexicon bias on Multi30k (5,000 training pairs)",
    "The lexicon bias where the training data is small.",
  ),
  "multi30k_multi_source": StudyPage(
    "Two sources on Multi30k",
    "German→French, and English and German together into French, against English→French.",
  ),
  "multi30k_intra": StudyPage(
    "Intra-attention on Multi30k",
    "The decoder attending over its own earlier states, against the plain model.",
  ),
  "multi30k_luong": StudyPage(
    "Luong et al.'s Table 4 on Multi30k",
    "Luong, Pham and Manning (2015)'s decoder (two LSTM layers, input feeding) with global "
    "attention (location, dot, general) and local-m and local-p attention (dot, general), "
    "three seeds each; everything but the decoder as in the score study.",
  ),
  "multi30k_luong_scores": StudyPage(
    "The six score functions in Luong's decoder",
    "The score study repeated with Luong et al.'s decoder, queried by the new top-layer state "
    "h_t instead of s_{i-1}: whether the ranking of the scores depends on the decoder.",
    counterpart=("multi30k_scores", "in the paper's decoder"),
  ),
  "multi30k_normalisers": StudyPage(
    "Attention normalisers in the paper's decoder",
    "Softmax, sparsemax and 1.5-entmax with the additive score, three seeds each.",
  ),
  "multi30k_luong_normalisers": StudyPage(
    "Attention normalisers in Luong's decoder",
    "Softmax, sparsemax and 1.5-entmax with the additive score in Luong et al.'s decoder.",
    counterpart=("multi30k_normalisers", "in the paper's decoder"),
  ),
  "multi30k_luong_none": StudyPage(
    "Luong's decoder without attention",
    "The ladder's first rung: the fixed summary of the encoder in place of the context.",
  ),
  "multi30k_luong_feeding": StudyPage(
    "Input feeding in Luong's decoder",
    "Global location attention with and without feeding h~_{t-1} to the next step.",
  ),
  "multi30k_luong_depth": StudyPage(
    "One or two layers in Luong's decoder",
    "Local-p attention with the general score in a decoder of one and of two LSTM layers.",
  ),
  "multi30k_subword": StudyPage(
    "Subword regularisation on Multi30k",
    "SentencePiece unigram vocabularies of 8,000 pieces, each training batch segmented by "
    "sampling (Kudo 2018: alpha 0.1 over the 64 best segmentations) against the deterministic "
    "segmentation; validation and test always deterministic. Three seeds each.",
  ),
  "multi30k_guided": StudyPage(
    "Guided alignment on Multi30k",
    "Attention supervised by eflomal's links of the training split (grow-diag-final-and; "
    "experiments/alignments/multi30k.en-fr.train.align) against the plain model, which reads "
    "the same config but for the loss term. "
    "Three seeds each; twin peaks measure whether attention finds the source word an output "
    "word is spelled like.",
  ),
}

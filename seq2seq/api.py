"""The Python API: a trained run as an object that translates and scores, on the code paths of
main.py's translate and score modes (`seq2seq.translate`).

    import seq2seq
    t = seq2seq.load("runs/demo")
    [best, second] = t.translate(["the cat sleeps ."], beam_size=5, nbest=2)[0]
    print(best.text, best.score, best.norm_score, best.attention.shape)
    [pair] = t.score(["the cat sleeps ."], [best.text])  # pair.score == best.score
"""

from __future__ import annotations

from pathlib import Path

import ml_collections

from seq2seq import checkpoints, translate
from seq2seq.decoding.inference import Hypothesis, Scored
from seq2seq.translate import Translator

__all__ = ["Hypothesis", "Scored", "Translator", "load"]


def load(workdir: str | Path, config: ml_collections.ConfigDict | None = None) -> Translator:
  """The run in `workdir`, ready to translate and score: its saved config (WORKDIR/config.json,
  or `config` when given, e.g. with other `decode` settings) and its best checkpoint (by
  validation BLEU, or early stopping's metric), else its latest (`restoring.restore_for_eval`)."""
  if config is None:
    config = checkpoints.load_config(workdir)
  return translate.Translator(config, workdir)

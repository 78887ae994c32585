"""seq2seq-attention: RNNsearch, RNNencdec and alignment models in JAX/Flax NNX.

`seq2seq.load(workdir)` returns a trained run that translates and scores (`seq2seq.api`).
"""

from typing import Any


def __getattr__(name: str) -> Any:
  # Lazily, so that importing one submodule (a tokenizer, the corpus generator) stays light.
  if name == "load":
    from seq2seq.api import load

    return load
  raise AttributeError(f"module 'seq2seq' has no attribute {name!r}")

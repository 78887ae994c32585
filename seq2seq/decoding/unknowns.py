"""Attention-based unknown-word replacement, on the host (Jean et al. 2015; Luong et al. 2015)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from seq2seq.data.tokenizer import UNK_ID


def replace_unknowns(
  tokens: Sequence[Any],
  alpha: Any,
  src_tokens: Sequence[Any],
  unk_id: Any = UNK_ID,
  dictionary: Mapping[Any, Any] | None = None,
) -> list[Any]:
  """Host-side unknown-word replacement by attention (Jean et al. / Luong et al. style).

  tokens: one output [L] (ids or words); alpha: its attention [L, S]; src_tokens: the real
  source words [S'] (ids or words, S' <= S; no EOS: the columns past S', the source EOS and
  padding, are never copied). Every item equal to `unk_id` becomes the source token at
  argmax_j alpha[i, j] over j < S', translated through `dictionary` when it has an entry; with
  no source words it stays as it is. For a batch, pass tokens [B, L], alpha [B, L, S] and one
  source sequence per sentence: the result is then one list per sentence.
  """
  alpha = np.asarray(alpha)
  if alpha.ndim == 3:
    return [
      replace_unknowns(t, a, s, unk_id, dictionary)
      for t, a, s in zip(tokens, alpha, src_tokens, strict=True)
    ]
  src = list(src_tokens)
  out = []
  for i, tok in enumerate(np.asarray(tokens).tolist()):
    if tok == unk_id and src:
      word = src[int(np.argmax(alpha[i, : len(src)]))]
      tok = dictionary.get(word, word) if dictionary is not None else word
    out.append(tok)
  return out

"""Decoding over a shortlist: a lexical table's candidate words for the batch or for each
sentence (`decode.shortlist`, `seq2seq.data.lexicon`), the output layer run over them only."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax


class ShortlistEncoded(NamedTuple):
  """A shortlisted model's encoding: the model's own, and the mask of each sentence's
  candidates, which beam search tiles with the rest."""

  inner: Any  # What the model's `encode` returned.
  mask: jax.Array  # [B, S] the source mask (the search reads it).
  init_state: Any  # The model's initial decoder state.
  allowed: jax.Array | None  # [B, N] bool: the sentence's own candidates; None: all N.


class Shortlisted:
  """A model decoded over a shortlist `ids` [N] (`lexicon.shortlist`: the specials first, at
  their own positions): the search works in candidate indices, so PAD, BOS, EOS and UNK keep
  their ids; the embedding reads the candidate's word id and the output layer runs over the N
  candidates only, the softmax normalised over them (or over a sentence's own candidates,
  `allowed_BN`). Map the output back with `ids[tokens]`."""

  def __init__(self, model: Any, ids_N: jax.Array, allowed_BN: jax.Array | None = None):
    self.model, self.ids, self.allowed = model, ids_N, allowed_BN
    self.uses_attention = model.uses_attention

  def encode(self, src_BS, src_mask_BS, **kwargs):
    enc = self.model.encode(src_BS, src_mask_BS, **kwargs)
    return ShortlistEncoded(enc, enc.mask, enc.init_state, self.allowed)

  def decoder_step(self, enc: ShortlistEncoded, state, y_prev_B):
    return self.model.decoder_step(
      enc.inner, state, self.ids[y_prev_B], output_ids=self.ids, output_mask=enc.allowed
    )

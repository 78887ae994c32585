"""Copying from the source (pointer-generator, See et al. 2017; Gu et al. 2016), the add-on
`model.addons=copy`.

At step i the model mixes its vocabulary distribution with the attention:

  p(w) = p_gen p_vocab(w) + (1 - p_gen) sum_{j: x_j -> w} alpha_ij,
  p_gen = sigmoid(w_g^T [c_i ; s ; E y_{i-1}] + b_g)

(s: the state the deep output reads), over an *extended* vocabulary of V + S entries: the V target
words, then one entry per source position. Source position j sends its attention to

* the target id of the same word when the target vocabulary has it (`vocab_map`: source id ->
  target id by spelling, -1 where the target side lacks it), so copying "Paris" raises the
  ordinary id of "Paris";
* else the extended id V + j', j' the first position holding the same source id (repeated
  words pool their attention); a source <unk> keeps its own position, since the model cannot
  tell two unknown words apart.

Training targets (`copy_targets`, built by the input pipeline into `tgt_out`): a target word
outside the target vocabulary becomes V + j for the first source position j spelled the same,
so the model learns to produce it by copying; one that is nowhere in the source stays <unk>.
Decoder inputs stay ordinary ids (an extended id is fed back as <unk>), and the output text
reads an extended id V + j as source token j (`output_tokens`). The vocabulary map is stored
with the parameters (never trained), so every workdir decodes without its data.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from seq2seq.common import registry
from seq2seq.data import tokenizer as tok

COPY_EPS = 1e-20  # Floor of the copy mass inside the log: exact 0 would give -inf on both sides.
COPY_EOS = ("target", "null")  # `copy(eos=...)`: see `mix`.
ADDON = "copy"  # The add-on's name in `model.addons` (`seq2seq.model.addons.Copying`).


def asked(addons: str) -> bool:
  """Whether a `model.addons` string lists copying (what the data needs to know: its training
  targets are copying targets). The model parses the list itself (`addons.specs`)."""
  parts = registry.split_top_level(str(addons), "+")
  return any(part.split("(", 1)[0].strip() == ADDON for part in parts)


def vocab_map(src_tok: tok.Tokenizer, tgt_tok: tok.Tokenizer) -> np.ndarray:
  """[V_src] int32: the target id of each source id's token (same spelling), -1 where the target
  vocabulary lacks it; PAD, BOS and EOS map to themselves, UNK to -1."""
  ids = np.arange(tok.NUM_SPECIALS, src_tok.size)
  pieces = [src_tok.decode_tokens([int(i)])[0] for i in ids]
  target = np.asarray(tgt_tok.encode_tokens(pieces), np.int64)
  out = np.full(src_tok.size, -1, np.int32)
  out[ids] = np.where(target == tok.UNK_ID, -1, target)
  out[[tok.PAD_ID, tok.BOS_ID, tok.EOS_ID]] = [tok.PAD_ID, tok.BOS_ID, tok.EOS_ID]
  return out


def copy_targets(
  tgt_ids: Sequence[int], tgt_tokens: Sequence[str], src_tokens: Sequence[str], vocab: int
) -> list[int]:
  """The training targets of one pair: `tgt_ids` with each <unk> whose token is spelled like a
  source token replaced by V + (its first source position)."""
  first: dict[str, int] = {}
  for j, token in enumerate(src_tokens):
    first.setdefault(token, j)
  return [
    vocab + first[t] if i == tok.UNK_ID and t in first else int(i)
    for i, t in zip(tgt_ids, tgt_tokens, strict=True)
  ]


def extended_ids(src_BS: jax.Array, map_V: jax.Array, vocab: int) -> jax.Array:
  """[B, S] int32: the extended-vocabulary entry each source position's attention goes to."""
  mapped = map_V[src_BS]
  positions = jnp.arange(src_BS.shape[1], dtype=jnp.int32)
  first = jnp.argmax(src_BS[:, :, None] == src_BS[:, None, :], axis=-1).astype(jnp.int32)
  own = jnp.where(src_BS == tok.UNK_ID, positions[None, :], first)
  return jnp.where(mapped >= 0, mapped, vocab + own).astype(jnp.int32)


def mix(
  logits: jax.Array,
  alpha: jax.Array,
  gate_logit: jax.Array,
  ext_BS: jax.Array,
  *,
  null_eos: bool = False,
) -> jax.Array:
  """log p(w) over the extended vocabulary [..., V + S] (float32) from the vocabulary logits
  [..., V], the attention [..., S] and the gate's logit [...] (p_gen = sigmoid of it); leading
  axes B (and T in training).

  The source EOS maps to the target EOS, so its attention is copied as EOS
  (`copy(eos=target)`). RNNsearch models also use the source EOS as a null position to rest
  attention on, and See et al.'s sources have no EOS at all; with `null_eos` its mass a_eos is
  copied as nothing and generates instead: p(w) = (p_gen + (1 - p_gen) a_eos) p_vocab(w) +
  (1 - p_gen) sum over the other positions (`copy(eos=null)`)."""
  lead, vocab, src_len = logits.shape[:-1], logits.shape[-1], alpha.shape[-1]
  ext = ext_BS.reshape(ext_BS.shape[:1] + (1,) * (alpha.ndim - 2) + ext_BS.shape[1:])
  ext = jnp.broadcast_to(ext, alpha.shape).reshape(-1, src_len)
  rows = alpha.astype(jnp.float32).reshape(-1, src_len)
  gate = gate_logit.astype(jnp.float32)[..., None]
  log_generate = jax.nn.log_sigmoid(gate)
  if null_eos:
    at_eos = ext == tok.EOS_ID
    null_mass = jnp.sum(jnp.where(at_eos, rows, 0.0), axis=-1).reshape(*lead, 1)
    rows = jnp.where(at_eos, 0.0, rows)
    log_null = jax.nn.log_sigmoid(-gate) + jnp.log(null_mass + COPY_EPS)
    log_generate = jnp.logaddexp(log_generate, log_null)
  width = vocab + src_len
  mass = jax.vmap(lambda i, a: jnp.zeros(width, jnp.float32).at[i].add(a))(ext, rows)
  from_vocab = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1) + log_generate
  from_vocab = jnp.concatenate([from_vocab, jnp.full((*lead, src_len), -jnp.inf)], axis=-1)
  from_copy = jnp.log(mass.reshape(*lead, width) + COPY_EPS) + jax.nn.log_sigmoid(-gate)
  return jnp.logaddexp(from_vocab, from_copy)


def output_tokens(ids: Sequence[int], src_tokens: Sequence[str], tgt_tok: tok.Tokenizer) -> list:
  """The tokens of an output of extended ids (cut at EOS, PAD and BOS dropped): V + j is source
  token j (<unk> past the real source words)."""
  kept = tok.strip_specials(ids)
  vocab = tgt_tok.size
  tokens = tgt_tok.decode_tokens([i if i < vocab else tok.UNK_ID for i in kept])
  for k, i in enumerate(kept):
    if i >= vocab and i - vocab < len(src_tokens):
      tokens[k] = src_tokens[i - vocab]
  return tokens

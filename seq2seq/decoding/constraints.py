"""Lexically constrained beam search: outputs that must contain given words or phrases.

A sentence's constraints are phrases of target token ids; every phrase must appear in the output,
its tokens contiguous and in order, in any order of phrases. Beam search tracks, per hypothesis,
which constraint tokens it has met (`Progress`) and allocates its K live slots over banks by that
count, after dynamic beam allocation (Post and Vilar 2018):

* every extension of a live hypothesis by any word is a candidate, with the count of constraint
  tokens it meets afterwards (`met_after`): a word that starts an unmet phrase or continues the
  phrase in progress meets one more; a word that breaks off a phrase in progress keeps the
  longest start of that phrase that still ends the output and gives back the rest (Knuth, Morris
  and Pratt's failure function, so 4 4 4 3 holds the phrase 4 4 3); keeping nothing, the word
  may start another phrase;
* a sentence with c constraint tokens has c + 1 banks, one per count; each bank keeps its best
  floor(K / (c + 1)) candidates, the remainder going to the bank of complete hypotheses, and the
  slots a bank cannot fill go to the best candidates left in any bank (`allocate`). Post and
  Vilar choose among the top K extensions, each hypothesis's best one and the extensions by
  constraint tokens; here every extension competes, a superset of theirs;
* an extension by EOS is allowed only once every constraint is met, and an extension is dropped
  when the constraint tokens it still lacks no longer fit before the length limit (`room`), so
  the search always ends with hypotheses that meet every constraint when the limit leaves room
  for them (`needed_length`; the callers check it before decoding).

Sentences of a batch may have different numbers of constraint tokens: the arrays hold C slots, a
sentence's unused ones are padding that counts as met from the start. With no constraints at all
a sentence is searched exactly as plain beam search searches it.

Phrases take disjoint words of the output, and one phrase is followed at a time. Where phrases
differ but share a word, an output may hold them in a way the tracker does not follow (for 4 4 3
and 4 5, the output 4 5 4 4 3 when 4 4 3 is listed first): the search then finds another output.

Axes: B batch, N hypotheses (B * K rows), C constraint slots, V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from seq2seq.data.tokenizer import PAD_ID

# The constraint slots of a batch are a multiple of this, so few shapes compile.
SLOT_STEP = 4


class Constraints(NamedTuple):
  """A batch's constraints, phrase after phrase in C slots per sentence (rows B, or N once tiled
  over the beam)."""

  tokens: jax.Array  # [B, C] int32: the constraint tokens, PAD in padding slots.
  start: jax.Array  # [B, C] int32: the slot of each token's phrase's first token (padding: itself).
  last: jax.Array  # [B, C] bool: the token ends its phrase (padding: True).
  padding: jax.Array  # [B, C] bool: a slot no constraint uses (met from the start).
  # [B, C, C] bool, [s, u]: with slot s next in its phrase, a word equal to slot u's token that
  # breaks the phrase off leaves its slots up to u met (the phrase's start through u is still a
  # suffix of the output); the largest such u wins (`fallback_table`).
  fallback: jax.Array


class Progress(NamedTuple):
  """What a hypothesis has met: the slots met and the phrase in progress."""

  met: jax.Array  # [N, C] bool.
  next: jax.Array  # [N] int32: the slot of the next token of the phrase in progress; -1: none.


def needed_length(phrases: Sequence[Sequence[int]]) -> int:
  """The fewest output positions that can hold every phrase and EOS."""
  return sum(len(p) for p in phrases) + 1


def fallback_table(phrase: Sequence[int]) -> np.ndarray:
  """[n, n] bool for a phrase of n tokens, [j, u] (u < j): after its first j tokens, a word equal
  to token u that breaks it leaves the first u + 1 met, since the u tokens before it end the
  output too. The largest such u is Knuth-Morris-Pratt's next state."""
  n = len(phrase)
  table = np.zeros((n, n), bool)
  for j in range(1, n):
    for u in range(j):
      table[j, u] = list(phrase[:u]) == list(phrase[j - u : j])
  return table


def pack(per_sentence: Sequence[Sequence[Sequence[int]]]) -> Constraints:
  """The host-side arrays of each sentence's phrases (lists of token ids; a sentence may have
  none), C the most tokens of any sentence rounded up to a multiple of `SLOT_STEP`."""
  used = [sum(len(p) for p in phrases) for phrases in per_sentence]
  slots = max(SLOT_STEP, -(-max(used, default=0) // SLOT_STEP) * SLOT_STEP)
  b = len(per_sentence)
  tokens = np.full((b, slots), PAD_ID, np.int32)
  start = np.tile(np.arange(slots, dtype=np.int32), (b, 1))
  last = np.ones((b, slots), bool)
  padding = np.ones((b, slots), bool)
  fallback = np.zeros((b, slots, slots), bool)
  for row, phrases in enumerate(per_sentence):
    at = 0
    for phrase in phrases:
      if not phrase:
        raise ValueError("a constraint phrase holds no token")
      n = len(phrase)
      tokens[row, at : at + n] = phrase
      start[row, at : at + n] = at
      last[row, at : at + n - 1] = False
      padding[row, at : at + n] = False
      fallback[row, at : at + n, at : at + n] = fallback_table(phrase)
      at += n
  return Constraints(tokens, start, last, padding, fallback)


def initial(cons: Constraints) -> Progress:
  """Nothing met but the padding, no phrase in progress."""
  return Progress(cons.padding, jnp.full(cons.tokens.shape[:1], -1, jnp.int32))


def _take(x_NC: jax.Array, slot_N: jax.Array) -> jax.Array:
  return jnp.take_along_axis(x_NC, slot_N[:, None], axis=1)[:, 0]


def _phrase_firsts(cons: Constraints) -> jax.Array:
  """[N, C] bool: the slots that open a phrase (padding too: it is met, so never opens one)."""
  return cons.start == jnp.arange(cons.start.shape[1])


def _fallback(cons: Constraints, prog: Progress) -> jax.Array:
  """[N, C] bool: the slots a word may fall back to when it breaks the phrase in progress."""
  rows = jnp.arange(prog.next.shape[0])
  return cons.fallback[rows, jnp.maximum(prog.next, 0)] & (prog.next >= 0)[:, None]


def met_after(cons: Constraints, prog: Progress, vocab: int) -> jax.Array:
  """[N, V] int32: the constraint slots each hypothesis meets after each next word."""
  n, c = prog.met.shape
  rows_N1 = jnp.arange(n)[:, None]
  count_N = prog.met.sum(-1, dtype=jnp.int32)
  opens_NC = _phrase_firsts(cons) & ~prog.met
  opens_NV = (
    jnp.zeros((n, vocab), jnp.int32).at[rows_N1, cons.tokens].max(opens_NC.astype(jnp.int32))
  )
  going_N = prog.next >= 0
  j_N = jnp.maximum(prog.next, 0)
  first_N = _take(cons.start, j_N)
  continues_NV = going_N[:, None] & (jnp.arange(vocab) == _take(cons.tokens, j_N)[:, None])
  # Broken off, the phrase keeps the slots of its longest fallback (none: another may open).
  kept_NC = jnp.where(_fallback(cons, prog), jnp.arange(c) + 1 - first_N[:, None], 0)
  kept_NV = jnp.zeros((n, vocab), jnp.int32).at[rows_N1, cons.tokens].max(kept_NC)
  given_back_N = jnp.where(going_N, j_N - first_N, 0)
  broken_NV = jnp.where(kept_NV > 0, kept_NV, opens_NV) - given_back_N[:, None]
  return count_N[:, None] + jnp.where(continues_NV, 1, broken_NV)


def advance(cons: Constraints, prog: Progress, tok_N: jax.Array) -> Progress:
  """Each hypothesis's progress after its next word tok_N [N] (as `met_after` counts it)."""
  n, c = prog.met.shape
  rows = jnp.arange(n)
  going_N = prog.next >= 0
  j_N = jnp.maximum(prog.next, 0)
  continues_N = going_N & (tok_N == _take(cons.tokens, j_N))
  met_cont = prog.met.at[rows, j_N].set(True)
  next_cont = jnp.where(_take(cons.last, j_N), -1, j_N + 1)
  # Otherwise a phrase in progress is broken off: it keeps its slots up to the fallback u this
  # word fits (the largest), and the rest are unmet again; with none, another phrase may open.
  slots_C = jnp.arange(c)
  fits_NC = _fallback(cons, prog) & (cons.tokens == tok_N[:, None])
  falls_N = fits_NC.any(-1)
  u_N = jnp.max(jnp.where(fits_NC, slots_C, -1), axis=-1)
  same_phrase_NC = cons.start == _take(cons.start, j_N)[:, None]
  given_back_NC = going_N[:, None] & same_phrase_NC & (slots_C > u_N[:, None])
  met_broken = prog.met & ~given_back_NC
  opens_NC = (
    ~falls_N[:, None] & _phrase_firsts(cons) & ~met_broken & (cons.tokens == tok_N[:, None])
  )
  opens_N = opens_NC.any(-1)
  first_N = jnp.argmax(opens_NC, axis=-1)
  met_open = jnp.where(opens_N[:, None], met_broken.at[rows, first_N].set(True), met_broken)
  next_open = jnp.where(opens_N & ~_take(cons.last, first_N), first_N + 1, -1)
  next_broken = jnp.where(falls_N, u_N + 1, next_open)
  return Progress(
    jnp.where(continues_N[:, None], met_cont, met_open),
    jnp.where(continues_N, next_cont, next_broken).astype(jnp.int32),
  )


def room(count_NV: jax.Array, slots: int, t: int | jax.Array, max_len: int) -> jax.Array:
  """[N, V] bool: extensions at step t (filling position t) that can still meet every constraint
  and end within `max_len` positions: the tokens they lack, then EOS, fit in what is left. An
  extension lacking nothing always may (at the last position too, as in plain beam search)."""
  lacking = slots - count_NV
  return (lacking == 0) | (lacking <= max_len - t - 2)


def allocate(rank_BM: jax.Array, count_BM: jax.Array, cons_B: Constraints, k: int) -> jax.Array:
  """[B, K] the indices (into M) of the K candidates the beam keeps, by bank (the module
  docstring): rank_BM is what they are ranked by (-inf: not allowed), count_BM the constraint
  slots each meets; cons_B the batch's constraints (rows B)."""
  slots = cons_B.tokens.shape[1]
  real_B = (~cons_B.padding).sum(-1)  # c: a sentence's banks are counts slots - c .. slots.
  share_B = k // (real_B + 1)
  banks = []
  for count in range(slots + 1):  # Each bank's best K, best first.
    value, index = jax.lax.top_k(jnp.where(count_BM == count, rank_BM, -jnp.inf), k)
    quota_B = jnp.where(slots - count <= real_B, share_B, 0)
    quota_B = quota_B + jnp.where(count == slots, k - share_B * (real_B + 1), 0)
    kept = (jnp.arange(k) < quota_B[:, None]) & jnp.isfinite(value)
    banks.append((value, index, kept))
  value, index, kept = (jnp.concatenate(parts, axis=1) for parts in zip(*banks, strict=True))
  # Kept first, then the best of the rest; a stable sort keeps top_k's order among equals.
  order = jnp.lexsort((-value, ~kept), axis=-1)[:, :k]
  return jnp.take_along_axis(index, order, axis=1)

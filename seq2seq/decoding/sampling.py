"""Sampling translations from the model: ancestral sampling with temperature, top-k, nucleus
(top-p) and epsilon truncation, N samples per sentence.

`decode.sampling` names it: "" decodes by search (greedy or beam); a spec

    sample(n=16, temperature=1.0, top_k=0, top_p=1.0, epsilon=0.0, seed=0)

draws `n` outputs per sentence instead, each word from the model's next-word distribution
(PAD and BOS never, UNK never with the No-UNK protocol) after these changes, in this order:

* `temperature` T > 0 divides the logits (T < 1 sharpens, T > 1 flattens);
* `top_k` K > 0 keeps the K most probable words (Fan et al. 2018), exactly K: of words tied
  with the K-th, those of lowest id; 0 keeps all;
* `top_p` p in (0, 1] keeps the smallest set of most probable words whose probabilities sum to
  at least p (nucleus sampling, Holtzman et al. 2020); 1 keeps all;
* `epsilon` e in [0, 1) drops every word of probability below e (Hewitt et al. 2022); 0 keeps
  all.

Each truncation reads the distribution left by the ones before it and always keeps the most
probable word, so top_k=1 (or a tiny top_p) is greedy search. A sample's `scores` are the sum of
its words' log-probabilities under the model itself (temperature 1, nothing truncated), what
forced decoding (`--mode=score`) reports for the same output; the samples of a sentence come
back best first by the ranking score beam search would give them.

The random stream of a sample depends only on `seed`, the sentence's own tokens and the
sample's index, not on the batch, the sentence's place in it or its padding: a sentence gets the
same samples alone or in any batch.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from seq2seq.common import registry

FIELD = "decode.sampling"


@dataclasses.dataclass(frozen=True)
class Sampling:
  """The settings of `decode.sampling` (hashable: a static argument of the jitted decoder)."""

  n: int = 1
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  epsilon: float = 0.0
  seed: int = 0

  def __post_init__(self):
    if self.n < 1:
      raise ValueError(f"n must be at least 1, got {self.n}")
    if not self.temperature > 0:
      raise ValueError(f"temperature must be > 0, got {self.temperature}")
    if self.top_k < 0:
      raise ValueError(f"top_k must be >= 0 (0: off), got {self.top_k}")
    if not 0 < self.top_p <= 1:
      raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
    if not 0 <= self.epsilon < 1:
      raise ValueError(f"epsilon must be in [0, 1), got {self.epsilon}")

  def __str__(self) -> str:
    return str(registry.Spec("sample", self))


def parse(text: str | Sampling | None) -> Sampling | None:
  """The sampling a `decode.sampling` spec names; None for "" (decode by search)."""
  usage = "'' (search) or sample(n=..., temperature=..., ...)"
  return registry.optional_settings(Sampling, "sample", text, FIELD, usage)


def truncated_logits(logits_NV: jax.Array, banned_V: jax.Array, sampling: Sampling) -> jax.Array:
  """The logits [N, V] float32 that the next word is drawn from (a categorical over them):
  banned words, then each truncation of `sampling` (see the module docstring), at -inf."""
  logits = jnp.where(banned_V, -jnp.inf, logits_NV.astype(jnp.float32) / sampling.temperature)
  if sampling.top_k:  # Exactly K words: of words tied with the K-th, those of lowest id.
    _, top_NK = jax.lax.top_k(logits, min(sampling.top_k, logits.shape[-1]))
    rows = jnp.arange(logits.shape[0])[:, None]
    keep = jnp.zeros(logits.shape, bool).at[rows, top_NK].set(True)
    logits = jnp.where(keep, logits, -jnp.inf)
  if sampling.top_p < 1:
    probs = jax.nn.softmax(logits, axis=-1)
    order = jnp.argsort(-probs, axis=-1)
    sorted_probs = jnp.take_along_axis(probs, order, axis=-1)
    # A word stays when the words more probable than it sum to less than p (the first always).
    before = jnp.cumsum(sorted_probs, axis=-1) - sorted_probs
    keep_sorted = before < sampling.top_p
    keep = (
      jnp.zeros_like(keep_sorted).at[jnp.arange(logits.shape[0])[:, None], order].set(keep_sorted)
    )
    logits = jnp.where(keep, logits, -jnp.inf)
  if sampling.epsilon:
    probs = jax.nn.softmax(logits, axis=-1)
    best = probs.max(axis=-1, keepdims=True)
    logits = jnp.where((probs < sampling.epsilon) & (probs < best), -jnp.inf, logits)
  return logits


def sentence_keys(seed: int, src_BS: jax.Array, src_mask_BS: jax.Array) -> jax.Array:
  """One random key per sentence [B], from `seed` and a hash of the sentence's real tokens in
  order (padding, wherever it sits, changes nothing)."""
  rank_BS = (jnp.cumsum(src_mask_BS, axis=1) - 1).astype(jnp.uint32)
  # A polynomial hash in uint32 arithmetic (it wraps): sum_j (tok_j + 1) * 1000003^rank_j.
  powers_BS = jnp.power(jnp.uint32(1000003), rank_BS)
  terms_BS = (src_BS.astype(jnp.uint32) + 1) * powers_BS * (src_mask_BS > 0).astype(jnp.uint32)
  hash_B = terms_BS.sum(axis=1, dtype=jnp.uint32)
  root = jax.random.key(seed)
  return jax.vmap(lambda h: jax.random.fold_in(root, h))(hash_B)


def sample_keys(seed: int, src_BS: jax.Array, src_mask_BS: jax.Array, n: int) -> jax.Array:
  """The keys of every sample [B * n], row b * n + i being sample i of sentence b."""
  per_sentence = sentence_keys(seed, src_BS, src_mask_BS)
  fold = jax.vmap(lambda key: jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(n)))
  return fold(per_sentence).reshape(-1)


def draw(keys_N: jax.Array, t: jax.Array, logits_NV: jax.Array) -> jax.Array:
  """Each row's word [N] int32 at step `t`, from its own key's stream."""
  step_keys = jax.vmap(lambda key: jax.random.fold_in(key, t))(keys_N)
  return jax.vmap(jax.random.categorical)(step_keys, logits_NV).astype(jnp.int32)

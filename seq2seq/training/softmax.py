"""The output softmax of training: over the whole target vocabulary, or over a sampled candidate
set (Jean, Cho, Memisevic and Bengio 2015, "On Using Very Large Target Vocabulary for Neural
Machine Translation").

Axes: B batch, T target positions, V target vocabulary, N candidates.

`train.softmax` names it with its settings (a spec, `seq2seq.common.registry`):

* `full` (default): logits over all V words.
* `sampled(size=4096)`: per batch, a candidate set V' of `size` words: every target word of the
  batch (so each reference word has its logit), EOS and UNK, and the remaining slots filled with
  words drawn uniformly without replacement from the rest of the vocabulary. The deep output's
  last matmul and the softmax then run over V' only: logits [B, T, N] = t W_o[:, V'] + b[V'].
  This is the per-batch form of Jean et al.'s scheme (theirs partitions the training data and
  takes the words of each partition). Like theirs it subtracts no log Q(y) from the logits:
  Jean et al. drop the proposal's correction by choice (their Q is uniform over the partition's
  words, so it would be one constant), and the loss is the plain cross-entropy of the softmax
  restricted to V'. The reference words are remapped to their positions in V'. A batch with
  more distinct target words than `size` keeps EOS, UNK and a uniformly random `size - 2` of
  its other target words (not the most frequent or the lowest ids: every word is equally
  likely to be left out), leaves the surplus out of the loss and counts it in the metric
  "sampled_missing" (raise `size` when it is not 0). Label smoothing spreads over V'.

The training loss this gives is over V', not over the vocabulary, and is lower than the full
cross-entropy of the same parameters: training logs it as "sampled_loss" (metrics.jsonl, the
console, TensorBoard), never as "loss", so no curve sets it beside the full-vocabulary
validation loss as if alike. Validation loss, decoding and evaluation always use the full
softmax (`train_state.eval_step` and `seq2seq.decoding.decode` call the model without candidates).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from seq2seq.common import registry
from seq2seq.data import tokenizer


class Softmax:
  """The protocol: `candidates(batch, vocab, rng)` -> (output ids [N] or None for all words,
  the batch with `tgt_out` / `tgt_mask` mapped onto them, metrics)."""

  name: ClassVar[str]
  Settings: ClassVar[type] = registry.NoSettings
  uses_rng: ClassVar[bool] = False  # Training must hand the pass a random key.
  loss_metric: ClassVar[str] = "loss"  # What training logs its loss as.

  def __init__(self, settings: Any):
    self.settings = settings

  def candidates(
    self, batch: dict[str, jax.Array], vocab: int, rng: jax.Array | None
  ) -> tuple[jax.Array | None, dict[str, jax.Array], dict[str, jax.Array]]:
    return None, batch, {}

  def __eq__(self, other):  # Static under jit: equal settings, equal softmax.
    return type(self) is type(other) and self.settings == other.settings

  def __hash__(self):
    return hash((type(self), self.settings))


REGISTRY: registry.Registry[Softmax] = registry.Registry("softmax", field="train.softmax")
register = REGISTRY.register
names = REGISTRY.names


def make(spec: str | registry.Spec) -> Softmax:
  """The softmax a `train.softmax` spec names."""
  parsed = REGISTRY.spec(spec)
  return REGISTRY.get(parsed.name)(parsed.settings)


@register("full")
class Full(Softmax):
  """Logits over the whole target vocabulary."""


def candidate_ids(
  targets_BT: jax.Array, mask_BT: jax.Array, vocab: int, size: int, rng: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """(candidate ids [N], number of distinct target words left out): EOS and UNK, the batch's
  target words, then uniformly drawn other words. N = min(size, vocab) (static). When the
  target words do not fit, a uniformly random subset of them is kept."""
  size = min(size, vocab)
  ids = jnp.where(mask_BT.astype(bool), targets_BT, vocab).reshape(-1)  # Padding -> sentinel.
  present = jnp.zeros(vocab + 1, bool).at[ids].set(True)[:vocab]
  always = jnp.array([tokenizer.EOS_ID, tokenizer.UNK_ID])
  present = present.at[always].set(True)
  # top_k by priority: EOS and UNK (3) above the target words (1 + uniform [0, 1)) above the
  # rest (uniform [0, 1)). The uniform part breaks the ties at random: top_k keeps the lowest
  # ids among equals, which would always drop the rarest target words.
  u = jax.random.uniform(rng, (vocab,))
  priority = jnp.where(present, 1.0 + u, u).at[always].set(3.0)
  _, chosen_N = jax.lax.top_k(priority, size)
  missing = jnp.maximum(jnp.sum(present) - size, 0)
  return chosen_N.astype(jnp.int32), missing


@register("sampled")
class Sampled(Softmax):
  """Logits over a per-batch candidate set (see the module docstring)."""

  uses_rng = True
  loss_metric = "sampled_loss"

  @dataclasses.dataclass(frozen=True)
  class Settings:
    size: int = 4096  # Candidates per batch (N).

    def __post_init__(self):
      if self.size < 2:
        raise ValueError(f"size must be at least 2, got {self.size}")

  def candidates(self, batch, vocab, rng):
    if rng is None:  # A deterministic pass: the full softmax.
      return None, batch, {}
    ids_N, missing = candidate_ids(
      batch["tgt_out"], batch["tgt_mask"], vocab, self.settings.size, rng
    )
    position_V = jnp.full((vocab,), -1, jnp.int32).at[ids_N].set(jnp.arange(ids_N.shape[0]))
    target_pos = position_V[batch["tgt_out"]]
    kept = (target_pos >= 0) & batch["tgt_mask"].astype(bool)
    mapped = {
      **batch,
      "tgt_out": jnp.maximum(target_pos, 0),
      "tgt_mask": kept.astype(batch["tgt_mask"].dtype),
    }
    return ids_N, mapped, {"sampled_missing": missing.astype(jnp.float32)}

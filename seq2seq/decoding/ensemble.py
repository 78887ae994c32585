"""Ensembles: several trained runs decoded as one model.

Axes: B batch, S source positions, T target positions, V target vocabulary, M members.

`Ensemble` holds the members' models (any mix of architectures, score functions and attention
structures sharing the vocabularies) and has the decoding API of `models.Seq2Seq`, so the same
jitted greedy and beam search (`seq2seq.decoding.decode`) run it unchanged: `encode` encodes the
source once per member, `decoder_step` advances every member with its own decoder state and returns
the members' combined log-probabilities in place of logits:

* `mean_prob` (default): log( (1/M) sum_m p_m(w) ), the log of the mean probability;
* `mean_logprob`: (1/M) sum_m log p_m(w), renormalised over the vocabulary by decoding's
  log-softmax (a product of experts).

Either is a normalised distribution, so log-softmax leaves `mean_prob` as it is. The attention
returned is one member's (`attention=i`) or the mean over the members that have attention.
Teacher-forced passes (`__call__`: validation loss, AER) combine the same way.

`decode.ensemble="runs/a,runs/b"` makes evaluation and translation (`restoring.restore_for_eval`)
decode the ensemble of those runs instead of the workdir's own checkpoint: `load` restores each
run's best (else latest) checkpoint with the config it was trained with (its `config.json`);
`prepare_workdir` refuses, in one line, runs whose vocabularies differ.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from seq2seq.decoding import decode
from seq2seq.training import train_state

COMBINATIONS = ("mean_prob", "mean_logprob")


class EnsembleEncoded(NamedTuple):
  """Each member's encoding of the source (what `decode` reads: `mask`, `init_state`)."""

  members: tuple[Any, ...]  # Each member's `Encoded`.
  mask: jax.Array  # [B, S] 1 for real tokens.
  init_state: tuple[Any, ...]  # Each member's initial decoder state.


def combine_log_probs(log_probs_MBV: Sequence[jax.Array], combination: str) -> jax.Array:
  """The members' log-probabilities [..., V] combined as `combination` (float32)."""
  stacked = jnp.stack([lp.astype(jnp.float32) for lp in log_probs_MBV])
  if combination == "mean_prob":
    return jax.nn.logsumexp(stacked, axis=0) - math.log(stacked.shape[0])
  if combination == "mean_logprob":
    return jnp.mean(stacked, axis=0)
  raise ValueError(f"ensemble combination {combination!r} is not one of {COMBINATIONS}")


class Ensemble(nnx.Module):
  """M models decoded as one (see the module docstring)."""

  structure = None  # No single attention structure (evaluation draws no per-head maps).
  samples_attention = False

  def __init__(
    self, members: Sequence[nnx.Module], combination: str = "mean_prob", attention="mean"
  ):
    if not members:
      raise ValueError("an ensemble needs at least one member")
    if combination not in COMBINATIONS:
      raise ValueError(f"ensemble combination {combination!r} is not one of {COMBINATIONS}")
    with_attention = [i for i, m in enumerate(members) if m.uses_attention]
    if attention != "mean" and (
      not isinstance(attention, int) or attention not in range(len(members))
    ):
      raise ValueError(
        f"ensemble attention {attention!r}: 'mean' or a member index < {len(members)}"
      )
    self.members = nnx.List(list(members))
    self.combination = combination
    self.attention = attention
    self.uses_attention = (
      bool(with_attention) if attention == "mean" else (attention in with_attention)
    )
    # The scores span V + S when the members copy (`ensemble.load` refuses a mixture).
    self.extends_vocabulary = any(m.extends_vocabulary for m in members)

  def _attention(self, alphas: Sequence[jax.Array | None]) -> jax.Array | None:
    """The attention reported: member `attention`'s, or the mean over members that attend."""
    if self.attention != "mean":
      return alphas[self.attention]
    present = [a.astype(jnp.float32) for a in alphas if a is not None]
    return sum(present) / len(present) if present else None

  def encode(
    self, src_BS: jax.Array, src_mask_BS: jax.Array, dropout_rng=None, *, steps: int | None = None
  ) -> EnsembleEncoded:
    encoded = tuple(m.encode(src_BS, src_mask_BS, steps=steps) for m in self.members)
    return EnsembleEncoded(encoded, src_mask_BS, tuple(e.init_state for e in encoded))

  def decoder_step(self, enc: EnsembleEncoded, state: tuple, y_prev_B: jax.Array, **kwargs):
    """(every member's next state, combined log-probabilities [B, V], attention [B, S]); over
    `output_ids` [N] only when given (shortlist decoding), each member's words outside
    `output_mask` [B, N] at probability 0 before the members combine."""
    outs = [
      m.decoder_step(e, s, y_prev_B, **kwargs)
      for m, e, s in zip(self.members, enc.members, state, strict=True)
    ]
    log_probs = [jax.nn.log_softmax(o[1].astype(jnp.float32), axis=-1) for o in outs]
    combined = combine_log_probs(log_probs, self.combination)
    return tuple(o[0] for o in outs), combined, self._attention([o[2] for o in outs])

  def __call__(
    self,
    src_BS,
    src_mask_BS,
    tgt_in_BT,
    *,
    return_alpha=False,
    return_aux=False,
    decoding=False,
    output_ids=None,
    output_mask=None,
  ):
    """Teacher-forced combined log-probabilities [B, T, V] (and attention when asked);
    `decoding`: every member takes its structures' test-time choices (forced decoding);
    `output_ids` [N] and `output_mask` [B, N]: over a shortlist, as in `decoder_step`."""
    args = (src_BS, src_mask_BS, tgt_in_BT)
    kw = {"decoding": decoding}
    if output_ids is not None:
      kw |= {"output_ids": output_ids, "output_mask": output_mask}
    if not (return_alpha or return_aux):
      outs = [(m(*args, **kw), None) for m in self.members]
    else:
      outs = [
        m(*args, return_alpha=True, **kw) if m.uses_attention else (m(*args, **kw), None)
        for m in self.members
      ]
    log_probs = [jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1) for logits, _ in outs]
    combined = combine_log_probs(log_probs, self.combination)
    if not (return_alpha or return_aux):
      return combined
    alpha = self._attention([a for _, a in outs])
    if alpha is None:
      raise ValueError("no member of the ensemble has attention weights to return")
    return (combined, {"alpha": alpha}) if return_aux else (combined, alpha)


def workdirs(dec: decode.DecodeSettings) -> list[Path]:
  """The member runs `decode.ensemble` names ([] when it names none)."""
  return [Path(w.strip()) for w in dec.ensemble.split(",") if w.strip()]


def attention_setting(dec: decode.DecodeSettings) -> str | int:
  """`decode.ensemble_attention` as `Ensemble` takes it: "mean" or a member index."""
  attention = str(dec.ensemble_attention)
  return int(attention) if attention.isdigit() else attention


def _vocab_text(workdir: Path, side: str) -> str:
  folder = workdir / "vocab" / side
  if not folder.is_dir():
    raise FileNotFoundError(f"{folder} not found: {workdir} is not a trained run")
  return "".join(p.read_text(errors="replace") for p in sorted(folder.glob("*")) if p.is_file())


def prepare_workdir(dec: decode.DecodeSettings, workdir: str | Path) -> None:
  """Gives the workdir an ensemble is evaluated or translated in the members' vocabularies
  (copied from the first member when it has none), after checking they all share them."""
  members = workdirs(dec)
  if not members:
    return
  for member in members:
    for side in ("src", "tgt"):
      if _vocab_text(member, side) != _vocab_text(members[0], side):
        raise ValueError(
          f"ensemble members must share vocabularies: {member}/vocab/{side} differs from "
          f"{members[0]}/vocab/{side}"
        )
  vocab = Path(workdir) / "vocab"
  if not vocab.exists():
    shutil.copytree(members[0] / "vocab", vocab)
  for side in ("src", "tgt"):
    if _vocab_text(Path(workdir), side) != _vocab_text(members[0], side):
      raise ValueError(f"{vocab / side} differs from the ensemble members' vocabularies")


def load(
  dec: decode.DecodeSettings, restore_member: Callable[[Path], train_state.TrainState]
) -> train_state.TrainState:
  """The runs `decode.ensemble` names as one decoding state, each restored by
  `restore_member(workdir)` (`evaluation` restores its best, else latest, checkpoint with the
  config it was trained with), combined as `decode.ensemble_combination` with the attention of
  `decode.ensemble_attention`. `prepare_workdir` checks the vocabularies first."""
  models = [restore_member(workdir).model() for workdir in workdirs(dec)]
  if len({m.extends_vocabulary for m in models}) > 1:
    raise ValueError(
      "ensemble members must all copy from the source (model.addons=copy) or none: their "
      "outputs span different vocabularies"
    )
  ensemble = Ensemble(models, dec.ensemble_combination, attention_setting(dec))
  graphdef, params = nnx.split(ensemble, nnx.Param)
  return train_state.TrainState(jnp.zeros((), jnp.int32), params, None, graphdef, optax.identity())

"""The training objective: the cross-entropy and the terms added to it, and the loss of a batch.

`loss_fn(params, state, batch, rng, weights) -> (loss, (summed cross-entropy, target tokens,
extra metrics))` is what `steps.train_step` differentiates. Batches are dicts of int32 arrays:
`src` [B, S], `src_mask` [B, S], `tgt_in` [B, T], `tgt_out` [B, T], `tgt_mask` [B, T], and
`align` [B, T, S] (gold links) when attention is supervised.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from seq2seq import models, tokenizer

if TYPE_CHECKING:
  from seq2seq.steps import TrainState


def cross_entropy(
  logits_BTV: jax.Array, targets_BT: jax.Array, mask_BT: jax.Array, label_smoothing: float = 0.0
) -> tuple[jax.Array, jax.Array]:
  """(summed token cross-entropy over unmasked positions, number of unmasked tokens).

  With label smoothing the target distribution puts 1 - ls on the reference word and spreads ls
  uniformly over the vocabulary; the loss is then shifted by the distribution's own entropy so a
  perfect prediction of the smoothed distribution scores 0.
  """
  logits = logits_BTV.astype(jnp.float32)
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  nll = -jnp.take_along_axis(log_probs, targets_BT[..., None], axis=-1)[..., 0]
  if label_smoothing > 0:
    vocab = logits.shape[-1]
    on, off = 1.0 - label_smoothing, label_smoothing / vocab
    smooth = -jnp.mean(log_probs, axis=-1)
    xlogx = lambda x: x * math.log(x) if x > 0 else 0.0  # Python floats: static settings.
    entropy = -xlogx(on + off) - (vocab - 1) * xlogx(off)
    nll = on * nll + label_smoothing * smooth - entropy
  mask = mask_BT.astype(jnp.float32)
  return jnp.sum(nll * mask), jnp.sum(mask)


def fertility_loss(
  alpha_BTS: jax.Array, fertility_BS: jax.Array, src_mask_BS: jax.Array, tgt_mask_BT: jax.Array
) -> jax.Array:
  """Cohn et al.'s fertility penalty: sum over real source positions of (sum_i alpha_ij - N_j)^2.

  Summed over the batch (divide it like the cross-entropy). N_j is 1, or the learned fertility.
  """
  received_BS = jnp.einsum("bts,bt->bs", alpha_BTS, tgt_mask_BT.astype(alpha_BTS.dtype))
  return jnp.sum(jnp.where(src_mask_BS.astype(bool), (received_BS - fertility_BS) ** 2, 0.0))


SUPERVISION_LOSSES = ("ce", "mse")


def attention_supervision_loss(
  alpha_BTS: jax.Array, gold_BTS: jax.Array, kind: str = "ce", eps: float = 1e-8
) -> jax.Array:
  """Guided attention (Mi et al. 2016; Chen et al. 2016), summed over target words with links.

  gold [B, T, S] is 0/1 (row t: the source words target word t is aligned to), normalised per
  row. "ce": -sum_j g_tj log alpha_tj, the default, because its gradient stays large while the
  attention is far from the links (squared error's shrinks with the attention weight);
  "mse": sum_j (alpha_tj - g_tj)^2. Rows without links (unaligned words, padding) add nothing.
  """
  if kind not in SUPERVISION_LOSSES:
    raise ValueError(
      f"train.attention_supervision_loss={kind!r} is not one of {SUPERVISION_LOSSES}"
    )
  links_BT1 = jnp.sum(gold_BTS, axis=-1, keepdims=True)
  target = gold_BTS / jnp.maximum(links_BT1, 1.0)
  if kind == "ce":
    per_row = -jnp.sum(target * jnp.log(alpha_BTS + eps), axis=-1)
  else:
    per_row = jnp.sum((alpha_BTS - target) ** 2, axis=-1)
  return jnp.sum(jnp.where(links_BT1[..., 0] > 0, per_row, 0.0))


def sentence_log_likelihood(
  logits_BTV: jax.Array, targets_BT: jax.Array, mask_BT: jax.Array
) -> jax.Array:
  """log p(y | x) of every sentence [B] (float32): the negative of its summed cross-entropy."""
  log_probs = jax.nn.log_softmax(logits_BTV.astype(jnp.float32), axis=-1)
  ll_BT = jnp.take_along_axis(log_probs, targets_BT[..., None], axis=-1)[..., 0]
  return jnp.sum(ll_BT * mask_BT.astype(jnp.float32), axis=-1)


def reinforce_loss(
  reward_B: jax.Array,
  baseline: jax.Array,
  sample_logp_BT: jax.Array,
  entropy_BT: jax.Array,
  tgt_mask_BT: jax.Array,
  reinforce_weight: float,
  entropy_weight: float,
) -> jax.Array:
  """Xu et al.'s score-function estimator for hard attention, as a surrogate loss (summed over
  the batch; divide it like the cross-entropy).

  Its gradient is -lambda_r sum_b (R_b - b) grad log p(sampled positions of b) - lambda_e grad
  sum H(alpha_i): REINFORCE with reward R_b = log p(y_b | x_b, sampled positions) [B] and the
  moving-average baseline b, plus an entropy bonus. The reward and baseline are constants.
  sample_logp_BT, entropy_BT: log alpha_ij of the sampled j and the entropy of alpha_i per step.
  """
  mask = tgt_mask_BT.astype(jnp.float32)
  advantage_B = jax.lax.stop_gradient(reward_B - baseline)
  logp_B = jnp.sum(sample_logp_BT * mask, axis=-1)
  bonus = jnp.sum(entropy_BT * mask)
  return -reinforce_weight * jnp.sum(advantage_B * logp_B) - entropy_weight * bonus


class LossWeights(NamedTuple):
  """The weights of the training objective's terms; `from_config` reads them from config.train.

  `fertility` and `supervision` must be Python floats (a zero one leaves its term out of the
  program); the others may be traced.
  """

  label_smoothing: float = 0.0  # train.label_smoothing
  fertility: float = 0.0  # train.fertility_weight: x `fertility_loss`
  supervision: float = 0.0  # train.attention_supervision: x `attention_supervision_loss` ...
  supervision_loss: str = "ce"  # ... of kind train.attention_supervision_loss
  reinforce: float = 0.0  # train.reinforce_weight (hard attention's estimator)
  entropy: float = 0.0  # train.entropy_weight (its entropy bonus)
  agreement: float = 1.0  # train.agreement_weight (agreement runs' bonus)
  normalization: str = "tokens"  # train.loss_normalization: what the summed objective is divided by

  @classmethod
  def from_config(cls, tcfg: ml_collections.ConfigDict) -> LossWeights:
    if tcfg.loss_normalization not in LOSS_NORMALIZATIONS:
      raise ValueError(
        f"train.loss_normalization={tcfg.loss_normalization!r} is not one of {LOSS_NORMALIZATIONS}"
      )
    return cls(
      tcfg.label_smoothing,
      tcfg.fertility_weight,
      tcfg.attention_supervision,
      tcfg.attention_supervision_loss,
      tcfg.reinforce_weight,
      tcfg.entropy_weight,
      tcfg.agreement_weight,
      tcfg.loss_normalization,
    )


# "tokens": the mean over the batch's target tokens. "sentences": summed over each sentence's
# target tokens, then the mean over sentences (GroundHog's cost, which the paper trained with).
LOSS_NORMALIZATIONS = ("tokens", "sentences")


PLAIN = LossWeights()  # Cross-entropy alone (agreement runs: weight-1 bonus).


def direction_objective(
  model: models.Seq2Seq,
  batch: dict[str, jax.Array],
  rng,
  weights: LossWeights = PLAIN,
  *,
  need_alpha: bool = False,
  reinforce: tuple | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array | None, dict[str, jax.Array]]:
  """One translation direction's summed objective on `batch`.

  Returns (cross-entropy (with `weights.label_smoothing`) + `weights.fertility` x
  `fertility_loss` + `weights.supervision` x `attention_supervision_loss` (against
  `batch["align"]`), summed cross-entropy, target tokens, alpha [B, T, S] when computed (with
  those terms or `need_alpha`), else None, extra metrics). `reinforce` = (baseline or None,
  is_first_step): for a model whose attention samples (hard attention), given a key, the
  objective adds the gradient of `reinforce_loss` (weights `weights.reinforce` and
  `weights.entropy`; its value is subtracted again, so the loss stays comparable) with each
  sentence's log-likelihood as reward, against the baseline (the batch's mean reward at the
  first step or without one); extras then hold "reward", that mean.
  """
  args = (batch["src"], batch["src_mask"], batch["tgt_in"])
  sampled = reinforce is not None and model.samples_attention and rng is not None
  alpha, extras = None, {}
  if weights.fertility > 0 or weights.supervision > 0 or need_alpha or sampled:
    logits, aux = model(*args, return_aux=True, dropout_rng=rng)
    alpha = aux["alpha"]
  else:
    logits = model(*args, dropout_rng=rng)
  total, tokens = cross_entropy(
    logits, batch["tgt_out"], batch["tgt_mask"], weights.label_smoothing
  )
  objective = total
  if weights.fertility > 0:
    penalty = fertility_loss(alpha, aux["fertility"], batch["src_mask"], batch["tgt_mask"])
    objective = objective + weights.fertility * penalty
    extras["fertility_loss"] = penalty
  if weights.supervision > 0:
    guided = attention_supervision_loss(alpha, batch["align"], weights.supervision_loss)
    objective = objective + weights.supervision * guided
    extras["supervision_loss"] = guided
  if sampled:
    baseline, first_step = reinforce
    reward_B = jax.lax.stop_gradient(
      sentence_log_likelihood(logits, batch["tgt_out"], batch["tgt_mask"])
    )
    real_B = (jnp.sum(batch["tgt_mask"], axis=-1) > 0).astype(jnp.float32)
    mean_reward = jnp.sum(reward_B * real_B) / jnp.maximum(jnp.sum(real_B), 1.0)
    if baseline is None:
      baseline = mean_reward
    baseline = jnp.where(first_step, mean_reward, baseline)
    surrogate = reinforce_loss(
      reward_B,
      baseline,
      aux["sample_logp"],
      aux["entropy"],
      batch["tgt_mask"],
      weights.reinforce,
      weights.entropy,
    )
    # Its gradient, not its value: the loss reported stays the cross-entropy (plus penalties).
    objective = objective + surrogate - jax.lax.stop_gradient(surrogate)
    extras["reward"] = mean_reward
  return objective, total, tokens, alpha, extras


def reverse_batch(batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """The target -> source batch of a source -> target one (see `agreement_bonus` for positions).

  The reverse source is the forward `tgt_out` (target words, EOS, PAD: exactly the layout of a
  source row) with `tgt_mask`; the reverse `tgt_out` is the forward `src` (source words, EOS) with
  `src_mask`, and the reverse `tgt_in` is BOS followed by the source words (`src` shifted right,
  PAD beyond `src_mask`). Gold links `align` [B, T, S] are transposed to [B, S, T].
  Shapes: S_rev = T, T_rev = S.
  """
  src, src_mask = batch["src"], batch["src_mask"]
  shifted = jnp.pad(src[:, :-1], ((0, 0), (1, 0)), constant_values=tokenizer.BOS_ID)
  out = {
    "src": batch["tgt_out"],
    "src_mask": batch["tgt_mask"],
    "tgt_in": jnp.where(src_mask.astype(bool), shifted, tokenizer.PAD_ID).astype(src.dtype),
    "tgt_out": src,
    "tgt_mask": src_mask,
  }
  if "align" in batch:
    out["align"] = jnp.swapaxes(batch["align"], 1, 2)
  return out


def agreement_bonus(
  alpha_fwd_BTS: jax.Array,
  alpha_rev_BST: jax.Array,
  src_mask_BS: jax.Array,
  tgt_mask_BT: jax.Array,
) -> jax.Array:
  """Cohn et al.'s agreement: sum_b trace(A_fwd A_rev) = sum_{b,t,s} A_fwd[b,t,s] A_rev[b,s,t].

  Row t of the forward attention is the step that predicts `tgt_out[t]` (target word t, or EOS
  at t = m), over source positions s (source word s, or EOS at s = n). `reverse_batch` makes row
  s of the reverse attention the step that predicts source position s (word s, or EOS) over
  reverse source positions t, which are the forward `tgt_out` positions. So A_fwd[t, s] and
  A_rev[s, t] weigh the same pair of words, EOS pairs with EOS, and BOS appears in neither (it
  is an input, never predicted nor attended to). Terms are kept where both t and s are real
  (`tgt_mask`, `src_mask`); each row contributes at most 1, so the sum is at most the number of
  forward target tokens. In matrix terms, with A_{y->x} the reverse attention in the forward
  layout [T, S] (A_rev transposed), this is trace(A_{x->y} A_{y->x}^T).
  """
  mask_BTS = tgt_mask_BT[:, :, None].astype(jnp.float32) * src_mask_BS[:, None, :]
  return jnp.sum(alpha_fwd_BTS * jnp.swapaxes(alpha_rev_BST, 1, 2) * mask_BTS)


def agreement_loss(
  model: models.Agreement, batch: dict[str, jax.Array], rng, weights: LossWeights = PLAIN
) -> tuple[jax.Array, dict[str, jax.Array]]:
  """The joint objective of an agreement run and its parts.

  loss = O_fwd / N_fwd + O_rev / N_rev - `weights.agreement` * bonus / N_fwd, where O is each
  direction's `direction_objective` (fertility and supervision terms apply to both; the reverse
  is supervised by the transposed links), N its target tokens and bonus the `agreement_bonus`
  (so bonus / N_fwd is in [0, 1]). The forward model sees exactly the batch and dropout key a
  plain RNNsearch would; the reverse gets `reverse_batch` and the key folded with 1. Parts:
  forward_loss, reverse_loss (O / N each), agreement (bonus / N_fwd), forward_ce, tokens
  (forward cross-entropy sum and target tokens).
  """
  rng_rev = None if rng is None else jax.random.fold_in(rng, 1)
  obj_f, ce_f, tok_f, alpha_f, _ = direction_objective(
    model.forward, batch, rng, weights, need_alpha=True
  )
  obj_r, _, tok_r, alpha_r, _ = direction_objective(
    model.reverse, reverse_batch(batch), rng_rev, weights, need_alpha=True
  )
  n_f, n_r = jnp.maximum(tok_f, 1.0), jnp.maximum(tok_r, 1.0)
  agreement = agreement_bonus(alpha_f, alpha_r, batch["src_mask"], batch["tgt_mask"]) / n_f
  parts = {
    "forward_loss": obj_f / n_f,
    "reverse_loss": obj_r / n_r,
    "agreement": agreement,
    "forward_ce": ce_f,
    "tokens": tok_f,
  }
  return parts["forward_loss"] + parts["reverse_loss"] - weights.agreement * agreement, parts


def loss_fn(
  params: nnx.State,
  state: TrainState,
  batch: dict[str, jax.Array],
  rng,
  weights: LossWeights = PLAIN,
):
  """The loss of `batch` under `params` (the summed objective divided by the batch's target
  tokens, or by its sentences with `weights.normalization="sentences"`), and (summed
  cross-entropy, tokens, extra metrics) for metrics.

  The objective adds `weights.fertility` x `fertility_loss` and `weights.supervision` x
  `attention_supervision_loss` (against `batch["align"]`). A model whose attention samples (hard
  attention) and is given a key adds `reinforce_loss` with the sentences' log-likelihoods as
  rewards against `state.baseline` (at step 0, or without a baseline, against the batch's mean
  reward); its extra metric "reward" (the batch's mean sentence log-likelihood) updates the
  baseline. Penalty metrics are reported per target token, with "ce_loss" (the cross-entropy per
  target token, also given when the loss is per sentence). An `Agreement` model gets
  `agreement_loss` instead (cross-entropy and tokens of its forward direction; extra metrics:
  forward_loss, reverse_loss, agreement; per-token normalisation only); other models' extras
  are {}.
  """
  model = nnx.merge(state.graphdef, params)
  if isinstance(model, models.Agreement):
    if weights.normalization != "tokens":
      raise ValueError("model.name=agreement trains with train.loss_normalization='tokens'")
    loss, parts = agreement_loss(model, batch, rng, weights)
    extras = {k: parts[k] for k in AGREEMENT_METRICS}
    return loss, (parts["forward_ce"], parts["tokens"], extras)
  reinforce = (state.baseline, state.step == 0)
  objective, total, tokens, _, extras = direction_objective(
    model, batch, rng, weights, reinforce=reinforce
  )
  per_token = 1.0 / jnp.maximum(tokens, 1.0)
  penalties = [key for key in PENALTY_METRICS if key in extras]
  for key in penalties:  # Unweighted, per target token, beside the cross-entropy.
    extras[key] = extras[key] * per_token
  if penalties or weights.normalization == "sentences":
    extras["ce_loss"] = total * per_token
  if weights.normalization == "sentences":
    sentences = jnp.sum(jnp.any(batch["tgt_mask"] > 0, axis=-1).astype(jnp.float32))
    return objective / jnp.maximum(sentences, 1.0), (total, tokens, extras)
  return objective * per_token, (total, tokens, extras)


AGREEMENT_METRICS = ("forward_loss", "reverse_loss", "agreement")  # Logged for agreement runs.
PENALTY_METRICS = ("fertility_loss", "supervision_loss")  # Logged with "ce_loss" when trained.
EXTRA_METRICS = (*AGREEMENT_METRICS, *PENALTY_METRICS, "ce_loss", "reward", "baseline")

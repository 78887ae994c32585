"""Training: state, loss, optimisers, the pure train/eval steps, and the training loop.

`train_step(state, batch, rng) -> (state, metrics)` and `eval_step(state, batch) -> metrics` are
pure functions of their arguments (jit them; the training loop does). Batches are dicts of int32
arrays: `src` [B, S], `src_mask` [B, S], `tgt_in` [B, T], `tgt_out` [B, T], `tgt_mask` [B, T].
"""

from __future__ import annotations

import functools
import json
import math
import signal
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import logging
from flax import nnx, struct
from jax.experimental import multihost_utils

from seq2seq import checkpoints, evaluate, input_pipeline, models, structures, summary, tokenizer


@struct.dataclass
class TrainState:
  """Everything that changes during training, as one pytree (the model's graph is static)."""

  step: jax.Array  # int32 scalar: updates applied so far.
  params: nnx.State  # The model's parameters.
  opt_state: optax.OptState
  graphdef: nnx.GraphDef = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  # float32 scalar: hard attention's moving-average reward baseline (checkpointed with the rest);
  # None for every model that does not sample its attention.
  baseline: jax.Array | None = None

  def model(self) -> models.Seq2Seq:
    """The NNX model holding these parameters."""
    return nnx.merge(self.graphdef, self.params)


def learning_rate_schedule(cfg: ml_collections.ConfigDict) -> optax.Schedule:
  """Linear warm-up over `warmup_steps`, then constant or inverse square root."""
  base, warmup = cfg.learning_rate, cfg.warmup_steps

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    ramp = jnp.minimum(1.0, (step + 1.0) / warmup) if warmup > 0 else 1.0
    if cfg.decay == "constant":
      decay = 1.0
    elif cfg.decay == "rsqrt":
      decay = jax.lax.rsqrt(jnp.maximum(step + 1.0, max(warmup, 1)) / max(warmup, 1))
    else:
      raise ValueError(f"train.decay={cfg.decay!r} is not one of ['constant', 'rsqrt']")
    return base * ramp * decay

  return schedule


_OPTIMIZERS = {
  "adadelta": lambda lr, cfg: optax.adadelta(lr, rho=cfg.adadelta_rho, eps=cfg.adadelta_eps),
  "adam": lambda lr, cfg: optax.adam(lr),
  "sgd": lambda lr, cfg: optax.sgd(lr),
}


def make_optimizer(cfg: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """The optimiser of a `config.train` section: clip the global norm, then the update rule."""
  if cfg.optimizer not in _OPTIMIZERS:
    raise ValueError(
      f"train.optimizer={cfg.optimizer!r} is not one of {', '.join(sorted(_OPTIMIZERS))}"
    )
  rule = _OPTIMIZERS[cfg.optimizer](learning_rate_schedule(cfg), cfg)
  if cfg.clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(cfg.clip_norm), rule)
  return rule


def create_train_state(
  config: ml_collections.ConfigDict, rng: jax.Array, src_vocab: int, tgt_vocab: int
) -> TrainState:
  """A fresh state: parameters initialised from `rng`, optimiser state zero, step 0."""
  model = models.build_model(config.model, src_vocab, tgt_vocab, rngs=nnx.Rngs(params=rng))
  graphdef, params = nnx.split(model, nnx.Param)
  tx = make_optimizer(config.train)
  baseline = jnp.zeros((), jnp.float32) if model.samples_attention else None
  return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params), graphdef, tx, baseline)


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


def train_step(
  state: TrainState,
  batch: dict[str, jax.Array],
  rng: jax.Array,
  *,
  config: ml_collections.ConfigDict,
) -> tuple[TrainState, dict[str, Any]]:
  """One update. `rng` is this step's key (derive it with `jax.random.fold_in(base, step)`).

  Bind `config` with `functools.partial` before jitting. Metrics: loss (the objective optimised:
  per target token, or per sentence with train.loss_normalization="sentences", then with
  ce_loss per target token beside it),
  tokens, grad_norm (before clipping), learning_rate, finite (false: the update was not applied);
  with a reward baseline (hard attention) also reward (the batch's mean sentence log-likelihood)
  and baseline (after this step's update b <- decay * b + (1 - decay) * reward; at step 0,
  b <- reward); for agreement runs forward_loss, reverse_loss and agreement (see
  `agreement_loss`; tokens are the forward direction's, so tokens/s counts sentence pairs as for
  a plain model).
  """
  keyed = config.model.dropout > 0 or structures.uses_rng(config.model)
  dropout_rng = rng if keyed else None
  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  (loss, (_, tokens, extras)), grads = grad_fn(
    state.params,
    state,
    batch,
    dropout_rng,
    LossWeights.from_config(config.train),
  )
  if config.train.inject_nonfinite_step >= 0:  # Test hook: poison one step's gradients.
    poison = jnp.where(state.step + 1 == config.train.inject_nonfinite_step, jnp.nan, 1.0)
    loss, grads = loss * poison, jax.tree.map(lambda g: g * poison, grads)
  grad_norm = optax.global_norm(grads)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

  def update(params, opt_state):
    updates, opt_state = state.tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  # A non-finite step leaves parameters and optimiser state as they were (it still counts). A
  # cond rather than a select between the old and new trees, which costs one more pass over
  # the parameters and moments (72 against 45 ms for the update on the benchmark config).
  params, opt_state = jax.lax.cond(
    finite, update, lambda p, o: (p, o), state.params, state.opt_state
  )
  metrics = {
    "loss": loss,
    "tokens": tokens,
    "grad_norm": grad_norm,
    "learning_rate": learning_rate_schedule(config.train)(state.step),
    "finite": finite,
    **extras,
  }
  baseline = state.baseline
  if baseline is not None and "reward" in extras:
    decay, reward = config.train.baseline_decay, extras["reward"]
    moved = jnp.where(state.step == 0, reward, decay * baseline + (1.0 - decay) * reward)
    baseline = jnp.where(finite, moved, baseline)
    metrics["baseline"] = baseline
  return state.replace(
    step=state.step + 1,
    params=params,
    opt_state=opt_state,
    baseline=baseline,
  ), metrics


def eval_step(state: TrainState, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """Summed loss and token count of a batch (no smoothing, no dropout): sum them, then divide."""
  logits = state.model()(batch["src"], batch["src_mask"], batch["tgt_in"])
  total, tokens = cross_entropy(logits, batch["tgt_out"], batch["tgt_mask"])
  return {"loss_sum": total, "tokens": tokens}


# ---------------------------------------------------------------------------- the training loop

MODEL_KEYS = ("src", "src_mask", "tgt_in", "tgt_out", "tgt_mask", "align")  # "align": optional.
AGREEMENT_METRICS = ("forward_loss", "reverse_loss", "agreement")  # Logged for agreement runs.
PENALTY_METRICS = ("fertility_loss", "supervision_loss")  # Logged with "ce_loss" when trained.
EXTRA_METRICS = (*AGREEMENT_METRICS, *PENALTY_METRICS, "ce_loss", "reward", "baseline")


class Runtime:
  """The device mesh (one data axis over every device) and how arrays are placed on it."""

  def __init__(self):
    self.mesh = jax.sharding.Mesh(np.asarray(jax.devices()), ("data",))
    self.replicated = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())
    self.batch = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec("data"))

  def put_batch(self, batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
    """This process's rows of a batch -> global arrays sharded over the data axis."""
    return {
      k: jax.make_array_from_process_local_data(self.batch, batch[k])
      for k in MODEL_KEYS
      if k in batch
    }

  def check_batch_size(self, batch_size: int) -> None:
    devices = jax.device_count()
    if batch_size % devices:
      raise ValueError(
        f"data.batch_size={batch_size} does not split over {devices} devices; "
        "choose a multiple of the device count"
      )


def compile_steps(config: ml_collections.ConfigDict, runtime: Runtime):
  """The jitted train and eval steps with their shardings (state replicated, batch sharded)."""
  rep, bat = runtime.replicated, runtime.batch
  train_fn = jax.jit(
    functools.partial(train_step, config=config),
    in_shardings=(rep, bat, rep),
    out_shardings=(rep, rep),
    donate_argnums=0,
  )
  eval_fn = jax.jit(eval_step, in_shardings=(rep, bat), out_shardings=rep)
  return train_fn, eval_fn


def evaluate_loss(eval_fn, state: TrainState, batches, runtime: Runtime) -> dict[str, float]:
  """Token-level loss and perplexity of `batches` (an iterable of host batches)."""
  total, tokens = 0.0, 0.0
  for batch in batches:
    m = jax.device_get(eval_fn(state, runtime.put_batch(batch)))
    total, tokens = total + float(m["loss_sum"]), tokens + float(m["tokens"])
  loss = total / max(tokens, 1.0)
  return {"loss": loss, "perplexity": float(np.exp(min(loss, 50.0))), "tokens": tokens}


def load_data(config: ml_collections.ConfigDict, workdir: Path) -> input_pipeline.Data:
  """`input_pipeline.load_data`; with several processes, process 0 builds the datasets and
  vocabularies in the shared workdir first and the others then load them."""
  if jax.process_count() == 1:
    return input_pipeline.load_data(config, workdir)
  data = input_pipeline.load_data(config, workdir) if jax.process_index() == 0 else None
  multihost_utils.sync_global_devices("seq2seq:data-ready")
  return data or input_pipeline.load_data(config, workdir)


def initial_state(config, src_vocab: int, tgt_vocab: int, runtime: Runtime) -> TrainState:
  """A fresh, replicated state from the config's seed."""
  rng = jax.random.fold_in(jax.random.key(config.seed), 0)
  init = functools.partial(create_train_state, config, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
  return jax.jit(init, out_shardings=runtime.replicated)(rng)


def _all_agree(flag: bool) -> bool:
  """Process 0's `flag` on every process (so all of them stop at the same step)."""
  if jax.process_count() == 1:
    return flag
  return bool(multihost_utils.broadcast_one_to_all(np.asarray(flag)))


class NonFiniteError(ValueError):
  """Training met a non-finite loss or gradient with `train.nonfinite="stop"`."""


def handle_nonfinite(workdir: Path, step: int, batch, config, last_checkpoint) -> None:
  """Records the offending batch (WORKDIR/nonfinite/step_N.json), then stops or carries on."""
  out = workdir / "nonfinite"
  out.mkdir(exist_ok=True)
  ids = [int(i) for i in batch["index"] if i >= 0]
  path = out / f"step_{step}_process_{jax.process_index()}.json"
  path.write_text(json.dumps({"step": step, "train_example_indices": ids}) + "\n")
  if config.train.nonfinite == "stop":
    raise NonFiniteError(
      f"non-finite loss or gradient at step {step}; the update was not applied, the last good "
      f"checkpoint (step {last_checkpoint}) is kept, the batch's example ids are in {path}"
    )
  if config.train.nonfinite != "skip":
    raise ValueError(f"train.nonfinite={config.train.nonfinite!r} is not one of stop, skip")
  logging.warning("non-finite loss or gradient at step %d: update skipped (ids in %s)", step, path)


class PreemptionHandler:
  """Turns SIGTERM / SIGINT into a request that the loop honours at the next step boundary."""

  def __init__(self):
    self.requested: str | None = None
    self._previous = {}
    if threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._previous[sig] = signal.signal(sig, self._handle)

  def _handle(self, signum, frame):
    self.requested = signal.Signals(signum).name

  def restore(self) -> None:
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous = {}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | Path) -> dict[str, Any]:
  """Trains (or resumes) the run in `workdir`, then reports validation and test loss.

  Writes WORKDIR/config.json, vocab/, checkpoints/, best/, metrics.jsonl, TensorBoard events
  and, with `train.final_eval`, eval/. Returns the final evaluation results ({} without it).
  """
  if config.train.final_eval:  # Refuse settings the final evaluation would, before training.
    evaluate.check_replace_unk(config)
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  checkpoints.check_and_save_config(workdir, config)
  runtime = Runtime()
  runtime.check_batch_size(config.data.batch_size)
  data = load_data(config, workdir)
  logging.info("data: %s", json.dumps(data.stats, sort_keys=True))
  writer = summary.MetricWriter(workdir, enabled=jax.process_index() == 0)
  ckpt = checkpoints.Checkpointer(workdir, config)
  best = checkpoints.Checkpointer(workdir, config, subdir="best", max_to_keep=1)
  best_bleu = max(
    (r["bleu"] for r in summary.read_metrics(workdir) if r["split"] == "valid" and "bleu" in r),
    default=-1.0,
  )
  train_fn, eval_fn = compile_steps(config, runtime)

  state = initial_state(config, data.src_tokenizer.size, data.tgt_tokenizer.size, runtime)
  it = input_pipeline.train_iterator(
    data, config, process_index=jax.process_index(), process_count=jax.process_count()
  )
  elapsed_before = 0.0  # Wall-clock seconds spent by earlier invocations of this run.
  if ckpt.latest_step() is not None:
    state, data_state = ckpt.restore(state)
    it.set_state(data_state["iterator"])
    elapsed_before = data_state["elapsed_s"]
    logging.info("resumed from step %d", int(state.step))
  start = int(jax.device_get(state.step))
  writer.truncate_after(start)  # Lines logged after the checkpoint by a killed run go.
  skipped = 0
  num_steps, tcfg = config.train.num_steps, config.train
  base_rng = jax.random.fold_in(jax.random.key(config.seed), 1)

  def valid_batches():
    return input_pipeline.eval_batches(
      data, "valid", config, process_index=jax.process_index(), process_count=jax.process_count()
    )

  window_tokens, tick, t_begin = 0.0, time.perf_counter(), time.perf_counter()
  budget_s = 60.0 * tcfg.max_minutes

  def elapsed() -> float:
    return elapsed_before + time.perf_counter() - t_begin

  def loop_state() -> dict[str, Any]:
    return {"iterator": it.get_state(), "elapsed_s": elapsed()}

  preemption = PreemptionHandler()
  for step in range(start, num_steps):
    host_batch = next(it)
    state, metrics = train_fn(
      state, runtime.put_batch(host_batch), jax.random.fold_in(base_rng, step)
    )
    window_tokens = window_tokens + metrics["tokens"]  # Stays on device.
    done = step + 1
    if not bool(metrics["finite"]):  # One scalar a step: the update was skipped on device.
      skipped += 1
      handle_nonfinite(workdir, done, host_batch, config, ckpt.latest_step())
    if preemption.requested:
      ckpt.save(state, loop_state())
      preemption.restore()
      logging.warning(
        "received %s at step %d: checkpoint saved; rerun the same command to resume",
        preemption.requested,
        done,
      )
      writer.close()
      return {"preempted_at_step": done}
    # The last step: num_steps, or the wall-clock budget (logged, evaluated, checkpointed alike).
    last = done == num_steps or (budget_s > 0 and _all_agree(elapsed() >= budget_s))
    if done % tcfg.log_every == 0 or last:
      m = jax.device_get(metrics)  # Synchronises once per logging window.
      now = time.perf_counter()
      record = writer.write(
        done,
        "train",
        {
          "loss": float(m["loss"]),
          "learning_rate": float(m["learning_rate"]),
          "grad_norm": float(m["grad_norm"]),
          "tokens_per_s": float(window_tokens) / max(now - tick, 1e-9),
          "skipped_updates": skipped,
          "elapsed_s": elapsed(),
          **{k: float(m[k]) for k in EXTRA_METRICS if k in m},
        },
      )
      eta = (now - t_begin) / max(done - start, 1) * (num_steps - done)
      logging.info(
        "step %d/%d  loss %.4f  tokens/s %.0f  ETA %.0fs",
        done,
        num_steps,
        record["loss"],
        record["tokens_per_s"],
        eta,
      )
      window_tokens, tick = 0.0, time.perf_counter()
    if done % tcfg.eval_every == 0 or last:
      result = evaluate_loss(eval_fn, state, valid_batches(), runtime)
      scalars = {"loss": result["loss"], "perplexity": result["perplexity"]}
      scalars["elapsed_s"] = elapsed()
      if tcfg.valid_bleu:
        scalars["bleu"] = valid_bleu(state, data, config)
        if scalars["bleu"] >= best_bleu:  # Ties go to the later checkpoint.
          best_bleu = scalars["bleu"]
          best.save(state, None)
      writer.write(done, "valid", scalars)
      logging.info("step %d  valid %s", done, json.dumps(scalars))
      window_tokens, tick = 0.0, time.perf_counter()
    if done % tcfg.checkpoint_every == 0 or last:
      ckpt.save(state, loop_state())
      window_tokens, tick = 0.0, time.perf_counter()
    if last and done < num_steps:
      logging.info("train.max_minutes=%g reached at step %d", tcfg.max_minutes, done)
      break
  if ckpt.latest_step() != int(jax.device_get(state.step)):
    ckpt.save(state, loop_state())
  preemption.restore()
  ckpt.close()
  best.close()
  final = {}
  if tcfg.final_eval:
    final = evaluate_splits(
      config, workdir, data=data, runtime=runtime, eval_fn=eval_fn, writer=writer
    )
  writer.close()
  return final


def host_local(state: TrainState) -> TrainState:
  """The state with parameters as this process's local copies (decoding runs per process)."""
  if jax.process_count() == 1:
    return state
  return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), state)


def valid_bleu(state: TrainState, data, config: ml_collections.ConfigDict) -> float:
  """Validation BLEU with greedy decoding (cheap enough to run at every evaluation)."""
  greedy = config.copy_and_resolve_references()
  greedy.decode.beam_size = 1
  translations = evaluate.translate_split(host_local(state), data.splits["valid"], greedy)
  raw = data.raw("valid")
  hyps = [
    evaluate.output_text(t, r[0], data.src_tokenizer, data.tgt_tokenizer)
    for t, r in zip(translations, raw, strict=True)
  ]
  return evaluate.bleu(hyps, [r[1] for r in raw])[0]


def restore_for_eval(config, workdir: Path, src_vocab: int, tgt_vocab: int, runtime) -> TrainState:
  """The best checkpoint by validation BLEU if one was kept, else the latest."""
  fresh = initial_state(config, src_vocab, tgt_vocab, runtime)
  for subdir in ("best", "checkpoints"):
    ckpt = checkpoints.Checkpointer(workdir, config, subdir=subdir)
    if ckpt.latest_step() is not None:
      state, _ = ckpt.restore(fresh, with_data=False)
      ckpt.close()
      logging.info("evaluating %s checkpoint of step %d", subdir, int(state.step))
      return state
    ckpt.close()
  raise FileNotFoundError(f"no checkpoint in {workdir / 'checkpoints'}; train first")


DIRECTIONS = ("forward", "reverse")


def direction_state(state: TrainState, direction: str) -> TrainState:
  """One direction of an agreement run as the state of a plain RNNsearch, which decoding,
  evaluation and translation take like any run's state (no optimiser state: it decodes only).

  Any other run's state is returned as it is for "forward"; "reverse" needs an agreement run.
  """
  if direction not in DIRECTIONS:
    raise ValueError(f"model.direction={direction!r} is not one of {DIRECTIONS}")
  model = state.model()
  if not isinstance(model, models.Agreement):
    if direction == "reverse":
      raise ValueError("model.direction=reverse needs an agreement run (model.name=agreement)")
    return state
  graphdef, params = nnx.split(getattr(model, direction), nnx.Param)
  return TrainState(state.step, params, None, graphdef, state.tx)


def evaluate_splits(config, workdir, *, data=None, runtime=None, eval_fn=None, writer=None):
  """Evaluates the best (else latest) checkpoint on the valid and test splits (and "test_long"
  with `data.long_test_min_words`).

  Per split: loss and perplexity, then decoding with the `decode` settings and every metric of
  `evaluate.evaluate_split`, written to WORKDIR/eval/SPLIT/. An agreement run is evaluated with
  its `model.direction` model: the forward one as any RNNsearch, the reverse one on the corpus
  read target -> source, into WORKDIR/eval_reverse/SPLIT/. Returns {split: results}.
  """
  workdir = Path(workdir)
  runtime = runtime or Runtime()
  data = data or load_data(config, workdir)
  if eval_fn is None:
    _, eval_fn = compile_steps(config, runtime)
  state = restore_for_eval(
    config, workdir, data.src_tokenizer.size, data.tgt_tokenizer.size, runtime
  )
  direction = config.model.direction
  state = direction_state(state, direction)
  prefix = "eval" if direction == "forward" else f"eval_{direction}"
  if direction == "reverse":
    data = input_pipeline.reversed_data(data)
  step = int(jax.device_get(state.step))
  results = {}
  for split in ("valid", "test", input_pipeline.LONG_TEST):
    if split not in data.splits:
      continue
    batches = input_pipeline.eval_batches(
      data, split, config, process_index=jax.process_index(), process_count=jax.process_count()
    )
    result = evaluate_loss(eval_fn, state, batches, runtime)
    result["step"] = step
    out = workdir / prefix / split
    result = evaluate.evaluate_split(
      host_local(state),
      data,
      split,
      config,
      out,
      extra=result,
      writer=writer,
      write=jax.process_index() == 0,
    )
    if writer is not None:  # Final scalars go to TensorBoard; metrics.jsonl holds training only.
      scalars = {k: v for k, v in result.items() if isinstance(v, int | float)}
      writer.write(step, f"{prefix}_{split}", scalars, jsonl=False)
    logging.info(
      "%s at step %d: loss %.4f  perplexity %.2f  BLEU %.2f (No UNK %.2f)",
      split,
      step,
      result["loss"],
      result["perplexity"],
      result["bleu"],
      result["bleu_no_unk"],
    )
    results[split] = result
  return results

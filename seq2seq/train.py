"""Training library: state, loss, optimisers and the pure train/eval steps.

`train_step(state, batch, rng) -> (state, metrics)` and `eval_step(state, batch) -> metrics` are
pure functions of their arguments (jit them; the training loop does). Batches are dicts of int32
arrays: `src` [B, S], `src_mask` [B, S], `tgt_in` [B, T], `tgt_out` [B, T], `tgt_mask` [B, T].
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx, struct

from seq2seq import models


@struct.dataclass
class TrainState:
  """Everything that changes during training, as one pytree (the model's graph is static)."""

  step: jax.Array  # int32 scalar: updates applied so far.
  params: nnx.State  # The model's parameters.
  opt_state: optax.OptState
  graphdef: nnx.GraphDef = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)

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
  return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params), graphdef, tx)


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
    entropy = -(on + off) * jnp.log(on + off) - (vocab - 1) * off * jnp.log(off)
    nll = on * nll + label_smoothing * smooth - entropy
  mask = mask_BT.astype(jnp.float32)
  return jnp.sum(nll * mask), jnp.sum(mask)


def loss_fn(
  params: nnx.State, state: TrainState, batch: dict[str, jax.Array], rng, label_smoothing
):
  """Mean token loss of `batch` under `params`, and (summed loss, tokens) for the metrics."""
  model = nnx.merge(state.graphdef, params)
  logits = model(batch["src"], batch["src_mask"], batch["tgt_in"], dropout_rng=rng)
  total, tokens = cross_entropy(logits, batch["tgt_out"], batch["tgt_mask"], label_smoothing)
  return total / jnp.maximum(tokens, 1.0), (total, tokens)


def train_step(
  state: TrainState,
  batch: dict[str, jax.Array],
  rng: jax.Array,
  *,
  config: ml_collections.ConfigDict,
) -> tuple[TrainState, dict[str, Any]]:
  """One update. `rng` is this step's key (derive it with `jax.random.fold_in(base, step)`).

  Bind `config` with `functools.partial` before jitting. Metrics: loss (mean per target token),
  tokens, grad_norm (before clipping), learning_rate.
  """
  dropout_rng = rng if config.model.dropout > 0 else None
  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  (loss, (_, tokens)), grads = grad_fn(
    state.params, state, batch, dropout_rng, config.train.label_smoothing
  )
  updates, opt_state = state.tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics = {
    "loss": loss,
    "tokens": tokens,
    "grad_norm": optax.global_norm(grads),
    "learning_rate": learning_rate_schedule(config.train)(state.step),
  }
  return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics


def eval_step(state: TrainState, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """Summed loss and token count of a batch (no smoothing, no dropout): sum them, then divide."""
  logits = state.model()(batch["src"], batch["src_mask"], batch["tgt_in"])
  total, tokens = cross_entropy(logits, batch["tgt_out"], batch["tgt_mask"])
  return {"loss_sum": total, "tokens": tokens}

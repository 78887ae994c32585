"""The train state and the pure steps.

`train_step(state, batch, rng, *, run) -> (state, metrics)` and `eval_step(state, batch) ->
metrics` are pure functions of their arguments (the training loop jits them, vmapped over seeds
when several train together). `run` is a run's typed settings (`settings.RunSettings`, built
by `settings.validate`; here only its model, train and objective sections are read, the
`StepSettings` protocol). Batches: see `seq2seq.training.objective`. The optimisers and the
learning-rate schedules are `seq2seq.training.optimisers`.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx, struct

from seq2seq.data import lexicon as lexicon_lib
from seq2seq.model import addons, models, structures
from seq2seq.training import objective, optimisers


@struct.dataclass
class TrainState:
  """Everything that changes during training, as one pytree (the model's graph is static)."""

  step: jax.Array  # int32 scalar: updates applied so far.
  params: nnx.State  # The model's parameters.
  opt_state: optax.OptState
  graphdef: nnx.GraphDef = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  # The loss terms' own states by term name (`objective.Term.init_state`: REINFORCE's reward
  # baseline), checkpointed with the rest; None when no term keeps one.
  terms: dict[str, Any] | None = None
  # The exponential moving average of the parameters (`train.ema_decay` > 0; checkpointed with
  # the rest), which validation and evaluation use; None without one.
  ema: nnx.State | None = None
  # float32 scalar: the share of the training budget spent before this update, which
  # `train.anneal` turns into a learning-rate factor (`anneal_factor`). The training loop sets it
  # before every step (it may follow the wall clock); not checkpointed; None without annealing.
  progress: jax.Array | None = None
  # float32 scalar: the learning-rate factor of `train.decay="plateau(...)"` (`PlateauScale`),
  # set by the training loop from the validations so far; not checkpointed; None without it.
  lr_scale: jax.Array | None = None

  def model(self) -> models.Seq2Seq:
    """The NNX model holding these parameters."""
    return nnx.merge(self.graphdef, self.params)

  def for_eval(self) -> TrainState:
    """The state whose parameters validation, evaluation and translation use: the moving
    average when there is one, else the parameters themselves."""
    return self if self.ema is None else self.replace(params=self.ema)


class StepSettings(Protocol):
  """What the train state and its update read of a run's typed settings."""

  model: models.ModelSettings
  train: optimisers.TrainSettings
  objective: objective.Objective


def create_train_state(
  run: StepSettings,
  rng: jax.Array,
  src_vocab: int,
  tgt_vocab: int,
  copy_map: np.ndarray | None = None,
  lexicon: Any = None,
) -> TrainState:
  """A fresh state of the run's model and optimiser: parameters initialised from `rng`,
  optimiser state zero, step 0 (`copy_map`: a copying model's vocabulary map,
  `copying.vocab_map`; `lexicon`: the lexicon bias's table learned at the start of training,
  `lexicon(table=train)`; without it, a `lexicon(table=FILE)` table file is read here)."""
  bias = run.model.addon("lexicon")
  if lexicon is None and bias and bias.settings.table != addons.LEXICON_FROM_TRAINING:
    lexicon = lexicon_lib.Lexicon.load(bias.settings.table)
  model = models.build_model(
    run.model,
    src_vocab,
    tgt_vocab,
    rngs=nnx.Rngs(params=rng),
    copy_map=copy_map,
    lexicon=lexicon,
  )
  graphdef, params = nnx.split(model, nnx.Param)
  tx = optimisers.make_optimizer(run.train)
  # The average starts at the parameters, in buffers of its own: one buffer in two leaves
  # cannot be donated to the train step (outside a jit nothing else copies it).
  ema = jax.tree.map(jnp.copy, params) if run.train.ema_decay > 0 else None
  terms = {t.name: t.init_state() for t in run.objective.terms}
  terms = {name: s for name, s in terms.items() if s is not None} or None
  return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params), graphdef, tx, terms, ema)


def train_step(
  state: TrainState,
  batch: dict[str, jax.Array],
  rng: jax.Array,
  *,
  run: StepSettings,
) -> tuple[TrainState, dict[str, Any]]:
  """One update of the run's objective. `rng` is this step's key (derive it with
  `jax.random.fold_in(base, step)`).

  Bind `run` with `functools.partial` before jitting. Metrics: loss (the objective optimised:
  per target token, or per sentence with train.loss_normalization="sentences", then with
  ce_loss per target token beside it),
  tokens, grad_norm (before clipping), learning_rate, finite (false: the update was not applied);
  with a reward baseline (hard attention) also reward (the batch's mean sentence log-likelihood)
  and baseline (after this step's update b <- decay * b + (1 - decay) * reward; at step 0,
  b <- reward); for agreement runs forward_loss, reverse_loss and agreement (see
  `objective.loss_fn`; tokens are the forward direction's, so tokens/s counts sentence pairs as for
  a plain model).
  """
  objective_ = run.objective
  keyed = (
    run.model.dropout > 0
    or objective_.softmax.uses_rng
    or (run.model.name not in models.ENCDEC_NAMES and structures.uses_rng(run.model.attention))
  )
  dropout_rng = rng if keyed else None
  loss, tokens, extras, grads = batch_gradients(
    state, batch, dropout_rng, objective_, run.train.micro_batches
  )
  grad_norm = optax.global_norm(grads)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

  train = run.train
  learning_rate = optimisers.learning_rate_schedule(train)(
    optimisers.schedule_count(state.opt_state, state.step)
  )
  # Factors the host sets: annealing's and a plateau schedule's.
  factor = None if state.progress is None else optimisers.anneal_factor(train, state.progress)
  if state.lr_scale is not None:
    factor = state.lr_scale if factor is None else factor * state.lr_scale
  if factor is not None:
    learning_rate = learning_rate * factor

  def update(params, opt_state, ema):
    updates, opt_state = state.tx.update(grads, opt_state, params)
    if factor is not None:  # Every rule's update is proportional to its step size.
      updates = jax.tree.map(lambda u: (factor * u).astype(u.dtype), updates)
    params = optax.apply_updates(params, updates)
    if ema is not None:
      decay = optimisers.ema_decay_at(train.ema_decay, state.step)
      ema = jax.tree.map(lambda e, p: decay * e + (1.0 - decay) * p, ema, params)
    return params, opt_state, ema

  # A non-finite step leaves parameters, optimiser state and moving average as they were (it
  # still counts as a step; the schedule, counting applied updates, does not advance). A cond
  # rather than a select between the old and new trees, which costs one more pass over the
  # parameters and moments (72 against 45 ms for the update on the benchmark config).
  params, opt_state, ema = jax.lax.cond(
    finite, update, lambda p, o, e: (p, o, e), state.params, state.opt_state, state.ema
  )
  metrics = {
    "loss": loss,
    "tokens": tokens,
    "grad_norm": grad_norm,
    "learning_rate": learning_rate,
    "finite": finite,
    **extras,
  }
  terms = None if state.terms is None else dict(state.terms)
  for term in objective_.terms:
    if terms is not None and term.name in terms:
      terms[term.name], logged = term.update_state(
        terms[term.name], extras, state.step == 0, finite
      )
      metrics.update(logged)
  return state.replace(
    step=state.step + 1,
    params=params,
    opt_state=opt_state,
    terms=terms,
    ema=ema,
  ), metrics


def batch_gradients(
  state: TrainState,
  batch: dict[str, jax.Array],
  rng: jax.Array | None,
  objective_: objective.Objective,
  micro_batches: int = 1,
) -> tuple[jax.Array, jax.Array, dict[str, jax.Array], Any]:
  """(loss, target tokens, metrics, gradient) of the objective on `batch`, computed over
  `micro_batches` slices of its rows one after another (`train.micro_batches`), so that memory
  holds one slice's activations at a time.

  The batch is padded with empty rows to a multiple of the count and cut into consecutive
  slices. Each slice's loss is divided by its own tokens (or sentences); weighting it by its
  share of the batch's gives the loss and the gradient of the whole batch, to rounding. Slice i
  draws its dropout from `fold_in(rng, i)`. The metrics the slices allow are means over target
  tokens (ce_loss and the penalty terms'): each is summed times its slice's tokens and divided
  by the batch's once, whatever the loss normalisation. `settings.validate` refuses the terms and
  softmaxes that a slice would change.
  """
  grad_fn = jax.value_and_grad(objective.loss_fn, has_aux=True)
  if micro_batches == 1:
    (loss, (_, tokens, extras)), grads = grad_fn(state.params, state, batch, rng, objective_)
    return loss, tokens, extras, grads
  rows = batch["tgt_mask"].shape[0]
  pad = -rows % micro_batches
  sliced = jax.tree.map(
    lambda x: jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1)).reshape(
      micro_batches, (rows + pad) // micro_batches, *x.shape[1:]
    ),
    batch,
  )
  weight_of = lambda b: (
    jnp.sum(jnp.any(b["tgt_mask"] > 0, axis=-1))
    if objective_.normalization == "sentences"
    else jnp.sum(b["tgt_mask"])
  ).astype(jnp.float32)
  whole = jnp.maximum(weight_of(batch), 1.0)
  whole_tokens = jnp.maximum(jnp.sum(batch["tgt_mask"]).astype(jnp.float32), 1.0)

  def add(carry, xs):
    i, piece = xs
    key = None if rng is None else jax.random.fold_in(rng, i)
    (loss, (_, tokens, extras)), grads = grad_fn(state.params, state, piece, key, objective_)
    share = weight_of(piece) / whole
    token_share = tokens.astype(jnp.float32) / whole_tokens
    weighted = jax.tree.map(lambda x: share * x, (loss, grads))
    weighted += (jax.tree.map(lambda x: token_share * x, extras),)
    total, count = carry
    return (jax.tree.map(jnp.add, total, weighted), count + tokens), None

  first = jax.tree.map(lambda x: x[0], sliced)
  (loss0, (_, tokens0, extras0)), grads0 = jax.eval_shape(
    lambda: grad_fn(state.params, state, first, rng, objective_)
  )
  zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), ((loss0, grads0, extras0), tokens0))
  ((loss, grads, extras), tokens), _ = jax.lax.scan(add, zeros, (jnp.arange(micro_batches), sliced))
  return loss, tokens, extras, grads


def eval_step(state: TrainState, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """Summed loss and token count of a batch (no smoothing, no dropout): sum them, then divide."""
  logits = state.model()(batch["src"], batch["src_mask"], batch["tgt_in"])
  total, tokens = objective.cross_entropy(logits, batch["tgt_out"], batch["tgt_mask"])
  return {"loss_sum": total, "tokens": tokens}

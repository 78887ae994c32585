"""The train state, the optimisers and the pure steps.

`train_step(state, batch, rng, *, run) -> (state, metrics)` and `eval_step(state, batch) ->
metrics` are pure functions of their arguments (the training loop jits them, vmapped over seeds
when several train together). `run` is a run's typed settings (`settings.RunSettings`, built
by `settings.validate`; here only its model, train and objective sections are read, the
`StepSettings` protocol). Batches: see `seq2seq.objective`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx, struct

from seq2seq import addons, metric_writer, models, objective, registry, structures
from seq2seq import lexicon as lexicon_lib


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


def ema_decay_at(decay: float, step: jax.Array) -> jax.Array:
  """The decay of the update after `step` updates: min(decay, (1 + step) / (10 + step)), so the
  first updates, whose average would otherwise hold the random initial parameters for long,
  follow the parameters closely (the schedule of TensorFlow's ExponentialMovingAverage)."""
  step = jnp.asarray(step, jnp.float32)
  return jnp.minimum(decay, (1.0 + step) / (10.0 + step))


@dataclasses.dataclass(frozen=True)
class TrainSettings:
  """The `config.train` section, typed (configs/default.py says what each field means): what
  the optimiser, the schedule, the annealing and the training loop read."""

  optimizer: str
  learning_rate: float
  adadelta_rho: float
  adadelta_eps: float
  clip_norm: float
  warmup_steps: int
  decay: str
  anneal: str
  anneal_to: float
  ema_decay: float
  label_smoothing: float
  loss_normalization: str
  loss_terms: str
  softmax: str
  num_steps: int
  max_minutes: float
  log_every: int
  eval_every: int
  checkpoint_every: int
  keep_checkpoints: int
  valid_bleu: bool
  final_eval: bool
  nonfinite: str
  early_stopping: str = ""
  micro_batches: int = 1

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> TrainSettings:
    """The typed training settings of a run's config (`settings.validate` checks the values)."""
    return registry.typed_section(cls, dict(config.train.items()), "train")


@dataclasses.dataclass(frozen=True)
class Halving:
  """`train.decay="halving(after=A, every=E)"`: the rate halves after update A and again every E
  updates after it (Luong et al. 2015: after epoch 5, every epoch; give both in updates)."""

  after: int = 0
  every: int = 1

  def __post_init__(self):
    if self.after < 0 or self.every < 1:
      raise ValueError(f"halving needs after >= 0 and every >= 1, got {self.after}, {self.every}")


@dataclasses.dataclass(frozen=True)
class Plateau:
  """`train.decay="plateau(metric, factor, patience, min_delta, cooldown)"`: the rate is
  multiplied by `factor` once validation `metric` (loss, or greedy bleu or chrf) has gone
  `patience` evaluations without beating its best by more than `min_delta`, then waits
  `cooldown` evaluations before counting again (optax.contrib.reduce_on_plateau, fed one value
  per evaluation)."""

  metric: str = "loss"
  factor: float = 0.5
  patience: int = 3
  min_delta: float = 0.0
  cooldown: int = 0

  def __post_init__(self):
    if self.metric not in PLATEAU_METRICS:
      raise ValueError(f"plateau metric must be one of {', '.join(PLATEAU_METRICS)}")
    if not 0 < self.factor < 1:
      raise ValueError(f"plateau factor must be in (0, 1), got {self.factor}")
    if self.patience < 1 or self.cooldown < 0 or self.min_delta < 0:
      raise ValueError("plateau needs patience >= 1, cooldown >= 0 and min_delta >= 0")


PLATEAU_METRICS = {"loss": 1.0, "bleu": -1.0, "chrf": -1.0}  # The sign that makes lower better.


class PlateauScale:
  """The learning-rate factor of a `Plateau` schedule, fed each validation on the host by
  optax's reduce_on_plateau; read again from the validation rows on resume (`replay`), so a
  resumed run scales exactly as the uninterrupted run."""

  def __init__(self, plateau: Plateau):
    self.plateau = plateau
    self.rule = optax.contrib.reduce_on_plateau(
      factor=plateau.factor,
      patience=plateau.patience,
      rtol=0.0,
      # optax wants a tolerance above 0; this one is below float32's spacing at any value a
      # loss or BLEU takes, so min_delta=0 counts any gain.
      atol=max(plateau.min_delta, 1e-30),
      cooldown=plateau.cooldown,
    )
    self.state = self.rule.init(jnp.zeros((), jnp.float32))

  @property
  def scale(self) -> float:
    return float(self.state.scale)

  def update(self, row: dict[str, Any]) -> float:
    """The factor after the validation `row` (its loss, bleu or chrf)."""
    value = PLATEAU_METRICS[self.plateau.metric] * float(row[self.plateau.metric])
    _, self.state = self.rule.update(jnp.zeros((), jnp.float32), self.state, value=value)
    return self.scale

  def replay(self, rows, until: int) -> float:
    """The factor after the validation rows of metrics.jsonl up to step `until`."""
    for row in metric_writer.validations(rows, until, self.plateau.metric):
      self.update(row)
    return self.scale


def plateau_of(cfg: TrainSettings) -> Plateau | None:
  """The plateau settings of `train.decay`, or None for another schedule."""
  spec = decay_spec(cfg.decay)
  return spec.settings if spec.name == "plateau" else None


# `train.decay`'s schedules and their settings.
DECAYS = {
  "constant": registry.NoSettings,
  "rsqrt": registry.NoSettings,
  "halving": Halving,
  "plateau": Plateau,
}


def decay_spec(decay: str) -> registry.Spec:
  """The `train.decay` string as a spec: constant, rsqrt or halving with its settings."""
  name = decay.partition("(")[0].strip()
  if name not in DECAYS:
    raise ValueError(f"train.decay={decay!r} is not one of {list(DECAYS)}")
  return registry.Spec(name, registry.parse_settings(DECAYS[name], decay, "train.decay"))


def learning_rate_schedule(cfg: TrainSettings) -> optax.Schedule:
  """Linear warm-up over `warmup_steps`, then constant, inverse square root or halving (a
  plateau schedule is constant here: the training loop's factor, `TrainState.lr_scale`, scales
  it; that factor is optax's `reduce_on_plateau`).

  Written out rather than composed of optax's schedules: optax has no inverse square root, and
  its `linear_schedule` and `exponential_decay` round differently from these formulas (a
  1,000-step warm-up of 1e-3 differs in the last bit at 723 of its steps; 0.5 ** 13 through
  XLA's pow is not 2 ** -13), so every saved run's learning rates would move. The value is a
  function of the optimiser's update count alone, so a resumed run reads the same rates."""
  base, warmup = cfg.learning_rate, cfg.warmup_steps
  decay_of = decay_spec(cfg.decay)

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    ramp = jnp.minimum(1.0, (step + 1.0) / warmup) if warmup > 0 else 1.0
    if decay_of.name in ("constant", "plateau"):
      decay = 1.0
    elif decay_of.name == "rsqrt":
      decay = jax.lax.rsqrt(jnp.maximum(step + 1.0, max(warmup, 1)) / max(warmup, 1))
    else:  # Halvings so far: none up to `after` updates, then one per `every`.
      after, every = decay_of.settings.after, decay_of.settings.every
      halvings = jnp.where(step < after, 0.0, jnp.floor((step - after) / every) + 1.0)
      decay = jnp.exp2(-halvings)
    return base * ramp * decay

  return schedule


def schedule_count(opt_state: Any, step: jax.Array) -> jax.Array:
  """The step the optimiser's learning-rate schedule reads: its own count of applied updates
  (optax's ScaleByScheduleState), which a skipped non-finite update does not advance, so it falls
  behind `state.step` by the updates skipped; `step` where the rule keeps no such count."""
  counts = [
    count
    for path, count in optax.tree_utils.tree_get_all_with_path(opt_state, "count")
    if any(getattr(key, "tuple_name", "") == "ScaleByScheduleState" for key in path)
  ]
  return counts[0] if counts else step


ANNEALS = ("none", "linear", "cosine")


def anneal_factor(cfg: TrainSettings, progress: jax.Array) -> jax.Array:
  """The factor `train.anneal` puts on the learning rate once `progress` (0 to 1) of the budget
  is spent: 1 at the start, falling to `train.anneal_to` at the end, along a straight line or
  half a cosine (warm-up and decay of `learning_rate_schedule` apply beneath it); 1 throughout
  for "none"."""
  p = jnp.clip(jnp.asarray(progress, jnp.float32), 0.0, 1.0)
  if cfg.anneal == "none":
    fall = jnp.zeros_like(p)
  elif cfg.anneal == "linear":
    fall = p
  elif cfg.anneal == "cosine":
    fall = 0.5 * (1.0 - jnp.cos(jnp.pi * p))
  else:
    raise ValueError(f"train.anneal={cfg.anneal!r} is not one of {list(ANNEALS)}")
  return 1.0 - (1.0 - cfg.anneal_to) * fall


def budget_progress(cfg: TrainSettings, step: int, elapsed_s: float) -> float:
  """The share of the budget spent after `step` updates and `elapsed_s` seconds of training:
  the larger of step / num_steps and, with a wall-clock budget, elapsed / max_minutes, so a run
  that its budget stops ends annealed too."""
  spent = step / cfg.num_steps
  if cfg.max_minutes > 0:
    spent = max(spent, elapsed_s / (60.0 * cfg.max_minutes))
  return min(spent, 1.0)


_OPTIMIZERS = {
  "adadelta": lambda lr, cfg: optax.adadelta(lr, rho=cfg.adadelta_rho, eps=cfg.adadelta_eps),
  "adam": lambda lr, cfg: optax.adam(lr),
  "sgd": lambda lr, cfg: optax.sgd(lr),
}


def make_optimizer(cfg: TrainSettings) -> optax.GradientTransformation:
  """The optimiser of the training settings: clip the global norm, then the update rule."""
  if cfg.optimizer not in _OPTIMIZERS:
    raise ValueError(
      f"train.optimizer={cfg.optimizer!r} is not one of {', '.join(sorted(_OPTIMIZERS))}"
    )
  rule = _OPTIMIZERS[cfg.optimizer](learning_rate_schedule(cfg), cfg)
  if cfg.clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(cfg.clip_norm), rule)
  return rule


class StepSettings(Protocol):
  """What the train state and its update read of a run's typed settings."""

  model: models.ModelSettings
  train: TrainSettings
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
  `model.lexicon_bias=train`; without it, a `model.lexicon_bias` table file is read here)."""
  bias = run.model.lexicon_bias  # "" when off.
  if lexicon is None and bias not in ("", addons.LEXICON_FROM_TRAINING):
    lexicon = lexicon_lib.Lexicon.load(bias)
  model = models.build_model(
    run.model,
    src_vocab,
    tgt_vocab,
    rngs=nnx.Rngs(params=rng),
    copy_map=copy_map,
    lexicon=lexicon,
  )
  graphdef, params = nnx.split(model, nnx.Param)
  tx = make_optimizer(run.train)
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
  learning_rate = learning_rate_schedule(train)(schedule_count(state.opt_state, state.step))
  # Factors the host sets: annealing's and a plateau schedule's.
  factor = None if state.progress is None else anneal_factor(train, state.progress)
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
      decay = ema_decay_at(train.ema_decay, state.step)
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

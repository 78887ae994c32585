"""The training settings, the optimisers and the learning-rate schedules (decay, plateau scaling,
annealing over the budget, the parameters' moving average)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax

from seq2seq.common import registry
from seq2seq.training import metric_writer


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
  adam_b1: float
  adam_b2: float
  adam_eps: float
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
  tracker: str = ""

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
  "adam": lambda lr, cfg: optax.adam(lr, b1=cfg.adam_b1, b2=cfg.adam_b2, eps=cfg.adam_eps),
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

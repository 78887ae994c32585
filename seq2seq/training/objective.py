"""The training objective: the cross-entropy and the terms added to it, and the loss of a batch.

`loss_fn(params, state, batch, rng, objective) -> (loss, (summed cross-entropy, target tokens,
extra metrics))` is what `train_state.train_step` differentiates. Batches are dicts of int32 arrays:
`src` [B, S], `src_mask` [B, S], `tgt_in` [B, T], `tgt_out` [B, T], `tgt_mask` [B, T], and
`align` [B, T, S] (gold links) when attention is supervised.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from seq2seq.common import registry
from seq2seq.data import input_pipeline, tokenizer
from seq2seq.model import models, normalisers, structures
from seq2seq.training import softmax as softmax_lib


def cross_entropy(
  logits_BTV: jax.Array,
  targets_BT: jax.Array,
  mask_BT: jax.Array,
  label_smoothing: float = 0.0,
  smoothed_classes: int | None = None,
) -> tuple[jax.Array, jax.Array]:
  """(summed token cross-entropy over unmasked positions, number of unmasked tokens).

  With label smoothing the target distribution puts 1 - ls on the reference word and spreads ls
  uniformly over the vocabulary (the first `smoothed_classes` columns when given: a copying
  model's extended entries are left out); the loss is then shifted by the distribution's own
  entropy so a perfect prediction of the smoothed distribution scores 0 (for a copied target
  outside the smoothed columns too). As in fairseq, PAD and BOS columns get their share of the
  smoothing mass (OpenNMT-py leaves PAD out); decoding never produces them.
  """
  # -log p(y) = logsumexp(z) - z_y, and the mean of -log p over columns is logsumexp(z) minus
  # their mean logit: written so, neither pass builds the [B, T, V] log-probabilities, and the
  # backward pass is one softmax over the logits (about half the time of `log_softmax`'s).
  logits = logits_BTV.astype(jnp.float32)
  normaliser_BT = jax.nn.logsumexp(logits, axis=-1)
  nll = normaliser_BT - jnp.take_along_axis(logits, targets_BT[..., None], axis=-1)[..., 0]
  if label_smoothing > 0:
    vocab = smoothed_classes or logits.shape[-1]
    on, off = 1.0 - label_smoothing, label_smoothing / vocab
    smooth = normaliser_BT - jnp.mean(logits[..., :vocab], axis=-1)
    xlogx = lambda x: x * math.log(x) if x > 0 else 0.0  # Python floats: static settings.
    entropy = -xlogx(on + off) - (vocab - 1) * xlogx(off)
    copied = -xlogx(on) - vocab * xlogx(off)  # A target V + j outside the smoothed columns.
    entropy = jnp.where(targets_BT >= vocab, copied, entropy)
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
    raise ValueError(f"supervision loss {kind!r} is not one of {SUPERVISION_LOSSES}")
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


# ---------------------------------------------------------------------------- the terms


@dataclasses.dataclass
class DirectionPass:
  """One translation direction's teacher-forced pass: what the terms read."""

  batch: dict[str, jax.Array]  # The direction's batch (an agreement run's reverse is swapped).
  logits: jax.Array  # [B, T, V] float32.
  aux: dict[str, jax.Array]  # "alpha" [B, T, S], "fertility" [B, S] and the structure's per-step
  # extras (e.g. hard attention's "sample_logp", "entropy") when a term needs outputs; else {}.
  tokens: jax.Array  # Target tokens of the batch.
  metrics: dict[str, jax.Array] = dataclasses.field(default_factory=dict)  # The softmax's.


@dataclasses.dataclass
class StepContext:
  """What a term may read beyond the passes: the step's key and the terms' own states."""

  rng: jax.Array | None  # None for a deterministic pass (no sampling, no dropout).
  states: dict[str, Any]  # Each stateful term's state (`Term.init_state`), by term name.
  first_step: jax.Array  # bool scalar: step 0.


class Term(abc.ABC):
  """One registered term of the training objective.

  A term says which model outputs it reads beyond the logits (`needs`: keys of `DirectionPass.aux`),
  which batch keys it needs beyond the standard ones (`batch_keys`, built by the input pipeline),
  and which metrics it reports (`metrics`). Its own settings are a frozen dataclass `Settings`,
  given in `train.loss_terms` as a spec (`"fertility(weight=0.1)"`, `seq2seq.common.registry`). A
  run has the terms listed there and those its model implies (`implied`: the cross-entropy always,
  REINFORCE for sampled attention, the agreement bonus for agreement runs; listing an implied
  term changes its settings). Called on one direction's pass it returns (value added to that
  direction's summed objective, its metrics); a `joint` term is called once with every
  direction's pass (agreement). A `penalty` term adds to the reported loss, which is then
  logged with the cross-entropy per target token ("ce_loss") beside it.

  A term that keeps state across updates (REINFORCE's reward baseline) says so in
  `init_state`; the train state holds it under the term's name (`TrainState.terms`, saved in
  checkpoints), the term reads it as `ctx.states[name]` and `update_state` moves it after each
  update from the step's metrics.
  """

  name: ClassVar[str]
  Settings: ClassVar[type] = registry.NoSettings
  needs: ClassVar[frozenset[str]] = frozenset()
  batch_keys: ClassVar[tuple[str, ...]] = ()
  metrics: ClassVar[tuple[str, ...]] = ()
  joint: ClassVar[bool] = False
  penalty: ClassVar[bool] = False

  @classmethod
  def implied(cls, run: ObjectiveSettings) -> bool:
    """Whether a run with these settings has this term without `train.loss_terms` naming it."""
    return False

  @classmethod  # noqa: B027 (an optional hook)
  def check(cls, run: ObjectiveSettings) -> None:
    """Raises ValueError (one line) when `train.loss_terms` names the term for a run it does
    not apply to."""

  @classmethod
  def build(cls, settings: Any, run: ObjectiveSettings) -> Term:
    """The term with its settings (and whatever else of the run's settings it reads)."""
    return cls(settings)

  def init_state(self) -> Any:
    """The term's state before the first update; None: the term keeps none."""
    return None

  def update_state(
    self, state: Any, metrics: dict[str, jax.Array], first_step: jax.Array, applied: jax.Array
  ) -> tuple[Any, dict[str, jax.Array]]:
    """The state after an update whose metrics are `metrics` (`applied`, bool scalar: false
    when the update was skipped, which must leave the state as it was), and metrics of its own
    to log."""
    return state, {}

  @abc.abstractmethod
  def __call__(self, passes, ctx: StepContext) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(value added to the summed objective, metrics) of one direction's pass (a joint term:
    of every direction's, {name: pass})."""


REGISTRY: registry.Registry[Term] = registry.Registry("loss term", field="train.loss_terms")
register = REGISTRY.register  # Class decorator: @register("name") on a Term subclass.
names = REGISTRY.names  # The registered terms, in registration order (the order of summing).
get = REGISTRY.get  # The term class registered under a name.


@dataclasses.dataclass(frozen=True)
class ObjectiveSettings:
  """What the objective and its terms read of a run's settings: the typed model section and the
  train and data fields below. `from_config` builds it once from a run's config."""

  model: models.ModelSettings
  label_smoothing: float = 0.0
  loss_normalization: str = "tokens"
  loss_terms: str = ""
  softmax: str = "full"
  tokenizer: str = "word"  # `data.tokenizer`: gold links index words.

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> ObjectiveSettings:
    """The objective's settings of a run's config (`settings.validate` checks the values)."""
    t = config.train
    sources = input_pipeline.DataSettings.from_config(config).sources
    return cls(
      models.ModelSettings.from_config(config.model, sources),
      float(t.label_smoothing),
      str(t.loss_normalization),
      str(t.loss_terms),
      str(t.softmax),
      str(config.data.tokenizer),
    )


def _require_attention(run: ObjectiveSettings, term: str) -> None:
  if run.model.name in models.ENCDEC_NAMES:
    raise ValueError(
      f"train.loss_terms: {term} reads the attention, which model.name={run.model.name} lacks"
    )


@register("cross_entropy")
@dataclasses.dataclass(frozen=True)
class CrossEntropy(Term):
  """The cross-entropy of the reference words (with `train.label_smoothing`), always on."""

  label_smoothing: float = 0.0
  copy: bool = False  # The logits span the extended vocabulary V + S (`model.addons=copy`).

  @classmethod
  def implied(cls, run):
    return True

  @classmethod
  def build(cls, settings, run):
    return cls(run.label_smoothing, run.model.extends_vocabulary)

  def __call__(self, p: DirectionPass, ctx):
    vocab = p.logits.shape[-1] - p.batch["src"].shape[1] if self.copy else None
    total, _ = cross_entropy(
      p.logits, p.batch["tgt_out"], p.batch["tgt_mask"], self.label_smoothing, vocab
    )
    return total, {}


@register("fertility")
@dataclasses.dataclass(frozen=True)
class Fertility(Term):
  """`weight` x `fertility_loss` (Cohn et al. 2016): N_j is the learned fertility with
  `model.features="coverage(fertility=true)"`, else 1."""

  @dataclasses.dataclass(frozen=True)
  class Settings:
    weight: float = 0.1

  needs: ClassVar[frozenset[str]] = frozenset({"alpha", "fertility"})
  metrics: ClassVar[tuple[str, ...]] = ("fertility_loss",)
  penalty: ClassVar[bool] = True
  settings: Settings = Settings()

  @classmethod
  def check(cls, run):
    _require_attention(run, "fertility")

  def __call__(self, p: DirectionPass, ctx):
    penalty = fertility_loss(
      p.aux["alpha"], p.aux["fertility"], p.batch["src_mask"], p.batch["tgt_mask"]
    )
    return self.settings.weight * penalty, {"fertility_loss": penalty / jnp.maximum(p.tokens, 1.0)}


@register("supervision")
@dataclasses.dataclass(frozen=True)
class Supervision(Term):
  """`weight` x `attention_supervision_loss` of kind `loss` against the gold links
  `batch["align"]` [B, T, S] (`data.local.align` names them)."""

  @dataclasses.dataclass(frozen=True)
  class Settings:
    weight: float = 1.0
    loss: str = "ce"  # "ce" (cross-entropy) or "mse" (`attention_supervision_loss`).

    def __post_init__(self):
      if self.loss not in SUPERVISION_LOSSES:
        raise ValueError(f"loss={self.loss!r} is not one of {SUPERVISION_LOSSES}")

  needs: ClassVar[frozenset[str]] = frozenset({"alpha"})
  batch_keys: ClassVar[tuple[str, ...]] = ("align",)
  metrics: ClassVar[tuple[str, ...]] = ("supervision_loss",)
  penalty: ClassVar[bool] = True
  settings: Settings = Settings()

  @classmethod
  def check(cls, run):
    _require_attention(run, "supervision")
    if run.tokenizer != "word":
      raise ValueError(
        "train.loss_terms: supervision needs data.tokenizer=word (gold links index words)"
      )
    # A link the attention cannot reach adds a constant (18.42 for ce) and no gradient towards it.
    normaliser, attention = run.model.normaliser, run.model.attention
    narrow = None
    if normalisers.REGISTRY.get(normaliser.name).sparse:
      narrow = f"model.normaliser={str(normaliser)!r} gives exact zeros (use softmax)"
    elif structures.get(attention.name).windowed:
      narrow = f"model.attention={str(attention)!r} is zero outside its window (use soft)"
    if narrow:
      raise ValueError(
        "train.loss_terms: supervision gets no gradient towards a gold link the attention "
        f"cannot reach, and {narrow}"
      )

  def __call__(self, p: DirectionPass, ctx):
    guided = attention_supervision_loss(p.aux["alpha"], p.batch["align"], self.settings.loss)
    return self.settings.weight * guided, {"supervision_loss": guided / jnp.maximum(p.tokens, 1.0)}


@register("reinforce")
@dataclasses.dataclass(frozen=True)
class Reinforce(Term):
  """Hard attention's score-function estimator (`reinforce_loss`, Xu et al. 2015), implied by a
  model whose attention samples its positions, on when given a key: each sentence's
  log-likelihood is its reward, against the baseline (the batch's mean reward at the first step
  or without one). It adds the estimator's gradient, not its value, so the loss stays
  comparable; its metric "reward" (the batch's mean reward) moves the baseline, its state,
  b <- baseline_decay * b + (1 - baseline_decay) * reward (b <- reward at the first step),
  logged as "baseline"."""

  @dataclasses.dataclass(frozen=True)
  class Settings:
    weight: float = 1.0  # lambda_r: weight of the score-function term.
    entropy_weight: float = 0.01  # lambda_e: weight of the attention-entropy bonus.
    baseline_decay: float = 0.9  # Of the reward baseline's moving average.

    def __post_init__(self):
      if not 0.0 <= self.baseline_decay < 1.0:
        raise ValueError(f"baseline_decay must be in [0, 1), got {self.baseline_decay}")

  needs: ClassVar[frozenset[str]] = frozenset({"alpha", "sample_logp", "entropy"})
  metrics: ClassVar[tuple[str, ...]] = ("reward",)
  settings: Settings = Settings()

  @classmethod
  def implied(cls, run):
    return run.model.name != "agreement" and _sampled(run)

  def init_state(self):
    return jnp.zeros((), jnp.float32)  # float32 scalar: the reward baseline b.

  def update_state(self, state, metrics, first_step, applied):
    if "reward" not in metrics:  # A deterministic pass: nothing sampled, nothing learned.
      return state, {}
    decay, reward = self.settings.baseline_decay, metrics["reward"]
    moved = jnp.where(first_step, reward, decay * state + (1.0 - decay) * reward)
    kept = jnp.where(applied, moved, state)
    return kept, {"baseline": kept}

  @classmethod
  def check(cls, run):
    if not cls.implied(run):
      raise ValueError(
        "train.loss_terms: reinforce trains attention that samples its positions "
        f"(model.attention=hard), not model.attention={str(run.model.attention)!r}"
      )

  def __call__(self, p: DirectionPass, ctx):
    if ctx.rng is None:  # A deterministic pass samples nothing.
      return jnp.zeros((), jnp.float32), {}
    mask = p.batch["tgt_mask"]
    reward_B = jax.lax.stop_gradient(sentence_log_likelihood(p.logits, p.batch["tgt_out"], mask))
    real_B = (jnp.sum(mask, axis=-1) > 0).astype(jnp.float32)
    mean_reward = jnp.sum(reward_B * real_B) / jnp.maximum(jnp.sum(real_B), 1.0)
    baseline = ctx.states.get(self.name, mean_reward)
    baseline = jnp.where(ctx.first_step, mean_reward, baseline)
    surrogate = reinforce_loss(
      reward_B,
      baseline,
      p.aux["sample_logp"],
      p.aux["entropy"],
      mask,
      self.settings.weight,
      self.settings.entropy_weight,
    )
    return surrogate - jax.lax.stop_gradient(surrogate), {"reward": mean_reward}


def _sampled(run: ObjectiveSettings) -> bool:
  return run.model.name not in models.ENCDEC_NAMES and (
    structures.get(run.model.attention.name).sampled
  )


@register("agreement")
@dataclasses.dataclass(frozen=True)
class AgreementBonus(Term):
  """Agreement runs (Cohn et al. 2016), implied by `model.name=agreement`: minus `weight` x
  `agreement_bonus` of the forward and reverse attention; its metric "agreement" is the bonus
  per forward target token (in [0, 1])."""

  @dataclasses.dataclass(frozen=True)
  class Settings:
    weight: float = 1.0  # 0: the two directions train side by side, unjoined.

  needs: ClassVar[frozenset[str]] = frozenset({"alpha"})
  metrics: ClassVar[tuple[str, ...]] = ("agreement",)
  joint: ClassVar[bool] = True
  settings: Settings = Settings()

  @classmethod
  def implied(cls, run):
    return run.model.name == "agreement"

  @classmethod
  def check(cls, run):
    if not cls.implied(run):
      raise ValueError(
        "train.loss_terms: agreement joins the two directions of model.name=agreement"
      )

  def __call__(self, passes, ctx):
    fwd, rev = passes["forward"], passes["reverse"]
    bonus = agreement_bonus(
      fwd.aux["alpha"], rev.aux["alpha"], fwd.batch["src_mask"], fwd.batch["tgt_mask"]
    )
    agreement = bonus / jnp.maximum(fwd.tokens, 1.0)
    return -self.settings.weight * bonus, {"agreement": agreement}


# "tokens": the mean over the batch's target tokens. "sentences": summed over each sentence's
# target tokens, then the mean over sentences (GroundHog's cost, which the paper trained with).
LOSS_NORMALIZATIONS = ("tokens", "sentences")


@dataclasses.dataclass(frozen=True)
class Objective:
  """The configured terms and what their sum is divided by (`train.loss_normalization`)."""

  terms: tuple[Term, ...]
  normalization: str = "tokens"
  softmax: softmax_lib.Softmax = dataclasses.field(default_factory=lambda: softmax_lib.make("full"))

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> Objective:
    """The objective of a run's config (`build` of its `ObjectiveSettings`)."""
    return cls.build(ObjectiveSettings.from_config(config))

  @classmethod
  def build(cls, run: ObjectiveSettings) -> Objective:
    """Every registered term that the run's settings turn on, in registration order."""
    normalization = run.loss_normalization
    if normalization not in LOSS_NORMALIZATIONS:
      raise ValueError(
        f"train.loss_normalization={normalization!r} is not one of {LOSS_NORMALIZATIONS}"
      )
    if normalization != "tokens" and run.model.name == "agreement":
      raise ValueError("model.name=agreement trains with train.loss_normalization='tokens'")
    listed = {spec.name: spec.settings for spec in REGISTRY.specs(run.loss_terms)}
    terms = []
    for name in names():
      term = get(name)
      if name in listed:
        term.check(run)
        terms.append(term.build(listed[name], run))
      elif term.implied(run):
        terms.append(term.build(term.Settings(), run))
    return cls(tuple(terms), normalization, softmax_lib.make(run.softmax))

  def term(self, name: str) -> Term | None:
    """The configured term registered as `name`, or None."""
    return next((t for t in self.terms if t.name == name), None)

  @property
  def needs(self) -> frozenset[str]:
    """The model outputs beyond the logits that some term reads."""
    return frozenset().union(*(t.needs for t in self.terms))

  @property
  def batch_keys(self) -> tuple[str, ...]:
    """The batch keys beyond the standard ones that some term reads."""
    return tuple(sorted({k for t in self.terms for k in t.batch_keys}))


def direction_pass(
  model, batch, rng, needs: frozenset[str], softmax: softmax_lib.Softmax
) -> DirectionPass:
  """The teacher-forced pass of one direction, with the outputs `needs` asks for, its logits
  over the candidates `softmax` picks (and the batch's targets mapped onto them) in training."""
  key = None if rng is None else jax.random.fold_in(rng, 11)
  ids, batch, metrics = softmax.candidates(batch, model.tgt_vocab, key)
  args = (batch["src"], batch["src_mask"], batch["tgt_in"])
  kwargs = {"dropout_rng": rng} if ids is None else {"dropout_rng": rng, "output_ids": ids}
  aux = {}
  if needs:
    logits, aux = model(*args, return_aux=True, **kwargs)
  else:
    logits = model(*args, **kwargs)
  tokens = jnp.sum(batch["tgt_mask"].astype(jnp.float32))
  return DirectionPass(batch, logits, aux, tokens, metrics)


def loss_fn(
  params: nnx.State,
  state: Any,
  batch: dict[str, jax.Array],
  rng,
  objective: Objective,
):
  """The loss of `batch` under `params`, and (summed cross-entropy, target tokens, metrics).

  Each direction's terms are summed into its objective O, divided by its target tokens N (or
  by its sentences with `objective.normalization="sentences"`); joint terms are divided by the
  forward direction's N. A plain model has one direction; an `Agreement` model two, forward on
  `batch` and reverse on `reverse_batch(batch)` with the key folded with 1, reported as
  forward_loss and reverse_loss. The cross-entropy and tokens returned are the forward
  direction's; metrics hold every term's (its forward value), and "ce_loss" (cross-entropy per
  target token) when a penalty term is on or the loss is per sentence.
  """
  model = nnx.merge(state.graphdef, params)
  ctx = StepContext(rng, state.terms or {}, state.step == 0)
  needs = objective.needs
  if isinstance(model, models.Agreement):
    rng_rev = None if rng is None else jax.random.fold_in(rng, 1)
    passes = {
      "forward": direction_pass(model.forward, batch, rng, needs, objective.softmax),
      "reverse": direction_pass(
        model.reverse, reverse_batch(batch), rng_rev, needs, objective.softmax
      ),
    }
  else:
    passes = {"forward": direction_pass(model, batch, rng, needs, objective.softmax)}
  fwd = passes["forward"]
  loss, metrics = 0.0, dict(fwd.metrics)
  for name, p in passes.items():
    summed = 0.0
    for term in objective.terms:
      if term.joint:
        continue
      value, term_metrics = term(p, ctx)
      summed = summed + value
      if name == "forward":
        metrics.update(term_metrics)
        if isinstance(term, CrossEntropy):
          total = value
    if objective.normalization == "sentences":
      sentences = jnp.sum(jnp.any(p.batch["tgt_mask"] > 0, axis=-1).astype(jnp.float32))
      per_direction = summed / jnp.maximum(sentences, 1.0)
    else:
      per_direction = summed * (1.0 / jnp.maximum(p.tokens, 1.0))
    if len(passes) > 1:
      metrics[f"{name}_loss"] = per_direction
    loss = loss + per_direction
  for term in objective.terms:
    if term.joint:
      value, term_metrics = term(passes, ctx)
      loss = loss + value / jnp.maximum(fwd.tokens, 1.0)
      metrics.update(term_metrics)
  if any(t.penalty for t in objective.terms) or objective.normalization == "sentences":
    metrics["ce_loss"] = total / jnp.maximum(fwd.tokens, 1.0)
  return loss, (total, fwd.tokens, metrics)


DIRECTION_METRICS = ("forward_loss", "reverse_loss")  # Logged for agreement runs.
EXTRA_METRICS = (
  *DIRECTION_METRICS,
  *(m for name in names() for m in get(name).metrics),
  "ce_loss",
  "baseline",
  "sampled_missing",
)

"""Where attention may look: the attention structures around the score function.

Axes: B batch, S source positions, H annotation size, D decoder units, K key size, F feature maps
(conv), N heads (multihead), A attention units.

A structure turns the decoder state s_{i-1} and the encoded source into the context c_i and the
attention alpha_i of one decoder step. `model.attention` names it:

* `soft`: the paper's global soft attention, alpha_i = masked softmax_j e_ij (the default).
* `local_m`, `local_p`: Luong et al. (2015). The softmax only covers the window
  |j - p_i| <= D (`local_p(window=D)`); local-m centres it on the target position,
  p_i = min(i, |x| - 1), local-p predicts p_i = |x| sigmoid(v_p^T tanh(W_p s_{i-1})) and weights
  the window by exp(-(j - p_i)^2 / (2 sigma^2)), sigma = D / 2 (so its rows sum to at most 1).
* `monotonic`: Raffel et al. (2017). Position j "emits" with p_ij = sigmoid(e_ij + r) (learned r,
  Gaussian noise during training); reading moves left to right only (Yu et al. 2016's "read
  more or emit"). Training uses the expected alignment in closed form, in log space
  (`expected_alignment`), decoding the hard choice (`hard_monotonic`).
* `conv`: Allamanis et al. (2016). Features from two 1-D convolutions over the annotations,
  gated by the decoder state, L2-normalised and scored by a third convolution, so a position's
  score can depend on its neighbours ("attend to the word after X").
* `multihead`: additive attention with N heads over split projections W_a, U_a; the N head
  contexts are concatenated and projected (W_o starts as the mean of the heads).
* `hard`: Xu et al. (2015). One position j ~ alpha_i is sampled per step and c_i = h_j; trained
  with REINFORCE (`seq2seq.train.reinforce_loss`), decoded with the argmax position.

Every structure is an NNX module with
* `keys(score, annotations_BSH, mask_BS) -> keys`: computed once per sentence (by default the
  score function's keys, U_a h_j for `additive`);
* `init_state(mask_BS)`: what it carries across decoder steps (`DecoderState.structure`);
* `__call__(score, query_BD, keys, annotations_BSH, mask_BS, state, *, rng, decoding)
  -> Attended`, one step for the whole batch; scores of one query are lifted with `jax.vmap`.

Structures with `uses_score = True` score through the model's registered score function (and
its alignment features); `conv` and `multihead` bring their own. Register a new one with
`@register("name")`; its own settings go in a nested frozen dataclass `Settings`, named in the
spec (`model.attention="monotonic(noise=0.5)"`, `seq2seq.common.registry`). `make_structure` lists
the valid names when the name is unknown.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.common import registry
from seq2seq.model import attention, layers, normalisers

REGISTRY: registry.Registry[Structure] = registry.Registry(
  "attention structure", field="model.attention"
)
register = REGISTRY.register  # Class decorator: @register("name") on a Structure subclass.
names = REGISTRY.names  # The registered structure names, in registration order (`soft` first).
get = REGISTRY.get  # The structure class registered under a name.
spec = REGISTRY.spec  # The Spec (name, typed settings) of a `model.attention` string.


def make_structure(
  structure: str | registry.Spec, query_dim: int, annot_dim: int, cfg: Any, *, rngs: nnx.Rngs
) -> Structure:
  """Builds the structure `structure` (a spec) for queries of size D and annotations of size H;
  `cfg` holds the model's shared settings (`models.ModelSettings`)."""
  parsed = spec(structure)
  built = get(parsed.name)(query_dim, annot_dim, cfg, parsed.settings, rngs=rngs)
  built.normalise = normalisers.make_normaliser(getattr(cfg, "normaliser", "softmax"))
  return built


def uses_rng(structure: str | registry.Spec) -> bool:
  """Whether training must hand the model a random key for the attention `structure` (a spec),
  even without dropout."""
  parsed = spec(structure)
  return get(parsed.name).uses_rng(parsed.settings)


class Attended(NamedTuple):
  """One decoder step's reading of the source."""

  context: jax.Array  # [B, H] float32: c_i.
  alpha: jax.Array  # [B, S] float32: alpha_i (multihead: the mean over heads).
  state: Any  # The structure's state after this step (`DecoderState.structure`).
  extras: dict[str, jax.Array]  # Per-step outputs [B, ...] returned by training (`return_aux`).


class Structure(nnx.Module):
  """Base class: soft attention's keys, no state across steps, no randomness."""

  name = "base"
  uses_score = True  # Scores through the model's score function (and its alignment features).
  sampled = False  # Samples where to look: training adds `objective.reinforce_loss`.
  windowed = False  # Gives exactly zero weight outside a window of positions.
  # The paper's attention (no state, window or parameters of its own): what a model without
  # attention leaves `model.attention` at, and what each of two sources is attended with.
  plain = False
  # Whether its weights come from a normaliser (`model.normaliser`), which `make_structure` sets.
  normalised = True
  normalise: normalisers.Normaliser = normalisers.Softmax()
  Settings = registry.NoSettings  # The structure's own settings (a frozen dataclass).

  def __init__(self, query_dim: int, annot_dim: int, cfg: Any, settings: Any, *, rngs: nnx.Rngs):
    pass

  @classmethod
  def uses_rng(cls, settings: Any) -> bool:
    """Whether training with these settings needs a random key."""
    return False

  def keys(self, score, annotations_BSH: jax.Array, mask_BS: jax.Array) -> Any:
    return score.keys(annotations_BSH)

  def init_state(self, mask_BS: jax.Array) -> Any:
    return ()

  def __call__(
    self, score, query_BD, keys, annotations_BSH, mask_BS, state, *, rng=None, decoding=False
  ) -> Attended:
    raise TypeError(f"{type(self).__name__} must define __call__")


def _scores(score, query_BD, keys_BSK, annotations_BSH) -> jax.Array:
  """e [B, S] float32: the score of each sentence's query, lifted over the batch."""
  return jax.vmap(score)(query_BD, keys_BSK, annotations_BSH).astype(jnp.float32)


@register("soft")
class Soft(Structure):
  """Global soft attention over every source position (Bahdanau et al.)."""

  plain = True

  def __call__(
    self, score, query_BD, keys, annotations_BSH, mask_BS, state, *, rng=None, decoding=False
  ):
    context, alpha = attention.attend(
      score, query_BD, keys, annotations_BSH, mask_BS, self.normalise
    )
    return Attended(context, alpha, state, {})


@dataclasses.dataclass(frozen=True)
class WindowSettings:
  window: int = 10  # D: the window is p_i - D .. p_i + D (Luong et al.: 10).

  def __post_init__(self):
    if self.window < 0:
      raise ValueError(f"window must be at least 0, got {self.window}")


def _slice_rows(tree, start_B: jax.Array, width: int):
  """Positions start_b .. start_b + width - 1 of every row of each [B, S, ...] leaf of `tree`."""
  take = lambda x, s: jax.lax.dynamic_slice_in_dim(x, s, width, axis=0)
  return jax.tree.map(lambda x: jax.vmap(take)(x, start_B), tree)


class Window(NamedTuple):
  """The source positions a local structure scores at one step: `width` in a row from `start`."""

  start_B: jax.Array  # [B] int32.
  positions_BW: jax.Array  # [B, W] int32: start_b + 0 .. W - 1.
  e_BW: jax.Array  # [B, W] float32: the scores of those positions.
  annotations_BWH: jax.Array
  mask_BW: jax.Array


def _score_window(score, query_BD, keys, annotations_BSH, mask_BS, first_B, width) -> Window:
  """Scores only the `width` positions from `first_B` (moved inside the source padding, so the
  window keeps its width; no wider than S). A score that depends on absolute positions
  (`Score.positional`, e.g. `location`) gets every position (start 0, width S) instead."""
  src_len = mask_BS.shape[-1]
  width = src_len if getattr(score, "positional", False) else min(width, src_len)
  start_B = jnp.clip(first_B, 0, src_len - width).astype(jnp.int32)
  keys_W, annotations_W, mask_W = _slice_rows((keys, annotations_BSH, mask_BS), start_B, width)
  positions_BW = start_B[:, None] + jnp.arange(width, dtype=jnp.int32)[None, :]
  e_BW = _scores(score, query_BD, keys_W, annotations_W)
  return Window(start_B, positions_BW, e_BW, annotations_W, mask_W.astype(bool))


def _attend_window(score, query_BD, keys, annotations_BSH, mask_BS, first_B, width, weigh):
  """(context [B, H], alpha [B, S]) of the `width` positions from `first_B` (`_score_window`),
  `weigh(window) -> (alpha_BW, in_window_BW)` making the window's weights from its scores.

  Recomputed in the backward pass (jax.checkpoint) rather than kept: the window's annotations
  and keys, sliced anew at every step, would otherwise be stacked for every step of a decoder
  scan ([T, B, 2D + 1, H] each), while the whole annotations do not change along it."""

  def attend(query_BD, keys, annotations_BSH, mask_BS, first_B):
    win = _score_window(score, query_BD, keys, annotations_BSH, mask_BS, first_B, width)
    alpha_BW, in_window_BW = weigh(win)
    return _read_window(win, alpha_BW, in_window_BW, mask_BS.shape[-1])

  return jax.checkpoint(attend)(query_BD, keys, annotations_BSH, mask_BS, first_B)


def _read_window(window: Window, alpha_BW: jax.Array, in_window_BW: jax.Array, src_len: int):
  """(context [B, H] from the window's annotations, alpha [B, S] with zeros outside it)."""
  context = attention.context(alpha_BW, window.annotations_BWH, in_window_BW)
  put = lambda row, a, s: jax.lax.dynamic_update_slice_in_dim(row, a, s, axis=0)
  zeros_BS = jnp.zeros((alpha_BW.shape[0], src_len), alpha_BW.dtype)
  return context, jax.vmap(put)(zeros_BS, alpha_BW, window.start_B)


@register("local_m")
class LocalM(Structure):
  """Luong et al.'s local-m: softmax over |j - p_i| <= D with p_i = min(i, |x| - 1).

  The state is the target position i [B] int32. Clipping the centre to the last real source
  position keeps the window non-empty when the output outgrows the source. Only the 2D + 1
  positions of the window are scored and read (`_score_window`), so a step costs O(D), not O(S).
  """

  windowed = True
  Settings = WindowSettings

  def __init__(self, query_dim, annot_dim, cfg, settings, *, rngs):
    self.window = settings.window

  def init_state(self, mask_BS):
    return jnp.zeros(mask_BS.shape[:1], jnp.int32)

  def __call__(
    self, score, query_BD, keys, annotations_BSH, mask_BS, state, *, rng=None, decoding=False
  ):
    last_B = jnp.maximum(jnp.sum(mask_BS, axis=-1).astype(jnp.int32) - 1, 0)
    centre_B = jnp.minimum(state, last_B)
    d = self.window

    def weigh(win):
      in_window = win.mask_BW & (jnp.abs(win.positions_BW - centre_B[:, None]) <= d)
      return self.normalise(win.e_BW, in_window), in_window

    context, alpha_BS = _attend_window(
      score, query_BD, keys, annotations_BSH, mask_BS, centre_B - d, 2 * d + 1, weigh
    )
    return Attended(context, alpha_BS, state + 1, {})


@register("local_p")
class LocalP(Structure):
  """Luong et al.'s local-p: predicted centre p_i = |x| sigmoid(v_p^T tanh(W_p s_{i-1})).

  alpha_ij = softmax over the window |j - p_i| <= D of e_ij, times exp(-(j - p_i)^2 / (2 sigma^2))
  with sigma = D / 2 (not renormalised, as in the paper). Only floor(p_i) - D .. floor(p_i) + D,
  which holds every position of the window, is scored (`_score_window`).
  """

  windowed = True

  @dataclasses.dataclass(frozen=True)
  class Settings(WindowSettings):
    def __post_init__(self):
      if self.window < 1:  # sigma = D / 2 must be positive.
        raise ValueError(f"window must be at least 1, got {self.window}")

  def __init__(self, query_dim, annot_dim, cfg, settings, *, rngs):
    self.window = settings.window
    self.w_p = layers.dense(query_dim, cfg.attn_dim, cfg, rngs=rngs, role="attention")
    self.v_p = layers.dense(cfg.attn_dim, 1, cfg, rngs=rngs, role="attention")

  def centre(self, query_BD: jax.Array, mask_BS: jax.Array) -> jax.Array:
    """p_i [B] float32, in [0, |x|]."""
    gate_B = jax.nn.sigmoid(self.v_p(jnp.tanh(self.w_p(query_BD))).astype(jnp.float32)[:, 0])
    return jnp.sum(mask_BS, axis=-1).astype(jnp.float32) * gate_B

  def __call__(
    self, score, query_BD, keys, annotations_BSH, mask_BS, state, *, rng=None, decoding=False
  ):
    p_B = self.centre(query_BD, mask_BS)
    d, src_len = self.window, mask_BS.shape[-1]
    # A huge window (the "infinitely wide" test) must not overflow int32 arithmetic.
    first_B = jnp.floor(p_B).astype(jnp.int32) - min(d, src_len)
    sigma = d / 2.0

    def weigh(win):
      offset_BW = win.positions_BW.astype(jnp.float32) - p_B[:, None]
      in_window = win.mask_BW & (jnp.abs(offset_BW) <= d)
      gauss_BW = jnp.exp(-jnp.square(offset_BW) / (2.0 * sigma * sigma))
      return self.normalise(win.e_BW, in_window) * gauss_BW, in_window

    context, alpha_BS = _attend_window(
      score, query_BD, keys, annotations_BSH, mask_BS, first_B, 2 * d + 1, weigh
    )
    return Attended(context, alpha_BS, state, {})


# A floor on the previous alignment inside the logarithm: positions it never reached
# contribute at most S * _TINY, and no log(0) reaches the gradient.
_TINY = 1e-30


def _compose_log_affine(first, second):
  """Log-space composition of q -> a q + b maps, `first` applied before `second`:
  (log a1 + log a2, log(a2 b1 + b2))."""
  log_a1, log_b1 = first
  log_a2, log_b2 = second
  return log_a1 + log_a2, jnp.logaddexp(log_a2 + log_b1, log_b2)


def expected_alignment(
  energy_BS: jax.Array, prev_alpha_BS: jax.Array, mask_BS: jax.Array
) -> jax.Array:
  """Raffel et al.'s expected monotonic alignment alpha_i [B, S] (float32, or float64 input).

  With p_ij = sigmoid(energy_ij) the probability that reading stops (emits) at j:
    alpha_ij = p_ij q_ij,  q_ij = sum_{k <= j} alpha_{i-1,k} prod_{l=k}^{j-1} (1 - p_il),
  i.e. q_ij = (1 - p_i,j-1) q_i,j-1 + alpha_{i-1,j}. The cumulative products are cumulative
  sums of log(1 - p), and q comes in closed form from a parallel prefix (`associative_scan`)
  of these affine maps in log space. No cumulative product is divided by another (the usual
  cumprod form, whose quotients overflow on long sources) and no two large logarithms are
  subtracted, so the result keeps float32 precision on 80-word sources. Padding has p = 0.
  Each row sums to at most the previous one (the rest is the chance of reading past the end).
  """
  dtype = jnp.promote_types(energy_BS.dtype, jnp.float32)
  mask = mask_BS.astype(bool)
  energy = jnp.where(mask, energy_BS.astype(dtype), 0.0)
  log_skip = jnp.where(mask, jax.nn.log_sigmoid(-energy), 0.0)  # log(1 - p_ij).
  log_carry = jnp.pad(log_skip[..., :-1], [(0, 0)] * (energy.ndim - 1) + [(1, 0)])
  log_prev = jnp.log(jnp.maximum(prev_alpha_BS.astype(dtype), _TINY))
  _, log_q = jax.lax.associative_scan(
    _compose_log_affine, (log_carry, log_prev), axis=energy.ndim - 1
  )
  return jnp.where(mask, jnp.exp(jax.nn.log_sigmoid(energy) + log_q), 0.0)


def hard_monotonic(energy_BS: jax.Array, prev_alpha_BS: jax.Array, mask_BS: jax.Array) -> jax.Array:
  """The test-time choice [B, S]: one-hot at the first real j >= t_{i-1} with p_ij >= 0.5
  (energy >= 0), where t_{i-1} is where the previous step attended; zeros when there is none (the
  reading ran past the end), and from then on."""
  mask = mask_BS.astype(bool)
  attended = prev_alpha_BS > 0
  start_B = jnp.argmax(attended, axis=-1)
  positions = jnp.arange(energy_BS.shape[-1])[None, :]
  allowed = mask & (positions >= start_B[:, None]) & jnp.any(attended, axis=-1, keepdims=True)
  stops = allowed & (energy_BS >= 0)
  chosen_BS = positions == jnp.argmax(stops, axis=-1)[:, None]
  return (chosen_BS & jnp.any(stops, axis=-1, keepdims=True)).astype(jnp.float32)


@register("monotonic")
class Monotonic(Structure):
  """Monotonic attention: energies e_ij + r from the score function, r learned (starting at
  `bias_init`), N(0, `noise`^2) noise added to them in training. The state is the previous
  alignment [B, S], one-hot at the first word before the first step; training carries the
  expected alignment, decoding the hard choice."""

  normalised = False  # Its weights are the expected alignment of sigmoid emissions.

  @dataclasses.dataclass(frozen=True)
  class Settings:
    bias_init: float = 0.0  # Initial r in p_ij = sigmoid(e_ij + r) (0: one word on per step).
    noise: float = 1.0  # Std of the noise added to the energies in training (0: none).
    # Decoding scores this many positions from the last attended one first (all only when no
    # sentence stops there; the same choice, cheaper on long sources); 0: always all positions.
    lookahead: int = 8

    def __post_init__(self):
      if self.lookahead < 0:
        raise ValueError(f"lookahead must be >= 0, got {self.lookahead}")
      if self.noise < 0:
        raise ValueError(f"noise must be >= 0, got {self.noise}")

  def __init__(self, query_dim, annot_dim, cfg, settings, *, rngs):
    self.bias = nnx.Param(jnp.asarray(settings.bias_init, jnp.float32))
    self.noise = float(settings.noise)
    self.lookahead = int(settings.lookahead)

  @classmethod
  def uses_rng(cls, settings):
    return settings.noise > 0

  def init_state(self, mask_BS):
    first = jnp.arange(mask_BS.shape[-1]) == 0
    return (first[None, :] & mask_BS.astype(bool)).astype(jnp.float32)

  def energy(self, score, query_BD, keys, annotations_BSH) -> jax.Array:
    """e_ij + r [B, S] float32."""
    return _scores(score, query_BD, keys, annotations_BSH) + self.bias[...]

  def __call__(
    self, score, query_BD, keys, annotations_BSH, mask_BS, state, *, rng=None, decoding=False
  ):
    if decoding and 0 < self.lookahead < mask_BS.shape[-1]:
      alpha_BS = self.hard_lookahead(score, query_BD, keys, annotations_BSH, mask_BS, state)
    elif decoding:
      alpha_BS = hard_monotonic(self.energy(score, query_BD, keys, annotations_BSH), state, mask_BS)
    else:
      energy_BS = self.energy(score, query_BD, keys, annotations_BSH)
      if rng is not None and self.noise > 0:
        energy_BS = energy_BS + self.noise * jax.random.normal(rng, energy_BS.shape)
      alpha_BS = expected_alignment(energy_BS, state, mask_BS)
    context = attention.context(alpha_BS, annotations_BSH, mask_BS)
    return Attended(context, alpha_BS, alpha_BS, {})

  def hard_lookahead(self, score, query_BD, keys, annotations_BSH, mask_BS, prev_BS):
    """`hard_monotonic`'s choice, scoring only the `lookahead` positions from where the previous
    step attended (`_score_window`). Only when some sentence finds no stop there and its source
    goes on past the window are all positions scored (`lax.cond`), so the choice is exact."""
    start_B = jnp.argmax(prev_BS > 0, axis=-1).astype(jnp.int32)
    win = _score_window(score, query_BD, keys, annotations_BSH, mask_BS, start_B, self.lookahead)
    width = win.e_BW.shape[-1]
    # The window holds the attended position, so `hard_monotonic` on it makes the same choice
    # wherever that choice lies inside it.
    prev_BW = _slice_rows(prev_BS, win.start_B, width)
    alpha_BW = hard_monotonic(win.e_BW + self.bias[...], prev_BW, win.mask_BW)
    alive_B = jnp.any(prev_BS > 0, axis=-1)
    found_B = jnp.any(alpha_BW > 0, axis=-1)
    length_B = jnp.sum(mask_BS, axis=-1).astype(jnp.int32)
    beyond_B = win.positions_BW[:, -1] < length_B - 1  # Real words after the window.
    _, alpha_BS = _read_window(win, alpha_BW, win.mask_BW, mask_BS.shape[-1])
    return jax.lax.cond(
      jnp.any(alive_B & ~found_B & beyond_B),
      lambda: hard_monotonic(self.energy(score, query_BD, keys, annotations_BSH), prev_BS, mask_BS),
      lambda: alpha_BS,
    )


def _unit(x: jax.Array, eps: float = 1e-6) -> jax.Array:
  """x / |x| over the last axis (float32)."""
  x = x.astype(jnp.float32)
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def _conv(in_features, out_features, width, cfg, *, rngs, role, use_bias=True) -> nnx.Conv:
  """A 1-D convolution over source positions, `width` wide, zero-padded at the borders
  ("SAME"), [B, S, in] -> [B, S, out] in the compute dtype."""
  return nnx.Conv(
    in_features,
    out_features,
    kernel_size=(width,),
    padding="SAME",
    use_bias=use_bias,
    dtype=layers.compute_dtype(cfg),
    param_dtype=jnp.float32,
    kernel_init=layers.kernel_init(cfg.init, role),
    bias_init=nnx.initializers.zeros_init(),
    rngs=rngs,
  )


@register("conv")
class Convolutional(Structure):
  """Allamanis et al.'s convolutional attention over the annotations h [B, S, H]:

    L1 = relu(conv1(h)),  L2 = conv2(L1)                      (once per sentence: the keys)
    f_j = unit(L2_j * W_g s_{i-1}),  e_i = conv_att(f)        (every step)

  Padding is zeroed before every convolution, so it never leaks into real positions. With
  width-1 kernels e_ij = k_att . unit((W2 relu(W1 h_j + b1) + b2) * W_g s_{i-1}).
  """

  uses_score = False

  @dataclasses.dataclass(frozen=True)
  class Settings:
    filters: int = 32  # Feature maps of the convolutions.
    width: int = 3  # Width (odd) of the convolutions.

    def __post_init__(self):
      if self.width < 1 or self.width % 2 == 0:
        raise ValueError(f"width must be odd, got {self.width}")
      if self.filters < 1:
        raise ValueError(f"filters must be positive, got {self.filters}")

  def __init__(self, query_dim, annot_dim, cfg, settings, *, rngs):
    filters, width = settings.filters, settings.width
    self.conv1 = _conv(annot_dim, filters, width, cfg, rngs=rngs, role="other")
    self.conv2 = _conv(filters, filters, width, cfg, rngs=rngs, role="other")
    self.gate = layers.dense(query_dim, filters, cfg, rngs=rngs)
    self.conv_att = _conv(filters, 1, width, cfg, rngs=rngs, role="zeros", use_bias=False)

  def keys(self, score, annotations_BSH, mask_BS):
    """L2 [B, S, F] (compute dtype), zero at padding."""
    real = mask_BS.astype(bool)[..., None]
    hidden = jax.nn.relu(self.conv1(jnp.where(real, annotations_BSH, 0.0)))
    return jnp.where(real, self.conv2(jnp.where(real, hidden, 0.0)), 0.0)

  def __call__(
    self, score, query_BD, keys, annotations_BSH, mask_BS, state, *, rng=None, decoding=False
  ):
    real = mask_BS.astype(bool)[..., None]
    gate_BF = self.gate(query_BD)
    features_BSF = jnp.where(real, _unit(keys * gate_BF[:, None, :].astype(keys.dtype)), 0.0)
    e_BS = self.conv_att(features_BSF.astype(keys.dtype))[..., 0]
    alpha_BS = self.normalise(e_BS, mask_BS)
    return Attended(attention.context(alpha_BS, annotations_BSH, mask_BS), alpha_BS, state, {})


def _mean_of_heads(num_heads: int) -> nnx.Initializer:
  """W_o [N H, H] = [I; ...; I] / N: the projected context starts as the mean head context."""

  def init(key, shape, dtype=jnp.float32):
    size = shape[1]
    if shape[0] != num_heads * size:
      raise ValueError(f"kernel {shape} is not [{num_heads} * H, H]")
    return jnp.tile(jnp.eye(size, dtype=dtype), (num_heads, 1)) / num_heads

  return init


@register("multihead")
class MultiHead(Structure):
  """Additive attention with N heads: e^n_j = v_n^T tanh(W_a^n s + U_a^n h_j), W_a and U_a split
  into N blocks of A / N units; c = W_o [c^1; ...; c^N] with c^n = sum_j alpha^n_j h_j.

  `Attended.alpha` is the mean of the heads; `extras["alpha_heads"]` [B, N, S] has each head.
  With one head (and W_o = I, its initial value) this is the additive score's soft attention.
  """

  uses_score = False

  @dataclasses.dataclass(frozen=True)
  class Settings:
    heads: int = 4  # N; must divide model.attn_dim.

    def __post_init__(self):
      if self.heads < 1:
        raise ValueError(f"heads must be positive, got {self.heads}")

  def __init__(self, query_dim, annot_dim, cfg, settings, *, rngs):
    self.num_heads = int(settings.heads)
    if cfg.attn_dim % self.num_heads:
      raise ValueError(
        f"model.attention: multihead(heads={self.num_heads}) must divide "
        f"model.attn_dim={cfg.attn_dim}"
      )
    self.dtype = layers.compute_dtype(cfg)
    self.w_a = layers.dense(query_dim, cfg.attn_dim, cfg, rngs=rngs, role="attention")
    self.u_a = layers.dense(annot_dim, cfg.attn_dim, cfg, rngs=rngs, role="attention")
    head_units = cfg.attn_dim // self.num_heads
    self.v_a = nnx.Param(jnp.zeros((self.num_heads, head_units), jnp.float32))  # Like v_a: 0.
    heads_init = _mean_of_heads(self.num_heads)
    self.w_o = layers.dense(self.num_heads * annot_dim, annot_dim, cfg, rngs=rngs, init=heads_init)

  def keys(self, score, annotations_BSH, mask_BS):
    return self.u_a(annotations_BSH)

  def head_scores(self, query_D, keys_SA, annotations_SH):
    """e [N, S] of one query against every position, for every head."""
    hidden_SA = jnp.tanh(self.w_a(query_D)[None, :] + keys_SA)
    hidden_SNU = hidden_SA.reshape(hidden_SA.shape[0], self.num_heads, -1)
    return jnp.einsum("snu,nu->ns", hidden_SNU, self.v_a[...].astype(hidden_SNU.dtype))

  def __call__(
    self, score, query_BD, keys, annotations_BSH, mask_BS, state, *, rng=None, decoding=False
  ):
    e_BNS = jax.vmap(self.head_scores)(query_BD, keys, annotations_BSH)
    alpha_BNS = self.normalise(e_BNS, mask_BS[:, None, :])
    values = jnp.where(mask_BS.astype(bool)[..., None], annotations_BSH.astype(jnp.float32), 0.0)
    heads_BNH = jnp.einsum("bns,bsh->bnh", alpha_BNS, values)
    context = self.w_o(heads_BNH.reshape(heads_BNH.shape[0], -1)).astype(jnp.float32)
    return Attended(context, jnp.mean(alpha_BNS, axis=1), state, {"alpha_heads": alpha_BNS})


@register("hard")
class Hard(Structure):
  """Xu et al.'s hard attention: j ~ Categorical(alpha_i) given a key (training), else
  j = argmax_j alpha_ij; c_i = h_j. `Attended.alpha` is the distribution alpha_i; the extras are
  the chosen j ("position" [B] int32), log alpha_ij of it ("sample_logp" [B]) and the entropy of
  alpha_i ("entropy" [B]), the last two the inputs of `seq2seq.train.reinforce_loss`. The
  context carries no gradient to the score: only that loss trains it."""

  sampled = True

  @classmethod
  def uses_rng(cls, settings):
    return True

  def __call__(
    self, score, query_BD, keys, annotations_BSH, mask_BS, state, *, rng=None, decoding=False
  ):
    alpha_BS = self.normalise(_scores(score, query_BD, keys, annotations_BSH), mask_BS)
    seen = alpha_BS > 0
    log_alpha_BS = jnp.log(jnp.where(seen, alpha_BS, 1.0))
    if rng is not None and not decoding:
      chosen_B = jax.random.categorical(rng, jnp.where(seen, log_alpha_BS, -jnp.inf), axis=-1)
    else:
      chosen_B = jnp.argmax(alpha_BS, axis=-1)
    one_hot_BS = jax.nn.one_hot(chosen_B, alpha_BS.shape[-1], dtype=jnp.float32)
    extras = {
      "position": chosen_B.astype(jnp.int32),
      "sample_logp": jnp.sum(one_hot_BS * jnp.where(seen, log_alpha_BS, 0.0), axis=-1),
      "entropy": -jnp.sum(jnp.where(seen, alpha_BS * log_alpha_BS, 0.0), axis=-1),
    }
    context = attention.context(jax.lax.stop_gradient(one_hot_BS), annotations_BSH, mask_BS)
    return Attended(context, alpha_BS, state, extras)

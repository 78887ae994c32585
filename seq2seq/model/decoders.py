"""The decoder's recurrence and its output layer, as components chosen by the config.

A decoder (`model.decoder`, registered by name) turns the previous state s_{i-1} and the step's
projected word input into s_i, asking the model for the attention from the query it chooses:

  paper  s_i = GRU(s_{i-1}, [E y_{i-1} ; c_i]), c_i attending from s_{i-1}; the deep output
         reads s_{i-1} (Bahdanau et al. 2014).
  cgru   Nematus' conditional GRU: s'_i = GRU_1(s_{i-1}, E y_{i-1}), c_i attending from s'_i,
         s_i = GRU_2(s'_i, c_i); the deep output reads s_i (Sennrich et al. 2017).

Each is a frozen dataclass the model holds as a static attribute: `build(model, ...)` adds its
parameters to the model under the names it declares in `PARAMS` (the model's parameter tree, and
so every checkpoint, stays the same however the code is organised), `project(model, emb)` is
the word input's projection (hoisted out of the training scan) and `step(model, s_prev, x3,
attend) -> (s_i, Attended, the state the deep output reads)`, where `attend(query)` returns the
step's `structures.Attended`. A new recurrence is one class and its `@register` line.

The output layer maps the maxout's output t_i to logits: its own W_o (`OutputLayer`) or, with
`model.tie_embeddings`, the target embeddings E^T and a bias (`TiedOutputLayer`, Press and Wolf
2017). Both can score a subset of the vocabulary (`output_ids`: sampled softmax, shortlists).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.common import registry
from seq2seq.model import layers, structures, transformer

REGISTRY: registry.Registry[Decoder] = registry.Registry("decoder", field="model.decoder")
register = REGISTRY.register
names = REGISTRY.names


def spec(text: str | registry.Spec) -> registry.Spec:
  """The decoder a `model.decoder` string names."""
  return REGISTRY.spec(text)


@dataclasses.dataclass(frozen=True)
class Decoder(abc.ABC):
  """One decoder recurrence and its readout. `build` adds its parameters to the model under the
  names in `PARAMS` (so the parameter tree, and every checkpoint, is the model's own flat one);
  the other methods read them from the model. `settings` are its own (`Settings`, named in the
  `model.decoder` spec)."""

  name: ClassVar[str] = ""
  PARAMS: ClassVar[tuple[str, ...]] = ()
  Settings: ClassVar[type] = registry.NoSettings
  settings: Any = registry.NoSettings()
  # Its state is one [B, D] array that context add-ons (intra-attention) read and remember.
  feeds_context_addons: ClassVar[bool] = True
  # It attends with attention of its own (the Transformer's heads) rather than the model's
  # score and structure; it then runs every position of a given target at once
  # (`teacher_forced`) instead of the model's scan over `step`.
  own_attention: ClassVar[bool] = False

  def build(self, model: nnx.Module, cfg: Any, ctx_dim: int, *, rngs: nnx.Rngs) -> None:
    """Adds the recurrence's parameters to `model`, for a context c_i of width `ctx_dim`: the
    GRU that reads the word (`model.cell`), then the decoder's own."""
    model.cell = layers.GRUCell(cfg.emb_dim, cfg.dec_hidden, cfg, rngs=rngs)

  def build_readout(self, model: nnx.Module, cfg: Any, ctx_dim: int, *, rngs: nnx.Rngs) -> None:
    """Adds the readout's parameters (after the attention's and the features'): the paper's
    deep output t_i = maxout(U_o s + V_o E y_{i-1} + C_o c_i)."""
    model.u_o = layers.dense(cfg.dec_hidden, 2 * cfg.maxout_dim, cfg, rngs=rngs, use_bias=True)
    model.v_o = layers.dense(cfg.emb_dim, 2 * cfg.maxout_dim, cfg, rngs=rngs)
    model.c_o = layers.dense(ctx_dim, 2 * cfg.maxout_dim, cfg, rngs=rngs)

  READOUT_FIELD: ClassVar[str] = "model.maxout_dim"  # The setting `readout_width` reads.

  @classmethod
  def readout_width(cls, cfg: Any) -> int:
    """The width of what the output layer reads (the deep output's maxout units)."""
    return cfg.maxout_dim

  def init_state(self, model: nnx.Module, s0_BD: jax.Array, steps: int | None = None) -> Any:
    """The recurrence's state before the first word, from s_0 [B, D], for `steps` steps."""
    return s0_BD

  def prepare(self, model: nnx.Module, annotations_BSH: jax.Array, mask_BS: jax.Array) -> Any:
    """What the decoder computes once per sentence from the annotations (`Encoded.decoder`,
    handed back to `step` as `memory`)."""
    return ()

  def project(self, model: nnx.Module, emb: jax.Array) -> jax.Array:
    """The word input's GRU projection [..., 3D] for embeddings [..., E]."""
    return model.cell.project(emb)

  @abc.abstractmethod
  def step(
    self,
    model: nnx.Module,
    s_prev: Any,
    x3: jax.Array,
    attend: Callable[[jax.Array], structures.Attended],
    rng: jax.Array | None = None,
    memory: Any = (),
  ) -> tuple[Any, structures.Attended, jax.Array]:
    """(s_i, the step's Attended, the state the readout reads [B, D]) from s_{i-1} and the
    step's input projection x3 (the word's, plus what add-ons feed the recurrence); `rng`: the
    step's random key in training (None when decoding); `memory`: what `prepare` gave."""

  def readout(self, model, readout_s, emb, ctx, reads, dropout_rng=None) -> jax.Array:
    """What the output layer reads, any leading axes: the deep output's maxout of the state
    the step returned, E y_{i-1} [..., E], c_i [..., H] and the context add-ons' contexts
    `reads` (by add-on name), with dropout."""
    t = model.u_o(readout_s) + model.v_o(emb) + model.c_o(ctx)
    for name, addon in model.addons:
      if name in reads:
        t = t + addon.readout(model, reads[name])
    return layers.dropout(layers.maxout(t), model.dropout_rate, dropout_rng)


@register("paper")
@dataclasses.dataclass(frozen=True)
class PaperDecoder(Decoder):
  """The paper's decoder: attention from s_{i-1}, one GRU fed [E y_{i-1} ; c_i]."""

  PARAMS = ("cell", "context_proj", "u_o", "v_o", "c_o")

  def build(self, model, cfg, ctx_dim, *, rngs):
    super().build(model, cfg, ctx_dim, rngs=rngs)
    model.context_proj = layers.dense(ctx_dim, 3 * cfg.dec_hidden, cfg, rngs=rngs)

  def step(self, model, s_prev, x3, attend, rng=None, memory=()):
    att = attend(s_prev)
    return model.cell(s_prev, x3 + model.context_proj(att.context)), att, s_prev


@register("cgru")
@dataclasses.dataclass(frozen=True)
class ConditionalGRU(Decoder):
  """Nematus' conditional GRU: a GRU on the word, attention from its state, a GRU on c_i."""

  PARAMS = ("cell", "cell2", "u_o", "v_o", "c_o")

  def build(self, model, cfg, ctx_dim, *, rngs):
    super().build(model, cfg, ctx_dim, rngs=rngs)
    model.cell2 = layers.GRUCell(ctx_dim, cfg.dec_hidden, cfg, rngs=rngs)

  def step(self, model, s_prev, x3, attend, rng=None, memory=()):
    s1 = model.cell(s_prev, x3)
    att = attend(s1)
    new_s = model.cell2(s1, model.cell2.project(att.context))
    return new_s, att, new_s


class LuongState(NamedTuple):
  """The Luong decoder's state: each layer's cell state (bottom first) and h~_{t-1}, the
  attentional state fed to the next step's input (zeros before the first word)."""

  layers: tuple[Any, ...]
  feed: jax.Array  # [B, D] float32.


@register("luong")
@dataclasses.dataclass(frozen=True)
class LuongDecoder(Decoder):
  """Luong et al. (2015): a stack of recurrent layers run first; attention from the top layer's
  new output h_t; the attentional state h~_t = tanh(W_c [c_t ; h_t]) is what the output layer
  reads (logits = W_s h~_t, no deep output) and, with input feeding, what the next step's
  bottom layer reads beside the word: its input is [E y_{t-1} ; h~_{t-1}].

  Every layer's output starts at s_0 (memory cells at zero), h~_0 = 0. Between layers the
  outputs pass through dropout (`model.dropout`, training only); with `residual`, a layer above
  the first adds its input to its output. h~_t is dropped out where the output layer reads it;
  the next step is fed it whole."""

  feeds_context_addons: ClassVar[bool] = False  # Its state is every layer's, and h~_t.

  @dataclasses.dataclass(frozen=True)
  class Settings:
    cell: str = "lstm"  # gru | lstm.
    layers: int = 1  # Stacked recurrent layers.
    input_feeding: bool = True  # Feed h~_{t-1} into the bottom layer's input.
    residual: bool = False  # Layers above the first add their input to their output.

    def __post_init__(self):
      if self.cell not in layers.CELLS:
        raise ValueError(f"cell must be one of {', '.join(layers.CELLS)}, got {self.cell!r}")
      if self.layers < 1:
        raise ValueError(f"layers must be at least 1, got {self.layers}")

  # `cell` reads [E y ; h~]: its projection of the word, `feed_proj` of h~ (input feeding).
  # `cell_2`, ..., `cell_L` are the layers above; `w_c` is W_c.
  PARAMS = ("cell", "feed_proj", "w_c")

  def _cells(self, model) -> list[nnx.Module]:
    return [model.cell] + [getattr(model, f"cell_{k}") for k in range(2, self.settings.layers + 1)]

  def build(self, model, cfg, ctx_dim, *, rngs):
    d, kind = cfg.dec_hidden, self.settings.cell
    model.cell = layers.make_cell(kind, cfg.emb_dim, d, cfg, rngs=rngs)
    if self.settings.input_feeding:
      gates = model.cell.project.out_features
      model.feed_proj = layers.dense(d, gates, cfg, rngs=rngs)
    for k in range(2, self.settings.layers + 1):
      setattr(model, f"cell_{k}", layers.make_cell(kind, d, d, cfg, rngs=rngs))

  def build_readout(self, model, cfg, ctx_dim, *, rngs):
    model.w_c = layers.dense(ctx_dim + cfg.dec_hidden, cfg.dec_hidden, cfg, rngs=rngs)

  READOUT_FIELD = "model.dec_hidden"

  @classmethod
  def readout_width(cls, cfg):
    return cfg.dec_hidden

  def init_state(self, model, s0_BD, steps=None):
    cells = tuple(cell.initial(s0_BD) for cell in self._cells(model))
    return LuongState(cells, jnp.zeros(s0_BD.shape, jnp.float32))

  def step(self, model, s_prev, x3, attend, rng=None, memory=()):
    if self.settings.input_feeding:
      x3 = x3 + model.feed_proj(s_prev.feed)
    new_layers, below = [], None
    for k, (cell, state) in enumerate(zip(self._cells(model), s_prev.layers, strict=True)):
      if k:  # Layers above the first read the output below, dropped out in training.
        # A stream of its own: a sampling structure draws from the step's key itself.
        key = None if rng is None else jax.random.fold_in(rng, 1000 + k)
        x3 = cell.project(layers.dropout(below, model.dropout_rate, key))
      state = cell(state, x3)
      new_layers.append(state)
      h = cell.output(state)
      below = h + below if (k and self.settings.residual) else h
    att = attend(below)
    both = jnp.concatenate([att.context.astype(jnp.float32), below], axis=-1)
    attentional = jnp.tanh(model.w_c(both).astype(jnp.float32))
    return LuongState(tuple(new_layers), attentional), att, attentional

  def readout(self, model, readout_s, emb, ctx, reads, dropout_rng=None):
    """h~_t with dropout: the output layer reads it alone."""
    return layers.dropout(readout_s, model.dropout_rate, dropout_rng)


class TransformerState(NamedTuple):
  """The Transformer decoder's state: each layer's self-attention keys and values of the words
  so far, one slot per step of the search (`Seq2Seq.encode`'s `steps`), and where the next word
  goes."""

  keys: jax.Array  # [B, layers, steps, D] float32.
  values: jax.Array  # [B, layers, steps, D] float32.
  position: jax.Array  # [B] int32: the next word's position.


@register("transformer")
@dataclasses.dataclass(frozen=True)
class TransformerDecoder(Decoder):
  """A Transformer decoder (Vaswani et al. 2017, pre-norm: `seq2seq.model.transformer`):
  `layers` layers of causal self-attention, cross-attention over the annotations and a
  feed-forward layer of `inner` units (0: four times the width), `heads` heads each, D =
  `model.dec_hidden` wide; the word embeddings are projected to D, scaled by sqrt(D) and added
  to `positions` (sinusoidal, or learned for up to `max_positions` words). The output layer
  reads the top layer's output, normalised (no deep output).

  Its cross-attention is its own, per layer and head, scored by `model.score` and normalised by
  `model.normaliser` (`transformer.CrossAttention`), so the model builds no attention of its
  own: the structure stays `soft`, and alignment features and add-ons, which extend a single
  recurrent attention, are refused. The attention the project reports (AER, the explorer,
  `--alignments`) and guided alignment supervises is layer `alignment_layer` (1 the bottom, 0
  the top) and head `alignment_head` (from 1; 0: the mean of the layer's heads; Garg et al.
  2019 supervise one head of the penultimate layer).

  Training and scoring run every position at once under a causal mask (`teacher_forced`);
  decoding runs one position per step against cached keys and values (`step`): the same
  numbers, to rounding."""

  own_attention: ClassVar[bool] = True
  feeds_context_addons: ClassVar[bool] = False

  @dataclasses.dataclass(frozen=True)
  class Settings(transformer.StackSettings):
    alignment_layer: int = 0  # The reported attention's layer, from 1; 0: the top.
    alignment_head: int = 0  # Its head, from 1; 0: the mean of the layer's heads.

    def __post_init__(self):
      super().__post_init__()
      if not 0 <= self.alignment_layer <= self.layers:
        raise ValueError(f"alignment_layer must be 0 (the top) to {self.layers}")
      if not 0 <= self.alignment_head <= self.heads:
        raise ValueError(f"alignment_head must be 0 (the mean) to {self.heads}")

  # `dec_layer_1`, ..., `dec_layer_L` are the layers; `dec_positions` a learned table.
  PARAMS = ("dec_project", "dec_norm")
  READOUT_FIELD = "model.dec_hidden"

  @classmethod
  def readout_width(cls, cfg):
    return cfg.dec_hidden

  def _layers(self, model) -> list[nnx.Module]:
    return [getattr(model, f"dec_layer_{k}") for k in range(1, self.settings.layers + 1)]

  def build(self, model, cfg, ctx_dim, *, rngs):
    s, width = self.settings, cfg.dec_hidden
    model.dec_project = layers.dense(cfg.emb_dim, width, cfg, rngs=rngs, init=transformer.XAVIER)
    if s.positions == "learned":
      table = 0.02 * jax.random.normal(rngs.params(), (s.max_positions, width))
      model.dec_positions = nnx.Param(table)
    for k in range(1, s.layers + 1):
      built = transformer.DecoderLayer(
        width, ctx_dim, s.heads, s.inner or 4 * width, cfg.score, cfg.normaliser, cfg, rngs=rngs
      )
      setattr(model, f"dec_layer_{k}", built)
    model.dec_norm = transformer.LayerNorm(width)

  def build_readout(self, model, cfg, ctx_dim, *, rngs):
    pass

  def _positions(self, model, length: int) -> jax.Array:
    learned = getattr(model, "dec_positions", None)
    width = model.dec_project.out_features
    return transformer.position_table(
      self.settings.positions, learned, length, width, "model.decoder"
    )

  def init_state(self, model, s0_BD, steps=None):
    """Empty caches with `steps` slots (none without: such a model can encode, not decode)."""
    shape = (s0_BD.shape[0], self.settings.layers, steps or 0, model.dec_project.out_features)
    zeros = jnp.zeros(shape, jnp.float32)
    return TransformerState(zeros, zeros, jnp.zeros(s0_BD.shape[:1], jnp.int32))

  def prepare(self, model, annotations_BSH, mask_BS):
    """Each layer's cross-attention keys and values, and the mask."""
    memory = tuple(layer.cross_attention.prepare(annotations_BSH) for layer in self._layers(model))
    return memory, annotations_BSH, mask_BS

  def project(self, model, emb):
    return transformer.embedded(model.dec_project, emb)

  def _reported(self, alphas) -> jax.Array:
    """The reported attention [B, T, S] and the reported layer's heads [B, T, heads, S] of
    each layer's weights [B, heads, T, S]."""
    heads = alphas[self.settings.alignment_layer - 1]
    h = self.settings.alignment_head
    alpha = jnp.mean(heads, axis=1) if h == 0 else heads[:, h - 1]
    return alpha, jnp.swapaxes(heads, 1, 2)

  def teacher_forced(self, model, memory, x_BTD, rng=None):
    """Every position at once: (the readout [B, T, D], c [B, T, H], alpha [B, T, S], extras
    {"alpha_heads": the reported layer's heads [B, T, heads, S], "alpha_layers": every layer's
    [B, T, layers, heads, S]}) from the projected words [B, T, D]."""
    per_layer, annotations, mask = memory
    n = self.settings.layers
    keys = [None] * (n + 1) if rng is None else list(jax.random.split(rng, n + 1))
    x = x_BTD + self._positions(model, x_BTD.shape[1])
    x = layers.dropout(x, model.dropout_rate, keys[0])
    alphas = []
    for k, (layer, cross) in enumerate(zip(self._layers(model), per_layer, strict=True)):
      x, alpha = layer(x, cross, mask, model.dropout_rate, keys[k + 1])
      alphas.append(alpha)
    alpha_BTS, heads = self._reported(alphas)
    ctx = jnp.einsum("bts,bsh->bth", alpha_BTS, annotations.astype(jnp.float32))
    every = jnp.stack([jnp.swapaxes(a, 1, 2) for a in alphas], axis=2)
    return model.dec_norm(x), ctx, alpha_BTS, {"alpha_heads": heads, "alpha_layers": every}

  def step(self, model, s_prev, x3, attend, rng=None, memory=None):
    per_layer, annotations, mask = memory
    if s_prev.keys.shape[2] == 0:
      raise ValueError("a Transformer decoder decodes from Seq2Seq.encode(..., steps=N)")
    table = self._positions(model, s_prev.keys.shape[2])
    x = (x3 + table[s_prev.position])[:, None, :]
    keys, values, alphas = [], [], []
    for k, (layer, cross) in enumerate(zip(self._layers(model), per_layer, strict=True)):
      x, alpha, k_cache, v_cache = layer.step(
        x, s_prev.keys[:, k], s_prev.values[:, k], s_prev.position, cross, mask
      )
      keys.append(k_cache)
      values.append(v_cache)
      alphas.append(alpha)
    alpha_B1S, heads = self._reported(alphas)
    alpha_BS = alpha_B1S[:, 0]
    ctx = jnp.einsum("bs,bsh->bh", alpha_BS, annotations.astype(jnp.float32))
    state = TransformerState(jnp.stack(keys, 1), jnp.stack(values, 1), s_prev.position + 1)
    att = structures.Attended(ctx, alpha_BS, (), {"alpha_heads": heads[:, 0]})
    return state, att, model.dec_norm(x[:, 0])

  def readout(self, model, readout_s, emb, ctx, reads, dropout_rng=None):
    """The top layer's normalised output, as it is (the layers dropped out inside)."""
    return readout_s


def make_decoder(cfg: Any) -> Decoder:
  """The decoder `cfg.decoder` (a `registry.Spec`) names, with its settings."""
  return REGISTRY.get(cfg.decoder.name)(settings=cfg.decoder.settings)


@dataclasses.dataclass(frozen=True)
class OutputLayer:
  """logits = W_o t + b, the model's own W_o [M, V] (`model.w_o`)."""

  PARAMS: ClassVar[tuple[str, ...]] = ("w_o",)

  def build(self, model: nnx.Module, cfg: Any, width: int, vocab: int, *, rngs: nnx.Rngs) -> None:
    """W_o [width, vocab]: `width` is what the decoder's readout gives (`readout_width`)."""
    model.w_o = layers.dense(width, vocab, cfg, rngs=rngs, use_bias=True)

  def __call__(self, model: nnx.Module, t: jax.Array, output_ids: jax.Array | None = None):
    """Logits [..., V] (float32) of the maxout output t [..., M], or [..., N] over `output_ids`."""
    if output_ids is None:
      return model.w_o(t)
    kernel_MN, bias_N = model.w_o.kernel[...][:, output_ids], model.w_o.bias[...][output_ids]
    return layers.matmul(t, kernel_MN, model.dtype) + bias_N


@dataclasses.dataclass(frozen=True)
class TiedOutputLayer:
  """logits = E t + b: the target embeddings E [V, M] read as the output layer (M = E), with a
  bias of its own (`model.out_bias`)."""

  PARAMS: ClassVar[tuple[str, ...]] = ("out_bias",)

  def build(self, model: nnx.Module, cfg: Any, width: int, vocab: int, *, rngs: nnx.Rngs) -> None:
    model.out_bias = nnx.Param(jnp.zeros((vocab,), jnp.float32))

  def __call__(self, model: nnx.Module, t: jax.Array, output_ids: jax.Array | None = None):
    """Logits [..., V] (float32) of t [..., M], or [..., N] over `output_ids`."""
    kernel_MV, bias_V = model.embed.embedding[...].T, model.out_bias[...]
    if output_ids is not None:
      kernel_MV, bias_V = kernel_MV[:, output_ids], bias_V[output_ids]
    return layers.matmul(t, kernel_MV, model.dtype) + bias_V


def make_output_layer(cfg: Any) -> OutputLayer | TiedOutputLayer:
  """The output layer `cfg.tie_embeddings` chooses."""
  return TiedOutputLayer() if cfg.tie_embeddings else OutputLayer()

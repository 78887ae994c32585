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
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq import layers, registry, structures

REGISTRY: registry.Registry[Decoder] = registry.Registry("decoder", field="model.decoder")
register = REGISTRY.register
names = REGISTRY.names


def spec(text: str | registry.Spec) -> registry.Spec:
  """The decoder a `model.decoder` string names."""
  return REGISTRY.spec(text)


@dataclasses.dataclass(frozen=True)
class Decoder(abc.ABC):
  """One decoder recurrence. `build` adds its parameters to the model under the names in
  `PARAMS` (so the parameter tree, and every checkpoint, is the model's own flat one); the
  other methods read them from the model."""

  name: ClassVar[str] = ""
  PARAMS: ClassVar[tuple[str, ...]] = ()

  def build(self, model: nnx.Module, cfg: Any, ctx_dim: int, *, rngs: nnx.Rngs) -> None:
    """Adds the recurrence's parameters to `model`, for a context c_i of width `ctx_dim`: the
    GRU that reads the word (`model.cell`), then the decoder's own."""
    model.cell = layers.GRUCell(cfg.emb_dim, cfg.dec_hidden, cfg, rngs=rngs)

  def project(self, model: nnx.Module, emb: jax.Array) -> jax.Array:
    """The word input's GRU projection [..., 3D] for embeddings [..., E]."""
    return model.cell.project(emb)

  @abc.abstractmethod
  def step(
    self,
    model: nnx.Module,
    s_prev: jax.Array,
    x3: jax.Array,
    attend: Callable[[jax.Array], structures.Attended],
  ) -> tuple[jax.Array, structures.Attended, jax.Array]:
    """(s_i [B, D], the step's Attended, the state the deep output reads) from s_{i-1} and the
    step's input projection x3 [B, 3D] (the word's, plus what add-ons feed the recurrence)."""


@register("paper")
@dataclasses.dataclass(frozen=True)
class PaperDecoder(Decoder):
  """The paper's decoder: attention from s_{i-1}, one GRU fed [E y_{i-1} ; c_i]."""

  PARAMS = ("cell", "context_proj")

  def build(self, model, cfg, ctx_dim, *, rngs):
    super().build(model, cfg, ctx_dim, rngs=rngs)
    model.context_proj = layers.dense(ctx_dim, 3 * cfg.dec_hidden, cfg, rngs=rngs)

  def step(self, model, s_prev, x3, attend):
    att = attend(s_prev)
    return model.cell(s_prev, x3 + model.context_proj(att.context)), att, s_prev


@register("cgru")
@dataclasses.dataclass(frozen=True)
class ConditionalGRU(Decoder):
  """Nematus' conditional GRU: a GRU on the word, attention from its state, a GRU on c_i."""

  PARAMS = ("cell", "cell2")

  def build(self, model, cfg, ctx_dim, *, rngs):
    super().build(model, cfg, ctx_dim, rngs=rngs)
    model.cell2 = layers.GRUCell(ctx_dim, cfg.dec_hidden, cfg, rngs=rngs)

  def step(self, model, s_prev, x3, attend):
    s1 = model.cell(s_prev, x3)
    att = attend(s1)
    new_s = model.cell2(s1, model.cell2.project(att.context))
    return new_s, att, new_s


def make_decoder(cfg: Any) -> Decoder:
  """The decoder `cfg.decoder` (a `registry.Spec`) names."""
  return REGISTRY.get(cfg.decoder.name)()


@dataclasses.dataclass(frozen=True)
class OutputLayer:
  """logits = W_o t + b, the model's own W_o [M, V] (`model.w_o`)."""

  PARAMS: ClassVar[tuple[str, ...]] = ("w_o",)

  def build(self, model: nnx.Module, cfg: Any, vocab: int, *, rngs: nnx.Rngs) -> None:
    model.w_o = layers.dense(cfg.maxout_dim, vocab, cfg, rngs=rngs, use_bias=True)

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

  def build(self, model: nnx.Module, cfg: Any, vocab: int, *, rngs: nnx.Rngs) -> None:
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

"""The source encoder, `model.encoder`: stacked recurrent layers over the source embeddings, or
a Transformer encoder (`transformer(...)`, `TransformerEncoder`).

`rnn(cell=gru, layers=1, bidirectional=true, residual=false, reverse=false)` (the default, the
paper's bidirectional GRU) reads the embeddings with `layers` layers of GRU or LSTM cells
(`layers.make_cell`). A bidirectional layer runs a forward and a backward cell and its output is
[fwd h_j ; bwd h_j]; a unidirectional one runs one cell, left to right, or right to left with
`reverse` (Sutskever et al. 2014's reversed source, which Luong et al. 2015 read). Whichever way
a layer reads, its outputs stay in source order, so attention, alignments and `<unk>`
replacement index source words as usual. Layers above the first read the output below through
dropout (`model.dropout`, training only) and, with `residual`, add it to their own.

Padding never changes a state: a cell's state is carried unchanged over padded positions, in
both directions. Both directions of a layer share one `lax.scan` (step t reads position t
forwards and S - 1 - t backwards): half as many sequential steps as two scans, the same
arithmetic.

Parameters: `embed`; the bottom layer's cells `fwd` (the one-direction cell, whichever way it
reads) and `bwd`; the cells of layer k >= 2, `fwd_k` and `bwd_k`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.common import registry
from seq2seq.model import layers, transformer

REGISTRY: registry.Registry[type] = registry.Registry("encoder", field="model.encoder")
register = REGISTRY.register
spec = REGISTRY.spec


class Encoding(NamedTuple):
  """What the encoder gives the model."""

  annotations: jax.Array  # [B, S, width] float32: the top layer's outputs, in source order.
  fwd_last: jax.Array | None  # [B, He] the top forward cell's output after the last real word.
  bwd_first: jax.Array | None  # [B, He] the top backward cell's output after the first word.


@register("rnn")
class RNNEncoder(nnx.Module):
  """Stacked GRU or LSTM layers, one direction or both (see the module docstring)."""

  @dataclasses.dataclass(frozen=True)
  class Settings:
    cell: str = "gru"  # gru | lstm.
    layers: int = 1  # Stacked recurrent layers.
    bidirectional: bool = True  # Both directions in every layer; else one (see `reverse`).
    residual: bool = False  # Layers above the first add their input to their output.
    reverse: bool = False  # One direction: read the source right to left.

    def __post_init__(self):
      if self.cell not in layers.CELLS:
        raise ValueError(f"cell must be one of {', '.join(layers.CELLS)}, got {self.cell!r}")
      if self.layers < 1:
        raise ValueError(f"layers must be at least 1, got {self.layers}")
      if self.reverse and self.bidirectional:
        raise ValueError("reverse reads one direction: set bidirectional=false with it")

  def __init__(self, vocab_size: int, cfg: Any, *, rngs: nnx.Rngs, bidirectional: bool = True):
    """`bidirectional=False` forces one direction whatever the settings (the paper's
    RNNencdec reads the source forwards only)."""
    settings = cfg.encoder.settings
    self.settings = dataclasses.replace(
      settings, bidirectional=settings.bidirectional and bidirectional
    )
    self.dropout_rate = cfg.dropout
    self.unroll = int(cfg.scan_unroll)
    self.hidden = cfg.enc_hidden
    self.embed = layers.embed(vocab_size, cfg.emb_dim, cfg, rngs=rngs)
    s, he = self.settings, cfg.enc_hidden
    make = lambda width: layers.make_cell(s.cell, width, he, cfg, rngs=rngs)
    self.fwd = make(cfg.emb_dim)
    self.bwd = make(cfg.emb_dim) if s.bidirectional else None
    for k in range(2, s.layers + 1):
      setattr(self, f"fwd_{k}", make(self.width))
      if s.bidirectional:
        setattr(self, f"bwd_{k}", make(self.width))

  @property
  def width(self) -> int:
    """The annotation size: 2 He with both directions, He with one."""
    return (2 if self.settings.bidirectional else 1) * self.hidden

  def _layer(self, k: int) -> tuple[nnx.Module, nnx.Module | None]:
    if k == 1:
      return self.fwd, self.bwd
    return getattr(self, f"fwd_{k}"), getattr(self, f"bwd_{k}", None)

  def _read(self, fwd, bwd, x_BSI, mask_SB1, h0) -> tuple[jax.Array, Any, Any]:
    """One layer over inputs [B, S, I]: (outputs [B, S, width], the forward cell's output after
    the last real word, the backward cell's after the first; None for a missing direction).
    One direction reads with `fwd`, backwards when `reverse`."""
    flip = lambda a: jnp.flip(a, axis=0)
    backwards_only = bwd is None and self.settings.reverse
    pair = (None, fwd) if backwards_only else (fwd, bwd)
    cells = [cell for cell in pair if cell is not None]
    forwards = [not backwards_only] + [False] * (len(cells) - 1)
    inputs, masks = [], []
    for cell, ahead in zip(cells, forwards, strict=True):
      x = jnp.swapaxes(cell.project(x_BSI), 0, 1)  # [S, B, gates He], outside the scan.
      inputs.append(x if ahead else flip(x))
      masks.append(mask_SB1 if ahead else flip(mask_SB1))

    def step(states, xs):
      new = []
      for cell, state, x, m in zip(cells, states, xs[0], xs[1], strict=True):
        moved = cell(state, x)
        kept = functools.partial(jnp.where, m)  # Padding leaves the state as it was.
        new.append(jax.tree.map(kept, moved, state))
      return tuple(new), tuple(cell.output(st) for cell, st in zip(cells, new, strict=True))

    start = tuple(cell.initial(h0) for cell in cells)
    finals, outs = jax.lax.scan(step, start, (tuple(inputs), tuple(masks)), unroll=self.unroll)
    outs = [o if ahead else flip(o) for o, ahead in zip(outs, forwards, strict=True)]
    outs = [jnp.swapaxes(o, 0, 1) for o in outs]
    lasts = [cell.output(f) for cell, f in zip(cells, finals, strict=True)]
    by_way = dict(zip(["fwd" if a else "bwd" for a in forwards], lasts, strict=True))
    return jnp.concatenate(outs, axis=-1), by_way.get("fwd"), by_way.get("bwd")

  def __call__(self, src_BS, mask_BS, dropout_rng=None) -> Encoding:
    """The annotations [B, S, width] (float32) and the final states of the top layer."""
    rngs = [None] * (self.settings.layers + 1)
    if dropout_rng is not None:
      rngs = [dropout_rng] + [jax.random.fold_in(dropout_rng, k) for k in range(1, len(rngs))]
    x = layers.dropout(self.embed(src_BS), self.dropout_rate, rngs[0])
    mask_SB1 = jnp.swapaxes(mask_BS, 0, 1)[..., None].astype(bool)
    h0 = jnp.zeros((src_BS.shape[0], self.hidden), jnp.float32)
    for k in range(1, self.settings.layers + 1):
      fwd, bwd = self._layer(k)
      below = x
      if k > 1:
        x = layers.dropout(x, self.dropout_rate, rngs[k])
      out, fwd_last, bwd_first = self._read(fwd, bwd, x, mask_SB1, h0)
      x = out + below if (k > 1 and self.settings.residual) else out
    return Encoding(x, fwd_last, bwd_first)


@register("transformer")
class TransformerEncoder(nnx.Module):
  """A Transformer encoder (Vaswani et al. 2017, pre-norm: `seq2seq.model.transformer`) in
  place of the recurrent one, for every decoder: `layers` self-attention layers of `heads` heads
  and `inner` feed-forward units (0: four times the width) over the source embeddings, projected
  to the width, scaled by its square root (`transformer.embedded`) and added to `positions`
  (sinusoidal, or learned for up to `max_positions`).

  Its width, the annotation size, is the one the recurrent encoder would give, 2 He
  (`model.enc_hidden`) or He for a model that reads one direction, so every score, decoder and
  size of a config applies unchanged. What the decoder starts from (s_0 and RNNencdec's fixed
  context) is tanh(W_m mean_j h_j) [B, He], the mean over the real words, given as the last
  output of a one-direction encoder. Padded positions are left out of every attention and
  their outputs are zero."""

  Settings = transformer.StackSettings

  def __init__(self, vocab_size: int, cfg: Any, *, rngs: nnx.Rngs, bidirectional: bool = True):
    self.settings = s = cfg.encoder.settings
    self.hidden = cfg.enc_hidden
    self.width = (2 if bidirectional else 1) * cfg.enc_hidden
    self.dropout_rate = cfg.dropout
    self.embed = layers.embed(vocab_size, cfg.emb_dim, cfg, rngs=rngs)
    self.project = layers.dense(cfg.emb_dim, self.width, cfg, rngs=rngs, init=transformer.XAVIER)
    if s.positions == "learned":
      self.positions = nnx.Param(
        0.02 * jax.random.normal(rngs.params(), (s.max_positions, self.width))
      )
    inner = s.inner or 4 * self.width
    for k in range(1, s.layers + 1):
      setattr(
        self,
        f"layer_{k}",
        transformer.SelfAttentionLayer(self.width, s.heads, inner, cfg, rngs=rngs),
      )
    self.final_norm = transformer.LayerNorm(self.width)
    self.summary = layers.dense(self.width, self.hidden, cfg, rngs=rngs, use_bias=True)

  def _positions(self, length: int) -> jax.Array:
    learned = getattr(self, "positions", None)
    kind = self.settings.positions
    return transformer.position_table(kind, learned, length, self.width, "model.encoder")

  def __call__(self, src_BS, mask_BS, dropout_rng=None) -> Encoding:
    """The annotations [B, S, width] (float32) and tanh(W_m mean_j h_j) as the last output."""
    s = self.settings
    keys = [None] * (s.layers + 1)
    if dropout_rng is not None:
      keys = list(jax.random.split(dropout_rng, s.layers + 1))
    x = transformer.embedded(self.project, self.embed(src_BS)) + self._positions(src_BS.shape[1])
    x = layers.dropout(x, self.dropout_rate, keys[0])
    for k in range(1, s.layers + 1):
      x = getattr(self, f"layer_{k}")(x, mask_BS, self.dropout_rate, keys[k])
    real = mask_BS[..., None].astype(jnp.float32)
    x = self.final_norm(x) * real
    mean = jnp.sum(x, axis=1) / jnp.maximum(jnp.sum(real, axis=1), 1.0)
    return Encoding(x, jnp.tanh(self.summary(mean).astype(jnp.float32)), None)


def make_encoder(cfg: Any, vocab_size: int, *, rngs: nnx.Rngs, bidirectional: bool = True):
  """The encoder `cfg.encoder` (a `registry.Spec`) names, for a source vocabulary."""
  return REGISTRY.get(cfg.encoder.name)(vocab_size, cfg, rngs=rngs, bidirectional=bidirectional)

"""Decoder add-ons: components the config composes into the decoder, each one class.

Two kinds, each a protocol of hooks that `models.Seq2Seq` calls for every add-on it holds, in
the order of `ORDER` (a hook an add-on does not need is the base class's no-op):

* **Context providers** give the decoder a context of their own at every step. Per sentence
  `init_state(s_0, steps)` starts their state; at step i `read(state, s_{i-1})` computes their
  context, which enters the GRU input through `gru_input` and the deep output through `readout`
  (called once over all steps, outside the training scan), and `store(state, s_i)` keeps what
  the next step needs. Intra-attention over the decoder's own past (Cheng et al. 2016; Paulus et
  al. 2017) is one.
* **Output modifiers** change the step's scores after the output layer: `prepare(src, mask)`
  computes what they need once per sentence, `logits(...)` rewrites the scores, and
  `feed_back(y)` maps an output id to the id fed to the next step. The lexicon bias (Arthur et
  al. 2016) and copying (See et al. 2017) are the two.

`model.addons` lists the add-ons of a run as "+"-joined specs with their own settings
(`intra(score=dot)+copy(eos=null)`), in any order: `specs` sorts them into `ORDER`. An add-on
is a frozen dataclass holding its `Settings`, which the model keeps as a static attribute.
`build(model, ...)` adds its parameters to the model under the names it declares in `PARAMS`, at
its kind's place in the model's build order (which fixes the random numbers every parameter
draws), so the parameter tree, and every checkpoint, is the model's own flat one; the hooks read
them from the model. What it needs of the model (attention, tables, one source) it declares in
class attributes that `models.ModelSettings.check` reads. A new add-on is one class in this
file, its `@register` line (with its kind) and its test.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from seq2seq.common import registry
from seq2seq.data import copying
from seq2seq.data.tokenizer import UNK_ID
from seq2seq.model import attention, layers, scores

CONTEXT, OUTPUT = "context", "output"  # The two kinds.
# Lexicon bias: the translations kept per source word, and the epsilon of log(p_lex + eps)
# (Arthur et al.'s 0.001, which keeps unlikely words possible).
LEXICON_TOP = 20
LEXICON_EPS = 1e-3
# `lexicon(table=train)`: the table learned from the run's own training split when training
# starts (`lexicon.build`), rather than a table file.
LEXICON_FROM_TRAINING = "train"

REGISTRY: registry.Registry[AddOn] = registry.Registry("add-on", field="model.addons")
names = REGISTRY.names  # The registered add-ons, in registration order.
get = REGISTRY.get  # The add-on class registered under a name.
ORDER: list[str] = []  # Registration order: context providers first, then output modifiers.


def register(name: str, kind: str):
  """Class decorator adding an add-on under `name`, of kind `CONTEXT` or `OUTPUT`."""

  def add(cls: type[AddOn]) -> type[AddOn]:
    REGISTRY.register(name)(cls)
    cls.kind = kind
    ORDER.append(name)
    ORDER.sort(key=lambda n: get(n).kind != CONTEXT)  # Stable: registration order in a kind.
    return cls

  return add


def specs(text: str) -> tuple[registry.Spec, ...]:
  """The add-ons a `model.addons` string turns on, in `ORDER` (so the order written changes
  nothing); an add-on named twice is refused."""
  return tuple(sorted(REGISTRY.specs(text), key=lambda s: ORDER.index(s.name)))


def spec_text(found: tuple[registry.Spec, ...]) -> str:
  """The canonical `model.addons` string of `found`."""
  return "+".join(str(s) for s in found)


def trained(text: str) -> str:
  """The canonical `model.addons` string of `text` with every add-on's decoding-time settings
  (`AddOn.DECODING_SETTINGS`) at their defaults: what a run's parameters depend on."""
  out = []
  for found in specs(text):
    defaults = type(found.settings)()
    reset = {name: getattr(defaults, name) for name in get(found.name).DECODING_SETTINGS}
    out.append(dataclasses.replace(found, settings=dataclasses.replace(found.settings, **reset)))
  return spec_text(tuple(out))


class FrozenTable(nnx.Param):
  """A table stored with the parameters (so checkpoints, seed groups and ensembles carry it)
  but read through stop_gradient: its gradient is zero and no optimiser moves it. Ids are kept
  as float32 (exact below 2^24) so the parameter tree stays real."""


def frozen_ids(table: FrozenTable) -> jax.Array:
  """The int32 ids a `FrozenTable` holds."""
  return jnp.round(jax.lax.stop_gradient(table[...])).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class AddOn(abc.ABC):
  """The hooks every add-on has; those of one kind only are no-ops here and required in
  `ContextProvider` / `OutputModifier`. `model` is the `models.Seq2Seq` holding the add-on's
  parameters."""

  name: ClassVar[str]
  kind: ClassVar[str]
  Settings: ClassVar[type] = registry.NoSettings  # The add-on's own settings.
  PARAMS: ClassVar[tuple[str, ...]] = ()
  # Whether the scores span an extended vocabulary [..., V + S] (copying) rather than V.
  extends_vocabulary: ClassVar[bool] = False
  # What it needs of the model (`models.ModelSettings.check` reads these): attention weights
  # (`uses_attention`), the tables `build_model` hands over (`takes_tables`), and whether it
  # works with two source languages.
  needs_attention: ClassVar[bool] = False
  needs_tables: ClassVar[bool] = False
  reads_two_sources: ClassVar[bool] = False
  # Settings a decode may change against the checkpoint: the parameters do not depend on them.
  DECODING_SETTINGS: ClassVar[tuple[str, ...]] = ()

  settings: Any = registry.NoSettings()

  @abc.abstractmethod
  def build(self, model, cfg, src_vocab: int, tgt_vocab: int, annot: int, *, rngs, tables):
    """Adds the parameters named in `PARAMS` to `model`; `annot` is the annotation width and
    `tables` the arrays it stores (loaded by the caller of `models.build_model`)."""

  # Per sentence.
  def prepare(self, model, src_BS: jax.Array, mask_BS: jax.Array) -> Any:
    return None

  def init_state(self, model, s0_BD: jax.Array, steps: int | None) -> Any:
    return ()

  # At every step.
  def read(self, model, state: Any, s_prev_BD: jax.Array) -> jax.Array | None:
    """A context provider's context [B, D'] for the step after `state`; None: none."""
    return None

  def store(self, model, state: Any, s_BD: jax.Array) -> Any:
    return state

  def feed_back(self, model, y: jax.Array) -> jax.Array:
    return y

  def logits(self, model, logits, prepared, alpha, readout_s, emb, ctx, output_ids=None):
    return logits


@dataclasses.dataclass(frozen=True)
class ContextProvider(AddOn):
  """An add-on whose context enters the recurrence and the deep output at every step."""

  @abc.abstractmethod
  def read(self, model, state: Any, s_prev_BD: jax.Array) -> jax.Array: ...

  @abc.abstractmethod
  def gru_input(self, model, context: jax.Array) -> jax.Array:
    """The context's contribution to the GRU input [B, 3D]."""

  @abc.abstractmethod
  def readout(self, model, context: jax.Array) -> jax.Array:
    """The context's contribution to the deep output [..., 2M], any leading axes."""


@dataclasses.dataclass(frozen=True)
class OutputModifier(AddOn):
  """An add-on that rewrites the step's scores."""

  @abc.abstractmethod
  def logits(self, model, logits, prepared, alpha, readout_s, emb, ctx, output_ids=None): ...


class IntraMemory(NamedTuple):
  """Intra-attention's memory of the decoder's own past, one slot per decoder step."""

  values: jax.Array  # [B, L, D] the states s_1 .. stored so far (zeros beyond them).
  # [B, L, K] their keys; None where the score's keys are the states themselves (dot, scaled),
  # which are then read from `values` rather than stored (and carried through the scan) twice.
  keys: jax.Array | None
  count: jax.Array  # [B] int32 how many are stored.


@register("intra", CONTEXT)
@dataclasses.dataclass(frozen=True)
class IntraAttention(ContextProvider):
  """Attention over the decoder's own past states (`model.addons=intra(score=SCORE)`): its score
  (`model.intra_score`), and its context d_i entering the GRU input (`model.intra_proj`) and
  the deep output (`model.d_o`)."""

  @dataclasses.dataclass(frozen=True)
  class Settings:
    score: str = "dot"  # A content score's spec (`model.score`'s choices but the positional).

    def __post_init__(self):
      parsed = scores.spec(self.score)
      if scores.get(parsed.name).positional:
        raise ValueError(
          f"score={self.score}: a positional score cannot attend over the decoder's past; use "
          "a content score (additive, dot, general, ...)"
        )
      object.__setattr__(self, "score", str(parsed))  # Canonical: equal scores print alike.

  PARAMS: ClassVar[tuple[str, ...]] = ("intra_score", "intra_proj", "d_o")
  settings: Settings = Settings()

  def build(self, model, cfg, src_vocab, tgt_vocab, annot, *, rngs, tables):
    d = cfg.dec_hidden
    model.intra_score = scores.make_score(self.settings.score, d, d, cfg, rngs=rngs)
    model.intra_proj = layers.dense(d, 3 * d, cfg, rngs=rngs)
    model.d_o = layers.dense(d, 2 * cfg.maxout_dim, cfg, rngs=rngs)

  def init_state(self, model, s0_BD, steps):
    """An empty memory: one slot per decoder step for its state and key."""
    if steps is None:
      raise ValueError(
        "an intra-attention model's encode needs steps=, the decoder steps that follow "
        "(its memory keeps that many past states)"
      )
    batch, d = s0_BD.shape
    keys_BLK = None
    if not model.intra_score.keys_are_annotations:
      # The keys' width and dtype, read off the score without computing a key.
      shape = jax.ShapeDtypeStruct((batch, 1, d), s0_BD.dtype)
      keys_B1K = jax.eval_shape(model.intra_score.keys, shape)
      keys_BLK = jnp.zeros((batch, steps, keys_B1K.shape[-1]), keys_B1K.dtype)
    values_BLD = jnp.zeros((batch, steps, d), s0_BD.dtype)
    return IntraMemory(values_BLD, keys_BLK, jnp.zeros((batch,), jnp.int32))

  def read(self, model, state: IntraMemory, s_prev_BD):
    """d_i = sum_{k<i-1} beta_ik s_k [B, D] float32, beta_i the masked softmax of the intra
    score of the query s_{i-1} against s_1 .. s_{i-2}: the states before the query's own, as in
    Paulus et al. (2017, eq. 6), which attend over t' < t. The memory also holds s_{i-1} (its
    last stored slot), which is masked out: a query scored against itself would win every dot
    or cosine match. Zeros while there is no earlier state (steps 1 and 2)."""
    values_BLD, keys_BLK, count_B = state
    keys_BLK = values_BLD if keys_BLK is None else keys_BLK
    mask_BL = jnp.arange(values_BLD.shape[1])[None, :] < count_B[:, None] - 1
    return attention.attend(model.intra_score, s_prev_BD, keys_BLK, values_BLD, mask_BL)[0]

  def gru_input(self, model, context):
    return model.intra_proj(context)

  def readout(self, model, context):
    return model.d_o(context)

  def store(self, model, state: IntraMemory, s_BD):
    """The memory with s_i (and its key) in the next free slot (`init_state` gives one slot per
    decoder step, so every past state is kept)."""
    values_BLD, keys_BLK, count_B = state
    rows = jnp.arange(s_BD.shape[0])
    values_BLD = values_BLD.at[rows, count_B].set(s_BD.astype(values_BLD.dtype), mode="drop")
    if keys_BLK is not None:
      key_BK = model.intra_score.keys(s_BD[:, None, :])[:, 0]
      keys_BLK = keys_BLK.at[rows, count_B].set(key_BK.astype(keys_BLK.dtype), mode="drop")
    return IntraMemory(values_BLD, keys_BLK, count_B + 1)


@register("lexicon", OUTPUT)
@dataclasses.dataclass(frozen=True)
class LexiconBias(OutputModifier):
  """Arthur et al.'s bias log(sum_j alpha_ij p_lex(w | x_j) + eps) added to the logits; the
  table (each source word's `LEXICON_TOP` best translations) travels with the parameters, never
  trained (`model.lexicon_ids`, `model.lexicon_probs`). `tables["lexicon"]`: the table
  (`lexicon.Lexicon`); without one, an empty table of the right shape, which training
  (`model.addons=lexicon(table=train)`) or a checkpoint fills."""

  @dataclasses.dataclass(frozen=True)
  class Settings:
    # "train": learned from the run's training split when training starts; else a table file
    # (`python -m seq2seq.build_lexicon`).
    table: str = LEXICON_FROM_TRAINING

    def __post_init__(self):
      if not self.table.strip():
        raise ValueError("table= names a table file, or train")

  PARAMS: ClassVar[tuple[str, ...]] = ("lexicon_ids", "lexicon_probs")
  needs_attention: ClassVar[bool] = True
  needs_tables: ClassVar[bool] = True
  settings: Settings = Settings()

  def build(self, model, cfg, src_vocab, tgt_vocab, annot, *, rngs, tables):
    table = tables.get("lexicon")
    if table is None:
      ids = np.zeros((src_vocab, LEXICON_TOP))
      probs = np.zeros((src_vocab, LEXICON_TOP))
    else:
      if table.ids.shape[0] != src_vocab or len(table.by_frequency) != tgt_vocab:
        raise ValueError(
          f"model.addons=lexicon(table={self.settings.table}) is a table of "
          f"{table.ids.shape[0]} source and {len(table.by_frequency)} target words; the model "
          f"has {src_vocab} and {tgt_vocab}"
        )
      ids = np.maximum(table.ids[:, :LEXICON_TOP], 0)  # Padding: word 0 (PAD) with p = 0.
      probs = table.probs[:, :LEXICON_TOP]
    model.lexicon_ids = FrozenTable(jnp.asarray(ids, jnp.float32))
    model.lexicon_probs = FrozenTable(jnp.asarray(probs, jnp.float32))

  def prepare(self, model, src_BS, mask_BS):
    """Each source word's best translations: ids [B, S, K] int32 and p_lex [B, S, K]."""
    probs_VK = jax.lax.stop_gradient(model.lexicon_probs[...])
    real = mask_BS.astype(bool)[..., None]
    return frozen_ids(model.lexicon_ids)[src_BS], jnp.where(real, probs_VK[src_BS], 0.0)

  def logits(self, model, logits, prepared, alpha, readout_s, emb, ctx, output_ids=None):
    """The logits plus the bias [..., V] (or [..., N] over `output_ids`) for attention alpha
    [..., S] with leading axes B (and T in training)."""
    ids_BSK, probs_BSK = prepared
    lead = alpha.shape[:-1]
    extra = alpha.ndim - 2  # The T axis in training.
    ids = ids_BSK.reshape(ids_BSK.shape[:1] + (1,) * extra + ids_BSK.shape[1:])
    probs = probs_BSK.reshape(ids.shape)
    weights = (alpha.astype(jnp.float32)[..., None] * probs).reshape(*lead, -1)
    ids = jnp.broadcast_to(ids, (*lead, *ids_BSK.shape[1:])).reshape(*lead, -1)
    rows = int(np.prod(lead))
    vocab = model.tgt_vocab
    p_lex = jax.vmap(lambda i, w: jnp.zeros(vocab, jnp.float32).at[i].add(w))(
      ids.reshape(rows, -1), weights.reshape(rows, -1)
    ).reshape(*lead, vocab)
    if output_ids is not None:
      p_lex = p_lex[..., output_ids]
    return logits + jnp.log(p_lex + LEXICON_EPS)


@register(copying.ADDON, OUTPUT)
@dataclasses.dataclass(frozen=True)
class Copying(OutputModifier):
  """Copying from the source (`seq2seq.data.copying`): the gate p_gen (`model.copy_gate`) and the
  source -> target vocabulary map (`model.copy_map`), kept with the parameters and never
  trained (-1 everywhere until training fills it: `tables["copy_map"]`). The scores become
  log-probabilities over the extended vocabulary [..., V + S]; never over a candidate list
  (`settings.validate` refuses that). `eos`: where the source EOS's attention goes
  (`copying.mix`), a decoding-time setting."""

  @dataclasses.dataclass(frozen=True)
  class Settings:
    eos: str = "null"  # "null" (copied as nothing) or "target" (as the target EOS).

    def __post_init__(self):
      if self.eos not in copying.COPY_EOS:
        raise ValueError(f"eos={self.eos} is not one of {', '.join(copying.COPY_EOS)}")

  PARAMS: ClassVar[tuple[str, ...]] = ("copy_gate", "copy_map")
  extends_vocabulary: ClassVar[bool] = True
  needs_attention: ClassVar[bool] = True
  needs_tables: ClassVar[bool] = True
  DECODING_SETTINGS: ClassVar[tuple[str, ...]] = ("eos",)
  settings: Settings = Settings()

  @property
  def null_eos(self) -> bool:
    """Whether the source EOS's attention is copied as nothing (`eos=null`)."""
    return self.settings.eos == "null"

  def build(self, model, cfg, src_vocab, tgt_vocab, annot, *, rngs, tables):
    width = annot + cfg.dec_hidden + cfg.emb_dim
    model.copy_gate = layers.dense(width, 1, cfg, rngs=rngs, use_bias=True)
    given = tables.get("copy_map")
    table = np.full(src_vocab, -1) if given is None else np.asarray(given)
    if table.shape != (src_vocab,):
      raise ValueError(f"copy map of shape {table.shape} for {src_vocab} source words")
    model.copy_map = FrozenTable(jnp.asarray(table, jnp.float32))

  def prepare(self, model, src_BS, mask_BS):
    """[B, S] the extended ids of the source positions."""
    return copying.extended_ids(src_BS, frozen_ids(model.copy_map), model.tgt_vocab)

  def feed_back(self, model, y):
    """An extended id (a copied source word) is fed back as <unk>."""
    return jnp.where(y >= model.tgt_vocab, UNK_ID, y)

  def logits(self, model, logits, prepared, alpha, readout_s, emb, ctx, output_ids=None):
    if output_ids is not None:
      return logits
    parts = [ctx.astype(jnp.float32), readout_s.astype(jnp.float32), emb.astype(jnp.float32)]
    gate = model.copy_gate(jnp.concatenate(parts, axis=-1))[..., 0]
    return copying.mix(logits, alpha, gate, prepared, null_eos=self.null_eos)


def make_addons(cfg: Any, kind: str) -> dict[str, AddOn]:
  """The add-ons of `kind` that `cfg` (the `ModelSettings`) lists in `model.addons`, in `ORDER`."""
  found = sorted(cfg.addons, key=lambda s: ORDER.index(s.name))
  return {s.name: get(s.name)(s.settings) for s in found if get(s.name).kind == kind}

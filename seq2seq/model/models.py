"""RNNsearch and RNNencdec (Bahdanau, Cho and Bengio, 2014) as Flax NNX modules.

Axes: B batch, S source positions, T target positions, E embedding, He encoder units per
direction, H = 2 He annotation size, D decoder units, K key size of the score function, M maxout
units, V target vocabulary.

Encoder (`seq2seq.model.encoders`, `model.encoder`): by default the paper's bidirectional GRU;
annotation h_j = [fwd h_j ; bwd h_j] [B, S, H]. Decoder state
s_0 = tanh(W_s bwd h_1). At step i, with the previous state s_{i-1} and word y_{i-1}:

  alpha_i = masked softmax_j a(s_{i-1}, h_j),  c_i = sum_j alpha_ij h_j         (RNNsearch)
  c_i = c = tanh(V h_Tx), s_0 = tanh(V' c), one-direction GRU encoder  (RNNencdec, the paper's)
  c_i = c = [fwd h_Tx ; bwd h_1] for every i               (RNNencdec_bi, an ablation)
  s_i = GRU(s_{i-1}, [E y_{i-1} ; c_i])
  t_i = maxout(U_o s_{i-1} + V_o E y_{i-1} + C_o c_i),  logits_i = W_o t_i    (deep output)

That recurrence and readout are the `paper` decoder; `model.decoder` may choose another
(`seq2seq.model.decoders`): Nematus' conditional GRU, or Luong et al.'s stacked decoder, which
queries the attention with its new top-layer state h_t and reads out h~_t = tanh(W_c [c_t ; h_t]).

Alignment features (`seq2seq.model.alignment_features`: Tu et al. 2016; Mi et al. 2016; Cohn et al.
2016; Chorowski et al. 2015), all off by default, enter the additive score through its keys:

  e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j + V_c cov_{i-1,j} / N_j + V_p conv(alpha_{i-1})_j)

with cov_{i-1,j} = sum_{k<i} alpha_kj carried in the decoder state (`model.features="coverage"`),
the learned fertility N_j = N * sigmoid(U_f h_j) (`coverage(fertility=true)`, else N_j = 1), and
filters over the previous step's attention (`prev_attention(filters=8, width=5)`). Each is a
registered module the decoder step loops over (prepare once per sentence, initial state, keys,
update).

Settings: the `config.model` section becomes a typed `ModelSettings` once, at `build_model`
(its score, structure and features parsed into `registry.Spec`s, the cross-field rules checked
there); modules below receive it (`cfg`) and their own component's settings.

Where attention may look (`model.attention`: soft, local_m, local_p, monotonic, conv, multihead,
hard) is a `seq2seq.model.structures` module between the score and the context: `_context` hands it
the score function, the step's keys and its own state (`DecoderState.structure`, e.g. the
previous monotonic alignment), and gets back an `Attended` (context, attention, next state and
per-step extras such as hard attention's sampled log-probabilities). The default `soft` is
exactly the paper's attention and adds no parameter.

Bidirectional agreement (Cohn et al. 2016), `model.name="agreement"`: `Agreement` holds two
RNNsearch models with the same settings, `forward` (source -> target) and `reverse` (target ->
source, vocabularies swapped), trained jointly on the same batches (`objective.AgreementBonus`). It
is a model name rather than a training switch because it changes what the model *is*: the
parameter tree becomes {"forward": ..., "reverse": ...}, saved whole in the ordinary checkpoint,
while every other name keeps its tree untouched. For everything downstream (validation, beam
search, evaluation, translation) an `Agreement` is its forward model: `encode`, `decoder_step`
and `__call__` delegate to `forward`, so a workdir evaluates exactly as a plain RNNsearch would;
`restoring.direction_state` extracts either direction as a plain RNNsearch state.

Training (`__call__`) hoists everything that does not depend on the recurrence out of the
`lax.scan`: the embeddings and their GRU input projection for all steps, and the whole deep
output over all steps after the scan. Decoding uses `decoder_step`, one position at a time,
built from the same pieces.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from seq2seq.common import registry
from seq2seq.model import (
  addons,
  alignment_features,
  decoders,
  encoders,
  layers,
  normalisers,
  scores,
  structures,
)

MULTI_SOURCE = ("concat", "gate")  # `model.multi_source`: how the two sources' contexts combine.


def restrict(logits: jax.Array, output_mask: jax.Array | None) -> jax.Array:
  """`logits` [B, ..., N] at -inf where `output_mask` (broadcast to them) is false: the words a
  sentence's own shortlist leaves out get probability 0. None: `logits` unchanged."""
  return logits if output_mask is None else jnp.where(output_mask, logits, -jnp.inf)


class DecoderState(NamedTuple):
  """What one decoder step hands to the next."""

  s: Any  # The recurrence's state (`decoders.Decoder.init_state`): s_{i-1} [B, D] float32 for
  # the paper's and cGRU decoders, each layer's state and h~_{t-1} for Luong's (`LuongState`).
  features: dict[str, jax.Array]  # Each alignment feature's state [B, S] (e.g. the coverage).
  structure: Any = ()  # What the attention structure carries across steps (soft: nothing).
  addons: dict[str, Any] = {}  # Each add-on's state (intra-attention's `addons.IntraMemory`).


class Encoded(NamedTuple):
  """What the decoder needs from the source, computed once per sentence."""

  annotations: Any  # [B, S, H]; with two sources a pair, one [B, S', H] per source.
  keys: Any  # [B, S, K]: the attention's precomputed keys (U_a h_j for additive); a pair likewise.
  mask: jax.Array  # [B, S] 1 for real tokens (two sources: both masks side by side).
  init_state: DecoderState  # s_0 = tanh(W_s bwd h_1) and the features' initial states.
  fixed_context: jax.Array  # [B, H] the RNNencdec context (also computed for RNNsearch).
  fertility: (
    jax.Array
  )  # [B, S] N_j dividing the coverage (ones without `coverage(fertility=true)`).
  prepared: dict[str, Any] | None = None  # What each feature computed once per sentence.
  # What each add-on computed once per sentence (`addons.AddOn.prepare`): the lexicon bias's
  # rows of its table, copying's extended ids of the source positions.
  addons: dict[str, Any] = {}
  # What the decoder computed once per sentence (`decoders.Decoder.prepare`: the Transformer
  # decoder's cross-attention keys and values).
  decoder: Any = ()


def summarise(model: Seq2Seq, fwd_last, bwd_first) -> tuple[jax.Array, jax.Array]:
  """The fixed context c [B, H'] and s_0 [B, D] (float32) from the encoder's last outputs (either
  direction's may be None), with `model`'s projections `summary_proj` and `init_proj`."""
  # One direction: the output after reading the whole sentence, whichever way it read.
  last = fwd_last if bwd_first is None else bwd_first
  if not model.bidirectional:  # Cho et al.: c = tanh(V h_Tx), s_0 = tanh(V' c).
    fixed = jnp.tanh(model.summary_proj(last).astype(jnp.float32))
    return fixed, jnp.tanh(model.init_proj(fixed).astype(jnp.float32))
  if fwd_last is not None and bwd_first is not None:
    # s_0 = tanh(W_s bwd h_1); RNNencdec-bi's c = [fwd h_Tx ; bwd h_1].
    fixed = jnp.concatenate([fwd_last, bwd_first], axis=-1)
    return fixed, jnp.tanh(model.init_proj(bwd_first).astype(jnp.float32))
  # A one-direction encoder: s_0 = tanh(W_s h_last), and c = h_last.
  return last, jnp.tanh(model.init_proj(last).astype(jnp.float32))


class AddOnHooks:
  """The model's calls into its add-ons (`self.addons`, (name, add-on) pairs in hook order) that
  sit outside the recurrence: the output modifiers' scores and fed-back ids."""

  addons: tuple[tuple[str, addons.AddOn], ...]

  def _output(self, enc: Encoded, logits, alpha, readout_s, emb, ctx, output_ids=None):
    """The step's scores from the output layer's logits (over `output_ids` when given), as the
    output add-ons rewrite them."""
    for name, addon in self.addons:
      logits = addon.logits(self, logits, enc.addons[name], alpha, readout_s, emb, ctx, output_ids)
    return logits

  def _feed_back(self, y: jax.Array) -> jax.Array:
    """The ids the decoder reads for outputs `y` (a copied word: <unk>)."""
    for _, addon in self.addons:
      y = addon.feed_back(self, y)
    return y

  @property
  def extends_vocabulary(self) -> bool:
    """Whether the scores span the extended vocabulary V + S of a copying model."""
    return any(addon.extends_vocabulary for _, addon in self.addons)


class Seq2Seq(AddOnHooks, nnx.Module):
  """The encoder-decoder shared by RNNsearch and both RNNencdec models: `uses_attention` and
  `bidirectional` (the encoder) tell them apart. The decoder's recurrence and output layer are
  components (`seq2seq.model.decoders`), and so are its add-ons (`seq2seq.model.addons`): the model
  holds them as static attributes, loops over the add-ons and names none of them. Each component
  adds its parameters to the model under names of its own, so the parameter tree is one flat
  namespace whichever components a config chooses.

  Build order (it fixes the random numbers each parameter draws, so a config builds the same
  parameters whatever components exist): encoder, target embeddings, s_0 projection, decoder
  recurrence, attention (and a second source's), alignment features, deep output, context
  add-ons, output layer, output add-ons.
  """

  uses_attention = True
  bidirectional = True
  # What the model can do, read by `ModelSettings.check` (a new model class declares its own).
  takes_tables = True  # `build_model` hands its add-ons their tables (copying, lexicon bias).
  trains_sampled_attention = True  # Its loss adds REINFORCE for a structure that samples.
  reads_two_sources = False  # `MultiSource` extends it to a corpus of two source languages.

  def __init__(self, cfg: ModelSettings, src_vocab: int, tgt_vocab: int, *, rngs, tables=None):
    tables = tables or {}
    self.dropout_rate = cfg.dropout
    self.scan_unroll = int(cfg.scan_unroll)  # Steps per iteration of the training scans.
    self.encoder = encoders.make_encoder(
      cfg, src_vocab, rngs=rngs, bidirectional=self.bidirectional
    )
    # The annotation h_j: [fwd ; bwd] with both directions, else one direction's output.
    annot = self.encoder.width
    if not self.bidirectional:  # c = tanh(V h_Tx); s_0 = tanh(V' c) is `init_proj` below.
      self.summary_proj = layers.dense(cfg.enc_hidden, cfg.enc_hidden, cfg, rngs=rngs)
    self.embed = layers.embed(tgt_vocab, cfg.emb_dim, cfg, rngs=rngs)
    self.init_proj = layers.dense(cfg.enc_hidden, cfg.dec_hidden, cfg, rngs=rngs, use_bias=True)
    ctx = self.context_width(cfg, annot)
    self.decoder = decoders.make_decoder(cfg)
    self.decoder.build(self, cfg, ctx, rngs=rngs)
    if self.attends:
      self._build_attention(cfg, annot, rngs)
    # Alignment features (seq2seq/model/alignment_features.py), built in registration order.
    self.feature_names = tuple(spec.name for spec in cfg.features)
    if self.feature_names:
      self.features = nnx.Dict(
        {
          spec.name: alignment_features.make_feature(spec, cfg, annot, rngs=rngs)
          for spec in cfg.features
        }
      )
    self.decoder.build_readout(self, cfg, ctx, rngs=rngs)
    self.tgt_vocab = tgt_vocab
    self.dtype = layers.compute_dtype(cfg)
    sizes = (cfg, src_vocab, tgt_vocab, annot)
    context_addons = addons.make_addons(cfg, addons.CONTEXT)
    for addon in context_addons.values():
      addon.build(self, *sizes, rngs=rngs, tables=tables)
    self.output = decoders.make_output_layer(cfg)
    self.output.build(self, cfg, self.decoder.readout_width(cfg), tgt_vocab, rngs=rngs)
    output_addons = addons.make_addons(cfg, addons.OUTPUT)
    for addon in output_addons.values():
      addon.build(self, *sizes, rngs=rngs, tables=tables)
    self.addons = tuple((context_addons | output_addons).items())  # (name, add-on), hook order.

  @classmethod
  def context_width(cls, cfg: ModelSettings, annot: int) -> int:
    """The width of the context c_i the decoder reads."""
    return annot

  @property
  def attention_heads(self) -> int:
    """The heads of the reported attention (of its layer, for the Transformer decoder); 1: a
    single attention or none."""
    if self.attends:
      return getattr(self.structure, "num_heads", 1)
    return getattr(self.decoder.settings, "heads", 1) if self.uses_attention else 1

  @property
  def attends(self) -> bool:
    """Whether the model's own score and structure attend (not a decoder's own heads)."""
    return self.uses_attention and not self.decoder.own_attention

  def _build_attention(self, cfg: ModelSettings, annot: int, rngs: nnx.Rngs) -> None:
    """The score (`conv` and `multihead` score with their own parameters) and the structure."""
    structure = structures.get(cfg.attention.name)
    self.score = (
      scores.make_score(cfg.score, cfg.dec_hidden, annot, cfg, rngs=rngs)
      if structure.uses_score
      else None
    )
    self.structure = structures.make_structure(cfg.attention, cfg.dec_hidden, annot, cfg, rngs=rngs)

  # ------------------------------------------------------------------ pieces
  def encode(
    self, src_BS: jax.Array, src_mask_BS: jax.Array, dropout_rng=None, *, steps: int | None = None
  ) -> Encoded:
    """Runs the encoder and precomputes everything the decoder reuses at every step.

    `steps` (static): how many decoder steps follow; an intra-attention model needs it, as its
    memory of past states has one slot per step (other models ignore it)."""
    annotations, fwd_last, bwd_first = self.encoder(src_BS, src_mask_BS, dropout_rng)
    keys, attention_state = annotations[..., :0], ()
    if self.attends:
      keys = self.structure.keys(self.score, annotations, src_mask_BS)
      attention_state = self.structure.init_state(src_mask_BS)
    fixed, s0 = summarise(self, fwd_last, bwd_first)
    prepared = {n: self.features[n].prepare(annotations) for n in self.feature_names}
    # The fertility N_j that the coverage divides by and the fertility penalty reads (else 1).
    fertility = prepared.get("coverage", jnp.ones(src_mask_BS.shape, jnp.float32))
    feature_states = {n: self.features[n].init_state(src_mask_BS) for n in self.feature_names}
    addon_states = {n: a.init_state(self, s0, steps) for n, a in self.addons}
    state = DecoderState(
      self.decoder.init_state(self, s0, steps), feature_states, attention_state, addon_states
    )
    addon_data = {n: a.prepare(self, src_BS, src_mask_BS) for n, a in self.addons}
    memory = self.decoder.prepare(self, annotations, src_mask_BS)
    return Encoded(
      annotations, keys, src_mask_BS, state, fixed, fertility, prepared, addon_data, memory
    )

  def _feature_keys(self, enc: Encoded, state: DecoderState) -> jax.Array:
    """The keys of this step: U_a h_j plus every alignment feature's contribution."""
    keys = enc.keys
    for name in self.feature_names:
      keys = keys + self.features[name].keys(state.features[name], enc.prepared[name])
    return keys

  def _context(self, enc: Encoded, state: DecoderState, rng=None, decoding=False):
    """The `structures.Attended` of step i (context [B, H] float32, attention [B, S] float32 or
    None for RNNencdec, the structure's next state, extras) from the state before it (its `s`
    is the query).

    `rng`: the step's key for structures that sample (training); `decoding`: take the
    structure's test-time decisions (hard monotonic attention)."""
    if not self.uses_attention:
      return structures.Attended(enc.fixed_context, None, state.structure, {})
    keys = self._feature_keys(enc, state)
    return self.structure(
      self.score,
      state.s,
      keys,
      enc.annotations,
      enc.mask,
      state.structure,
      rng=rng,
      decoding=decoding,
    )

  def _recur(self, enc: Encoded, state: DecoderState, x3_B3D, rng=None, decoding=False):
    """One decoder recurrence given the projected word input: (state_i, Attended_i, each
    context add-on's context, the state the deep output reads)."""
    reads = {}
    for name, addon in self.addons:
      read = addon.read(self, state.addons[name], state.s)
      if read is not None:
        reads[name] = read
        x3_B3D = x3_B3D + addon.gru_input(self, read)
    attend = lambda query: self._context(enc, state._replace(s=query), rng, decoding)
    new_s, att, readout_s = self.decoder.step(self, state.s, x3_B3D, attend, rng, enc.decoder)
    moved = {n: self.features[n].update(state.features[n], att.alpha) for n in self.feature_names}
    stored = {n: a.store(self, state.addons[n], new_s) for n, a in self.addons}
    new_state = state._replace(s=new_s, features=moved, structure=att.state, addons=stored)
    return new_state, att, reads, readout_s

  def _readout(self, readout_s, emb_prev, ctx, dropout_rng=None, output_ids=None, reads=None):
    """Logits [..., V] from the decoder's readout (`decoders.Decoder.readout`: the paper's deep
    output of s_{i-1}, E y_{i-1}, c_i and the context add-ons' contexts `reads`; Luong's h~_t),
    any leading axes, or [..., N] over the words `output_ids` [N] only (sampled softmax,
    `seq2seq.training.softmax`). The logits are accumulated and returned in float32 whatever the
    compute dtype."""
    t = self.decoder.readout(self, readout_s, emb_prev, ctx, reads or {}, dropout_rng)
    return self.output(self, t, output_ids)

  # ------------------------------------------------------------------ decoding API
  def decoder_step(
    self, enc: Encoded, state: DecoderState, y_prev_B: jax.Array, output_ids=None, output_mask=None
  ):
    """One target position: (state_{i-1}, y_{i-1}) -> (state_i, logits_i [B, V], alpha_i [B, S]);
    logits [B, N] over the words `output_ids` [N] only when given (shortlist decoding), and -inf
    where `output_mask` [B, N] is false (each sentence's own shortlist)."""
    emb = self.embed(self._feed_back(y_prev_B))
    new_state, att, reads, readout_s = self._recur(
      enc, state, self.decoder.project(self, emb), decoding=True
    )
    logits = self._readout(readout_s, emb, att.context, output_ids=output_ids, reads=reads)
    logits = self._output(enc, logits, att.alpha, readout_s, emb, att.context, output_ids)
    return new_state, restrict(logits, output_mask), att.alpha

  # ------------------------------------------------------------------ training API
  def __call__(
    self,
    src_BS,
    src_mask_BS,
    tgt_in_BT,
    *,
    return_alpha=False,
    return_aux=False,
    dropout_rng=None,
    output_ids=None,
    output_mask=None,
    decoding=False,
  ):
    """Teacher-forced logits [B, T, V] (float32), and alpha [B, T, S] when asked; [B, T, N]
    over the words `output_ids` [N] when given (sampled softmax, shortlists), -inf where
    `output_mask` [B, N] is false.

    `dropout_rng`: None for a deterministic pass, else the key of this step's dropout masks; a
    sampling attention structure draws step i's key as fold_in(fold_in(dropout_rng, 3), i).
    `decoding`: take the structures' test-time choices, as `decoder_step` does (hard monotonic
    attention rather than its expectation), so the pass scores outputs as search does.
    `return_aux`: return (logits, aux) instead, aux = {"alpha": [B, T, S], "fertility": N_j
    [B, S]} plus the structure's per-step extras [B, T, ...] (e.g. hard attention's
    "sample_logp" and "entropy", multi-head's "alpha_heads").
    """
    rngs = jax.random.split(dropout_rng, 3) if dropout_rng is not None else (None,) * 3
    # Step i's key (for sampling structures and a stacked decoder's dropout between layers).
    step_rng = None if dropout_rng is None else jax.random.fold_in(dropout_rng, 3)
    enc = self.encode(src_BS, src_mask_BS, rngs[0], steps=tgt_in_BT.shape[1])
    emb_BTE = layers.dropout(
      self.embed(self._feed_back(tgt_in_BT)), self.dropout_rate, rngs[1]
    )  # Scoring a given output: its copied words are read back as <unk>.
    x3_BT3D = self.decoder.project(self, emb_BTE)
    if self.decoder.own_attention:  # Every position at once (the Transformer decoder).
      prev_BTD, ctx_BTH, alpha_BTS, extras_BT = self.decoder.teacher_forced(
        self, enc.decoder, x3_BT3D, step_rng
      )
      reads_BT = {}
    else:
      prev_BTD, ctx_BTH, alpha_BTS, extras_BT, reads_BT = scan_steps(
        self, enc, x3_BT3D, step_rng, decoding
      )
    logits = self._readout(prev_BTD, emb_BTE, ctx_BTH, rngs[2], output_ids, reads_BT)
    if self.addons:
      logits = self._output(enc, logits, alpha_BTS, prev_BTD, emb_BTE, ctx_BTH, output_ids)
    if output_mask is not None:
      logits = restrict(logits, output_mask[:, None, :])
    if not (return_alpha or return_aux):
      return logits
    if alpha_BTS is None:
      raise ValueError("RNNencdec has no attention weights to return")
    if return_aux:
      return logits, {"alpha": alpha_BTS, "fertility": enc.fertility, **extras_BT}
    return logits, alpha_BTS

  @property
  def samples_attention(self) -> bool:
    """Whether the attention samples where to look (trained with `objective.reinforce_loss`)."""
    return self.attends and self.structure.sampled


def scan_steps(model: Seq2Seq, enc: Encoded, x3_BT3D, step_rng, decoding):
  """`model`'s recurrence over every target position, given their projected words: (the
  readout's states [B, T, D], c [B, T, H], alpha [B, T, S] or None, extras [B, T, ...], the
  context add-ons' contexts [B, T, ...])."""

  def step(state, inputs):
    x3, i = inputs
    rng = None if step_rng is None else jax.random.fold_in(step_rng, i)
    new_state, att, reads, readout_s = model._recur(enc, state, x3, rng, decoding)
    return new_state, (readout_s, att.context, att.alpha, att.extras, reads)

  x3_TB3D = jnp.swapaxes(x3_BT3D, 0, 1)
  positions_T = jnp.arange(x3_TB3D.shape[0])
  inputs = (x3_TB3D, positions_T)
  _, outputs = jax.lax.scan(step, enc.init_state, inputs, unroll=model.scan_unroll)
  batch_first = lambda x: None if x is None else jnp.swapaxes(x, 0, 1)
  return jax.tree.map(batch_first, outputs, is_leaf=lambda x: x is None)


class MultiSource(Seq2Seq):
  """RNNsearch over two source languages (Zoph and Knight 2016), the model of a corpus with two
  (`data.local.src_lang="en+de"`): a second encoder and attention; the two contexts are
  concatenated ([c1 ; c2], 2H wide: Zoph and Knight's combination) or mixed by a gate
  (`model.multi_source="gate"`, H wide: this project's extension, not theirs)."""

  uses_attention = True

  def __init__(self, cfg: ModelSettings, src_vocab: int, tgt_vocab: int, *, rngs, tables=None):
    self.combine = cfg.multi_source
    self.src_vocab = src_vocab
    super().__init__(cfg, src_vocab, tgt_vocab, rngs=rngs, tables=tables)

  @classmethod
  def context_width(cls, cfg: ModelSettings, annot: int) -> int:
    return 2 * annot if cfg.multi_source == "concat" else annot

  def _build_attention(self, cfg: ModelSettings, annot: int, rngs: nnx.Rngs) -> None:
    """The first source's score and structure, then the second source's encoder, s_0
    projection and score (and the gate)."""
    super()._build_attention(cfg, annot, rngs)
    self.encoder2 = encoders.make_encoder(cfg, self.src_vocab, rngs=rngs)
    self.init_proj2 = layers.dense(cfg.enc_hidden, cfg.dec_hidden, cfg, rngs=rngs)
    self.score2 = scores.make_score(cfg.score, cfg.dec_hidden, annot, cfg, rngs=rngs)
    if cfg.multi_source == "gate":
      self.source_gate = layers.dense(
        cfg.dec_hidden + 2 * annot, annot, cfg, rngs=rngs, use_bias=True
      )

  def encode(self, src_BS, src_mask_BS, dropout_rng=None, *, steps=None) -> Encoded:
    """src [B, 2S] packs the two sources side by side (`input_pipeline.make_batch`);
    annotations and keys become pairs, one per source, and s_0 = tanh(W_s bwd h_1 + W_s' bwd
    h'_1) reads both encoders."""
    half = src_BS.shape[1] // 2
    rngs = (None, None) if dropout_rng is None else jax.random.split(dropout_rng)
    parts = [(src_BS[:, :half], src_mask_BS[:, :half]), (src_BS[:, half:], src_mask_BS[:, half:])]
    encoded = [
      encoder(src, mask, rng)
      for encoder, (src, mask), rng in zip((self.encoder, self.encoder2), parts, rngs, strict=True)
    ]
    annotations = tuple(ann for ann, _, _ in encoded)
    keys = tuple(
      self.structure.keys(score, ann, mask)
      for score, ann, (_, mask) in zip((self.score, self.score2), annotations, parts, strict=True)
    )
    s0 = self.init_proj(encoded[0][2]) + self.init_proj2(encoded[1][2])
    s0 = jnp.tanh(s0.astype(jnp.float32))
    state = DecoderState(
      self.decoder.init_state(self, s0), {}, self.structure.init_state(src_mask_BS[:, :half]), {}
    )
    return Encoded(
      annotations,
      keys,
      src_mask_BS,
      state,
      fixed_context=None,
      fertility=jnp.ones(src_mask_BS.shape, jnp.float32),
      prepared={},
      addons={},
    )

  def _context(self, enc: Encoded, state: DecoderState, rng=None, decoding=False):
    """One attention over each source from the same query, their contexts combined; the
    attention returned is [alpha_1 ; alpha_2] [B, 2S], each summing to 1."""
    half = enc.mask.shape[1] // 2
    masks = (enc.mask[:, :half], enc.mask[:, half:])
    rngs = (None, None) if rng is None else jax.random.split(rng)
    att = [
      self.structure(score, state.s, keys, ann, mask, state.structure, rng=r, decoding=decoding)
      for score, keys, ann, mask, r in zip(
        (self.score, self.score2), enc.keys, enc.annotations, masks, rngs, strict=True
      )
    ]
    c1, c2 = att[0].context, att[1].context
    if self.combine == "concat":
      context = jnp.concatenate([c1, c2], axis=-1)
    else:  # A gate per unit: g * c1 + (1 - g) * c2, g from the query and both contexts.
      query = state.s.astype(jnp.float32)
      g = jax.nn.sigmoid(self.source_gate(jnp.concatenate([query, c1, c2], axis=-1)))
      context = g.astype(jnp.float32) * c1 + (1.0 - g.astype(jnp.float32)) * c2
    alpha = jnp.concatenate([att[0].alpha, att[1].alpha], axis=-1)
    return structures.Attended(context, alpha, att[0].state, {})


class RNNsearch(Seq2Seq):
  """The paper's model: attention over the annotations at every decoder step."""

  uses_attention = True
  reads_two_sources = True


class RNNencdec(Seq2Seq):
  """The paper's baseline (Cho et al. 2014): a one-direction GRU encoder summarised as
  c = tanh(V h_Tx), s_0 = tanh(V' c), and c fed to every decoder step's GRU and deep output."""

  uses_attention = False
  bidirectional = False


class RNNencdecBi(Seq2Seq):
  """An ablation, not the paper's baseline: RNNsearch's bidirectional encoder and decoder with the
  attention removed, fed the fixed context c = [fwd h_Tx ; bwd h_1] at every step."""

  uses_attention = False


class Agreement(nnx.Module):
  """Two RNNsearch models trained to agree (Cohn et al. 2016); see the module docstring.

  `forward` is built first from the same `rngs`, so it starts from exactly the parameters a plain
  RNNsearch of the same seed gets; `reverse` maps target ids to source ids.
  """

  uses_attention = True
  bidirectional = True
  takes_tables = False  # The reverse model would need tables of its own.
  trains_sampled_attention = False  # The joint loss has no REINFORCE term.
  reads_two_sources = False

  samples_attention = False  # Hard attention's REINFORCE is not wired into the joint loss.
  extends_vocabulary = False  # Copying is refused for agreement runs.

  def __init__(self, cfg: ModelSettings, src_vocab: int, tgt_vocab: int, *, rngs):
    self.forward = RNNsearch(cfg, src_vocab, tgt_vocab, rngs=rngs)
    self.reverse = RNNsearch(cfg, tgt_vocab, src_vocab, rngs=rngs)

  def encode(self, src_BS: jax.Array, src_mask_BS: jax.Array, dropout_rng=None, **kwargs):
    """The forward model's `encode`."""
    return self.forward.encode(src_BS, src_mask_BS, dropout_rng, **kwargs)

  def decoder_step(self, enc: Encoded, state: DecoderState, y_prev_B: jax.Array, **kwargs):
    """The forward model's `decoder_step`."""
    return self.forward.decoder_step(enc, state, y_prev_B, **kwargs)

  def __call__(self, src_BS, src_mask_BS, tgt_in_BT, **kwargs):
    """The forward model's teacher-forced pass (the joint loss calls both models itself)."""
    return self.forward(src_BS, src_mask_BS, tgt_in_BT, **kwargs)


MODELS: dict[str, type[nnx.Module]] = {
  "rnnsearch": RNNsearch,
  "rnnencdec": RNNencdec,
  "rnnencdec_bi": RNNencdecBi,
  "agreement": Agreement,
}
ENCDEC_NAMES = tuple(name for name, cls in MODELS.items() if not cls.uses_attention)


def models_that(can: Any) -> str:
  """The model names whose class `can(cls)` allows, "|"-joined (for messages)."""
  return "|".join(name for name, cls in MODELS.items() if can(cls))


def plain(reg: registry.Registry) -> str:
  """The name of the registry's plain component (the paper's choice)."""
  return next(name for name in reg.names() if reg.get(name).plain)


@dataclasses.dataclass(frozen=True)
class ModelSettings:
  """The `config.model` section, typed (see configs/default.py for each field's meaning): the
  score, structure, features and add-ons as `registry.Spec`s. `from_config` checks every rule
  that involves more than one component."""

  name: str
  direction: str
  emb_dim: int
  enc_hidden: int
  dec_hidden: int
  attn_dim: int
  maxout_dim: int
  score: registry.Spec
  attention: registry.Spec
  features: tuple[registry.Spec, ...]
  scan_unroll: int
  dropout: float
  dtype: str
  init: str
  tie_embeddings: bool = False
  layer_norm: bool = False
  decoder: registry.Spec = registry.Spec("paper")
  encoder: registry.Spec = registry.Spec("rnn", encoders.RNNEncoder.Settings())
  addons: tuple[registry.Spec, ...] = ()  # In `addons.ORDER`.
  normaliser: registry.Spec = registry.Spec("softmax")
  multi_source: str = "concat"
  sources: int = 1  # Source languages of the corpus (not a config.model field: from data.local).

  @classmethod
  def from_config(
    cls, model: ml_collections.ConfigDict | ModelSettings, sources: int = 1
  ) -> ModelSettings:
    """The typed settings of a `config.model` section (itself if it is typed already) for a
    corpus of `sources` source languages (`input_pipeline.num_sources`)."""
    if isinstance(model, ModelSettings):
      return model
    given = {**dict(model.items()), "sources": sources}
    fields = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(given) - set(fields))
    if unknown:
      raise ValueError(
        f"unknown model setting(s) {', '.join(unknown)}; valid: {', '.join(fields)} "
        "(a score's, structure's or feature's own settings go in its spec, e.g. "
        "model.attention='local_p(window=10)'; `python -m seq2seq.settings --upgrade "
        "CONFIG_JSON` rewrites a saved config)"
      )
    required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
    missing = sorted(set(required) - set(given))
    if missing:
      raise ValueError(f"model settings missing: {', '.join(missing)}")
    typed = cls(
      **{
        **given,
        "score": scores.spec(given["score"]),
        "attention": structures.spec(given["attention"]),
        "features": alignment_features.specs(given["features"]),
        "decoder": decoders.spec(given.get("decoder", "paper")),
        "normaliser": normalisers.spec(given.get("normaliser", "softmax")),
        "encoder": encoders.spec(given.get("encoder", "rnn")),
        "addons": addons.specs(given.get("addons", "")),
      }
    )
    typed.check()
    return typed

  def check(self) -> None:
    """The rules across components (each component checks its own settings when parsed); they
    read what each component declares it can do (`uses_attention`, `plain`, ...), never its
    name."""
    if self.name not in MODELS:
      raise ValueError(f"unknown model {self.name!r}; valid: {', '.join(sorted(MODELS))}")
    model = MODELS[self.name]
    structure = structures.get(self.attention.name)
    score, attention = scores.get(self.score.name), str(self.attention)
    attending = models_that(lambda cls: cls.uses_attention)
    if not model.uses_attention and not structure.plain:
      raise ValueError(f"model.attention={attention!r} needs model.name={attending}")
    if not normalisers.REGISTRY.get(self.normaliser.name).plain:
      if not model.uses_attention or not structure.normalised:
        raise ValueError(
          f"model.normaliser={str(self.normaliser)!r} normalises attention scores: it needs "
          f"model.name={attending} and a structure that normalises scores (got "
          f"{self.name!r}, {attention!r})"
        )
    if not structure.uses_score and not score.plain:
      raise ValueError(
        f"model.attention={attention!r} scores with its own parameters; leave model.score "
        f"at {plain(scores.REGISTRY)!r} (got {str(self.score)!r})"
      )
    if self.features and not (model.uses_attention and score.takes_features):
      featured = "|".join(n for n in scores.names() if scores.get(n).takes_features)
      raise ValueError(
        f"model.features={self.feature_spec!r} extend the additive score: set "
        f"model.score={featured} and model.name={attending} (got {str(self.score)!r}, "
        f"{self.name!r})"
      )
    if self.features and not structure.uses_score:
      raise ValueError(
        f"model.attention={attention!r} has its own score: model.features need one that uses "
        "model.score"
      )
    decoder = decoders.REGISTRY.get(self.decoder.name)
    if decoder.own_attention:
      self.check_own_attention(model, structure)
    if self.tie_embeddings and decoder.readout_width(self) != self.emb_dim:
      raise ValueError(
        f"model.tie_embeddings reads the output layer from the target embeddings: "
        f"{decoder.READOUT_FIELD} ({decoder.readout_width(self)}) must equal model.emb_dim "
        f"({self.emb_dim})"
      )
    self.check_addons(model, decoder)
    if self.multi_source not in MULTI_SOURCE:
      raise ValueError(f"model.multi_source={self.multi_source!r} is not one of {MULTI_SOURCE}")
    if self.sources not in (1, 2):
      raise ValueError(f"{self.sources} source languages: at most two (data.local.src_lang=en+de)")
    if self.sources == 2:
      if not model.reads_two_sources or not structure.plain or self.features:
        raise ValueError(
          "two source languages are attended with soft attention each: model.name="
          f"{models_that(lambda cls: cls.reads_two_sources)}, model.attention="
          f"{plain(structures.REGISTRY)} and no model.features"
        )
      if score.positional:
        raise ValueError(f"model.multi_source needs a content score, not {str(self.score)!r}")
      if one := [str(s) for s in self.addons if not addons.get(s.name).reads_two_sources]:
        raise ValueError(f"two source languages do not combine with model.addons={one[0]}")
      if not self.encoder.settings.bidirectional:
        raise ValueError(
          "two source languages start the decoder from both backward encoders: "
          "model.encoder needs bidirectional=true"
        )
    if structure.sampled and not model.trains_sampled_attention:
      raise ValueError(
        f"model.name={self.name} trains with a differentiable attention; model.attention="
        f"{attention!r} samples its positions (REINFORCE), which the joint loss lacks"
      )

  def check_own_attention(self, model: type, structure: type) -> None:
    """A decoder with heads of its own (the Transformer's) attends for an attention model, per
    head with `model.score` and `model.normaliser`; what extends one recurrent attention (a
    structure, alignment features, a second source) has nothing to extend; add-ons that
    rewrite the output (copying, the lexicon bias) read its reported attention."""
    given = {
      "model.name": None if model.uses_attention else self.name,
      "model.attention": None if structure.plain else str(self.attention),
      "model.features": self.feature_spec or None,
      "a second source": "en+de" if self.sources == 2 else None,
    }
    if clash := [f"{field}={value}" for field, value in given.items() if value]:
      raise ValueError(
        f"model.decoder={self.decoder} attends with its own heads (model.score and "
        f"model.normaliser per head): it does not combine with {', '.join(clash)}"
      )

  @property
  def feature_spec(self) -> str:
    """The canonical `model.features` string."""
    return "+".join(str(spec) for spec in self.features)

  @property
  def addon_spec(self) -> str:
    """The canonical `model.addons` string."""
    return addons.spec_text(self.addons)

  def addon(self, name: str) -> registry.Spec | None:
    """The spec of the add-on `name` if `model.addons` lists it, else None."""
    return next((spec for spec in self.addons if spec.name == name), None)

  @property
  def extends_vocabulary(self) -> bool:
    """Whether an add-on makes the scores span the extended vocabulary V + S (copying)."""
    return any(addons.get(spec.name).extends_vocabulary for spec in self.addons)

  def check_addons(self, model: type, decoder: type) -> None:
    """What each add-on of `model.addons` declares it needs of the model and its decoder."""
    for spec in self.addons:
      addon = addons.get(spec.name)
      if addon.needs_attention and not model.uses_attention:
        attending = models_that(lambda cls: cls.uses_attention)
        raise ValueError(
          f"model.addons={spec} reads the attention: model.name={attending}, not {self.name}"
        )
      if addon.needs_tables and not model.takes_tables:
        raise ValueError(f"model.addons={spec}: {self.name} runs have no table for it to hold")
      if addon.kind == addons.CONTEXT and not decoder.feeds_context_addons:
        feeding = [n for n in decoders.names() if decoders.REGISTRY.get(n).feeds_context_addons]
        raise ValueError(
          f"model.addons={spec} adds a context to every decoder step: use "
          f"model.decoder={' or '.join(feeding)} with it"
        )


def build_model(
  settings: ModelSettings,
  src_vocab: int,
  tgt_vocab: int,
  *,
  rngs: nnx.Rngs,
  copy_map: np.ndarray | None = None,
  lexicon: Any = None,
) -> Seq2Seq | Agreement:
  """The model `settings` name (its number of sources included); `copy_map` fills a copying
  model's vocabulary map (`copying.vocab_map`), `lexicon` (a `lexicon.Lexicon`) the lexicon
  bias's table. Without them the tables start empty, for training or a checkpoint to fill: this
  builds a model and reads no file (the caller loads a `lexicon(table=FILE)` table file)."""
  if not isinstance(settings, ModelSettings):
    raise TypeError(
      f"build_model takes ModelSettings (settings.validate(config).model, or "
      f"ModelSettings.from_config(config.model)), not {type(settings).__name__}"
    )
  model_class = MultiSource if settings.sources == 2 else MODELS[settings.name]
  if not model_class.takes_tables:
    return model_class(settings, src_vocab, tgt_vocab, rngs=rngs)
  tables = {"copy_map": copy_map, "lexicon": lexicon}
  return model_class(settings, src_vocab, tgt_vocab, rngs=rngs, tables=tables)

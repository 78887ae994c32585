"""The dispatcher: decoding compiled for a model, by the search the settings name.

`jit_decode(graphdef, params, src, mask, ...)` merges an NNX model split with `nnx.split` inside
one `jax.jit` (the graph definition and the search's settings static), looks the search up in
`core.SEARCHES` (`core.search_of`: `decode.search`, else greedy, sampling or beam search as
`decode.beam_size` and `decode.sampling` imply) and runs it, over a shortlist where one is given.
`decode_batch(state, batch, dec)` does that for a `TrainState` and a batch with the run's typed
decoding settings (`core.DecodeSettings`, built once where a run is evaluated or translated),
keeping one compiled function per static setting.

The searches live beside this module, one job each: `left_to_right` (greedy, sampling), `beams`
(beam search and n-best lists, lexical constraints), `diverse` (diverse beam search); the rest
of decoding too: `shortlists`, `forcing` (the scores of given outputs), `unknowns` (`<unk>`
replacement), `core` (what they share). A search is registered where it is defined; importing it
here makes it a `decode.search` choice.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from seq2seq.common import registry
from seq2seq.data import input_pipeline, lexicon
from seq2seq.decoding import beams, core, diverse, left_to_right, length_penalties, shortlists
from seq2seq.decoding import constraints as constraints_
from seq2seq.decoding import mbr as mbr_
from seq2seq.decoding import sampling as sampling_

# The searches, each registered in `SEARCHES` where it is defined: importing its module here
# makes it a `decode.search` choice.
SEARCH_MODULES = (left_to_right, beams, diverse)
SEARCHES = core.SEARCHES


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
  """The `config.decode` section, typed (configs/default.py says what each field means), with
  the two data settings decoding reads: `sources`, the source languages a batch packs side by
  side (`input_pipeline.num_sources`), and `bucket_step`, the multiple decoding batches are
  padded to (`data.bucket_step`), so few shapes compile.

  The specs are parsed here, once: `length_penalty` is a `length_penalties.LengthPenalty`,
  `sampling` a `sampling.Sampling` (None: search), `mbr` an `mbr.Mbr` (None: the search's
  order), `search` the `registry.Spec` of a registered search (None: the one `beam_size` and
  `sampling` imply, `core.search_of`) and `saliency` a `core.Saliency` (None: the explorer shows
  attention alone). Their spec strings are accepted too
  (`dataclasses.replace(dec, sampling="")`) and parsed on the way in."""

  beam_size: int
  max_len_ratio: float
  length_penalty: length_penalties.LengthPenalty
  coverage_penalty: float
  batch_size: int
  order: str
  max_tokens: int
  max_input_tokens: int
  ensemble: str
  ensemble_combination: str
  ensemble_attention: str
  shortlist: str
  shortlist_frequent: int
  shortlist_per_word: int
  shortlist_scope: str
  replace_unk: bool
  num_heatmaps: int
  sampling: sampling_.Sampling | None = None
  mbr: mbr_.Mbr | None = None
  search: registry.Spec | None = None
  saliency: core.Saliency | None = None
  sources: int = 1
  bucket_step: int = 1

  def __post_init__(self):
    parsed = {
      "length_penalty": length_penalties.make(self.length_penalty),
      "sampling": sampling_.parse(self.sampling),
      "mbr": mbr_.parse(self.mbr),
      "search": parse_search(self.search),
      "saliency": core.parse_saliency(self.saliency),
    }
    for name, value in parsed.items():
      object.__setattr__(self, name, value)

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> DecodeSettings:
    """The typed decoding settings of a run's config (`settings.validate` checks the values)."""
    sources = input_pipeline.DataSettings.from_config(config).sources
    derived = {"sources": sources, "bucket_step": int(config.data.bucket_step)}
    return registry.typed_section(cls, dict(config.decode.items()), "decode", **derived)

  def candidates(self) -> int:
    """How many outputs per sentence decoding can give: the samples drawn, or the beam."""
    return self.sampling.n if self.sampling is not None else self.beam_size

  def check_nbest(self, nbest: int) -> None:
    """Raises ValueError unless these settings can give `nbest` outputs per sentence."""
    core.check_nbest(nbest, self.beam_size, self.sampling)


def parse_search(text: str | registry.Spec | None) -> registry.Spec | None:
  """The search a `decode.search` spec names; None for "" (the one the settings imply)."""
  if text is None or isinstance(text, registry.Spec):
    return text
  return core.SEARCHES.spec(text) if str(text).strip() else None


def check_search(dec: DecodeSettings) -> None:
  """Refuses, in one line, a `decode.search` the other decoding settings contradict."""
  chosen = core.search_of(dec.search, beam_size=dec.beam_size, sampling=dec.sampling)
  if dec.sampling is not None and chosen.name != "sample":
    raise ValueError(
      f"decode.sampling={str(dec.sampling)!r} draws its outputs; decode.search={dec.search} "
      "searches: leave one of them empty"
    )
  chosen.check(dec)


def normalised_over(dec: DecodeSettings) -> str:
  """What the scores of decoding and of forced decoding under `dec` are log-probabilities
  over: "vocabulary", or "shortlist" (`decode.shortlist`: its batch's or the sentence's own)."""
  if not dec.shortlist:
    return "vocabulary"
  return f"shortlist ({dec.shortlist_scope})"


def shortlist_of(
  batch: Mapping[str, Any], dec: DecodeSettings
) -> tuple[jax.Array | None, jax.Array | None]:
  """(ids [N], per-sentence mask [B, N] or None) of the batch's shortlist under `dec`
  (`decode.shortlist_scope`); (None, None) without a shortlist."""
  if not dec.shortlist:
    return None, None
  table = lexicon.load_cached(dec.shortlist)
  src = np.asarray(batch["src"])
  ids = lexicon.shortlist(table, src, dec.shortlist_frequent, dec.shortlist_per_word)
  mask = None
  if dec.shortlist_scope == "sentence":
    mask = lexicon.sentence_candidates(
      table, src, ids, dec.shortlist_frequent, dec.shortlist_per_word
    )
    mask = jnp.asarray(mask)
  return jnp.asarray(ids), mask


@functools.partial(
  jax.jit,
  static_argnames=(
    "graphdef",
    "beam_size",
    "max_len",
    "length_penalty",
    "coverage_beta",
    "ban_unk",
    "nbest",
    "sampling",
    "trace",
    "search",
  ),
)
def jit_decode(
  graphdef: nnx.GraphDef,
  params: nnx.State,
  src_BS: jax.Array,
  src_mask_BS: jax.Array,
  *,
  beam_size: int,
  max_len: int,
  length_penalty: core.LengthPenaltyLike = "power",
  coverage_beta: float = 0.0,
  ban_unk: bool = False,
  nbest: int | None = None,
  output_ids: jax.Array | None = None,
  output_mask: jax.Array | None = None,
  sampling: sampling_.Sampling | None = None,
  prefix_BP: jax.Array | None = None,
  constraints: constraints_.Constraints | None = None,
  trace: bool = False,
  search: registry.Spec | None = None,
) -> core.DecodeResult | tuple[core.DecodeResult, beams.BeamTrace]:
  """Compiled decoding of an NNX model given as `nnx.split(model)` by the search `search` names
  (a `decode.search` spec; None: greedy when beam_size == 1, `sample` with `sampling`, its
  samples best first taking the place of the n-best list, beam search of any width otherwise
  and with lexical `constraints` [B, C]); `prefix_BP` [B, P] forces each output's first words.

  Everything but `params`, the sources, the shortlist, the prefixes and the constraints is
  static; `params` is the model state, merged with `graphdef` inside the trace. With `nbest`
  (1 <= nbest <= what the search gives: the beam, the samples, greedy's one) the result is the
  n-best list, fields [B, N, ...]; without it, the best output, fields [B, ...]. Any
  `nnx.Module` with the decoding API can be split and passed, one that wraps several models too.
  `output_ids` [N]: decode over that shortlist only (`lexicon.shortlist`, specials first), the
  output mapped back to word ids, its scores normalised over the shortlist; `output_mask`
  [B, N]: each sentence over its own part of it (`lexicon.sentence_candidates`).
  With `trace` (static; a search that records one: beam search, even of width 1) the result
  comes with what each step of the search did, `(result, beams.BeamTrace)`, its tokens word ids
  as the result's.
  """
  chosen = core.search_of(
    search,
    beam_size=beam_size,
    sampling=sampling,
    constrained=constraints is not None,
    trace=trace,
  )
  if trace and not chosen.traces:
    raise ValueError(f"a beam trace records beam search, not decode.search={chosen.name}")
  if constraints is not None and not chosen.takes_constraints:
    raise ValueError(f"decode.search={chosen.name} takes no lexical constraints")
  job = core.SearchJob(
    max_len=max_len,
    beam_size=beam_size,
    nbest=nbest or 1,
    length_penalty=length_penalties.make(length_penalty),
    coverage_beta=coverage_beta,
    ban_unk=ban_unk,
    sampling=sampling,
    prefix_BP=prefix_BP,
    constraints=constraints,
    trace=trace,
  )
  if nbest is not None:
    core.check_nbest(nbest, beam_size, sampling)
  model = nnx.merge(graphdef, params)
  if output_ids is not None:
    model = shortlists.Shortlisted(model, output_ids, output_mask)
  result, steps = chosen(model, src_BS, src_mask_BS, job)
  if nbest is None:
    result = jax.tree.map(lambda x: x[:, 0], result)
  if output_ids is not None:
    result = result._replace(tokens=output_ids[result.tokens])
    if steps is not None:
      steps = steps._replace(tokens=output_ids[steps.tokens])
  return (result, steps) if trace else result


def output_limit(columns: int, dec: DecodeSettings) -> int:
  """The most output steps (EOS included) a batch of `columns` source columns is decoded for:
  `core.max_output_len` of its padded source length. Multi-source batches pack the sources side
  by side: the limit follows one source's length. It is the batch's, so a sentence's limit
  depends on the batch it is decoded in (`inference.output_limits`)."""
  return core.max_output_len(columns // dec.sources, dec.max_len_ratio)


@functools.cache
def _local_shardings() -> tuple[jax.sharding.NamedSharding, jax.sharding.NamedSharding] | None:
  """(rows split over this process's devices, replicated on them), or None on one device."""
  devices = jax.local_devices()
  if len(devices) < 2:
    return None
  mesh = jax.sharding.Mesh(np.asarray(devices), ("data",))
  spec = jax.sharding.PartitionSpec
  return jax.sharding.NamedSharding(mesh, spec("data")), jax.sharding.NamedSharding(mesh, spec())


def row_multiple() -> int:
  """What a decoding batch's rows are a multiple of (`input_pipeline.decoding_batches`): the
  devices of this process, which `on_devices` splits the rows over."""
  return len(jax.local_devices())


def on_devices(params: Any, *arrays: Any) -> tuple[Any, ...]:
  """(`params`, each of the batch's `arrays` [B, ...] as int32) where decoding runs them: on one
  device as they are; on several (this process's: a multi-process run decodes per process) the
  parameters replicated and each array's rows split over the devices, so each device searches
  B / devices sentences. Parameters placed so already are not copied; a batch whose rows do not
  split evenly stays whole, on the default device."""
  shardings = _local_shardings()
  if shardings is None or any(np.shape(a)[0] % len(jax.local_devices()) for a in arrays):
    return params, *(jnp.asarray(a, jnp.int32) for a in arrays)
  rows, replicated = shardings
  placed = [jax.device_put(np.asarray(a, np.int32), rows) for a in arrays]
  return jax.device_put(params, replicated), *placed


def placed(state: Any) -> Any:
  """`state` (a `TrainState`) with its parameters replicated on this process's devices where
  it has several, as `on_devices` places them: done once before a split's batches, so host
  parameters (a multi-process run's, `sharding.host_local`) are not copied again for each."""
  shardings = _local_shardings()
  if shardings is None:
    return state
  return state.replace(params=jax.device_put(state.params, shardings[1]))


def decode_batch(
  state: Any,
  batch: Mapping[str, Any],
  dec: DecodeSettings,
  *,
  ban_unk: bool = False,
  nbest: int | None = None,
  prefix_BP: Any = None,
  constraints: constraints_.Constraints | None = None,
  trace: bool = False,
) -> core.DecodeResult | tuple[core.DecodeResult, beams.BeamTrace]:
  """Decodes `batch["src"]` / `batch["src_mask"]` [B, S] with the decoding settings `dec`
  (never producing UNK with `ban_unk`: the paper's No-UNK protocol); with `nbest`, the n-best
  lists [B, N, ...] (`jit_decode`); each output starting with its row of `prefix_BP` [B, P]
  and containing its row's `constraints` where they are given; with `trace`, beam search's
  `BeamTrace` beside the result (`jit_decode`).

  `state` is a `train_state.TrainState` (its `graphdef` and `params` are used). Greedy when
  `dec.beam_size == 1`, beam search otherwise; max_len = int(max_len_ratio * S) + 10
  with S the padded source length (of one source, where a multi-source batch packs two). With
  `decode.shortlist` (a lexical table, `seq2seq.data.lexicon`) the output layer runs over the
  batch's shortlist only, each sentence over its own with `decode.shortlist_scope="sentence"`
  (`shortlist_of`), and the scores are normalised over it (`normalised_over`). `jit_decode`
  keeps one compiled function per static setting, so bucketed source lengths reuse their
  compilations. With several devices the rows are split over them (`on_devices`).
  """
  params, src, mask = on_devices(state.params, batch["src"], batch["src_mask"])
  output_ids, output_mask = shortlist_of(batch, dec)
  return jit_decode(
    state.graphdef,
    params,
    src,
    mask,
    beam_size=int(dec.beam_size),
    max_len=output_limit(src.shape[1], dec),
    length_penalty=dec.length_penalty,
    coverage_beta=float(dec.coverage_penalty),
    ban_unk=ban_unk,
    nbest=nbest,
    output_ids=output_ids,
    output_mask=output_mask,
    sampling=dec.sampling,
    prefix_BP=None if prefix_BP is None else jnp.asarray(prefix_BP, jnp.int32),
    constraints=None if constraints is None else jax.tree.map(jnp.asarray, constraints),
    trace=trace,
    search=dec.search,
  )

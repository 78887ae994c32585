"""What every search shares: the decoding settings, the result, the step's log-probabilities and
the ranking of outputs, and the registry of searches (`decode.search`).

Axes: B batch, K beam, S source positions, L output positions (the static `max_len`), V target
vocabulary, N rows (B, or B * K).

A search takes any `model` with the decoding API of `models.Seq2Seq`: `encode(src_BS,
src_mask_BS) -> Encoded` and `decoder_step(enc, state, y_prev_B) -> (new_state, logits_BV,
alpha_BS or None)`, where the state (starting at `enc.init_state`) is any pytree of arrays with
the batch as leading axis. Searches are pure and traceable: the source is encoded once, the time
loop is one `jax.lax.while_loop` that exits as soon as every hypothesis has ended, and nothing
happens on the host.

Scores are sums of the model's log-probabilities (log-softmax over the full vocabulary). PAD and
BOS are never produced: their log-probabilities are set to -inf before choosing (UNK too with
`ban_unk`, GroundHog's --ignore-unk, used for the paper's No-UNK column). Outputs are ranked by a
length penalty of their score and length (`decode.length_penalty`,
`seq2seq.decoding.length_penalties`: by default score / length, GroundHog's normalisation), where
the length counts the tokens up to and including EOS, plus GNMT's coverage penalty beta * sum_j
log(min(sum_i alpha_ij, 1)) over the real source positions (Wu et al. 2016; beta =
`decode.coverage_penalty`, 0 by default; coverage is floored at 1e-6 so an unattended word costs
a finite beta * log(1e-6)): `ranking_score`.

A search is a class registered in `SEARCHES` under the name `decode.search` gives it, with its
own settings as a frozen dataclass `Settings` (a spec, "diverse(groups=2)"), called as
`search(model, src_BS, src_mask_BS, job) -> (DecodeResult [B, N, ...], BeamTrace or None)`: the
`SearchJob` carries what every search reads (the length limit, the ranking, the forced prefixes,
the constraints, how many outputs). `seq2seq.decoding.decode` picks and compiles one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from seq2seq.common import registry
from seq2seq.data.tokenizer import BOS_ID, PAD_ID, UNK_ID
from seq2seq.decoding import constraints as constraints_
from seq2seq.decoding import length_penalties
from seq2seq.decoding import sampling as sampling_
from seq2seq.model.models import Encoded

# A `decode.length_penalty` spec ("gnmt(alpha=0.6)") or the penalty it names.
LengthPenaltyLike = str | length_penalties.LengthPenalty


# The attribution methods (`seq2seq.decoding.attribution`), named here so that the decoding
# settings parse `decode.saliency` without importing the gradients' module.
ATTRIBUTION_METHODS = ("grad_x_input", "grad_norm", "integrated_gradients")


@dataclasses.dataclass(frozen=True)
class Saliency:
  """`decode.saliency="saliency(method=..., samples=..., noise=...)"`: the attribution the
  explorer shows beside the attention of each evaluated output (`attribution.saliency`'s
  settings)."""

  method: str = "grad_x_input"
  samples: int = 1
  noise: float = 0.15

  def __post_init__(self):
    if self.method not in ATTRIBUTION_METHODS:
      valid = ", ".join(ATTRIBUTION_METHODS)
      raise ValueError(f"method must be one of {valid}, got {self.method!r}")
    if self.samples < 1:
      raise ValueError(f"samples must be at least 1, got {self.samples}")


def parse_saliency(text: str | Saliency | None) -> Saliency | None:
  """The attribution a `decode.saliency` spec asks for; None for "" (none)."""
  usage = "'' (none) or saliency(method=grad_x_input|grad_norm|integrated_gradients, samples=N)"
  return registry.optional_settings(Saliency, "saliency", text, "decode.saliency", usage)


class DecodeResult(NamedTuple):
  """The best hypothesis of every sentence; with an n-best list every field gains an axis N after
  B (tokens [B, N, L], scores [B, N], ...), best first."""

  tokens: jax.Array  # [B, L] int32: the output, EOS included, PAD after it.
  lengths: jax.Array  # [B] int32: tokens up to and including EOS (L when EOS never came).
  # [B] float32: sum of log-probabilities of `tokens[:lengths]` (-inf: none), normalised over
  # the vocabulary, or over the shortlist when decoding with one (`normalised_over`).
  scores: jax.Array
  norm_scores: jax.Array  # [B] float32: the ranking score of beam search (`ranking_score`).
  alpha: jax.Array  # [B, L, S] float32: attention at each output position (zeros without one).


def step_log_probs(logits_NV: jax.Array, ban_unk: bool = False) -> jax.Array:
  """Log-softmax over the words the logits cover (the vocabulary, or a shortlist's candidates),
  with PAD and BOS (and UNK with `ban_unk`, GroundHog's --ignore-unk) made impossible
  afterwards: [N, V] float32. The other words keep their probabilities under that softmax."""
  logp = jax.nn.log_softmax(logits_NV.astype(jnp.float32), axis=-1)
  return jnp.where(banned(logp.shape[-1], ban_unk), -jnp.inf, logp)


def banned(vocab: int, ban_unk: bool) -> jax.Array:
  """[V] bool: the ids no output may hold (PAD, BOS, and UNK with `ban_unk`)."""
  banned_ids = [PAD_ID, BOS_ID, UNK_ID] if ban_unk else [PAD_ID, BOS_ID]
  return jnp.zeros(vocab, bool).at[jnp.array(banned_ids)].set(True)


def best_words(logits_NV: jax.Array, ban_unk: bool = False) -> tuple[jax.Array, jax.Array]:
  """Greedy's pick: each row's most probable allowed word [N] and its log-probability [N] under
  the softmax over the logits' words (the argmax and entry of `step_log_probs`), without
  writing the [N, V] log-probabilities."""
  allowed = jnp.where(banned(logits_NV.shape[-1], ban_unk), -jnp.inf, logits_NV)
  tok_N = jnp.argmax(allowed, axis=-1).astype(jnp.int32)
  return tok_N, word_log_probs(logits_NV, tok_N)


def word_log_probs(logits_NV: jax.Array, word_N: jax.Array) -> jax.Array:
  """[N] the log-probability of each row's word under the softmax over the logits' words."""
  logits = logits_NV.astype(jnp.float32)
  chosen = jnp.take_along_axis(logits, word_N[:, None], axis=-1)[:, 0]
  return chosen - jax.nn.logsumexp(logits, axis=-1)


def attention_of(alpha_NS: jax.Array | None, enc: Encoded) -> jax.Array:
  """The step's attention as float32 [N, S]; zeros for models without attention (RNNencdec)."""
  if alpha_NS is None:
    return jnp.zeros(enc.mask.shape, jnp.float32)
  return alpha_NS.astype(jnp.float32)


def tile(tree: Any, beam_size: int) -> Any:
  """Repeats every leaf [B, ...] to [B*K, ...], row b*K + k being beam k of sentence b."""
  return jax.tree.map(lambda x: jnp.repeat(x, beam_size, axis=0), tree)


def gather_beams(x: jax.Array, index_BK: jax.Array) -> jax.Array:
  """x [B, M, ...] reordered along its second axis by index [B, K] -> [B, K, ...]."""
  index = index_BK.reshape(index_BK.shape + (1,) * (x.ndim - 2))
  return jnp.take_along_axis(x, index, axis=1)


def forced_words(prefix_BP: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(whether step t is forced [B], the word it is forced to [B]) by prefixes [B, P]: each
  row's words, PAD after them (no prefix: all PAD). A prefix holds no EOS, so a forced output
  goes on after it."""
  word_B = prefix_BP[:, jnp.minimum(t, prefix_BP.shape[1] - 1)]
  return (t < prefix_BP.shape[1]) & (word_B != PAD_ID), word_B


COVERAGE_FLOOR = 1e-6


def coverage_penalty(coverage_NS: jax.Array, mask_NS: jax.Array, beta: float) -> jax.Array:
  """GNMT's beta * sum_j log(min(coverage_j, 1)) over real positions [N, S] -> [N] (<= 0)."""
  covered = jnp.clip(coverage_NS, COVERAGE_FLOOR, 1.0)
  return beta * jnp.sum(jnp.where(mask_NS.astype(bool), jnp.log(covered), 0.0), axis=-1)


def ranking_score(
  scores_N: jax.Array,
  lengths_N: jax.Array | int,
  coverage_NS: jax.Array,
  mask_NS: jax.Array,
  length_penalty: LengthPenaltyLike,
  coverage_beta: float,
) -> jax.Array:
  """What beam search ranks an output by: its length penalty's rank of the score and length
  (`length_penalties`), plus GNMT's coverage penalty of
  its attention summed over output positions, coverage_NS (left out when beta = 0); any leading
  axes N. Greedy search and `force_decode` report the same for their outputs."""
  norm_N = length_penalties.make(length_penalty).rank(scores_N, lengths_N)
  if coverage_beta == 0:
    return norm_N
  return norm_N + coverage_penalty(coverage_NS, mask_NS, coverage_beta)


def check_nbest(nbest: int, beam_size: int, sampling: sampling_.Sampling | None = None) -> None:
  """Raises ValueError unless 1 <= nbest <= beam_size (the pool holds only K finished outputs),
  or with `sampling`, nbest <= its n (the samples drawn)."""
  if nbest < 1:
    raise ValueError(f"nbest must be at least 1, got {nbest}")
  if sampling is not None:
    if nbest > sampling.n:
      raise ValueError(
        f"nbest={nbest} exceeds the samples drawn (decode.sampling={sampling}): ask for at "
        f"most {sampling.n} or draw more (n=...)"
      )
  elif nbest > beam_size:
    raise ValueError(
      f"nbest={nbest} exceeds the beam size {beam_size} (decode.beam_size): ask for at most "
      f"{beam_size} hypotheses or widen the beam"
    )


def max_output_len(src_len: int, max_len_ratio: float) -> int:
  """The longest output considered for a source of `src_len` positions: int(ratio * S) + 10."""
  return int(max_len_ratio * src_len) + 10


class SearchJob(NamedTuple):
  """What a search is asked for, beside the model and the sources: static settings (the length
  limit, the ranking, how many outputs) and the per-sentence arrays that steer it."""

  max_len: int  # Steps at most (static).
  beam_size: int = 1  # K: the hypotheses a beam keeps (static).
  nbest: int = 1  # N: outputs per sentence, best first (static).
  length_penalty: length_penalties.LengthPenalty = length_penalties.make("power")
  coverage_beta: float = 0.0
  ban_unk: bool = False  # Never produce UNK (the paper's No-UNK protocol).
  sampling: sampling_.Sampling | None = None  # `decode.sampling`, for the sampling search.
  prefix_BP: jax.Array | None = None  # [B, P] each output's forced first words (PAD after).
  constraints: constraints_.Constraints | None = None  # [B, C] phrases each output contains.
  trace: bool = False  # Record what each step did (`BeamTrace`; beam searches only).

  def ranking(self) -> dict[str, Any]:
    """The keyword arguments that rank outputs (`ranking_score`'s, with the length limit)."""
    return {
      "max_len": self.max_len,
      "length_penalty": self.length_penalty,
      "coverage_beta": self.coverage_beta,
    }

  def steering(self) -> dict[str, Any]:
    """`ranking()` and what every search steers by: the banned UNK and the forced prefixes."""
    return self.ranking() | {"ban_unk": self.ban_unk, "prefix_BP": self.prefix_BP}


class Search:
  """A decoding strategy (`decode.search`). Subclasses register with `@SEARCHES.register(name)`,
  may declare a frozen dataclass `Settings`, and implement `__call__`."""

  name: ClassVar[str]
  Settings: ClassVar[type] = registry.NoSettings
  # What the search can honour beyond the prefix: lexical constraints, a trace of its steps.
  takes_constraints: ClassVar[bool] = False
  traces: ClassVar[bool] = False

  def __init__(self, settings: Any = None):
    self.settings = self.Settings() if settings is None else settings

  def check(self, dec: Any) -> None:
    """Refuses, in one line (ValueError), run decoding settings (`decode.DecodeSettings`) this
    search cannot honour; `settings.validate` calls it once per run."""

  def outputs(self, job: SearchJob) -> int:
    """How many outputs per sentence it can give (the n-best list's longest)."""
    return job.beam_size

  def __call__(
    self, model: Any, src_BS: jax.Array, src_mask_BS: jax.Array, job: SearchJob
  ) -> tuple[DecodeResult, Any]:
    """(the `job.nbest` best outputs of every sentence, fields [B, N, ...] best first, the
    search's trace or None)."""
    raise NotImplementedError


REGISTRY: registry.Registry[Search] = registry.Registry("search", field="decode.search")
SEARCHES = REGISTRY


def search_of(
  spec: registry.Spec | None,
  *,
  beam_size: int,
  sampling: sampling_.Sampling | None = None,
  constrained: bool = False,
  trace: bool = False,
) -> Search:
  """The search `spec` names, else the one the other settings imply: sampling with
  `decode.sampling`, greedy at beam size 1 (beam search when asked for constraints or a trace),
  beam search otherwise."""
  if spec is None:
    if sampling is not None:
      spec = registry.Spec("sample")
    elif beam_size == 1 and not constrained and not trace:
      spec = registry.Spec("greedy")
    else:
      spec = registry.Spec("beam")
  return SEARCHES.get(spec.name)(spec.settings)

"""Diverse beam search (Vijayakumar et al. 2016, "Diverse Beam Search"), `decode.search="diverse"`.

The beam of K is split into G groups of K / G hypotheses. At every step the groups choose in
turn: group g ranks its extensions by their log-probability minus `strength` times the number of
times the earlier groups chose the same word at this step (the paper's Hamming diversity), so
the groups are pushed apart; the scores kept and reported are the model's own. Each group keeps
its own K / G best finished outputs, so the n-best list holds every group's (best first by the
length penalty, as beam search ranks). With G = 1 or strength 0 each group is an ordinary beam
search of width K / G (G = 1: beam search itself).

Two choices the paper leaves open: the extensions by EOS are ranked by the length penalty
without the diversity term (as they enter a group's pool, not its live beam), and every group
starts from the empty hypothesis, so the first step already spreads them. A group stops growing
once none of its live hypotheses can beat its own worst kept finished one; the search stops when
every group has, or at `max_len`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from seq2seq.decoding import beams, core


@dataclasses.dataclass(frozen=True)
class DiverseRun(beams.BeamRun):
  """A beam search whose K slots are `groups` groups of K / G, each with its own pool."""

  groups: int = 2
  strength: float = 0.5

  def _by_group(self, x_BK: jax.Array) -> jax.Array:
    return x_BK.reshape(self.batch, self.groups, self.k // self.groups, *x_BK.shape[2:])

  def live_at_start(self, empty_BK: jax.Array) -> jax.Array:
    """Every group's first slot: G copies of the empty hypothesis, which the groups' different
    choices at the first step tell apart."""
    return empty_BK.at[:, :: self.k // self.groups].set(0.0)

  def choose_live(self, bs, live_BKV, count_BKV, penalty_BK) -> jax.Array:
    batch, per, vocab = self.batch, self.k // self.groups, live_BKV.shape[-1]
    rank_BKV = live_BKV
    if self.coverage_beta != 0:
      rank_BKV = self.ranker.rank(live_BKV, bs.t + 1) + penalty_BK[..., None]
    chosen_BV = jnp.zeros((batch, vocab), jnp.float32)  # The earlier groups' words this step.
    flat = []
    for g in range(self.groups):
      rank_BPV = rank_BKV[:, g * per : (g + 1) * per] - self.strength * chosen_BV[:, None]
      _, pick_BP = jax.lax.top_k(rank_BPV.reshape(batch, per * vocab), per)
      flat.append(pick_BP + g * per * vocab)  # Slot g * per + origin, word pick % vocab.
      chosen_BV = chosen_BV + jax.nn.one_hot(pick_BP % vocab, vocab).sum(1)
    return jnp.concatenate(flat, axis=1)

  def merge_pool(self, bs, eos_norm_BK):
    per = self.k // self.groups
    both_BGM = jnp.concatenate([self._by_group(bs.fin_norm), self._by_group(eos_norm_BK)], axis=2)
    norm_BGP, keep_BGP = jax.lax.top_k(both_BGM, per)
    # Column m of group g's [fin, eos] is the pool's column g * per + m (m < per) or the
    # extension's K + g * per + m - per.
    base_G1 = (jnp.arange(self.groups) * per)[:, None]
    column_BGP = jnp.where(keep_BGP < per, base_G1 + keep_BGP, self.k + base_G1 + keep_BGP - per)
    return norm_BGP.reshape(self.batch, self.k), column_BGP.reshape(self.batch, self.k)

  def unfinished(self, bs) -> jax.Array:
    reachable_BK = self.ranker.bound(bs.live_scores, bs.t, self.max_len)
    reachable_BK = jnp.where(jnp.isfinite(bs.live_scores), reachable_BK, -jnp.inf)
    bound_BG = jnp.max(self._by_group(reachable_BK), axis=2)
    worst_BG = self._by_group(bs.fin_norm)[..., -1]  # Each group's pool is sorted.
    return (bs.t < self.max_len) & ~jnp.all(worst_BG >= bound_BG)


@core.SEARCHES.register("diverse")
class Diverse(core.Search):
  """Diverse beam search of width `decode.beam_size` in `groups` groups (which must divide it)."""

  @dataclasses.dataclass(frozen=True)
  class Settings:
    groups: int = 2
    strength: float = 0.5  # lambda: what each earlier group's choice of a word costs it.

    def __post_init__(self):
      if self.groups < 1:
        raise ValueError(f"groups must be at least 1, got {self.groups}")
      if self.strength < 0:
        raise ValueError(f"strength must be >= 0, got {self.strength}")

  def check(self, dec) -> None:
    if dec.beam_size % self.settings.groups:
      raise ValueError(
        f"decode.search={dec.search}: decode.beam_size={dec.beam_size} is not a multiple of "
        f"its groups ({self.settings.groups})"
      )

  def __call__(self, model, src_BS, src_mask_BS, job):
    groups, strength = self.settings.groups, self.settings.strength
    if job.beam_size % groups:
      raise ValueError(f"decode.beam_size={job.beam_size} is not a multiple of groups={groups}")
    bs = beams.beam_search_pool(
      model,
      src_BS,
      src_mask_BS,
      beam_size=job.beam_size,
      run_type=DiverseRun,
      groups=groups,
      strength=strength,
      **job.steering(),
    )
    # The groups' pools side by side, sorted into one n-best list (empty slots last).
    order_BK = jnp.argsort(-bs.fin_norm, axis=1, stable=True)
    fin = ("fin_tokens", "fin_alpha", "fin_scores", "fin_norm", "fin_lengths")
    bs = bs._replace(**{f: core.gather_beams(getattr(bs, f), order_BK) for f in fin})
    return beams.nbest_of_pool(bs, src_mask_BS, nbest=job.nbest, **job.ranking()), None

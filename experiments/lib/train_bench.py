"""The library's train step at the benchmark's presets, what the benchmark, the profile and the
scaling study share: a preset's config and a random batch of it, the analytic matmul FLOPs per
target token (each score's share from its registered class, `Score.matmul_flops`), and the
compiled, donated train step timed step by step."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from configs import default as default_config
from configs import tiny as tiny_config
from seq2seq import settings
from seq2seq import sharding as rt
from seq2seq.model import models, scores
from seq2seq.training import train_state

_MB = 1024.0 * 1024.0

PRESETS = ("bench", "paper", "tiny")


# Per preset: (sentence length, timed runs, steps per run, warm-up steps, matmul size, peer size).
RUN_DEFAULTS: dict[str, dict[str, Any]] = {
  "bench": dict(length=30, repeats=5, steps=5, warmup=2, matmul_n=2048, peer_size="benchmark"),
  "paper": dict(length=30, repeats=3, steps=1, warmup=1, matmul_n=2048, peer_size="paper"),
  "tiny": dict(length=20, repeats=3, steps=5, warmup=2, matmul_n=512, peer_size=None),
}


# ---------------------------------------------------------------------- configuration
def make_config(
  preset: str, dtype: str = "float32", maxout: int | None = None
) -> ml_collections.ConfigDict:
  """The full ConfigDict of a preset: `configs.default` with the benchmark's fields set."""
  if preset not in PRESETS:
    raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
  if preset == "tiny":
    cfg = tiny_config.get_config()
  else:
    cfg = default_config.get_config()
  m, d, t = cfg.model, cfg.data, cfg.train
  if preset == "bench":
    m.emb_dim = m.enc_hidden = m.dec_hidden = m.attn_dim = 256
    m.maxout_dim = 1024  # The peer's output-layer width (see the module docstring).
    d.src_vocab_size = d.tgt_vocab_size = 8_000
    d.batch_size = 64
    t.optimizer, t.learning_rate, t.clip_norm = "adam", 1e-3, 1.0
  elif preset == "paper":
    m.emb_dim, m.enc_hidden, m.dec_hidden, m.attn_dim, m.maxout_dim = 620, 1000, 1000, 1000, 500
    d.src_vocab_size = d.tgt_vocab_size = 30_000
    d.batch_size = 80
    t.optimizer, t.learning_rate, t.clip_norm = "adadelta", 1.0, 1.0
  m.name, m.score, m.dropout, m.dtype = "rnnsearch", "additive", 0.0, dtype
  t.warmup_steps, t.decay, t.label_smoothing = 0, "constant", 0.0
  d.max_len = RUN_DEFAULTS[preset]["length"]  # Source and target length of every sentence.
  if maxout is not None:
    m.maxout_dim = maxout
  return cfg


def random_batch(cfg: ml_collections.ConfigDict, seed: int = 0) -> dict[str, np.ndarray]:
  """Full-length random sentences (ids 4.., past the specials) with all-ones masks."""
  rng = np.random.default_rng(seed)
  b, n = cfg.data.batch_size, cfg.data.max_len
  ones = np.ones((b, n), np.int32)
  return {
    "src": rng.integers(4, cfg.data.src_vocab_size, (b, n), dtype=np.int32),
    "src_mask": ones,
    "tgt_in": rng.integers(4, cfg.data.tgt_vocab_size, (b, n), dtype=np.int32),
    "tgt_out": rng.integers(4, cfg.data.tgt_vocab_size, (b, n), dtype=np.int32),
    "tgt_mask": ones.copy(),
  }


# ---------------------------------------------------------------------- analytic FLOPs
def forward_flops_per_token(
  cfg: ml_collections.ConfigDict, src_len: int, tgt_len: int
) -> dict[str, float]:
  """Forward matmul FLOPs (2 per multiply-add) per target token, by component, and `total`.

  Per-source-token work (encoder, attention keys) is scaled by src_len / tgt_len and per-sentence
  work (s_0) by 1 / tgt_len. Elementwise ops, softmaxes and embedding gathers are not counted.
  """
  m = cfg.model
  e, he, dd, a, mo = m.emb_dim, m.enc_hidden, m.dec_hidden, m.attn_dim, m.maxout_dim
  h, v, s = 2 * he, cfg.data.tgt_vocab_size, src_len
  per_src = src_len / tgt_len
  # Two directions, each an input projection E -> 3He and recurrent matmuls He -> 2He and He -> He.
  encoder = per_src * 2 * (2 * e * 3 * he + 2 * he * 3 * he)
  init_state = 2 * he * dd / tgt_len
  # GRU: word projection E -> 3D, context projection H -> 3D, recurrent D -> 2D and D -> D.
  decoder_gru = 2 * e * 3 * dd + 2 * h * 3 * dd + 2 * dd * 3 * dd
  keys, attention = 0.0, 0.0
  if m.name == "rnnsearch":
    keys, attention = _score_flops(scores.spec(m.score), dd, h, a, s, per_src)
  intra = 0.0
  intra_addon = models.ModelSettings.from_config(m).addon("intra")
  if intra_addon:  # d_i over the T past states, fed to the GRU and the deep output.
    spec = scores.spec(intra_addon.settings.score)
    intra_keys, intra_attention = _score_flops(spec, dd, dd, a, tgt_len, 1.0)
    intra = intra_keys + intra_attention + 2 * dd * 3 * dd + 2 * dd * 2 * mo
  deep_output = 2 * (dd + e + h) * 2 * mo  # U_o s + V_o E y + C_o c, each to 2M before maxout.
  output_layer = 2 * mo * v
  parts = {
    "encoder": encoder,
    "attention_keys": keys,
    "init_state": init_state,
    "decoder_gru": decoder_gru,
    "attention": attention,
    "intra_attention": intra,
    "deep_output": deep_output,
    "output_layer": output_layer,
  }
  parts["total"] = sum(parts.values())
  return parts


def _score_flops(
  score: Any, query: int, key: int, attn: int, slots: float, keys_per_token: float
) -> tuple[float, float]:
  """(keys, attention): forward matmul FLOPs per target token of one attention, a `query`-wide
  state over `slots` values `key` wide whose keys are computed `keys_per_token` times a token.
  The score's own share comes from its registered class (`Score.matmul_flops`)."""
  per_key, per_query = scores.get(score.name).matmul_flops(score.settings, query, key, attn, slots)
  context = slots * 2 * key  # sum_j alpha_ij v_j.
  return keys_per_token * per_key, per_query + context


# ---------------------------------------------------------------------- measurements
def spread(values: Sequence[float]) -> dict[str, float]:
  return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def memory_analysis_mb(compiled: Any) -> dict[str, float] | None:
  """XLA's static memory analysis of a compiled executable, in MiB."""
  try:
    stats = compiled.memory_analysis()
  except Exception:  # Not every backend implements it.
    return None
  if stats is None:
    return None
  fields = ("argument", "output", "alias", "temp", "generated_code")
  out = {}
  for name in fields:
    value = getattr(stats, f"{name}_size_in_bytes", None)
    if value is not None:
      out[f"{name}_mb"] = value / _MB
  return out


def xla_flops(compiled: Any) -> float | None:
  """XLA's cost-analysis FLOPs of one call (it counts a loop body once, not per iteration)."""
  try:
    cost = compiled.cost_analysis()
  except Exception:
    return None
  if isinstance(cost, list | tuple):
    cost = cost[0] if cost else None
  if not cost or "flops" not in cost:
    return None
  return float(cost["flops"])


class TrainBench:
  """The library's train step, jitted with the state donated and compiled, with its batch.

  `run(n)` applies n steps to the held state and returns the seconds of each (timed one by one,
  waiting for each step's results); the state moves on between calls, as in training.
  """

  def __init__(self, cfg: ml_collections.ConfigDict, seed: int = 0):
    self.cfg = cfg
    runtime = rt.Runtime()  # One data axis over every device, as in training.
    runtime.check_batch_size(cfg.data.batch_size)
    t0 = time.perf_counter()
    run = settings.validate(cfg)
    state = train_state.create_train_state(
      run, jax.random.key(seed), cfg.data.src_vocab_size, cfg.data.tgt_vocab_size
    )
    state = jax.block_until_ready(jax.device_put(state, runtime.replicated))
    self.init_s = time.perf_counter() - t0
    host_batch = random_batch(cfg, seed)
    self.tokens_per_step = int(np.sum(host_batch["tgt_mask"]))
    self.batch = runtime.put_batch(host_batch)
    self._base_rng = jax.device_put(jax.random.key(seed + 1), runtime.replicated)
    self._rngs: list[jax.Array] = []
    step_fn, _ = rt.compile_steps(run, runtime)  # Batch sharded, state replicated, donated.
    t0 = time.perf_counter()
    lowered = step_fn.lower(state, self.batch, self._rng(0))
    t1 = time.perf_counter()
    self.compiled = lowered.compile()
    t2 = time.perf_counter()
    self.lower_s, self.xla_compile_s = t1 - t0, t2 - t1
    self.state = state
    self.steps_done = 0
    self.losses: list[float] = []

  def _rng(self, step: int) -> jax.Array:
    """This step's key, `fold_in(base, step)` as the training loop derives it (made once)."""
    while len(self._rngs) <= step:
      self._rngs.append(jax.random.fold_in(self._base_rng, len(self._rngs)))
    return self._rngs[step]

  def run(self, steps: int) -> list[float]:
    """Applies `steps` train steps; the wall-clock seconds of each, device work included."""
    rngs = [self._rng(self.steps_done + i) for i in range(steps)]
    state, metrics = self.state, None
    times = []
    for rng in rngs:
      t0 = time.perf_counter()
      state, metrics = self.compiled(state, self.batch, rng)
      jax.block_until_ready((state, metrics))
      times.append(time.perf_counter() - t0)
    self.state, self.steps_done = state, self.steps_done + steps
    self.losses.append(float(metrics["loss"]))
    return times


def measure_training(bench: TrainBench, *, steps: int, repeats: int, warmup: int) -> dict[str, Any]:
  """Seconds per step and target tokens/s over `repeats` runs of `steps` steps, after warm-up."""
  if warmup > 0:
    bench.run(warmup)
  runs = [bench.run(steps) for _ in range(repeats)]
  per_step = [sum(times) / len(times) for times in runs]
  return {
    "train_step_s": spread(per_step),
    "train_tokens_per_s": spread([bench.tokens_per_step / s for s in per_step]),
    "fastest_step_s": min(min(times) for times in runs),
    "tokens_per_step": bench.tokens_per_step,
    "compile_s": bench.lower_s + bench.xla_compile_s,
    "compile_breakdown_s": {"trace_and_lower": bench.lower_s, "xla_compile": bench.xla_compile_s},
    "init_s": bench.init_s,
    "loss_first": bench.losses[0],
    "loss_last": bench.losses[-1],
    "xla_memory": memory_analysis_mb(bench.compiled),
    "xla_cost_flops_per_step": xla_flops(bench.compiled),
  }

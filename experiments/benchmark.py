"""Training-speed benchmark of the library's real train step, with an optional PyTorch peer.

    python -m experiments.benchmark --out runs/benchmark.json [--preset bench|paper|tiny]
        [--repeats N] [--steps N] [--dtype float32|bfloat16] [--maxout M] [--devices N]
        [--set KEY=VALUE] [--breakdown] [--peer [--peer-output like|plain]]

What it measures, on random int32 batches of the layout in `seq2seq/train.py` (full-length
sentences, all-ones masks, so every position is a training target token):

* the train step: `train_state.create_train_state` and the training loop's own jitted step
  (`rt.compile_steps`: state replicated and donated, batch split over a one-axis device mesh;
  `--devices N` forces N CPU devices to measure data-parallel scaling); compile time
  (`.lower().compile()`), then `--repeats` timed runs of `--steps` steps each after a warm-up,
  reported as seconds per step and target tokens per second (median, min, max over the runs);
* peak resident memory (`ru_maxrss`), XLA's memory analysis of the compiled step, and the
  device's own memory statistics where the backend has them;
* the machine's square-matmul throughput in float32 and bfloat16 (GFLOP/s);
* the model's matmul FLOPs per target token, counted analytically from the config (and checked
  against the `dot_general`s of the traced forward pass and train step), and the training MFU:
  achieved training FLOP/s (3x forward) over the measured float32 matmul FLOP/s.

Presets: `bench` is the speed benchmark's config (the peer's `benchmark` size),
`paper` the sizes of Bahdanau et al. (a few Adadelta steps), `tiny` the sizes of
`configs/tiny.py` (smoke test). With `--peer`, the PyTorch peer `torch_rnnsearch.py` runs in
the same session and its figures and the ratios ours / peer go under `peer` in the JSON. By
default the peer is given our deep output (`--peer-output like`: its `--maxout` set to our
`model.maxout_dim`, so `bench` runs against `--maxout 1024` and `paper` against `--size paper
--maxout 500`): the same function and FLOPs, so the ratio measures the implementations;
`--peer-output plain` keeps the peer's single output layer (the comparison described below).
Training is compared in rounds run back to back (see `compare_with_peer`). The peer's OpenMP
threads collapse when another process holds a core (seen on a shared 2-core machine: 150 tokens/s
with 2 threads against 1,670 with 1), while XLA's thread pool degrades gracefully; on a shared
machine pass `--peer-threads 1`, and read `load_average` in the JSON before trusting a ratio.

Maxout width of `bench`: the peer has no maxout; its output layer reads [s_i ; c_i ; E y_{i-1}],
1,024 features for the benchmark sizes, straight into the 8,000-word softmax. `bench` therefore
sets `maxout_dim = 1024`, which gives our W_o exactly the peer's output-layer shape (1,024 x
8,000, the dominant matmul); our deep-output layer before the maxout is extra work the peer does
not do (about 24 vs. 20 forward MFLOP per token). `--maxout 256` gives the all-256 variant.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx
from jax.extend import core as jax_core

from experiments.lib import reports
from experiments.lib.configs import REPO_ROOT, apply_overrides, parse_sets
from experiments.lib.timing import median_seconds, timed_calls
from experiments.lib.train_bench import (
  PRESETS,
  RUN_DEFAULTS,
  TrainBench,
  forward_flops_per_token,
  make_config,
  measure_training,
  random_batch,
  spread,
)
from seq2seq import settings
from seq2seq.training import objective, train_state

DEFAULT_PEER_PYTHON = Path("/tmp/peer-venv/bin/python")
DEFAULT_PEER_SCRIPT = REPO_ROOT.parent / "shared" / "perf" / "torch_rnnsearch.py"
_MB = 1024.0 * 1024.0


# ---------------------------------------------------------------------- traced FLOPs
def count_matmul_flops(jaxpr: Any) -> float:
  """Matmul FLOPs (2 per multiply-add) of every `dot_general` in a jaxpr, loops unrolled.

  Sub-jaxprs (jit, remat, custom derivatives, cond branches) are entered; a `scan` body counts
  `length` times. The independent check of `forward_flops_per_token`.
  """
  total = 0.0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      (lhs_contract, _), _ = eqn.params["dimension_numbers"]
      lhs_shape = eqn.invars[0].aval.shape
      depth = math.prod(lhs_shape[d] for d in lhs_contract)
      total += 2.0 * math.prod(eqn.outvars[0].aval.shape) * depth
      continue
    times = eqn.params["length"] if eqn.primitive.name == "scan" else 1
    for sub in jax_core.jaxprs_in_params(eqn.params):
      total += times * count_matmul_flops(sub)
  return total


def traced_flops_per_token(cfg: ml_collections.ConfigDict) -> dict[str, float]:
  """Matmul FLOPs per target token counted in the traced forward pass and train step."""
  src_vocab, tgt_vocab = cfg.data.src_vocab_size, cfg.data.tgt_vocab_size
  run = settings.validate(cfg)
  state = jax.eval_shape(
    lambda: train_state.create_train_state(run, jax.random.key(0), src_vocab, tgt_vocab)
  )
  batch = {k: jnp.asarray(v) for k, v in random_batch(cfg).items()}
  tokens = float(np.sum(random_batch(cfg)["tgt_mask"]))

  def forward(params, b):
    model = nnx.merge(state.graphdef, params)
    return model(b["src"], b["src_mask"], b["tgt_in"])

  step = functools.partial(train_state.train_step, run=run)
  fwd = jax.make_jaxpr(forward)(state.params, batch)
  trn = jax.make_jaxpr(step)(state, batch, jax.random.key(1))
  return {
    "forward": count_matmul_flops(fwd.jaxpr) / tokens,
    "train": count_matmul_flops(trn.jaxpr) / tokens,
  }


# ---------------------------------------------------------------------- measurements
def _rss_mb() -> float:
  """Peak resident set size of this process so far (Linux reports KiB, macOS bytes)."""
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return peak / _MB if sys.platform == "darwin" else peak / 1024.0


def measure_matmul(dtype: str, n: int, repeats: int = 5) -> dict[str, Any]:
  """GFLOP/s of a jitted [n, n] @ [n, n] of `dtype` factors accumulated and returned in float32
  (how the model multiplies, `seq2seq.model.layers.matmul`): median, min, max and the `repeats`
  samples."""
  keys = jax.random.split(jax.random.key(0))
  x = jax.random.normal(keys[0], (n, n), jnp.float32).astype(dtype)
  y = jax.random.normal(keys[1], (n, n), jnp.float32).astype(dtype)
  product = functools.partial(jnp.matmul, preferred_element_type=jnp.float32)
  matmul = jax.jit(product).lower(x, y).compile()
  jax.block_until_ready(matmul(x, y))
  jax.block_until_ready(matmul(x, y))
  rates = [2.0 * n**3 / t / 1e9 for t in timed_calls(lambda: matmul(x, y), repeats)]
  return {**spread(rates), "samples": rates, "n": n}


def _device_memory_stats() -> dict[str, Any] | None:
  """`jax.Device.memory_stats()` of the first device (None on backends without it, e.g. CPU)."""
  try:
    stats = jax.devices()[0].memory_stats()
  except Exception:
    return None
  if not stats:
    return None
  wanted = ("bytes_in_use", "peak_bytes_in_use", "bytes_limit", "largest_alloc_size")
  return {k.replace("bytes", "mb"): stats[k] / _MB for k in wanted if k in stats}


def measure_breakdown(bench: TrainBench, *, repeats: int) -> dict[str, float]:
  """Where a training step's forward and backward time goes, in ms (medians): the whole loss
  gradient (`objective.loss_fn`), the encoder alone (gradient of the sum of its outputs), and the
  deep output with the loss on inputs of the decoder's shapes (gradient with respect to parameters
  and inputs, as in the real backward pass). `decoder_scan_ms` is what remains: the decoder's
  recurrence with its attention, and the embeddings. The optimiser update is the rest of a
  step (`train_step_s` minus `loss_grad_ms`)."""
  state, batch, cfg = bench.state, bench.batch, bench.cfg
  graphdef = state.graphdef
  model = lambda params: nnx.merge(graphdef, params)

  def encoder_sum(params):
    annotations, fwd_last, bwd_first = model(params).encoder(batch["src"], batch["src_mask"])
    return jnp.sum(annotations) + jnp.sum(fwd_last) + jnp.sum(bwd_first)

  def readout_loss(params, s, e, c):
    logits = model(params)._readout(s, e, c)
    return objective.cross_entropy(logits, batch["tgt_out"], batch["tgt_mask"])[0]

  b, t = batch["tgt_in"].shape
  rng = np.random.default_rng(0)
  inputs = [
    jnp.asarray(rng.normal(size=(b, t, n)), jnp.float32)
    for n in (cfg.model.dec_hidden, cfg.model.emb_dim, 2 * cfg.model.enc_hidden)
  ]
  terms = objective.Objective.from_config(cfg)
  full = jax.jit(jax.grad(lambda p: objective.loss_fn(p, state, batch, None, terms)[0]))
  encoder = jax.jit(jax.grad(encoder_sum))
  readout = jax.jit(jax.grad(readout_loss, argnums=(0, 1, 2, 3)))
  out = {
    "loss_grad_ms": 1e3 * median_seconds(full, (state.params,), repeats),
    "encoder_ms": 1e3 * median_seconds(encoder, (state.params,), repeats),
    "readout_and_loss_ms": 1e3 * median_seconds(readout, (state.params, *inputs), repeats),
  }
  out["decoder_scan_ms"] = out["loss_grad_ms"] - out["encoder_ms"] - out["readout_and_loss_ms"]
  return out


def measure_decoding(bench: TrainBench, *, repeats: int, shortlist_size: int = 0) -> dict[str, Any]:
  """Greedy and beam-10 decoding of `bench.batch["src"]` with the trained `bench.state`, and
  with `shortlist_size` greedy and beam 10 over a shortlist of that many target words too (the
  specials, then a fixed random draw of the others: what `decode.shortlist` hands the search,
  whose cost depends on the size, not on which words).

  `seq2seq.decoding.decode.jit_decode` with max_len = the source length (30 on `bench`, the peer's
  fixed 30 steps). Decoding stops early once every hypothesis has emitted EOS, so the mean output
  length is recorded next to each figure: with it equal to max_len, both sides did the same work.
  Sentences/s are {median, min, max} over `repeats` timed calls after the compiling one.
  """
  from seq2seq.decoding import decode

  src, mask = bench.batch["src"], bench.batch["src_mask"]
  batch_size, max_len = int(src.shape[0]), int(src.shape[1])
  out: dict[str, Any] = {"available": True, "batch_size": batch_size, "max_len": max_len}
  runs = [("greedy", 1, None), ("beam10", 10, None)]
  if shortlist_size:
    vocab = int(bench.cfg.data.tgt_vocab_size)
    words = np.random.default_rng(0).permutation(np.arange(4, vocab))[: shortlist_size - 4]
    ids = jnp.asarray(np.concatenate([np.arange(4), np.sort(words)]), jnp.int32)
    runs += [("greedy_shortlist", 1, ids), ("beam10_shortlist", 10, ids)]
    out["shortlist_size"] = int(ids.shape[0])
  for name, beam, output_ids in runs:

    def run(beam=beam, output_ids=output_ids):
      return decode.jit_decode(
        bench.state.graphdef,
        bench.state.params,
        src,
        mask,
        beam_size=beam,
        max_len=max_len,
        output_ids=output_ids,
      )

    t0 = time.perf_counter()
    result = jax.block_until_ready(run())
    out[f"{name}_compile_s"] = time.perf_counter() - t0
    rates = [batch_size / t for t in timed_calls(run, max(repeats, 1))]
    out[f"{name}_sentences_per_s"] = spread(rates)
    out[f"{name}_mean_output_length"] = float(np.mean(np.asarray(result.lengths)))
  greedy = out["greedy_sentences_per_s"]["median"]
  for name in [n for n, _, _ in runs[1:]]:
    out[f"{name}_cost_per_sentence_vs_greedy"] = greedy / out[f"{name}_sentences_per_s"]["median"]
  return out


# ---------------------------------------------------------------------- the PyTorch peer
def _run_peer_mode(
  python: Path,
  script: Path,
  mode: str,
  size: str,
  steps: int,
  threads: int,
  timeout_s: float,
  maxout: int = 0,
  dtype: str = "float32",
) -> dict[str, Any]:
  """One run of the peer script (with the paper's deep output of width `maxout`, 0: its plain
  output layer; in `dtype`, bfloat16 under PyTorch's autocast); its JSON line, or an `error`
  entry."""
  cmd = [str(python), str(script), mode, "--size", size, "--steps", str(steps)]
  cmd += ["--threads", str(threads), "--maxout", str(maxout), "--dtype", dtype]
  try:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
  except subprocess.TimeoutExpired:
    return {"error": f"timed out after {timeout_s:.0f} s", "command": " ".join(cmd)}
  for line in reversed(proc.stdout.strip().splitlines()):
    try:
      result = json.loads(line)
    except json.JSONDecodeError:
      continue
    if isinstance(result, dict):
      result["command"] = " ".join(cmd)
      return result
  return {"error": f"exit {proc.returncode}, no JSON line", "stderr": proc.stderr[-2000:]}


def compare_with_peer(
  bench: TrainBench,
  preset: str,
  *,
  rounds: int,
  steps: int,
  peer_steps: int,
  python: Path,
  script: Path,
  threads: int,
  maxout: int = 0,
  timeout_s: float = 1800.0,
) -> dict[str, Any]:
  """The peer's training and greedy-decoding figures next to ours, or a note saying why not.
  `maxout` > 0 gives the peer the paper's deep output of that width (like for like when it is
  our `model.maxout_dim`); 0 keeps its plain output layer.

  The machine's load drifts, so training is compared in `rounds` pairs run back to back: one of
  our timed runs (`steps` steps), then one peer run (`peer_steps` timed steps after its own two
  warm-up steps). The ratio is the median of the per-round ratios of the runs' mean rates. The
  ratio of the fastest single steps of both sides over all rounds is kept too: under contention
  it is the better estimate of what each side does on a quiet machine. The peer runs in the
  dtype of our step (`bench.cfg.model.dtype`).
  """
  size = RUN_DEFAULTS[preset]["peer_size"]
  if size is None:
    return {"skipped": f"the peer has no size matching preset {preset!r}"}
  if not python.exists():
    return {"skipped": f"peer interpreter {python} does not exist"}
  if not script.exists():
    return {"skipped": f"peer script {script} does not exist"}
  how = dict(maxout=maxout, dtype=bench.cfg.model.dtype)
  pairs = []
  for _ in range(rounds):
    times = bench.run(steps)
    ours = bench.tokens_per_step * len(times) / sum(times)
    theirs = _run_peer_mode(python, script, "train", size, peer_steps, threads, timeout_s, **how)
    pairs.append(
      {
        "ours_tokens_per_s": ours,
        "ours_best_step_tokens_per_s": bench.tokens_per_step / min(times),
        "peer": theirs,
      }
    )
  decode = _run_peer_mode(python, script, "decode", size, peer_steps, threads, timeout_s, **how)
  return {
    "size": size,
    "dtype": how["dtype"],
    "threads": threads,
    "maxout": maxout,
    "like_for_like": maxout > 0,
    "train_rounds": pairs,
    "decode": decode,
  }


def peer_ratios(results: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
  """Ours / peer: training tokens/s and GFLOP/s (each side with its own FLOP count), greedy."""
  ratios: dict[str, Any] = {}
  # The ceilings: the most this step's matmuls allow at the rate measured here in its dtype.
  flop_rate = results["matmul_gflops"][results["dtype"]] * 1e9
  paired = [
    (p["ours_tokens_per_s"], p["peer"]) for p in peer["train_rounds"] if "tokens_per_s" in p["peer"]
  ]
  if paired:
    tok = [ours / theirs["tokens_per_s"] for ours, theirs in paired]
    ratios["train_tokens_per_s"] = spread(tok)
    peer_fwd = statistics.median(t["fwd_mflop_per_token"] * 1e6 for _, t in paired)
    ratios["train_gflops"] = spread([r * results["flops_per_token"] / peer_fwd for r in tok])
    ours_best = max(p["ours_best_step_tokens_per_s"] for p in peer["train_rounds"])
    peer_best = max(t["max_tokens_per_s"] for _, t in paired)
    ratios["train_tokens_per_s_fastest_steps"] = ours_best / peer_best
    # Over the peer's tokens/s, the ceiling bounds ours / peer for any implementation whose
    # matmuls run no faster (see `summary`).
    peer_tps = statistics.median(t["tokens_per_s"] for _, t in paired)
    ratios["train_tokens_per_s_ceiling"] = flop_rate / results["train_flops_per_token"] / peer_tps
    peer["train"] = {
      "tokens_per_s": spread([t["tokens_per_s"] for _, t in paired]),
      "gflops": spread([t["gflops"] for _, t in paired]),
      "fwd_flops_per_token": peer_fwd,
      "fastest_step_tokens_per_s": peer_best,
      "ours_tokens_per_s_in_rounds": spread([o for o, _ in paired]),
      "ours_fastest_step_tokens_per_s_in_rounds": ours_best,
    }
  greedy = results.get("decode", {}).get("greedy_sentences_per_s")
  decode_peer = peer.get("decode", {})
  if greedy is not None and "sentences_per_s" in decode_peer:
    ratios["greedy_sentences_per_s"] = greedy["median"] / decode_peer["sentences_per_s"]
    # Greedy decoding multiplies as the forward pass does, one target word at a time.
    per_sentence = results["flops_per_token"] * results["batch"]["tgt_len"]
    ceiling = flop_rate / per_sentence
    ratios["greedy_sentences_per_s_ceiling"] = ceiling / decode_peer["sentences_per_s"]
  else:
    ratios["greedy_sentences_per_s"] = None
  return ratios


# ---------------------------------------------------------------------- environment
def device_info() -> dict[str, Any]:
  """The jax devices and the host they run on."""
  devices = jax.devices()
  return {
    "backend": jax.default_backend(),
    "count": len(devices),
    "devices": [repr(d) for d in devices],
    "device_kind": devices[0].device_kind,
    "host_cpus": os.cpu_count(),
    "host": platform.platform(),
    "processor": platform.processor() or platform.machine(),
    **reports.cpu_info(),
  }


# ---------------------------------------------------------------------- driver
def benchmark(args: argparse.Namespace) -> dict[str, Any]:
  """Runs every measurement the arguments ask for; the JSON-ready results."""
  run = RUN_DEFAULTS[args.preset]
  repeats = args.repeats if args.repeats is not None else run["repeats"]
  steps = args.steps if args.steps is not None else run["steps"]
  warmup = args.warmup if args.warmup is not None else run["warmup"]
  matmul_n = args.matmul_size if args.matmul_size is not None else run["matmul_n"]
  load_start = reports.load_average()
  cfg = apply_overrides(make_config(args.preset, args.dtype, args.maxout), args.sets)
  length = cfg.data.max_len
  flops = forward_flops_per_token(cfg, length, length)
  traced = traced_flops_per_token(cfg)

  # The matmul rate is measured before and after training and pooled, since the load drifts.
  dtypes = ("float32", "bfloat16")
  matmul_before = {dt: measure_matmul(dt, matmul_n) for dt in dtypes}
  rss_baseline = _rss_mb()
  bench = TrainBench(cfg)
  training = measure_training(bench, steps=steps, repeats=repeats, warmup=warmup)
  peak_rss = _rss_mb()
  device_memory = _device_memory_stats()
  decode = measure_decoding(bench, repeats=repeats, shortlist_size=args.shortlist_size)
  breakdown = measure_breakdown(bench, repeats=repeats) if args.breakdown else None
  matmul_after = {dt: measure_matmul(dt, matmul_n) for dt in dtypes}
  matmul = {
    dt: {
      **spread(matmul_before[dt]["samples"] + matmul_after[dt]["samples"]),
      "before_training": matmul_before[dt]["median"],
      "after_training": matmul_after[dt]["median"],
      "n": matmul_n,
    }
    for dt in dtypes
  }
  train_flops_per_token = 3.0 * flops["total"]
  achieved = training["train_tokens_per_s"]["median"] * train_flops_per_token
  results: dict[str, Any] = {
    "preset": args.preset,
    "dtype": args.dtype,
    "sets": args.set,
    "batch": {
      "batch_size": cfg.data.batch_size,
      "per_device": cfg.data.batch_size // jax.device_count(),
      "src_len": length,
      "tgt_len": length,
    },
    "timing": {"repeats": repeats, "steps_per_repeat": steps, "warmup_steps": warmup},
    **training,
    "peak_rss_mb": peak_rss,
    "rss_before_training_mb": rss_baseline,
    "jax_memory_stats": device_memory,
    "matmul_gflops": {dt: m["median"] for dt, m in matmul.items()},
    "matmul": matmul,
    "flops_per_token": flops["total"],
    "flops_per_token_breakdown": flops,
    "train_flops_per_token": train_flops_per_token,
    "traced_flops_per_token": traced,
    "train_gflops": achieved / 1e9,
    "train_mfu": achieved / (matmul["float32"]["median"] * 1e9),
    "train_mfu_vs_compute_dtype": achieved / (matmul[args.dtype]["median"] * 1e9),
    "decode": decode,
    "breakdown_ms": breakdown,
    "greedy_sentences_per_s": decode["greedy_sentences_per_s"]["median"],
    "beam10_sentences_per_s": decode["beam10_sentences_per_s"]["median"],
    "config": cfg.to_dict(),
    "versions": reports.versions(),
    "device": device_info(),
    "load_average": {"start": load_start, "end_of_training": reports.load_average()},
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
  }
  if args.peer:
    peer_steps = args.peer_steps if args.peer_steps is not None else max(3, steps)
    peer = compare_with_peer(
      bench,
      args.preset,
      rounds=args.peer_rounds,
      steps=steps,
      peer_steps=peer_steps,
      python=Path(args.peer_python),
      script=Path(args.peer_script),
      threads=args.peer_threads,
      maxout=cfg.model.maxout_dim if args.peer_output == "like" else 0,
    )
    if "skipped" not in peer:
      peer["ratios"] = peer_ratios(results, peer)
    results["peer"] = peer
    results["load_average"]["end_of_peer"] = reports.load_average()
  return results


def summary(results: dict[str, Any]) -> str:
  """A few human-readable lines of the headline figures."""
  step, tok = results["train_step_s"], results["train_tokens_per_s"]
  mm = results["matmul_gflops"]
  b = results["batch"]
  lines = [
    f"preset {results['preset']} ({results['dtype']}), batch {b['batch_size']} x "
    f"{b['src_len']}/{b['tgt_len']}, {results['device']['backend']} "
    f"x{results['device']['count']}",
    f"  train step   {step['median'] * 1e3:9.1f} ms  (min {step['min'] * 1e3:.1f}, "
    f"max {step['max'] * 1e3:.1f})",
    f"  tokens/s     {tok['median']:9.0f}     (min {tok['min']:.0f}, max {tok['max']:.0f}; "
    f"fastest step {results['tokens_per_step'] / results['fastest_step_s']:.0f})",
    f"  compile      {results['compile_s']:9.2f} s",
    f"  host load    {results['load_average']['start']} at start (1/5/15 min averages)",
    f"  peak RSS     {results['peak_rss_mb']:9.0f} MB",
    f"  matmul       {mm['float32']:9.1f} GFLOP/s float32, {mm['bfloat16']:.1f} bfloat16",
    f"  model        {results['flops_per_token'] / 1e6:9.2f} fwd MFLOP/token, training "
    f"{results['train_gflops']:.1f} GFLOP/s, MFU {results['train_mfu']:.3f} of the float32 "
    f"rate, {results['train_mfu_vs_compute_dtype']:.3f} of the {results['dtype']} one",
    f"  decoding     greedy {results['greedy_sentences_per_s']:.1f} sentences/s, beam 10 "
    f"{results['beam10_sentences_per_s']:.1f} ("
    f"{results['decode']['beam10_cost_per_sentence_vs_greedy']:.1f}x greedy's cost per sentence)",
  ]
  if "shortlist_size" in results["decode"]:
    d = results["decode"]
    lines.append(
      f"  shortlisted  over {d['shortlist_size']} words: greedy "
      f"{d['greedy_shortlist_sentences_per_s']['median']:.1f} sentences/s, beam 10 "
      f"{d['beam10_shortlist_sentences_per_s']['median']:.1f} "
      f"({d['beam10_shortlist_cost_per_sentence_vs_greedy']:.1f}x greedy's cost per sentence)"
    )
  parts = results.get("breakdown_ms")
  if parts:
    lines.append(
      f"  fwd+bwd ms   {parts['loss_grad_ms']:.0f} = encoder {parts['encoder_ms']:.0f} + decoder "
      f"scan {parts['decoder_scan_ms']:.0f} + output and loss {parts['readout_and_loss_ms']:.0f}"
    )
  peer = results.get("peer")
  if peer is not None and "skipped" in peer:
    lines.append(f"  peer         skipped: {peer['skipped']}")
  elif peer is not None:
    ratios = peer["ratios"]
    if "train" in peer:
      tr = peer["train"]
      lines.append(
        f"  peer train   {tr['tokens_per_s']['median']:9.0f} tokens/s "
        f"({tr['gflops']['median']:.1f} GFLOP/s) vs ours "
        f"{tr['ours_tokens_per_s_in_rounds']['median']:.0f} in the same rounds"
      )
      lines.append(
        f"  ours/peer    {ratios['train_tokens_per_s']['median']:9.2f} tokens/s, "
        f"{ratios['train_gflops']['median']:.2f} GFLOP/s (median of "
        f"{len(peer['train_rounds'])} paired rounds); fastest steps "
        f"{tr['ours_fastest_step_tokens_per_s_in_rounds']:.0f} vs "
        f"{tr['fastest_step_tokens_per_s']:.0f} tokens/s, "
        f"{ratios['train_tokens_per_s_fastest_steps']:.2f}"
      )
      lines.append(
        f"  ceiling      {ratios['train_tokens_per_s_ceiling']:9.2f} x the peer's tokens/s: every "
        f"matmul at the {results['dtype']} rate above and nothing else taking time"
      )
    else:
      errors = {p["peer"].get("error") for p in peer["train_rounds"]}
      lines.append(f"  peer train   failed: {'; '.join(str(e) for e in errors)}")
    de = peer["decode"]
    if "sentences_per_s" in de:
      lines.append(
        f"  peer greedy  {de['sentences_per_s']:9.1f} sentences/s; ceiling "
        f"{ratios['greedy_sentences_per_s_ceiling']:.2f} x that"
      )
    else:
      lines.append(f"  peer greedy  failed: {de.get('error')}")
  if "note" in results["decode"]:
    lines.append(f"  decoding     {results['decode']['note']}")
  return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--out", required=True, help="where to write the JSON results")
  p.add_argument("--preset", default="bench", choices=PRESETS)
  p.add_argument("--repeats", type=int, default=None, help="timed runs (default per preset)")
  p.add_argument("--steps", type=int, default=None, help="train steps per timed run")
  p.add_argument("--warmup", type=int, default=None, help="untimed steps after compiling")
  p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  p.add_argument("--maxout", type=int, default=None, help="override model.maxout_dim")
  p.add_argument("--matmul-size", type=int, default=None, help="n of the n x n matmul")
  p.add_argument(
    "--breakdown", action="store_true", help="also time the encoder, scan and output separately"
  )
  p.add_argument(
    "--set", action="append", default=[], metavar="KEY=VALUE", help="config override (levers)"
  )
  p.add_argument(
    "--devices",
    type=int,
    default=None,
    help="train data-parallel over N forced CPU devices (XLA's host device count)",
  )
  p.add_argument(
    "--shortlist-size",
    type=int,
    default=0,
    help="also time greedy and beam 10 over a shortlist of this many target words (0: not)",
  )
  p.add_argument("--peer", action="store_true", help="also run the PyTorch peer")
  p.add_argument("--peer-python", default=str(DEFAULT_PEER_PYTHON))
  p.add_argument("--peer-script", default=str(DEFAULT_PEER_SCRIPT))
  p.add_argument("--peer-rounds", type=int, default=3, help="paired ours/peer training runs")
  p.add_argument("--peer-steps", type=int, default=None, help="the peer's timed steps per run")
  p.add_argument("--peer-threads", type=int, default=os.cpu_count() or 1)
  p.add_argument(
    "--peer-output",
    default="like",
    choices=("like", "plain"),
    help="like: the peer gets our deep output (--maxout = model.maxout_dim, the same function "
    "and FLOPs); plain: its own single output layer (the older, unlike comparison)",
  )
  args = p.parse_args(argv)
  for name in (
    "repeats",
    "steps",
    "matmul_size",
    "maxout",
    "devices",
    "peer_rounds",
    "peer_steps",
    "peer_threads",
  ):
    value = getattr(args, name)
    if value is not None and value < 1:
      p.error(f"--{name.replace('_', '-')} must be at least 1")
  if args.shortlist_size and args.shortlist_size <= 4:
    p.error("--shortlist-size must exceed the 4 special ids (or be 0)")
  if args.warmup is not None and args.warmup < 0:
    p.error("--warmup must be non-negative")
  args.sets = parse_sets(args.set)
  return args


def force_cpu_devices(count: int) -> None:
  """Makes the CPU backend show `count` devices. XLA reads the flag when the backend starts, so
  this must run before the first JAX computation of the process."""
  flag = f"--xla_force_host_platform_device_count={count}"
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
  if jax.default_backend() != "cpu" or jax.device_count() != count:
    raise SystemExit(
      f"--devices {count}: JAX shows {jax.device_count()} {jax.default_backend()} device(s); "
      "forced devices need the CPU backend started by this process (JAX_PLATFORMS=cpu)"
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  args = parse_args(argv)
  if args.devices is not None:
    force_cpu_devices(args.devices)
  results = benchmark(args)
  out = Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(results, indent=2, default=_json_default) + "\n")
  print(summary(results))
  print(f"wrote {out}")
  return results


def _json_default(value: Any) -> Any:
  """numpy scalars as Python numbers; anything else json does not know as its string."""
  if isinstance(value, np.generic):
    return value.item()
  return str(value)


if __name__ == "__main__":
  main()

"""Several seeds of one configuration trained together: one compiled step, vmapped over seeds.

`train_together(config, seeds, workdirs)` stacks the G seeds' train states along a leading axis
and runs `jax.vmap(train.train_step)` over it, so every update of all G models is one call of
one compiled program: the small matmuls of the recurrences become G-times larger batched ones,
which pays on a CPU (fewer, larger operations) and more on an accelerator.

What the seeds share and what they do not:

* each seed `s` initialises its parameters and draws its dropout masks exactly as a lone run of
  `config` with `seed=s` does (`train.initial_state`, `fold_in(key(s), 1)`);
* all of them read the same batches, in the data order of the FIRST seed (one batch stream
  feeds the vmapped step). A lone run of seed `s` shuffles with `s`, so a grouped seed is not
  bit-identical to a lone one; seeds here measure initialisation and dropout variance.

Every seed gets an ordinary workdir: its `config.json` (with its own `seed`), `vocab/` (a copy of
the first seed's), Orbax `checkpoints/` (one per seed, the shared iterator state inside),
`best/` (its best greedy validation BLEU), `metrics.jsonl` and TensorBoard events, and
`eval/{valid,test}/` from `train.evaluate_splits` at the end, so each can be inspected,
evaluated (`main.py --mode=eval`) or continued alone like any other run. Rerunning
`train_together` with the same arguments resumes the group from the latest step checkpointed
in every workdir. Train lines carry `seeds_together` (G); their `tokens_per_s` counts one
model's target tokens (the group trains G times as many).
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from seq2seq import checkpoints, input_pipeline, summary, train


def seed_configs(config: ml_collections.ConfigDict, seeds: Sequence[int]):
  """`config` once per seed, identical but for `seed`."""
  out = []
  for seed in seeds:
    c = config.copy_and_resolve_references()
    c.seed = int(seed)
    out.append(c)
  return out


def stack(states: Sequence[train.TrainState]) -> train.TrainState:
  """Train states of one config -> one state whose arrays have a new leading seed axis.

  The static parts (model graph, optimiser) are the first state's: they are the same model.
  """
  leaves = [jax.tree.leaves(s) for s in states]
  stacked = [jnp.stack(xs) for xs in zip(*leaves, strict=True)]
  return jax.tree.unflatten(jax.tree.structure(states[0]), stacked)


def unstack(state: train.TrainState, index: int) -> train.TrainState:
  """Seed `index` of a stacked state."""
  return jax.tree.map(lambda x: x[index], state)


def common_step(ckpts: Sequence[checkpoints.Checkpointer]) -> int | None:
  """The latest step every checkpointer holds (None if some hold none in common)."""
  steps = [set(c.manager.all_steps()) for c in ckpts]
  shared = set.intersection(*steps) if steps else set()
  return max(shared) if shared else None


def _compile(config: ml_collections.ConfigDict, runtime: train.Runtime):
  """The vmapped train and eval steps: state [G, ...] replicated, batch shared and sharded."""
  rep, bat = runtime.replicated, runtime.batch
  step = functools.partial(train.train_step, config=config)
  train_fn = jax.jit(
    jax.vmap(step, in_axes=(0, None, 0)),
    in_shardings=(rep, bat, rep),
    out_shardings=(rep, rep),
    donate_argnums=0,
  )
  eval_fn = jax.jit(jax.vmap(train.eval_step, in_axes=(0, None)), in_shardings=(rep, bat))
  return train_fn, eval_fn


def train_together(
  config: ml_collections.ConfigDict, seeds: Sequence[int], workdirs: Sequence[str | Path]
) -> list[dict[str, Any]]:
  """Trains `config` for every seed in `seeds` together, then evaluates each seed's workdir.

  Returns each seed's `train.evaluate_splits` results ({} without `train.final_eval`), or
  [{"preempted_at_step": N}] * G when SIGTERM/SIGINT stopped it (checkpoints saved; rerun).
  """
  if len(seeds) != len(workdirs) or len(set(seeds)) != len(seeds) or not seeds:
    raise ValueError(f"need distinct seeds, one workdir each; got {seeds} and {workdirs}")
  if jax.process_count() > 1:
    raise ValueError("seeds are trained together in one process; run groups per host")
  group = len(seeds)
  configs = seed_configs(config, seeds)
  workdirs = [Path(w) for w in workdirs]
  for cfg, wd in zip(configs, workdirs, strict=True):
    wd.mkdir(parents=True, exist_ok=True)
    checkpoints.check_and_save_config(wd, cfg)
  runtime = train.Runtime()
  runtime.check_batch_size(config.data.batch_size)
  data = train.load_data(configs[0], workdirs[0])
  for wd in workdirs[1:]:  # One vocabulary for all: the same ids in every workdir.
    if not (wd / "vocab").exists():
      shutil.copytree(workdirs[0] / "vocab", wd / "vocab")
  tcfg, sizes = config.train, (data.src_tokenizer.size, data.tgt_tokenizer.size)
  writers = [summary.MetricWriter(wd) for wd in workdirs]
  ckpts = [checkpoints.Checkpointer(wd, cfg) for wd, cfg in zip(workdirs, configs, strict=True)]
  bests = [
    checkpoints.Checkpointer(wd, cfg, subdir="best", max_to_keep=1)
    for wd, cfg in zip(workdirs, configs, strict=True)
  ]
  best_bleu = [
    max((r["bleu"] for r in summary.read_metrics(wd) if "bleu" in r), default=-1.0)
    for wd in workdirs
  ]
  train_fn, eval_fn = _compile(config, runtime)
  fresh = [train.initial_state(cfg, *sizes, runtime) for cfg in configs]
  it = input_pipeline.train_iterator(data, configs[0])
  elapsed_before, resume = 0.0, common_step(ckpts)
  if resume is not None:
    restored = [c.restore(s, resume) for c, s in zip(ckpts, fresh, strict=True)]
    fresh = [s for s, _ in restored]
    it.set_state(restored[0][1]["iterator"])
    elapsed_before = restored[0][1]["elapsed_s"]
    logging.info("group of %d seeds resumed from step %d", group, resume)
  state = jax.device_put(stack(fresh), runtime.replicated)
  start = int(resume or 0)
  for w in writers:
    w.truncate_after(start)
  rngs = jnp.stack([jax.random.fold_in(jax.random.key(c.seed), 1) for c in configs])
  fold = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(0, None)))
  budget_s, t_begin = 60.0 * tcfg.max_minutes, time.perf_counter()
  window_tokens, tick, skipped = 0.0, t_begin, np.zeros(group, np.int64)

  def elapsed() -> float:
    return elapsed_before + time.perf_counter() - t_begin

  def save_all() -> None:
    loop = {"iterator": it.get_state(), "elapsed_s": elapsed()}
    for k, c in enumerate(ckpts):
      c.save(unstack(state, k), loop)

  preemption = train.PreemptionHandler()
  for step in range(start, tcfg.num_steps):
    host_batch = next(it)
    state, metrics = train_fn(state, runtime.put_batch(host_batch), fold(rngs, step))
    window_tokens = window_tokens + metrics["tokens"][0]
    done = step + 1
    finite = np.asarray(metrics["finite"])
    skipped += ~finite
    if not finite.all():
      train.handle_nonfinite(workdirs[int(np.argmin(finite))], done, host_batch, config, None)
    if preemption.requested:
      save_all()
      preemption.restore()
      return [{"preempted_at_step": done}] * group
    last = done == tcfg.num_steps or (budget_s > 0 and elapsed() >= budget_s)
    if done % tcfg.log_every == 0 or last:
      m = jax.device_get(metrics)
      rate = float(window_tokens) / max(time.perf_counter() - tick, 1e-9)
      for k, w in enumerate(writers):
        scalars = {key: float(m[key][k]) for key in ("loss", "learning_rate", "grad_norm")}
        scalars |= {"tokens_per_s": rate, "skipped_updates": int(skipped[k])}
        scalars |= {key: float(m[key][k]) for key in train.EXTRA_METRICS if key in m}
        w.write(done, "train", scalars | {"elapsed_s": elapsed(), "seeds_together": group})
      losses = np.round(m["loss"], 4).tolist()
      logging.info(
        "step %d/%d  losses %s  tokens/s per seed %.0f", done, tcfg.num_steps, losses, rate
      )
    if done % tcfg.eval_every == 0 or last:
      batches = input_pipeline.eval_batches(data, "valid", config)
      sums = [jax.device_get(eval_fn(state, runtime.put_batch(b))) for b in batches]
      losses = sum(s["loss_sum"] for s in sums) / np.maximum(sum(s["tokens"] for s in sums), 1.0)
      for k, (w, cfg) in enumerate(zip(writers, configs, strict=True)):
        scalars = {"loss": float(losses[k]), "perplexity": float(np.exp(min(losses[k], 50.0)))}
        scalars["elapsed_s"] = elapsed()
        if tcfg.valid_bleu:
          seed_state = unstack(state, k)
          scalars["bleu"] = train.valid_bleu(seed_state, data, cfg)
          if scalars["bleu"] >= best_bleu[k]:
            best_bleu[k] = scalars["bleu"]
            bests[k].save(seed_state, None)
        w.write(done, "valid", scalars)
    if done % tcfg.checkpoint_every == 0 or last:
      save_all()
    if any(done % n == 0 for n in (tcfg.log_every, tcfg.eval_every, tcfg.checkpoint_every)):
      window_tokens, tick = 0.0, time.perf_counter()  # Windows time training steps alone.
    if last:
      break
  if common_step(ckpts) != int(jax.device_get(state.step)[0]):
    save_all()
  preemption.restore()
  for c in (*ckpts, *bests):
    c.close()
  results = []
  for k, (cfg, wd) in enumerate(zip(configs, workdirs, strict=True)):
    final = {}
    if tcfg.final_eval:
      final = train.evaluate_splits(cfg, wd, data=data, runtime=runtime, writer=writers[k])
    results.append(final)
    writers[k].close()
  return results

"""The training loop, written once for one run or for several seeds trained together.

`train_members(configs, workdirs, together=...)` trains G "members", each an ordinary run with
its own config and workdir: one member is a plain run (`train_and_evaluate`, what `main.py`
does), G > 1 members are seeds of one config whose train states are stacked along a leading axis
and updated by one vmapped step (`seed_group.train_together`). The loop around the step is the
same for both: resume from the latest checkpoint every member holds, the data iterator's state
and the wall time spent so far inside each checkpoint, the wall-clock budget
(`train.max_minutes`), SIGTERM/SIGINT preemption, non-finite steps (`train.nonfinite`), train
lines every `train.log_every` steps, validation loss, perplexity and greedy BLEU every
`train.eval_every` (keeping each member's best checkpoint in WORKDIR/best), checkpoints every
`train.checkpoint_every`, and the final evaluation of every member (`eval_run.evaluate_splits`).

The step is passed in (`train_step`, default `steps.train_step` with the config): tests hand
the loop a step that misbehaves on purpose rather than the library carrying test hooks.
"""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from seq2seq import (
  checkpoints,
  console,
  copying,
  eval_run,
  input_pipeline,
  models,
  objective,
  settings,
  steps,
  summary,
)
from seq2seq import lexicon as lexicon_lib
from seq2seq import runtime as rt


class NonFiniteError(ValueError):
  """Training met a non-finite loss or gradient with `train.nonfinite="stop"`."""


def handle_nonfinite(workdir: Path, step: int, batch, config, last_checkpoint) -> None:
  """Records the offending batch (WORKDIR/nonfinite/step_N.json), then stops or carries on."""
  out = workdir / "nonfinite"
  out.mkdir(exist_ok=True)
  ids = [int(i) for i in batch["index"] if i >= 0]
  path = out / f"step_{step}_process_{jax.process_index()}.json"
  path.write_text(json.dumps({"step": step, "train_example_indices": ids}) + "\n")
  if config.train.nonfinite == "stop":
    raise NonFiniteError(
      f"non-finite loss or gradient at step {step}; the update was not applied, the last good "
      f"checkpoint (step {last_checkpoint}) is kept, the batch's example ids are in {path}"
    )
  logging.warning("non-finite loss or gradient at step %d: update skipped (ids in %s)", step, path)


class PreemptionHandler:
  """Turns SIGTERM/SIGINT into a flag the loop checks after each step (then saves and exits)."""

  def __init__(self):
    self.requested: str | None = None
    self._previous = {}
    if threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._previous[sig] = signal.signal(sig, self._handle)

  def _handle(self, signum, frame):
    self.requested = signal.Signals(signum).name

  def restore(self) -> None:
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous = {}


def stack(states: Sequence[steps.TrainState]) -> steps.TrainState:
  """Train states of one config -> one state whose arrays have a new leading member axis.

  The static parts (model graph, optimiser) are the first state's: they are the same model.
  """
  leaves = [jax.tree.leaves(s) for s in states]
  stacked = [jnp.stack(xs) for xs in zip(*leaves, strict=True)]
  return jax.tree.unflatten(jax.tree.structure(states[0]), stacked)


def unstack(state: steps.TrainState, index: int) -> steps.TrainState:
  """Member `index` of a stacked state."""
  return jax.tree.map(lambda x: x[index], state)


def held_bleu(workdir: Path, best_step: int | None) -> float:
  """The validation BLEU of the best checkpoint a workdir holds (-1 without one): what a resumed
  run's later evaluations must beat. Not the best BLEU in metrics.jsonl: that step's weights may
  be gone (a best checkpoint replaces the previous one, and one saved past the resumed step is
  discarded)."""
  rows = summary.read_metrics(workdir)
  held = [
    r["bleu"] for r in rows if r["split"] == "valid" and r["step"] == best_step and "bleu" in r
  ]
  return held[-1] if held else -1.0


def common_step(ckpts: Sequence[checkpoints.Checkpointer]) -> int | None:
  """The latest step every checkpointer holds (None if some hold none in common)."""
  steps_held = [set(c.manager.all_steps()) for c in ckpts]
  shared = set.intersection(*steps_held) if steps_held else set()
  return max(shared) if shared else None


class Members:
  """The runs one loop trains and how their state is laid out: one plain state, or (together)
  one state stacked over G members, whose step metrics then carry a leading axis [G]."""

  def __init__(self, configs: Sequence[ml_collections.ConfigDict], workdirs, together: bool):
    if len(configs) != len(workdirs) or not configs:
      raise ValueError(f"need one workdir per config; got {len(configs)} and {len(workdirs)}")
    if len(configs) > 1 and not together:
      raise ValueError("several members train only together (stacked)")
    if together and jax.process_count() > 1:
      raise ValueError("seeds are trained together in one process; run groups per host")
    for config in configs:
      settings.validate(config)
    self.configs = list(configs)
    self.workdirs = [Path(w) for w in workdirs]
    self.together = together

  def __len__(self) -> int:
    return len(self.configs)

  def state(self, state: steps.TrainState, k: int) -> steps.TrainState:
    """Member k's own train state."""
    return unstack(state, k) if self.together else state

  def value(self, x: Any, k: int) -> Any:
    """Member k's entry of a step metric or of a vmapped evaluation."""
    return np.asarray(x)[k] if self.together else x

  def combine(self, states: Sequence[steps.TrainState], runtime: rt.Runtime) -> steps.TrainState:
    """The loop's state from the members' own states."""
    return jax.device_put(stack(states), runtime.replicated) if self.together else states[0]

  def with_progress(
    self, state: steps.TrainState, progress: float, runtime: rt.Runtime
  ) -> steps.TrainState:
    """The state carrying `progress` (`TrainState.progress`), one per member."""
    value = np.full((len(self),) if self.together else (), progress, np.float32)
    return state.replace(progress=jax.device_put(value, runtime.replicated))

  def step_keys(self) -> Callable[[int], jax.Array]:
    """step -> the step's random key(s): fold_in(fold_in(key(seed), 1), step) per member."""
    bases = [jax.random.fold_in(jax.random.key(c.seed), 1) for c in self.configs]
    if not self.together:
      return lambda step: jax.random.fold_in(bases[0], step)
    fold = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(0, None)))
    stacked = jnp.stack(bases)
    return lambda step: fold(stacked, step)


def train_members(
  configs: Sequence[ml_collections.ConfigDict],
  workdirs: Sequence[str | Path],
  *,
  together: bool = False,
  train_step: Callable | None = None,
) -> list[dict[str, Any]]:
  """Trains (or resumes) every member, then evaluates each one's workdir.

  Members share the first config's data (vocabularies copied into every workdir, one batch
  stream in the first config's data order), model and optimiser settings; each keeps its own
  seed (initialisation and dropout keys) and its own checkpoints, best checkpoint, metrics and
  eval/. Writes WORKDIR/config.json, vocab/, checkpoints/, best/, metrics.jsonl, TensorBoard
  events and, with `train.final_eval`, eval/. Returns each member's final evaluation results
  ({} without it), or [{"preempted_at_step": N}] * G when SIGTERM/SIGINT stopped training
  (checkpoints saved; rerun the same command to resume).
  """
  members = Members(configs, workdirs, together)
  config, tcfg, group = members.configs[0], members.configs[0].train, len(members)
  for cfg, wd in zip(members.configs, members.workdirs, strict=True):
    wd.mkdir(parents=True, exist_ok=True)
    checkpoints.check_and_save_config(wd, cfg)
  runtime = rt.Runtime()
  runtime.check_batch_size(config.data.batch_size)
  console.say(f"data: reading the {config.data.corpus} corpus (built on first use)")
  data = rt.load_data(config, members.workdirs[0])
  for wd in members.workdirs[1:]:  # One vocabulary for all: the same ids in every workdir.
    if not (wd / "vocab").exists():
      shutil.copytree(members.workdirs[0] / "vocab", wd / "vocab")
  logging.info("data: %s", json.dumps(data.stats, sort_keys=True))
  console.say(data_line(data))
  primary = jax.process_index() == 0
  writers = [summary.MetricWriter(wd, enabled=primary) for wd in members.workdirs]
  pairs = list(zip(members.workdirs, members.configs, strict=True))
  ckpts = [checkpoints.Checkpointer(wd, cfg) for wd, cfg in pairs]
  bests = [checkpoints.Checkpointer(wd, cfg, subdir="best", max_to_keep=1) for wd, cfg in pairs]
  resume = common_step(ckpts)
  for w, ckpt, best in zip(writers, ckpts, bests, strict=True):  # A killed run's future goes:
    w.truncate_after(int(resume or 0))  # its metrics lines, a group member's checkpoints past
    ckpt.discard_after(int(resume or 0))  # the step all members hold, and best checkpoints
    best.discard_after(int(resume or 0))  # past it.
  best_bleu = [held_bleu(w, b.latest_step()) for w, b in zip(members.workdirs, bests, strict=True)]
  train_fn, eval_fn = rt.compile_steps(config, runtime, stacked=together, train_step=train_step)
  sizes = (data.src_tokenizer.size, data.tgt_tokenizer.size)
  copy_map = table = None
  if config.model.copy:  # The copying model's source -> target map, saved with its parameters.
    copy_map = copying.vocab_map(data.src_tokenizer, data.tgt_tokenizer)
  if config.model.lexicon_bias == models.LEXICON_FROM_TRAINING and resume is None:
    console.say("lexicon: learning IBM Model 1 from the training split (model.lexicon_bias=train)")
    table = lexicon_lib.build(data)  # Saved with the parameters, and as WORKDIR/lexicon.npz.
    if primary:
      for wd in members.workdirs:
        table.save(wd / lexicon_lib.FILE)
  fresh = [rt.initial_state(cfg, *sizes, runtime, copy_map, table) for cfg in members.configs]
  it = input_pipeline.train_iterator(
    data, config, process_index=jax.process_index(), process_count=jax.process_count()
  )
  elapsed_before, skipped_before = 0.0, [0] * group
  if resume is not None:
    restored = [c.restore(s, resume) for c, s in zip(ckpts, fresh, strict=True)]
    fresh = [s for s, _ in restored]
    it.set_state(restored[0][1]["iterator"])
    elapsed_before = restored[0][1]["elapsed_s"]
    skipped_before = restored[0][1].get("skipped_updates", [0] * group)  # Older runs: none.
    console.say(f"resumed from step {resume} ({group} member{'s' * (group > 1)})")
  state = members.combine(fresh, runtime)
  start = int(resume or 0)
  step_keys = members.step_keys()
  budget_s, t_begin = 60.0 * tcfg.max_minutes, time.perf_counter()
  window_tokens, tick, skipped = 0.0, t_begin, np.asarray(skipped_before, np.int64)
  eta = Eta(
    tcfg.num_steps, budget_s, eval_every=tcfg.eval_every, checkpoint_every=tcfg.checkpoint_every
  )

  def elapsed() -> float:
    return elapsed_before + time.perf_counter() - t_begin

  def save_all() -> None:
    loop = {"iterator": it.get_state(), "elapsed_s": elapsed(), "skipped_updates": skipped.tolist()}
    step_now = int(np.atleast_1d(jax.device_get(state.step))[0])
    for k, c in enumerate(ckpts):
      if c.latest_step() != step_now:  # Each step is saved once (a new best saves it early).
        c.save(members.state(state, k), loop)

  def valid_batches():
    return input_pipeline.eval_batches(
      data, "valid", config, process_index=jax.process_index(), process_count=jax.process_count()
    )

  preemption = PreemptionHandler()
  # A rerun of a run stopped by its wall-clock budget trains no further (else one step a rerun).
  out_of_time = budget_s > 0 and rt.all_agree(elapsed_before >= budget_s)
  for step in range(start, start if out_of_time else tcfg.num_steps):
    host_batch = next(it)
    if tcfg.anneal != "none":  # The clock is process 0's: every process anneals alike.
      progress = rt.from_process0(steps.budget_progress(tcfg, step, elapsed()))
      state = members.with_progress(state, progress, runtime)
    state, metrics = train_fn(state, runtime.put_batch(host_batch), step_keys(step))
    window_tokens = window_tokens + members.value(metrics["tokens"], 0)  # Stays on device.
    done = step + 1
    finite = np.atleast_1d(np.asarray(metrics["finite"]))  # One sync a step: [G] flags.
    if done == start + 1:
      eta.start_window(done, time.perf_counter())  # After the first step and its compiling.
    skipped += ~finite
    for k in np.flatnonzero(~finite):
      handle_nonfinite(
        members.workdirs[k], done, host_batch, members.configs[k], ckpts[k].latest_step()
      )
    # The last step: num_steps, or the wall-clock budget (logged, evaluated, checkpointed alike).
    last = done == tcfg.num_steps or (budget_s > 0 and rt.all_agree(elapsed() >= budget_s))
    if done % tcfg.log_every == 0 or last:
      m = jax.device_get(metrics)  # Synchronises once per logging window.
      now = time.perf_counter()
      rate = float(window_tokens) / max(now - tick, 1e-9)
      for k, w in enumerate(writers):
        scalars = {key: float(members.value(m[key], k)) for key in ("loss", "learning_rate")}
        scalars["grad_norm"] = float(members.value(m["grad_norm"], k))
        scalars |= {"tokens_per_s": rate, "skipped_updates": int(skipped[k])}
        scalars["elapsed_s"] = elapsed()
        scalars |= {
          key: float(members.value(m[key], k)) for key in objective.EXTRA_METRICS if key in m
        }
        if together:
          scalars["seeds_together"] = group
        w.write(done, "train", scalars)
      losses = " ".join(f"{float(x):.4f}" for x in np.atleast_1d(m["loss"]))
      eta.end_window(done, now)
      console.say(
        f"step {done}/{tcfg.num_steps}  loss {losses}  {rate:,.0f} tokens/s  "
        f"elapsed {console.duration(elapsed())}  {eta.text(done, elapsed())}"
      )
    if done % tcfg.eval_every == 0 or last:
      paused = time.perf_counter()
      result = eval_run.evaluate_loss(eval_fn, state.for_eval(), valid_batches(), runtime)
      for k, (w, cfg) in enumerate(zip(writers, members.configs, strict=True)):
        scalars = {key: float(members.value(result[key], k)) for key in ("loss", "perplexity")}
        scalars["elapsed_s"] = elapsed()
        if tcfg.valid_bleu:
          member_state = members.state(state, k)
          out = members.workdirs[k] / eval_run.VALID_HYPOTHESES.format(step=done)
          out = out if primary else None
          scalars.update(eval_run.valid_scores(member_state.for_eval(), data, cfg, out))
          if scalars["bleu"] >= best_bleu[k]:  # Ties go to the later checkpoint.
            best_bleu[k] = scalars["bleu"]
            save_all()  # First, so that a resumed run never starts before its best checkpoint.
            bests[k].save(member_state, None)
        w.write(done, "valid", scalars)
        logging.info("step %d  valid %s", done, json.dumps(scalars))
        console.say(valid_line(done, scalars, best_bleu[k], f"seed {cfg.seed}: " * together))
      eta.paused("eval", time.perf_counter() - paused)
    if done % tcfg.checkpoint_every == 0 or last or preemption.requested:
      paused = time.perf_counter()
      save_all()
      eta.paused("checkpoint", time.perf_counter() - paused)
    if preemption.requested:  # After this step's log, evaluation and checkpoint, which a
      preemption.restore()  # resumed run (starting at the next step) would never redo.
      logging.warning(
        "received %s at step %d: checkpoint saved; rerun the same command to resume",
        preemption.requested,
        done,
      )
      for w in writers:
        w.close()
      return [{"preempted_at_step": done}] * group
    if any(done % n == 0 for n in (tcfg.log_every, tcfg.eval_every, tcfg.checkpoint_every)):
      window_tokens, tick = 0.0, time.perf_counter()  # Windows time training steps alone.
      eta.start_window(done, tick)
    if last and done < tcfg.num_steps:
      console.say(f"train.max_minutes={tcfg.max_minutes:g} reached at step {done}")
    if last:
      break
  save_all()  # Where the last step was not saved (a run resumed at its end saves nothing).
  preemption.restore()
  for c in (*ckpts, *bests):
    c.close()
  results = []
  for k, (cfg, wd) in enumerate(zip(members.configs, members.workdirs, strict=True)):
    final = {}
    if tcfg.final_eval:
      final = eval_run.evaluate_splits(
        cfg,
        wd,
        data=data,
        runtime=runtime,
        eval_fn=None if together else eval_fn,
        writer=writers[k],
      )
    results.append(final)
    writers[k].close()
  return results


class Eta:
  """Time left until training stops, from what the loop measures: the pace of the latest
  window of training steps (so compiling, mostly in the first steps, is left out, and the
  estimate follows the run's current speed), plus the validation passes and checkpoints still
  to come at their mean measured cost; or the wall-clock budget left (`train.max_minutes`) when
  that ends training first."""

  def __init__(self, num_steps: int, budget_s: float, *, eval_every: int, checkpoint_every: int):
    self.num_steps, self.budget_s = num_steps, budget_s
    self.every = {"eval": eval_every, "checkpoint": checkpoint_every}
    self.costs: dict[str, list[float]] = {kind: [] for kind in self.every}
    self.window: tuple[int, float] | None = None  # (step, time) the current window began.
    self.pace: float | None = None  # Seconds a training step in the latest window.

  def start_window(self, done: int, now: float) -> None:
    self.window = (done, now)

  def end_window(self, done: int, now: float) -> None:
    if self.window is not None and done > self.window[0]:
      self.pace = (now - self.window[1]) / (done - self.window[0])

  def paused(self, kind: str, seconds: float) -> None:
    """A validation pass ("eval") or checkpoint took `seconds`."""
    self.costs[kind].append(seconds)

  def seconds(self, done: int, elapsed_s: float) -> tuple[float | None, bool]:
    """(seconds left, or None before a window has been timed; whether the budget is what ends
    training)."""
    if self.pace is None:
      return None, False
    left = self.pace * (self.num_steps - done)
    for kind, every in self.every.items():
      if self.costs[kind]:  # Passes at multiples of `every`, and one at the last step.
        passes = self.num_steps // every - done // every + (self.num_steps % every != 0)
        left += np.mean(self.costs[kind]) * passes
    budget_left = max(self.budget_s - elapsed_s, 0.0)
    if self.budget_s > 0 and budget_left < left:
      return budget_left, True
    return float(left), False

  def text(self, done: int, elapsed_s: float) -> str:
    left, budget = self.seconds(done, elapsed_s)
    if left is None:
      return "ETA -"
    return f"ETA {console.duration(left)}" + " (train.max_minutes)" * budget


def data_line(data: input_pipeline.Data) -> str:
  """The run's data in one console line: pairs per split and vocabulary sizes."""
  examples = data.stats.get("examples", {})
  splits = ", ".join(f"{n:,} {name}" for name, n in examples.items())
  vocab = f"{data.src_tokenizer.size:,}/{data.tgt_tokenizer.size:,}"
  return f"data: {splits} pairs; vocabularies {vocab} (source/target)"


def valid_line(step: int, scalars: dict[str, float], best: float, who: str = "") -> str:
  """A validation pass in one console line."""
  line = f"step {step}  {who}valid loss {scalars['loss']:.4f}"
  line += f"  perplexity {scalars['perplexity']:.2f}"
  if "bleu" in scalars:
    line += f"  BLEU {scalars['bleu']:.2f}" + " (best so far)" * (scalars["bleu"] >= best)
  return line


def train_and_evaluate(
  config: ml_collections.ConfigDict, workdir: str | Path, *, train_step: Callable | None = None
) -> dict[str, Any]:
  """Trains (or resumes) the run in `workdir`, then reports validation and test results: the
  loop of `train_members` with one member. Returns the final evaluation results ({} without
  `train.final_eval`), or {"preempted_at_step": N}."""
  return train_members([config], [workdir], train_step=train_step)[0]

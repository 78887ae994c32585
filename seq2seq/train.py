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
`train.checkpoint_every`, and the final evaluation of every member (`evaluation.evaluate_splits`).
With `train.tracker`, each member's metrics, config and results go to a tracker run of its own.

The step is passed in (`train_step`, default `train_state.train_step` of the run's settings): tests
hand the loop a step that misbehaves on purpose rather than the library carrying test hooks.
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
import numpy as np
from absl import logging

from seq2seq import checkpoints, evaluation, settings
from seq2seq import sharding as rt
from seq2seq.common import console, files
from seq2seq.data import copying, input_pipeline
from seq2seq.data import lexicon as lexicon_lib
from seq2seq.model import addons
from seq2seq.training import (
  early_stopping,
  metric_writer,
  objective,
  optimisers,
  softmax,
  trackers,
  train_state,
)


class NonFiniteError(ValueError):
  """Training met a non-finite loss or gradient with `train.nonfinite="stop"`."""


def handle_nonfinite(workdir: Path, step: int, batch, nonfinite: str, last_checkpoint) -> None:
  """Records the offending batch (WORKDIR/nonfinite/step_N.json), then stops or carries on as
  `train.nonfinite` says ("stop" or "skip")."""
  out = workdir / "nonfinite"
  out.mkdir(exist_ok=True)
  ids = [int(i) for i in batch["index"] if i >= 0]
  path = out / f"step_{step}_process_{jax.process_index()}.json"
  files.write_atomic(path, json.dumps({"step": step, "train_example_indices": ids}) + "\n")
  if nonfinite == "stop":
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


def stack(states: Sequence[train_state.TrainState]) -> train_state.TrainState:
  """Train states of one config -> one state whose arrays have a new leading member axis.

  The static parts (model graph, optimiser) are the first state's: they are the same model.
  """
  leaves = [jax.tree.leaves(s) for s in states]
  stacked = [jnp.stack(xs) for xs in zip(*leaves, strict=True)]
  return jax.tree.unflatten(jax.tree.structure(states[0]), stacked)


def unstack(state: train_state.TrainState, index: int) -> train_state.TrainState:
  """Member `index` of a stacked state."""
  return jax.tree.map(lambda x: x[index], state)


# In WORKDIR/best/STEP/: the validation that made it the best (its metric, value and BLEU).
BEST_BLEU = "validation.json"


def held_bleu(workdir: Path, best_step: int | None) -> float:
  """The validation BLEU of the best checkpoint a workdir holds (-1 without one): what a resumed
  run's later evaluations must beat. Read from beside the checkpoint (`BEST_BLEU`), else from its
  step's validation row. Not the best BLEU in metrics.jsonl: that step's weights may be gone (a
  best checkpoint replaces the previous one, and one saved past the resumed step is
  discarded)."""
  if best_step is not None:
    beside = Path(workdir) / "best" / str(best_step) / BEST_BLEU
    record = files.read_jsonl(beside) if beside.exists() else []
    if record and isinstance(record[0].get("bleu"), int | float):
      return float(record[0]["bleu"])
  rows = metric_writer.read_metrics(workdir)
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

  def __init__(self, configs: Sequence[settings.Config], workdirs, together: bool):
    if len(configs) != len(workdirs) or not configs:
      raise ValueError(f"need one workdir per config; got {len(configs)} and {len(workdirs)}")
    if len(configs) > 1 and not together:
      raise ValueError("several members train only together (stacked)")
    if together and jax.process_count() > 1:
      raise ValueError("seeds are trained together in one process; run groups per host")
    self.runs = [settings.validate(config) for config in configs]  # What the loop reads.
    self.workdirs = [Path(w) for w in workdirs]
    self.together = together

  def __len__(self) -> int:
    return len(self.runs)

  def state(self, state: train_state.TrainState, k: int) -> train_state.TrainState:
    """Member k's own train state."""
    return unstack(state, k) if self.together else state

  def value(self, x: Any, k: int) -> Any:
    """Member k's entry of a step metric or of a vmapped evaluation."""
    return np.asarray(x)[k] if self.together else x

  def combine(
    self, states: Sequence[train_state.TrainState], runtime: rt.Runtime
  ) -> train_state.TrainState:
    """The loop's state from the members' own states."""
    return jax.device_put(stack(states), runtime.replicated) if self.together else states[0]

  def with_progress(
    self, state: train_state.TrainState, progress: float, runtime: rt.Runtime
  ) -> train_state.TrainState:
    """The state carrying `progress` (`TrainState.progress`), one per member."""
    return self.with_values(state, "progress", [progress] * len(self), runtime)

  def with_values(
    self, state: train_state.TrainState, field: str, values: Sequence[float], runtime: rt.Runtime
  ) -> train_state.TrainState:
    """The state carrying member k's `values[k]` in the host-set scalar `field` (progress,
    lr_scale)."""
    value = np.asarray(values if self.together else values[0], np.float32)
    return state.replace(**{field: jax.device_put(value, runtime.replicated)})

  def step_keys(self) -> Callable[[int], jax.Array]:
    """step -> the step's random key(s): fold_in(fold_in(key(seed), 1), step) per member."""
    bases = [jax.random.fold_in(jax.random.key(run.seed), 1) for run in self.runs]
    if not self.together:
      return lambda step: jax.random.fold_in(bases[0], step)
    fold = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(0, None)))
    stacked = jnp.stack(bases)
    return lambda step: fold(stacked, step)


def train_members(
  configs: Sequence[settings.Config],
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
  events and, with `train.final_eval`, eval/, holding each workdir's lock throughout
  (`files.workdir_lock`: a second process on it fails at once). Returns each member's final
  evaluation results
  ({} without it), or [{"preempted_at_step": N}] * G when SIGTERM/SIGINT stopped training
  (checkpoints saved; rerun the same command to resume).
  """
  members = Members(configs, workdirs, together)  # Validates every config before any write.
  for run in members.runs:
    trackers.require(run.train.tracker)  # Its package, before the corpus is built.
  with files.workdir_lock(members.workdirs, enabled=jax.process_index() == 0):
    loop = Loop(members, train_step)
    try:
      preempted_at = loop.train()
      if preempted_at is not None:
        return [{"preempted_at_step": preempted_at}] * len(loop.members)
      return loop.finish()
    except BaseException:
      for w in loop.writers:  # (A tracker run closed already stays as it ended.)
        try:
          w.close("failed")
        except Exception as e:  # The error that stopped the run is the one reported.
          logging.warning("closing %s after the error: %s", w.path.parent, e)
      raise


class Loop:
  """One training loop's state besides the train state's arrays: the data and its iterator,
  each member's writer and checkpointers, what its validations decided so far (`Verdicts`), the
  clock (`Clock`), the tokens of the current logging window, and the finiteness flags of the
  steps run (`FiniteFlags`)."""

  def __init__(self, members: Members, train_step: Callable | None):
    self.members, self.runtime = members, rt.Runtime()
    run = members.runs[0]
    self.tcfg, self.primary = run.train, jax.process_index() == 0
    self.data = open_data(members, self.runtime)
    self.writers = [metric_writer.MetricWriter(wd, enabled=self.primary) for wd in members.workdirs]
    pairs = list(zip(members.workdirs, members.runs, strict=True))
    self.ckpts = [checkpoints.Checkpointer(wd, r.train.keep_checkpoints) for wd, r in pairs]
    self.bests = [checkpoints.Checkpointer(wd, 1, subdir="best") for wd in members.workdirs]
    resume = common_step(self.ckpts)
    self.start = int(resume or 0)  # The first step to train.
    for w, ckpt, best in zip(self.writers, self.ckpts, self.bests, strict=True):
      w.truncate_after(self.start)  # A killed run's future goes: its metrics lines, a group
      ckpt.discard_after(self.start)  # member's checkpoints past the step all members hold,
      best.discard_after(self.start)  # and best checkpoints past it.
    self.verdicts = Verdicts(self.tcfg, members.workdirs, self.bests, self.start)
    self.train_fn, self.eval_fn = rt.compile_steps(
      run, self.runtime, stacked=members.together, train_step=train_step
    )
    fresh = initial_states(members, self.data, self.runtime, resumed=resume is not None)
    self.data_settings = run.data
    self.it = input_pipeline.train_iterator(
      self.data,
      self.data_settings,
      process_index=jax.process_index(),
      process_count=jax.process_count(),
    )
    elapsed_before, skipped_before = 0.0, [0] * len(members)
    if resume is not None:
      restored = [c.restore(s, resume) for c, s in zip(self.ckpts, fresh, strict=True)]
      fresh = [s for s, _ in restored]
      self.it.set_state(restored[0][1]["iterator"])
      elapsed_before = restored[0][1]["elapsed_s"]
      skipped_before = restored[0][1].get("skipped_updates", skipped_before)  # Older: none.
      console.say(f"resumed from step {resume} ({len(members)} member{'s' * (len(members) > 1)})")
    self.state = members.combine(fresh, self.runtime)
    self.set_lr_scale()
    self.flags = FiniteFlags(members, self.ckpts, skipped_before)
    self.clock = Clock(self.tcfg.max_minutes, elapsed_before)
    self.window_tokens, self.tick = 0.0, self.clock.began
    self.eta = Eta(
      self.tcfg.num_steps,
      self.clock.budget_s,
      eval_every=self.tcfg.eval_every,
      checkpoint_every=self.tcfg.checkpoint_every,
    )
    # Last, once the run has been restored; after the truncation, so a new tracker run gets
    # the history kept.
    for w, wd, r in zip(self.writers, members.workdirs, members.runs, strict=True):
      tracker = trackers.start(r.train.tracker, wd) if self.primary else None
      if tracker is not None:
        w.track(tracker)

  def train(self) -> int | None:
    """Steps until `train.num_steps` or the wall-clock budget; the step at which SIGTERM or
    SIGINT stopped training (after its checkpoint), else None."""
    tcfg, members, preemption = self.tcfg, self.members, PreemptionHandler()
    if unfinished_validation(self.start, tcfg, members.workdirs):
      console.say(f"step {self.start}: redoing the validation a stopped run did not finish")
      self.validate(self.start)
    step_keys = members.step_keys()
    # A rerun of a run stopped by its wall-clock budget, or early, trains no further (else one
    # step a rerun).
    out_of_time = self.clock.spent_before()
    if self.verdicts.stopped_at is not None:
      console.say(self.verdicts.reason(self.start))
    stopped = out_of_time or self.verdicts.stopped_at is not None
    for step in range(self.start, self.start if stopped else tcfg.num_steps):
      host_batch = next(self.it)
      if tcfg.anneal != "none":  # The clock is process 0's: every process anneals alike.
        progress = rt.from_process0(optimisers.budget_progress(tcfg, step, self.clock.elapsed()))
        self.state = members.with_progress(self.state, progress, self.runtime)
      batch = self.runtime.put_batch(host_batch)
      self.state, metrics = self.train_fn(self.state, batch, step_keys(step))
      tokens = members.value(metrics["tokens"], 0)
      self.window_tokens = self.window_tokens + tokens  # Stays on device.
      done = step + 1
      self.flags.add(done, host_batch, metrics["finite"])
      # Reading a step's flags waits for the step. Read one step late, they let the host fetch
      # and send the next batch while the device computes this one (no wait a step).
      self.flags.read(keep=1)
      if done == self.start + 1:
        self.flags.read()  # Waits for the first step, so the window starts after compiling.
        self.eta.start_window(done, time.perf_counter())
      # The last step: num_steps, or the wall-clock budget (logged, evaluated, checkpointed
      # alike).
      last = done == tcfg.num_steps or self.clock.over_budget()
      if done % tcfg.log_every == 0 or last:
        self.log(done, metrics)
      if done % tcfg.eval_every == 0 or last:
        self.validate(done)
      if self.verdicts.out_of_patience() and not last:
        last = True
        self.verdicts.stop(done, self.writers)
      if done % tcfg.checkpoint_every == 0 or last or preemption.requested:
        paused = time.perf_counter()
        self.save_all()
        self.eta.paused("checkpoint", time.perf_counter() - paused)
      if preemption.requested:  # After this step's log, evaluation and checkpoint, which a
        preemption.restore()  # resumed run (starting at the next step) would never redo.
        logging.warning(
          "received %s at step %d: checkpoint saved; rerun the same command to resume",
          preemption.requested,
          done,
        )
        for w in self.writers:
          w.close("killed")
        return done
      if any(done % n == 0 for n in (tcfg.log_every, tcfg.eval_every, tcfg.checkpoint_every)):
        self.window_tokens, self.tick = 0.0, time.perf_counter()  # Windows time steps alone.
        self.eta.start_window(done, self.tick)
      if last and done < tcfg.num_steps and self.verdicts.stopped_at is None:
        console.say(f"train.max_minutes={tcfg.max_minutes:g} reached at step {done}")
      if last:
        break
    self.save_all()  # Where the last step was not saved (a run resumed at its end saves nothing).
    preemption.restore()
    return None

  def set_lr_scale(self) -> None:
    """Hands the plateau schedule's factors to the state (`TrainState.lr_scale`)."""
    if self.verdicts.plateaus:
      scales = [p.scale for p in self.verdicts.plateaus]
      self.state = self.members.with_values(self.state, "lr_scale", scales, self.runtime)

  def log(self, done: int, metrics: dict[str, jax.Array]) -> None:
    """A train line per member (metrics.jsonl, TensorBoard) and one console line."""
    self.flags.read()  # The skipped count is logged.
    m = jax.device_get(metrics)  # Synchronises once per logging window.
    now = time.perf_counter()
    rate = float(self.window_tokens) / max(now - self.tick, 1e-9)
    # A sampled softmax's loss is over its candidates only: logged under its own name.
    loss_key = softmax.make(self.tcfg.softmax).loss_metric
    for k, w in enumerate(self.writers):
      scalars = {key: float(self.members.value(m[key], k)) for key in LOGGED}
      scalars[loss_key] = scalars.pop("loss")
      scalars |= {"tokens_per_s": rate, "skipped_updates": int(self.flags.skipped[k])}
      scalars["elapsed_s"] = self.clock.elapsed()
      scalars |= {
        key: float(self.members.value(m[key], k)) for key in objective.EXTRA_METRICS if key in m
      }
      if self.members.together:
        scalars["seeds_together"] = len(self.members)
      w.write(done, "train", scalars)
    losses = " ".join(f"{float(x):.4f}" for x in np.atleast_1d(m["loss"]))
    self.eta.end_window(done, now)
    console.say(
      f"step {done}/{self.tcfg.num_steps}  {loss_key.replace('_', ' ')} {losses}  "
      f"{rate:,.0f} tokens/s  "
      f"elapsed {console.duration(self.clock.elapsed())}  "
      f"{self.eta.text(done, self.clock.elapsed())}"
    )

  def validate(self, done: int) -> None:
    """Validation loss and perplexity of every member, with `train.valid_bleu` its greedy BLEU
    too, saving the member's best checkpoint when this validation is its best
    (`Verdicts.judge`)."""
    paused, members = time.perf_counter(), self.members
    batches = input_pipeline.eval_batches(
      self.data,
      "valid",
      self.data_settings,
      process_index=jax.process_index(),
      process_count=jax.process_count(),
    )
    result = evaluation.evaluate_loss(self.eval_fn, self.state.for_eval(), batches, self.runtime)
    for k, (w, run) in enumerate(zip(self.writers, members.runs, strict=True)):
      scalars = {key: float(members.value(result[key], k)) for key in ("loss", "perplexity")}
      scalars["elapsed_s"] = self.clock.elapsed()
      if self.tcfg.valid_bleu:
        member_state = members.state(self.state, k)
        out = members.workdirs[k] / evaluation.VALID_HYPOTHESES.format(step=done)
        out = out if self.primary else None
        chrf = self.verdicts.reads_chrf(k)
        scores = evaluation.valid_scores(member_state.for_eval(), self.data, run, out, chrf=chrf)
        scalars.update(scores)
      if self.verdicts.judge(k, done, scalars):
        self.save_best(k, done, scalars)
      w.write(done, "valid", scalars)
      logging.info("step %d  valid %s", done, json.dumps(scalars))
      who = f"seed {run.seed}: " * members.together
      console.say(valid_line(done, scalars, self.verdicts.best_bleu[k], who))
    self.set_lr_scale()
    self.eta.paused("eval", time.perf_counter() - paused)

  def save_best(self, k: int, done: int, scalars: dict[str, float]) -> None:
    """Member k's checkpoint of `done` as its best, with the validation that chose it beside."""
    metric = early_stopping.checkpoint_metric(self.tcfg)
    self.save_all()  # First, so that a resumed run never starts before its best checkpoint.
    files.kill_point("best-checkpoint")
    if self.bests[k].latest_step() != done:  # (A redone validation may hold it already.)
      self.bests[k].save(self.members.state(self.state, k), None)
    if self.primary:  # What chose it, beside it, whatever becomes of metrics.jsonl.
      chosen = {"step": done, "chosen_by": metric, metric: scalars[metric]}
      if "bleu" in scalars:
        chosen["bleu"] = scalars["bleu"]
      beside = self.members.workdirs[k] / "best" / str(done) / BEST_BLEU
      files.write_atomic(beside, json.dumps(chosen) + "\n")
    files.kill_point("after-best-checkpoint")

  def save_all(self) -> None:
    """Every member's checkpoint of the current step, with the loop's own state (the data
    iterator, the clock and the skipped updates), unless the member already holds that step."""
    # Every skipped update is counted, and `train.nonfinite="stop"` stops before a checkpoint
    # that would follow its bad step.
    self.flags.read()
    loop = {
      "iterator": self.it.get_state(),
      "elapsed_s": self.clock.elapsed(),
      "skipped_updates": self.flags.skipped.tolist(),
    }
    step_now = int(np.atleast_1d(jax.device_get(self.state.step))[0])
    for k, c in enumerate(self.ckpts):
      if c.latest_step() != step_now:  # Each step is saved once (a new best saves it early).
        c.save(self.members.state(self.state, k), loop)

  def finish(self) -> list[dict[str, Any]]:
    """Closes the checkpointers, then each member's final evaluation ({} without
    `train.final_eval`)."""
    for c in (*self.ckpts, *self.bests):
      c.close()
    results = []
    for k, (run, wd) in enumerate(zip(self.members.runs, self.members.workdirs, strict=True)):
      final = {}
      if self.tcfg.final_eval:  # (The loop holds the workdir's lock and wrote its config.json.)
        final = evaluation.evaluate_run(
          run,
          wd,
          data=self.data,
          runtime=self.runtime,
          eval_fn=None if self.members.together else self.eval_fn,
          writer=self.writers[k],
          notes=self.verdicts.stopped_notes(k),
        )
      results.append(final)
      self.writers[k].close()
    return results


LOGGED = ("loss", "learning_rate", "grad_norm")  # Step metrics every train line carries.


def unfinished_validation(
  start: int, tcfg: optimisers.TrainSettings, workdirs: Sequence[Path]
) -> bool:
  """Whether the step a run resumes at (`start`) was due a validation that left no row: a kill
  after that step's checkpoint and before its validation was written (during the best
  checkpoint's save, say). The loop redoes it before training on, so the rerun is the
  uninterrupted run."""
  due = start % tcfg.eval_every == 0 or start == tcfg.num_steps
  if not start or not due:
    return False
  rows = [metric_writer.read_metrics(wd) for wd in workdirs]
  return not all(any(r["step"] == start and r["split"] == "valid" for r in m) for m in rows)


class Verdicts:
  """What each member's validations decided so far: its early-stopping count
  (`train.early_stopping`) and its plateau schedule's factor (`train.decay`), both read again
  from its validation rows on resume, its best validation BLEU, and the step at which early
  stopping ended training (a resumed run's, where it had), or None."""

  def __init__(
    self,
    tcfg: optimisers.TrainSettings,
    workdirs: Sequence[Path],
    bests: Sequence[checkpoints.Checkpointer],
    start: int,
  ):
    self.best_bleu = [held_bleu(w, b.latest_step()) for w, b in zip(workdirs, bests, strict=True)]
    rule, plateau = early_stopping.parse(tcfg.early_stopping), optimisers.plateau_of(tcfg)
    self.patience = [early_stopping.Patience(rule) for _ in workdirs] if rule else []
    self.plateaus = [optimisers.PlateauScale(plateau) for _ in workdirs] if plateau else []
    for k, wd in enumerate(workdirs):
      history = metric_writer.read_metrics(wd) if rule or plateau else []
      for counter in self.patience[k : k + 1] + self.plateaus[k : k + 1]:
        counter.replay(history, start)
    stopped = self.out_of_patience() and start < tcfg.num_steps
    self.stopped_at = start if stopped else None

  def reads_chrf(self, k: int) -> bool:
    """Whether member k's early stopping or plateau schedule reads the validation chrF."""
    read = [p.rule.metric for p in self.patience[k : k + 1]]
    read += [p.plateau.metric for p in self.plateaus[k : k + 1]]
    return "chrf" in read

  def judge(self, k: int, done: int, scalars: dict[str, float]) -> bool:
    """Counts member k's validation at `done` and says whether it is its best so far: by early
    stopping's own count when it is on (the step it names as best), else by validation BLEU
    (ties go to the later checkpoint); never without either
    (`early_stopping.checkpoint_metric`)."""
    if self.patience:
      self.patience[k].update(done, scalars)
    if self.plateaus:
      self.plateaus[k].update(scalars)
    bleu = scalars.get("bleu")
    better_bleu = bleu is not None and bleu >= self.best_bleu[k]
    if better_bleu:
      self.best_bleu[k] = bleu
    if self.patience:
      return self.patience[k].best_step == done
    return better_bleu

  def out_of_patience(self) -> bool:
    """Whether early stopping ends training: every member has run out of patience."""
    return bool(self.patience) and all(p.exhausted for p in self.patience)

  def reason(self, step: int) -> str:
    """Why early stopping ended training at `step`, in one line."""
    return self.patience[0].reason(step)

  def stop(self, done: int, writers: Sequence[metric_writer.MetricWriter]) -> None:
    """Says why training stops at `done`, on the console and in each member's metrics."""
    self.stopped_at = done
    for w, p in zip(writers, self.patience, strict=True):
      stop = {"best_step": p.best_step, "best": p.best, "metric": p.rule.metric}
      w.write(done, "early_stopping", stop | {"reason": p.reason(done)})
    console.say(self.reason(done))

  def stopped_notes(self, k: int) -> dict[str, Any]:
    """What the results of member k say of how training ended: the early stop, if it was one
    (not a budget that ran out at the evaluation that would have stopped it)."""
    if self.stopped_at is None:
      return {}
    p, step = self.patience[k], self.stopped_at
    return {"stopped_early": {"step": step, "best_step": p.best_step, "reason": p.reason(step)}}


class FiniteFlags:
  """The finiteness flags of the steps run: each member's count of skipped (non-finite)
  updates, and the steps whose flags the host has not read yet (reading one waits for its
  step)."""

  def __init__(self, members: Members, ckpts: Sequence[checkpoints.Checkpointer], skipped):
    self.members, self.ckpts = members, ckpts
    self.skipped = np.asarray(skipped, np.int64)
    self.unread: list[tuple[int, dict[str, np.ndarray], jax.Array]] = []

  def add(self, done: int, host_batch: dict[str, np.ndarray], flags: jax.Array) -> None:
    """The flags of step `done` (one per member), trained on `host_batch`, to read later."""
    self.unread.append((done, host_batch, flags))

  def read(self, keep: int = 0) -> None:
    """Counts the skipped updates of the steps run but not yet read, all but the last `keep`,
    and handles each non-finite one (`handle_nonfinite`: record, then stop or carry on)."""
    while len(self.unread) > keep:
      done, host_batch, flags = self.unread.pop(0)
      finite = np.atleast_1d(np.asarray(flags))  # [G] flags; waits for that step.
      self.skipped += ~finite
      for k in np.flatnonzero(~finite):
        handle_nonfinite(
          self.members.workdirs[k],
          done,
          host_batch,
          self.members.runs[k].train.nonfinite,
          self.ckpts[k].latest_step(),
        )


class Clock:
  """The wall time of a run over every invocation, against its budget (`train.max_minutes`):
  the seconds a resumed run had spent already (carried in its checkpoints) plus this
  invocation's since the clock began."""

  def __init__(self, max_minutes: float, elapsed_before: float):
    self.budget_s, self.elapsed_before = 60.0 * max_minutes, elapsed_before
    self.began = time.perf_counter()

  def elapsed(self) -> float:
    """Seconds of training so far, over every invocation."""
    return self.elapsed_before + time.perf_counter() - self.began

  def spent_before(self) -> bool:
    """Whether earlier invocations spent the budget (every process agrees)."""
    return self.budget_s > 0 and rt.all_agree(self.elapsed_before >= self.budget_s)

  def over_budget(self) -> bool:
    """Whether `train.max_minutes` is spent (every process agrees)."""
    return self.budget_s > 0 and rt.all_agree(self.elapsed() >= self.budget_s)


def open_data(members: Members, runtime: rt.Runtime) -> input_pipeline.Data:
  """Every member's workdir with its config.json, and the first config's data (built on first
  use), its vocabularies copied into the other members' workdirs."""
  run = members.runs[0]
  for member, wd in zip(members.runs, members.workdirs, strict=True):
    wd.mkdir(parents=True, exist_ok=True)
    checkpoints.check_and_save_config(wd, member.config)
  runtime.check_batch_size(run.data.batch_size)
  console.say(f"data: reading the {run.data.corpus} corpus (built on first use)")
  data = rt.load_data(run, members.workdirs[0])
  for wd in members.workdirs[1:]:  # One vocabulary for all: the same ids in every workdir.
    if not (wd / "vocab").exists():
      shutil.copytree(members.workdirs[0] / "vocab", wd / "vocab")
  logging.info("data: %s", json.dumps(data.stats, sort_keys=True))
  console.say(data_line(data))
  return data


def initial_states(
  members: Members, data: input_pipeline.Data, runtime: rt.Runtime, *, resumed: bool
) -> list[train_state.TrainState]:
  """Each member's freshly initialised train state (what a resumed run restores into). The
  copying model's source -> target map and the learned lexicon (`lexicon(table=train)`,
  learned on a fresh start only: a resumed run restores it) are saved with the parameters; the
  lexicon also as WORKDIR/lexicon.npz."""
  model = members.runs[0].model
  sizes = (data.src_tokenizer.size, data.tgt_tokenizer.size)
  copy_map = table = None
  bias = model.addon("lexicon")
  if model.addon(copying.ADDON):
    copy_map = copying.vocab_map(data.src_tokenizer, data.tgt_tokenizer)
  if bias and bias.settings.table == addons.LEXICON_FROM_TRAINING and not resumed:
    console.say("lexicon: learning IBM Model 1 from the training split (lexicon(table=train))")
    table = lexicon_lib.build(data)
    if jax.process_index() == 0:
      for wd in members.workdirs:
        table.save(wd / lexicon_lib.FILE)
  return [rt.initial_state(run, *sizes, runtime, copy_map, table) for run in members.runs]


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
  config: settings.Config, workdir: str | Path, *, train_step: Callable | None = None
) -> dict[str, Any]:
  """Trains (or resumes) the run in `workdir`, then reports validation and test results: the
  loop of `train_members` with one member. Returns the final evaluation results ({} without
  `train.final_eval`), or {"preempted_at_step": N}."""
  return train_members([config], [workdir], train_step=train_step)[0]

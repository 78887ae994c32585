"""Restoring a run for use: the checkpoint that evaluation, translation and the service decode
(`restore_run`: the best intact one; `restore_for_eval`: an ensemble's members or the run), an
agreement run's direction as a plain model (`direction_state`), and what results.json says of
the checkpoint restored."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from absl import logging
from flax import nnx

from seq2seq import checkpoints, settings
from seq2seq import sharding as rt
from seq2seq.common import console
from seq2seq.data import tokenizer as tok
from seq2seq.decoding import ensemble
from seq2seq.model import models
from seq2seq.training import early_stopping, metric_writer, train_state


def restore_run(
  run: settings.RunSettings,
  workdir: Path,
  src_vocab: int,
  tgt_vocab: int,
  runtime,
  doing: str = "loading",
) -> train_state.TrainState:
  """The run's best checkpoint if one was kept and is intact, else, of the intact regular
  checkpoints, the one with the best validation row by the metric that chooses the best
  (`early_stopping.checkpoint_metric`: early stopping's, else BLEU; the latest among equals, and
  when none was validated or no metric chooses), with the parameters evaluation uses
  (`TrainState.for_eval`: the moving average when there is one). A damaged checkpoint is
  reported by its folder and skipped (`checkpoints.Checkpointer` sets aside those that fail
  their checksums); never restored as garbage. The console names it after `doing` ("evaluating
  the best checkpoint (step 2000)")."""
  workdir = Path(workdir)
  fresh = rt.abstract_state(run, src_vocab, tgt_vocab, runtime)
  metric = early_stopping.checkpoint_metric(run.train)
  sign = early_stopping.METRICS.get(metric, 0.0)
  value = {
    r["step"]: sign * r[metric]
    for r in metric_writer.read_metrics(workdir)
    if r["split"] == "valid" and metric in r
  }
  for subdir in ("best", "checkpoints"):
    ckpt = checkpoints.Checkpointer(workdir, run.train.keep_checkpoints, subdir=subdir)
    held = sorted(ckpt.manager.all_steps(), key=lambda s: (value.get(s, -np.inf), s), reverse=True)
    try:
      for step in held:
        try:
          state, _ = ckpt.restore(fresh, step, with_data=False)
        except checkpoints.CheckpointError as e:
          logging.warning("%s; trying the next one", e)
          continue
        console.say(f"{doing} the {subdir} checkpoint (step {int(state.step)})")
        return state.for_eval()
    finally:
      ckpt.close()
  raise FileNotFoundError(f"no intact checkpoint in {workdir / 'checkpoints'}; train first")


def checkpoint_note(run: settings.RunSettings, step: int) -> dict:
  """What results.json says of the checkpoint evaluated: its step and the validation metric that
  chose it ("latest" where none did); nothing for an ensemble."""
  if ensemble.workdirs(run.decode):
    return {}
  return {
    "checkpoint": {
      "step": step,
      "chosen_by": early_stopping.checkpoint_metric(run.train) or "latest",
    }
  }


def restore_member(workdir: Path, runtime) -> train_state.TrainState:
  """An ensemble member: its run restored with the config it was trained with, as the
  direction that config names."""
  run = settings.validate(checkpoints.load_config(workdir))
  sizes = [tok.load(Path(workdir) / "vocab" / side).size for side in ("src", "tgt")]
  state = restore_run(run, Path(workdir), *sizes, runtime)
  return direction_state(state, run.model.direction)


def restore_for_eval(
  run: settings.RunSettings,
  workdir: Path,
  src_vocab: int,
  tgt_vocab: int,
  runtime,
  doing: str = "loading",
) -> train_state.TrainState:
  """What evaluation and translation decode: the ensemble `decode.ensemble` names (see
  `seq2seq.decoding.ensemble`), else the run in `workdir` (`restore_run`)."""
  if ensemble.workdirs(run.decode):
    return ensemble.load(run.decode, lambda member: restore_member(member, runtime))
  return restore_run(run, workdir, src_vocab, tgt_vocab, runtime, doing)


DIRECTIONS = settings.DIRECTIONS


def eval_prefix(model: models.ModelSettings) -> str:
  """The folder of a run's evaluations: "eval", or "eval_reverse" for an agreement run's
  reverse model."""
  direction = model.direction
  return "eval" if direction == "forward" else f"eval_{direction}"


def direction_state(state: train_state.TrainState, direction: str) -> train_state.TrainState:
  """One direction of an agreement run as the state of a plain RNNsearch, which decoding,
  evaluation and translation take like any run's state (no optimiser state: it decodes only).

  Any other run's state is returned as it is for "forward"; "reverse" needs an agreement run.
  """
  if direction not in DIRECTIONS:
    raise ValueError(f"model.direction={direction!r} is not one of {DIRECTIONS}")
  model = state.model()
  if not isinstance(model, models.Agreement):
    if direction == "reverse":
      raise ValueError("model.direction=reverse needs an agreement run (model.name=agreement)")
    return state
  graphdef, params = nnx.split(getattr(model, direction), nnx.Param)
  return train_state.TrainState(state.step, params, None, graphdef, state.tx)

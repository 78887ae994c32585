"""Early stopping: training ends once a validation metric has stopped improving.

`train.early_stopping` names it: "" trains for the whole budget; a spec

    early(metric=bleu, patience=5, min_delta=0.0)

stops after the validation at which `metric` (greedy validation "bleu" or "chrf", higher is
better; or the validation "loss", lower is better) has gone `patience` evaluations in a row
without beating its best so far by more than `min_delta`. The steps between evaluations are
`train.eval_every`; the budget (`train.num_steps`, `train.max_minutes`) still ends training when
it comes first. The best checkpoint (`WORKDIR/best`) is then the best by `metric`, the step the
count names as best (`checkpoint_metric`), and the final evaluation and `--mode=eval` read it
(as Keras's `restore_best_weights` and Prechelt's early stopping restore the best parameters).

The count is not saved anywhere: it is read again from the validation rows of metrics.jsonl
(`Patience.replay`), so a resumed run stops where the uninterrupted run would, and a rerun of a
run that stopped early trains no further. Seeds trained together stop together, once every
member has run out of patience.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from seq2seq.common import registry
from seq2seq.training import metric_writer

FIELD = "train.early_stopping"
METRICS = {"bleu": 1.0, "chrf": 1.0, "loss": -1.0}  # The sign that makes larger better.


@dataclasses.dataclass(frozen=True)
class EarlyStopping:
  """The settings of `train.early_stopping`."""

  metric: str = "bleu"
  patience: int = 5
  min_delta: float = 0.0

  def __post_init__(self):
    if self.metric not in METRICS:
      raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {self.metric!r}")
    if self.patience < 1:
      raise ValueError(f"patience must be at least 1 evaluation, got {self.patience}")
    if self.min_delta < 0:
      raise ValueError(f"min_delta must be >= 0, got {self.min_delta}")

  def __str__(self) -> str:
    return str(registry.Spec("early", self))


def parse(text: str | EarlyStopping | None) -> EarlyStopping | None:
  """The settings a `train.early_stopping` spec names; None for "" (no early stopping)."""
  usage = "'' (off) or early(metric=bleu|chrf|loss, patience=N, min_delta=D)"
  return registry.optional_settings(EarlyStopping, "early", text, FIELD, usage)


def checkpoint_metric(train) -> str | None:
  """The validation metric that chooses the best checkpoint of a run with `train` settings:
  early stopping's metric when it is on, else "bleu" with `train.valid_bleu`, else None (the
  latest checkpoint is evaluated)."""
  rule = parse(train.early_stopping)
  if rule is not None:
    return rule.metric
  return "bleu" if train.valid_bleu else None


class Patience:
  """The count of one run: its best value so far, and the evaluations since it."""

  def __init__(self, rule: EarlyStopping):
    self.rule, self.sign = rule, METRICS[rule.metric]
    self.best: float | None = None
    self.best_step: int | None = None
    self.waited = 0

  def update(self, step: int, row: Mapping[str, Any]) -> bool:
    """Counts the validation `row` of `step` (its "bleu", "chrf" or "loss"); whether patience
    has run out."""
    value = float(row[self.rule.metric])
    if self.best is None or self.sign * (value - self.best) > self.rule.min_delta:
      self.best, self.best_step, self.waited = value, step, 0
    else:
      self.waited += 1
    return self.exhausted

  @property
  def exhausted(self) -> bool:
    return self.waited >= self.rule.patience

  def replay(self, rows: list[dict[str, Any]], until: int) -> bool:
    """Counts the validation rows of metrics.jsonl up to step `until`, in order; whether patience
    had run out by then."""
    for row in metric_writer.validations(rows, until, self.rule.metric):
      self.update(int(row["step"]), row)
    return self.exhausted

  def reason(self, step: int) -> str:
    """Why training stopped at `step`, in one line."""
    r = self.rule
    return (
      f"stopped early at step {step}: validation {r.metric} has not improved by more than "
      f"{r.min_delta:g} for {r.patience} evaluations "
      f"(best {self.best:.4g} at step {self.best_step})"
    )

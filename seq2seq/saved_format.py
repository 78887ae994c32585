"""The versions of a saved config, and the migration of one saved at any version to the current
form.

A saved config (a workdir's `config.json`, a committed study's run) carries its version in the
top-level integer field `format_version` (`FIELD`). The field is not a setting: it is dropped
before the dict becomes a ConfigDict and is never compared. A `History` is the ordered list of
version steps: `Step(version=N, ...)` takes a config saved at version N - 1 to version N with a
small named function whose docstring says what changed at that version and, where the same
change renamed the model's parameters, a `params` function that renames a checkpoint's
parameter tree to match. Configs written before the field existed get their version from the
history's `unversioned` rule.

This module holds the rules and imports nothing of the package (and no JAX); the history itself
lives with the settings it converts (`settings.HISTORY`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

FIELD = "format_version"

Tree = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Step:
  """One version step: `config` turns a config dict saved at `version - 1` into one at
  `version` (it gets the migration's own copy and returns the result); `params`, where the step
  renamed parameters, turns the nested dict of a checkpoint's parameters saved before this
  version into the tree the model of this version builds."""

  version: int
  config: Callable[[Tree], Tree]
  params: Callable[[Tree], Tree] | None = None

  @property
  def name(self) -> str:
    return self.config.__name__

  @property
  def change(self) -> str:
    """What changed at this version: the first line of the config function's docstring."""
    return (self.config.__doc__ or "").strip().splitlines()[0]


class History:
  """The saved format's versions 0 ... `current`: `steps[i]` takes version i to version i + 1,
  and `unversioned(saved)` says which version a dict without `FIELD` was saved at."""

  def __init__(self, steps: Sequence[Step], unversioned: Callable[[Tree], int]):
    versions = [step.version for step in steps]
    if versions != list(range(1, len(steps) + 1)):
      raise ValueError(f"version steps must be numbered 1, 2, ... in order, got {versions}")
    for step in steps:
      if not (step.config.__doc__ or "").strip():
        raise ValueError(f"version step {step.version} ({step.name}) needs a docstring")
    self.steps = tuple(steps)
    self.unversioned = unversioned

  @property
  def current(self) -> int:
    """The version this code writes."""
    return len(self.steps)

  def version(self, saved: Tree) -> int:
    """The version `saved` was written at: its `FIELD`, else the `unversioned` rule. A version
    newer than `current`, or a field that is no version, raises ValueError in one line."""
    if FIELD not in saved:
      return self.unversioned(saved)
    return self._readable(saved[FIELD])

  def upgrade(self, saved: Tree) -> Tree:
    """`saved` at the current version, as a new dict without `FIELD`: the steps after the
    version it was saved at, applied in order."""
    version = self.version(saved)
    out = {key: value for key, value in copy.deepcopy(saved).items() if key != FIELD}
    for step in self.steps[version:]:
      out = step.config(out)
    return out

  def stamped(self, config: Tree) -> Tree:
    """A config dict at the current version as it is saved: with `FIELD`."""
    return {**config, FIELD: self.current}

  def params(self, version: int) -> Callable[[Tree], Tree]:
    """What turns the parameter tree of a checkpoint saved at `version` into the one the current
    model builds: the `params` functions of the steps after `version`, in order (the identity
    where none has one)."""
    version = self._readable(version)
    renames = [step.params for step in self.steps[version:] if step.params is not None]

    def migrate(tree: Tree) -> Tree:
      for rename in renames:
        tree = rename(tree)
      return tree

    return migrate

  def _readable(self, version: Any) -> int:
    """`version` if this code reads it; else ValueError in one line."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
      raise ValueError(f"{FIELD}={version!r} is not a format version (an integer >= 0)")
    if version > self.current:
      raise ValueError(
        f"saved by a newer seq2seq: format version {version} > {self.current}, the newest this "
        "one reads; update seq2seq to load it"
      )
    return version

"""Orbax checkpoints of the training state together with the data iterator, and the run's config.

A workdir belongs to one run: `config.json` holds its resolved config. Resuming with a config
that differs only in fields that do not change the model, the data or the optimisation (see
`RESUMABLE_FIELDS`) is allowed; anything else is refused, naming the fields. The file carries
its format version (`saved_format.FIELD`, not a setting, never compared); a config saved at an
older version is migrated first (`saved_format.upgrade`), one saved by a newer seq2seq refused in
one line naming the file, and specs are compared canonically.

Every checkpoint step folder gets `checksums.json`, the SHA-256 of each of its files, written
once the checkpoint is complete. Opening a checkpointer verifies every step that has one: a
damaged step (a file changed, cut short or gone) is moved to WORKDIR/damaged/, with a warning
naming it, so restoring takes the newest intact step; a step that cannot be read at all
(`CheckpointError`, naming its folder) is left for the caller to fall back from
(`restoring.restore_run`). A step without checksums.json (a kill between the checkpoint and its
checksums, or a checkpoint written before they existed) is trusted as Orbax wrote it. A step
whose arrays have other shapes than the config builds (config.json edited after training) is
refused before Orbax reads it, in one line naming the arrays (`check_shapes`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import jax
import ml_collections
import orbax.checkpoint as ocp
from absl import logging

from seq2seq import saved_format
from seq2seq.common import files
from seq2seq.model import addons
from seq2seq.saved_format import flatten

CHECKSUMS = "checksums.json"
DAMAGED = "damaged"  # WORKDIR/damaged/: checkpoint steps that failed their checksums.

# Fields that may change between runs on the same workdir.
RESUMABLE_FIELDS = (
  "train.num_steps",
  "train.max_minutes",
  "train.log_every",
  "train.eval_every",
  "train.checkpoint_every",
  "train.keep_checkpoints",
  "decode.",
  "train.valid_bleu",
  "train.final_eval",
  "train.nonfinite",
  "train.tracker",  # Where the metrics are copied: a run may turn it on, off or elsewhere.
  "train.inject_nonfinite_step",  # Removed (a test hook); old workdirs' config.json has it.
  "model.direction",
  "model.scan_unroll",  # Speed only (the same function).
  "data.long_test_",
  "data.cache_dir",  # Where the built corpus lives, not what it holds: a moved repository resumes.
)

# What a run's parameters and vocabularies are made of: evaluating or translating it with a
# config that differs here would build another model (or read the text with other ids). The
# model's decoding-time switches may differ: of `model.addons`, only the add-ons' own
# decoding-time settings (copying's eos: `addons.AddOn.DECODING_SETTINGS`), which
# `model_differences` sets aside.
MODEL_FIELDS = ("model.", "data.src_vocab_size", "data.tgt_vocab_size", "data.tokenizer")
MODEL_FIELDS += ("data.pretokenizer", "data.sp_model_type", "data.local.src_lang")
DECODING_SWITCHES = ("model.direction", "model.scan_unroll", "model.addons")


class IncompatibleRunError(ValueError):
  """The workdir holds a run whose config differs in fields that matter."""


def check_model_config(workdir: Path, config: ml_collections.ConfigDict) -> None:
  """Raises `IncompatibleRunError` naming the fields where `config` would build another model
  than the run in `workdir` trained (`MODEL_FIELDS`); a workdir without config.json (an
  ensemble's) is not checked."""
  path = Path(workdir) / "config.json"
  if not path.exists():
    return
  a = flatten(read_saved_config(path))
  b = flatten(saved_format.canonical(json.loads(config.to_json_best_effort())))
  differing = model_differences(a, b)
  if differing:
    shown = ", ".join(
      f"{n} ({a.get(n, '-')!r} in the run, {b.get(n, '-')!r} given)" for n in differing[:4]
    )
    more = f" and {len(differing) - 4} more" if len(differing) > 4 else ""
    raise IncompatibleRunError(
      f"--config differs from {path} in {shown}{more}: evaluate and translate a run with the "
      "config it was trained with (decode.* settings may differ)"
    )


def model_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
  """The dotted fields where two flat, canonical configs build different models
  (`MODEL_FIELDS`), leaving out the decoding-time switches (`DECODING_SWITCHES`); their
  `model.addons` differ when the add-ons or their settings other than the decoding-time ones do
  (`addons.trained`)."""
  differing = [
    n
    for n in sorted(set(a) | set(b))
    if n.startswith(MODEL_FIELDS)
    and not n.startswith(DECODING_SWITCHES)
    and a.get(n, "<missing>") != b.get(n, "<missing>")
  ]
  if addons.trained(a.get("model.addons", "")) != addons.trained(b.get("model.addons", "")):
    differing = sorted([*differing, "model.addons"])
  return differing


def read_saved_config(path: Path) -> dict[str, Any]:
  """A saved config file as a dict in the current form (`saved_format.upgrade`, without the format
  version); a file this code cannot read (saved by a newer seq2seq, say) raises ValueError in
  one line naming it."""
  saved = json.loads(Path(path).read_text())
  try:
    return saved_format.upgrade(saved)
  except ValueError as e:
    raise ValueError(f"{path}: {e}") from e


def config_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
  """Dotted names of fields that differ between two config dicts and may not change on resume:
  `old` as saved (migrated from its format version), `new` at the current version (the format
  version of either is not compared)."""
  return _differences(saved_format.upgrade(old), new)


def _inert(name: str, a: dict[str, Any], b: dict[str, Any]) -> bool:
  """Whether `name` sets a mechanism both flat configs turn off (`saved_format.INERT_UNLESS`)."""
  switch = saved_format.INERT_UNLESS.get(name)
  return switch is not None and not a.get(switch) and not b.get(switch)


def _differences(current: dict[str, Any], new: dict[str, Any]) -> list[str]:
  """`config_differences` of a config already upgraded (`current`) and `new`."""
  a = flatten(current)
  b = flatten(saved_format.canonical(new))
  names = sorted(set(a) | set(b))
  changed = [
    n for n in names if a.get(n, "<missing>") != b.get(n, "<missing>") and not _inert(n, a, b)
  ]
  return [n for n in changed if not any(n.startswith(f) for f in RESUMABLE_FIELDS)]


def saved_config_differences(workdir: Path, config: ml_collections.ConfigDict) -> list[str]:
  """`config_differences` between WORKDIR/config.json and `config`; empty without that file."""
  path = Path(workdir) / "config.json"
  if not path.exists():
    return []
  return _differences(read_saved_config(path), json.loads(config.to_json_best_effort()))


def check_and_save_config(workdir: Path, config: ml_collections.ConfigDict) -> None:
  """Checks an existing WORKDIR/config.json allows resuming with `config`, then writes `config`
  there at the current format version (`saved_format.HISTORY.stamped`)."""
  differing = saved_config_differences(workdir, config)
  if differing:
    raise IncompatibleRunError(
      f"{workdir} holds a run with a different config in {', '.join(differing)}; "
      "use a new --workdir or the same settings"
    )
  if jax.process_index() == 0:
    new = saved_format.HISTORY.stamped(json.loads(config.to_json_best_effort()))
    files.write_atomic(workdir / "config.json", json.dumps(new, indent=2, sort_keys=True) + "\n")


# Train-state fields a checkpoint holds only when the state has them (the loss terms' states,
# the parameters' moving average), so every other run's checkpoints keep their layout.
OPTIONAL_FIELDS = ("terms", "ema")


def load_config(workdir: str | Path) -> ml_collections.ConfigDict:
  """WORKDIR/config.json as a locked ConfigDict in the current form (`read_saved_config`: the
  version steps from the one it was saved at, the fields added since at the values that
  reproduce how the run behaved; the format version is not a field)."""
  path = Path(workdir) / "config.json"
  if not path.exists():
    raise FileNotFoundError(f"{path} does not exist: {workdir} holds no run (train first)")
  config = ml_collections.ConfigDict(read_saved_config(path))
  config.lock()
  return config


def _tree(state: Any) -> dict[str, Any]:
  """What a checkpoint holds: step, parameters, optimiser state and the optional fields."""
  tree = {"step": state.step, "params": state.params, "opt_state": state.opt_state}
  for name in OPTIONAL_FIELDS:
    if getattr(state, name, None) is not None:
      tree[name] = getattr(state, name)
  return tree


class CheckpointError(OSError):
  """A checkpoint step that cannot be restored; the message names its folder."""


def _quiet_closed_loop_reports() -> None:
  """During and after a failed restore, TensorStore's callbacks post to Orbax's closed event loop
  and report each RuntimeError("Event loop is closed") as unraisable (dozens of tracebacks around
  the one line that matters, some as the process exits). From then on those are dropped."""
  previous = sys.unraisablehook
  if getattr(previous, "quiets_closed_loops", False):
    return

  def hook(report):
    if (
      isinstance(report.exc_value, RuntimeError) and str(report.exc_value) == "Event loop is closed"
    ):
      return
    previous(report)

  hook.quiets_closed_loops = True
  sys.unraisablehook = hook


def _as_saved(tree: dict[str, Any], saved: Any | None) -> tuple[dict[str, Any], dict[str, str]]:
  """`tree` (`_tree`) in the layout of a checkpoint saved before the loss terms kept their own
  states (`saved_format.SAVED_TERM_STATES`), where `saved` (`_saved_layout`) is one; and the
  moved entries, {saved key: term}."""
  if "terms" not in tree or saved is None:
    return tree, {}
  moved = {k: t for k, t in saved_format.SAVED_TERM_STATES.items() if k in saved.keys()}
  if moved:
    tree, terms = dict(tree), dict(tree["terms"])
    del tree["terms"]
    tree.update({key: terms.pop(term) for key, term in moved.items()})
    if terms:
      tree["terms"] = terms
  return tree, moved


def _saved_layout(folder: Path) -> Any | None:
  """The tree of a checkpoint step's arrays as Orbax describes them (shapes, no values), or None
  where it cannot be read (the restore then says what is wrong)."""
  try:
    return ocp.StandardCheckpointHandler().metadata(folder / "state")
  except Exception:
    return None


def _array_name(path: tuple) -> str:
  """An array's name ("params/cell/project/kernel") from its key path in either tree
  (`check_shapes`): the state's keys are attributes and dict keys, the saved layout's dict keys
  and indices."""
  parts = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]
  return "/".join(parts[:-1] if parts[-1:] == ["value"] else parts)


def _shapes(tree: Any) -> dict[str, tuple[int, ...]]:
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {
    _array_name(p): tuple(x.shape) for p, x in leaves if getattr(x, "shape", None) is not None
  }


def check_shapes(folder: Path, saved: Any | None, abstract: Any) -> None:
  """Raises `IncompatibleRunError` naming the arrays (the parameters first) whose shape in the
  checkpoint step `folder` (`saved`, its layout) differs from the state this config builds
  (`abstract`): a config.json edited after training agrees with the config given and not with
  the checkpoints. Arrays present in one tree only are left to Orbax."""
  if saved is None:
    return
  have, want = _shapes(saved), _shapes(abstract)
  differing = [n for n in want if n in have and have[n] != want[n]]
  if not differing:
    return
  shown = [n for n in differing if n.startswith("params/")] or differing
  listed = ", ".join(f"{n} {have[n]} saved, {want[n]} built" for n in shown[:3])
  more = f" and {len(shown) - 3} more arrays" if len(shown) > 3 else ""
  raise IncompatibleRunError(
    f"checkpoint {folder} does not fit the model this config builds ({listed}{more}): the run "
    f"was trained with other model settings than {folder.parent.parent / 'config.json'} now "
    "holds (edited?); give the settings it was trained with, or train in a new --workdir"
  )


def check_room(root: Path, step: int, tree: Any) -> None:
  """Raises OSError (ENOSPC, one line) unless the disk under `root` has room for a checkpoint
  of `tree`: its arrays' bytes and a margin. A full disk then stops a run before Orbax starts a
  write it cannot finish (which ends in dozens of error reports from its threads), and the
  checkpoints saved before stay as they were."""
  needed = sum(getattr(x, "nbytes", 0) for x in jax.tree.leaves(tree)) * 1.1 + (1 << 20)
  folder = next((p for p in (root, *root.parents) if p.exists()), root)
  free = shutil.disk_usage(folder).free
  if free < needed:
    raise OSError(
      errno.ENOSPC,
      f"no room for the checkpoint of step {step} under {root}: about "
      f"{needed / 2**20:,.1f} MiB needed, {free / 2**20:,.1f} MiB free; free some space and "
      "resume (the checkpoints before it are intact)",
    )


def _digests(step_dir: Path) -> dict[str, str]:
  """{path relative to step_dir: SHA-256} of every file of a checkpoint step but CHECKSUMS."""
  out = {}
  for path in sorted(p for p in step_dir.rglob("*") if p.is_file()):
    rel = path.relative_to(step_dir).as_posix()
    if rel != CHECKSUMS:
      h = hashlib.sha256()
      with path.open("rb") as f:
        while chunk := f.read(1 << 20):
          h.update(chunk)
      out[rel] = h.hexdigest()
  return out


def write_checksums(step_dir: Path) -> None:
  files.write_atomic(step_dir / CHECKSUMS, json.dumps(_digests(step_dir), indent=1) + "\n")


def damage(step_dir: Path) -> str | None:
  """What is wrong with a checkpoint step by its checksums ("" checks nothing without them), or
  None when every file is as written."""
  path = step_dir / CHECKSUMS
  if not path.exists():
    return None
  try:
    want = json.loads(path.read_text())
  except (OSError, ValueError):
    return f"{path} is unreadable"
  got = _digests(step_dir)
  for rel, digest in want.items():
    if rel not in got:
      return f"{step_dir / rel} is missing"
    if got[rel] != digest:
      return f"{step_dir / rel} does not match its checksum"
  return None


def set_aside(step_dir: Path, problem: str) -> None:
  """Moves a damaged checkpoint step folder to WORKDIR/damaged/, with a warning naming it."""
  stamp = time.strftime("%Y%m%d%H%M%S")
  target = step_dir.parent.parent / DAMAGED / f"{step_dir.parent.name}-{step_dir.name}-{stamp}"
  target.parent.mkdir(parents=True, exist_ok=True)
  shutil.move(str(step_dir), str(target))
  logging.warning("damaged checkpoint set aside: %s (moved to %s)", problem, target)


def set_aside_damaged(root: Path) -> list[int]:
  """Moves every step folder of `root` (WORKDIR/checkpoints or WORKDIR/best) that fails its
  checksums to WORKDIR/damaged/ (`set_aside`); the steps moved."""
  moved = []
  if not root.is_dir():
    return moved
  for step_dir in sorted(
    (p for p in root.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
  ):
    problem = damage(step_dir)
    if problem is None:
      continue
    set_aside(step_dir, problem)
    moved.append(int(step_dir.name))
  return moved


class Checkpointer:
  """`ocp.CheckpointManager` over WORKDIR/checkpoints: the train state and the data iterator;
  damaged steps set aside when it opens (module docstring)."""

  def __init__(self, workdir: Path, max_to_keep: int, *, subdir: str = "checkpoints"):
    root = (Path(workdir) / subdir).absolute()
    if jax.process_index() == 0:
      set_aside_damaged(root)
    options = ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep,
      create=True,
      enable_async_checkpointing=False,
      cleanup_tmp_directories=True,  # A write cut short by a kill is never loaded, and goes.
    )
    self.manager = ocp.CheckpointManager(root, options=options)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, state: Any, data_state: dict[str, Any] | None) -> None:
    step = int(jax.device_get(state.step))
    tree = _tree(state)
    check_room(Path(self.manager.directory), step, tree)
    _quiet_closed_loop_reports()  # A write that fails (a full disk) reports as a restore does.
    args = {"state": ocp.args.StandardSave(tree)}
    if data_state is not None:
      args["data"] = ocp.args.JsonSave(data_state)
    self.manager.save(step, args=ocp.args.Composite(**args), force=True)
    self.manager.wait_until_finished()
    if jax.process_index() == 0:
      files.kill_point("checkpoint-checksums")
      write_checksums(Path(self.manager.directory) / str(step))

  def restore(
    self, state: Any, step: int | None = None, *, with_data: bool = True
  ) -> tuple[Any, dict[str, Any] | None]:
    """State (shaped and sharded like `state`) and the data iterator state of checkpoint `step`:
    None where the checkpoint keeps none (the best checkpoints, saved without it) or where
    `with_data` is false."""
    step = self.latest_step() if step is None else step
    folder = Path(self.manager.directory) / str(step)
    # Quieted before the restore: a failing one reports from TensorStore's threads while it runs.
    _quiet_closed_loop_reports()
    saved = _saved_layout(folder)
    tree, moved = _as_saved(_tree(state), saved)
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)
    check_shapes(folder, saved, abstract)  # Before Orbax, whose refusal prints dozens of reports.
    try:
      args = {"state": ocp.args.StandardRestore(abstract)}
      if with_data and (folder / "data").is_dir():
        args["data"] = ocp.args.JsonRestore()
      restored = self.manager.restore(step, args=ocp.args.Composite(**args))
    except Exception as e:  # Orbax's and TensorStore's many errors of a file cut short.
      first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise CheckpointError(f"checkpoint {folder} cannot be restored ({first[:300]})") from e
    got = dict(restored["state"])
    if moved:
      got["terms"] = {**got.get("terms", {}), **{t: got.pop(k) for k, t in moved.items()}}
    new_state = state.replace(step=got["step"], params=got["params"], opt_state=got["opt_state"])
    optional = {name: got[name] for name in OPTIONAL_FIELDS if name in got}
    return new_state.replace(**optional), (restored["data"] if "data" in args else None)

  def discard_after(self, step: int) -> None:
    """Deletes the checkpoints of steps after `step`: a killed run's future past the step its
    successor resumes from (a seed-group member's checkpoints past the step every member holds,
    a best checkpoint past the resumed step)."""
    for later in [s for s in self.manager.all_steps() if s > step]:
      self.manager.delete(later)

  def close(self) -> None:
    self.manager.close()

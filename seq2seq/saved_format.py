"""Everything about configs saved by older code: the format's versions, the step that migrates
a config to each, and the tables of fields added, removed and replaced since.

A saved config (a workdir's `config.json`, a committed study's run) carries its version in the
top-level integer field `format_version` (`FIELD`; not a setting, never compared). `HISTORY`
lists the versions, each with the step that migrates to it:

0. the flat layout: 14 model fields that belong to one component (`model.local_window`,
   `model.coverage`, ...) and one train field per loss term (`train.fertility_weight`, ...);
1. components own their settings (`model.score`, `model.attention`, `model.features` and
   `train.loss_terms` are specs), no version field;
2. the file carries `format_version`;
3. `decode.length_norm_alpha` became the spec `decode.length_penalty`;
4. the add-ons' switches (`model.intra_attention`, `model.lexicon_bias`, `model.copy`,
   `model.copy_eos`) became one spec list, `model.addons`.

`upgrade(saved)` applies the steps from the saved version on (a version newer than this code's
is refused), drops `REMOVED_FIELDS` and fills every field missing with `ADDED_FIELDS`: the
defaults of configs/default.py, but for the few settings whose old runs behaved otherwise
(`OLD_BEHAVIOUR`). A new setting therefore needs no entry here. Checkpoints read two more tables:
`INERT_UNLESS` (settings that matter only under a switch) and `SAVED_TERM_STATES` (loss-term
states saved at an older place in the tree).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

from configs import default
from seq2seq.common import registry
from seq2seq.decoding import length_penalties
from seq2seq.model import addons, alignment_features, scores, structures
from seq2seq.training import objective, softmax

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


# --------------------------------------------------------------------------- this code's history
# Old flat field -> (which spec it moved into, the setting's name there). "score:cosine" moves
# only when the score is cosine, and so on.
_MOVED = {
  "cosine_sharpness": ("score", "cosine", "sharpness"),
  "max_src_len": ("score", "location", "max_len"),
  "local_window": ("attention", ("local_m", "local_p"), "window"),
  "monotonic_bias_init": ("attention", "monotonic", "bias_init"),
  "monotonic_noise": ("attention", "monotonic", "noise"),
  "monotonic_lookahead": ("attention", "monotonic", "lookahead"),
  "conv_filters": ("attention", "conv", "filters"),
  "conv_width": ("attention", "conv", "width"),
  "num_heads": ("attention", "multihead", "heads"),
}
_FEATURE_FIELDS = (
  "coverage",
  "fertility",
  "fertility_max",
  "prev_attention_filters",
  "prev_attention_width",
)
_TERM_FIELDS = (
  "fertility_weight",
  "attention_supervision",
  "attention_supervision_loss",
  "reinforce_weight",
  "entropy_weight",
  "baseline_decay",
  "agreement_weight",
)


def _spec(reg: registry.Registry, name: str, values: dict[str, Any]) -> str:
  """The canonical spec of `name` with `values` (settings not given keep their defaults)."""
  return str(reg.spec(f"{name}({', '.join(f'{k}={v}' for k, v in values.items())})"))


def is_legacy(saved: dict[str, Any]) -> bool:
  """Whether a saved config dict predates component-owned settings (format version 0)."""
  return "features" not in saved.get("model", {}) or "loss_terms" not in saved.get("train", {})


def components_own_their_settings(saved: dict[str, Any]) -> dict[str, Any]:
  """Version 1: components own their settings; the flat fields become specs.

  The model fields that belonged to one score or structure (`_MOVED`) become settings of the
  `model.score` and `model.attention` specs (only where that component is the one chosen),
  `_FEATURE_FIELDS` the `model.features` spec, and the train fields of the loss terms
  (`_TERM_FIELDS`) the `train.loss_terms` spec (REINFORCE at its defaults and agreement at
  weight 1 are implied by the model, so left out)."""
  model, train = saved.setdefault("model", {}), saved.setdefault("train", {})
  for kind, reg in (("score", scores), ("attention", structures)):
    name = model.get(kind, "additive" if kind == "score" else "soft")
    values = {}
    for old, (where, owners, setting) in _MOVED.items():
      if where != kind:
        continue
      value = model.pop(old, None)
      owners = (owners,) if isinstance(owners, str) else owners
      if name in owners and value is not None:
        values[setting] = value
    model[kind] = _spec(reg.REGISTRY, name, values)
  old = {k: model.pop(k, None) for k in _FEATURE_FIELDS}
  parts = []
  if old["coverage"]:
    values = {"fertility": bool(old["fertility"])}
    if old["fertility_max"] is not None:
      values["fertility_max"] = old["fertility_max"]
    parts.append(_spec(alignment_features.REGISTRY, "coverage", values))
  if (old["prev_attention_filters"] or 0) > 0:
    values = {"filters": old["prev_attention_filters"]}
    if old["prev_attention_width"] is not None:
      values["width"] = old["prev_attention_width"]
    parts.append(_spec(alignment_features.REGISTRY, "prev_attention", values))
  model["features"] = "+".join(parts)
  old = {k: train.pop(k, None) for k in _TERM_FIELDS}
  terms = []
  if (old["fertility_weight"] or 0) > 0:
    terms.append(_spec(objective.REGISTRY, "fertility", {"weight": old["fertility_weight"]}))
  if (old["attention_supervision"] or 0) > 0:
    values = {"weight": old["attention_supervision"]}
    values["loss"] = old["attention_supervision_loss"] or "ce"
    terms.append(_spec(objective.REGISTRY, "supervision", values))
  if structures.spec(model["attention"]).name == "hard" and model.get("name") != "agreement":
    values = {
      "weight": old["reinforce_weight"],
      "entropy_weight": old["entropy_weight"],
      "baseline_decay": old["baseline_decay"],
    }
    spec = _spec(
      objective.REGISTRY, "reinforce", {k: v for k, v in values.items() if v is not None}
    )
    if spec != "reinforce":
      terms.append(spec)
  if model.get("name") == "agreement" and old["agreement_weight"] not in (None, 1.0):
    terms.append(_spec(objective.REGISTRY, "agreement", {"weight": old["agreement_weight"]}))
  train["loss_terms"] = "+".join(terms)
  return saved


def the_file_carries_its_version(saved: dict[str, Any]) -> dict[str, Any]:
  """Version 2: the saved file carries `format_version`; no setting changed."""
  return saved


# The add-on switches that version 4 moved into `model.addons`.
ADDON_FIELDS = ("intra_attention", "lexicon_bias", "copy", "copy_eos")
# Fields that a version step after the first reads from an old config and replaces.
REPLACED_FIELDS = ("decode.length_norm_alpha",) + tuple(f"model.{f}" for f in ADDON_FIELDS)


def length_penalties_by_name(saved: dict[str, Any]) -> dict[str, Any]:
  """Version 3: `decode.length_norm_alpha` (score / length**alpha) became the spec
  `decode.length_penalty`: alpha a reads as "power(alpha=a)", 0 as "none"."""
  decode = saved.get("decode")
  if decode is not None and "length_norm_alpha" in decode:
    alpha = float(decode.pop("length_norm_alpha"))
    decode["length_penalty"] = "none" if alpha == 0 else f"power(alpha={alpha})"
  return saved


def addons_in_one_list(saved: dict[str, Any]) -> dict[str, Any]:
  """Version 4: the add-ons' switches became one spec list, `model.addons`.

  `model.intra_attention=S` reads as "intra(score=S)", `model.lexicon_bias=T` as
  "lexicon(table=T)" and `model.copy=true` as "copy(eos=E)" with E its `model.copy_eos`; "" and
  "none" are off, and copy_eos goes with copy off. A config saved before copy_eos existed copied
  the source EOS as the target EOS, so it reads as "copy(eos=target)"."""
  model = saved.get("model")
  if model is None:
    return saved
  old = {key: model.pop(key, None) for key in ADDON_FIELDS}
  parts = []
  if old["intra_attention"] not in (None, "", "none"):
    parts.append(f"intra(score={old['intra_attention']})")
  if old["lexicon_bias"] not in (None, "", "none"):
    parts.append(f"lexicon(table={old['lexicon_bias']})")
  if old["copy"]:
    parts.append(f"copy(eos={old['copy_eos'] or 'target'})")
  model["addons"] = addons.spec_text(addons.specs("+".join(parts)))
  return saved


# The saved format's versions: step N takes a config saved at version N - 1 to version N. A
# change that renames or moves fields, changes what a value means, or renames the model's
# parameters (`Step.params`) is a new step at the end; a field only added or removed needs none.
HISTORY = History(
  [
    Step(1, components_own_their_settings),
    Step(2, the_file_carries_its_version),
    Step(3, length_penalties_by_name),
    Step(4, addons_in_one_list),
  ],
  unversioned=lambda saved: 0 if is_legacy(saved) else 1,
)
FORMAT_VERSION = HISTORY.current


# Fields added or removed without a version bump: a field that changes the meaning of no other
# field needs no version step. They apply to a config of any version, after the version steps.
# Removed: intra-attention's memory size (128 slots; the memory now has one slot per decoder
# step, which changes nothing for outputs up to 128 words).
REMOVED_FIELDS = ("model.intra_attention_len",)

# Added settings whose value for a run saved without them differs from today's default. None
# now: model.copy_eos, "target" for runs saved before it existed (copying sent the source EOS's
# attention to the target EOS until then; the default became "null"), is read by version 4
# (`addons_in_one_list`), which moved it into `model.addons`.
OLD_BEHAVIOUR: dict[str, Any] = {}


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
  """A nested config dict as {"section.field": value}."""
  out = {}
  for key, value in d.items():
    if isinstance(value, dict):
      out.update(flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def added_fields() -> dict[str, Any]:
  """What a saved config without a field reads it as: its default in configs/default.py, or its
  `OLD_BEHAVIOUR` value where the runs saved without it behaved otherwise."""
  defaults = flatten(json.loads(default.get_config().to_json_best_effort()))
  unknown = sorted(set(OLD_BEHAVIOUR) - set(defaults))
  if unknown:
    raise ValueError(f"OLD_BEHAVIOUR names fields configs/default.py lacks: {unknown}")
  return {**defaults, **OLD_BEHAVIOUR}


# Every field of configs/default.py (dotted) -> the value a saved config without it reads as.
ADDED_FIELDS = added_fields()


def upgrade(saved: dict[str, Any]) -> dict[str, Any]:
  """A saved config dict in the current form (a new dict, without the format version): the
  version steps from the one it was saved at (`HISTORY`), the fields removed since
  (`REMOVED_FIELDS`) dropped, those missing filled with `ADDED_FIELDS`, the specs canonical. A
  config saved by a newer seq2seq raises ValueError in one line."""
  out = HISTORY.upgrade(saved)
  for dotted in REMOVED_FIELDS:
    *sections, key = dotted.split(".")
    node = out
    for section in sections:
      node = node.get(section, {})
    node.pop(key, None)
  for dotted, value in ADDED_FIELDS.items():
    *sections, key = dotted.split(".")
    node = out
    for section in sections:
      node = node.setdefault(section, {})
    node.setdefault(key, value)
  return canonical(out)


def params_migration(version: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
  """What renames the parameter tree (a nested dict) of a checkpoint saved at format `version`
  to the current model's paths: the `params` functions of the later version steps, composed
  (`History.params`)."""
  return HISTORY.params(version)


def canonical(saved: dict[str, Any]) -> dict[str, Any]:
  """A config dict at the current version with its specs written canonically (defaults left
  out) and without the format version (not a setting), so that equal settings compare equal as
  text."""
  out = {k: v for k, v in copy.deepcopy(saved).items() if k != FIELD}
  model, train = out.get("model", {}), out.get("train", {})
  if "score" in model:
    model["score"] = str(scores.spec(model["score"]))
  if "attention" in model:
    model["attention"] = str(structures.spec(model["attention"]))
  if "addons" in model:
    model["addons"] = addons.spec_text(addons.specs(model["addons"]))
  if "features" in model:
    model["features"] = "+".join(str(s) for s in alignment_features.specs(model["features"]))
  if "softmax" in train:
    train["softmax"] = str(softmax.REGISTRY.spec(train["softmax"]))
  decode = out.get("decode", {})
  if "length_penalty" in decode:
    decode["length_penalty"] = str(length_penalties.spec(decode["length_penalty"]))
  if "loss_terms" in train:
    terms = objective.REGISTRY.specs(train["loss_terms"])
    train["loss_terms"] = "+".join(str(s) for s in terms)
  return out


# Settings of a mechanism that change nothing while the switch named beside them is off in both
# configs: a run saved with another value is the same run. Read by `checkpoints` on resuming.
# None now: model.copy_eos (inert without model.copy) moved into the add-on list at version 4,
# where an add-on that is off has no settings to differ.
INERT_UNLESS: dict[str, str] = {}

# Loss-term states that checkpoints saved before terms kept their own states held at the top of
# the tree: saved key -> the term whose state it is (REINFORCE's reward baseline).
SAVED_TERM_STATES = {"baseline": "reinforce"}

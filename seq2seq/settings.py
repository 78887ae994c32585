"""A run's typed settings, checked once, and the migration of saved configs to the current form.

`validate(config) -> RunSettings` is called once by every entry point (training, evaluation,
translation, averaging, the experiment scripts) before anything is built or loaded: it types
every section (`models.ModelSettings`, which parses the score, structure and feature specs and
checks the rules across them; `input_pipeline.DataSettings`; `optimisers.TrainSettings`;
`decode.DecodeSettings`), builds the objective (`objective.Objective`, whose terms check what
they need) and checks the remaining choices, so a mistake fails at once in one line. Below the
entry points the code reads the `RunSettings` (or the one section it needs), never the config;
the config itself is only written (a workdir's `config.json`) and compared with a saved one.

A saved config (a workdir's `config.json`, a committed study's run) carries its format version
(`saved_format.FIELD`); `HISTORY` lists the versions, each with the step that migrates to it:

0. the flat layout: 14 model fields that belong to one component (`model.local_window`,
   `model.coverage`, ...) and one train field per loss term (`train.fertility_weight`, ...);
1. components own their settings (`model.score`, `model.attention`, `model.features` and
   `train.loss_terms` are specs), no version field;
2. the file carries `format_version`.

`upgrade(saved)` applies the steps from the saved version on (a version newer than this code's
is refused), then the fields added and removed without a version bump (`ADDED_FIELDS`,
`REMOVED_FIELDS`). A workdir resumes through it (`checkpoints.config_differences`), and

    python -m seq2seq.settings --upgrade WORKDIR/config.json

rewrites the file at the current version. `python -m seq2seq.settings` lists every component
with its settings.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_collections

from seq2seq import saved_format
from seq2seq.common import registry
from seq2seq.data import input_pipeline, lexicon
from seq2seq.decoding import decode, ensemble, inference, length_penalties
from seq2seq.model import (
  alignment_features,
  decoders,
  encoders,
  models,
  normalisers,
  scores,
  structures,
)
from seq2seq.training import early_stopping, objective, optimisers, softmax

NONFINITE = ("stop", "skip")
DIRECTIONS = ("forward", "reverse")
# Numeric settings and the least value each may take (`validate` refuses less, in one line,
# before anything is written).
AT_LEAST = {
  "data.batch_size": 1,
  "decode.batch_size": 1,
  "decode.beam_size": 1,
  "decode.max_len_ratio": 0.0,
  "decode.max_input_tokens": 0,
  "train.num_steps": 0,
  "train.max_minutes": 0.0,
  "train.log_every": 1,
  "train.micro_batches": 1,
  "train.eval_every": 1,
  "train.checkpoint_every": 1,
  "train.keep_checkpoints": 1,
  "train.warmup_steps": 0,
  "train.clip_norm": 0.0,
  "train.label_smoothing": 0.0,
}


@dataclasses.dataclass(frozen=True)
class RunSettings:
  """Every section of a run's config, typed and checked (what `validate` returns), and the
  config they were read from: what a workdir's config.json holds, kept for writing that file
  and comparing it with a saved one, never read for a setting."""

  seed: int
  model: models.ModelSettings
  data: input_pipeline.DataSettings
  train: optimisers.TrainSettings
  decode: decode.DecodeSettings
  objective: objective.Objective
  config: ml_collections.ConfigDict = dataclasses.field(compare=False, repr=False)


# What an entry point takes: a run's config, or its settings typed by `validate` already.
Config = ml_collections.ConfigDict | RunSettings


def validate(config: Config) -> RunSettings:
  """Checks every setting of a run and returns them typed; raises ValueError with one line
  naming the setting and its valid values. Settings already typed are returned as they are."""
  if isinstance(config, RunSettings):
    return config
  for dotted, least in AT_LEAST.items():
    section, name = dotted.split(".")
    value = config[section][name]
    if value < least:
      raise ValueError(f"{dotted} must be at least {least}, got {value}")
  if not config.train.learning_rate > 0:
    raise ValueError(f"train.learning_rate must be positive, got {config.train.learning_rate}")
  data = input_pipeline.DataSettings.from_config(config)
  model = models.ModelSettings.from_config(config.model, data.sources)
  objective_ = objective.Objective.from_config(config)
  train = optimisers.TrainSettings.from_config(config)
  optimisers.make_optimizer(train)  # Optimiser, schedule and their settings.
  optimisers.anneal_factor(train, 0.0)  # The annealing's name.
  if not 0.0 <= config.train.anneal_to <= 1.0:
    raise ValueError(f"train.anneal_to must be in [0, 1], got {config.train.anneal_to}")
  if not 0.0 <= config.train.ema_decay < 1.0:
    raise ValueError(f"train.ema_decay must be in [0, 1), got {config.train.ema_decay}")
  if train.micro_batches > 1:
    _check_micro_batches(train, model, objective_)
  stopping, plateau = early_stopping.parse(train.early_stopping), optimisers.plateau_of(train)
  for field, rule in (("early_stopping", stopping), ("decay", plateau)):
    if rule is not None and rule.metric != "loss" and not train.valid_bleu:
      raise ValueError(
        f"train.{field}={getattr(train, field)!r} reads validation {rule.metric}, which "
        "train.valid_bleu=false does not compute: use the loss, or set it true"
      )
  if config.train.nonfinite not in NONFINITE:
    raise ValueError(f"train.nonfinite={config.train.nonfinite!r} is not one of {NONFINITE}")
  if model.direction not in DIRECTIONS:
    raise ValueError(f"model.direction={model.direction!r} is not one of {DIRECTIONS}")
  if model.direction == "reverse" and model.name != "agreement":
    raise ValueError("model.direction=reverse needs an agreement run (model.name=agreement)")
  if input_pipeline.subword_sampling(data) and "align" in objective_.batch_keys:
    raise ValueError(
      "data.subword_sampling and supervised attention are not combined (gold links name the "
      "deterministic segmentation's tokens)"
    )
  if config.data.batching not in input_pipeline.BATCHINGS:
    raise ValueError(
      f"data.batching={config.data.batching!r} is not one of {input_pipeline.BATCHINGS}"
    )
  dec = decode.DecodeSettings.from_config(config)
  if dec.ensemble_combination not in ensemble.COMBINATIONS:
    raise ValueError(
      f"decode.ensemble_combination={dec.ensemble_combination!r} is not one of "
      f"{ensemble.COMBINATIONS}"
    )
  members = ensemble.workdirs(dec)
  attention = ensemble.attention_setting(dec)
  if attention != "mean" and not (isinstance(attention, int) and attention < max(len(members), 1)):
    raise ValueError(
      f"decode.ensemble_attention={str(attention)!r}: 'mean' or a member index below {len(members)}"
    )
  if dec.shortlist:
    lexicon.load_cached(dec.shortlist)  # A missing or empty table: one line, before decoding.
    if dec.shortlist_frequent < 0 or dec.shortlist_per_word < 0:
      raise ValueError("decode.shortlist_frequent and decode.shortlist_per_word must be >= 0")
  if dec.shortlist_scope not in lexicon.SHORTLIST_SCOPES:
    raise ValueError(
      f"decode.shortlist_scope={dec.shortlist_scope!r} is not one of {lexicon.SHORTLIST_SCOPES}"
    )
  if model.copy and softmax.make(config.train.softmax).name != "full":
    raise ValueError(
      f"model.copy needs train.softmax=full: its extended vocabulary has no sampled form "
      f"(got {config.train.softmax!r})"
    )
  if model.copy and dec.shortlist:
    raise ValueError("model.copy decodes over the extended vocabulary: leave decode.shortlist off")
  # Beam search stops once no open beam can beat the best finished output; that bound assumes a
  # coverage penalty that never rises as an output grows, which a negative beta breaks. Each
  # length penalty checks its own settings (a negative alpha fails there).
  if dec.coverage_penalty < 0:
    raise ValueError(f"decode.coverage_penalty must be >= 0, got {dec.coverage_penalty}")
  if dec.mbr is not None and dec.candidates() < 2:
    raise ValueError(
      f"decode.mbr={str(dec.mbr)!r} chooses among candidates: draw several "
      "(decode.sampling=sample(n=...)) or widen the beam (decode.beam_size > 1)"
    )
  if dec.mbr is not None and dec.mbr.evidence == "model" and dec.sampling is not None:
    raise ValueError(
      f"decode.mbr={str(dec.mbr)!r}: evidence=model weighs an n-best list; samples are drawn "
      "in proportion to the model already (weighing them again uses p squared): use "
      "evidence=uniform"
    )
  decode.check_search(dec)
  inference.check_replace_unk(dec, model)
  return RunSettings(int(config.seed), model, data, train, dec, objective_, config)


def _check_micro_batches(train, model, objective_) -> None:
  """Refuses, in one line, what slicing a batch would change: a sampled softmax (its candidates
  are the batch's words), an agreement run (two directions of their own sizes) and loss terms
  that keep state across updates (a batch's mean reward)."""
  why = None
  if objective_.softmax.name != "full":
    why = f"train.softmax={train.softmax!r} samples its candidates from the whole batch"
  elif model.name == "agreement":
    why = "an agreement run weighs two directions of their own sizes"
  elif stateful := [t.name for t in objective_.terms if t.init_state() is not None]:
    why = f"the loss term {stateful[0]} keeps state from the whole batch"
  if why:
    raise ValueError(f"train.micro_batches={train.micro_batches} would change the update: {why}")


# --------------------------------------------------------------------------- saved configs
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


# Fields added or removed without a version bump: a field that changes the meaning of no other
# field needs no version step. They apply to a config of any version, after the version steps.
# Removed: intra-attention's memory size (128 slots; the memory now has one slot per decoder
# step, which changes nothing for outputs up to 128 words).
REMOVED_FIELDS = ("model.intra_attention_len",)

# Added, with the value that reproduces how the runs saved without the field behaved: a saved
# config without the field reads as if it held this value.
ADDED_FIELDS = {
  "model.decoder": "paper",
  "decode.length_penalty": "power",
  "model.normaliser": "softmax",
  "model.encoder": "rnn",
  "model.tie_embeddings": False,
  "model.layer_norm": False,
  "model.intra_attention": "",
  "model.lexicon_bias": "",
  "model.copy": False,
  "model.copy_eos": "target",  # What runs saved before the switch did (the default is "null").
  "data.train_pairs": 0,
  "model.multi_source": "concat",
  "train.loss_normalization": "tokens",
  "train.ema_decay": 0.0,
  "train.anneal": "none",
  "train.anneal_to": 0.0,
  "train.softmax": "full",
  "decode.ensemble": "",
  "decode.ensemble_combination": "mean_prob",
  "decode.ensemble_attention": "mean",
  "decode.shortlist": "",
  "decode.shortlist_frequent": 1000,
  "decode.shortlist_per_word": 10,
  "decode.shortlist_scope": "batch",
  "decode.max_input_tokens": 250,
  "decode.sampling": "",
  "decode.mbr": "",
  "decode.search": "",
  "train.early_stopping": "",
  "data.subword_sampling": "",
  "train.micro_batches": 1,
}


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


# Fields that a version step after the first reads from an old config and replaces.
REPLACED_FIELDS = ("decode.length_norm_alpha",)


def length_penalties_by_name(saved: dict[str, Any]) -> dict[str, Any]:
  """Version 3: `decode.length_norm_alpha` (score / length**alpha) became the spec
  `decode.length_penalty`: alpha a reads as "power(alpha=a)", 0 as "none"."""
  decode = saved.get("decode")
  if decode is not None and "length_norm_alpha" in decode:
    alpha = float(decode.pop("length_norm_alpha"))
    decode["length_penalty"] = "none" if alpha == 0 else f"power(alpha={alpha})"
  return saved


# The saved format's versions: step N takes a config saved at version N - 1 to version N. A
# change that renames or moves fields, changes what a value means, or renames the model's
# parameters (`Step.params`) is a new step at the end; a field only added or removed goes in
# ADDED_FIELDS / REMOVED_FIELDS instead.
HISTORY = saved_format.History(
  [
    saved_format.Step(1, components_own_their_settings),
    saved_format.Step(2, the_file_carries_its_version),
    saved_format.Step(3, length_penalties_by_name),
  ],
  unversioned=lambda saved: 0 if is_legacy(saved) else 1,
)
FORMAT_VERSION = HISTORY.current


def upgrade(saved: dict[str, Any]) -> dict[str, Any]:
  """A saved config dict in the current form (a new dict, without the format version): the
  version steps from the one it was saved at (`HISTORY`), the fields added since filled with
  `ADDED_FIELDS`, those removed since (`REMOVED_FIELDS`) dropped, the specs canonical. A
  config saved by a newer seq2seq raises ValueError in one line."""
  out = HISTORY.upgrade(saved)
  for dotted in REMOVED_FIELDS:
    section, key = dotted.split(".")
    out.get(section, {}).pop(key, None)
  for dotted, value in ADDED_FIELDS.items():
    section, key = dotted.split(".")
    out.setdefault(section, {}).setdefault(key, value)
  return canonical(out)


def params_migration(version: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
  """What renames the parameter tree (a nested dict) of a checkpoint saved at format `version`
  to the current model's paths: the `params` functions of the later version steps, composed
  (`saved_format.History.params`)."""
  return HISTORY.params(version)


def canonical(saved: dict[str, Any]) -> dict[str, Any]:
  """A config dict at the current version with its specs written canonically (defaults left
  out) and without the format version (not a setting), so that equal settings compare equal as
  text."""
  out = {k: v for k, v in copy.deepcopy(saved).items() if k != saved_format.FIELD}
  model, train = out.get("model", {}), out.get("train", {})
  if "score" in model:
    model["score"] = str(scores.spec(model["score"]))
  if "attention" in model:
    model["attention"] = str(structures.spec(model["attention"]))
  models.none_as_off(model)
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


def components_help() -> str:
  """Every registered component and its settings with their defaults."""
  sections = (
    ("model.encoder", encoders.REGISTRY),
    ("model.decoder", decoders.REGISTRY),
    ("model.score", scores.REGISTRY),
    ("model.attention", structures.REGISTRY),
    ("model.normaliser", normalisers.REGISTRY),
    ("model.features", alignment_features.REGISTRY),
    ("train.loss_terms", objective.REGISTRY),
    ("train.softmax", softmax.REGISTRY),
    ("decode.length_penalty", length_penalties.REGISTRY),
    ("decode.search", decode.SEARCHES),
  )
  return "\n\n".join(f"{field}:\n{reg.settings_help()}" for field, reg in sections)


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m seq2seq.settings", description=__doc__)
  parser.add_argument("--upgrade", metavar="CONFIG_JSON", help="rewrite a saved config.json")
  args = parser.parse_args(argv)
  if args.upgrade is None:
    print(components_help())
    return
  path = Path(args.upgrade)
  saved = json.loads(path.read_text())
  try:
    version, current = HISTORY.version(saved), upgrade(saved)
  except ValueError as e:
    raise SystemExit(f"error: {path}: {e}") from e
  path.write_text(json.dumps(HISTORY.stamped(current), indent=2, sort_keys=True) + "\n")
  print(f"{path}: saved at format version {version}, written at {FORMAT_VERSION}")


if __name__ == "__main__":
  main()

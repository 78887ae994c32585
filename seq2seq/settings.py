"""A run's typed settings, checked once, and the command that rewrites a saved config.

`validate(config) -> RunSettings` is called once by every entry point (training, evaluation,
translation, averaging, the experiment scripts) before anything is built or loaded: it types
every section (`models.ModelSettings`, which parses the score, structure and feature specs and
checks the rules across them; `input_pipeline.DataSettings`; `optimisers.TrainSettings`;
`decode.DecodeSettings`), builds the objective (`objective.Objective`, whose terms check what
they need) and checks the remaining choices, so a mistake fails at once in one line. Below the
entry points the code reads the `RunSettings` (or the one section it needs), never the config;
the config itself is only written (a workdir's `config.json`) and compared with a saved one.

Saved configs of older code are migrated by `saved_format.upgrade`, which holds the format's
versions and every compatibility table;

    python -m seq2seq.settings --upgrade WORKDIR/config.json

rewrites the file at the current version. `python -m seq2seq.settings` lists every component
with its settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import ml_collections

from seq2seq import saved_format
from seq2seq.data import input_pipeline, lexicon
from seq2seq.decoding import decode, ensemble, inference, length_penalties
from seq2seq.model import (
  addons,
  alignment_features,
  decoders,
  encoders,
  models,
  normalisers,
  scores,
  structures,
)
from seq2seq.training import early_stopping, objective, optimisers, softmax, trackers

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
  "decode.max_tokens": 0,
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
  trackers.parse(train.tracker)  # Its name and settings; the package is needed to train only.
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
  if dec.order not in input_pipeline.DECODE_ORDERS:
    raise ValueError(f"decode.order={dec.order!r} is not one of {input_pipeline.DECODE_ORDERS}")
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
  if model.extends_vocabulary and softmax.make(config.train.softmax).name != "full":
    raise ValueError(
      f"model.addons={model.addon_spec} needs train.softmax=full: its extended vocabulary has no "
      f"sampled form (got {config.train.softmax!r})"
    )
  if model.extends_vocabulary and dec.shortlist:
    raise ValueError(
      f"model.addons={model.addon_spec} decodes over the extended vocabulary: leave "
      "decode.shortlist off"
    )
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


def components_help() -> str:
  """Every registered component and its settings with their defaults."""
  sections = (
    ("model.encoder", encoders.REGISTRY),
    ("model.decoder", decoders.REGISTRY),
    ("model.score", scores.REGISTRY),
    ("model.attention", structures.REGISTRY),
    ("model.normaliser", normalisers.REGISTRY),
    ("model.features", alignment_features.REGISTRY),
    ("model.addons", addons.REGISTRY),
    ("train.loss_terms", objective.REGISTRY),
    ("train.softmax", softmax.REGISTRY),
    ("decode.length_penalty", length_penalties.REGISTRY),
    ("decode.search", decode.SEARCHES),
    ("train.tracker", trackers.REGISTRY),
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
    version, current = saved_format.HISTORY.version(saved), saved_format.upgrade(saved)
  except ValueError as e:
    raise SystemExit(f"error: {path}: {e}") from e
  path.write_text(
    json.dumps(saved_format.HISTORY.stamped(current), indent=2, sort_keys=True) + "\n"
  )
  print(f"{path}: saved at format version {version}, written at {saved_format.FORMAT_VERSION}")


if __name__ == "__main__":
  main()

"""Saved configs by format version (`seq2seq.saved_format`, `saved_format.HISTORY`): one saved at
every version reads back in the current form, field by field; one saved by a newer seq2seq is
refused in one line; a config saved and loaded comes back the same and carries the current
version; the parameter migrations of later steps compose in order."""

import json
import re

import ml_collections
import pytest
from helpers import ROOT

from configs import default, tiny
from seq2seq import checkpoints, saved_format, settings

RESULTS = ROOT / "experiments" / "results"
# Committed configs of each unversioned layout: a run saved before components owned their
# settings, and one saved after, before the file carried its version (the demo run's of
# 2026-11-26, kept here as its results folder now holds a newer run's).
VERSION_0 = RESULTS / "multi30k_plateau" / "config.json"
VERSION_1 = ROOT / "tests" / "saved" / "config_version_1.json"
FIELD = saved_format.FIELD


def current_form(config) -> dict:
  return json.loads(config.to_json_best_effort())


def fill(config: dict, dotted: str, value) -> None:
  """Sets the field `dotted` ("data.local.align") of a nested config dict where it is missing."""
  *sections, name = dotted.split(".")
  for section in sections:
    config = config.setdefault(section, {})
  config.setdefault(name, value)


def with_length_alpha(expected: dict) -> dict:
  """A saved config's expected current form before version 3: its length_norm_alpha (1, the
  default, in the committed ones) read as the length penalty "power"."""
  assert expected["decode"].pop("length_norm_alpha") == 1.0
  expected["decode"]["length_penalty"] = "power"
  return expected


def test_the_history_numbers_its_steps_and_each_says_what_changed():
  assert saved_format.FORMAT_VERSION == saved_format.HISTORY.current == 4
  assert [(s.version, s.name) for s in saved_format.HISTORY.steps] == [
    (1, "components_own_their_settings"),
    (2, "the_file_carries_its_version"),
    (3, "length_penalties_by_name"),
    (4, "addons_in_one_list"),
  ]
  assert all(s.change.startswith(f"Version {s.version}: ") for s in saved_format.HISTORY.steps)

  def documented(saved):
    """Version: documented."""
    return saved

  with pytest.raises(ValueError, match=r"numbered 1, 2, ... in order, got \[1, 3\]"):
    saved_format.History(
      [saved_format.Step(1, documented), saved_format.Step(3, documented)], lambda s: 0
    )
  with pytest.raises(ValueError, match="version step 1 \\(<lambda>\\) needs a docstring"):
    saved_format.History([saved_format.Step(1, lambda s: s)], lambda s: 0)


def test_version_0_the_flat_layout_reads_as_specs_field_by_field():
  saved = json.loads(VERSION_0.read_text())
  assert FIELD not in saved and saved_format.HISTORY.version(saved) == 0
  expected = json.loads(VERSION_0.read_text())
  for name in (*saved_format._MOVED, *saved_format._FEATURE_FIELDS):
    del expected["model"][name]
  for name in saved_format._TERM_FIELDS:
    del expected["train"][name]
  expected["model"].update(score="additive", attention="soft", features="", addons="")
  expected["train"]["loss_terms"] = ""
  # It predates the fields added since (train.loss_normalization it saved at its default).
  assert "decode" in expected and expected["train"]["loss_normalization"] == "tokens"
  missing = set(saved_format.ADDED_FIELDS) - set(checkpoints.flatten(expected))
  assert {"model.decoder", "model.normaliser", "decode.search"} <= missing
  for dotted in missing:
    fill(expected, dotted, saved_format.ADDED_FIELDS[dotted])
  assert saved_format.upgrade(saved) == with_length_alpha(expected)
  assert sorted(checkpoints.flatten(expected)) == sorted(
    checkpoints.flatten(current_form(tiny.get_config()))
  )


def test_version_0_settings_move_into_the_specs_of_the_components_chosen():
  """The committed flat config with components chosen whose settings it holds."""
  saved = json.loads(VERSION_0.read_text())
  saved["model"].update(
    attention="local_p", local_window=5, coverage=True, fertility=True, prev_attention_filters=3
  )
  saved["train"].update(fertility_weight=0.5, attention_supervision=0.2)
  new = saved_format.upgrade(saved)
  assert new["model"]["attention"] == "local_p(window=5)"
  assert new["model"]["score"] == "additive"  # max_src_len (100) belonged to `location` only.
  assert new["model"]["features"] == "coverage(fertility=true)+prev_attention(filters=3)"
  assert new["train"]["loss_terms"] == "fertility(weight=0.5)+supervision(weight=0.2)"
  assert saved_format.upgrade({**saved, FIELD: 0}) == new  # Version 0 named is version 0.


def test_version_1_a_committed_config_reads_with_the_fields_added_since():
  saved = json.loads(VERSION_1.read_text())
  assert FIELD not in saved and saved_format.HISTORY.version(saved) == 1
  expected = json.loads(VERSION_1.read_text())
  for name in saved_format.ADDON_FIELDS[:3]:  # It predates copy_eos.
    del expected["model"][name]
  expected["model"]["addons"] = ""  # Copying was off.
  expected["decode"]["max_input_tokens"] = 250
  expected["decode"]["shortlist_scope"] = "batch"
  expected["model"]["normaliser"], expected["model"]["encoder"] = "softmax", "rnn"
  for dotted, value in saved_format.ADDED_FIELDS.items():  # decode.sampling and decode.mbr too.
    fill(expected, dotted, value)
  expected = with_length_alpha(expected)
  assert saved_format.upgrade(saved) == expected
  assert saved_format.upgrade({**saved, FIELD: 1}) == expected


@pytest.mark.parametrize("saved", ["version_0", "version_1", "empty"])
def test_every_field_of_the_default_config_is_filled_in_an_old_config(saved):
  """The fields added since a config was saved come from configs/default.py: every one of its
  fields is in an old config's upgrade, at its default but for `OLD_BEHAVIOUR`."""
  saved = {
    "version_0": lambda: json.loads(VERSION_0.read_text()),
    "version_1": lambda: json.loads(VERSION_1.read_text()),
    "empty": lambda: {},
  }[saved]()
  upgraded = checkpoints.flatten(saved_format.upgrade(saved))
  defaults = checkpoints.flatten(current_form(default.get_config()))
  assert sorted(set(defaults) - set(upgraded)) == []
  assert set(saved_format.ADDED_FIELDS) == set(defaults)
  for dotted, value in saved_format.OLD_BEHAVIOUR.items():
    assert saved_format.ADDED_FIELDS[dotted] == value != defaults[dotted]


def test_a_config_saved_empty_reads_as_the_defaults_but_for_old_behaviour():
  expected = current_form(default.get_config())
  for dotted, value in saved_format.OLD_BEHAVIOUR.items():
    section, name = dotted.split(".")
    expected[section][name] = value
  assert saved_format.upgrade({}) == saved_format.canonical(expected)


@pytest.mark.parametrize(
  ("alpha", "penalty"), [(1.0, "power"), (0.6, "power(alpha=0.6)"), (0.0, "none")]
)
def test_version_2_length_norm_alpha_reads_as_the_length_penalty_it_was(alpha, penalty):
  """Version 3 named the length penalty: score / length**alpha is power(alpha), and alpha 0,
  the raw score, is none. Both rank every output alike (tests/decoding/test_length_penalties.py)."""
  config = tiny.get_config()
  saved = current_form(config)
  del saved["decode"]["length_penalty"]
  saved["decode"]["length_norm_alpha"] = alpha
  saved[FIELD] = 2
  config.decode.length_penalty = penalty
  assert saved_format.upgrade(saved) == current_form(config)


def saved_at_3(config) -> dict:
  """`config` (at the current version, no add-ons) as version 3 saved it: the add-on fields at
  their defaults of then, no `model.addons`."""
  saved = current_form(config)
  assert saved["model"].pop("addons") == ""
  saved["model"].update(intra_attention="", lexicon_bias="", copy=False, copy_eos="null")
  saved[FIELD] = 3
  return saved


@pytest.mark.parametrize(
  ("fields", "addons"),
  [
    ({}, ""),
    ({"intra_attention": "dot"}, "intra"),
    ({"intra_attention": "general"}, "intra(score=general)"),
    ({"intra_attention": "none", "lexicon_bias": "none"}, ""),
    ({"lexicon_bias": "train"}, "lexicon"),
    ({"lexicon_bias": "runs/a/lexicon.npz"}, "lexicon(table=runs/a/lexicon.npz)"),
    ({"copy": True}, "copy"),
    ({"copy": True, "copy_eos": "target"}, "copy(eos=target)"),
    ({"copy": False, "copy_eos": "target"}, ""),
    (
      {"copy": True, "lexicon_bias": "train", "intra_attention": "additive"},
      "intra(score=additive)+lexicon+copy",
    ),
  ],
)
def test_version_3_add_on_fields_read_as_the_add_on_list(fields, addons):
  """Version 4 moved `model.intra_attention`, `lexicon_bias`, `copy` and `copy_eos` into
  `model.addons`: each reads as its add-on's spec, and the run loads and validates."""
  config = tiny.get_config()
  saved = saved_at_3(config)
  saved["model"].update(fields)
  upgraded = saved_format.upgrade(saved)
  assert upgraded["model"]["addons"] == addons
  assert not set(saved_format.ADDON_FIELDS) & set(upgraded["model"])
  config.model.addons = addons
  assert upgraded == current_form(config)
  settings.validate(ml_collections.ConfigDict(upgraded))


def test_a_copying_config_saved_without_copy_eos_copies_the_eos_as_the_target_eos(tmp_path):
  """Runs saved before `model.copy_eos` existed sent the source EOS's attention to the target
  EOS: they read as copy(eos=target), not the default copy(eos=null)."""
  saved = saved_at_3(tiny.get_config())
  saved["model"]["copy"] = True
  del saved["model"]["copy_eos"]
  assert saved_format.upgrade(saved)["model"]["addons"] == "copy(eos=target)"
  del saved[FIELD]  # Saved before the file carried its version, too.
  assert saved_format.upgrade(saved)["model"]["addons"] == "copy(eos=target)"
  (tmp_path / "config.json").write_text(json.dumps(saved))
  assert checkpoints.load_config(tmp_path).model.addons == "copy(eos=target)"


def test_version_4_reads_as_it_was_saved_without_its_version():
  config = tiny.get_config()
  config.model.attention, config.train.loss_terms = "local_p(window=4)", "fertility(weight=0.3)"
  config.decode.length_penalty = "gnmt(alpha=0.7)"
  config.model.addons = "copy(eos=target)+intra(score=general)"
  saved = saved_format.HISTORY.stamped(current_form(config))
  assert saved[FIELD] == 4 and saved_format.HISTORY.version(saved) == 4
  config.model.addons = "intra(score=general)+copy(eos=target)"  # Read in canonical order.
  assert saved_format.upgrade(saved) == current_form(config)
  # A field added without a version bump is filled in at any version, this one too.
  del saved["decode"]["max_input_tokens"]
  assert saved_format.upgrade(saved)["decode"]["max_input_tokens"] == 250


@pytest.mark.parametrize("version", [5, 10])
def test_a_config_saved_by_a_newer_seq2seq_is_refused_in_one_line(tmp_path, version):
  saved = saved_format.HISTORY.stamped(current_form(tiny.get_config())) | {FIELD: version}
  message = f"saved by a newer seq2seq: format version {version} > 4"
  with pytest.raises(ValueError, match=message):
    saved_format.upgrade(saved)
  path = tmp_path / "config.json"
  path.write_text(json.dumps(saved))
  for read in (
    lambda: checkpoints.load_config(tmp_path),
    lambda: checkpoints.check_and_save_config(tmp_path, tiny.get_config()),
    lambda: checkpoints.check_model_config(tmp_path, tiny.get_config()),
  ):
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: {message}") as error:
      read()
    assert "\n" not in str(error.value)
  assert json.loads(path.read_text())[FIELD] == version  # Left as it was.
  with pytest.raises(SystemExit, match=f"error: {re.escape(str(path))}: {message}"):
    settings.main(["--upgrade", str(path)])
  with pytest.raises(ValueError, match="format_version='2' is not a format version"):
    saved_format.upgrade(saved | {FIELD: "2"})


def test_a_saved_config_loads_back_the_same_at_the_current_version(tmp_path):
  config = tiny.get_config()
  config.model.features = "coverage"
  checkpoints.check_and_save_config(tmp_path, config)
  saved = json.loads((tmp_path / "config.json").read_text())
  assert saved[FIELD] == saved_format.FORMAT_VERSION
  loaded = checkpoints.load_config(tmp_path)
  assert FIELD not in loaded and current_form(loaded) == current_form(config)
  assert checkpoints.saved_config_differences(tmp_path, loaded) == []
  checkpoints.check_model_config(tmp_path, loaded)
  checkpoints.check_and_save_config(tmp_path, loaded)  # Resumes; the file is unchanged.
  assert json.loads((tmp_path / "config.json").read_text()) == saved


def test_a_workdir_saved_at_version_1_resumes_and_is_then_at_the_current_version(tmp_path):
  config = tiny.get_config()
  (tmp_path / "config.json").write_text(config.to_json_best_effort())  # No version field.
  assert checkpoints.config_differences(current_form(config), current_form(config)) == []
  assert checkpoints.saved_config_differences(tmp_path, config) == []
  checkpoints.check_and_save_config(tmp_path, config)
  assert json.loads((tmp_path / "config.json").read_text())[FIELD] == saved_format.FORMAT_VERSION
  config.model.attn_dim += 1
  with pytest.raises(checkpoints.IncompatibleRunError, match="model.attn_dim"):
    checkpoints.check_and_save_config(tmp_path, config)


def test_upgrading_a_file_writes_the_current_version(tmp_path, capsys):
  path = tmp_path / "config.json"
  path.write_text(VERSION_1.read_text())
  settings.main(["--upgrade", str(path)])
  written = json.loads(path.read_text())
  assert written[FIELD] == 4 and written["model"]["addons"] == ""
  assert "copy" not in written["model"] and "lexicon_bias" not in written["model"]
  assert (
    written["decode"]["length_penalty"] == "power" and "length_norm_alpha" not in written["decode"]
  )
  assert capsys.readouterr().out.strip() == f"{path}: saved at format version 1, written at 4"
  settings.main(["--upgrade", str(path)])
  assert json.loads(path.read_text()) == written


def rename(tree: dict, old: str, new: str) -> dict:
  """`tree` with its top-level entry `old` moved to the path `new` ("a/b": tree["a"]["b"])."""
  out = dict(tree)
  value = out.pop(old)
  *parents, leaf = new.split("/")
  node = out
  for part in parents:
    node = node.setdefault(part, {})
  node[leaf] = value
  return out


def test_parameter_migrations_of_later_steps_compose_in_order():
  """A history whose steps 2 and 3 rename parameters, as a later version step would."""
  calls = []

  def step_1(saved):
    """Version 1: a field renamed."""
    calls.append(1)
    saved["b"] = saved.pop("a")
    return saved

  def step_2(saved):
    """Version 2: intra-attention's score gets its own module."""
    calls.append(2)
    return saved

  def step_3(saved):
    """Version 3: the intra-attention module is named for what it attends to."""
    calls.append(3)
    return saved

  history = saved_format.History(
    [
      saved_format.Step(1, step_1),
      saved_format.Step(2, step_2, params=lambda t: rename(t, "intra_score", "intra/score")),
      saved_format.Step(3, step_3, params=lambda t: rename(t, "intra", "intra_memory")),
    ],
    unversioned=lambda saved: 0,
  )
  tree = {"intra_score": {"kernel": 1.0}, "embed": {"embedding": 2.0}}
  renamed = {"intra_memory": {"score": {"kernel": 1.0}}, "embed": {"embedding": 2.0}}
  assert history.params(0)(tree) == renamed
  assert history.params(1)(tree) == renamed
  assert history.params(2)({"intra": {"score": {"kernel": 1.0}}}) == {
    "intra_memory": {"score": {"kernel": 1.0}}
  }
  assert history.params(3)(tree) == tree
  with pytest.raises(ValueError, match="format version 4 > 3"):
    history.params(4)
  assert history.upgrade({"a": 1}) == {"b": 1} and calls == [1, 2, 3]
  calls.clear()
  assert history.upgrade({"b": 1, FIELD: 2}) == {"b": 1} and calls == [3]
  # The real history renames no parameters yet: every version's checkpoints load as they are.
  for version in range(saved_format.FORMAT_VERSION + 1):
    assert saved_format.params_migration(version)(tree) == tree

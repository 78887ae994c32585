"""Settings owned by components: specs parsed into typed settings, one validate(config), and
configs saved in the older flat layout upgraded."""

import json

import pytest

from configs import tiny
from seq2seq import checkpoints, saved_format, settings
from seq2seq.common import registry
from seq2seq.model import alignment_features, scores, structures
from seq2seq.training import objective

REGISTRIES = (scores.REGISTRY, structures.REGISTRY, alignment_features.REGISTRY, objective.REGISTRY)


def test_a_spec_types_its_settings_and_prints_canonically():
  spec = structures.spec("monotonic( noise = 0.5, lookahead=3 )")
  assert spec.settings == structures.Monotonic.Settings(bias_init=0.0, noise=0.5, lookahead=3)
  assert isinstance(spec.settings.lookahead, int) and isinstance(spec.settings.noise, float)
  assert str(spec) == "monotonic(noise=0.5, lookahead=3)"
  assert str(structures.spec("local_p(window=10)")) == "local_p"  # Defaults are left out.
  cov = alignment_features.specs("prev_attention(filters=2)+coverage(fertility=True)")
  assert [str(s) for s in cov] == ["coverage(fertility=true)", "prev_attention(filters=2)"]
  assert alignment_features.specs("") == alignment_features.specs("none") == ()


@pytest.mark.parametrize("reg", REGISTRIES, ids=lambda r: r.field)
def test_every_component_builds_from_its_bare_name_and_round_trips(reg):
  for name in reg.names():
    spec = reg.spec(name)
    assert str(spec) == name and reg.spec(str(spec)) == spec


@pytest.mark.parametrize(
  "field,text,message",
  [
    (
      "model.attention",
      "local_p(windw=3)",
      "model.attention: local_p has no setting 'windw'; valid: window",
    ),
    (
      "model.attention",
      "soft(window=3)",
      "model.attention: soft has no setting 'window'; valid: none",
    ),
    ("model.attention", "local_p(window=3.5)", r"local_p\(window=...\) must be int, got '3.5'"),
    ("model.attention", "local_p(window=-1)", "window must be at least 1, got -1"),
    ("model.attention", "local_p(window=3", "is not a spec"),
    (
      "model.score",
      "bilinear",
      r"unknown score function 'bilinear' \(model.score\); valid: additive",
    ),
    ("model.score", "location(max_len=0)", "max_len must be positive"),
    ("model.features", "coverage+coverage", "names alignment feature 'coverage' twice"),
    ("train.loss_terms", "fertility(weight=heavy)", r"fertility\(weight=...\) must be float"),
    ("train.loss_terms", "supervision(loss=kl)", "loss='kl' is not one of"),
  ],
)
def test_a_wrong_spec_fails_in_one_line_naming_the_valid_choices(field, text, message):
  config = tiny.get_config()
  section, key = field.split(".")
  config[section][key] = text
  with pytest.raises(ValueError, match=message) as error:
    settings.validate(config)
  assert "\n" not in str(error.value)


@pytest.mark.parametrize(
  "overrides,message",
  [
    ({"model.attention": "conv", "model.score": "dot"}, "leave model.score at 'additive'"),
    ({"model.name": "rnnencdec", "model.attention": "local_m"}, "needs model.name=rnnsearch"),
    ({"model.features": "coverage", "model.score": "general"}, "extend the additive score"),
    ({"model.features": "coverage", "model.attention": "multihead"}, "has its own score"),
    ({"model.name": "agreement", "model.attention": "hard"}, "samples its positions"),
    ({"train.loss_terms": "reinforce"}, "reinforce trains attention that samples"),
    ({"train.loss_terms": "agreement"}, "agreement joins the two directions"),
    ({"train.loss_terms": "fertility", "model.name": "rnnencdec"}, "reads the attention"),
    # A gold link outside the attention's support: a constant loss, no gradient towards it.
    ({"train.loss_terms": "supervision", "model.normaliser": "sparsemax"}, "model.normaliser"),
    ({"train.loss_terms": "supervision(loss=mse)", "model.normaliser": "entmax15"}, "entmax15"),
    ({"train.loss_terms": "supervision", "model.attention": "local_m"}, "model.attention='local_m"),
    ({"train.loss_terms": "supervision", "model.attention": "local_p(window=3)"}, "local_p"),
    ({"model.direction": "reverse"}, "needs an agreement run"),
    ({"train.nonfinite": "ignore"}, "train.nonfinite='ignore' is not one of"),
    ({"train.optimizer": "lion"}, "lion"),
    ({"data.batching": "words"}, "data.batching='words' is not one of"),
    ({"decode.beam_size": 0}, "decode.beam_size must be at least 1"),
    (
      {"decode.length_penalty": "gnmt(alpha=-1)"},
      "decode.length_penalty='gnmt\\(alpha=-1\\)': alpha must be >= 0",
    ),
    (
      {"decode.length_penalty": "linear"},
      "unknown length penalty 'linear' \\(decode.length_penalty\\)",
    ),
    ({"train.num_steps": -5}, "train.num_steps must be at least 0, got -5"),
    ({"train.learning_rate": -1.0}, "train.learning_rate must be positive, got -1.0"),
    ({"data.batch_size": -4}, "data.batch_size must be at least 1, got -4"),
    ({"decode.batch_size": 0}, "decode.batch_size must be at least 1, got 0"),
    ({"decode.order": "random"}, "decode.order='random' is not one of \\('length', 'file'\\)"),
    ({"decode.max_tokens": -1}, "decode.max_tokens must be at least 0, got -1"),
    ({"decode.coverage_penalty": -0.2}, "decode.coverage_penalty must be >= 0"),
    ({"train.micro_batches": 0}, "train.micro_batches must be at least 1"),
    (
      {"train.micro_batches": 2, "train.softmax": "sampled(size=20)"},
      "samples its candidates from the whole batch",
    ),
    (
      {"train.micro_batches": 2, "model.attention": "hard"},
      "the loss term reinforce keeps state from the whole batch",
    ),
  ],
)
def test_validate_holds_the_rules_across_components(overrides, message):
  config = tiny.get_config()
  for dotted, value in overrides.items():
    section, key = dotted.split(".")
    config[section][key] = value
  with pytest.raises(ValueError, match=message):
    settings.validate(config)


@pytest.mark.parametrize("attention", ["soft", "monotonic", "hard", "conv", "multihead"])
def test_supervision_takes_attention_that_can_reach_every_position(attention):
  config = tiny.get_config()
  config.train.loss_terms, config.model.attention = "supervision", attention
  assert settings.validate(config).objective.term("supervision") is not None


def test_implied_terms_are_on_and_listing_them_changes_their_settings():
  config = tiny.get_config()
  config.model.attention = "hard"
  terms = objective.Objective.from_config(config)
  assert [t.name for t in terms.terms] == ["cross_entropy", "reinforce"]
  assert terms.term("reinforce").settings == objective.Reinforce.Settings()
  config.train.loss_terms = "reinforce(entropy_weight=0.5)"
  assert objective.Objective.from_config(config).term("reinforce").settings.entropy_weight == 0.5


def legacy_config(**model_fields):
  """tiny's config as saved before components owned their settings (flat fields)."""
  saved = json.loads(tiny.get_config().to_json_best_effort())
  del saved["model"]["features"], saved["train"]["loss_terms"]
  saved["model"].update(
    cosine_sharpness=10.0,
    max_src_len=40,
    coverage=False,
    fertility=False,
    fertility_max=2.0,
    prev_attention_filters=0,
    prev_attention_width=5,
    local_window=10,
    monotonic_bias_init=0.0,
    monotonic_noise=1.0,
    monotonic_lookahead=8,
    conv_filters=32,
    conv_width=3,
    num_heads=4,
  )
  saved["model"].update(model_fields)
  saved["train"].update(
    fertility_weight=0.0,
    attention_supervision=0.0,
    attention_supervision_loss="ce",
    reinforce_weight=1.0,
    entropy_weight=0.01,
    baseline_decay=0.9,
    agreement_weight=1.0,
  )
  return saved


def test_old_saved_configs_upgrade_to_specs():
  old = legacy_config(attention="local_p", local_window=5, coverage=True, fertility=True)
  old["train"]["fertility_weight"] = 0.5
  new = saved_format.upgrade(old)
  assert new["model"]["attention"] == "local_p(window=5)"
  assert new["model"]["features"] == "coverage(fertility=true)"
  assert new["model"]["score"] == "additive"  # max_src_len belonged to `location` only.
  assert new["train"]["loss_terms"] == "fertility(weight=0.5)"
  assert not set(new["model"]) - set(tiny.get_config().model)
  assert saved_format.upgrade(new) == new  # Current configs pass through.
  hard = saved_format.upgrade(legacy_config(attention="hard", score="location"))
  assert hard["model"]["score"] == "location(max_len=40)"
  assert hard["train"]["loss_terms"] == ""  # REINFORCE at its defaults is implied.


def test_an_old_workdir_resumes_and_a_changed_setting_is_still_refused(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps(legacy_config()))
  checkpoints.check_and_save_config(tmp_path, tiny.get_config())  # Same settings: resumes.
  (tmp_path / "config.json").write_text(json.dumps(legacy_config(attention="conv", conv_width=5)))
  config = tiny.get_config()
  config.model.attention = "conv(width=5)"
  checkpoints.check_and_save_config(tmp_path, config)
  config.model.attention = "conv(width=3)"  # The default: differs from the saved width 5.
  with pytest.raises(checkpoints.IncompatibleRunError, match="model.attention"):
    checkpoints.check_and_save_config(tmp_path, config)


def test_none_and_empty_are_the_same_off_setting():
  """A sweep lists "off" as "none" ("" cannot be listed): a study's baseline point
  `addons=none` is the plain run saved with "" (its symlinked runs are reused as they are)."""
  saved = json.loads(tiny.get_config().to_json_best_effort())
  config = tiny.get_config()
  config.model.addons = "none"
  assert checkpoints.config_differences(saved, json.loads(config.to_json_best_effort())) == []
  config.model.addons = "intra"
  new = json.loads(config.to_json_best_effort())
  assert checkpoints.config_differences(saved, new) == ["model.addons"]


def test_a_setting_of_a_mechanism_that_is_off_differs_in_nothing():
  """What copying does at the end of a sentence (model.copy_eos before version 4) changes no run
  that does not copy: a plain run saved with copy_eos="target" is the same run as one made today,
  so a study links it as its baseline point; with copying on, the setting is part of the
  model's add-on list."""
  saved = json.loads(tiny.get_config().to_json_best_effort())
  saved["model"].pop("addons")
  saved["model"].update(copy=False, copy_eos="target", intra_attention="", lexicon_bias="")
  saved[saved_format.FIELD] = 3
  config = tiny.get_config()
  assert checkpoints.config_differences(saved, json.loads(config.to_json_best_effort())) == []
  saved["model"]["copy"], config.model.addons = True, "copy"
  new = json.loads(config.to_json_best_effort())
  assert checkpoints.config_differences(saved, new) == ["model.addons"]


def test_a_decode_may_change_copyings_eos_and_no_other_add_on_setting(tmp_path):
  """copy(eos=...) is a decoding-time setting (`addons.Copying.DECODING_SETTINGS`): evaluating
  a copying run with the other eos builds the same model; another add-on list does not."""
  config = tiny.get_config()
  config.model.addons = "copy(eos=target)"
  checkpoints.check_and_save_config(tmp_path, config)
  config.model.addons = "copy(eos=null)"
  checkpoints.check_model_config(tmp_path, config)
  for other in ("", "copy+lexicon", "intra+copy(eos=target)"):
    config.model.addons = other
    with pytest.raises(checkpoints.IncompatibleRunError, match="model.addons"):
      checkpoints.check_model_config(tmp_path, config)


def test_a_run_resumes_with_its_corpus_cached_elsewhere(tmp_path):
  """data.cache_dir says where the built corpus lives, not what it holds: a study's committed
  runs (whose config.json names the cache by absolute path) resume and are reused after the
  repository moves, and resuming still refuses a change of corpus."""
  config = tiny.get_config()
  config.data.cache_dir = "/old/place/data"
  checkpoints.check_and_save_config(tmp_path, config)
  config.data.cache_dir = "/new/place/data"
  assert checkpoints.saved_config_differences(tmp_path, config) == []
  checkpoints.check_and_save_config(tmp_path, config)
  config.data.synthetic.train_pairs += 1
  assert checkpoints.saved_config_differences(tmp_path, config) == ["data.synthetic.train_pairs"]


def test_upgrade_rewrites_a_saved_file_and_the_listing_names_every_component(tmp_path, capsys):
  path = tmp_path / "config.json"
  path.write_text(json.dumps(legacy_config(attention="multihead", num_heads=2)))
  settings.main(["--upgrade", str(path)])
  assert json.loads(path.read_text())["model"]["attention"] == "multihead(heads=2)"
  settings.main([])
  listing = capsys.readouterr().out
  for reg in REGISTRIES:
    assert all(name in listing for name in reg.names())
  assert "local_p(window=10)" in listing and "reinforce(weight=1.0" in listing


def test_a_component_settings_class_must_be_a_dataclass():
  reg = registry.Registry("thing", field="x.thing")
  with pytest.raises(TypeError, match="Settings must be a dataclass"):
    reg.register("bad")(type("Bad", (), {"Settings": dict}))


def test_a_refused_setting_writes_nothing_and_the_corrected_command_runs(tmp_path):
  """data.batch_size=-4 ends in one error line before the workdir (config.json, the log) is
  written, so the corrected command is not refused as "a different config"."""
  from helpers import run_main

  workdir = tmp_path / "run"
  proc = run_main(workdir, "--config.data.batch_size=-4", check=False)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1] == "error: data.batch_size must be at least 1, got -4"
  assert not workdir.exists()
  run_main(workdir, "--config.train.num_steps=2", "--config.train.final_eval=false")

"""Ensembles (seq2seq/decoding/ensemble.py): decoded by the ordinary greedy and beam search, checked
against single models and a hand computation."""

import json
import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, decode_random_batch, random_batch, randomise

from configs import tiny
from seq2seq import evaluation, settings
from seq2seq.data.tokenizer import EOS_ID
from seq2seq.decoding import decode, ensemble
from seq2seq.training import train_state

VOCAB = 30


def tiny_model(name="rnnsearch", seed=0, eos_bias=1.0):
  cfg = tiny.get_config()
  cfg.model.name = name
  model = randomise(build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(seed)), seed=seed)
  model.w_o.bias.value = model.w_o.bias.value.at[EOS_ID].add(eos_bias)
  return model


def decoded(model, beam_size, seed=3):
  return decode_random_batch(model, beam_size, 12, seed=seed, src_len=7, vocab=VOCAB)


def test_combinations_match_a_hand_computation():
  p = np.array([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3]])
  log_p = [jnp.log(jnp.asarray(row, jnp.float32)) for row in p]
  mean_prob = np.asarray(ensemble.combine_log_probs(log_p, "mean_prob"))
  np.testing.assert_allclose(np.exp(mean_prob), p.mean(axis=0), rtol=1e-6)
  mean_log = np.asarray(ensemble.combine_log_probs(log_p, "mean_logprob"))
  np.testing.assert_allclose(mean_log, np.log(p).mean(axis=0), rtol=1e-6)
  with pytest.raises(ValueError, match="is not one of"):
    ensemble.combine_log_probs(log_p, "max")


@pytest.mark.parametrize(
  "copies,combination,beam_size",
  [(1, "mean_prob", 1), (1, "mean_logprob", 3), (2, "mean_prob", 3), (2, "mean_logprob", 1)],
)
def test_an_ensemble_of_one_or_of_two_copies_decodes_as_the_model(copies, combination, beam_size):
  model = tiny_model()
  alone = decoded(model, beam_size)
  members = [model] + [tiny_model() for _ in range(copies - 1)]  # The same parameters again.
  got = decoded(ensemble.Ensemble(members, combination), beam_size)
  np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(alone.tokens))
  np.testing.assert_allclose(np.asarray(got.scores), np.asarray(alone.scores), atol=1e-4)
  np.testing.assert_allclose(np.asarray(got.alpha), np.asarray(alone.alpha), atol=1e-6)


def test_members_of_different_architectures_decode_together_with_a_chosen_attention():
  search, encdec = tiny_model(seed=0), tiny_model("rnnencdec", seed=1)
  both = decoded(ensemble.Ensemble([search, encdec]), 3)
  assert np.isfinite(np.asarray(both.scores)).all()
  lengths = np.asarray(both.lengths)
  rows = np.asarray(both.alpha).sum(-1)  # RNNsearch's attention alone: rows sum to 1.
  for b, n in enumerate(lengths):
    np.testing.assert_allclose(rows[b, :n], 1.0, atol=1e-5)
  assert not ensemble.Ensemble([encdec, search], attention=0).uses_attention
  assert ensemble.Ensemble([encdec, search], attention=1).uses_attention
  with pytest.raises(ValueError, match="a member index < 2"):
    ensemble.Ensemble([encdec, search], attention=2)
  # Teacher-forced: the log of the mean of the members' probabilities.
  b = random_batch(seed=4, batch=2, src_len=5, tgt_len=4, vocab=VOCAB)
  args = (jnp.asarray(b["src"]), jnp.asarray(b["src_mask"]), jnp.asarray(b["tgt_in"]))
  want = np.log(
    np.mean([np.asarray(jax.nn.softmax(m(*args), axis=-1)) for m in (search, encdec)], axis=0)
  )
  got = ensemble.Ensemble([search, encdec])(*args)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def _config(members, **decode):
  config = tiny.get_config()
  config.decode.num_heatmaps = 0
  config.decode.update(decode)
  config.decode.ensemble = ",".join(str(m) for m in members)
  return config


def _decoding(members) -> decode.DecodeSettings:
  return decode.DecodeSettings.from_config(_config(members))


def test_an_ensemble_of_a_run_with_itself_evaluates_as_the_run(trained, tmp_path):
  single = json.loads((trained / "eval" / "test" / "results.json").read_text())
  config = _config([trained, trained])
  results = evaluation.evaluate_splits(config, tmp_path / "ens")
  assert results["test"]["bleu"] == pytest.approx(single["bleu"], abs=1e-9)
  assert results["test"]["loss"] == pytest.approx(single["loss"], rel=1e-4)
  hyps = (tmp_path / "ens" / "eval" / "test" / "hypotheses.txt").read_text()
  assert hyps == (trained / "eval" / "test" / "hypotheses.txt").read_text()


@pytest.mark.parametrize("side", ["src", "tgt"])
def test_members_with_other_vocabularies_are_refused_in_one_line(trained, tmp_path, side):
  """On either side, between members and between the members and the ensemble's workdir."""
  other = tmp_path / "other"
  shutil.copytree(trained / "vocab", other / "vocab")
  vocab_file = next(p for p in sorted((other / "vocab" / side).glob("*")) if p.is_file())
  vocab_file.write_text(vocab_file.read_text() + "extra\n")
  with pytest.raises(ValueError, match=rf"must share vocabularies: .*other/vocab/{side} differs"):
    ensemble.prepare_workdir(_decoding([trained, other]), tmp_path / "ens")
  ens = tmp_path / "ens2"  # A workdir holding the other run's vocabularies.
  shutil.copytree(other / "vocab", ens / "vocab")
  with pytest.raises(ValueError, match=rf"ens2/vocab/{side} differs from the ensemble members'"):
    ensemble.prepare_workdir(_decoding([trained]), ens)


@pytest.mark.parametrize(
  "decode_settings,message",
  [
    ({"ensemble_combination": "max"}, "decode.ensemble_combination='max' is not one of"),
    ({"ensemble_attention": "2"}, "'mean' or a member index below 2"),
  ],
)
def test_ensemble_settings_are_validated(decode_settings, message):
  with pytest.raises(ValueError, match=message):
    settings.validate(_config(["a", "b"], **decode_settings))


def test_mean_prob_of_identical_members_is_their_distribution():
  log_p = jax.nn.log_softmax(jnp.asarray([[1.0, 2.0, 3.0]]), axis=-1)
  both = ensemble.combine_log_probs([log_p, log_p], "mean_prob")
  np.testing.assert_allclose(np.asarray(both), np.asarray(log_p), atol=1e-6)
  assert math.isclose(float(jnp.sum(jnp.exp(both))), 1.0, rel_tol=1e-6)


def test_an_ensembles_workdir_need_not_exist_before_eval(tmp_path, capsys):
  """`--mode=eval` with `decode.ensemble` creates its workdir; the error here is about the
  members (none was trained), not "no run in WORKDIR"."""
  from seq2seq import cli

  config = _config([tmp_path / "a", tmp_path / "b"])
  assert cli.run("eval", config, tmp_path / "ens") == 1
  err = capsys.readouterr().err
  assert "is not a trained run" in err and "no such directory" not in err


def test_a_copying_member_and_a_plain_one_are_refused_in_one_line():
  """Their outputs span different vocabularies (V + S against V): no mean of the two means
  anything."""
  cfg = tiny.get_config()
  plain = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), VOCAB, VOCAB)
  cfg.model.addons = "copy"
  copying = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), VOCAB, VOCAB)
  members = {"a": plain, "b": copying}
  with pytest.raises(ValueError, match="must all copy from the source"):
    ensemble.load(_decoding(["a", "b"]), lambda workdir: members[str(workdir)])
  both = ensemble.load(_decoding(["b", "b"]), lambda workdir: members[str(workdir)])
  assert both.model().extends_vocabulary

"""Bidirectional agreement (model.name=agreement): the trace bonus against a loop, the reverse
batch, the joint loss against plain RNNsearch, and one run through main.py in both directions."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, random_batch, randomise, run_main

from configs import tiny
from seq2seq import evaluation, restoring
from seq2seq.data import tokenizer as tok
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.training import objective, optimisers, train_state

SRC_VOCAB, TGT_VOCAB = 40, 45


def agreement_config(weight=1.0):
  cfg = tiny.get_config()
  cfg.model.name = "agreement"
  cfg.train.loss_terms = f"agreement(weight={weight})"
  return cfg


def state_of(model, cfg):
  graphdef, params = nnx.split(model, nnx.Param)
  tx = optimisers.make_optimizer(optimisers.TrainSettings.from_config(cfg))
  return train_state.TrainState(jnp.zeros((), jnp.int32), params, tx.init(params), graphdef, tx)


def jnp_batch(seed):
  return {k: jnp.asarray(v) for k, v in random_batch(seed=seed, vocab=SRC_VOCAB).items()}


def test_agreement_bonus_equals_a_loop_over_real_positions():
  rng = np.random.default_rng(0)
  batch, tgt_len, src_len = 3, 5, 6
  # Weights everywhere, padding included, so the masks have something to remove.
  alpha_fwd = rng.uniform(size=(batch, tgt_len, src_len)).astype(np.float32)
  alpha_rev = rng.uniform(size=(batch, src_len, tgt_len)).astype(np.float32)
  src_mask = (np.arange(src_len) < np.array([[6], [3], [0]])).astype(np.int32)
  tgt_mask = (np.arange(tgt_len) < np.array([[2], [5], [0]])).astype(np.int32)
  expected = 0.0
  for b in range(batch):
    for t in range(tgt_len):
      for s in range(src_len):
        if tgt_mask[b, t] and src_mask[b, s]:
          expected += float(alpha_fwd[b, t, s]) * float(alpha_rev[b, s, t])
  got = objective.agreement_bonus(alpha_fwd, alpha_rev, src_mask, tgt_mask)
  assert float(got) == pytest.approx(expected, rel=1e-5)
  # d bonus / d A_fwd[b, t, s] = A_rev[b, s, t] on real pairs, 0 elsewhere.
  grad = jax.grad(objective.agreement_bonus)(alpha_fwd, alpha_rev, src_mask, tgt_mask)
  want = np.swapaxes(alpha_rev, 1, 2) * tgt_mask[:, :, None] * src_mask[:, None, :]
  np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-6)


def test_reverse_batch_swaps_the_sides_and_keeps_eos_paired():
  w = lambda *ids: list(ids)  # noqa: E731
  # Pair 0: source words 11 12 13, target words 21 22; pair 1: source 14, target 23 24 25.
  batch = {
    "src": np.array([w(11, 12, 13, EOS_ID, PAD_ID), w(14, EOS_ID, 0, 0, 0)], np.int32),
    "src_mask": np.array([w(1, 1, 1, 1, 0), w(1, 1, 0, 0, 0)], np.int32),
    "tgt_in": np.array([w(BOS_ID, 21, 22, 0), w(BOS_ID, 23, 24, 25)], np.int32),
    "tgt_out": np.array([w(21, 22, EOS_ID, 0), w(23, 24, 25, EOS_ID)], np.int32),
    "tgt_mask": np.array([w(1, 1, 1, 0), w(1, 1, 1, 1)], np.int32),
    "align": np.zeros((2, 4, 5), np.float32),
  }
  batch["align"][0, 1, 2] = 1.0  # Target word 1 of pair 0 is aligned to source word 2.
  rev = {k: np.asarray(v) for k, v in objective.reverse_batch(batch).items()}
  np.testing.assert_array_equal(rev["src"], batch["tgt_out"])
  np.testing.assert_array_equal(rev["src_mask"], batch["tgt_mask"])
  np.testing.assert_array_equal(
    rev["tgt_in"], [w(BOS_ID, 11, 12, 13, PAD_ID), w(BOS_ID, 14, PAD_ID, PAD_ID, PAD_ID)]
  )
  np.testing.assert_array_equal(rev["tgt_out"], batch["src"])
  np.testing.assert_array_equal(rev["tgt_mask"], batch["src_mask"])
  assert rev["align"].shape == (2, 5, 4) and rev["align"][0, 2, 1] == 1.0
  assert rev["align"].sum() == 1.0


# The loss as training compiles it, one program per model and objective (outside `jit` each
# operation and the decoders' scans compiled at every call).
_loss = jax.jit(objective.loss_fn, static_argnums=(3, 4))


def test_forward_starts_from_plain_rnnsearch_and_weight_zero_splits_the_loss():
  cfg = agreement_config(weight=0.0)
  plain_cfg = tiny.get_config()
  fresh = build_model(cfg.model, SRC_VOCAB, TGT_VOCAB, rngs=nnx.Rngs(3))
  plain_fresh = build_model(plain_cfg.model, SRC_VOCAB, TGT_VOCAB, rngs=nnx.Rngs(3))
  plain_tree = nnx.to_pure_dict(nnx.state(plain_fresh))
  assert jax.tree.structure(nnx.to_pure_dict(nnx.state(fresh))["forward"]) == jax.tree.structure(
    plain_tree
  )
  jax.tree.map(
    np.testing.assert_array_equal, nnx.to_pure_dict(nnx.state(fresh.forward)), plain_tree
  )

  model = randomise(fresh, seed=4)
  b = jnp_batch(seed=5)
  ts = state_of(model, cfg)
  independent = objective.Objective.from_config(cfg)  # Weight 0.
  loss, (ce, tokens, extras) = _loss(ts.params, ts, b, None, independent)
  # The same forward and reverse weights as plain RNNsearch models.
  fwd = state_of(model.forward, plain_cfg)
  rev = state_of(model.reverse, plain_cfg)
  plain = objective.Objective.from_config(plain_cfg)
  fwd_loss, (fwd_ce, fwd_tokens, fwd_extras) = _loss(fwd.params, fwd, b, None, plain)
  rev_loss, _ = _loss(rev.params, rev, objective.reverse_batch(b), None, plain)
  assert fwd_extras == {}
  assert float(extras["forward_loss"]) == pytest.approx(float(fwd_loss), rel=1e-6)
  assert float(extras["reverse_loss"]) == pytest.approx(float(rev_loss), rel=1e-6)
  assert float(loss) == pytest.approx(float(fwd_loss) + float(rev_loss), rel=1e-6)
  assert float(ce) == pytest.approx(float(fwd_ce), rel=1e-6) and float(tokens) == float(fwd_tokens)
  assert 0.0 < float(extras["agreement"]) <= 1.0
  # With weight 1 the bonus is subtracted.
  weight_one = objective.Objective.from_config(agreement_config(weight=1.0))
  loss1, _ = _loss(ts.params, ts, b, None, weight_one)
  assert float(loss1) == pytest.approx(float(loss) - float(extras["agreement"]), rel=1e-5)


def test_agreement_gradients_are_finite_and_reach_both_models():
  cfg = agreement_config()
  cfg.model.features, cfg.train.loss_terms = "coverage", "fertility"  # Composes with features.
  model = randomise(build_model(cfg.model, SRC_VOCAB, TGT_VOCAB, rngs=nnx.Rngs(0)))
  ts = state_of(model, cfg)
  b = jnp_batch(seed=6)

  def loss(params):
    return objective.loss_fn(params, ts, b, None, objective.Objective.from_config(cfg))[0]

  def bonus_only(params):
    bonus = objective.Objective((objective.CrossEntropy(), objective.AgreementBonus()))
    return objective.loss_fn(params, ts, b, None, bonus)[1][2]["agreement"]

  both = jax.jit(lambda p: (jax.grad(loss)(p), jax.grad(bonus_only)(p)))(ts.params)
  for grads in map(nnx.to_pure_dict, both):
    for direction in ("forward", "reverse"):
      leaves = jax.tree.leaves(grads[direction])
      assert all(bool(jnp.all(jnp.isfinite(g))) for g in leaves), direction
      assert sum(float(jnp.abs(g).sum()) for g in leaves) > 0, direction


def test_direction_state_needs_an_agreement_run():
  cfg = tiny.get_config()
  plain = state_of(build_model(cfg.model, 20, 20, rngs=nnx.Rngs(0)), cfg)
  assert restoring.direction_state(plain, "forward") is plain
  with pytest.raises(ValueError, match="model.name=agreement"):
    restoring.direction_state(plain, "reverse")
  with pytest.raises(ValueError, match="'sideways' is not one of"):
    restoring.direction_state(plain, "sideways")


@pytest.mark.slow
def test_main_trains_saves_and_decodes_both_directions(tmp_path):
  import orbax.checkpoint as ocp

  from seq2seq import translate

  workdir = tmp_path / "agree"
  cfg = agreement_config()
  cfg.train.num_steps, cfg.train.log_every = 4, 2
  cfg.train.eval_every = cfg.train.checkpoint_every = 4
  cfg.decode.beam_size, cfg.decode.num_heatmaps = 1, 0
  cfg.data.long_test_min_words, cfg.data.long_test_max_words = 12, 18  # Tiny: 3 to 18 words.
  flags = [
    "--config.model.name=agreement",
    "--config.train.num_steps=4",
    "--config.train.log_every=2",
    "--config.train.eval_every=4",
    "--config.train.checkpoint_every=4",
    "--config.decode.beam_size=1",
    "--config.decode.num_heatmaps=0",
    "--config.data.long_test_min_words=12",
    "--config.data.long_test_max_words=18",
  ]
  run_main(workdir, *flags)

  tree = ocp.StandardCheckpointer().restore(workdir / "checkpoints" / "4" / "state")
  params = tree["params"]
  assert set(params) == {"forward", "reverse"}
  src_v, tgt_v = (tok.load(workdir / "vocab" / side).size for side in ("src", "tgt"))
  assert params["forward"]["w_o"]["kernel"]["value"].shape[-1] == tgt_v
  assert params["reverse"]["w_o"]["kernel"]["value"].shape[-1] == src_v
  assert params["reverse"]["encoder"]["embed"]["embedding"]["value"].shape[0] == tgt_v
  rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  train_rows = [r for r in rows if r["split"] == "train"]
  assert [r["step"] for r in train_rows] == [2, 4]
  assert all({"forward_loss", "reverse_loss", "agreement"} <= set(r) for r in train_rows)
  assert [r["step"] for r in rows if r["split"] == "valid" and "bleu" in r] == [4]
  # The workdir is evaluated with the forward model, as a plain RNNsearch would be, on the
  # valid, test and long-sentence splits.
  results = {
    split: json.loads((workdir / "eval" / split / "results.json").read_text())
    for split in ("valid", "test", "test_long")
  }
  assert results["test"]["num_sentences"] == 64 and 0.0 <= results["test"]["aer"] <= 1.0
  assert 0 < results["test_long"]["num_sentences"] < 64
  assert all(b["min_len"] >= 11 for b in results["test_long"]["bleu_by_length"])

  # The reverse model on its own: evaluated on the corpus read target -> source ...
  cfg.model.direction = "reverse"
  reverse = evaluation.evaluate_splits(cfg, workdir)
  assert (workdir / "eval_reverse" / "test" / "results.json").exists()
  assert reverse["test"]["num_sentences"] == 64 and 0.0 <= reverse["test"]["aer"] <= 1.0
  assert reverse["test"]["loss"] != results["test"]["loss"]
  # ... and translating French-like text into English-like text.
  source = tmp_path / "fr.txt"
  source.write_text("le chat dort .\n\nles hommes mangent des pommes .\n")
  out, att = tmp_path / "en.txt", tmp_path / "att.jsonl"
  counts = translate.translate_file(cfg, workdir, str(source), str(out), str(att))
  assert counts["lines"] == 3 and counts["empty"] == 1
  lines = out.read_text().split("\n")[:-1]
  assert len(lines) == 3 and lines[1] == ""
  first = np.asarray(json.loads(att.read_text().splitlines()[0])["attention"])
  assert first.shape[1] == 5  # 4 French words + EOS.
  np.testing.assert_allclose(first.sum(axis=1), 1.0, atol=1e-3)

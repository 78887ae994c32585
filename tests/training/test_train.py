"""Training library: loss, optimisers, and a tiny model overfitting fixed pairs per score."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_batch

from configs import tiny
from seq2seq import settings
from seq2seq.model import scores
from seq2seq.training import objective, optimisers, train_state


def test_cross_entropy_matches_numpy_and_ignores_padding():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
  targets = np.array([[1, 2, 0], [4, 0, 0]])
  mask = np.array([[1, 1, 0], [1, 0, 0]])
  total, tokens = objective.cross_entropy(jnp.asarray(logits), targets, mask)
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  want = -(logp[0, 0, 1] + logp[0, 1, 2] + logp[1, 0, 4])
  np.testing.assert_allclose(float(total), want, rtol=1e-5)
  assert float(tokens) == 3.0


def test_label_smoothing_is_zero_at_the_smoothed_target():
  vocab, ls = 6, 0.2
  q = np.full(vocab, ls / vocab)
  q[2] += 1 - ls
  logits = jnp.log(jnp.asarray(q, jnp.float32))[None, None]
  total, _ = objective.cross_entropy(logits, np.array([[2]]), np.array([[1]]), ls)
  assert abs(float(total)) < 1e-5
  worse, _ = objective.cross_entropy(logits * 2, np.array([[2]]), np.array([[1]]), ls)
  assert float(worse) > 1e-3


def test_label_smoothing_is_zero_at_the_smoothed_target_of_a_copied_word():
  """A copying model's target V + j lies outside the smoothed vocabulary: its smoothed target
  puts 1 - ls there and ls / V on each of the V words, whose entropy differs from the in-vocabulary
  case; the loss at that distribution must still be 0."""
  vocab, extended, ls = 6, 9, 0.2
  q = np.full(extended, 1e-30)
  q[:vocab] = ls / vocab
  q[7] = 1 - ls  # Source position 1's copy entry.
  logits = jnp.log(jnp.asarray(q, jnp.float32))[None, None]
  total, _ = objective.cross_entropy(logits, np.array([[7]]), np.array([[1]]), ls, vocab)
  assert abs(float(total)) < 1e-5
  q[7], q[2] = 1e-30, q[2] + 1 - ls  # The same mass on an in-vocabulary word instead.
  logits = jnp.log(jnp.asarray(q, jnp.float32))[None, None]
  total, _ = objective.cross_entropy(logits, np.array([[2]]), np.array([[1]]), ls, vocab)
  assert abs(float(total)) < 1e-5


def test_unknown_optimizer_lists_valid(tiny_config):
  tiny_config.train.optimizer = "lion"
  with pytest.raises(ValueError, match="'lion' is not one of adadelta, adam, sgd"):
    optimisers.make_optimizer(optimisers.TrainSettings.from_config(tiny_config))


def test_adadelta_uses_paper_constants(tiny_config):
  cfg = tiny_config.train
  cfg.optimizer, cfg.learning_rate, cfg.clip_norm = "adadelta", 1.0, 0.0
  tx = optimisers.make_optimizer(optimisers.TrainSettings.from_config(tiny_config))
  g = {"w": jnp.asarray([0.5])}
  updates, _ = tx.update(g, tx.init(g), g)
  # First Adadelta step: -sqrt(0 + eps) / sqrt((1 - rho) g^2 + eps) * g.
  want = -np.sqrt(1e-6) / np.sqrt(0.05 * 0.25 + 1e-6) * 0.5
  np.testing.assert_allclose(float(updates["w"][0]), want, rtol=1e-4)


def test_gradient_clipping(tiny_config):
  cfg = tiny_config.train
  cfg.optimizer, cfg.learning_rate, cfg.clip_norm = "sgd", 1.0, 1.0
  tx = optimisers.make_optimizer(optimisers.TrainSettings.from_config(tiny_config))
  g = {"w": jnp.asarray([30.0, 40.0])}
  updates, _ = tx.update(g, tx.init(g))
  np.testing.assert_allclose(np.asarray(updates["w"]), [-0.6, -0.8], rtol=1e-6)


@pytest.mark.parametrize(
  "name,score", [("rnnsearch", s) for s in scores.names()] + [("rnnencdec", "additive")]
)
def test_tiny_model_overfits_fixed_pairs(tiny_config, name, score):
  cfg = tiny_config
  cfg.model.name, cfg.model.score = name, score
  cfg.train.optimizer, cfg.train.learning_rate = "adam", 1e-2
  batch = random_batch(seed=7, batch=8, src_len=6, tgt_len=5, vocab=30, pad_rows=True)
  state = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), 30, 30)
  step = jax.jit(functools.partial(train_state.train_step, run=settings.validate(cfg)))
  first = None
  for i in range(150):
    state, metrics = step(state, batch, jax.random.key(i))
    first = float(metrics["loss"]) if first is None else first
  final = float(
    train_state.eval_step(state, batch)["loss_sum"] / train_state.eval_step(state, batch)["tokens"]
  )
  assert first > 3.0
  assert final < 0.3, f"{name}/{score}: loss {first:.2f} -> {final:.3f}"


def test_dropout_is_deterministic_given_the_key(tiny_config):
  cfg = tiny_config
  cfg.model.dropout = 0.3
  batch = random_batch(seed=8, vocab=30)
  state = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), 30, 30)
  step = jax.jit(functools.partial(train_state.train_step, run=settings.validate(cfg)))
  _, m1 = step(state, batch, jax.random.key(1))
  _, m2 = step(state, batch, jax.random.key(1))
  _, m3 = step(state, batch, jax.random.key(2))
  assert float(m1["loss"]) == float(m2["loss"]) != float(m3["loss"])
  assert int(step(state, batch, jax.random.key(1))[0].step) == 1


def test_sentence_normalisation_differs_from_token_mean_by_tokens_over_sentences(tiny_config):
  """GroundHog's cost (summed over a sentence's words, mean over sentences) is the per-token mean
  times tokens / sentences: same direction of every gradient, a batch-dependent scale."""
  state = train_state.create_train_state(settings.validate(tiny_config), jax.random.key(0), 50, 50)
  b = random_batch(seed=2, vocab=50)
  b["tgt_mask"][3] = 0  # A padding row (no target word) is no sentence.
  tokens, sentences = float(b["tgt_mask"].sum()), 3.0

  def loss_and_grads(normalization):
    weights = objective.Objective((objective.CrossEntropy(),), normalization)
    fn = lambda p: objective.loss_fn(p, state, b, None, weights)
    (loss, (total, _, extras)), grads = jax.jit(jax.value_and_grad(fn, has_aux=True))(state.params)
    return loss, total, extras, grads

  per_token, total, _, g_tok = loss_and_grads("tokens")
  per_sentence, _, extras, g_sent = loss_and_grads("sentences")
  np.testing.assert_allclose(per_token, total / tokens, rtol=1e-6)
  np.testing.assert_allclose(per_sentence, total / sentences, rtol=1e-6)
  np.testing.assert_allclose(extras["ce_loss"], per_token, rtol=1e-6)
  for a, c in zip(jax.tree.leaves(g_tok), jax.tree.leaves(g_sent), strict=True):
    np.testing.assert_allclose(c, a * tokens / sentences, rtol=1e-4, atol=1e-9)
  tiny_config.train.loss_normalization = "words"
  with pytest.raises(ValueError, match="'words' is not one of"):
    objective.Objective.from_config(tiny_config)


def test_paper_configs_use_groundhog_normalisation():
  from configs import rnnencdec, rnnsearch

  for module in (rnnsearch, rnnencdec):
    assert module.get_config().train.loss_normalization == "sentences"
  from configs import default

  assert default.get_config().train.loss_normalization == "tokens"


@pytest.mark.parametrize(
  "anneal,at_half", [("linear", 1.0 - 0.9 * 0.5), ("cosine", 1.0 - 0.9 * 0.5)]
)
def test_anneal_falls_from_one_to_anneal_to_over_the_budget(tiny_config, anneal, at_half):
  cfg = tiny_config.train
  cfg.anneal, cfg.anneal_to = anneal, 0.1
  train = optimisers.TrainSettings.from_config(tiny_config)
  factor = [float(optimisers.anneal_factor(train, p)) for p in (0.0, 0.25, 0.5, 1.0, 2.0)]
  assert factor[0] == 1.0 and factor[2] == pytest.approx(at_half)
  assert factor[3] == factor[4] == pytest.approx(0.1)  # Past the budget it stays at the floor.
  linear_quarter = 1.0 - 0.9 * 0.25
  cosine_quarter = 1.0 - 0.9 * 0.5 * (1.0 - np.cos(np.pi / 4))
  assert factor[1] == pytest.approx(linear_quarter if anneal == "linear" else cosine_quarter)
  with pytest.raises(ValueError, match="'step' is not one of"):
    optimisers.anneal_factor(dataclasses.replace(train, anneal="step"), 0.5)


def test_budget_progress_is_the_larger_share_of_steps_and_of_the_clock(tiny_config):
  tiny_config.train.num_steps, tiny_config.train.max_minutes = 1000, 0.0
  cfg = optimisers.TrainSettings.from_config(tiny_config)
  assert optimisers.budget_progress(cfg, 250, 1e6) == 0.25  # No wall-clock budget: steps alone.
  cfg = dataclasses.replace(cfg, max_minutes=10.0)
  assert optimisers.budget_progress(cfg, 250, 300.0) == 0.5  # Half of the 600 s spent.
  assert optimisers.budget_progress(cfg, 900, 300.0) == 0.9
  assert optimisers.budget_progress(cfg, 900, 6000.0) == 1.0


@pytest.mark.parametrize("optimizer", ["adam", "adadelta", "sgd"])
def test_a_step_with_progress_moves_the_parameters_by_the_annealed_share(tiny_config, optimizer):
  cfg = tiny_config
  cfg.train.optimizer, cfg.train.anneal, cfg.train.anneal_to = optimizer, "linear", 0.0
  state = train_state.create_train_state(settings.validate(cfg), jax.random.key(0), 30, 30)
  batch = random_batch(seed=5, vocab=30)
  step = jax.jit(functools.partial(train_state.train_step, run=settings.validate(cfg)))
  plain, m_plain = step(state, batch, jax.random.key(1))
  annealed, m = step(state.replace(progress=jnp.float32(0.25)), batch, jax.random.key(1))
  assert float(m["learning_rate"]) == pytest.approx(0.75 * float(m_plain["learning_rate"]))
  leaves = [jax.tree.leaves(s.params) for s in (state, plain, annealed)]
  for p0, p1, p2 in zip(*leaves, strict=True):
    np.testing.assert_allclose(p2 - p0, 0.75 * (p1 - p0), rtol=1e-4, atol=1e-7)
  # The optimiser's state moves as without annealing (only the step taken is scaled).
  moments = [jax.tree.leaves(s.opt_state) for s in (plain, annealed)]
  for a, b in zip(*moments, strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_the_logged_learning_rate_is_the_one_applied_after_a_skipped_update(tiny_config):
  """A non-finite update is skipped and the optimiser's schedule does not advance, so the next
  update's learning rate (read off the parameter change of plain SGD) is the logged one."""
  c = tiny_config
  c.train.optimizer, c.train.learning_rate, c.train.warmup_steps = "sgd", 1.0, 10
  c.train.clip_norm = 0.0
  state = train_state.create_train_state(settings.validate(c), jax.random.key(0), 30, 30)
  batch = random_batch(seed=5, vocab=30)
  step = jax.jit(functools.partial(train_state.train_step, run=settings.validate(c)))
  state, _ = step(state, batch, jax.random.key(0))
  poisoned = state.replace(params=jax.tree.map(lambda p: p * jnp.nan, state.params))
  skipped, m = step(poisoned, batch, jax.random.key(1))
  assert not bool(m["finite"])
  before = skipped.replace(params=state.params)  # A skipped update keeps the parameters.
  after, m = step(before, batch, jax.random.key(2))
  obj = objective.Objective.from_config(c)
  grads = jax.grad(lambda p: objective.loss_fn(p, before, batch, None, obj)[0])(before.params)
  g, d = (
    jax.tree.leaves(grads),
    jax.tree.leaves(jax.tree.map(jnp.subtract, after.params, before.params)),
  )
  k = max(range(len(g)), key=lambda j: float(jnp.abs(g[j]).max()))
  i = int(jnp.argmax(jnp.abs(g[k])))
  applied = float(-d[k].ravel()[i] / g[k].ravel()[i])
  assert float(m["learning_rate"]) == pytest.approx(applied, rel=1e-3)


def test_each_evaluation_keeps_its_greedy_outputs_to_score_again(trained):
  """WORKDIR/valid_hypotheses/STEP.txt.gz holds the outputs each logged validation BLEU scored,
  so a metric fixed later can redraw a learning curve without retraining."""
  import gzip

  from seq2seq import checkpoints, evaluation
  from seq2seq import sharding as rt
  from seq2seq.data import metrics
  from seq2seq.training import metric_writer

  config = checkpoints.load_config(trained)
  refs = [r[1] for r in rt.load_data(settings.validate(config), trained).raw("valid")]
  rows = [r for r in metric_writer.read_metrics(trained) if r["split"] == "valid"]
  assert rows
  for row in rows:
    path = trained / evaluation.VALID_HYPOTHESES.format(step=row["step"])
    with gzip.open(path, "rt", encoding="utf-8") as f:
      hyps = f.read().split("\n")[:-1]
    score = metrics.bleu(hyps, refs, pretokenized=metrics.pretokenized(config.data.corpus))[0]
    assert score == pytest.approx(row["bleu"])


def test_halving_keeps_the_rate_then_halves_it_every_e_updates():
  """Luong et al.'s schedule: learning rate 1 until update `after`, then halved every `every`."""
  cfg = tiny.get_config()
  cfg.train.learning_rate, cfg.train.decay = 1.0, "halving(after=4, every=2)"
  schedule = optimisers.learning_rate_schedule(optimisers.TrainSettings.from_config(cfg))
  got = [float(schedule(step)) for step in range(9)]
  assert got == [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.125]
  for bad, message in [("halving(every=0)", "every >= 1"), ("rsqrt(after=3)", "no setting")]:
    cfg.train.decay = bad
    with pytest.raises(ValueError, match=message):
      settings.validate(cfg)

"""Luong et al. (2015)'s decoder (`model.decoder="luong(...)"`) against a float64 loop written
here from the paper's equations: stacked cells run first, attention from the top layer's h_t with
Luong's scores (dot, general, concat = additive, location) and windows (local-m, local-p),
h~_t = tanh(W_c [c_t ; h_t]), logits = W_s h~_t, and h~_{t-1} fed to the next step's input."""

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import (
  build_model,
  check_scores_match_search,
  check_steps_match_forced,
  check_trains,
  final_params,
  random_batch,
  random_lexicon,
  randomise,
  reference_cell_step,
  run_main,
)

import seq2seq
from configs import tiny
from seq2seq import average, build_lexicon, checkpoints, evaluation, settings
from seq2seq.data import lexicon

VOCAB = 50
WINDOW = 2  # D for the local structures: a window of 5 of the 7 source positions.


def _param(x) -> np.ndarray:
  return np.asarray(x[...], np.float64)


def _linear(layer, x):
  y = x @ _param(layer.kernel)
  return y if layer.bias is None else y + _param(layer.bias)


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _softmax(e, allowed):
  e = np.where(allowed, e, -np.inf)
  w = np.exp(e - e[allowed].max())
  return w / w.sum()


def _score(model, name, q, ann):
  """e_j of query h_t [D] against the annotations [S, H]."""
  s = model.score
  if name == "dot":
    return ann @ q
  if name == "general":
    return (ann @ _param(s.w.kernel)) @ q
  if name == "additive":  # Luong's concat: v_a^T tanh(W_a h_t + U_a h_j).
    return _linear(s.v_a, np.tanh(_linear(s.w_a, q) + _linear(s.u_a, ann)))[:, 0]
  assert name == "location"  # softmax(W_a h_t): blind to the annotations.
  return _linear(s.w, q)[: ann.shape[0]]


def _alignment(model, structure, e, t, q, length):
  """a_t [S] of scores `e` at target position t for a source of `length` real words."""
  positions = np.arange(e.shape[0])
  real = positions < length
  if structure == "soft":
    return _softmax(e, real)
  if structure == "local_m":  # p_t = t (kept on the source), window |j - p_t| <= D.
    p = min(t, length - 1)
    return _softmax(e, real & (np.abs(positions - p) <= WINDOW))
  assert structure == "local_p"  # p_t = S sigmoid(v_p^T tanh(W_p h_t)), Gaussian sigma = D / 2.
  st = model.structure
  p = length * _sigmoid(_linear(st.v_p, np.tanh(_linear(st.w_p, q)))[0])
  inside = real & (np.abs(positions - p) <= WINDOW)
  gauss = np.exp(-((positions - p) ** 2) / (2 * (WINDOW / 2) ** 2))
  return _softmax(e, inside) * gauss


def _reference(model, spec, score, structure, src, mask, tgt_in):
  """Logits [B, T, V] and attention [B, T, S] of the teacher-forced decoder, in float64."""
  enc = model.encode(jnp.asarray(src), jnp.asarray(mask))
  annotations = np.asarray(enc.annotations, np.float64)
  he = annotations.shape[-1] // 2
  s0 = np.tanh(_linear(model.init_proj, annotations[:, 0, he:]))  # tanh(W_s bwd h_1).
  embeddings = _param(model.embed.embedding)
  cells = [model.cell] + [getattr(model, f"cell_{k}") for k in range(2, spec["layers"] + 1)]
  logits, alphas = [], []
  for b in range(src.shape[0]):
    length = int(mask[b].sum())
    states = [(s0[b], np.zeros_like(s0[b])) if spec["cell"] == "lstm" else s0[b] for _ in cells]
    feed = np.zeros_like(s0[b])
    row_logits, row_alpha = [], []
    for t in range(tgt_in.shape[1]):
      x = _linear(cells[0].project, embeddings[tgt_in[b, t]])
      if spec["input_feeding"]:  # [E y_{t-1} ; h~_{t-1}] through the bottom layer's W.
        x = x + feed @ _param(model.feed_proj.kernel)
      below = None
      for k, cell in enumerate(cells):
        if k:
          x = _linear(cell.project, below)
        states[k] = reference_cell_step(cell, spec["cell"], states[k], x)
        h = states[k][0] if spec["cell"] == "lstm" else states[k]
        below = h + below if (k and spec["residual"]) else h
      e = _score(model, score, below, annotations[b])
      a = _alignment(model, structure, e, t, below, length)
      context = a @ annotations[b]
      feed = np.tanh(np.concatenate([context, below]) @ _param(model.w_c.kernel))
      row_logits.append(_linear(model.w_o, feed))
      row_alpha.append(a)
    logits.append(row_logits)
    alphas.append(row_alpha)
  return np.asarray(logits), np.asarray(alphas)


STACKED = {"cell": "lstm", "layers": 2, "input_feeding": True, "residual": True}
SINGLE_GRU = {"cell": "gru", "layers": 1, "input_feeding": False, "residual": False}


def _spec(d):
  return (
    f"luong(cell={d['cell']}, layers={d['layers']}, input_feeding={str(d['input_feeding'])}, "
    f"residual={str(d['residual'])})"
  )


def _luong_model(decoder, score="additive", structure="soft", seed=0, **model):
  cfg = tiny.get_config()
  cfg.model.decoder, cfg.model.score = _spec(decoder), score
  cfg.model.attention = structure if structure == "soft" else f"{structure}(window={WINDOW})"
  for key, value in model.items():
    cfg.model[key] = value
  settings.validate(cfg)
  return cfg, randomise(build_model(cfg.model, VOCAB, VOCAB + 3, rngs=nnx.Rngs(seed)))


@pytest.mark.parametrize("structure", ["soft", "local_m", "local_p"])
@pytest.mark.parametrize("score", ["dot", "general", "additive", "location"])
def test_luong_decoder_matches_a_float64_loop(score, structure):
  _, model = _luong_model(STACKED, score, structure)
  b = random_batch(seed=3, vocab=VOCAB)
  want_logits, want_alpha = _reference(
    model, STACKED, score, structure, b["src"], b["src_mask"], b["tgt_in"]
  )
  logits, alpha = model(b["src"], b["src_mask"], b["tgt_in"], return_alpha=True)
  np.testing.assert_allclose(np.asarray(logits), want_logits, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(alpha), want_alpha, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("decoder", [STACKED, SINGLE_GRU], ids=["lstm2-residual", "gru1-no-feed"])
def test_luong_decoder_steps_as_it_trains_and_matches_the_loop(decoder):
  """Search's step-by-step decoder gives the teacher-forced scores; the variants without input
  feeding or with GRU cells follow the equations too."""
  _, model = _luong_model(decoder, "general")
  b = random_batch(seed=5, vocab=VOCAB)
  src, mask, tgt_in = (jnp.asarray(b[k]) for k in ("src", "src_mask", "tgt_in"))
  forced = model(src, mask, tgt_in)
  want, _ = _reference(model, decoder, "general", "soft", b["src"], b["src_mask"], b["tgt_in"])
  np.testing.assert_allclose(np.asarray(forced), want, rtol=1e-4, atol=1e-5)
  enc = model.encode(src, mask)
  state = enc.init_state
  step = nnx.jit(lambda m, e, s, y: m.decoder_step(e, s, y))
  for i in range(tgt_in.shape[1]):
    state, logits, _ = step(model, enc, state, tgt_in[:, i])
    np.testing.assert_allclose(np.asarray(logits), np.asarray(forced[:, i]), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(
  "addon",
  [
    {"addons": "copy"},
    {"features": "coverage+prev_attention"},
    {"addons": "lexicon"},
    {"multi_source": "gate"},
  ],
  ids=["copy", "features", "lexicon", "two_sources"],
)
def test_luong_decoder_with_each_addon_steps_as_it_trains(addon):
  """Copying, alignment features, the lexicon bias and a second source work in Luong's
  decoder: search's steps give the teacher-forced scores."""
  cfg = tiny.get_config()
  cfg.model.decoder = "luong(layers=2)"
  for key, value in addon.items():
    cfg.model[key] = value
  sources = 2 if "multi_source" in addon else 1
  tables = {"lexicon": random_lexicon(VOCAB)} if addon.get("addons") == "lexicon" else {}
  tgt_vocab = VOCAB if tables else VOCAB + 3
  build = build_model(cfg.model, VOCAB, tgt_vocab, rngs=nnx.Rngs(0), sources=sources, **tables)
  model = randomise(build)
  b = {k: jnp.asarray(v) for k, v in random_batch(seed=3, vocab=VOCAB, src_len=8).items()}
  check_steps_match_forced(model, b)


def test_input_feeding_carries_the_attentional_state_to_the_next_step():
  """h~_0 = 0 and the state after step 1 carries h~_1 for step 2's input; without input
  feeding there is no parameter to read it."""
  _, fed = _luong_model(STACKED)
  no_feed = dict(STACKED, input_feeding=False)
  _, unfed = _luong_model(no_feed)
  assert "feed_proj" in nnx.state(fed, nnx.Param) and "feed_proj" not in nnx.state(unfed, nnx.Param)
  b = random_batch(seed=2, vocab=VOCAB)
  enc = fed.encode(jnp.asarray(b["src"]), jnp.asarray(b["src_mask"]))
  state, _, _ = fed.decoder_step(enc, enc.init_state, jnp.asarray(b["tgt_in"][:, 0]))
  np.testing.assert_array_equal(np.asarray(enc.init_state.s.feed), 0.0)
  assert np.abs(np.asarray(state.s.feed)).max() > 0.0  # h~_1, fed to step 2.


def test_dropout_between_layers_only_in_training():
  cfg, model = _luong_model(STACKED, dropout=0.3)
  b = random_batch(seed=4, vocab=VOCAB)
  args = (b["src"], b["src_mask"], b["tgt_in"])
  plain = np.asarray(model(*args))
  np.testing.assert_array_equal(np.asarray(model(*args)), plain)
  dropped = [np.asarray(model(*args, dropout_rng=jax.random.key(k))) for k in (0, 0, 1)]
  np.testing.assert_array_equal(dropped[0], dropped[1])
  assert not np.allclose(dropped[0], plain) and not np.allclose(dropped[0], dropped[2])


@pytest.mark.parametrize("decoder", [STACKED, SINGLE_GRU], ids=["lstm2-residual", "gru1-no-feed"])
def test_luong_decoder_trains_in_bfloat16(decoder):
  cfg, _ = _luong_model(decoder, "general", dtype="bfloat16")
  cfg.train.optimizer, cfg.train.learning_rate = "adam", 1e-2
  check_trains(cfg, random_batch(seed=3, vocab=VOCAB), VOCAB)


def test_luong_settings_are_checked():
  cfg = tiny.get_config()
  cfg.model.decoder, cfg.model.score = "luong", "concat"  # Luong's name for the additive score.
  assert str(settings.validate(cfg).model.score) == "additive"
  cfg.model.decoder = "luong(cell=rnn)"
  with pytest.raises(ValueError, match="cell must be one of gru, lstm"):
    settings.validate(cfg)
  cfg.model.decoder = "luong(layers=0)"
  with pytest.raises(ValueError, match="layers must be at least 1"):
    settings.validate(cfg)
  cfg.model.decoder, cfg.model.addons = "luong", "intra(score=dot)"
  with pytest.raises(ValueError, match="addons=intra adds a context to every decoder step"):
    settings.validate(cfg)
  cfg.model.addons, cfg.model.tie_embeddings = "", True
  with pytest.raises(ValueError, match=r"model.dec_hidden \(32\) must equal model.emb_dim"):
    settings.validate(cfg)


# A run of the stacked Luong decoder over a stacked LSTM reading the reversed source, on
# configs/tiny.py: everything a run of the paper's model does (but heatmaps, which no test here
# reads: drawing them took some 2 s of each split evaluated).
LUONG_RUN = (
  "--config.model.decoder=luong(layers=2, residual=true)",
  "--config.model.encoder=rnn(cell=lstm, layers=2, bidirectional=false, reverse=true)",
  "--config.model.score=general",
  "--config.model.dropout=0.1",
  "--config.decode.num_heatmaps=0",
)
SOURCES = ["the cat sleeps .", "the dog does not eat apples .", "a big house .", "the red car ."]


@pytest.fixture(scope="module")
def luong_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("luong") / "run"
  run_main(workdir, *LUONG_RUN, "--config.train.num_steps=20")
  return workdir


def _results(workdir, split="test"):
  return json.loads((workdir / "eval" / split / "results.json").read_text())


@pytest.mark.slow
def test_a_luong_run_evaluates_decodes_scores_and_reports(luong_run):
  """Greedy validation, beam evaluation, n-best, forced scoring that agrees with the search,
  and the explorer's page, as a paper-decoder run has them."""
  assert checkpoints.load_config(luong_run).model.decoder == "luong(layers=2, residual=true)"
  for split in ("valid", "test"):
    result = _results(luong_run, split)
    assert result["num_sentences"] == 64 and 0.0 <= result["bleu"] <= 100.0
    assert np.isfinite(result["loss"]) and 0.0 <= result["aer"] <= 1.0
  check_scores_match_search(seq2seq.load(luong_run), SOURCES, 3)
  proc = run_main(luong_run, *LUONG_RUN, "--mode=report")
  pages = [line for line in proc.stdout.splitlines() if line.endswith(".html")]
  assert pages and all(Path(page).stat().st_size > 0 for page in pages)


@pytest.mark.slow
def test_a_luong_run_resumes_as_it_ran(luong_run, tmp_path):
  """Resumed from the run's own step-10 checkpoint (its later checkpoint removed), the run ends
  on the uninterrupted run's parameters: the stacked LSTM states, input feeding and optimiser
  state restore as they were."""
  workdir = tmp_path / "resumed"
  shutil.copytree(luong_run, workdir, ignore=shutil.ignore_patterns("eval", "best", ".lock"))
  shutil.rmtree(workdir / "checkpoints" / "20")
  proc = run_main(
    workdir, *LUONG_RUN, "--config.train.num_steps=20", "--config.train.final_eval=false"
  )
  assert "resumed from step 10" in proc.stderr
  step_a, want = final_params(luong_run)
  step_b, got = final_params(workdir)
  assert step_a == step_b == 20 and set(got) == set(want)
  assert any("cell_2" in key for key in want) and any("feed_proj" in key for key in want)
  assert any("fwd_2" in key for key in want) and not any("bwd" in key for key in want)
  for key in want:
    np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.slow
def test_luong_runs_average_ensemble_with_paper_runs_and_decode_with_shortlists(
  luong_run, trained, tmp_path
):
  """Checkpoint averaging, an ensemble of the run with itself (it evaluates as the run) and with
  a paper-decoder run (each member keeps its own decoder state), per-batch and per-sentence
  shortlists."""
  config = checkpoints.load_config(luong_run)
  average.average_checkpoints(luong_run, tmp_path / "avg", last=2)
  averaged = evaluation.evaluate_splits(config, tmp_path / "avg")
  assert averaged["test"]["step"] == 20 and np.isfinite(averaged["test"]["loss"])

  config.decode.ensemble = f"{luong_run},{luong_run}"
  itself = evaluation.evaluate_splits(config, tmp_path / "ens")
  assert itself["test"]["bleu"] == pytest.approx(_results(luong_run)["bleu"], abs=1e-9)
  config.decode.ensemble = f"{luong_run},{trained}"
  mixed = evaluation.evaluate_splits(config, tmp_path / "mixed")
  assert mixed["test"]["num_sentences"] == 64 and np.isfinite(mixed["test"]["loss"])

  run = tmp_path / "lexicon"
  shutil.copytree(luong_run, run, ignore=shutil.ignore_patterns("eval"))
  build_lexicon.main(["--workdir", str(run), "--top", "5"])
  config = checkpoints.load_config(run)
  dec = config.decode
  dec.shortlist, dec.shortlist_frequent, dec.shortlist_per_word = str(run / lexicon.FILE), 3, 2
  for scope in ("batch", "sentence"):
    dec.shortlist_scope = scope
    found = seq2seq.load(run, config).translate(SOURCES, nbest=3)
    assert all(len(hyps) == 3 for hyps in found)
    assert found[0][0].normalised_over == f"shortlist ({scope})"


def test_the_luong_configs_are_the_papers_best_system_and_validate():
  """configs/luong.py: local-p with the general score and input feeding in every variant; the
  paper's 4 x 1000 stack and SGD schedule one variant away (validated, not built: nearly 200M
  parameters); the CPU size builds."""
  from configs import luong

  for variant in luong.VARIANTS:
    cfg = luong.get_config(variant)
    typed = settings.validate(cfg).model
    assert typed.decoder.name == "luong" and typed.decoder.settings.input_feeding
    assert str(typed.score) == "general" and str(typed.attention) == "local_p"
  paper = luong.get_config("paper")
  assert paper.model.decoder == "luong(cell=lstm, layers=4, input_feeding=true)"
  assert paper.train.optimizer == "sgd" and paper.train.decay.startswith("halving(after=")
  cfg = luong.get_config("")  # Built abstractly: shapes and structure, no initial values.
  model = nnx.eval_shape(lambda: build_model(cfg.model, 100, 100, rngs=nnx.Rngs(0)))
  assert model.cell_2.hidden == 512 and not hasattr(model, "cell_3")
  with pytest.raises(ValueError, match="valid: \\(none\\), paper, multi30k"):
    luong.get_config("wmt")

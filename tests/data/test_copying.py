"""Copying from the source (pointer-generator, `model.addons=copy`): the extended vocabulary,
the mixture, decoding, the training targets and the output text."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, compiled, data_settings, random_batch, randomise

from configs import tiny
from seq2seq import saved_format, settings
from seq2seq.data import copying, input_pipeline, metrics
from seq2seq.data import tokenizer as tok
from seq2seq.decoding import decode, inference
from seq2seq.model import addons

SRC_VOCAB, VOCAB = 30, 40


def copy_map():
  """Source ids 4..19 have target twins (id + 10); 20..29 do not."""
  table = np.full(SRC_VOCAB, -1, np.int32)
  table[[tok.PAD_ID, tok.BOS_ID, tok.EOS_ID]] = [tok.PAD_ID, tok.BOS_ID, tok.EOS_ID]
  table[4:20] = np.arange(14, 30)
  return table


def copy_model(gate_bias=None, seed=0, copy_eos="target"):
  cfg = tiny.get_config()
  cfg.model.addons = f"copy(eos={copy_eos})"
  model = build_model(cfg.model, SRC_VOCAB, VOCAB, rngs=nnx.Rngs(seed), copy_map=copy_map())
  model = randomise(model, seed=seed + 1)  # Leaves the map as built.
  if gate_bias is not None:  # p_gen = sigmoid(gate_bias): -1e4 makes the output a pure copy.
    model.copy_gate.kernel[...] = jnp.zeros_like(model.copy_gate.kernel[...])
    model.copy_gate.bias[...] = jnp.full_like(model.copy_gate.bias[...], gate_bias)
  return model


def args(seed=0):
  b = random_batch(seed=seed, batch=3, src_len=7, tgt_len=5, vocab=SRC_VOCAB)
  src = np.where(b["src_mask"] > 0, b["src"], 0)
  src[0, :3] = [tok.UNK_ID, 25, 25]  # An unknown word and a repeated word without a twin.
  src[0, 3:] = [6, tok.EOS_ID, 0, 0]
  mask = (src > 0).astype(np.int32)
  mask[0] = [1, 1, 1, 1, 1, 0, 0]
  return jnp.asarray(src), jnp.asarray(mask), jnp.asarray(b["tgt_in"] % VOCAB)


def test_source_positions_map_to_their_target_twin_or_an_extended_id():
  src = jnp.array([[tok.UNK_ID, 25, 25, 6, tok.UNK_ID, tok.EOS_ID, 0]])
  got = copying.extended_ids(src, jnp.asarray(copy_map()), VOCAB)
  # UNKs keep their own position, a repeated word pools at its first, a twin is its target id.
  assert got.tolist() == [[VOCAB, VOCAB + 1, VOCAB + 1, 16, VOCAB + 4, tok.EOS_ID, 0]]


@pytest.mark.parametrize("copy_eos", ["target", "null"])
def test_probabilities_sum_to_one_over_the_extended_vocabulary_and_train(copy_eos):
  model = copy_model(copy_eos=copy_eos)
  src, mask, tgt_in = args()
  logits = compiled(type(model).__call__, model, src, mask, tgt_in)
  assert logits.shape == (3, 5, VOCAB + src.shape[1])
  np.testing.assert_allclose(np.exp(np.asarray(logits)).sum(-1), 1.0, rtol=1e-5)
  graphdef, params = nnx.split(model, nnx.Param)
  loss = lambda p: jnp.sum(nnx.merge(graphdef, p)(src, mask, tgt_in)[:, :, VOCAB + 1])
  grads = jax.jit(jax.grad(loss))(params)
  assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))
  assert float(jnp.abs(grads["copy_gate"]["kernel"][...]).sum()) > 0  # The gate learns.


@pytest.mark.parametrize("copy_eos", ["target", "null"])
def test_the_mixture_against_a_loop(copy_eos):
  """p(w) = p_gen p_vocab(w) + (1 - p_gen) sum_{j -> w} alpha_j; with copy_eos="null" the
  source EOS's alpha joins p_gen's side instead of raising the target EOS."""
  model = copy_model(seed=3, copy_eos=copy_eos)
  src, mask, tgt_in = args(seed=3)
  logits, alpha = model(src, mask, tgt_in, return_alpha=True)
  cfg = tiny.get_config()
  plain = build_model(cfg.model, SRC_VOCAB, VOCAB, rngs=nnx.Rngs(3))
  graphdef, params = nnx.split(model, nnx.Param)
  del params["copy_gate"], params["copy_map"]
  nnx.update(plain, params)
  p_vocab = np.asarray(jax.nn.softmax(plain(src, mask, tgt_in), axis=-1))
  enc = model.encode(src, mask)
  ext = np.asarray(enc.addons["copy"])
  # The gate's input: [c_i ; s_{i-1} ; E y_{i-1}] of the teacher-forced pass.
  emb = np.asarray(model.embed(tgt_in))
  states, s = [], enc.init_state
  for i in range(tgt_in.shape[1]):
    states.append(np.asarray(s.s))
    s, _, _ = model.decoder_step(enc, s, tgt_in[:, i])
  ctx = np.einsum("bts,bsh->bth", np.asarray(alpha), np.asarray(enc.annotations))
  feats = np.concatenate([ctx, np.stack(states, 1), emb], -1)
  z = feats @ np.asarray(model.copy_gate.kernel[...]) + np.asarray(model.copy_gate.bias[...])
  gate = 1 / (1 + np.exp(-z[..., 0]))
  want = np.zeros(logits.shape)
  eos = np.asarray(src) == tok.EOS_ID
  null = np.einsum("bts,bs->bt", np.asarray(alpha), eos) if copy_eos == "null" else 0.0
  want[..., :VOCAB] = (gate + (1 - gate) * null)[..., None] * p_vocab
  for b, t, j in np.ndindex(*alpha.shape):
    if not (copy_eos == "null" and eos[b, j]):
      want[b, t, ext[b, j]] += (1 - gate[b, t]) * float(alpha[b, t, j])
  np.testing.assert_allclose(np.exp(np.asarray(logits)), want, atol=1e-5)
  if copy_eos == "null":
    assert np.asarray(null).max() > 0.05  # The source EOS held attention to move.


def test_with_the_gate_shut_decoding_copies_where_attention_looks():
  model = copy_model(gate_bias=-1e4)
  src, mask, _ = args()
  graphdef, params = nnx.split(model, nnx.Param)
  out = decode.jit_decode(graphdef, params, src, mask, beam_size=1, max_len=6)
  ext = np.asarray(model.encode(src, mask).addons["copy"])
  ids, alpha = np.asarray(out.tokens), np.asarray(out.alpha)
  for b in range(src.shape[0]):
    for i in range(ids.shape[1]):
      if i and ids[b, i - 1] == tok.EOS_ID:
        break
      masses = {}
      for j in range(src.shape[1]):
        masses[ext[b, j]] = masses.get(ext[b, j], 0.0) + alpha[b, i, j]
      assert ids[b, i] == max(masses, key=masses.get)


def test_teacher_forcing_equals_step_by_step_decoding_with_copied_inputs():
  model = copy_model(seed=5)
  src, mask, tgt_in = args(seed=5)
  tgt_in = tgt_in.at[0, 2].set(VOCAB + 1)  # A copied word fed back: read as <unk>.
  logits = model(src, mask, tgt_in)
  enc = model.encode(src, mask)
  state = enc.init_state
  for i in range(tgt_in.shape[1]):
    state, step_logits, _ = model.decoder_step(enc, state, tgt_in[:, i])
    np.testing.assert_allclose(np.asarray(step_logits), np.asarray(logits[:, i]), atol=2e-5)
  unk = model(src, mask, tgt_in.at[0, 2].set(tok.UNK_ID))
  np.testing.assert_array_equal(np.asarray(unk), np.asarray(logits))


@pytest.fixture(scope="module")
def vocabs():
  src_tok = tok.WordVocab.build(["the cat sat on the mat", "a dog"], size=tok.NUM_SPECIALS + 8)
  tgt_tok = tok.WordVocab.build(["le chat sur le tapis", "a dog"], size=tok.NUM_SPECIALS + 6)
  return src_tok, tgt_tok


def test_training_targets_copy_unknown_target_words_spelled_like_source_words(vocabs):
  src_tok, tgt_tok = vocabs
  src, tgt = "Zorblax sat on the mat", "le Zorblax sur le dog Qux"
  ids = tgt_tok.encode(tgt)
  got = copying.copy_targets(ids, tgt_tok.tokenize(tgt), src_tok.tokenize(src), tgt_tok.size)
  want = list(ids)
  want[1] = tgt_tok.size + 0  # "Zorblax": unknown to the target side, source position 0.
  assert ids[1] == tok.UNK_ID and ids[5] == tok.UNK_ID  # "Qux" is nowhere in the source.
  assert got == want
  table = copying.vocab_map(src_tok, tgt_tok)
  assert table[src_tok.encode("dog")[0]] == tgt_tok.encode("dog")[0]
  assert table[src_tok.encode("cat")[0]] == -1 and table[tok.UNK_ID] == -1
  assert table[tok.EOS_ID] == tok.EOS_ID


def test_an_unknown_source_word_is_produced_as_itself(vocabs):
  src_tok, tgt_tok = vocabs
  source = "Zorblax sat on the mat"
  ids = [tgt_tok.encode("le")[0], tgt_tok.size + 0, tok.EOS_ID, 0]
  tr = inference.Hypothesis(ids, np.zeros((3, 6), np.float32))
  assert inference.output_text(tr, source, src_tok, tgt_tok) == "le Zorblax"


def test_the_input_pipeline_builds_copy_targets_into_tgt_out(tmp_path):
  cfg = tiny.get_config()
  cfg.model.addons = "copy"
  cfg.data.tgt_vocab_size = 40  # Most target words unknown: many to copy.
  data = input_pipeline.load_data(data_settings(cfg), tmp_path)
  split = data.splits["train"]
  batch = input_pipeline.make_batch(split, np.arange(16), cfg.data.bucket_step)
  extended = batch["tgt_out"] >= data.tgt_tokenizer.size
  assert extended.any()
  # Inputs stay ordinary ids: <unk> where the target is copied.
  shifted = batch["tgt_in"][:, 1:]
  assert (shifted[extended[:, :-1]] == tok.UNK_ID).all()


def test_copy_refuses_settings_it_cannot_serve():
  cfg = tiny.get_config()
  cfg.model.addons = "copy"
  cfg.train.softmax = "sampled(size=8)"
  with pytest.raises(ValueError, match=r"model.addons=copy needs train.softmax=full"):
    settings.validate(cfg)
  cfg.train.softmax = "full"
  cfg.model.name = "agreement"
  with pytest.raises(ValueError, match="model.addons=copy: agreement runs have no table"):
    settings.validate(cfg)
  cfg.model.name = "rnnencdec"
  with pytest.raises(ValueError, match="model.addons=copy reads the attention"):
    settings.validate(cfg)
  cfg.model.name, cfg.model.addons = "rnnsearch", "copy(eos=nowhere)"
  with pytest.raises(ValueError, match="eos=nowhere is not one of target, null"):
    settings.validate(cfg)


@pytest.mark.slow
def test_a_copying_run_trains_evaluates_translates_and_scores(tmp_path):
  """End to end through training, evaluation and the Python API; with the gate shut, a word
  neither vocabulary has comes out as itself and scores as the search reported."""
  import dataclasses

  import seq2seq
  from seq2seq import train

  cfg = tiny.get_config()
  cfg.model.addons = "copy"
  cfg.data.tgt_vocab_size = 40
  cfg.train.num_steps, cfg.train.eval_every, cfg.train.checkpoint_every = 4, 4, 4
  cfg.train.valid_bleu = False  # Decoding is checked below, through the API.
  cfg.data.synthetic.valid_pairs = cfg.data.synthetic.test_pairs = 16
  results = train.train_and_evaluate(cfg, tmp_path)
  assert np.isfinite(results["test"]["bleu"])
  t = seq2seq.load(tmp_path)
  params = t.state.params
  params["copy_gate"]["kernel"][...] = jnp.zeros_like(params["copy_gate"]["kernel"][...])
  params["copy_gate"]["bias"][...] = jnp.full_like(params["copy_gate"]["bias"][...], -1e4)
  t.state = dataclasses.replace(t.state, params=params)
  # A source word the target vocabulary lacks, three times: its pooled attention outweighs the
  # source EOS's, so a shut gate copies it.
  word = next(
    w
    for w in t.src_tok.decode_tokens(list(range(tok.NUM_SPECIALS, t.src_tok.size)))
    if t.tgt_tok.encode_tokens([w]) == [tok.UNK_ID]
  )
  sources = [f"{word} {word} {word}"]
  for beam_size in (1, 3):
    hyp = t.translate(sources, beam_size=beam_size)[0][0]
    assert hyp.tokens and set(hyp.tokens) == {word}
    (scored,) = t.score(sources, [hyp.text])
    assert scored.error is None and scored.tokens == [*hyp.tokens, "</s>"]
    n = len(hyp.tokens) + hyp.finished
    np.testing.assert_allclose(sum(scored.token_scores[:n]), hyp.score, rtol=1e-4, atol=1e-4)


def test_oov_recall_counts_produced_reference_words_the_vocabulary_lacks(vocabs):
  _, tgt_tok = vocabs
  refs = ["le Zorblax sur le Qux", "le chat", "Qux Qux Zorblax"]
  hyps = ["le Zorblax Zorblax", "le chat", "Qux"]
  # Out of the vocabulary: Zorblax, Qux (first); none (second); Qux x2, Zorblax (third).
  assert metrics.oov_recall(hyps, refs, tgt_tok) == (2 / 5, 5)  # Zorblax once, Qux once.
  assert metrics.oov_recall(["le chat"], ["le chat"], tgt_tok) == (None, 0)


def test_the_source_eos_is_copied_as_nothing_by_default_and_as_eos_in_older_runs():
  """The default is `copy(eos=null)`, chosen on the validation rows of
  experiments/results/multi30k_copy_eos (a copying run decoded both ways). A run saved before
  the switch existed copied the source EOS as the target EOS and still reads so."""
  cfg = tiny.get_config()
  cfg.model.addons = "copy"
  run = settings.validate(cfg)
  assert run.model.addon("copy").settings.eos == "null"
  assert addons.make_addons(run.model, addons.OUTPUT)["copy"].null_eos
  # The built model (the same parameters as `target`'s): with a pure copy (p_gen = 0) the
  # attention on the source EOS (sentence 0's position 4) is copied as nothing and generates,
  # so p(EOS) is the vocabulary softmax's share of it, where `target` copies all of it as EOS.
  model = build_model(cfg.model, SRC_VOCAB, VOCAB, rngs=nnx.Rngs(0), copy_map=copy_map())
  model = randomise(model, seed=1)
  target = copy_model(seed=0, copy_eos="target")
  for m in (model, target):
    m.copy_gate.kernel[...] = jnp.zeros_like(m.copy_gate.kernel[...])
    m.copy_gate.bias[...] = jnp.full_like(m.copy_gate.bias[...], -1e4)
  src, mask, tgt_in = args()
  p_eos = lambda m: np.exp(np.asarray(m(src, mask, tgt_in))[..., tok.EOS_ID])
  null, as_eos = p_eos(model)[0], p_eos(target)[0]
  assert (as_eos > 1e-3).all() and (null < 0.1 * as_eos).all()
  old = json.loads(cfg.to_json_best_effort())
  del old["model"]["addons"]
  old["model"]["copy"] = True  # As saved before version 4, without copy_eos.
  assert saved_format.upgrade(old)["model"]["addons"] == "copy(eos=target)"

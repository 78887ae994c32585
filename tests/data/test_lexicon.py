"""The IBM Model 1 lexical table and the shortlists it gives (seq2seq/data/lexicon.py)."""

import numpy as np
import pytest
from helpers import build_model

from seq2seq import build_lexicon, settings
from seq2seq.data import lexicon
from seq2seq.data.input_pipeline import Ragged

# Source words 4 (a), 5 (b), 6 (c) translate as 7 (x), 8 (y), 9 (z); every pair mixes two.
SRC = [[4, 5], [4, 6], [5, 6], [4, 5, 6], [6, 4]]
TGT = [[7, 8], [7, 9], [8, 9], [7, 8, 9], [9, 7]]
VS, VT = 7, 10


def test_ibm1_learns_word_translations_from_co_occurrence_alone():
  pair_src, pair_tgt, prob = lexicon.ibm1(Ragged.from_lists(SRC), Ragged.from_lists(TGT), VS, VT)
  for e in (4, 5, 6, VS):  # Every source word and NULL is a distribution over targets.
    assert prob[pair_src == e].sum() == pytest.approx(1.0)
  ids, probs = lexicon.top_translations(pair_src, pair_tgt, prob, VS, 2)
  assert ids[4, 0] == 7 and ids[5, 0] == 8 and ids[6, 0] == 9
  assert probs[4, 0] > 0.6 and np.all(probs[:, 0] >= probs[:, 1])
  assert np.all(ids[:4] == -1)  # Specials never occur in the corpus.


def test_one_em_pass_matches_a_hand_computation():
  # "a b" -> "x" and "a" -> "y". Start: t(.|e) uniform over e's co-occurring targets, so
  # t(x|a) = t(y|a) = 1/2, t(x|b) = 1, t(x|NULL) = t(y|NULL) = 1/2. Posteriors of x's links:
  # a 1/4, b 1/2, NULL 1/4 (denominator 2); of y's: a 1/2, NULL 1/2. Normalised per source:
  # t(x|a) = 1/3, t(y|a) = 2/3, t(x|b) = 1, t(x|NULL) = 1/3, t(y|NULL) = 2/3.
  a, b, x, y, null = 4, 5, 7, 8, VS
  pair_src, pair_tgt, prob = lexicon.ibm1(
    Ragged.from_lists([[a, b], [a]]), Ragged.from_lists([[x], [y]]), VS, VT, iterations=1
  )
  got = {(int(e), int(f)): float(p) for e, f, p in zip(pair_src, pair_tgt, prob, strict=True)}
  want = {(a, x): 1 / 3, (a, y): 2 / 3, (b, x): 1.0, (null, x): 1 / 3, (null, y): 2 / 3}
  assert got.keys() == want.keys()
  for key, value in want.items():
    assert got[key] == pytest.approx(value), key


def table():
  pair_src, pair_tgt, prob = lexicon.ibm1(Ragged.from_lists(SRC), Ragged.from_lists(TGT), VS, VT)
  ids, probs = lexicon.top_translations(pair_src, pair_tgt, prob, VS, 2)
  return lexicon.Lexicon(ids, probs, np.array([7, 9, 8, 0, 1, 2, 3, 4, 5, 6], np.int32))


def test_a_shortlist_holds_the_specials_in_place_then_frequent_words_and_translations():
  cand = lexicon.shortlist(table(), np.array([[5, 0, 0]]), frequent=1, per_word=1, multiple=1)
  assert cand.tolist() == [0, 1, 2, 3, 7, 8]  # 7: most frequent; 8: b's best translation.
  padded = lexicon.shortlist(table(), np.array([[5]]), frequent=1, per_word=1, multiple=4)
  assert len(padded) == 8 and padded[:4].tolist() == [0, 1, 2, 3] and {7, 8} <= set(padded)
  everything = lexicon.shortlist(table(), np.array([[4]]), frequent=VT, per_word=2, multiple=64)
  assert everything.tolist() == list(range(VT))  # Capped at the vocabulary.


def test_a_missing_or_empty_table_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="build it with python -m seq2seq.build_lexicon"):
    lexicon.Lexicon.load(tmp_path / "lexicon.npz")
  empty = lexicon.Lexicon(np.full((VS, 2), -1, np.int32), np.zeros((VS, 2)), np.arange(VT))
  empty.save(tmp_path / "lexicon.npz")
  with pytest.raises(ValueError, match="is empty"):
    lexicon.Lexicon.load(tmp_path / "lexicon.npz")
  table().save(tmp_path / "good.npz")
  assert lexicon.Lexicon.load(tmp_path / "good.npz").ids[4, 0] == 7


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_shortlist_of_every_word_decodes_as_the_full_vocabulary(beam_size):
  import jax.numpy as jnp
  from flax import nnx
  from helpers import decode_random_batch, randomise

  from configs import tiny

  vocab = 30
  model = randomise(build_model(tiny.get_config().model, vocab, vocab, rngs=nnx.Rngs(0)))
  run = lambda **kw: decode_random_batch(model, beam_size, 10, seed=2, src_len=6, vocab=vocab, **kw)
  full = run()
  every = run(output_ids=jnp.arange(vocab, dtype=jnp.int32))
  np.testing.assert_array_equal(np.asarray(every.tokens), np.asarray(full.tokens))
  np.testing.assert_allclose(np.asarray(every.scores), np.asarray(full.scores), atol=1e-5)
  # A partial shortlist produces only its own words (specials first, in place).
  short = jnp.asarray([0, 1, 2, 3, 11, 17, 23], jnp.int32)
  some = np.asarray(run(output_ids=short).tokens)
  assert set(some.ravel().tolist()) <= set(np.asarray(short).tolist())


def test_evaluating_with_a_shortlist_of_every_word_changes_no_translation(trained, tmp_path):
  import shutil

  from configs import tiny
  from seq2seq import evaluation

  run = tmp_path / "run"
  shutil.copytree(trained, run, ignore=shutil.ignore_patterns("eval"))
  build_lexicon.main(["--workdir", str(run), "--top", "5"])
  config = tiny.get_config()
  config.decode.shortlist, config.decode.shortlist_frequent = str(run / lexicon.FILE), 10_000
  evaluation.evaluate_splits(config, run)
  for split in ("valid", "test"):
    got = (run / "eval" / split / "hypotheses.txt").read_text()
    assert got == (trained / "eval" / split / "hypotheses.txt").read_text()


# ------------------------------------------------------------------ scores under a shortlist
SHORT_VOCAB = 300  # Beyond the batch shortlist's padding to a multiple of 64.


def shortlisted_run(tmp_path, scope, beam_size=3):
  """A random tiny model's train state and a config decoding it over a small shortlist of a
  random lexical table (2 frequent words, 2 translations per source word)."""
  import jax
  from flax import nnx
  from helpers import random_lexicon, randomise

  from configs import tiny
  from seq2seq.training import train_state

  config = tiny.get_config()
  state = train_state.create_train_state(
    settings.validate(config), jax.random.key(0), SHORT_VOCAB, SHORT_VOCAB
  )
  state = state.replace(params=nnx.state(randomise(state.model(), seed=3), nnx.Param))
  path = tmp_path / lexicon.FILE
  random_lexicon(SHORT_VOCAB, k=2, seed=1).save(path)
  dec = config.decode
  dec.shortlist, dec.shortlist_frequent, dec.shortlist_per_word = str(path), 2, 2
  dec.shortlist_scope, dec.beam_size = scope, beam_size
  return config, state


def shortlist_batch(seed=4, batch=5):
  from helpers import random_batch

  b = random_batch(seed=seed, batch=batch, src_len=6, vocab=SHORT_VOCAB)
  return {k: b[k] for k in ("src", "src_mask")}


@pytest.mark.parametrize("beam_size", [1, 3])
def test_with_its_own_shortlist_a_sentence_translates_the_same_alone_and_in_any_batch(
  tmp_path, beam_size
):
  """Under decode.shortlist_scope="sentence" each sentence of a batch gets the output and
  score it gets alone; under "batch" its batch-mates' words change some outputs."""
  from seq2seq.decoding import decode

  def outputs(config, state, batch):
    result = decode.decode_batch(state, batch, decode.DecodeSettings.from_config(config))
    return np.asarray(result.tokens), np.asarray(result.scores)

  batch = shortlist_batch()
  differs = 0
  for scope in ("sentence", "batch"):
    config, state = shortlisted_run(tmp_path, scope, beam_size)
    tokens, scores = outputs(config, state, batch)
    for row in range(len(batch["src"])):
      alone = {k: v[row : row + 1] for k, v in batch.items()}
      one_tokens, one_scores = outputs(config, state, alone)
      same = np.array_equal(one_tokens[0], tokens[row])
      if scope == "sentence":
        assert same, row
        np.testing.assert_allclose(one_scores[0], scores[row], rtol=1e-5, atol=1e-5)
      differs += not same
  assert differs, "the batch's shortlist changed no output: the check above tells nothing"


@pytest.mark.parametrize("scope", ["batch", "sentence"])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_forced_scores_under_a_shortlist_are_what_its_search_reported(tmp_path, scope, beam_size):
  """`forcing.score_batch` (score mode) scores a batch's outputs over the same shortlist as
  `decode.decode_batch` searched: the same log-probabilities, normalised over the shortlist."""
  from seq2seq.data.tokenizer import BOS_ID, PAD_ID
  from seq2seq.decoding import decode, forcing

  config, state = shortlisted_run(tmp_path, scope, beam_size)
  batch = shortlist_batch(seed=6)
  result = decode.decode_batch(state, batch, decode.DecodeSettings.from_config(config))
  tokens, lengths = np.asarray(result.tokens), np.asarray(result.lengths)
  mask = np.arange(tokens.shape[1])[None] < lengths[:, None]
  tgt_out = np.where(mask, tokens, PAD_ID).astype(np.int32)
  tgt_in = np.concatenate([np.full((len(tgt_out), 1), BOS_ID), tgt_out[:, :-1]], axis=1)
  forced = {**batch, "tgt_in": tgt_in, "tgt_out": tgt_out, "tgt_mask": mask.astype(np.int32)}
  scored = forcing.score_batch(state, forced, decode.DecodeSettings.from_config(config))
  np.testing.assert_allclose(
    np.asarray(scored.scores), np.asarray(result.scores), rtol=1e-4, atol=1e-4
  )
  np.testing.assert_allclose(
    np.asarray(scored.norm_scores), np.asarray(result.norm_scores), rtol=1e-4, atol=1e-4
  )
  # A word outside the shortlist is impossible under it: -inf, not a full-vocabulary score.
  ids = np.asarray(decode.shortlist_of(batch, decode.DecodeSettings.from_config(config))[0])
  outside = next(w for w in range(4, SHORT_VOCAB) if w not in ids)
  forced["tgt_out"] = np.where(mask, forced["tgt_out"], PAD_ID)
  forced["tgt_out"][0, 0] = outside
  assert np.isneginf(
    float(forcing.score_batch(state, forced, decode.DecodeSettings.from_config(config)).scores[0])
  )
  assert decode.normalised_over(decode.DecodeSettings.from_config(config)) == f"shortlist ({scope})"

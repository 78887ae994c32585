"""Forced prefixes and lexical constraints: search against exhaustive enumeration over a
fixed-table model, plain beam search where nothing is constrained, every constraint in every
output of a real model, scores that forced decoding gives back, and the one-line refusals of the
translate mode and the Python API."""

import itertools
import json

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import (
  VOCAB,
  TableModel,
  build_model,
  compiled,
  penalised,
  random_batch,
  randomise,
  run_main,
  score_of,
  tiny_model,
)

import seq2seq
from configs import tiny
from seq2seq import translate
from seq2seq.data import tokenizer as tk
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.decoding import beams, constraints, forcing, inference, left_to_right


def packed(per_sentence):
  return jax.tree.map(jnp.asarray, constraints.pack(per_sentence))


def occurrences(seq, phrase) -> int:
  """Non-overlapping occurrences of `phrase` in `seq`, left to right."""
  count, i = 0, 0
  while i + len(phrase) <= len(seq):
    if tuple(seq[i : i + len(phrase)]) == tuple(phrase):
      count, i = count + 1, i + len(phrase)
    else:
      i += 1
  return count


def contains(seq, phrases) -> bool:
  """Whether `seq` holds every phrase, a phrase listed twice twice (different phrases used here
  share no word, so this is the constraints' own reading)."""
  wanted = {}
  for p in phrases:
    wanted[tuple(p)] = wanted.get(tuple(p), 0) + 1
  return all(occurrences(seq, p) >= n for p, n in wanted.items())


def exhaustive_best(table_VV, max_len, penalty, keep):
  """(tokens, ranking score) of the best ended output that `keep(tokens)` accepts, by
  enumeration in float64."""
  rank = penalised(penalty)
  words = [w for w in range(table_VV.shape[0]) if w not in (PAD_ID, BOS_ID, EOS_ID)]
  best = None
  for length in range(1, max_len + 1):
    for body in itertools.product(words, repeat=length - 1):
      seq = (*body, EOS_ID)
      if keep(seq):
        norm = rank(score_of(table_VV, seq), length)
        if best is None or norm > best[1]:
          best = (seq, norm)
  return best


# Phrases over the words 3, 4, 5 (vocabulary 6); different phrases of a case share no word, but
# a phrase may repeat a word (4 4 3), begin as it ends (4 3 4), or be listed twice.
CASES = [
  [[4]],
  [[3, 4]],
  [[5], [5]],
  [[3, 4], [5]],
  [[4, 3, 5]],
  [],
  [[4, 4, 3]],
  [[4, 3, 4]],
  [[4, 3, 4, 5]],
  [[4, 4], [4, 4]],
  [[3, 3, 4], [5]],
]


@pytest.mark.parametrize("penalty", ["power", "none", "word(penalty=0.5)"])
def test_constrained_beam_finds_the_best_output_that_holds_every_phrase(penalty):
  """A beam wider than every prefix keeps every prefix that can still meet its constraints, so
  it must find the exhaustive best among the outputs that contain them."""
  vocab, max_len = 6, 5
  rows = len(CASES)
  table = 2.0 * np.random.default_rng(11).normal(size=(rows, vocab, vocab))
  src = jnp.full((rows, 3), 5, jnp.int32)
  res = beams.beam_search(
    TableModel(table),
    src,
    jnp.ones_like(src),
    beam_size=256,
    max_len=max_len,
    length_penalty=penalty,
    constraints=packed(CASES),
  )
  differs = 0
  for b, phrases in enumerate(CASES):
    want, norm = exhaustive_best(table[b], max_len, penalty, lambda s, p=phrases: contains(s, p))
    got = tuple(int(t) for t in res.tokens[b, : int(res.lengths[b])])
    # The best, or one that ties with it: a bigram table scores 4 4 3 4 as it scores 4 3 4 4.
    assert got == want or (contains(got, phrases) and len(got) == len(want)), (phrases, got, want)
    np.testing.assert_allclose(score_of(table[b], got), score_of(table[b], want), rtol=1e-9)
    np.testing.assert_allclose(res.norm_scores[b], norm, rtol=1e-5)
    np.testing.assert_allclose(res.scores[b], score_of(table[b], want), rtol=1e-5)
    differs += want != exhaustive_best(table[b], max_len, penalty, lambda s: True)[0]
  assert differs >= 3, "the constraints should change most of the best outputs"


def test_a_wide_beam_finds_the_phrase_4_4_3_after_another_4():
  """A table that likes 4 after 4: of the outputs holding 4 4 3, the best (length-normalised) is
  4 4 4 3, which a tracker that restarts a broken phrase at its first word never accepts."""
  table = np.full((6, 6), -4.0)
  table[BOS_ID, 4] = table[4, 4] = table[3, EOS_ID] = 4.0
  table[4, 3] = 2.0
  want, norm = exhaustive_best(table, 5, "power", lambda s: contains(s, [[4, 4, 3]]))
  assert want == (4, 4, 4, 3, EOS_ID)
  src = jnp.full((1, 3), 5, jnp.int32)
  cons = packed([[[4, 4, 3]]])
  res = beams.beam_search(
    TableModel(table[None]), src, jnp.ones_like(src), beam_size=256, max_len=5, constraints=cons
  )
  assert tuple(int(t) for t in res.tokens[0, : int(res.lengths[0])]) == want
  np.testing.assert_allclose(res.norm_scores[0], norm, rtol=1e-5)


@pytest.mark.parametrize("beam_size", [1, 256])
def test_a_forced_prefix_starts_the_best_output_that_begins_with_it(beam_size):
  """Beam search with a prefix finds the exhaustive best of the outputs that start with it;
  greedy (beam 1) takes the prefix, then the argmax path; the prefix's words count in the
  score."""
  vocab, max_len = 6, 5
  prefixes = [[4], [3, 5], [5, 5, 5], []]
  table = 2.0 * np.random.default_rng(5).normal(size=(len(prefixes), vocab, vocab))
  prefix_BP = np.zeros((len(prefixes), 3), np.int32)
  for b, p in enumerate(prefixes):
    prefix_BP[b, : len(p)] = p
  src = jnp.full((len(prefixes), 3), 5, jnp.int32)
  model, mask = TableModel(table), jnp.ones_like(src)
  if beam_size == 1:
    res = left_to_right.greedy(model, src, mask, max_len=max_len, prefix_BP=jnp.asarray(prefix_BP))
  else:
    res = beams.beam_search(
      model, src, mask, beam_size=beam_size, max_len=max_len, prefix_BP=jnp.asarray(prefix_BP)
    )
  for b, p in enumerate(prefixes):
    got = tuple(int(t) for t in res.tokens[b, : int(res.lengths[b])])
    assert got[: len(p)] == tuple(p)
    if beam_size > 1:
      starts = lambda s, p=p: s[: len(p)] == tuple(p) and EOS_ID not in s[: len(p)]
      assert got == exhaustive_best(table[b], max_len, "power", starts)[0]
    else:  # After the prefix, each word is the table's argmax over the allowed words.
      logits = np.asarray(table[b]).copy()
      logits[:, [PAD_ID, BOS_ID]] = -np.inf
      prev = [BOS_ID, *got[:-1]]
      for t in range(len(p), len(got)):
        assert got[t] == int(np.argmax(logits[prev[t]]))
    if got[-1] == EOS_ID:
      np.testing.assert_allclose(res.scores[b], score_of(table[b], got), rtol=1e-5)


@pytest.mark.parametrize("nbest", [None, 3])
def test_sentences_without_constraints_are_searched_as_plain_beam_search(nbest):
  """In a batch where some sentences have constraints, the others get exactly what plain beam
  search gives them (tokens, scores, attention), and with no constraints at all, every one."""
  model = tiny_model()
  b = random_batch(seed=3, batch=4, src_len=7, vocab=VOCAB)
  src, mask = jnp.asarray(b["src"]), jnp.asarray(b["src_mask"])
  settings = {"beam_size": 4, "max_len": 12}
  search = lambda **kw: (
    beams.beam_search(model, src, mask, **settings, **kw)
    if nbest is None
    else beams.beam_search_nbest(model, src, mask, nbest=nbest, **settings, **kw)
  )
  plain = search()
  for per_sentence, free in [([[], [], [], []], [0, 1, 2, 3]), ([[[7, 8]], [], [[9]], []], [1, 3])]:
    constrained = search(constraints=packed(per_sentence))
    for field, p, c in zip(plain._fields, plain, constrained, strict=True):
      np.testing.assert_array_equal(np.asarray(c)[free], np.asarray(p)[free], err_msg=field)
  best = np.asarray(constrained.tokens).reshape(4, -1, 12)[0, 0].tolist()
  assert any(best[i : i + 2] == [7, 8] for i in range(11))


def check_constrained(model, src, mask, per_sentence, beam_size, max_len=14):
  """Every output of the n-best list (2 best, or 1 at beam 1) of a constrained beam search
  contains every phrase of its sentence, ends with EOS, and scores under forced decoding what
  the search reported. The outputs are force-decoded together, padded to `max_len`."""
  nbest = min(beam_size, 2)
  res = compiled(
    beams.beam_search_nbest,
    model,
    src,
    mask,
    beam_size=beam_size,
    max_len=max_len,
    nbest=nbest,
    constraints=packed(per_sentence),
  )
  found = []  # (sentence, rank, output)
  for row, phrases in enumerate(per_sentence):
    for rank in range(nbest):
      if not np.isfinite(res.scores[row, rank]):
        assert rank > 0  # Only later slots of the list may be empty.
        continue
      n = int(res.lengths[row, rank])
      out = [int(t) for t in res.tokens[row, rank, :n]]
      assert out[-1] == EOS_ID, (phrases, out)
      for phrase in phrases:  # Each phrase in the output, in its words' order.
        assert any(out[i : i + len(phrase)] == list(phrase) for i in range(n)), (phrase, out)
      found.append((row, rank, out))
  slots = len(per_sentence) * nbest  # Unused slots: copies of the first output.
  padded = found + [found[0]] * (slots - len(found))
  tgt_in, tgt_out = (np.full((slots, max_len), PAD_ID, np.int32) for _ in range(2))
  tgt_mask = np.zeros((slots, max_len), np.int32)
  for i, (_, _, out) in enumerate(padded):
    n = len(out)
    tgt_in[i, :n], tgt_out[i, :n], tgt_mask[i, :n] = [BOS_ID, *out[:-1]], out, 1
  rows = np.asarray([row for row, _, _ in padded])
  forced = compiled(
    forcing.force_decode,
    model,
    src[rows],
    mask[rows],
    *(jnp.asarray(x) for x in (tgt_in, tgt_out, tgt_mask)),
  )
  for i, (row, rank, _) in enumerate(found):
    np.testing.assert_allclose(forced.scores[i], res.scores[row, rank], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(
      forced.norm_scores[i], res.norm_scores[row, rank], rtol=1e-4, atol=1e-4
    )


@hypothesis.settings(deadline=None, max_examples=10, derandomize=True)
@hypothesis.given(
  seed=hypothesis.strategies.integers(0, 10_000),
  beam_size=hypothesis.strategies.sampled_from([1, 2, 5]),
)
def test_every_output_holds_every_constraint_and_forced_decoding_agrees(seed, beam_size):
  """A randomised tiny RNNsearch and random phrases (repeated words, phrases of one to three
  words): `check_constrained`."""
  rng = np.random.default_rng(seed)
  b = random_batch(seed=seed, batch=3, src_len=6, vocab=VOCAB)
  per_sentence = [
    [list(rng.integers(4, VOCAB, rng.integers(1, 4))) for _ in range(rng.integers(0, 3))]
    for _ in range(3)
  ]
  src, mask = jnp.asarray(b["src"]), jnp.asarray(b["src_mask"])
  check_constrained(tiny_model(eos_bias=2.0), src, mask, per_sentence, beam_size)


def test_constraints_hold_for_every_kind_of_model():
  """RNNencdec, Luong's decoder, two sources and a copying model (whose outputs run past the
  vocabulary): `check_constrained`, and a prefix starts their greedy outputs."""
  per_sentence = [[[7, 8], [9]], [], [[12]]]
  b = random_batch(seed=1, batch=3, src_len=6, vocab=VOCAB)
  two = np.concatenate([b["src"], b["src"]], axis=1), np.concatenate([b["src_mask"]] * 2, axis=1)
  copying = tiny.get_config().model
  copying.addons = "copy"  # Every source word has its twin, the target word of the same id.
  copy_map = np.arange(VOCAB, dtype=np.int32)
  copier = randomise(build_model(copying, VOCAB, VOCAB, rngs=nnx.Rngs(2), copy_map=copy_map))
  cases = [
    (tiny_model("rnnencdec", eos_bias=2.0), b["src"], b["src_mask"]),
    (tiny_model(decoder="luong(cell=lstm, layers=2)", eos_bias=2.0), b["src"], b["src_mask"]),
    (tiny_model(sources=2, multi_source="concat", eos_bias=2.0), *two),
    (copier, b["src"], b["src_mask"]),
  ]
  prefix = jnp.asarray([[9, 9], [5, 0], [0, 0]], jnp.int32)
  for model, src, mask in cases:
    src, mask = jnp.asarray(src), jnp.asarray(mask)
    check_constrained(model, src, mask, per_sentence, beam_size=3)
    out = left_to_right.greedy(model, src, mask, max_len=10, prefix_BP=prefix).tokens
    assert np.asarray(out[0, :2]).tolist() == [9, 9] and int(out[1, 0]) == 5


def test_progress_gives_back_a_broken_phrase_and_starts_it_again():
  """`met_after` counts what `advance` then records: a phrase started, broken off (its met
  tokens given back), started again by the breaking word itself, and finished."""
  cons = packed([[[4, 5, 6], [7]]])
  prog = constraints.initial(cons)
  padding = int(cons.padding.sum())
  for word, count, following in [(4, 1, 1), (4, 1, 1), (5, 2, 2), (9, 0, -1), (7, 1, -1)]:
    assert int(constraints.met_after(cons, prog, 10)[0, word]) == count + padding
    prog = constraints.advance(cons, prog, jnp.asarray([word]))
    assert int(prog.met.sum()) == count + padding
    assert int(prog.next[0]) == following


def test_a_broken_phrase_keeps_its_longest_prefix_that_ends_the_output():
  """Knuth-Morris-Pratt: the output 4 4 4 3 holds the phrase 4 4 3 (the third 4 breaks it after
  4 4, but the output still ends in 4 4), and 4 3 4 3 4 5 holds 4 3 4 5 (broken after 4 3 4 by
  a 3, it keeps 4 3)."""
  for phrase, words, counts in [
    ([4, 4, 3], [4, 4, 4, 3], [1, 2, 2, 3]),
    ([4, 3, 4, 5], [4, 3, 4, 3, 4, 5], [1, 2, 3, 2, 3, 4]),
  ]:
    cons = packed([[phrase]])
    prog = constraints.initial(cons)
    padding = int(cons.padding.sum())
    for word, count in zip(words, counts, strict=True):
      assert int(constraints.met_after(cons, prog, 10)[0, word]) == count + padding
      prog = constraints.advance(cons, prog, jnp.asarray([word]))
      assert int(prog.met.sum()) == count + padding, (phrase, word)
    assert bool(prog.met.all()) and int(prog.next[0]) == -1


@pytest.mark.parametrize("phrases", CASES, ids=str)
def test_every_constraint_is_met_exactly_when_the_output_holds_every_phrase(phrases):
  """Every output of up to 6 words over 3, 4, 5: after each word, all slots are met exactly when
  the output so far holds every phrase (`contains`), and `met_after` counts what `advance`
  records."""
  outputs = np.array(list(itertools.product([3, 4, 5], repeat=6)), np.int32)
  n = len(outputs)
  cons = packed([phrases] * n)
  prog = constraints.initial(cons)
  for t in range(outputs.shape[1]):
    word_N = jnp.asarray(outputs[:, t])
    counted_N = constraints.met_after(cons, prog, 6)[jnp.arange(n), word_N]
    prog = constraints.advance(cons, prog, word_N)
    np.testing.assert_array_equal(prog.met.sum(-1), counted_N)
    want = np.array([contains(tuple(out[: t + 1]), phrases) for out in outputs.tolist()])
    wrong = np.flatnonzero(np.asarray(prog.met.all(-1)) != want)
    assert not wrong.size, (phrases, outputs[wrong[0], : t + 1].tolist(), want[wrong[0]])


# ------------------------------------------------------------------ the trained tiny run


@pytest.fixture(scope="module")
def loaded(trained):
  return seq2seq.load(trained)


SOURCES = ["the cat sleeps .", "", "the dog does not eat apples .", "a big house ."]


def test_api_prefixes_start_every_translation_and_score_as_forced_decoding(loaded):
  """Each translation of a line starts with its prefix, in greedy, beam and sampling; scored
  as a given translation it gets what the search reported."""
  prefixes = ["le chien", "", "", "une"]
  for how in [{"beam_size": 1}, {"beam_size": 3}, {"sampling": "sample(n=3, seed=1)"}]:
    found = loaded.translate(SOURCES, prefixes=prefixes, nbest=how.get("beam_size", 3), **how)
    assert found[1] == []
    for source, prefix, hyps in zip(SOURCES, prefixes, found, strict=True):
      for h in hyps:
        assert h.tokens[: len(prefix.split())] == prefix.split()
        if h.finished:
          [scored] = loaded.score([source], [h.text])
          np.testing.assert_allclose(scored.score, h.score, rtol=1e-4, atol=1e-4)


def test_api_constraints_appear_in_every_translation(loaded):
  constraints_ = [["maison", "le chat"], [], ["chien"], []]
  found = loaded.translate(SOURCES, constraints=constraints_, nbest=3)
  plain = loaded.translate(SOURCES, nbest=3)
  for hyps, phrases in zip(found, constraints_, strict=True):
    for h in hyps:
      text = f" {' '.join(h.tokens)} "
      assert all(f" {p} " in text for p in phrases), (phrases, h.tokens)
  assert [h.text for h in found[3]] == [h.text for h in plain[3]]  # None: as plain search.
  [[one]] = loaded.translate(["a big house ."], constraints=[["chat"]], beam_size=1)
  assert "chat" in one.tokens


def test_api_refuses_what_it_cannot_do_in_one_line(loaded):
  cases = [
    ({"constraints": [["chat"]]}, "constraints: 1 entries for 4 lines"),
    ({"prefixes": ["le"] * 4, "constraints": [[]] * 4}, "cannot be combined: give one"),
    ({"constraints": [["zzzqqq"], [], [], []]}, "outside the target vocabulary"),
    ({"constraints": [[""], [], [], []]}, "is no phrase"),
    ({"constraints": [["chat"] * 40, [], [], []]}, "line 1: its constraints and EOS need 41"),
    ({"prefixes": ["le " * 40, "", "", ""]}, "line 1: its prefix and EOS need 41"),
    (
      {"prefixes": ["", "", "le zzzqqq", ""]},
      "prefix of line 3: 'le zzzqqq' holds 'zzzqqq', outside",
    ),
    (
      {"constraints": [[]] * 4, "sampling": "sample(n=2)", "nbest": 2},
      "constraints cannot be combined with decode.sampling",
    ),
  ]
  for kwargs, message in cases:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
      loaded.translate(SOURCES, **kwargs)
  with pytest.raises(ValueError, match="holds 'zzzqqq', outside the target vocabulary"):
    translate.beam_view(loaded, SOURCES[0], prefix="zzzqqq", beam_size=2)


def test_unk_replacement_never_replaces_a_forced_word():
  """The first `forced` output tokens were forced (a prefix): an <unk> there stays, while an
  <unk> the model chose becomes the source word it attends to most."""
  src_vocab = tk.WordVocab.build(["le chat noir"], 10)
  tgt_vocab = tk.WordVocab.build(["the cat"], 10)
  alpha = np.array([[0.1, 0.8, 0.05, 0.05], [0.1, 0.1, 0.7, 0.1], [0.0, 0.0, 0.0, 1.0]])
  hyp = inference.Hypothesis([tk.UNK_ID, tk.UNK_ID], alpha)  # [2 outputs + EOS, 3 words + EOS].
  text = lambda **kw: inference.with_text(hyp, "le chat noir", src_vocab, tgt_vocab, True, **kw)
  assert text().text == "chat noir"
  assert text(forced=1).text == "<unk> noir" and text(forced=1).tokens == ["<unk>", "<unk>"]
  assert text(forced=2).text == "<unk> <unk>"


def test_translations_tell_unk_replacement_how_many_words_were_forced(loaded, monkeypatch):
  seen = []

  def recording(hyp, *args, forced=0, **kwargs):
    seen.append(forced)
    return with_text(hyp, *args, forced=forced, **kwargs)

  with_text = inference.with_text
  monkeypatch.setattr(inference, "with_text", recording)
  prefixes = ["le chien", "", "", "une"]
  loaded.translate(SOURCES, prefixes=prefixes, beam_size=2, replace_unk=True)
  assert seen == [2, 0, 1]  # The blank line gets no translation.
  seen.clear()
  translate.beam_view(loaded, SOURCES[0], prefix="le chien", beam_size=2, replace_unk=True)
  assert seen == [2]


def test_translate_mode_reads_prefix_and_constraint_files_or_writes_nothing(trained, tmp_path):
  """--prefixes and --constraints files steer main.py's translations; a file with another
  number of lines, or a line that is no list of phrases, is one error line and no output."""
  src, out = tmp_path / "src.txt", tmp_path / "out.txt"
  src.write_text("".join(s + "\n" for s in SOURCES))
  (tmp_path / "prefixes.txt").write_text("le chien\n\n\nune\n")
  cons = [["maison"], [], [], ["le chat"]]
  (tmp_path / "cons.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cons))
  common = ["--config.train.num_steps=20", "--mode=translate", f"--input={src}"]
  run_main(trained, *common, f"--output={out}", f"--prefixes={tmp_path}/prefixes.txt")
  lines = out.read_text().split("\n")[:-1]
  assert lines[0].startswith("le chien") and lines[1] == "" and lines[3].startswith("une")
  run_main(trained, *common, f"--output={out}", f"--constraints={tmp_path}/cons.jsonl")
  lines = out.read_text().split("\n")[:-1]
  assert "maison" in lines[0].split() and "le chat" in lines[3]
  (tmp_path / "short.jsonl").write_text('["chat"]\n')
  (tmp_path / "bad.jsonl").write_text('["chat"]\n{"a": 1}\n[]\n[]\n')
  (tmp_path / "unknown.txt").write_text("le\n\nzzzqqq chien\n\n")
  cases = [
    (
      f"--constraints={tmp_path}/short.jsonl",
      f"{src} has 4 lines but {tmp_path}/short.jsonl has 1",
    ),
    (f"--constraints={tmp_path}/bad.jsonl", "bad.jsonl, line 2: give a JSON list of phrases"),
    (f"--prefixes={tmp_path}/unknown.txt", "prefix of line 3: 'zzzqqq chien' holds 'zzzqqq'"),
  ]
  for flag, message in cases:
    fresh = tmp_path / "fresh.txt"
    proc = run_main(trained, *common, f"--output={fresh}", flag, check=False)
    assert proc.returncode == 1 and not fresh.exists()
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error:") and message in line, line
  proc = run_main(
    trained, "--mode=score", f"--input={src}", f"--reference={src}", flag, check=False
  )
  assert "--prefixes and --constraints steer --mode=translate only" in proc.stderr

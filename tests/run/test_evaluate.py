"""Metrics on hand-made examples: BLEU, No-UNK subset, length bins, AER, entropy, plots."""

import collections
import gzip

import jax
import numpy as np
import pytest
from flax import nnx
from helpers import data_settings

from configs import tiny
from seq2seq import checkpoints, evaluation, plots, settings, translate
from seq2seq import sharding as rt
from seq2seq.data import input_pipeline, metrics, synthetic
from seq2seq.data import tokenizer as tk
from seq2seq.decoding import inference, mbr
from seq2seq.decoding.decode import DecodeSettings
from seq2seq.training import train_state

REFS = [
  "the cat sat on the mat .",
  "a dog barks at the moon tonight .",
  "le chat est sur le tapis rouge et noir ce soir .",
]


def test_bleu_of_reference_against_itself_is_100():
  score, signature = metrics.bleu(REFS, REFS)
  assert score == pytest.approx(100.0, abs=1e-6)
  assert "tok:13a" in signature
  assert metrics.tokenized_bleu(REFS, REFS) == pytest.approx(100.0, abs=1e-6)
  assert metrics.chrf(REFS, REFS) == pytest.approx(100.0, abs=1e-6)
  assert metrics.bleu(["x y z w"] * 3, REFS)[0] < 1.0


def test_length_ratio_counts_13a_words_of_the_whole_corpus():
  assert metrics.length_ratio(REFS, REFS) == 1.0
  # 7 + 8 + 12 reference words (13a splits off the final "."); the output drops 3 and 6 words.
  short = ["the cat sat on .", "a dog barks at the moon tonight .", "le chat est sur le tapis ."]
  assert metrics.length_ratio(short, REFS) == pytest.approx((5 + 8 + 7) / (7 + 8 + 12))


def test_lowercased_bleu_and_chrf_ignore_case_only():
  upper = [r.upper() for r in REFS]
  assert metrics.bleu(upper, REFS)[0] < 5.0
  score, signature = metrics.bleu(upper, REFS, lowercase=True)
  assert score == pytest.approx(100.0, abs=1e-6) and "case:lc" in signature
  assert metrics.chrf(upper, REFS) < 50.0
  assert metrics.chrf(upper, REFS, lowercase=True) == pytest.approx(100.0, abs=1e-6)


def test_an_unknown_word_scores_as_one_wrong_word():
  """An output <unk> is one word that matches nothing, as multi-bleu.perl counts GroundHog's UNK:
  sacrebleu's 13a (and Moses) would split the text "<unk>" into "< unk >", three words that
  lengthen the output (1.7 BLEU on a Multi30k validation set with 1.5% of its words unknown)."""
  refs = ["the black cat sleeps on the mat .", "a dog runs in the park ."]
  unk = ["the black cat sleeps on the <unk> .", "a <unk> runs in the park ."]
  wrong = ["the black cat sleeps on the zzz .", "a zzz runs in the park ."]
  assert metrics.bleu(unk, refs)[0] == pytest.approx(metrics.bleu(wrong, refs)[0])
  assert metrics.bleu(unk, refs, lowercase=True)[0] == pytest.approx(metrics.bleu(wrong, refs)[0])
  sp = tk.SentencePieceTokenizer.train(refs * 20, size=40)
  assert metrics.tokenized_bleu(unk, refs, sp, "en") == pytest.approx(
    metrics.tokenized_bleu(wrong, refs, sp, "en")
  )
  assert metrics.chrf(unk, refs) < metrics.chrf(refs, refs)


def test_no_unk_subset():
  assert metrics.no_unk_subset([False, True, False, False], [False, False, True, False]) == [0, 3]


def test_bleu_by_length_bins_and_counts():
  hyps = [REFS[0], "completely wrong words here", REFS[2]]
  rows = metrics.bleu_by_length(hyps, REFS, src_lengths=[7, 25, 28])
  assert [(r["min_len"], r["max_len"], r["count"]) for r in rows] == [(1, 10, 1), (21, 30, 2)]
  assert rows[0]["bleu"] == pytest.approx(100.0)
  want, _ = metrics.bleu(hyps[1:], REFS[1:])
  assert rows[1]["bleu"] == pytest.approx(want)


def test_links_from_attention():
  alpha = np.array([[0.7, 0.2, 0.1], [0.1, 0.45, 0.45], [0.0, 0.1, 0.9]])
  assert metrics.argmax_links(alpha) == {(0, 0), (1, 1), (2, 2)}
  assert metrics.threshold_links(alpha, 0.4) == {(0, 0), (1, 1), (2, 1), (2, 2)}


def test_alignment_error_rate_hand_computed():
  gold = [{(0, 0), (1, 1), (2, 2)}]
  assert metrics.alignment_error_rate(gold, gold) == 0.0
  assert metrics.alignment_error_rate([{(0, 1), (1, 0)}], gold) == 1.0
  # Shifted by one target position: {(0,1),(1,2),(2,3)} shares (none) -> 1; a partial overlap:
  pred = [{(0, 0), (1, 1), (2, 1)}]  # |A|=3, |A&S|=2, |S|=3 -> 1 - 4/6.
  assert metrics.alignment_error_rate(pred, gold) == pytest.approx(1 - 4 / 6)
  # Possible links count for precision only: (2,1) possible -> 1 - (2 + 3) / 6.
  assert metrics.alignment_error_rate(pred, gold, [{(2, 1)}]) == pytest.approx(1 - 5 / 6)


def test_attention_entropy():
  uniform = np.full((2, 4), 0.25)
  assert metrics.attention_entropy([uniform]) == pytest.approx(np.log(4))
  assert metrics.attention_entropy([np.eye(3)]) == pytest.approx(0.0, abs=1e-9)
  # Local-p's rows sum to less than 1: the entropy is the renormalised row's.
  assert metrics.attention_entropy([0.4 * uniform]) == pytest.approx(np.log(4))


def test_plots_write_pngs(tmp_path):
  """A heatmap's PNG holds the pixels it returns for TensorBoard (one drawing serves both)."""
  import matplotlib.image

  image = plots.alignment_heatmap(
    np.eye(3)[:, ::-1], ["a", "b", "c"], ["x", "y", "z"], tmp_path / "h.png"
  )
  assert image.ndim == 3 and image.dtype == np.uint8 and image.shape[-1] == 3
  png = np.round(matplotlib.image.imread(tmp_path / "h.png")[..., :3] * 255).astype(np.uint8)
  np.testing.assert_array_equal(png, image)
  assert image.min() == 0 and image.max() == 255  # Black and white cells, white margins.
  rows = [{"min_len": 1, "max_len": 10, "count": 3, "bleu": 20.0}]
  plots.bleu_vs_length({"RNNsearch": rows}, tmp_path / "b.png")
  assert (tmp_path / "b.png").stat().st_size > 0


def test_bleu_is_on_detokenised_text(tmp_path):
  """Outputs equal to the references, written to a hypothesis file, score 100 against raw text."""
  refs = [
    "L'homme regarde aujourd'hui 3 chiens, qui courent.",
    "« Où est-il ? » demande l'enfant d'un air inquiet.",
    "Deux femmes, l'une en rouge, marchent.",
  ]
  vocab = tk.WordVocab.build(refs, 100, tk.Pretokenizer("moses", "fr"))
  src_vocab = tk.WordVocab.build(["x"], 10)
  hyps = [
    inference.output_text(
      inference.Hypothesis(vocab.encode(r), np.zeros((0, 0))), "x", src_vocab, vocab
    )
    for r in refs
  ]
  path = tmp_path / "hypotheses.txt"
  path.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
  score, _ = metrics.bleu(path.read_text(encoding="utf-8").splitlines(), refs)
  assert score == pytest.approx(100.0, abs=1e-6)
  joined = [" ".join(vocab.tokenize(r)) for r in refs]  # What scoring token ids would see.
  assert metrics.bleu(joined, refs)[0] < 90.0


def test_shifted_links_and_their_aer():
  gold = [{(0, 0), (1, 1), (2, 2)}]
  late = {(0, 1), (1, 2), (2, 3)}  # Each source word is linked one target position too late.
  assert metrics.alignment_error_rate([late], gold) == 1.0
  assert metrics.shift_links(late, -1, num_target=4) == {(0, 0), (1, 1), (2, 2)}
  assert metrics.alignment_error_rate([metrics.shift_links(late, -1, 4)], gold) == 0.0
  assert metrics.shift_links({(0, 0), (1, 3)}, 1, num_target=4) == {(0, 1)}  # t=4 drops.
  assert metrics.shift_links({(0, 0)}, -1, num_target=3) == set()  # t=-1 drops.
  # Forward instead: {(0, 2), (1, 3)} (t=4 drops): |A|=2, |S|=3, no overlap -> 1.
  assert metrics.alignment_error_rate([metrics.shift_links(late, 1, 4)], gold) == 1.0
  # A partial match: {(0, 0), (1, 2)} vs gold -> 1 - 2 * 1 / (2 + 3).
  pred = metrics.shift_links({(0, 1), (1, 3)}, -1, 4)
  assert metrics.alignment_error_rate([pred], gold) == pytest.approx(1 - 2 / 5)


def test_shifted_aer_is_zero_for_attention_exactly_one_word_off():
  """Gold links of the target word the shift cannot reach (the last one, shifted back) are left
  out with it: they would count as misses no alignment could avoid."""
  gold = {(0, 0), (1, 1), (2, 2), (3, 3)}  # The last target word has a gold link.
  late = {(0, 1), (1, 2), (2, 3)}  # Word t's attention on source t-1; step 0 attends to EOS.
  assert metrics.shifted_aer([late], [gold], -1, [4]) == 0.0
  assert metrics.shifted_aer([gold], [gold], 1, [4]) == 1.0
  # Shifted forward, step 0's gold is out of reach: (0,1),(1,2),(2,3) vs gold of words 1-3.
  early = {(1, 0), (2, 1), (3, 2)}
  assert metrics.shifted_aer([early], [gold], 1, [4]) == 0.0


def test_over_translation_counts_repeats_beyond_the_reference():
  assert metrics.over_translation("le chat chat chat dort".split(), "le chat dort".split()) == 2
  assert metrics.over_translation("le le chat".split(), "le chat voit le chien".split()) == 0
  assert metrics.over_translation("un un".split(), "le chat".split()) == 1
  assert metrics.over_translation([], "le chat".split()) == 0
  # An output <unk> stands for a word the vocabulary lacks, each possibly another: never a repeat.
  out = "le <unk> chat <unk> dort".split()
  assert metrics.over_translation(out, "le zorblat chat mindelle dort".split()) == 0
  assert metrics.over_translation(["▁le<unk>", "▁le<unk>"], ["le", "le"]) == 0  # Pieces joined.


def test_under_translation_counts_unattended_content_words():
  content = tk.NUM_SPECIALS + metrics.CONTENT_RANK
  src = [content + 1, 5, content + 7, content + 2]  # Position 1 is a frequent word.
  alpha = np.zeros((3, 5))  # One extra column (EOS) is ignored.
  alpha[0, 0] = alpha[1, 1] = alpha[2, 4] = 1.0  # Positions 2 and 3 never get an argmax.
  assert metrics.under_translation(alpha, src) == 2
  alpha[2, 4], alpha[2, 2] = 0.0, 1.0
  assert metrics.under_translation(alpha, src) == 1
  assert metrics.under_translation(np.zeros((0, 1)), []) == 0


def test_tokenized_bleu_scores_the_target_tokenizers_words():
  """Tokenised BLEU splits both sides into the words the run's target tokenizer uses: with a
  Moses pretokenizer "tapis." is "tapis ." on either side, so punctuation attached differently
  costs nothing, where a whitespace split of the raw text would count "tapis." as a word."""
  refs = ["le chat dort sur le tapis.", "Où est-il ? demande l'enfant, inquiet."]
  hyps = ["le chat dort sur le tapis .", "Où est-il? demande l'enfant , inquiet ."]
  moses = tk.Pretokenizer("moses", "fr")
  vocab = tk.WordVocab.build(refs, 100, moses)
  assert metrics.tokenized_bleu(hyps, refs, vocab) == pytest.approx(100.0)
  tokens = [" ".join(moses.split(h)) for h in hyps], [" ".join(moses.split(r)) for r in refs]
  assert metrics.tokenized_bleu(*tokens) == pytest.approx(100.0)
  assert metrics.tokenized_bleu(hyps, refs) < 60.0  # The old whitespace split of raw text.
  # SentencePiece pieces are not words: its runs split with Moses for the target language.
  sp = tk.SentencePieceTokenizer.train(refs * 20, size=60)
  assert metrics.tokenized_bleu(hyps, refs, sp, "fr") == pytest.approx(100.0)
  conventions = metrics.bleu_conventions(vocab, "fr")
  expected = {"bleu", "bleu_tokenized", "bleu_no_unk", "bleu_by_length", "chrf", "bleu_lowercase"}
  assert expected <= set(conventions)
  assert "moses" in conventions["bleu_tokenized"] and "13a" in conventions["bleu"]


@pytest.fixture(scope="module")
def sp_run(tmp_path_factory):
  """configs/tiny.py on the embedded corpus with SentencePiece on both sides and an untrained
  model (greedy decoding): enough to check what evaluate_split computes on, not how well."""
  config = tiny.get_config()
  config.data.tokenizer = "sentencepiece"
  config.decode.beam_size = 1
  data = input_pipeline.load_data(data_settings(config), tmp_path_factory.mktemp("sp"))
  sizes = data.src_tokenizer.size, data.tgt_tokenizer.size
  state = train_state.create_train_state(settings.validate(config), jax.random.key(0), *sizes)
  return config, data, state


def test_evaluation_with_mbr_chooses_among_each_sentences_samples(sp_run, monkeypatch):
  """With decode.mbr, every sentence of the split (and of its No-UNK pass) is chosen by MBR
  among its decode.sampling samples, and the BLEU is that of the chosen texts."""
  config, data, state = sp_run
  config = config.copy_and_resolve_references()
  config.decode.sampling = "sample(n=3, temperature=2.0)"
  config.decode.mbr = "mbr(utility=chrf)"
  chosen, real = [], mbr.order

  def spy(texts, scores, settings_):
    order = real(texts, scores, settings_)
    chosen.append(texts[order[0]])
    assert len(texts) == 3
    return order

  monkeypatch.setattr(mbr, "order", spy)
  results = evaluation.evaluate_split(
    state, data, "valid", settings.validate(config), None, write=False
  )
  n = len(data.raw("valid"))
  assert len(chosen) == n + results["num_no_unk"]
  refs = [r[1] for r in data.raw("valid")]
  plain = metrics.pretokenized(config.data.corpus)
  assert results["bleu"] == pytest.approx(metrics.bleu(chosen[:n], refs, pretokenized=plain)[0])


def test_evaluate_split_scores_tokenized_bleu_on_the_target_words(sp_run, monkeypatch):
  config, data, state = sp_run
  calls = []
  real = metrics.tokenized_bleu

  def spy(*args, **kwargs):
    calls.append(args + tuple(kwargs.values()))
    return real(*args, **kwargs)

  monkeypatch.setattr(metrics, "tokenized_bleu", spy)
  results = evaluation.evaluate_split(
    state, data, "valid", settings.validate(config), None, write=False
  )
  assert [c[2:] for c in calls] == [(data.tgt_tokenizer, "fr")]
  assert results["bleu_tokenized"] == real(*calls[0])
  conventions = metrics.bleu_conventions(data.tgt_tokenizer, "fr", pretokenized=True)
  assert results["bleu_conventions"] == conventions  # The embedded corpus is written tokenised.
  assert "Moses" in conventions["bleu_tokenized"] and "force=True" in conventions["bleu"]


def test_an_empty_no_unk_subset_has_no_score(sp_run, monkeypatch):
  """Where every sentence has an unknown word the No-UNK columns are missing, not BLEU 0 (which
  a mean over seeds would take for a score)."""
  config, data, state = sp_run
  monkeypatch.setattr(metrics, "no_unk_subset", lambda src, ref: [])
  results = evaluation.evaluate_split(
    state, data, "valid", settings.validate(config), None, write=False
  )
  assert results["num_no_unk"] == 0
  assert results["bleu_no_unk"] is None and results["bleu_no_unk_plain"] is None


def test_replace_unk_copies_real_source_words_never_eos():
  """The decoded attention has a column for the source EOS; most weight there must not make an
  <unk> output the literal "</s>": only real source words are copied."""
  src_vocab = tk.WordVocab.build(["le chat noir"], 10)
  tgt_vocab = tk.WordVocab.build(["the cat"], 10)
  ids = [tk.UNK_ID, tgt_vocab.encode("cat")[0]]
  alpha = np.array([[0.1, 0.3, 0.05, 0.55], [0.2, 0.2, 0.2, 0.4], [0.0, 0.0, 0.0, 1.0]])
  tr = inference.Hypothesis(ids, alpha)  # [len(ids) + 1, 3 source words + EOS].
  out = inference.output_text(tr, "le chat noir", src_vocab, tgt_vocab, replace_unk=True)
  assert out == "chat cat"
  # A source of no words leaves the <unk> as it is.
  empty = inference.Hypothesis(ids, np.array([[1.0], [1.0], [1.0]]))
  assert inference.output_text(empty, "", src_vocab, tgt_vocab, replace_unk=True) == "<unk> cat"


def test_replace_unk_copies_only_the_words_a_truncated_source_kept():
  """A line cut to the two tokens a location score addresses was decoded over "le chat" and EOS:
  weight on that EOS column must not copy "noir", the first word cut off."""
  src_vocab = tk.WordVocab.build(["le chat noir dort"], 10)
  tgt_vocab = tk.WordVocab.build(["the cat"], 10)
  alpha = np.array([[0.1, 0.2, 0.7], [0.0, 0.0, 1.0]])  # [1 output + EOS, 2 kept words + EOS].
  tr = inference.Hypothesis([tk.UNK_ID], alpha)
  out = inference.output_text(tr, "le chat noir dort", src_vocab, tgt_vocab, replace_unk=True)
  assert out == "chat"


NO_ATTENTION = "decode.replace_unk needs attention: model.name=rnnencdec has none"


@pytest.fixture(scope="module")
def rnnencdec_run(tmp_path_factory):
  """An untrained RNNencdec run directory (vocabularies and a step-0 checkpoint)."""
  config = tiny.get_config()
  config.model.name = "rnnencdec"
  config.decode.beam_size = 1
  workdir = tmp_path_factory.mktemp("rnnencdec")
  data = input_pipeline.load_data(data_settings(config), workdir)
  state = rt.initial_state(
    settings.validate(config), data.src_tokenizer.size, data.tgt_tokenizer.size, rt.Runtime()
  )
  ckpt = checkpoints.Checkpointer(workdir, config.train.keep_checkpoints)
  ckpt.save(state, None)
  ckpt.close()
  return config, workdir, data, state


def _with_replace_unk(config):
  config = config.copy_and_resolve_references()
  config.decode.replace_unk = True
  return config


def test_evaluate_refuses_replace_unk_without_attention(rnnencdec_run, tmp_path):
  config, _, data, state = rnnencdec_run
  with pytest.raises(ValueError, match=NO_ATTENTION):
    evaluation.evaluate_split(
      state, data, "valid", settings.validate(_with_replace_unk(config)), tmp_path, write=False
    )


def test_translate_refuses_replace_unk_without_attention(rnnencdec_run, tmp_path):
  config, workdir, data, _ = rnnencdec_run
  config = _with_replace_unk(config)
  source = tmp_path / "in.txt"
  source.write_text("".join(r[0] + "\n" for r in data.raw("valid")[:4]))
  with pytest.raises(ValueError, match=NO_ATTENTION):
    translate.translate_file(config, workdir, str(source), str(tmp_path / "out.txt"))
  assert not (tmp_path / "out.txt").exists()


def test_sentencepiece_attention_maps_to_words_by_hand():
  """Source "le chat" as pieces ▁le ▁ch at, target "the cat" as ▁the ▁c at (plus EOS each):
  a source word gets the sum of its pieces' columns, a target word the mean of its pieces'
  rows, and EOS rows and columns fall away."""
  src_pieces, tgt_pieces = ["▁le", "▁ch", "at"], ["▁the", "▁c", "at"]
  src_spans, tgt_spans = metrics.word_spans(src_pieces), metrics.word_spans(tgt_pieces)
  assert src_spans == tgt_spans == [(0, 1), (1, 3)]
  alpha = np.array(
    [
      [0.6, 0.1, 0.1, 0.2],  # ▁the
      [0.1, 0.5, 0.3, 0.1],  # ▁c
      [0.0, 0.2, 0.6, 0.2],  # at
      [0.1, 0.1, 0.1, 0.7],  # EOS
    ]
  )
  want = np.array([[0.6, 0.2], [(0.1 + 0.0) / 2, (0.8 + 0.8) / 2]])
  np.testing.assert_allclose(metrics.pieces_to_words(alpha, tgt_spans, src_spans), want)
  # Pieces before the first word start (an unknown first character) make a word of their own.
  assert metrics.word_spans(["x", "▁a", "b", "▁c"]) == [(0, 1), (1, 3), (3, 4)]
  assert metrics.word_spans([]) == []
  assert metrics.pieces_to_words(np.zeros((1, 1)), [], []).shape == (0, 0)
  # A word vocabulary's tokens are words already: the mapping is the identity.
  vocab = tk.WordVocab.build(["a b c"], 10)
  assert metrics.token_spans(vocab, ["a", "b", "c"]) == [(0, 1), (1, 2), (2, 3)]
  np.testing.assert_array_equal(
    metrics.pieces_to_words(alpha, [(0, 1), (1, 2)], [(0, 1), (1, 2), (2, 3)]), alpha[:2, :3]
  )


def test_under_translation_counts_subword_content_words():
  """With spans, a source word is its pieces' ids; a content word is one outside `frequent`."""
  src = [10, 60, 61, 5]  # Words: (10,), (60, 61), (5,).
  spans = [(0, 1), (1, 3), (3, 4)]
  alpha = np.array([[0.7, 0.2, 0.1, 0.0], [0.6, 0.3, 0.1, 0.0]])  # Word-level, EOS column last.
  assert metrics.under_translation(alpha, src, spans, frequent={(10,), (5,)}) == 1
  assert metrics.under_translation(alpha, src, spans, frequent={(10,), (60, 61)}) == 1
  assert metrics.under_translation(alpha, src, spans, frequent={(10,), (5,), (60, 61)}) == 0


def _word_of_each_piece(pieces):
  """Word index of each SentencePiece piece (a new word at each "▁"), written independently."""
  starts = np.array([p.startswith("▁") for p in pieces])
  assert starts[0]
  return np.cumsum(starts) - 1


def test_teacher_forced_attention_of_a_sentencepiece_run_is_word_level(sp_run):
  config, data, state = sp_run
  raw = data.raw("valid")
  forced = inference.word_attention(state, data, "valid", DecodeSettings.from_config(config))
  assert [a.shape for a in forced] == [(len(t.split()), len(s.split())) for s, t, _ in raw]
  pieces = inference.teacher_forced_attention(
    state, data.splits["valid"], DecodeSettings.from_config(config)
  )
  assert sum(p.shape != a.shape for p, a in zip(pieces, forced, strict=True)) > len(raw) // 2
  for p, a, (s, t, _) in zip(pieces, forced, raw, strict=True):
    sw = _word_of_each_piece(data.src_tokenizer.tokenize(s))
    tw = _word_of_each_piece(data.tgt_tokenizer.tokenize(t))
    want = np.zeros(a.shape)
    for j in range(a.shape[0]):
      for i in range(a.shape[1]):
        want[j, i] = p[tw == j][:, sw == i].sum(axis=1).mean()
    np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-7)


def test_evaluate_split_aer_of_sentencepiece_runs_is_on_words(sp_run, monkeypatch):
  """An oracle attention over pieces (every piece of a target word on the first piece of each
  source word gold-linked to it) maps to the gold links exactly: thresholded AER 0."""
  config, data, state = sp_run
  raw = data.raw("valid")

  def oracle(state, split, config):
    out = []
    for s, t, links in raw:
      sw = _word_of_each_piece(data.src_tokenizer.tokenize(s))
      tw = _word_of_each_piece(data.tgt_tokenizer.tokenize(t))
      alpha = np.zeros((len(tw), len(sw)))
      for i, j in synthetic.parse_alignment(links):
        alpha[tw == j, np.flatnonzero(sw == i)[0]] = 1.0
      out.append(alpha)
    return out

  monkeypatch.setattr(inference, "teacher_forced_attention", oracle)
  results = evaluation.evaluate_split(
    state, data, "valid", settings.validate(config), None, write=False
  )
  assert results["aer_threshold"] == 0.0
  assert results["aer_subword_mapping"] == (
    "source: sum over a word's pieces; target: mean over a word's pieces"
  )


def test_under_translation_of_a_sentencepiece_run_counts_words(sp_run):
  config, data, state = sp_run
  raw = data.raw("valid")
  results = evaluation.evaluate_split(
    state, data, "valid", settings.validate(config), None, write=False
  )
  assert results["source_words"] == sum(len(s.split()) for s, _, _ in raw)
  assert 0 <= results["under_translation"] <= results["source_words"]
  assert "50 most frequent" in results["under_translation_content"]
  # The frequent words are the corpus's most frequent whitespace words (up to ties at rank 50).
  src = data.splits["train"].src
  frequent = metrics.frequent_words((src.row(i) for i in range(len(src))), data.src_tokenizer)
  words = {data.src_tokenizer.detokenize(data.src_tokenizer.decode_tokens(w)) for w in frequent}
  counts = collections.Counter(w for s, _, _ in data.raw("train") for w in s.split())
  cut = counts.most_common(metrics.CONTENT_RANK)[-1][1]
  assert (
    {w for w, n in counts.items() if n > cut} <= words <= {w for w, n in counts.items() if n >= cut}
  )


def test_no_unk_column_decodes_its_sentences_with_unk_forbidden(tmp_path):
  """The paper's No-UNK protocol: the sentences without <unk> in source or reference are decoded
  again with <unk> forbidden; the figure from the ordinary decoding stays as bleu_no_unk_plain.
  A model pushed to emit <unk> everywhere shows the difference."""
  config = tiny.get_config()
  config.decode.beam_size = 2
  data = input_pipeline.load_data(data_settings(config), tmp_path)
  sizes = data.src_tokenizer.size, data.tgt_tokenizer.size
  state = train_state.create_train_state(settings.validate(config), jax.random.key(0), *sizes)
  model = state.model()
  model.w_o.bias.value = model.w_o.bias.value.at[tk.UNK_ID].add(5.0)
  state = state.replace(params=nnx.state(model, nnx.Param))
  split, raw = data.splits["valid"], data.raw("valid")
  keep = metrics.no_unk_subset(
    [bool(np.any(split.src.row(i) == tk.UNK_ID)) for i in range(len(split))],
    [bool(np.any(split.tgt.row(i) == tk.UNK_ID)) for i in range(len(split))],
  )
  assert 0 < len(keep) < len(split)
  plain = inference.translate_split(state, split, DecodeSettings.from_config(config))
  banned = inference.translate_split(
    state, input_pipeline.subset(split, keep), DecodeSettings.from_config(config), ban_unk=True
  )
  assert all(tk.UNK_ID in plain[i].ids for i in keep)
  assert not any(tk.UNK_ID in tr.ids for tr in banned)
  text = lambda tr, i: inference.output_text(tr, raw[i][0], data.src_tokenizer, data.tgt_tokenizer)
  refs = [raw[i][1] for i in keep]
  results = evaluation.evaluate_split(
    state, data, "valid", settings.validate(config), None, write=False
  )
  want = metrics.bleu([text(tr, i) for tr, i in zip(banned, keep, strict=True)], refs)[0]
  assert results["bleu_no_unk"] == pytest.approx(want)
  assert results["bleu_no_unk_plain"] == pytest.approx(
    metrics.bleu([text(plain[i], i) for i in keep], refs)[0]
  )
  assert results["num_no_unk"] == len(keep)
  assert "--ignore-unk" in results["bleu_conventions"]["bleu_no_unk"]


@pytest.mark.parametrize("unk_bias,want", [(1e4, 1.0), (-1e4, 0.0)])
def test_valid_scores_give_the_unk_share_of_the_greedy_output(sp_run, unk_bias, want, tmp_path):
  """The UNK share of the greedy output, and the BLEU of the outputs it writes."""
  config, data, state = sp_run
  model = state.model()
  model.w_o.bias.value = model.w_o.bias.value.at[tk.UNK_ID].set(unk_bias)
  out = tmp_path / "valid.txt.gz"
  state = state.replace(params=nnx.state(model, nnx.Param))
  scores = evaluation.valid_scores(state, data, settings.validate(config), hypotheses_out=out)
  assert scores["unk_rate"] == want
  with gzip.open(out, "rt", encoding="utf-8") as f:
    hyps = f.read().splitlines()
  refs = [pair[1] for pair in data.raw("valid")]
  assert len(hyps) == len(refs)
  assert scores["bleu"] == pytest.approx(metrics.bleu(hyps, refs)[0])


def test_identical_word_offsets_measure_from_each_twin():
  src = "A man in an orange hat near Boston , Boston .".split()
  out = "Un homme avec un chapeau Orange près de Boston <unk> .".split()
  alpha = np.zeros((len(out), len(src) + 1))  # One extra column (EOS) is ignored.
  alpha[np.arange(len(out)), 0] = 1.0
  # Twins: "Orange" (case ignored) only; "Boston" occurs twice in the source, "." holds no
  # letter, "<unk>" is no word, and "un"/"an" differ.
  assert metrics.identical_word_offsets(alpha, out, src) == [-4]
  alpha[5, 0], alpha[5, 4] = 0.0, 1.0  # "Orange" now peaks on "orange".
  assert metrics.identical_word_offsets(alpha, out, src) == [0]
  alpha[5, 4], alpha[5, 5] = 0.0, 1.0  # One word ahead, on "hat".
  assert metrics.identical_word_offsets(alpha, out, src) == [1]
  pieces, words = ["▁Un", "▁chat", "▁42"], ["▁The", "▁cat", "▁42"]
  assert metrics.identical_word_offsets(np.eye(3), pieces, words) == [0]
  assert metrics.identical_word_offsets(np.eye(3)[::-1], pieces, words) == [-2]
  assert metrics.identical_word_offsets(np.zeros((0, 1)), [], []) == []


def test_twin_figures_share_each_offset():
  figures = metrics.twin_figures([[0, 0, 1], [], [-1, 5, 0], [1, 0]])
  assert figures["identical_words"] == 8 and figures["identical_word_peaks"] == 0.5
  assert figures["identical_word_offsets"] == {
    "-2": 0.0,
    "-1": 0.125,
    "+0": 0.5,
    "+1": 0.25,
    "+2": 0.0,
  }
  assert figures["identical_words_by_sentence"] == {
    "sentence": [0, 2, 3],
    "pairs": [3, 3, 2],
    "peaks": [2, 1, 1],
  }
  assert metrics.twin_counts(figures, 5).tolist() == [[3, 2], [0, 0], [3, 1], [2, 1], [0, 0]]
  assert metrics.twin_figures([[], []]) == {
    "identical_words": 0,
    "identical_word_peaks": None,
    "identical_word_offsets": None,
    "identical_words_by_sentence": {"sentence": [], "pairs": [], "peaks": []},
  }
  assert metrics.twin_counts({}, 3) is None  # A run evaluated before it was kept.

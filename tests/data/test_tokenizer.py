"""Word shortlist and SentencePiece tokenizers: round trips, UNK rates, save/load, mismatches."""

import json
import random

import numpy as np
import pytest

from seq2seq.data import tokenizer as tk

# Word counts: a 4, b 3, c 3, d 1, e 1, f 1 (13 tokens).
SMALL_CORPUS = ["a a a b b c", "a b d e", "c c f"]


def _corpus(num_lines=300, seed=0):
  """A few hundred lines over a small Zipfian-ish vocabulary with accents."""
  rng = random.Random(seed)
  words = "the cat dog sat on a mat big small red house runs quickly über café naïve".split()
  weights = [1.0 / (rank + 1) for rank in range(len(words))]
  return [" ".join(rng.choices(words, weights, k=rng.randint(3, 12))) for _ in range(num_lines)]


def test_special_ids_are_fixed():
  assert (tk.PAD_ID, tk.BOS_ID, tk.EOS_ID, tk.UNK_ID) == (0, 1, 2, 3)
  assert tk.SPECIALS == ("<pad>", "<s>", "</s>", "<unk>")


def test_word_round_trip_of_in_vocabulary_sentence():
  corpus = _corpus()
  vocab = tk.WordVocab.build(corpus, size=100)
  sentence = corpus[7]
  ids = vocab.encode(sentence)
  assert tk.UNK_ID not in ids and min(ids) >= tk.NUM_SPECIALS
  assert vocab.decode(ids) == sentence
  assert vocab.decode_tokens(ids) == sentence.split()
  assert vocab.encode_tokens(sentence.split()) == ids
  # Decoding stops at EOS and ignores PAD and BOS, as for a padded model output row.
  row = np.array([tk.BOS_ID, *ids, tk.EOS_ID, ids[0], tk.PAD_ID, tk.PAD_ID])
  assert vocab.decode(row) == sentence


def test_word_shortlist_and_unk_rate_by_hand():
  vocab = tk.WordVocab.build(SMALL_CORPUS, size=tk.NUM_SPECIALS + 3)
  # a (4) first; b and c tie at 3 and are ordered by the word itself.
  assert vocab.encode("a b c") == [4, 5, 6]
  assert vocab.decode_tokens([4, 5, 6]) == ["a", "b", "c"]
  ids = [i for text in SMALL_CORPUS for i in vocab.encode(text)]
  assert np.mean([vocab.is_unk(i) for i in ids]) == pytest.approx(3 / 13)  # d, e, f
  # One word fewer: the tie goes to "b", so c's three tokens become UNK too.
  smaller = tk.WordVocab.build(SMALL_CORPUS, size=tk.NUM_SPECIALS + 2)
  ids = [i for text in SMALL_CORPUS for i in smaller.encode(text)]
  assert smaller.encode("a b c") == [4, 5, tk.UNK_ID]
  assert np.mean([smaller.is_unk(i) for i in ids]) == pytest.approx(6 / 13)


def test_word_vocab_never_counts_specials_and_decodes_unused_ids_as_unk():
  vocab = tk.WordVocab.build(["x <unk> </s> <s> y"], size=10)
  assert vocab.num_words == 2
  assert vocab.encode("x </s> <unk> y") == [4, tk.UNK_ID, tk.UNK_ID, 5]
  assert vocab.decode([4, 9, 5]) == "x <unk> y"  # Id 9 is inside the id space but unused.
  with pytest.raises(ValueError, match="outside"):
    vocab.decode([10])


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_trains_and_round_trips(model_type):
  corpus = _corpus()
  sp = tk.SentencePieceTokenizer.train(corpus, size=120, model_type=model_type)
  assert sp.kind == "sentencepiece" and sp.size == 120 and sp.num_pieces <= 120
  assert sp.decode_tokens([tk.PAD_ID, tk.BOS_ID, tk.UNK_ID]) == ["<unk>"]
  for sentence in corpus[:20]:
    ids = sp.encode(sentence)
    assert tk.UNK_ID not in ids
    assert sp.decode(ids) == sentence
    assert sp.decode([tk.BOS_ID, *ids, tk.EOS_ID, 9, 9]) == sentence
    assert sp.encode_tokens(sp.decode_tokens(ids)) == ids
  assert sp.encode_batch(corpus[:5]) == [sp.encode(s) for s in corpus[:5]]
  # A character never seen in training is unknown.
  assert tk.UNK_ID in sp.encode("zebra €")


@pytest.mark.parametrize("kind", tk.KINDS)
def test_save_load_gives_identical_ids(tmp_path, kind):
  corpus = _corpus()
  built = tk.build(kind, 80, corpus)
  built.save(tmp_path / "v")
  loaded = tk.load(tmp_path / "v")
  assert type(loaded) is type(built) and loaded.size == built.size == 80
  assert loaded.encode_batch(corpus) == built.encode_batch(corpus)
  every_id = list(range(tk.NUM_SPECIALS, 80))
  assert loaded.decode_tokens(every_id) == built.decode_tokens(every_id)
  meta = json.loads((tmp_path / "v" / tk.META_FILE).read_text())
  assert meta["kind"] == kind and meta["size"] == 80


def test_word_vocab_file_is_one_word_per_line(tmp_path):
  vocab = tk.WordVocab.build(SMALL_CORPUS, size=10)
  vocab.save(tmp_path)
  lines = (tmp_path / tk.WordVocab.VOCAB_FILE).read_text(encoding="utf-8").splitlines()
  assert lines == ["<pad>", "<s>", "</s>", "<unk>", "a", "b", "c", "d", "e", "f"]


def test_load_or_build_builds_once_then_loads(tmp_path):
  calls = []

  def texts():
    calls.append(1)
    return iter(SMALL_CORPUS)

  first = tk.load_or_build(tmp_path / "v", "word", 10, texts)
  second = tk.load_or_build(tmp_path / "v", "word", 10, texts)
  assert len(calls) == 1
  assert second.encode("a b c d e f g") == first.encode("a b c d e f g")


@pytest.mark.parametrize(
  ("kind", "size", "model_type", "message"),
  [
    ("word", 12, "unigram", r"size=10 \(requested 12\)"),
    ("sentencepiece", 10, "unigram", r"kind='word' \(requested 'sentencepiece'\)"),
  ],
)
def test_load_or_build_refuses_mismatched_vocabulary(tmp_path, kind, size, model_type, message):
  tk.load_or_build(tmp_path / "v", "word", 10, lambda: SMALL_CORPUS)
  with pytest.raises(ValueError, match=message):
    tk.load_or_build(tmp_path / "v", kind, size, lambda: SMALL_CORPUS, sp_model_type=model_type)


def test_load_or_build_refuses_other_sentencepiece_model_type(tmp_path):
  corpus = _corpus()
  tk.load_or_build(tmp_path / "v", "sentencepiece", 80, lambda: corpus)
  with pytest.raises(ValueError, match=r"model_type='unigram' \(requested 'bpe'\)"):
    tk.load_or_build(tmp_path / "v", "sentencepiece", 80, lambda: corpus, sp_model_type="bpe")


def test_unknown_kind_raises(tmp_path):
  with pytest.raises(ValueError, match="unknown tokenizer kind 'chars'"):
    tk.load_or_build(tmp_path, "chars", 10, lambda: SMALL_CORPUS)


MOSES_EXAMPLES = {
  "fr": [
    "L'homme regarde aujourd'hui 3 chiens, qui courent.",
    "Une femme (en rouge) porte 2,5 kg de pommes !",
    "« Où est-il ? » demande l'enfant.",
  ],
  "en": [
    "The man's dog isn't running; it's 3.5 metres away.",
    'A woman says "hello" to 2 children, then leaves.',
  ],
}


@pytest.mark.parametrize("lang", sorted(MOSES_EXAMPLES))
def test_moses_splits_punctuation_and_round_trips(lang):
  pre = tk.Pretokenizer("moses", lang)
  for text in MOSES_EXAMPLES[lang]:
    tokens = pre.split(text)
    assert pre.join(tokens) == text
    assert not any(t[-1] in ",.;!?" and len(t) > 1 and not t[0].isdigit() for t in tokens), tokens
  assert pre.split(MOSES_EXAMPLES["fr"][0] if lang == "fr" else "it's 3.5 metres")[:2] == (
    ["L'", "homme"] if lang == "fr" else ["it", "'s"]
  )
  if lang == "fr":
    assert pre.join(["aujourd'", "hui"]) == "aujourd'hui"  # Moses splits the elision too.
    assert "2,5" in pre.split(MOSES_EXAMPLES["fr"][1])


def test_moses_word_vocab_encodes_tokens_and_saves_its_pretokenizer(tmp_path):
  texts = MOSES_EXAMPLES["fr"]
  vocab = tk.load_or_build(
    tmp_path / "v", "word", 100, lambda: texts, pretokenizer=tk.Pretokenizer("moses", "fr")
  )
  assert tk.UNK_ID not in vocab.encode(texts[0])
  assert vocab.decode(vocab.encode(texts[0])) == texts[0]
  loaded = tk.load(tmp_path / "v")
  assert (loaded.pretokenizer.name, loaded.pretokenizer.lang) == ("moses", "fr")
  assert loaded.encode(texts[2]) == vocab.encode(texts[2])
  with pytest.raises(ValueError, match=r"pretokenizer='moses' \(requested 'none'\)"):
    tk.load_or_build(tmp_path / "v", "word", 100, lambda: texts)


def test_building_a_vocabulary_then_encoding_its_texts_splits_each_sentence_once(
  monkeypatch, tmp_path
):
  """Moses splits are remembered (a Multi30k run's vocabulary and its training split read the
  same 58,000 sentences), and each caller gets a list of its own."""
  moses, calls = tk.moses_tokenizer("fr"), []

  class Counting:
    def tokenize(self, text, **kwargs):
      calls.append(text)
      return moses.tokenize(text, **kwargs)

  monkeypatch.setattr(tk, "moses_tokenizer", lambda lang: Counting())
  texts = MOSES_EXAMPLES["fr"]
  pre = tk.Pretokenizer("moses", "fr")
  vocab = tk.load_or_build(tmp_path / "v", "word", 100, lambda: texts, pretokenizer=pre)
  ids = [vocab.encode(t) for t in texts]
  assert sorted(calls) == sorted(texts)
  pre.split(texts[0]).append("changed")
  assert pre.split(texts[0]) == moses.tokenize(texts[0], escape=False)
  assert vocab.encode(texts[0]) == ids[0]


def test_unknown_pretokenizer_raises():
  with pytest.raises(ValueError, match="unknown pretokenizer 'spacy'"):
    tk.Pretokenizer("spacy", "en")


def test_size_zero_keeps_every_word_and_loads_whatever_size_was_saved(tmp_path):
  texts = ["a b b c", "c c d e"]
  vocab = tk.load_or_build(tmp_path / "v", "word", 0, lambda: texts)
  assert vocab.size == 4 + 5 and vocab.num_words == 5
  assert tk.UNK_ID not in vocab.encode(" ".join(texts))
  again = tk.load_or_build(tmp_path / "v", "word", 0, lambda: [])  # Loaded: no texts read.
  assert again.size == vocab.size and again.encode("e d") == vocab.encode("e d")
  with pytest.raises(ValueError, match="needs the word tokenizer"):
    tk.build("sentencepiece", 0, texts)

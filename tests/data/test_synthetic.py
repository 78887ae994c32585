"""Tests of the embedded synthetic English-French corpus (seq2seq/data/synthetic.py)."""

import collections
import pathlib
import subprocess
import sys

import pytest

from seq2seq.data import synthetic

REPO = pathlib.Path(__file__).resolve().parents[2]
# French words that may legitimately be unaligned (see the module docstring).
UNALIGNED_OK = {"de", "d'", "des", "les", "que", "qu'"}


@pytest.fixture(scope="module")
def pairs() -> list[synthetic.Pair]:
  return list(synthetic.generate(3000, seed=11))


def test_deterministic_for_a_seed():
  a = list(synthetic.generate(200, seed=3))
  b = list(synthetic.generate(200, seed=3))
  c = list(synthetic.generate(200, seed=4))
  assert a == b
  assert a != c
  assert len({p.src for p in a} & {p.src for p in c}) < 20


def test_splits_are_disjoint():
  train = {p.src for p in synthetic.generate(3000, seed=0, split="train")}
  valid = {p.src for p in synthetic.generate(300, seed=0, split="valid")}
  test = {p.src for p in synthetic.generate(300, seed=0, split="test")}
  assert not train & test
  assert not train & valid
  assert not valid & test


def test_splits_are_disjoint_even_for_short_recurring_sentences():
  # With at most 4 tokens many sentences recur; disjointness must come from the hash buckets.
  train = [p.src for p in synthetic.generate(3000, seed=0, split="train", max_len=4)]
  test = {p.src for p in synthetic.generate(200, seed=0, split="test", max_len=4)}
  assert len(set(train)) < len(train)  # Recurring sentences do occur.
  assert not set(train) & test


def test_alignments_index_valid_positions(pairs):
  for p in pairs:
    assert p.src[-1] == "."
    assert list(p.align) == sorted(set(p.align))
    for i, j in p.align:
      assert 0 <= i < len(p.src) and 0 <= j < len(p.tgt)
    # Every source token is aligned; target tokens too, except the documented function words.
    assert {i for i, _ in p.align} == set(range(len(p.src)))
    aligned_tgt = {j for _, j in p.align}
    unaligned = {p.tgt[j] for j in range(len(p.tgt)) if j not in aligned_tgt}
    assert unaligned <= UNALIGNED_OK, (p, unaligned)


def test_noun_phrase_reordering():
  # The paper's example: English "ADJ ADJ N" becomes French "N ADJ ADJ", mirrored.
  p = synthetic.render_noun_phrase("area", ["european", "economic"])
  assert p.src == ("the", "european", "economic", "area")
  assert p.tgt == ("la", "zone", "économique", "européenne")
  assert p.align == ((0, 0), (1, 3), (2, 2), (3, 1))
  # Noun compounds: "N N" -> "N de N", with an unaligned "de".
  p = synthetic.render_noun_phrase("industry", ["european"], compound="car")
  assert p.tgt == ("l'", "industrie", "de", "voiture", "européenne")
  assert p.align == ((0, 0), (1, 4), (2, 3), (3, 1))
  # Prenominal adjectives (grand, petit, bon, ...) keep their place.
  p = synthetic.render_noun_phrase("house", ["big", "red"])
  assert p.tgt == ("la", "grande", "maison", "rouge")


def test_generated_data_reorders(pairs):
  def crossing(align):
    return any(i1 < i2 and j1 > j2 for i1, j1 in align for i2, j2 in align)

  frac = sum(crossing(p.align) for p in pairs) / len(pairs)
  assert frac > 0.5
  # An English adjective directly before a noun follows it in French, unless it is one of the
  # prenominal adjectives (grand, petit, bon, ...).
  lex = synthetic._lexicon(40_000)
  post = {a[0] for a in lex.adjs if not a[2]}
  pre = {a[0] for a in lex.adjs if a[2]}
  nouns = {n[0] for n in lex.nouns} | {n[1] for n in lex.nouns}
  order = collections.Counter()
  for p in pairs:
    tgt_of = collections.defaultdict(list)
    for i, j in p.align:
      tgt_of[i].append(j)
    for i in range(len(p.src) - 1):
      if p.src[i + 1] in nouns and (p.src[i] in post or p.src[i] in pre):
        (j_adj,), (j_noun,) = tgt_of[i], tgt_of[i + 1]
        order[p.src[i] in post, j_adj > j_noun] += 1
  assert order[True, True] > 500 and order[True, False] == 0
  assert order[False, False] > 100 and order[False, True] == 0


@pytest.mark.parametrize(
  ("noun", "adjs", "det", "plural", "expected"),
  [
    ("house", ["white"], "the", False, ("la", "maison", "blanche")),
    ("house", ["white"], "a", False, ("une", "maison", "blanche")),
    ("house", ["white"], "the", True, ("les", "maisons", "blanches")),
    ("dog", ["white"], "the", False, ("le", "chien", "blanc")),
    ("dog", ["white"], "a", False, ("un", "chien", "blanc")),
    ("horse", ["social"], "the", True, ("les", "chevaux", "sociaux")),
    ("apple", ["good"], "all the", True, ("toutes", "les", "bonnes", "pommes")),
    ("idea", [], "this", False, ("cette", "idée")),
    ("hotel", [], "this", False, ("cet", "hôtel")),
    ("idea", [], "my", False, ("mon", "idée")),
    ("man", [], "the", False, ("l'", "homme")),
    ("eye", [], "the", True, ("les", "yeux")),
  ],
)
def test_agreement(noun, adjs, det, plural, expected):
  p = synthetic.render_noun_phrase(noun, adjs, det=det, plural=plural)
  assert p.tgt == expected


def test_english_article_a_an():
  assert synthetic.render_noun_phrase("apple", det="a").src == ("an", "apple")
  assert synthetic.render_noun_phrase("apple", ["big"], det="a").src == ("a", "big", "apple")
  assert synthetic.render_noun_phrase("union", det="a").src == ("a", "union")
  with pytest.raises(ValueError, match="unicorn"):
    synthetic.render_noun_phrase("unicorn")


def test_negation_is_ne_pas(pairs):
  found = 0
  for p in pairs:
    tgt_of = collections.defaultdict(list)
    for i, j in p.align:
      tgt_of[i].append(j)
    for i, w in enumerate(p.src):
      if w == "not":
        words = [p.tgt[j] for j in tgt_of[i]]
        assert len(words) == 2 and words[0] in ("ne", "n'") and words[1] == "pas", (p, words)
        found += 1
      elif w == "never":
        words = [p.tgt[j] for j in tgt_of[i]]
        assert len(words) == 2 and words[0] in ("ne", "n'") and words[1] == "jamais", (p, words)
  assert found > 50


def test_contractions_of_the(pairs):
  # "of the" -> "du"/"des" (both English words aligned to one French word) or "de la"/"de l'".
  found = collections.Counter()
  for p in pairs:
    tgt_of = collections.defaultdict(set)
    for i, j in p.align:
      tgt_of[i].add(j)
    for i in range(len(p.src) - 1):
      # Skip multi-word prepositions ("in front of" -> "devant") and a possessor after "the"
      # ("of the flower 's men" -> "des hommes de la fleur").
      multiword = p.src[i - 1] in ("front", "because", "instead")
      possessive = "'s" in p.src[i + 2 : i + 8]
      if p.src[i] == "of" and p.src[i + 1] == "the" and not multiword and not possessive:
        (j,) = tgt_of[i]
        found[p.tgt[j]] += 1
        if p.tgt[j] in ("du", "des"):
          assert tgt_of[i + 1] == {j}
        else:
          assert p.tgt[j] == "de" and p.tgt[j + 1] in ("la", "l'")
  assert found["du"] > 0 and found["des"] > 0 and found["de"] > 0


def test_length_range():
  lengths = [len(p.src) for p in synthetic.generate(500, seed=2, min_len=10, max_len=20)]
  assert min(lengths) >= 10 and max(lengths) <= 20
  assert len(set(lengths)) == 11
  assert all(len(p.src) == 80 for p in synthetic.generate(5, seed=2, min_len=80, max_len=80))
  assert all(len(p.src) == 3 for p in synthetic.generate(20, seed=2, min_len=3, max_len=3))
  default = [len(p.src) for p in synthetic.generate(3000, seed=2)]
  assert min(default) >= 3 and max(default) <= 80 and max(default) > 50


def test_invalid_arguments():
  with pytest.raises(ValueError, match="split"):
    synthetic.generate(1, split="dev")
  with pytest.raises(ValueError, match="max_len"):
    synthetic.generate(1, min_len=30, max_len=20)
  with pytest.raises(ValueError, match="vocab_size"):
    synthetic.generate(1, vocab_size=100)


@pytest.mark.slow
def test_vocabulary_is_large_and_zipfian():
  assert synthetic.lexicon_size(20_000)[0] == 20_000
  counts = collections.Counter(
    w for p in synthetic.generate(100_000, seed=0, vocab_size=20_000) for w in p.src
  )
  freqs = sorted(counts.values(), reverse=True)
  total = sum(freqs)
  assert len(counts) > 10_000
  assert sum(freqs[: len(freqs) // 100]) / total > 0.5  # Top 1% of types: most tokens.
  assert sum(f == 1 for f in freqs) > 100  # A long tail of rare words.
  assert sum(freqs[5000:]) / total > 0.005  # A 5k shortlist leaves unknown words.


def test_alignment_format_roundtrip():
  align = ((0, 0), (1, 2), (2, 1), (10, 11))
  assert synthetic.format_alignment(align) == "0-0 1-2 2-1 10-11"
  assert synthetic.parse_alignment("0-0 1-2 2-1 10-11\n") == align
  assert synthetic.parse_alignment("") == ()
  for bad in ("0-1 x-2", "0-1 3", "0-1 -2", "0-1 1-2-3", "1:2"):
    with pytest.raises(ValueError, match="malformed"):
      synthetic.parse_alignment(bad)
  with pytest.raises(ValueError, match="'x-2'"):
    synthetic.parse_alignment("0-1 x-2")


def test_command_line(tmp_path):
  prefix = tmp_path / "corpus"
  cmd = [sys.executable, "-m", "seq2seq.data.synthetic", "--pairs", "50", "--seed", "1"]
  cmd += ["--out", str(prefix), "--split", "valid", "--max-len", "30", "--vocab-size", "5000"]
  out = subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True).stdout
  assert "pairs/s" in out
  src, tgt, align = (
    (tmp_path / f"corpus.{ext}").read_text(encoding="utf-8").splitlines()
    for ext in ("src", "tgt", "align")
  )
  assert len(src) == len(tgt) == len(align) == 50
  expected = list(synthetic.generate(50, seed=1, split="valid", max_len=30, vocab_size=5000))
  for p, s, t, a in zip(expected, src, tgt, align, strict=True):
    assert tuple(s.split()) == p.src and tuple(t.split()) == p.tgt
    assert synthetic.parse_alignment(a) == p.align


def test_command_line_refuses_a_vocabulary_below_the_core_lexicon_in_one_line(tmp_path):
  cmd = [sys.executable, "-m", "seq2seq.data.synthetic", "--pairs", "5", "--vocab-size", "400"]
  proc = subprocess.run(
    [*cmd, "--out", str(tmp_path / "c")], cwd=REPO, capture_output=True, text=True
  )
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
  assert "error: vocab_size=400 is smaller than the core lexicon (719 types)" in proc.stderr
  assert not list(tmp_path.iterdir())

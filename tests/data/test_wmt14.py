"""WMT'14 English->French (seq2seq/data/wmt14.py and its builders): the raw reader on
tests/data/wmt14_mini, a miniature of statmt.org's archives unpacked, with their real file names
and formats (plain text, gzip, SGML) and invented sentences."""

import gzip
import shutil
from pathlib import Path

import pytest
from helpers import data_config, data_settings

from seq2seq.data import builders, wmt14

MINI = Path(__file__).parent / "wmt14_mini"
NEWSTEST = Path(__file__).parents[3] / "shared" / "data" / "newstest"
# Pairs per corpus of the miniature: commoncrawl has one more line, its French side empty.
TRAIN_PAIRS = {
  "europarl_v7": 30,
  "commoncrawl": 24,
  "multiun": 18,
  "newscommentary_v9": 24,
  "gigafren": 24,
}
# Two segments of newstest2014 that escape XML's characters, as the reader gives them back.
ESCAPED = {
  2: (
    'The firm "Smith & Sons" said its profits were < 5 %.',
    "L'entreprise « Smith & Sons » a annoncé des bénéfices < 5 %.",
  ),
  5: ("It costs 5 € & 10 ¢ tax.", "Cela coûte 5 € et 10 ¢ de taxe."),
}


def _settings(directory=MINI, **fields):
  config = data_config(corpus="wmt14")
  config.data.wmt14.reader = "raw"
  config.data.wmt14.dir = str(directory)
  for key, value in fields.items():
    config.data.wmt14[key] = value
  return data_settings(config)


def _lines(path: Path) -> list[str]:
  opened = gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open()
  with opened as f:
    return [line.rstrip("\n") for line in f]


def _pairs(corpus: builders.Corpus, split: str) -> list[tuple[str, str]]:
  return [(ex.src, ex.tgt) for ex in corpus.read(split)]


@pytest.fixture(scope="module")
def raw_corpus(tmp_path_factory):
  """The miniature through the raw reader, with the paper's validation set."""
  settings = _settings(valid="newstest2012+newstest2013")
  return builders.prepare_corpus(settings, tmp_path_factory.mktemp("data"))


def test_raw_reader_reads_every_corpus_in_file_order(raw_corpus):
  expected, line, lines = [], 0, []
  for name in TRAIN_PAIRS:
    en, fr = (MINI / path for path in wmt14.FILES[name][:2])
    for number, pair in enumerate(zip(_lines(en), _lines(fr), strict=True)):
      if all(pair):
        expected.append(pair)
        lines.append(line + number)
    line += len(_lines(en))
  assert _pairs(raw_corpus, "train") == expected
  assert [ex.line for ex in raw_corpus.read("train")] == lines
  assert 37 not in lines  # commoncrawl's eighth line, the pair with an empty side.
  assert raw_corpus.builder.info.metadata["pairs"]["train"] == TRAIN_PAIRS
  assert raw_corpus.skipped["train"] == {"invalid_utf8": 0, "empty": 1}


def test_raw_reader_concatenates_the_papers_validation_sets(raw_corpus):
  expected = []
  for name in ("newstest2012", "newstest2013"):
    expected += zip(_lines(MINI / f"dev/{name}.en"), _lines(MINI / f"dev/{name}.fr"), strict=True)
  assert _pairs(raw_corpus, "valid") == expected
  assert [ex.line for ex in raw_corpus.read("valid")] == list(range(24))


def test_raw_reader_reads_the_sgml_test_set_in_order_and_unescaped(raw_corpus):
  pairs = _pairs(raw_corpus, "test")
  assert len(pairs) == 10
  assert pairs[0] == (
    "Police arrested 20 people after the match.",
    "La police a arrêté 20 personnes après le match.",
  )
  for index, pair in ESCAPED.items():
    assert pairs[index] == pair
  assert not any("&" in text and ";" in text for pair in pairs for text in pair)


def test_sgml_segments_unescape_xml_entities_only():
  lines = [
    b'<doc docid="a">\n',
    b'<seg id="1">AT&T &amp; caf&#233; &#xE9;&lt;&gt;&quot;&apos;</seg>\n',
    b'<seg id="2"> &eacute; &amp;lt; &#xD800; &#1114112;</seg>\n',
    b"</doc>\n",
  ]
  segments = [s.decode() for s in wmt14.sgml_segments(lines)]
  assert segments == ["AT&T & café é<>\"'", " &eacute; &lt; &#xD800; &#1114112;"]


def test_a_segment_over_two_lines_is_refused():
  lines = [b'<seg id="1">a sentence\n', b"that goes on</seg>\n"]
  with pytest.raises(ValueError, match=r"f\.sgm:1: a <seg> that does not end on its line"):
    list(wmt14.sgml_segments(lines, "f.sgm"))


def test_gzipped_or_unpacked_files_read_alike(tmp_path, raw_corpus):
  """giga-fren comes gzipped; unpacked it reads the same, as does a corpus gzipped by hand."""
  copy = shutil.copytree(MINI, tmp_path / "wmt14")
  for lang in ("en", "fr"):
    packed = copy / f"giga-fren.release2.fixed.{lang}.gz"
    packed.with_suffix("").write_bytes(gzip.decompress(packed.read_bytes()))
    packed.unlink()
    plain = copy / f"un/undoc.2000.fr-en.{lang}"
    Path(f"{plain}.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
  settings = _settings(copy, valid="newstest2012+newstest2013")
  corpus = builders.prepare_corpus(settings, tmp_path / "data")
  assert _pairs(corpus, "train") == _pairs(raw_corpus, "train")


def test_a_missing_file_names_its_archive_and_the_setting(tmp_path):
  copy = shutil.copytree(MINI, tmp_path / "wmt14")
  (copy / "un/undoc.2000.fr-en.fr").unlink()
  with pytest.raises(FileNotFoundError, match=r"undoc\.2000\.fr-en\.fr.*training-parallel-un\.tgz"):
    builders.make_builder(_settings(copy), tmp_path / "data")


@pytest.mark.parametrize(
  "fields, message",
  [
    ({"dir": ""}, "set data.wmt14.dir"),
    ({"train": "europarl_v7+europarl_v9"}, "unknown WMT'14 corpus 'europarl_v9'; known: euro"),
    ({"valid": " + "}, "data.wmt14.valid names no corpus"),
    ({"reader": "sacrebleu"}, "data.wmt14.reader='sacrebleu': use one of"),
  ],
)
def test_bad_settings_are_refused_in_one_line(tmp_path, fields, message):
  with pytest.raises(ValueError, match=message):
    builders.make_builder(_settings(**fields), tmp_path)


def test_files_of_different_lengths_are_refused(tmp_path):
  copy = shutil.copytree(MINI, tmp_path / "wmt14")
  path = copy / "training/news-commentary-v9.fr-en.fr"
  path.write_text("".join(line + "\n" for line in _lines(path)[:-2]), encoding="utf-8")
  with pytest.raises(ValueError, match=r"news-commentary-v9\.fr-en\.fr ended after 22 lines"):
    builders.prepare_corpus(_settings(copy), tmp_path / "data")


def test_the_raw_build_is_keyed_by_the_files_not_their_copies(tmp_path):
  first = builders.make_builder(_settings(), tmp_path).builder_config.name
  copy = shutil.copytree(MINI, tmp_path / "wmt14_mini", copy_function=shutil.copy)
  assert builders.make_builder(_settings(copy), tmp_path).builder_config.name == first
  path = copy / "dev/newstest2013.fr"
  path.write_bytes(path.read_bytes().replace(b"maire", b"marie", 1))
  assert builders.make_builder(_settings(copy), tmp_path).builder_config.name != first
  other = builders.make_builder(_settings(copy, test="newstest2013"), tmp_path)
  assert other.builder_config.name != first


@pytest.mark.skipif(not NEWSTEST.is_dir(), reason="../shared/data/newstest is absent")
def test_the_real_development_sets_give_the_papers_6003_validation_pairs(tmp_path):
  copy = shutil.copytree(MINI, tmp_path / "wmt14")
  for name in ("newstest2012", "newstest2013"):
    for lang in ("en", "fr"):
      (copy / f"dev/{name}.{lang}").unlink()
      (copy / f"dev/{name}.{lang}").symlink_to(NEWSTEST / f"{name}.{lang}")
  corpus = builders.prepare_corpus(_settings(copy, valid="newstest2012+newstest2013"), tmp_path)
  assert corpus.builder.info.metadata["pairs"]["valid"] == {
    "newstest2012": 3003,
    "newstest2013": 3000,
  }
  assert corpus.skipped["valid"] == {"invalid_utf8": 0, "empty": 0}

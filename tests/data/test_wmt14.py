"""WMT'14 English->French (seq2seq/data/wmt14.py and its builders): both readers on
tests/data/wmt14_mini, a miniature of statmt.org's archives unpacked, with their real file names
and formats (plain text, gzip, SGML) and invented sentences.

The tfds reader is tested without a network: tfds' own WMT builders run on the miniature, their
downloads answered with its folders. They parse the same files with their own code, so the raw
reader is checked against them too.
"""

import collections
import gzip
import shutil
import tempfile
from pathlib import Path

import pytest
import tensorflow_datasets as tfds
import tree
from helpers import data_config, data_settings

from configs import wmt14 as wmt14_config
from seq2seq.data import builders, wmt14
from seq2seq.data import input_pipeline as ip

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
  assert raw_corpus.kept["train"] == TRAIN_PAIRS
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
    builders.prepare_corpus(_settings(copy), tmp_path / "data")


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
    builders.prepare_corpus(_settings(**fields), tmp_path)


def test_files_of_different_lengths_are_refused(tmp_path):
  copy = shutil.copytree(MINI, tmp_path / "wmt14")
  path = copy / "training/news-commentary-v9.fr-en.fr"
  path.write_text("".join(line + "\n" for line in _lines(path)[:-2]), encoding="utf-8")
  corpus = builders.prepare_corpus(_settings(copy), tmp_path / "data")
  with pytest.raises(ValueError, match=r"news-commentary-v9\.fr-en\.fr ended after 22 lines"):
    list(corpus.read("train"))  # Read as a stream: found where the shorter file ends.


def test_the_raw_build_is_keyed_by_the_files_not_their_copies(tmp_path):
  name = lambda settings: builders.prepare_corpus(settings, tmp_path).identity()["config"]
  first = name(_settings())
  copy = shutil.copytree(MINI, tmp_path / "wmt14_mini", copy_function=shutil.copy)
  assert name(_settings(copy)) == first
  path = copy / "dev/newstest2013.fr"
  path.write_bytes(path.read_bytes().replace(b"maire", b"marie", 1))
  assert name(_settings(copy)) != first
  assert name(_settings(copy, test="newstest2013")) != first


def test_settings_know_the_catalogue_and_the_papers_splits():
  settings = data_settings(data_config(corpus="wmt14")).wmt14
  assert settings.reader == "tfds" and settings.is_catalogue
  assert {split: settings.parts(split) for split in wmt14.CATALOGUE} == wmt14.CATALOGUE
  paper = data_settings(wmt14_config.get_config()).wmt14
  assert not paper.is_catalogue
  assert {split: paper.parts(split) for split in wmt14.PAPER} == wmt14.PAPER


def test_the_config_is_the_papers_setting():
  c = wmt14_config.get_config()
  m, d, t = c.model, c.data, c.train
  assert (m.name, m.emb_dim, m.enc_hidden, m.dec_hidden, m.maxout_dim) == (
    "rnnsearch",
    620,
    1000,
    1000,
    500,
  )
  assert (d.corpus, d.wmt14.reader, d.max_len, d.batch_size) == ("wmt14", "raw", 50, 80)
  assert (d.src_vocab_size, d.tgt_vocab_size, d.pretokenizer) == (30_000, 30_000, "moses")
  assert (t.optimizer, t.adadelta_eps, t.adadelta_rho) == ("adadelta", 1e-6, 0.95)
  assert c.decode.beam_size == 12
  assert wmt14_config.get_config("maxlen=30").data.max_len == 30


@pytest.mark.skipif(not NEWSTEST.is_dir(), reason="../shared/data/newstest is absent")
def test_the_real_development_sets_give_the_papers_6003_validation_pairs(tmp_path):
  copy = shutil.copytree(MINI, tmp_path / "wmt14")
  for name in ("newstest2012", "newstest2013"):
    for lang in ("en", "fr"):
      (copy / f"dev/{name}.{lang}").unlink()
      (copy / f"dev/{name}.{lang}").symlink_to(NEWSTEST / f"{name}.{lang}")
  corpus = builders.prepare_corpus(_settings(copy, valid="newstest2012+newstest2013"), tmp_path)
  list(corpus.read("valid"))
  assert corpus.kept["valid"] == {
    "newstest2012": 3003,
    "newstest2013": 3000,
  }
  assert corpus.skipped["valid"] == {"invalid_utf8": 0, "empty": 0}


# ------------------------------------------------------------------------------ the tfds reader


@pytest.fixture(scope="module")
def tfds_downloads(tmp_path_factory):
  """tfds' downloads answered from the miniature, for the module's tests: every statmt.org
  archive is the miniature itself, and WMT'19's dev.tgz (tfds' source of the newstest sets) a
  folder `dev/` of its files (tfds reads newstest2014 from its French-source SGML pair, the same
  segments as the miniature's English-source one). Any other URL fails the test."""
  dev = tmp_path_factory.mktemp("wmt19_dev")
  shutil.copytree(MINI / "dev", dev / "dev")
  shutil.copy(MINI / "test/newstest2014-fren-ref.fr.sgm", dev / "dev/newstest2014-fren-src.fr.sgm")
  shutil.copy(MINI / "test/newstest2014-fren-src.en.sgm", dev / "dev/newstest2014-fren-ref.en.sgm")
  archives = {part.archive for part in wmt14.FILES.values()}
  fetched = []

  def local(url: str) -> str:
    fetched.append(url)
    if url == "http://data.statmt.org/wmt19/translation-task/dev.tgz":
      return str(dev)
    assert url in archives, url
    return str(MINI)

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(
      tfds.download.DownloadManager,
      "download_and_extract",
      lambda self, urls: tree.map_structure(local, urls),
    )
    patch.setattr(tfds.download.DownloadManager, "extract", lambda self, paths: paths)
    yield fetched


@pytest.fixture(scope="module")
def tfds_dir(tfds_downloads, tmp_path_factory):
  """A data folder holding the catalogue's `wmt14_translate/fr-en` as `tfds build` prepares
  it: by the registered catalogue builder (its code path off, see `builders._tfds_wmt`)."""
  from tensorflow_datasets.translate import wmt14 as catalogue

  data_dir = tmp_path_factory.mktemp("tfds")
  # Set and deleted by hand: monkeypatch would read the inherited value first, which fails.
  assert "code_path" not in vars(catalogue.Wmt14Translate)
  catalogue.Wmt14Translate.code_path = None
  try:
    builder = tfds.builder("wmt14_translate/fr-en", data_dir=str(data_dir))
    assert type(builder) is catalogue.Wmt14Translate
    builder.download_and_prepare(file_format=builders.FILE_FORMAT)
  finally:
    del catalogue.Wmt14Translate.code_path
  tfds_downloads.clear()
  return data_dir


def _tfds_settings(**fields):
  config = data_config(corpus="wmt14")
  for key, value in fields.items():
    config.data.wmt14[key] = value
  return data_settings(config)


def test_the_catalogue_prepared_elsewhere_is_read_without_downloading(tfds_dir, tfds_downloads):
  corpus = builders.prepare_corpus(_tfds_settings(), tfds_dir)
  assert tfds_downloads == []
  assert corpus.builder.info.full_name == "wmt14_translate/fr-en/1.0.0"
  assert (corpus.src_key, corpus.tgt_key) == ("en", "fr")
  assert {split: len(corpus.data_source(split)) for split in ip.SPLIT_NAMES} == {
    "train": 120,
    "valid": 12,
    "test": 10,
  }


def test_the_catalogue_validates_on_newstest2013_alone(tfds_dir, raw_corpus):
  """The catalogue's validation split is newstest2013 (in tfds' hashed order); the paper's adds
  newstest2012, the first 12 pairs of the raw reader's validation split."""
  corpus = builders.prepare_corpus(_tfds_settings(), tfds_dir)
  newstest2013 = _pairs(raw_corpus, "valid")[12:]
  assert sorted(_pairs(corpus, "valid")) == sorted(newstest2013)
  assert _pairs(corpus, "valid") != newstest2013


def test_tfds_and_the_raw_reader_read_the_same_training_pairs(tfds_dir, raw_corpus):
  corpus = builders.prepare_corpus(_tfds_settings(), tfds_dir)
  tfds_pairs = collections.Counter(_pairs(corpus, "train"))
  assert tfds_pairs == collections.Counter(_pairs(raw_corpus, "train"))


def test_tfds_keeps_the_test_sets_xml_entities(tfds_dir, raw_corpus):
  """tfds (as sacrebleu) does not unescape SGML segments: the one difference in the text."""
  tfds_pairs = _pairs(builders.prepare_corpus(_tfds_settings(), tfds_dir), "test")
  raw_pairs = _pairs(raw_corpus, "test")
  escaped = [pair for pair in tfds_pairs if pair not in raw_pairs]
  assert len(escaped) == len(ESCAPED)
  as_written = (
    "It costs 5 &#8364; &amp; 10 &#xA2; tax.",
    "Cela coûte 5 &#8364; et 10 &#xA2; de taxe.",
  )
  assert as_written in escaped


def test_tfds_prepares_the_papers_validation_set_as_a_custom_configuration(
  tfds_downloads, raw_corpus, tmp_path
):
  settings = _tfds_settings(valid="newstest2012+newstest2013")
  corpus = builders.prepare_corpus(settings, tmp_path)
  name = corpus.builder.info.full_name
  assert name.startswith("wmt_translate/fr-en.subsets_") and name.endswith("/1.0.0")
  assert "http://data.statmt.org/wmt19/translation-task/dev.tgz" in tfds_downloads
  assert sorted(_pairs(corpus, "valid")) == sorted(_pairs(raw_corpus, "valid"))
  assert len(corpus.data_source("train")) == 120


def test_tfds_refuses_a_corpus_it_has_not(tmp_path):
  with pytest.raises(ValueError, match="tfds has no French-English corpus 'newstest2014_full'"):
    builders.make_builder(_tfds_settings(test="newstest2014_full"), tmp_path)


def test_making_a_tfds_builder_leaves_nothing_in_the_temp_folder(tmp_path, monkeypatch):
  """tfds' own WMT builders look an unbuilt dataset up in its GCS bucket through a temp folder
  that tfds never removes; ours skip the lookup (`builders._tfds_wmt`)."""
  temp = tmp_path / "temp"
  temp.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(temp))
  for valid in ("newstest2013", "newstest2012+newstest2013"):
    builders.make_builder(_tfds_settings(valid=valid), tmp_path / "data")
  assert list(temp.iterdir()) == []

"""Multi-source translation (`data.local.src_lang="en+de"`, `model.multi_source`): reading two
aligned sources, packing them in a batch, the model's two attentions, and translating from two
files."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import build_model, compiled, data_settings, randomise

from configs import tiny
from seq2seq import evaluation, settings, translate
from seq2seq.data import builders, input_pipeline
from seq2seq.data import tokenizer as tok
from seq2seq.decoding import core, decode, inference
from seq2seq.training import train_state

NOUNS = [("man", "Mann", "homme"), ("dog", "Hund", "chien"), ("cat", "Katze", "chat")]
VERBS = [("sees", "sieht", "voit"), ("likes", "mag", "aime")]


def write_corpus(directory):
  """Three-way aligned captions (English, German, French) with Multi30k's file names."""
  rows = []
  for a, da, fa in NOUNS:
    for v, dv, fv in VERBS:
      for b, db, fb in NOUNS:
        rows.append(
          (f"the {a} {v} the {b} .", f"der {da} {dv} den {db} .", f"le {fa} {fv} le {fb} .")
        )
  directory.mkdir(parents=True, exist_ok=True)
  for prefix, part in (("train", rows), ("val", rows[:6]), ("test_2016_flickr", rows[-6:])):
    for k, lang in enumerate(("en", "de", "fr")):
      text = "".join(r[k] + "\n" for r in part)
      (directory / f"{prefix}.{lang}").write_text(text, encoding="utf-8")
  return rows


def config(directory, combine="concat"):
  c = tiny.get_config()
  c.data.corpus = "local"
  c.data.local.dir = str(directory)
  c.data.local.src_lang, c.data.local.tgt_lang = "en+de", "fr"
  c.data.bucket_step = 4
  c.model.multi_source = combine
  return c


def test_two_sources_are_read_aligned_and_packed_side_by_side(tmp_path):
  rows = write_corpus(tmp_path / "corpus")
  cfg = config(tmp_path / "corpus")
  data = input_pipeline.load_data(data_settings(cfg), tmp_path / "work")
  split = data.splits["train"]
  assert split.src2 is not None and len(split) == len(rows)
  assert data.src_tokenizer.decode(split.src.row(0)) == rows[0][0]
  assert data.src_tokenizer.decode(split.src2.row(0)) == rows[0][1]  # One joint vocabulary.
  cfg.data.src_vocab_size = 10  # Per source language: 4 specials + 2 x 6 words.
  small = input_pipeline.load_data(data_settings(cfg), tmp_path / "small")
  assert small.src_tokenizer.size == 16
  batch = input_pipeline.make_batch(split, np.array([0, 1, -1]), bucket_step=4)
  s = batch["src"].shape[1] // 2
  n1, n2 = len(split.src.row(0)), len(split.src2.row(0))
  assert batch["src"][0, :n1].tolist() == split.src.row(0).tolist()
  assert batch["src"][0, n1] == tok.EOS_ID and batch["src"][0, s + n2] == tok.EOS_ID
  assert batch["src"][0, s : s + n2].tolist() == split.src2.row(0).tolist()
  assert batch["src_mask"][0].tolist() == [1] * (n1 + 1) + [0] * (s - n1 - 1) + [1] * (n2 + 1) + [
    0
  ] * (s - n2 - 1)
  assert not batch["src_mask"][2].any()


def test_misaligned_source_files_are_one_error_line(tmp_path):
  write_corpus(tmp_path / "corpus")
  path = tmp_path / "corpus" / "train.de"
  path.write_text(path.read_text() + "ein Satz zu viel .\n")
  with pytest.raises(ValueError, match=r"train.en has 18 lines, .*train.de has 19"):
    input_pipeline.load_data(data_settings(config(tmp_path / "corpus")), tmp_path / "work")


@pytest.mark.parametrize("combine", ["concat", "gate"])
def test_each_source_gets_its_own_attention_and_decoding_equals_teacher_forcing(combine):
  cfg = tiny.get_config()
  cfg.model.multi_source = combine
  model = randomise(build_model(cfg.model, 30, 30, rngs=nnx.Rngs(0), sources=2))
  src = jnp.array(
    [[5, 6, 7, tok.EOS_ID, 8, 9, tok.EOS_ID, 0], [5, tok.EOS_ID, 0, 0, 8, tok.EOS_ID, 0, 0]]
  )
  mask = (src > 0).astype(jnp.int32)
  tgt_in = jnp.array([[tok.BOS_ID, 11, 12], [tok.BOS_ID, 13, 14]])
  forward = lambda m, src, **how: compiled(type(m).__call__, m, src, mask, tgt_in, **how)
  logits, alpha = forward(model, src, return_alpha=True)
  np.testing.assert_allclose(np.asarray(alpha[..., :4].sum(-1)), 1.0, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(alpha[..., 4:].sum(-1)), 1.0, rtol=1e-5)
  assert float(jnp.abs(alpha * (1 - mask[:, None, :])).max()) == 0.0
  enc = compiled(type(model).encode, model, src, mask)
  state = enc.init_state
  for i in range(tgt_in.shape[1]):
    state, step_logits, step_alpha = compiled(
      type(model).decoder_step, model, enc, state, tgt_in[:, i]
    )
    np.testing.assert_allclose(np.asarray(step_logits), np.asarray(logits[:, i]), atol=2e-5)
    np.testing.assert_allclose(np.asarray(step_alpha), np.asarray(alpha[:, i]), atol=1e-6)
  # The second source matters: changing one of its words changes the output distribution.
  other = forward(model, src.at[0, 4].set(10))
  assert float(jnp.abs(other[0] - logits[0]).max()) > 1e-4
  np.testing.assert_array_equal(np.asarray(other[1]), np.asarray(logits[1]))


def test_two_sources_take_their_settings_from_model_multi_source(tmp_path):
  cfg = config(tmp_path, combine="sum")
  with pytest.raises(ValueError, match="model.multi_source='sum' is not one of"):
    settings.validate(cfg)
  cfg.model.multi_source, cfg.model.attention = "gate", "local_p"
  with pytest.raises(ValueError, match="soft attention each"):
    settings.validate(cfg)
  one = tiny.get_config()  # One source language: the setting is not read, the model unchanged.
  one.model.multi_source = "gate"
  settings.validate(one)
  trees = [
    nnx.state(build_model(c.model, 30, 30, rngs=nnx.Rngs(0)), nnx.Param)
    for c in (one, tiny.get_config())
  ]
  assert jax.tree.structure(trees[0]) == jax.tree.structure(trees[1])


def read_sources(paths: str, count: int) -> tuple[list[str], int]:
  """Every line of `--input=paths` as translate mode reads it (one chunk), and the lines that
  held invalid UTF-8."""
  files = translate.source_files(paths, count)
  translate.check_aligned(files, "aligned")
  chunks = list(translate.read_chunks(files, "aligned"))
  lines = [line for chunk in chunks for line in chunk.sources()]
  return lines, sum(sum(chunk.invalid.values()) for chunk in chunks)


def test_translate_reads_one_file_per_source_language(tmp_path):
  (tmp_path / "a.en").write_text("the dog\nthe cat\n")
  (tmp_path / "a.de").write_text("der Hund\n")
  with pytest.raises(ValueError, match="give one file per language"):
    read_sources(str(tmp_path / "a.en"), 2)
  with pytest.raises(ValueError, match=r"a.en has 2 lines but .*a.de has 1"):
    read_sources(f"{tmp_path / 'a.en'},{tmp_path / 'a.de'}", 2)
  (tmp_path / "a.de").write_text("der Hund\ndie Katze\n")
  lines, invalid = read_sources(f"{tmp_path / 'a.en'},{tmp_path / 'a.de'}", 2)
  assert lines == ["the dog\x1fder Hund", "the cat\x1fdie Katze"] and invalid == 0


def test_a_single_source_holding_the_separator_stays_one_source(tmp_path):
  """The separator of joined sources inside a one-source caption or input line is a space, so
  evaluation (which splits without knowing the number of sources) sees the whole sentence."""
  rows = write_corpus(tmp_path / "corpus")
  train_en = tmp_path / "corpus" / "train.en"
  train_en.write_text(train_en.read_text().replace("the man sees", "the\x1fman sees", 1))
  cfg = config(tmp_path / "corpus")
  cfg.data.local.src_lang = "en"
  data = input_pipeline.load_data(data_settings(cfg), tmp_path / "work")
  src = data.raw("train")[0][0]
  assert src == rows[0][0]
  words = inference.source_tokens(src, data.src_tokenizer)
  assert words == [*rows[0][0].split(), tok.EOS]
  (tmp_path / "in.en").write_text("the\x1fdog\n")
  assert read_sources(str(tmp_path / "in.en"), 1) == (["the dog"], 0)


@pytest.mark.slow
def test_a_multi_source_run_trains_evaluates_and_translates(tmp_path):
  import json

  from seq2seq import train

  write_corpus(tmp_path / "corpus")
  cfg = config(tmp_path / "corpus", combine="gate")
  cfg.train.num_steps, cfg.train.eval_every, cfg.train.checkpoint_every = 4, 4, 4
  cfg.data.batch_size = 8
  results = train.train_and_evaluate(cfg, tmp_path / "run")
  assert np.isfinite(results["test"]["bleu"])
  record = json.loads(
    (tmp_path / "run" / "eval" / "test" / "sentences.jsonl").read_text().splitlines()[0]
  )
  source = record["attention"]["source"]
  assert source.count(tok.EOS) == 2  # Both sources' words, each with its EOS, as the columns.
  (tmp_path / "in.en").write_text("the dog sees the cat .\n\n")
  (tmp_path / "in.de").write_text("der Hund sieht den Katze .\n\n")
  counts = translate.translate_file(
    cfg,
    tmp_path / "run",
    f"{tmp_path / 'in.en'},{tmp_path / 'in.de'}",
    str(tmp_path / "out.txt"),
    str(tmp_path / "align.jsonl"),
  )
  assert counts["lines"] == 2 and counts["empty"] == 1
  rows = [json.loads(r) for r in (tmp_path / "align.jsonl").read_text().splitlines()]
  assert len(rows[0]["attention"][0]) == 7 + 7  # Six words and EOS, twice.
  t = translate.Translator(cfg, tmp_path / "run")
  with pytest.raises(ValueError, match="reads 2 sources per line"):
    t.translate(["the dog sees the cat ."])
  join = builders.join_sources
  found, _ = translate.translate_lines(t, [join(["the dog .", ""]), "", join(["the cat .", "die"])])
  assert [len(h) for h in found] == [0, 0, 1]  # A blank source: no translation, as in training.
  assert translate.score_lines(t, [join(["the dog .", " "])], ["le chien ."])[0].error == (
    "empty source"
  )


def test_the_no_unk_subset_checks_and_decodes_both_sources(tmp_path, monkeypatch):
  """A German test source with an unknown word leaves the No-UNK subset, and the subset is
  decoded with both sources (it once lost the second, which the model then read as padding)."""
  write_corpus(tmp_path / "corpus")
  test_de = tmp_path / "corpus" / "test_2016_flickr.de"
  lines = test_de.read_text().splitlines()
  lines[0] = lines[0].replace("Mann", "Zebra")  # A word no training line has.
  test_de.write_text("".join(line + "\n" for line in lines))
  cfg = config(tmp_path / "corpus")
  cfg.decode.beam_size = 1
  data = input_pipeline.load_data(data_settings(cfg), tmp_path / "work")
  split = data.splits["test"]
  assert tok.UNK_ID in split.src2.row(0) and tok.UNK_ID not in split.src.row(0)
  state = train_state.create_train_state(
    settings.validate(cfg), jax.random.key(0), data.src_tokenizer.size, data.tgt_tokenizer.size
  )
  decoded = []
  real = inference.translate_split

  def spy(state, split, config, **kwargs):
    decoded.append(split)
    return real(state, split, config, **kwargs)

  monkeypatch.setattr(inference, "translate_split", spy)
  results = evaluation.evaluate_split(
    state, data, "test", settings.validate(cfg), tmp_path / "out", write=False
  )
  assert results["num_no_unk"] == len(split) - 1
  subset = decoded[1]
  assert subset.src2 is not None
  assert [r.tolist() for r in (subset.src2.row(i) for i in range(len(subset)))] == [
    split.src2.row(i).tolist() for i in range(1, len(split))
  ]


def test_the_long_test_split_counts_the_first_source_s_words():
  sources = [builders.join_sources(["a b c", "d e f g h"])]
  assert input_pipeline.long_test_indices(sources, 3, 3).tolist() == [0]
  assert input_pipeline.long_test_indices(sources, 5, 10).tolist() == []


def test_decoding_limits_the_output_by_one_source_s_length(monkeypatch):
  cfg = tiny.get_config()
  cfg.data.corpus, cfg.data.local.src_lang, cfg.data.local.tgt_lang = "local", "en+de", "fr"
  seen = {}
  monkeypatch.setattr(decode, "jit_decode", lambda *a, **k: seen.update(k))
  batch = {"src": np.ones((2, 2 * 12), np.int32), "src_mask": np.ones((2, 2 * 12), np.int32)}
  state = type("State", (), {"graphdef": None, "params": None})()
  decode.decode_batch(state, batch, decode.DecodeSettings.from_config(cfg))
  assert seen["max_len"] == core.max_output_len(12, cfg.decode.max_len_ratio)

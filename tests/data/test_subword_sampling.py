"""Subword regularisation (`data.subword_sampling`): training pairs segmented anew at every draw,
the same text in other pieces, reproducible from the run's seeds and through a resume, and
evaluation left deterministic."""

import itertools
import json

import numpy as np
import pytest
import sentencepiece as spm
from helpers import data_config, data_settings, run_main

from seq2seq import settings
from seq2seq.data import input_pipeline as ip

SAMPLING = "sample(alpha=0.5, nbest_size=16)"


def config_of(**data):
  return data_config(**{"tokenizer": "sentencepiece", **data})


@pytest.fixture(scope="module")
def sp_data(tmp_path_factory):
  return ip.load_data(data_settings(config_of()), tmp_path_factory.mktemp("workdir"))


def take(data, config, n, state=None):
  it = ip.train_iterator(data, data_settings(config))
  if state is not None:
    it.set_state(state)
  return list(itertools.islice(it, n)), it


def rows_of(batch, key):
  """Each live row's tokens of `key` (src: up to EOS; tgt_out: up to EOS)."""
  mask = batch["src_mask"] if key == "src" else batch["tgt_mask"]
  return [
    list(batch[key][r][: mask[r].sum() - 1])
    for r in range(len(batch["index"]))
    if batch["index"][r] >= 0
  ]


def test_sampled_batches_spell_the_same_text_in_other_pieces(sp_data):
  plain, _ = take(sp_data, config_of(), 8)
  sampled, _ = take(sp_data, config_of(subword_sampling=SAMPLING), 8)
  changed = total = 0
  for p, s in zip(plain, sampled, strict=True):
    np.testing.assert_array_equal(p["index"], s["index"])  # The same pairs in the same order.
    for key, tok in (("src", sp_data.src_tokenizer), ("tgt_out", sp_data.tgt_tokenizer)):
      for a, b in zip(rows_of(p, key), rows_of(s, key), strict=True):
        assert tok.decode(a) == tok.decode(b)
        changed += a != b
        total += 1
  assert changed > total // 4, (changed, total)  # alpha=0.5 over the 16 best.


def chi_square(counts, probs):
  expected = counts.sum() * probs
  return float(((counts - expected) ** 2 / expected).sum())


def test_draws_follow_p_to_the_alpha_over_the_nbest_list(sp_data, tmp_path):
  """3,000 draws of one target's segmentation through the pipeline against P(x)^alpha over its 8
  best (scores from SentencePiece, reading the saved model): chi-square 4.7, below 24.32, the
  0.999 quantile of 7 degrees of freedom. The same draws reject P(x) (4,007) and the uniform
  (3,823); a sampler drawing from P(x), alpha ignored, scores 753, one at alpha=0.4 151."""
  alpha, nbest, draws, row = 0.5, 8, 3000, 2
  sp_data.tgt_tokenizer.save(tmp_path)
  sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
  split = sp_data.splits["train"]
  text = sp_data.tgt_tokenizer.decode(list(split.tgt.row(row)))
  best = sp.nbest_encode(text, nbest_size=nbest, return_type="proto").nbests
  pieces = [tuple(p.id for p in n.pieces) for n in best]
  log_p = np.array([n.score for n in best])
  assert len(set(pieces)) == nbest
  # max_len above every segmentation's length: none falls back to the deterministic one.
  d = data_settings(
    config_of(subword_sampling=f"sample(alpha={alpha}, nbest_size={nbest})", max_len=64)
  )
  counts = np.zeros(nbest)
  for draw in range(draws):
    b = ip.sampled_batch(sp_data, split, np.array([row]), draw, d, ip.subword_sampling(d))
    counts[pieces.index(tuple(b["tgt_out"][0][: b["tgt_mask"][0].sum() - 1]))] += 1

  def powered(a):  # P(x)^a normalised over the list.
    weights = np.exp(a * (log_p - log_p.max()))
    return weights / weights.sum()

  assert draws * powered(alpha).min() >= 5  # Enough expected draws in every cell.
  assert chi_square(counts, powered(alpha)) < 24.32
  assert chi_square(counts, powered(1.0)) > 24.32 and chi_square(counts, powered(0.0)) > 24.32


def test_the_stream_is_the_same_in_every_run_and_through_a_resume(sp_data):
  config = config_of(subword_sampling=SAMPLING)
  first, it = take(sp_data, config, 5)
  state = json.loads(json.dumps(it.get_state()))
  rest, _ = take(sp_data, config, 4, None)  # A second run from the start.
  assert all(np.array_equal(a["src"], b["src"]) for a, b in zip(first, rest, strict=False))
  expected = list(itertools.islice(it, 4))
  resumed, _ = take(sp_data, config, 4, state)
  for want, got in zip(expected, resumed, strict=True):
    for key in ip.BATCH_KEYS:
      np.testing.assert_array_equal(got[key], want[key])


def test_each_draw_of_a_pair_is_segmented_anew(sp_data):
  config = config_of(subword_sampling=SAMPLING)
  size = len(sp_data.splits["train"])
  batches, _ = take(sp_data, config, 3 * size // config.data.batch_size + 3)
  seen = {}
  for b in batches:
    for r, i in enumerate(b["index"]):
      if i >= 0:
        seen.setdefault(int(i), set()).add(tuple(b["tgt_out"][r][: b["tgt_mask"][r].sum()]))
  assert sum(len(v) > 1 for v in seen.values()) > len(seen) // 4


def test_evaluation_batches_keep_the_deterministic_segmentation(sp_data):
  d = data_settings(config_of(subword_sampling=SAMPLING))
  plain = data_settings(config_of())
  for a, b in zip(
    ip.eval_batches(sp_data, "valid", d), ip.eval_batches(sp_data, "valid", plain), strict=True
  ):
    for key in ip.BATCH_KEYS:
      np.testing.assert_array_equal(a[key], b[key])


def test_none_is_the_deterministic_segmentation(sp_data):
  plain, _ = take(sp_data, config_of(), 3)
  none, _ = take(sp_data, config_of(subword_sampling="none"), 3)
  for a, b in zip(plain, none, strict=True):
    for key in ip.BATCH_KEYS:
      np.testing.assert_array_equal(a[key], b[key])


def test_sampled_lengths_stay_within_max_len(sp_data):
  config = config_of(subword_sampling="sample(alpha=1.0, nbest_size=64)", max_len=12)
  for b in take(sp_data, config, 20)[0]:
    assert (b["src_mask"].sum(1) - 1).max() <= 12 and (b["tgt_mask"].sum(1) - 1).max() <= 12


@pytest.mark.parametrize(
  ("data", "match"),
  [
    ({"subword_sampling": "sample(alpha=0)"}, "alpha must be in"),
    ({"subword_sampling": "sample(nbest_size=-1)"}, "nbest_size must be"),
    ({"subword_sampling": SAMPLING, "sp_model_type": "bpe"}, "unigram"),
    ({"subword_sampling": "dropout(p=0.1)"}, 'use "sample'),
    ({"subword_sampling": SAMPLING, "tokenizer": "word"}, "SentencePiece segmentations"),
  ],
)
def test_bad_settings_fail_in_one_line(data, match):
  with pytest.raises(ValueError, match=match):
    settings.validate(config_of(**data))


def test_refused_with_copying():
  config = config_of(subword_sampling=SAMPLING)
  config.model.addons = "copy"
  with pytest.raises(ValueError, match="model.addons=copy"):
    settings.validate(config)


def test_a_run_trains_and_resumes_bit_identically_with_sampling(tmp_path):
  flags = ["--config.data.tokenizer=sentencepiece", f"--config.data.subword_sampling={SAMPLING}"]
  flags += ["--config.train.eval_every=1000", "--config.train.final_eval=false"]
  flags += ["--config.train.log_every=1"]
  # In processes of their own: SentencePiece's trainer wants a real stderr.
  run_main(tmp_path / "whole", *flags, "--config.train.num_steps=6", own_process=True)
  run_main(tmp_path / "split", *flags, "--config.train.num_steps=3", own_process=True)
  run_main(tmp_path / "split", *flags, "--config.train.num_steps=6", own_process=True)
  losses = lambda w: [
    r["loss"]
    for r in map(json.loads, (w / "metrics.jsonl").read_text().splitlines())
    if r.get("split") == "train"
  ]
  whole, split = losses(tmp_path / "whole"), losses(tmp_path / "split")
  assert len(whole) == 6 and whole == split

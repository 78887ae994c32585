"""n-best lists, scoring given translations, and the Python API, on the tiny trained run: the
command line's files, and `seq2seq.load` against them."""

import io
import json

import numpy as np
import pytest
from helpers import check_scores_match_search, run_main

import seq2seq
from seq2seq import checkpoints, settings, translate
from seq2seq.decoding import mbr

SOURCES = ["the cat sleeps .", "", "the dog does not eat apples .", "   ", "a big house ."]
REFERENCES = ["le chat dort .", "le chien", "", "", "une grande maison ."]
NBEST = 3  # configs/tiny.py decodes with beam 3.


def api_files(workdir, sources, references, nbest_out, scores_out):
  """The Python API's n-best list and score records, written in the command line's formats."""
  sources = sources.read_text().split("\n")[:-1]
  references = references.read_text().split("\n")[:-1]
  t = seq2seq.load(workdir)
  found = t.translate(sources, nbest=NBEST)
  with open(nbest_out, "w") as f:
    for i, hyps in enumerate(found):
      f.writelines(line + "\n" for line in translate.nbest_lines(i, hyps))
  with open(scores_out, "w") as f:
    for i, r in enumerate(t.score(sources, references)):
      f.write(json.dumps(translate.score_record(i, r), ensure_ascii=False) + "\n")


@pytest.fixture(scope="module")
def outputs(trained, tmp_path_factory):
  """The files of four runs on the trained tiny model: main.py translate (1-best), translate
  --nbest=3 with alignments, score with alignments, and the Python API."""
  d = tmp_path_factory.mktemp("translate")
  (d / "src.txt").write_text("".join(s + "\n" for s in SOURCES))
  (d / "ref.txt").write_text("".join(r + "\n" for r in REFERENCES))
  mode = lambda *args: run_main(
    trained, "--config.train.num_steps=20", f"--input={d}/src.txt", *args
  )
  mode("--mode=translate", f"--output={d}/best.txt")
  mode(
    "--mode=translate",
    f"--nbest={NBEST}",
    f"--output={d}/nbest.txt",
    f"--alignments={d}/nbest.jsonl",
  )
  mode(
    "--mode=score",
    f"--reference={d}/ref.txt",
    f"--output={d}/scores.jsonl",
    f"--alignments={d}/att.jsonl",
  )
  api_files(trained, d / "src.txt", d / "ref.txt", d / "api_nbest.txt", d / "api_scores.jsonl")
  return d


def read_nbest(path):
  """[(index, text, score, normalised score)] of an n-best file."""
  rows = []
  for line in path.read_text().split("\n")[:-1]:
    index, text, score, norm = line.split(translate.NBEST_SEPARATOR)
    rows.append((int(index), text, float(score), float(norm)))
  return rows


@pytest.mark.slow
def test_nbest_list_starts_with_the_1best_and_keeps_every_line(outputs):
  best = outputs.joinpath("best.txt").read_text().split("\n")[:-1]
  rows = read_nbest(outputs / "nbest.txt")
  indices = [r[0] for r in rows]
  assert indices == sorted(indices) and set(indices) == set(range(len(SOURCES)))
  blocks = {i: [r for r in rows if r[0] == i] for i in range(len(SOURCES))}
  for i, source in enumerate(SOURCES):
    if not source.strip():  # A blank line: one line, empty translation, log-probability 0.
      assert blocks[i] == [(i, "", 0.0, 0.0)]
      continue
    assert 1 <= len(blocks[i]) <= NBEST and blocks[i][0][1] == best[i] != ""
    norms = [r[3] for r in blocks[i]]
    assert norms == sorted(norms, reverse=True), norms
    assert all(r[2] < 0 for r in blocks[i])
  assert sum(len(b) for b in blocks.values()) > len(SOURCES), "want several hypotheses a line"

  records = [json.loads(line) for line in outputs.joinpath("nbest.jsonl").read_text().splitlines()]
  assert [(r["index"], r["target"]) for r in records] == [(r[0], r[1]) for r in rows]
  ranks = [rank for block in blocks.values() for rank in range(len(block))]
  assert [r["rank"] for r in records] == ranks
  for r in records:
    attention = np.asarray(r["attention"])
    if r["target"]:  # Output words and EOS over source words and EOS.
      assert attention.shape == (len(r["target"].split()) + 1, len(r["source"].split()) + 1)
      np.testing.assert_allclose(attention.sum(axis=1), 1.0, atol=1e-3)


def test_score_mode_writes_one_record_per_pair_and_reports_empty_sides(outputs):
  records = [json.loads(line) for line in outputs.joinpath("scores.jsonl").read_text().splitlines()]
  assert [r["index"] for r in records] == list(range(len(SOURCES)))
  errors = [r["error"] for r in records]
  assert errors == [None, "empty source", "empty target", "empty source and target", None]
  for r, ref in zip(records, REFERENCES, strict=True):
    if r["error"] is not None:
      assert r["score"] is None and r["norm_score"] is None and r["tokens"] == []
      continue
    assert len(r["token_scores"]) == len(r["tokens"]) == len(ref.split()) + 1
    assert all(t in (w, "<unk>") for t, w in zip(r["tokens"], [*ref.split(), "</s>"], strict=True))
    np.testing.assert_allclose(sum(r["token_scores"]), r["score"], rtol=1e-5)
    np.testing.assert_allclose(r["norm_score"], r["score"] / len(r["tokens"]), rtol=1e-5)
  attention = [json.loads(line) for line in outputs.joinpath("att.jsonl").read_text().splitlines()]
  assert len(attention) == len(SOURCES) and attention[1]["attention"] == []
  first = np.asarray(attention[0]["attention"])
  assert first.shape == (len(REFERENCES[0].split()) + 1, len(SOURCES[0].split()) + 1)
  np.testing.assert_allclose(first.sum(axis=1), 1.0, atol=1e-3)


def test_the_python_api_writes_what_the_command_line_writes(outputs):
  assert outputs.joinpath("api_nbest.txt").read_text() == outputs.joinpath("nbest.txt").read_text()
  api = outputs.joinpath("api_scores.jsonl").read_text()
  assert api == outputs.joinpath("scores.jsonl").read_text()


@pytest.fixture(scope="module")
def loaded(trained):
  return seq2seq.load(trained)


def test_api_takes_any_decode_setting_for_one_call_and_refuses_others(loaded):
  """`translate(..., FIELD=V)` decodes with decode.FIELD=V for that call only: without length
  normalisation the ranking score is the score; the run's own settings stay."""
  plain = loaded.translate(["the cat sleeps ."], length_penalty="none")[0][0]
  assert plain.norm_score == pytest.approx(plain.score)
  again = loaded.translate(["the cat sleeps ."])[0][0]
  assert again.norm_score != pytest.approx(again.score)  # Alpha 1 (configs/tiny.py) divides.
  with pytest.raises(ValueError, match="not decode settings: beam"):
    loaded.translate(["the cat ."], beam=2)
  with pytest.raises(ValueError, match="decode.ensemble is fixed when the run loads"):
    loaded.translate(["the cat ."], ensemble="runs/other")
  with pytest.raises(ValueError, match="alpha must be >= 0"):  # Validated as the config is.
    loaded.translate(["the cat ."], length_penalty="power(alpha=-1)")


def test_decoding_settings_are_validated_once_per_set_of_values(loaded):
  """A service asks for every request's settings; the same values give the same validated
  settings without validating again, other values their own, and a refusal is raised every
  time."""
  from seq2seq import settings

  calls = []
  real = settings.validate

  def counted(config):
    calls.append(config)
    return real(config)

  settings.validate = counted
  try:
    first = loaded.decoding_with(beam_size=2, replace_unk=False)
    assert loaded.decoding_with(replace_unk=False, beam_size=2) is first
    assert len(calls) == 1
    assert loaded.decoding_with(beam_size=3).beam_size == 3
    assert len(calls) == 2
    for _ in range(2):
      with pytest.raises(ValueError, match="alpha must be >= 0"):
        loaded.decoding_with(length_penalty="power(alpha=-1)")
    assert len(calls) == 4
  finally:
    settings.validate = real


def test_api_scores_of_its_own_translations_are_what_the_search_reported(loaded):
  """Greedy and beam (n-best) outputs, scored as given translations, get the scores, ranking
  scores and attention their search reported (`helpers.check_scores_match_search`)."""
  check_scores_match_search(loaded, [s for s in SOURCES if s.strip()], NBEST)


def test_api_samples_n_per_sentence_and_scores_them_as_forced_decoding_does(loaded):
  """`sampling="sample(n=4, ...)"` gives 4 outputs per sentence, best first, the same ones on
  every call with the same seed; scored as given translations they get what sampling reported."""
  sources = [s for s in SOURCES if s.strip()]
  spec = "sample(n=4, temperature=1.5, top_p=0.95, seed=2)"
  first = loaded.translate(sources, sampling=spec, nbest=4)
  assert [len(hyps) for hyps in first] == [4] * len(sources)
  for hyps in first:
    assert [h.norm_score for h in hyps] == sorted((h.norm_score for h in hyps), reverse=True)
  again = loaded.translate(sources[::-1], sampling=spec, nbest=4)[::-1]
  assert [[h.text for h in hyps] for hyps in again] == [[h.text for h in hyps] for hyps in first]
  check_scores_match_search(loaded, sources, 4, searches=[({"sampling": spec}, 4)])


@pytest.mark.parametrize(
  "spec, search",
  [
    ("mbr(utility=chrf)", {"sampling": "sample(n=6, temperature=2.0, seed=4)"}),
    ("mbr(utility=bleu, evidence=model)", {"beam_size": 6}),  # Model evidence: an n-best list.
  ],
)
def test_api_mbr_ranks_the_candidates_by_expected_utility(loaded, spec, search):
  """With decode.mbr the list is the candidates (samples or the n-best list) in order of expected
  utility (recomputed here from the texts and scores returned), the 1-best its first."""
  sources = [s for s in SOURCES if s.strip()]
  ranked = loaded.translate(sources, mbr=spec, nbest=6, **search)
  plain = loaded.translate(sources, nbest=6, **search)
  best = loaded.translate(sources, mbr=spec, **search)
  settings_ = mbr.parse(spec)
  for hyps, unranked, one in zip(ranked, plain, best, strict=True):
    assert sorted(h.text for h in hyps) == sorted(h.text for h in unranked)
    texts = [h.text for h in hyps]
    weights = mbr.evidence_weights([h.score for h in hyps], settings_.evidence)
    utilities = mbr.expected_utilities(texts, mbr.UTILITIES[settings_.utility](), weights)
    assert list(utilities) == sorted(utilities, reverse=True)
    assert [h.text for h in one] == texts[:1]
  with pytest.raises(ValueError, match="evidence=model weighs an n-best list"):
    loaded.translate(sources, sampling="sample(n=6)", mbr="mbr(evidence=model)")


def test_under_a_sentence_shortlist_scores_agree_and_say_what_they_are(trained, tmp_path):
  """With decode.shortlist (each sentence's own), the API's search scores and its score mode's
  are both log-probabilities over the shortlist, equal, and labelled so; without one, both
  say "vocabulary"."""
  import shutil

  from seq2seq import build_lexicon
  from seq2seq.data import lexicon

  run = tmp_path / "run"
  shutil.copytree(trained, run, ignore=shutil.ignore_patterns("eval"))
  build_lexicon.main(["--workdir", str(run), "--top", "5"])
  config = checkpoints.load_config(run)
  assert seq2seq.load(run, config).score(["a big house ."], ["une maison ."])[
    0
  ].normalised_over == ("vocabulary")
  dec = config.decode
  dec.shortlist, dec.shortlist_frequent, dec.shortlist_per_word = str(run / lexicon.FILE), 3, 2
  dec.shortlist_scope = "sentence"
  t = seq2seq.load(run, config)
  sources = [s for s in SOURCES if s.strip()]
  found = t.translate(sources, nbest=NBEST)
  pairs = [(s, h) for s, hyps in zip(sources, found, strict=True) for h in hyps if h.finished]
  assert len(pairs) >= 3
  scored = t.score([s for s, _ in pairs], [h.text for _, h in pairs])
  for (_, h), r in zip(pairs, scored, strict=True):
    assert h.normalised_over == r.normalised_over == "shortlist (sentence)"
    np.testing.assert_allclose(r.score, h.score, rtol=1e-4, atol=1e-4)
  assert translate.score_record(0, scored[0])["normalised_over"] == "shortlist (sentence)"


def test_scoring_a_batch_equals_one_pair_at_a_time(trained):
  config = checkpoints.load_config(trained)
  config.data.bucket_step = 4  # Each pair alone is padded to shapes of its own.
  t = seq2seq.load(trained, config)
  sources = ["the cat sleeps .", "the dog does not eat apples at home today .", "a house ."]
  targets = ["le chat dort .", "le chien", "une maison rouge et grande , la maison ."]
  together = t.score(sources, targets)
  for s, g, batched in zip(sources, targets, together, strict=True):
    [alone] = t.score([s], [g])
    assert alone.tokens == batched.tokens
    np.testing.assert_allclose(alone.token_scores, batched.token_scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(alone.norm_score, batched.norm_score, rtol=1e-5)
    np.testing.assert_allclose(alone.attention, batched.attention, atol=1e-6)


def test_pairs_the_model_cannot_address_are_reported_on_their_line(loaded, monkeypatch):
  monkeypatch.setattr(loaded, "max_source_tokens", 3)  # As a location score of max_len=4 has.
  scored = loaded.score(["a b c d e", "a b", "", "x"], ["y", "z", "w", ""])
  assert scored[0].error.startswith("source of 5 tokens") and scored[0].score is None
  assert scored[1].error is None and np.isfinite(scored[1].score)
  assert [r.error for r in scored[2:]] == ["empty source", "empty target"]
  with pytest.raises(ValueError, match="2 sources but 1 targets"):
    loaded.score(["a", "b"], ["c"])


def test_nbest_beyond_the_beam_and_mismatched_files_are_one_error_line(trained, tmp_path):
  src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
  src.write_text("a\nb\nc\n")
  ref.write_text("x\ny\n")
  cases = [
    (["--mode=translate", f"--input={src}", "--nbest=4"], "nbest=4 exceeds the beam size 3"),
    (
      ["--mode=translate", f"--input={src}", "--nbest=5", "--config.decode.sampling=sample(n=4)"],
      "nbest=5 exceeds the samples drawn",
    ),
    (
      ["--mode=score", f"--input={src}", f"--reference={ref}"],
      f"{src} has 3 lines but {ref} has 2",
    ),
    (["--mode=score", f"--input={src}"], "--mode=score needs --reference"),
  ]
  for args, message in cases:
    proc = run_main(trained, "--config.train.num_steps=20", *args, check=False)
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error:") and message in line, line


def test_input_lines_split_as_training_and_wc_count_them(tmp_path):
  """On "\\n" only: a lone "\\r" inside a line does not split it, a CRLF ending and a leading
  byte-order mark are dropped; a last line without a newline counts."""
  path = tmp_path / "in.txt"
  path.write_bytes(b"\xef\xbb\xbfthe cat\r\nsleeps \r here .\na house")
  read = list(translate._read_lines(str(path)))
  assert read == [("the cat", False), ("sleeps \r here .", False), ("a house", False)]


@pytest.mark.parametrize("mode", ["translate", "eval"])
def test_a_config_of_another_model_is_refused_naming_the_fields(trained, tmp_path, mode):
  """Translate and eval with a --config that would build another model than the run trained
  end in one error line naming the differing fields, not a shape error; decode.* may differ."""
  (tmp_path / "in.txt").write_text("the cat sleeps .\n")
  args = [f"--mode={mode}", f"--input={tmp_path}/in.txt", f"--output={tmp_path}/out.txt"]
  proc = run_main(trained, *args, "--config.model.dec_hidden=24", check=False, own_process=True)
  assert proc.returncode == 1
  line = proc.stderr.strip().splitlines()[-1]
  assert line.startswith("error: --config differs from") and "model.dec_hidden (" in line, line
  assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("mode", ["translate", "score"])
def test_an_unwritable_output_is_refused_before_decoding(trained, tmp_path, mode):
  (tmp_path / "in.txt").write_text("the cat sleeps .\n")
  out = tmp_path / "no_such_folder" / "out.txt"
  args = [f"--mode={mode}", f"--input={tmp_path}/in.txt", f"--reference={tmp_path}/in.txt"]
  proc = run_main(trained, *args, f"--output={out}", check=False, own_process=True)
  assert proc.returncode == 1
  line = proc.stderr.strip().splitlines()[-1]
  assert line == f"error: cannot write {out}: no folder {out.parent}", line
  assert "decoding" not in proc.stderr and "translating" not in proc.stderr


def test_a_line_too_long_to_decode_is_left_empty_and_named_the_others_translated(trained, tmp_path):
  """A 5,000-word line among short ones: its output line is empty, a warning names it, and
  every other line is translated as it is alone."""
  short = ["the cat sleeps .", "a big house ."]
  (tmp_path / "in.txt").write_text("\n".join([short[0], "the dog " * 2500, short[1]]) + "\n")
  out = tmp_path / "out.txt"
  args = ["--mode=translate", f"--input={tmp_path}/in.txt", f"--output={out}"]
  proc = run_main(trained, *args, own_process=True)
  assert "1 lines of more than decode.max_input_tokens=250 tokens left untranslated" in proc.stderr
  assert "line 2" in proc.stderr and "1 too long to translate" in proc.stderr
  lines = out.read_text().split("\n")[:-1]
  alone = [h[0].text for h in seq2seq.load(trained).translate(short)]
  assert lines == [alone[0], "", alone[1]]


@pytest.mark.slow
def test_word_alignments_give_the_evaluations_aer_and_follow_the_nbest_list(trained, tmp_path):
  """Forced scoring's Pharaoh links of the test split are the links the evaluation's AER counted
  (argmax, and with a threshold: the same AER); translate writes one line per n-best line, each
  link inside its sentence pair's words."""
  from seq2seq import evaluation
  from seq2seq import sharding as rt
  from seq2seq.data import metrics

  raw = rt.load_data(settings.validate(checkpoints.load_config(trained)), trained).raw("test")
  (tmp_path / "src.txt").write_text("".join(r[0] + "\n" for r in raw))
  (tmp_path / "ref.txt").write_text("".join(r[1] + "\n" for r in raw))
  results = json.loads((trained / "eval" / "test" / "results.json").read_text())
  gold = evaluation.gold_links(raw)
  for threshold, key in (("0", "aer"), ("0.3", "aer_threshold")):
    links = tmp_path / f"links_{threshold}.txt"
    run_main(
      trained,
      "--config.train.num_steps=20",
      "--mode=score",
      f"--input={tmp_path}/src.txt",
      f"--reference={tmp_path}/ref.txt",
      f"--output={tmp_path}/scores.jsonl",
      f"--word_alignments={links}",
      f"--alignment_threshold={threshold}",
    )
    parsed = [
      {tuple(int(i) for i in pair.split("-")) for pair in line.split()}
      for line in links.read_text().split("\n")[:-1]
    ]
    assert len(parsed) == len(raw)
    assert metrics.alignment_error_rate(parsed, gold) == pytest.approx(results[key], abs=1e-12)
  run_main(
    trained,
    "--config.train.num_steps=20",
    "--mode=translate",
    f"--input={tmp_path}/src.txt",
    f"--output={tmp_path}/nbest.txt",
    f"--nbest={NBEST}",
    f"--word_alignments={tmp_path}/nbest.align",
  )
  entries = read_nbest(tmp_path / "nbest.txt")
  lines = (tmp_path / "nbest.align").read_text().split("\n")[:-1]
  assert len(lines) == len(entries) > len(raw)
  for (index, text, _, _), line in zip(entries, lines, strict=True):
    pairs = [tuple(int(i) for i in pair.split("-")) for pair in line.split()]
    assert len(pairs) == len(text.split())  # Argmax: one link per target word.
    assert all(s < len(raw[index][0].split()) and t < len(text.split()) for s, t in pairs)


def test_word_alignments_refuse_what_they_cannot_give(trained, tmp_path):
  proc = run_main(
    trained,
    "--config.train.num_steps=20",
    "--mode=translate",
    f"--word_alignments={tmp_path}/x.align",
    "--alignment_threshold=1.5",
    check=False,
  )
  assert proc.returncode == 1 and "--alignment_threshold must be in [0, 1]" in proc.stderr
  assert not (tmp_path / "x.align").exists()


def test_a_file_is_read_translated_and_written_a_chunk_at_a_time(trained, tmp_path, monkeypatch):
  """With chunks of 2 lines, translate mode decodes 2 lines at a time (memory bounded whatever
  the input's length) and writes what it writes in one piece: the n-best list (indices counted
  over the file), the alignments, the Pharaoh links and the counts."""
  lines = [*SOURCES, "the dog sleeps .", "the house is big ."]
  (tmp_path / "src.txt").write_text("".join(s + "\n" for s in lines))
  config = checkpoints.load_config(trained)
  chunks = []
  translate_lines = translate.translate_lines

  def recording(t, chunk, **kwargs):
    chunks.append(len(chunk))
    return translate_lines(t, chunk, **kwargs)

  monkeypatch.setattr(translate, "translate_lines", recording)
  written = {}
  for name, size in (("chunked", 2), ("whole", 100)):
    monkeypatch.setattr(translate, "CHUNK_LINES", size, raising=False)
    out = {kind: tmp_path / f"{name}.{kind}" for kind in ("nbest", "jsonl", "links")}
    counts = translate.translate_file(
      config,
      trained,
      str(tmp_path / "src.txt"),
      str(out["nbest"]),
      str(out["jsonl"]),
      NBEST,
      links_path=str(out["links"]),
    )
    assert counts == {"lines": 7, "empty": 2, "invalid_utf8": 0, "truncated": 0, "too_long": 0}
    written[name] = {kind: path.read_text() for kind, path in out.items()}
  assert chunks == [2, 2, 2, 1, 7]
  assert written["chunked"] == written["whole"]
  assert read_nbest(tmp_path / "chunked.nbest")[-1][0] == 6


def test_score_mode_reads_and_writes_a_chunk_at_a_time(trained, tmp_path, monkeypatch):
  (tmp_path / "src.txt").write_text("".join(s + "\n" for s in SOURCES))
  (tmp_path / "ref.txt").write_text("".join(r + "\n" for r in REFERENCES))
  config = checkpoints.load_config(trained)
  written = {}
  for name, size in (("chunked", 2), ("whole", 100)):
    monkeypatch.setattr(translate, "CHUNK_LINES", size)
    out = {kind: tmp_path / f"{name}.{kind}" for kind in ("scores", "jsonl", "links")}
    counts = translate.score_file(
      config,
      trained,
      str(tmp_path / "src.txt"),
      str(tmp_path / "ref.txt"),
      str(out["scores"]),
      str(out["jsonl"]),
      links_path=str(out["links"]),
    )
    assert counts == {"pairs": 5, "scored": 2, "unscored": 3, "invalid_utf8": 0}
    written[name] = {kind: path.read_text() for kind, path in out.items()}
  assert written["chunked"] == written["whole"]
  records = [json.loads(line) for line in written["chunked"]["scores"].splitlines()]
  assert [r["index"] for r in records] == list(range(5))


def test_prefixes_are_read_in_step_and_errors_name_the_line_in_the_file(
  trained, tmp_path, monkeypatch
):
  """A prefix file is read chunk by chunk beside the input; an error in the second chunk names
  its line in the file and leaves no output; standard input that ends before the prefix file
  does is one error line."""
  monkeypatch.setattr(translate, "CHUNK_LINES", 2)
  src, out = tmp_path / "src.txt", tmp_path / "out.txt"
  src.write_text("the cat sleeps .\na big house .\nthe dog .\n")
  (tmp_path / "prefixes.txt").write_text("le\n\nune\n")
  config = checkpoints.load_config(trained)
  run = lambda prefixes, source=str(src): translate.translate_file(
    config, trained, source, str(out), prefixes_path=str(tmp_path / prefixes)
  )
  run("prefixes.txt")
  lines = out.read_text().split("\n")[:-1]
  assert len(lines) == 3 and lines[0].startswith("le") and lines[2].startswith("une")
  out.unlink()
  (tmp_path / "unknown.txt").write_text("le\n\nzzzqqq chien\n")
  with pytest.raises(ValueError, match="prefix of line 3: 'zzzqqq chien' holds 'zzzqqq'"):
    run("unknown.txt")
  assert not out.exists()
  monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"the cat .\na house .\n")))
  with pytest.raises(ValueError, match=r"- ended after 2 lines but .*prefixes.txt goes on"):
    run("prefixes.txt", "-")
  assert not out.exists()

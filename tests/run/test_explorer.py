"""What the explorer embeds, without a browser: attention maps encoded and decoded, JSON that no
corpus line can break out of, the page's tags and Content-Security-Policy, the per-sentence
records of an evaluated run (sentences.jsonl) against its results, one map per head, and
`--mode=report` (and `--compare`) through main.py."""

import base64
import hashlib
import html.parser
import json
import re
import shutil

import jax
import numpy as np
import pytest
import sacrebleu
from helpers import data_settings, explorer_records, explorer_run, run_main

from configs import tiny
from seq2seq import evaluation, explorer, settings
from seq2seq.data import input_pipeline
from seq2seq.training import train_state

HOSTILE = [
  "<img src=x onerror=alert(1)>",
  "</script><script>alert(2)</script>",
  "<!-- a comment -->",
  "&amp; & \u2028 \u2029 'quotes' \"double\"",
]


def test_attention_maps_survive_encoding_to_within_half_a_level():
  rng = np.random.default_rng(0)
  for shape in [(1, 1), (3, 5), (20, 300), (4, 0)]:
    alpha = rng.random(shape)
    alpha[alpha < 0.6] = 0.0
    alpha.flat[: min(alpha.size, 290)] = 0.0  # A run of zeros longer than one escape holds.
    if alpha.size > 300:
      alpha.flat[300] = 0.0  # A lone zero.
    got = explorer.decode_map(explorer.encode_map(alpha))
    assert got.shape == alpha.shape
    np.testing.assert_allclose(got, alpha, atol=0.5 / explorer.LEVELS + 1e-12)
  sharp = np.eye(30)  # Attention of a trained model: mostly zeros.
  assert len(base64.b64decode(explorer.encode_map(sharp)["data"])) < 0.25 * sharp.size
  with pytest.raises(ValueError, match=r"\[T, S\]"):
    explorer.encode_map(np.zeros(3))


def test_embedded_json_cannot_close_its_script_and_reads_back_the_same():
  data = {"texts": HOSTILE, "nested": {"</script>": HOSTILE[0]}, "nan": float("nan")}
  text = explorer.embed_json(data)
  assert not set("<>&\u2028\u2029") & set(text)
  back = json.loads(text)
  assert back["texts"] == HOSTILE and back["nested"] == {"</script>": HOSTILE[0]}
  assert back["nan"] is None  # JSON has no NaN: missing figures are null.


class Tags(html.parser.HTMLParser):
  def __init__(self):
    super().__init__()
    self.tags, self.scripts, self.meta = [], [], {}
    self._in_script = False

  def handle_starttag(self, tag, attrs):
    self.tags.append(tag)
    attrs = dict(attrs)
    if tag == "script":
      self.scripts.append([attrs, ""])
      self._in_script = True
    if tag == "meta" and "http-equiv" in attrs:
      self.meta[attrs["http-equiv"]] = attrs["content"]

  def handle_endtag(self, tag):
    self._in_script = False

  def handle_data(self, data):
    if self._in_script:
      self.scripts[-1][1] += data


def test_the_page_has_only_its_own_tags_and_allows_only_its_own_script():
  records = explorer_records(5)
  for record, text in zip(records, HOSTILE, strict=False):
    record.update(source=text, hypothesis=text)
  run = explorer_run()
  run["config"]["hostile"] = HOSTILE
  page = explorer.render(explorer.page_data([run], [records], "test"))
  parsed = Tags()
  parsed.feed(page)
  assert set(parsed.tags) == {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "noscript",
    "script",
  }
  (data_attrs, data_text), (app_attrs, app_text) = parsed.scripts
  assert data_attrs == {"type": "application/json", "id": "report-data"} and app_attrs == {}
  embedded = json.loads(data_text)
  assert embedded["sentences"][0] == records and embedded["runs"][0]["config"]["hostile"] == HOSTILE
  digest = base64.b64encode(hashlib.sha256(app_text.encode()).digest()).decode()
  csp = parsed.meta["Content-Security-Policy"]
  assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp
  urls = set(re.findall(r"https?://[^\s\"'`]+", page))
  assert urls == {"http://www.w3.org/2000/svg"}  # The SVG namespace's name; nothing is fetched.


def test_a_comparison_needs_the_same_sentences():
  a, b = explorer_records(4, seed=0), explorer_records(4, seed=0)
  data = explorer.page_data([explorer_run("a"), explorer_run("b")], [a, b], "test")
  assert data["title"] == "a vs b · test" and len(data["sentences"]) == 2
  b[2]["source"] = "another sentence"
  with pytest.raises(ValueError, match="sentence 2 differs.*not the same test set"):
    explorer.page_data([explorer_run("a"), explorer_run("b")], [a, b], "test")
  with pytest.raises(ValueError, match="4 sentences and runs/b 3"):
    explorer.page_data([explorer_run("a"), explorer_run("b")], [a, b[:3]], "test")


def test_curves_come_from_metrics_jsonl(tmp_path):
  rows = [
    {"step": 5, "split": "train", "loss": 3.0, "elapsed_s": 30.0},
    {"step": 10, "split": "train", "loss": 2.0, "elapsed_s": 60.0},
    {"step": 10, "split": "valid", "loss": 2.5, "perplexity": 12.0, "elapsed_s": 66.0, "bleu": 9.0},
  ]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  got = explorer.curves(tmp_path)
  assert got["train"] == [
    {"step": 5, "minutes": 0.5, "loss": 3.0},
    {"step": 10, "minutes": 1.0, "loss": 2.0},
  ]
  assert got["valid"] == [{"step": 10, "minutes": 1.1, "loss": 2.5, "bleu": 9.0}]


def test_sentence_records_of_an_evaluated_run_agree_with_its_results(trained):
  out = trained / "eval" / "test"
  records = explorer.read_sentences(out)
  results = json.loads((out / "results.json").read_text())
  hypotheses = (out / "hypotheses.txt").read_text().splitlines()
  assert [r["index"] for r in records] == list(range(results["num_sentences"]))
  assert [r["hypothesis"] for r in records] == hypotheses
  no_unk = [r for r in records if r["unk"]["source"] + r["unk"]["reference"] == 0]
  assert len(no_unk) == results["num_no_unk"]
  sentence_bleu = sacrebleu.metrics.BLEU(effective_order=True)
  for r in records:
    assert r["bleu"] == pytest.approx(
      sentence_bleu.sentence_score(r["hypothesis"], [r["reference"]]).score
    )
    att = r["attention"]
    (decoded,) = att["maps"]  # One head.
    alpha = explorer.decode_map(decoded)
    assert alpha.shape == (len(att["output"]), len(att["source"]))
    assert att["source"] == r["source"].split() + ["</s>"]
    np.testing.assert_allclose(alpha.sum(axis=1), 1.0, atol=alpha.shape[1] / explorer.LEVELS)
    forced = explorer.decode_map(r["reference_attention"]["map"])
    assert forced.shape == (len(r["reference"].split()), r["source_words"])
    assert 0.0 <= r["aer"] <= 1.0 and r["entropy"] >= 0.0
    gold = r["reference_attention"]["gold"]  # (source, reference) word pairs.
    assert gold and all(s < forced.shape[1] and t < forced.shape[0] for s, t in gold)
  page = (out / explorer.REPORT).read_text()
  embedded = re.search(r'id="report-data">(.*?)</script>', page, re.S).group(1)
  assert json.loads(embedded)["sentences"][0] == records


def test_multihead_records_hold_one_map_per_head_whose_mean_is_the_attention(tmp_path):
  config = tiny.get_config()
  config.model.attention = "multihead(heads=2)"
  config.decode.beam_size = 1
  data = input_pipeline.load_data(data_settings(config), tmp_path / "run")
  sizes = data.src_tokenizer.size, data.tgt_tokenizer.size
  state = train_state.create_train_state(settings.validate(config), jax.random.key(0), *sizes)
  evaluation.evaluate_split(state, data, "valid", settings.validate(config), tmp_path / "out")
  for r in explorer.read_sentences(tmp_path / "out"):
    maps = r["attention"]["maps"]
    assert [m["name"] for m in maps] == ["attention", "head 1", "head 2"]
    mean, *heads = (explorer.decode_map(m) for m in maps)
    np.testing.assert_allclose((heads[0] + heads[1]) / 2, mean, atol=1.0 / explorer.LEVELS)
  # The heatmaps count heads as the records do, from 1.
  names = sorted(path.name for path in (tmp_path / "out" / "alignments").glob("000*.png"))
  assert names == ["000.png", "000_head1.png", "000_head2.png"]


def test_records_hold_the_attribution_beside_the_attention_when_asked_for(tmp_path):
  """`decode.saliency`: one map more per output, named by its method, at the attention's shape:
  each row the shares of the word saliency's magnitudes (`explorer.row_shares`) of the output
  scored as given."""
  config = tiny.get_config()
  config.decode.beam_size = 1
  config.decode.saliency = "saliency(method=grad_x_input)"
  data = input_pipeline.load_data(data_settings(config), tmp_path / "run")
  sizes = data.src_tokenizer.size, data.tgt_tokenizer.size
  run = settings.validate(config)
  state = train_state.create_train_state(run, jax.random.key(0), *sizes)
  evaluation.evaluate_split(state, data, "valid", run, tmp_path / "out")
  records = explorer.read_sentences(tmp_path / "out")
  compared = 0
  for r in records:
    maps = r["attention"]["maps"]
    assert [m["name"] for m in maps] == ["attention", "grad x input"]
    attention, salient = (explorer.decode_map(m) for m in maps)
    assert salient.shape == attention.shape
    rows = salient.sum(axis=1)
    np.testing.assert_allclose(rows[rows > 0], 1.0, atol=salient.shape[1] / explorer.LEVELS)
    compared += not np.allclose(salient, attention, atol=2.0 / explorer.LEVELS)
  assert compared > len(records) // 2  # Attribution is not the attention redrawn.
  with pytest.raises(ValueError, match="method must be one of grad_x_input, grad_norm, integ"):
    config.decode.saliency = "saliency(method=lime)"
    settings.validate(config)


def test_report_mode_writes_reports_and_comparisons_and_fails_in_one_line(trained, tmp_path):
  other = tmp_path / "other"
  shutil.copytree(trained / "eval", other / "eval")
  shutil.copy(trained / "config.json", other / "config.json")
  for path in (
    trained / "eval" / "test" / explorer.REPORT,
    other / "eval" / "test" / explorer.REPORT,
  ):
    path.unlink(missing_ok=True)
  proc = run_main(trained, "--mode=report")  # No --config needed: everything is on disk.
  written = proc.stdout.split()
  assert written == [str(trained / "eval" / s / explorer.REPORT) for s in ("valid", "test")]
  assert (trained / "eval" / "test" / explorer.REPORT).stat().st_size > 0
  proc = run_main(other, "--mode=report", f"--compare={trained}")
  compared = other / "eval" / "test" / explorer.compare_name(trained)
  assert str(compared) in proc.stdout.split() and compared.name == "compare_full.html"
  assert '"sentences":[[' in compared.read_text()
  empty = tmp_path / "empty"
  empty.mkdir()
  proc = run_main(empty, "--mode=report", check=False)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1].startswith("error: no evaluated split")
  assert "Traceback" not in proc.stderr

"""A Transformer encoder-decoder run (`model.encoder` and `model.decoder` = `transformer(...)`)
through main.py, and the verbs the recurrent runs have, unchanged: greedy, beam and n-best,
sampling, MBR, constraints, scoring, ensembles, checkpoint averaging, the explorer's report, the
service, attribution and the exported programs."""

import json

import numpy as np
import pytest
from helpers import check_scores_match_search, loopback_server, run_main

import seq2seq
from seq2seq import average, explorer, export, exported, translate

SOURCES = ["the cat sleeps .", "the dog does not eat apples .", "a big house .", "the man runs ."]
LAYERS = "layers=1, heads=2, inner=32"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """An 80-step run of configs/tiny.py with both sides Transformers (20 steps end in outputs
  that never finish)."""
  workdir = tmp_path_factory.mktemp("transformer") / "run"
  run_main(
    workdir,
    "--config.train.num_steps=80",
    f"--config.model.encoder=transformer({LAYERS})",
    f"--config.model.decoder=transformer({LAYERS}, alignment_head=1)",
    "--config.model.score=scaled",
  )
  return workdir


@pytest.fixture(scope="module")
def loaded(run):
  return seq2seq.load(run)


def test_its_searches_report_the_scores_and_attention_that_scoring_gives(loaded):
  sampling = {"sampling": "sample(n=3, temperature=1.5, seed=1)"}
  searches = [({"beam_size": 1}, 1), ({"beam_size": 3}, 3), (sampling, 3)]
  check_scores_match_search(loaded, SOURCES, 3, searches=searches)


def test_mbr_constraints_and_an_ensemble_of_itself(loaded, run):
  ranked = loaded.translate(SOURCES, mbr="mbr(utility=chrf)", beam_size=3, nbest=3)
  assert [len(hyps) for hyps in ranked] == [3] * len(SOURCES)
  forced = loaded.translate(SOURCES[:1], constraints=[["chat dort"]], beam_size=3)[0][0]
  assert "chat dort" in forced.text
  cfg = seq2seq.load(run).config
  cfg.decode.ensemble = str(run)  # The run with itself: the same distribution, the same output.
  pair = seq2seq.load(run, cfg).translate(SOURCES, beam_size=3)
  alone = loaded.translate(SOURCES, beam_size=3)
  assert [h[0].text for h in pair] == [h[0].text for h in alone]
  for two, one in zip(pair, alone, strict=True):
    np.testing.assert_allclose(two[0].score, one[0].score, rtol=1e-4, atol=1e-4)


def test_averaged_checkpoints_translate(run, tmp_path):
  record = average.average_checkpoints(run, tmp_path / "avg", last=2)
  assert record["steps"] == [70, 80]
  assert all(hyps for hyps in seq2seq.load(tmp_path / "avg").translate(SOURCES))


def test_the_explorer_report_and_the_service(loaded, run):
  import httpx

  pages = explorer.write_reports(run)
  assert sorted(p.parent.name for p in pages) == ["test", "valid"]
  for record in explorer.read_sentences(run / "eval" / "test"):
    names = [m["name"] for m in record["attention"]["maps"]]
    assert names == ["attention", "head 1", "head 2"]  # The reported one, then its layer's.
    assert 0.0 <= record["aer"] <= 1.0
  with loopback_server(loaded) as (_, url):
    reply = httpx.post(f"{url}/translate", json={"sentences": SOURCES[:2]}, timeout=60)
  assert reply.status_code == 200, reply.text
  assert len(reply.json()["translations"]) == 2


def test_attribution_links_every_target_word(loaded):
  target = loaded.translate(SOURCES[:2])
  links = translate.saliency_links(loaded, SOURCES[:2], [h[0].text for h in target])
  for line, hyps in zip(links, target, strict=True):
    assert line is not None
    linked = {int(pair.split("-")[1]) for pair in line.split()}
    assert linked == set(range(len(hyps[0].text.split())))
  assert json.dumps(links)


def test_the_exported_programs_translate_as_the_run_does(loaded, run, tmp_path):
  """jax.export's programs, with the caches' length a symbolic dimension, give the run's
  greedy and beam outputs."""
  export.main([f"--workdir={run}", f"--out={tmp_path / 'exported'}"])
  programs = exported.load(tmp_path / "exported")
  assert programs.translate(SOURCES) == [h[0].text for h in loaded.translate(SOURCES)]
  greedy = [h[0].text for h in loaded.translate(SOURCES, beam_size=1)]
  assert programs.translate(SOURCES, beam=False) == greedy

"""The structural, alignment and architectures studies end to end on configs/tiny.py (smoke
presets): the study's JSON per point and run, its Markdown and figures, and the cross-study table
reading the alignment study's report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import TEST_SENTENCES, is_score, run_module, tiny_without_heatmaps

from experiments import tabulate


@pytest.mark.slow
def test_structural_study_smoke(tmp_path: Path, cache_flags: list[str]) -> None:
  out = tmp_path / "structures"
  args = ["--out", str(out), "--preset", "smoke", "--variants", "soft,hard", "--seeds", "0"]
  args += ["--decode-sentences", "4", "--bootstrap-samples", "100", "--ar-trials", "100"]
  run_module("experiments.structural_study", *args, *cache_flags)

  study = json.loads((out / "study.json").read_text())
  assert study["baseline"] == "soft" and study["long_split"] == [10, 18]
  assert study["total_wall_s"] >= sum(r["wall_s"] for r in study["runs"].values())
  rows = {r["name"]: r for r in study["configurations"]}
  assert list(rows) == ["soft", "hard"]
  for name, row in rows.items():
    assert row["overrides"]["model.attention"] == name and row["runs"] == [f"{name}-seed0"]
    assert is_score(row["bleu_mean"]) and is_score(row["long_bleu_mean"])
    assert row["bleu_std"] == 0.0 and row["long_sentences"] > 0
    for key in ("aer_mean", "long_aer_mean"):
      assert 0.0 <= row[key] <= 1.0
    assert row["attention_entropy_mean"] >= 0.0 and row["long_attention_entropy_mean"] >= 0.0
    assert row["train_tokens_per_s_median"] > 0
    assert row["decode_short_sent_per_s_mean"] > 0 and row["decode_long_sent_per_s_mean"] > 0
    assert 0 < row["step_ms_short_mean"] and 0 < row["step_ms_long_mean"]
  assert rows["soft"]["p_value_vs_baseline"] is None
  assert 0.0 < rows["hard"]["p_value_vs_baseline"] <= 1.0
  assert 0.0 < rows["hard"]["p_value_long_vs_baseline"] <= 1.0
  assert study["significance"]["n_samples"] == 100
  measured = study["measured"]["hard-seed0"]
  assert measured["decode_long_sentences"] == 4 and measured["decode_short_sentences"] == 4
  workdir = Path(study["runs"]["hard-seed0"]["workdir"])
  assert json.loads((workdir / "structural_study.json").read_text()) == measured
  assert "--config.model.attention=hard" in study["runs"]["hard-seed0"]["command"]
  md = (out / "study.md").read_text()
  assert "| soft |" in md and "| hard |" in md
  assert "Command: `python -m experiments.structural_study " in md  # Every study's footer.
  assert "How trained: soft's validation" in md and set(study["curves"]) == {"soft", "hard"}
  assert (out / "learning_curves.png").stat().st_size > 0  # Every study draws its curves.
  pngs = ("study_bleu.png", "study_bleu_long.png", "study_decode_long.png", "study_step_ms.png")
  for name in pngs:
    assert (out / name).stat().st_size > 0


@pytest.mark.slow
def test_alignment_study_smoke(tmp_path: Path, cache_flags: list[str]) -> None:
  out = tmp_path / "study"
  variants = "additive,agreement,gnmt-beam"
  args = ["--out", str(out), "--preset", "smoke", "--variants", variants, "--seeds", "0"]
  args += ["--bootstrap-samples", "100", "--ar-trials", "100"]
  run_module("experiments.alignment_study", *args, *cache_flags)

  study = json.loads((out / "alignment_study.json").read_text())
  assert study["baseline"] == "additive" and study["long_split_words"] == [12, 18]
  trained = [r for r in study["runs"].values() if not r["decode_only_from"]]
  assert study["total_wall_s"] >= sum(r["wall_s"] for r in trained)
  rows = {r["name"]: r for r in study["configurations"]}
  assert list(rows) == variants.split(",")
  for row in rows.values():
    assert row["test_sentences"] == TEST_SENTENCES and 0 < row["test_long_sentences"] < 64
    for split in ("test", "test_long"):
      assert is_score(row[f"{split}_bleu_mean"])
      no_unk = row[f"{split}_bleu_no_unk_mean"]  # None where every sentence has an unknown
      assert is_score(no_unk) or (split == "test_long" and no_unk is None)  # word (smoke: long).
      assert row[f"{split}_bleu_std"] == 0.0  # One seed.
      for key in ("aer", "aer_shift_minus1", "aer_shift_plus1", "aer_threshold"):
        assert 0.0 <= row[f"{split}_{key}_mean"] <= 1.0
      assert row[f"{split}_attention_entropy_mean"] >= 0.0
      assert row[f"{split}_over_translation_mean"] >= 0
      assert row[f"{split}_under_translation_mean"] >= 0
    assert row["train_tokens_per_s_median"] > 0
  assert rows["additive"]["p_value_vs_baseline"] is None
  for name in ("agreement", "gnmt-beam"):
    assert 0.0 < rows[name]["p_value_vs_baseline"] <= 1.0
    assert 0.0 < rows[name]["p_value_long_vs_baseline"] <= 1.0
  assert rows["gnmt-beam"]["decode_only"] and not rows["agreement"]["decode_only"]
  assert "How trained: additive's validation" in (out / "alignment_study.md").read_text()
  assert (out / "learning_curves.png").stat().st_size > 0
  # The cross-study table reads this report too (its bootstrap is split by split).
  lines = {
    line["point"]: line for line in tabulate.tabulate([out / "alignment_study.json"])["lines"]
  }
  assert list(lines) == ["agreement", "gnmt-beam"] and lines["agreement"]["baseline"] == "additive"
  test = study["significance"]["per_split"]["test"]["agreement"]
  assert (
    lines["agreement"]["p_value"] == test["p_value"] == rows["agreement"]["p_value_vs_baseline"]
  )
  assert lines["agreement"]["bleu_mean"] == rows["agreement"]["bleu_mean"]

  runs = study["runs"]
  assert runs["agreement-seed0"]["config"]["model"]["name"] == "agreement"
  assert runs["agreement-seed0"]["config"]["data"]["long_test_min_words"] == 12
  gnmt, additive = runs["gnmt-beam-seed0"], runs["additive-seed0"]
  assert gnmt["decode_only_from"] == "additive-seed0"
  assert gnmt["config"]["decode"]["coverage_penalty"] == 0.2
  assert gnmt["results"]["test"]["step"] == additive["results"]["test"]["step"]
  assert set(gnmt["results"]) == {"valid", "test", "test_long"}
  md = (out / "alignment_study.md").read_text()
  assert all(f"| {name} |" in md for name in rows) and "12-18 source words" in md
  assert "Command: `python -m experiments.alignment_study " in md and "minutes of wall clock" in md
  for suffix in ("", "_long", "_aer"):
    assert (out / f"alignment_study{suffix}.png").stat().st_size > 0


@pytest.mark.slow
def test_architectures_study_smoke(tmp_path: Path, cache_flags: list[str]) -> None:
  """Attention against attribution on RNNsearch and both Transformers: every row's attribution
  figures on the first 16 test pairs; the Transformers' per-layer and best-on-valid head AER,
  whose layer or head that the run reports gives the run's own test AER."""
  from experiments.lib.pages import architectures_study as page

  out = tmp_path / "architectures"
  points = "rnnsearch,transformer,transformer-supervised"
  args = ["--out", str(out), "--preset", "smoke", "--points", points, "--seeds", "0"]
  args += ["--attribution-sentences", "16", "--bootstrap-samples", "100", "--ar-trials", "100"]
  run_module("experiments.architectures_study", *args, *cache_flags)

  study = json.loads((out / "architectures_study.json").read_text())
  assert study["baseline"] == "rnnsearch" and study["attribution_sentences"] == 16
  rows = {r["name"]: r for r in study["configurations"]}
  assert list(rows) == points.split(",")
  for name, row in rows.items():
    assert is_score(row["bleu_mean"]) and row["bleu_std"] == 0.0 and row["attribution_pairs"] == 16
    for key in ("attribution_attention_aer", "attribution_saliency_aer"):
      assert 0.0 <= row[f"{key}_mean"] <= 1.0 and row[f"{key}_std"] == 0.0
    assert -1.0 <= row["attribution_spearman_mean"] <= 1.0
    measured = study["measured"][f"{name}-seed0"]
    assert measured["attribution"]["spearman_words"] <= measured["attribution"]["target_words"]
  assert rows["rnnsearch"]["p_value_vs_baseline"] is None and rows["rnnsearch"]["layers"] is None
  for name in ("transformer", "transformer-supervised"):
    row, heads = rows[name], study["measured"][f"{name}-seed0"]["heads"]
    assert 0.0 < row["p_value_vs_baseline"] <= 1.0 and row["layers"] == heads["layers"] == 2
    assert set(heads["valid"]) == set(heads["test"]) and len(heads["test"]) == 2 * (4 + 1)
    assert heads["valid"][heads["best_on_valid"]] == min(heads["valid"].values())  # Not test.
    assert row["best_heads"] == [heads["best_on_valid"]]
    assert row["head_aer_best_mean"] == heads["test"][heads["best_on_valid"]]
    assert row["layer1_aer_mean"] == heads["test"]["L1mean"]
  # The reported attention: the top layer's mean (averaged in another program: a near tie may
  # round the other way), or the supervised head (layer 1, head 1), the same numbers.
  top = rows["transformer"]["layer2_aer_mean"]
  assert rows["transformer"]["aer_mean"] == pytest.approx(top, abs=5e-3)
  supervised = study["measured"]["transformer-supervised-seed0"]["heads"]["test"]["L1H1"]
  assert rows["transformer-supervised"]["aer_mean"] == pytest.approx(supervised)
  run = study["runs"]["transformer-supervised-seed0"]["config"]
  assert run["train"]["loss_terms"] == "supervision(weight=1.0)"
  assert "alignment_layer=1" in run["model"]["decoder"]
  md = (out / "architectures_study.md").read_text()
  assert all(f"| {name} |" in md for name in rows) and "## Transformer heads: test AER" in md
  assert "\n".join(page.tables(study)) in md  # The results page draws the same tables.
  assert len(page.conclusion(out)) == 2
  assert "Command: `python -m experiments.architectures_study " in md
  for name in ("architectures_study.png", "architectures_study_aer.png", "learning_curves.png"):
    assert (out / name).stat().st_size > 0


@pytest.mark.slow
def test_decoding_study_decodes_the_shortlist_rows_alone_and_keeps_the_others(trained, tmp_path):
  """`--only shortlists` decodes seed 0 over the full vocabulary and both shortlist scopes, each
  row with its wall minutes and warm sentences per second, and keeps the rows (an ensemble's) it
  did not decode."""
  out = tmp_path / "decoding"
  out.mkdir()
  figures = {"bleu": 1.0, "chrf": 2.0, "bleu_no_unk": 3.0, "step": 9, "oov_recall": 0.5}
  ensemble = {"command": "earlier", "valid": figures, "test": figures}
  earlier = {"date": "then", "cpu": {"cpu_model": "X"}, "load_average": {"start": 1, "end": 2}}
  (out / "decoding.json").write_text(json.dumps({**earlier, "rows": {"ensemble": ensemble}}))
  config = tiny_without_heatmaps(tmp_path)  # The run's configs/tiny.py, drawing no heatmaps.
  args = ["--runs", str(trained), "--config", config, "--out", str(out)]
  run_module("experiments.decoding_study", *args, "--only", "shortlists", "--speed-rounds", "1")
  record = json.loads((out / "decoding.json").read_text())
  names = ["seed 0, full vocabulary", "seed 0, shortlist", "seed 0, shortlist per sentence"]
  assert list(record["rows"]) == ["ensemble", *names]
  assert record["rows"]["ensemble"] == ensemble and record["date"] == "then"  # Kept as made.
  assert record["shortlists"]["runs"] == [str(trained)]
  own = json.loads((trained / "eval" / "test" / "results.json").read_text())
  for name in names:
    row = record["rows"][name]
    assert row["eval_minutes"] > 0 and row["test"]["step"] == own["step"]
    assert row["test_sentences_per_s"] > 0
  # The run decoded as an ensemble of itself over the full vocabulary is the run itself.
  assert record["rows"][names[0]]["test"]["bleu"] == pytest.approx(own["bleu"])
  assert "decode.shortlist_scope=sentence" in record["rows"][names[2]]["command"]
  assert "decoded later (`--only shortlists`)" in (out / "decoding.md").read_text()


@pytest.mark.slow
def test_mbr_study_rows_their_settings_and_a_resumed_rerun(trained, tmp_path):
  """Beam 5, MBR over the 3-best and over 4 samples, greedy, and the 3-best reranked on the tiny
  run (the run standing in for its own reverse model): each decoding row's figures are its own
  evaluation's, with a warm decoding speed; the rerank rows' are the chosen texts' against the
  references; every row but beam 5 carries a bootstrap and AR against it; a rerun decodes nothing
  again and keeps the timings measured first."""
  from seq2seq.data import metrics

  out = tmp_path / "mbr"
  config = tiny_without_heatmaps(tmp_path)  # The run's configs/tiny.py, drawing no heatmaps.
  args = ["--run", str(trained), "--config", config, "--out", str(out)]
  args += ["--samples", "4", "--nbest", "3", "--reverse", str(trained), "--speed-rounds", "1"]
  run_module("experiments.mbr_study", *args)
  record = json.loads((out / "mbr.json").read_text())
  names = ["beam 5", "MBR chrf, beam 3 n-best", "MBR chrf, 4 samples", "greedy"]
  reranked = ["rerank 3-best: score, length", "rerank 3-best: + reverse model"]
  assert list(record["rows"]) == [*names, *reranked]
  for i, name in enumerate(names):
    row = record["rows"][name]
    own = json.loads((out / f"row{i}" / "eval" / "test" / "results.json").read_text())
    assert row["test"]["bleu"] == pytest.approx(own["bleu"]) and row["test_sentences_per_s"] > 0
  for name in [*names, *reranked]:
    assert (name == "beam 5") == ("test_vs_beam5" not in record["rows"][name])
    assert 0.0 < record["rows"][name].get("test_vs_beam5", {"ar_p_value": 1.0})["ar_p_value"] <= 1
  assert "decode.sampling=sample(n=4)" in record["rows"][names[2]]["command"]
  assert "decode.mbr=mbr(utility=chrf)" in record["rows"][names[1]]["command"]
  refs = (out / "rerank" / "test.ref").read_text().splitlines()
  for name, tag in zip(reranked, ("plain", "reverse"), strict=True):
    row = record["rows"][name]
    chosen = (out / "rerank" / f"test.{tag}.txt").read_text().splitlines()
    assert row["test"]["bleu"] == pytest.approx(metrics.bleu(chosen, refs)[0])
    assert ("reverse" in row["weights"]) == (tag == "reverse") and row["eval_minutes"] > 0
  first = [record["rows"][n]["eval_minutes"] for n in (names[2], reranked[1])]
  run_module("experiments.mbr_study", *args)
  again = json.loads((out / "mbr.json").read_text())
  assert [again["rows"][n]["eval_minutes"] for n in (names[2], reranked[1])] == first
  md = (out / "mbr.md").read_text()
  assert "| MBR chrf, 4 samples |" in md and "| rerank 3-best: + reverse model |" in md


@pytest.mark.slow
def test_translate_timing_compiles_once_and_then_loads_every_program(trained, tmp_path):
  """Cold, warm and warm on other sentences, each a fresh main.py process on one cache folder:
  the first compiles, the second compiles nothing and writes the same translations."""
  from experiments.lib.decoding import pairs

  sources = [ex.src for ex in pairs(trained, "test")]
  (tmp_path / "a.txt").write_text("".join(s + "\n" for s in sources[:16]))
  (tmp_path / "b.txt").write_text("".join(s + "\n" for s in sources[16:40]))
  args = ["--run", str(trained), "--config", "configs/tiny.py", "--out", str(tmp_path / "out")]
  args += ["--input", str(tmp_path / "a.txt"), "--other", str(tmp_path / "b.txt")]
  run_module("experiments.translate_timing", *args)
  record = json.loads((tmp_path / "out" / "translate_timing.json").read_text())
  cold, warm, other = record["rows"]
  assert cold["programs_added"] > 0 and warm["programs_added"] == 0
  assert [r["sentences"] for r in record["rows"]] == [16, 16, 24]
  assert record["same_output_cold_and_warm"] and record["decoding_only_sentences_per_s"] > 0
  assert "| warm, other input | 24 |" in (tmp_path / "out" / "translate_timing.md").read_text()


@pytest.mark.slow
def test_translate_sorted_bench_times_both_orders_and_each_input_in_a_fresh_process(
  trained, tmp_path
):
  """Small sizes: beam 3 over 24 test sentences in file order, longest first and under a
  budget, none translated differently (configs/tiny.py pads every source alike); two inputs of
  short lines, each translated whole by its own main.py process."""
  from experiments.lib.decoding import pairs
  from experiments.lib.pages import translate_sorted_bench as translate_sorted_page

  sources = [ex.src for ex in pairs(trained, "test")]
  (tmp_path / "in.txt").write_text("".join(s + "\n" for s in sources[:24]))
  args = ["--workdir", str(trained), "--config", "configs/tiny.py", "--out", str(tmp_path / "out")]
  args += ["--input", str(tmp_path / "in.txt"), "--beam", "3", "--max-tokens", "48"]
  args += ["--short", str(tmp_path / "in.txt"), "--short-words", "8", "--sizes", "30,70"]
  run_module("experiments.translate_sorted_bench", *args)
  record = json.loads((tmp_path / "out" / "translate_sorted_bench.json").read_text())
  assert list(record["speed"]) == ["file", "length", "length, max_tokens=48"]
  assert record["speed"]["file"]["speedup_over_file_order"] == 1.0
  assert all(r["sentences_per_s"] > 0 for r in record["speed"].values())
  assert record["sentences"] == 24 and record["differences"]["count"] == 0
  assert [m["lines"] for m in record["memory"]] == [30, 70]
  assert all(m["lines_written"] == m["lines"] and m["peak_rss_mib"] > 0 for m in record["memory"])
  assert record["command"].startswith("python -m experiments.translate_sorted_bench --workdir")
  assert record["cpu"] and record["load_average"]["start"]
  # This machine's folders are named by their flags, as the results pages need.
  assert "--workdir RUN" in record["command"] and record["run"] == "RUN"
  assert str(trained) not in json.dumps(record)
  page = translate_sorted_page.page(record)
  assert "| length, max_tokens=48 |" in page and "| 70 |" in page


def test_the_mbr_page_leaves_out_a_timing_no_row_has():
  """A study resumed after its rows were evaluated has no eval minutes: no column of dashes."""
  from experiments import mbr_study

  figures = {"bleu": 50.0, "chrf": 70.0}
  row = {"valid": figures, "test": figures, "command": "c", "test_sentences_per_s": 9.0}
  record = {
    "date": "today",
    "cpu": {"cpu_model": "cpu"},
    "load_average": {"start": [0.0], "end": [1.0]},
    "rows": {"beam 5": row, "greedy": {**row, "test_vs_beam5": {"p_value": 0.5}}},
  }
  page = mbr_study.markdown(record)
  assert "eval minutes" not in page.lower() and "| decoding sentences/s |" in page
  assert "| greedy | 50.00 | 70.00 | 50.00 | 70.00 | 0.500 | 9.00 |" in page
  record["rows"]["greedy"]["eval_minutes"] = 2.0
  page = mbr_study.markdown(record)
  assert "| eval minutes | decoding sentences/s |" in page and "| 0.500 | 2.00 | 9.00 |" in page
  # AR's p beside the bootstrap's where the record has it.
  record["rows"]["greedy"]["test_vs_beam5"] |= {"ar_p_value": 0.25, "ar_trials": 10_000}
  page = mbr_study.markdown(record)
  assert "| p vs beam 5 | AR p | eval minutes |" in page and "| 0.500 | 0.2500 | 2.00 |" in page
  assert "AR p: paired approximate randomisation of the same (10,000 trials" in page

"""experiments/realtext.py (smoke preset on a small local corpus) and configs/multi30k.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import ROOT, run_module

from configs import multi30k
from seq2seq import train
from seq2seq.training import metric_writer

SHARED_MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"

NOUNS = [("man", "homme"), ("dog", "chien"), ("child", "enfant"), ("cat", "chat")]
VERBS = [("sees", "voit"), ("follows", "suit"), ("likes", "aime")]


def _write_corpus(directory: Path) -> None:
  """Caption-like English/French pairs with punctuation and elisions, Multi30k file names."""
  pairs = []
  for a, fa in NOUNS:
    for v, fv in VERBS:
      for b, fb in NOUNS:
        en = f"The {a} {v} the {b}, and it's happy."
        fr = (
          f"L'{fa} {fv} le {fb}, et il est content."
          if fa[0] in "ae"
          else (
            f"Le {fa} {fv} l'{fb}, et il est content."
            if fb[0] in "ae"
            else f"Le {fa} {fv} le {fb}, et il est content."
          )
        )
        pairs.append((en, fr))
  directory.mkdir(parents=True)
  for prefix, rows in (("train", pairs), ("val", pairs[:12]), ("test_2016_flickr", pairs[-10:])):
    (directory / f"{prefix}.en").write_text("".join(e + "\n" for e, _ in rows), encoding="utf-8")
    (directory / f"{prefix}.fr").write_text("".join(f + "\n" for _, f in rows), encoding="utf-8")


def test_language_pair_argument():
  config = multi30k.get_config("fr-de")
  assert (config.data.local.src_lang, config.data.local.tgt_lang) == ("fr", "de")
  assert config.data.pretokenizer == "moses" and config.train.max_minutes == 30.0
  with pytest.raises(ValueError, match="language pair 'en-en'"):
    multi30k.get_config("en-en")


@pytest.mark.slow
def test_realtext_smoke(tmp_path):
  data_dir = tmp_path / "corpus"
  _write_corpus(data_dir)
  out, work = tmp_path / "results", tmp_path / "work"
  args = [
    "--workdir",
    str(work),
    "--out",
    str(out),
    "--preset",
    "smoke",
    "--data-dir",
    str(data_dir),
  ]
  args += ["--explore-minutes", "0.05", "--minutes", "0.05", "--only", "dropout-0.5"]
  run_module("experiments.realtext", *args)

  result = json.loads((out / "multi30k.json").read_text())
  for key in ("test_bleu", "test_chrf", "train_minutes", "tokens_per_s"):
    assert math.isfinite(result[key]) and result[key] >= 0, key
  assert 0.0 <= result["test_bleu"] <= 100.0
  assert (
    result["sacrebleu_signature"].startswith("nrefs:1")
    and "tok:13a" in result["sacrebleu_signature"]
  )
  assert 0.05 <= result["train_minutes"] < 1.0 and result["steps"] >= 1
  assert list(result["exploration"]) == ["dropout-0.5"]
  assert result["exploration"]["dropout-0.5"]["overrides"] == {"model.dropout": 0.5}
  assert all(e["curve"] for e in result["exploration"].values())
  assert len(result["decode_grid"]) == 4  # SMOKE_DECODE_GRID, with and without UNK replacement.
  best = max(g["valid_bleu"] for g in result["decode_grid"])
  assert result["chosen_decode"]["valid_bleu"] == best
  test = json.loads((work / "final" / "eval" / "test" / "results.json").read_text())
  assert test["bleu"] == result["test_bleu"] and test["num_sentences"] == 10
  assert test["beam_size"] == result["chosen_decode"]["beam_size"]
  # The hypotheses are detokenised text: no space before a comma, elisions glued.
  hyps = (work / "final" / "eval" / "test" / "hypotheses.txt").read_text(encoding="utf-8")
  assert " ," not in hyps and "L' " not in hyps and "l' " not in hyps
  md = (out / "multi30k.md").read_text()
  assert "| dropout-0.5 |" in md and "41.8" in md
  assert (out / "multi30k_bleu_vs_minutes.png").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_MULTI30K.is_dir(), reason="../shared/data/multi30k is absent")
def test_multi30k_config_builds_and_trains_one_step(tmp_path):
  config = multi30k.get_config()
  config.data.local.dir = str(SHARED_MULTI30K)
  config.train.num_steps = 1
  config.train.max_minutes = 0.0
  config.train.valid_bleu = False
  config.train.final_eval = False
  config.train.eval_every = 1
  train.train_and_evaluate(config, tmp_path)
  rows = metric_writer.read_metrics(tmp_path)
  assert [r["step"] for r in rows if r["split"] == "train"] == [1]
  assert all(math.isfinite(r["loss"]) for r in rows)
  vocab = json.loads((tmp_path / "vocab" / "tgt" / "tokenizer.json").read_text())
  assert (vocab["pretokenizer"], vocab["lang"]) == ("moses", "fr")


def test_realtext_reports_into_its_study_folder_by_default():
  from experiments import realtext
  from experiments.lib import records

  out = realtext.parse_args(["--workdir", "runs/realtext"]).out
  assert out == Path("experiments/results/multi30k_realtext")
  assert records.load_definition(records.REPO_ROOT / out)["report"] == "multi30k.json"


def test_best30_rows_read_a_tries_curve_and_speed(tmp_path):
  from experiments import best30

  rows = [
    {"step": 300, "split": "train", "tokens_per_s": 900.0, "elapsed_s": 100.0, "loss": 3.0},
    {"step": 300, "split": "valid", "bleu": 30.0, "loss": 2.0, "elapsed_s": 110.0},
    {"step": 600, "split": "train", "tokens_per_s": 2000.0, "elapsed_s": 200.0, "loss": 2.0},
    {
      "step": 600,
      "split": "valid",
      "bleu": 40.0,
      "loss": 1.5,
      "elapsed_s": 210.0,
      "unk_rate": 0.02,
    },
    {"step": 700, "split": "train", "tokens_per_s": 1800.0, "elapsed_s": 240.0, "loss": 1.9},
  ]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  row = best30.record_try("batch-96", tmp_path, {"command": "python main.py ..."}, [1.0, 1.0, 1.0])
  assert (row["best_valid_bleu"], row["best_at_update"], row["updates"]) == (40.0, 600, 700)
  assert row["best_at_minute"] == 3.5 and row["median_tokens_per_s"] == 1900.0  # First window out.
  chosen = [f"`{k}={v}`" for k, v in best30.CHOSEN.items()]  # The levers chosen, then its own.
  overrides = ", ".join([*chosen, "`data.batch_size=96`"])
  assert f"| batch-96 | {overrides} | 40.00 | 3.5 | 600 | 700 | 1900 | 2.00% |" in best30.markdown(
    {"batch-96": row}
  )


def test_best30_final_records_the_one_commands_test_figures(tmp_path, monkeypatch):
  """`best30 --final` trains the final config once (here a stand-in for main.py that writes what
  it would) and records test BLEU and chrF, as written and lowercased, and the command's minutes."""
  from experiments import best30

  def fake_train_run(run):
    workdir = run.workdir
    for split, bleu in (("valid", 50.0), ("test", 58.0)):
      (workdir / "eval" / split).mkdir(parents=True)
      results = {"bleu": bleu, "chrf": 73.0, "bleu_lowercase": bleu + 1, "chrf_lowercase": 74.0}
      (workdir / "eval" / split / "results.json").write_text(json.dumps(results))
    line = {"step": 2500, "split": "train", "tokens_per_s": 1.0, "elapsed_s": 1.0, "loss": 1.0}
    (workdir / "metrics.jsonl").write_text(json.dumps(line) + "\n")
    return {"command": run.command(), "process_wall_s": 1740.0}

  monkeypatch.setattr(best30, "train_in_process", fake_train_run)
  record_path = tmp_path / "best.json"
  argv = ["--final", "--workdir", str(tmp_path), "--record", str(record_path)]
  record = best30.main([*argv, "--set", "data.local.dir=/nowhere"])
  assert json.loads(record_path.read_text()) == record
  assert (record["test_bleu"], record["test_bleu_lowercase"], record["test_chrf_lowercase"]) == (
    58.0,
    59.0,
    74.0,
  )
  assert record["valid_bleu"] == 50.0 and record["minutes"] == 29.0 and record["updates"] == 2500
  assert (
    "configs/multi30k_best.py" in record["command"]
    and "data.local.dir=/nowhere" in record["command"]
  )

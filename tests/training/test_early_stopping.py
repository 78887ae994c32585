"""Early stopping: the count against sequences worked out here, its one-line refusals, and runs
of configs/tiny.py that stop where the rule says, resume to the same stop, and do not train on
when run again."""

import json
import re

import pytest
from helpers import metric_rows, run_main

from configs import tiny
from seq2seq import settings
from seq2seq.training import early_stopping


def count(spec, values, metric=None):
  """The steps (1, 2, ...) at which `values` run out the patience of `spec`."""
  rule = early_stopping.parse(spec)
  p = early_stopping.Patience(rule)
  return [i for i, v in enumerate(values, 1) if p.update(i, {metric or rule.metric: v})]


def test_patience_counts_evaluations_without_a_large_enough_gain():
  # BLEU: 10, 12 (gain), 12.05 (a gain of 0.05 <= 0.1: none), 12.1 (0.1 over 12: none) -> out
  # at the fourth; 20 is a gain again, which resets the count.
  assert count("early(metric=bleu, patience=2, min_delta=0.1)", [10, 12, 12.05, 12.1, 20]) == [4]
  # A gain resets the count: 10, 9, 11 (gain), 10, 10 -> runs out at the fifth.
  assert count("early(metric=bleu, patience=2)", [10, 9, 11, 10, 10]) == [5]
  # Loss is better lower: 3.0, 2.5 (gain), 2.6, 2.5 (equal: no gain) -> out at the fourth.
  assert count("early(metric=loss, patience=2)", [3.0, 2.5, 2.6, 2.5]) == [4]
  assert count("early(metric=loss, patience=1)", [3.0, 3.5]) == [2]
  assert count("early(metric=chrf, patience=3)", [40, 41, 42, 43]) == []


def test_bad_settings_fail_in_one_line():
  for spec, message in [
    ("early(patience=0)", "patience must be at least 1"),
    ("early(metric=ter)", "metric must be one of bleu, chrf, loss"),
    ("early(min_delta=-1)", "min_delta must be >= 0"),
    ("stop(patience=3)", "use '' (off) or early("),
  ]:
    with pytest.raises(ValueError, match=re.escape(message)):
      early_stopping.parse(spec)
  config = tiny.get_config()
  config.train.early_stopping, config.train.valid_bleu = "early(metric=chrf)", False
  with pytest.raises(ValueError, match="reads validation chrf, which train.valid_bleu=false"):
    settings.validate(config)
  config.train.early_stopping = "early(metric=loss)"
  settings.validate(config)


STOP = "--config.train.early_stopping=early(metric=loss, patience=2, min_delta=1000)"
EVERY = ["--config.train.eval_every=4", "--config.train.checkpoint_every=4"]
EVERY.append("--config.decode.num_heatmaps=0")  # Unread here; some 2 s of each split evaluated.


def steps_of(workdir, split):
  return [r["step"] for r in metric_rows(workdir) if r["split"] == split]


def test_a_run_stops_where_the_rule_says_and_a_resumed_run_stops_there_too(tmp_path):
  """No validation loss improves by 1000: the first evaluation (step 4) is the best, the second
  and third wait, so training ends after step 12 of 40, saying why in the console, metrics.jsonl
  and the results. The final evaluation reads the checkpoint of step 4, the best by the metric
  that stopped training, with validation BLEU on (which would choose another) and off (where
  the latest would be read), and `--mode=eval` reads it too. A run first trained to step 8 and
  then resumed stops at 12 as well, and a rerun of a stopped run trains no further."""
  whole = tmp_path / "whole"
  proc = run_main(whole, "--config.train.num_steps=40", *EVERY, STOP)
  assert steps_of(whole, "valid") == [4, 8, 12]
  [stop] = [r for r in metric_rows(whole) if r["split"] == "early_stopping"]
  assert stop["step"] == 12 and stop["best_step"] == 4 and stop["metric"] == "loss"
  assert "stopped early at step 12: validation loss has not improved" in proc.stdout + proc.stderr
  results = json.loads((whole / "eval" / "test" / "results.json").read_text())
  assert results["stopped_early"]["step"] == 12
  assert results["step"] == 4 and results["checkpoint"] == {"step": 4, "chosen_by": "loss"}

  parts, quiet = tmp_path / "parts", ["--config.train.final_eval=false"]
  quiet.append("--config.train.valid_bleu=false")
  run_main(parts, "--config.train.num_steps=8", *EVERY, STOP, *quiet)
  assert steps_of(parts, "valid") == [4, 8] and not steps_of(parts, "early_stopping")
  run_main(parts, "--config.train.num_steps=40", *EVERY, STOP, *quiet)
  assert steps_of(parts, "valid") == [4, 8, 12] and steps_of(parts, "early_stopping") == [12]
  train_rows = steps_of(parts, "train")
  again = run_main(parts, "--config.train.num_steps=40", *EVERY, STOP, *quiet)
  assert steps_of(parts, "train") == train_rows and steps_of(parts, "valid") == [4, 8, 12]
  assert "stopped early at step 12" in again.stdout + again.stderr
  run_main(parts, "--config.train.num_steps=40", *EVERY, STOP, *quiet, "--mode=eval")
  results = json.loads((parts / "eval" / "test" / "results.json").read_text())
  assert results["step"] == 4 and results["checkpoint"] == {"step": 4, "chosen_by": "loss"}

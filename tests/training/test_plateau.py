"""The plateau schedule (`train.decay="plateau(...)"`): its factor against sequences worked out
here, its refusals, and a run of configs/tiny.py whose logged rate halves where the rule says
and which resumes to the uninterrupted run's parameters bit for bit."""

import numpy as np
import pytest
from helpers import final_params, metric_rows, run_main

from configs import tiny
from seq2seq import settings
from seq2seq.training import optimisers


def scales(spec, values, metric):
  tracker = optimisers.PlateauScale(optimisers.decay_spec(spec).settings)
  return [tracker.update({metric: v}) for v in values]


def test_the_factor_falls_after_patience_evaluations_without_a_gain():
  # Loss, patience 2: 3, 2 (gain), 2.5 and 2.6 (none: x0.5, the count starts again), 2.7 and
  # 2.8 (x0.5 again), 1.0 (a gain: the factor stays).
  got = scales("plateau(factor=0.5, patience=2)", [3, 2, 2.5, 2.6, 2.7, 2.8, 1.0], "loss")
  assert got == [1, 1, 1, 0.5, 0.5, 0.25, 0.25]
  # BLEU is better higher; a gain of 0.5 is no gain with min_delta 1; a cooldown of one
  # evaluation waits before counting again.
  spec = "plateau(metric=bleu, factor=0.1, patience=1, min_delta=1, cooldown=1)"
  got = scales(spec, [10, 10.5, 12, 11, 11, 11], "bleu")
  np.testing.assert_allclose(got, [1, 0.1, 0.1, 0.01, 0.01, 0.001], rtol=1e-6)


def test_bad_plateau_settings_fail_in_one_line():
  for spec, message in [
    ("plateau(factor=1.5)", "plateau factor must be in (0, 1)"),
    ("plateau(patience=0)", "plateau needs patience >= 1"),
    ("plateau(metric=ter)", "plateau metric must be one of loss, bleu, chrf"),
  ]:
    config = tiny.get_config()
    config.train.decay = spec
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
      settings.validate(config)
  config = tiny.get_config()
  config.train.decay, config.train.valid_bleu = "plateau(metric=bleu)", False
  with pytest.raises(ValueError, match="reads validation bleu, which train.valid_bleu=false"):
    settings.validate(config)


PLATEAU = "--config.train.decay=plateau(metric=loss, factor=0.5, patience=1, min_delta=1000)"
EVERY = [
  "--config.train.eval_every=4",
  "--config.train.checkpoint_every=4",
  "--config.train.log_every=2",
  "--config.train.final_eval=false",
]


def rates(workdir):
  return {r["step"]: r["learning_rate"] for r in metric_rows(workdir) if r["split"] == "train"}


def test_the_rate_halves_after_each_idle_evaluation_and_resumes_exactly(tmp_path):
  """No validation loss gains 1000: the evaluation at step 4 sets the best, the ones at 8 and 12
  each halve the rate. A run trained to step 8 and then resumed logs the same rates and ends
  with the same parameters, bit for bit."""
  whole = tmp_path / "whole"
  run_main(whole, "--config.train.num_steps=16", *EVERY, PLATEAU)
  got = rates(whole)
  base = got[2]
  assert [got[s] / base for s in (4, 6, 8, 10, 12, 14, 16)] == [1, 1, 1, 0.5, 0.5, 0.25, 0.25]
  parts = tmp_path / "parts"
  run_main(parts, "--config.train.num_steps=8", *EVERY, PLATEAU)
  run_main(parts, "--config.train.num_steps=16", *EVERY, PLATEAU)
  assert rates(parts) == got
  (step_a, a), (step_b, b) = final_params(whole), final_params(parts)
  assert step_a == step_b == 16 and a.keys() == b.keys()
  for name in a:
    np.testing.assert_array_equal(a[name], b[name], err_msg=name)

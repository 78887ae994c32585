"""Smoke test of experiments/benchmark.py: the tiny preset end to end, in a process of its own
(it forces two CPU devices, which XLA reads when its backend starts), with XLA's backend
optimisations turned down: the test checks the keys and their consistency, not speed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import run_module

from experiments import benchmark


def _positive_finite(value: object) -> bool:
  return isinstance(value, int | float) and math.isfinite(value) and value > 0


@pytest.mark.slow
def test_tiny_preset_writes_complete_json(tmp_path: Path) -> None:
  out = tmp_path / "bench.json"
  args = ["--out", str(out), "--preset", "tiny", "--repeats", "2", "--steps", "2", "--peer"]
  args += ["--set", "model.scan_unroll=2"]
  args += ["--breakdown", "--devices", "2"]  # Data parallel over two forced CPU devices.
  args += ["--shortlist-size", "40"]
  run_module("experiments.benchmark", *args, own_process=True, timeout=300)  # Devices.

  res = json.loads(out.read_text())
  for key in (
    "preset",
    "train_step_s",
    "train_tokens_per_s",
    "compile_s",
    "peak_rss_mb",
    "matmul_gflops",
    "flops_per_token",
    "train_mfu",
    "config",
    "versions",
    "device",
    "date",
  ):
    assert key in res, key
  assert res["preset"] == "tiny"
  assert res["device"]["count"] == 2 and res["batch"]["per_device"] == 8  # Batch 16 split.
  parts = res["breakdown_ms"]
  assert all(
    _positive_finite(parts[k]) for k in ("loss_grad_ms", "encoder_ms", "readout_and_loss_ms")
  )
  assert res["sets"] == ["model.scan_unroll=2"] and res["config"]["model"]["scan_unroll"] == 2
  for key in ("train_step_s", "train_tokens_per_s"):
    stats = res[key]
    assert all(_positive_finite(stats[s]) for s in ("median", "min", "max")), stats
    assert stats["min"] <= stats["median"] <= stats["max"]
  for key in (
    "compile_s",
    "peak_rss_mb",
    "flops_per_token",
    "train_mfu",
    "greedy_sentences_per_s",
    "beam10_sentences_per_s",
  ):
    assert _positive_finite(res[key]), (key, res[key])
  assert all(_positive_finite(res["matmul_gflops"][d]) for d in ("float32", "bfloat16"))
  decode = res["decode"]
  assert decode["shortlist_size"] == 40
  assert _positive_finite(decode["beam10_shortlist_cost_per_sentence_vs_greedy"])
  assert _positive_finite(decode["greedy_shortlist_sentences_per_s"]["median"])
  assert math.isfinite(res["loss_last"])

  # The analytic FLOP count agrees with the dot_generals of the traced forward and train step.
  assert math.isclose(
    res["traced_flops_per_token"]["forward"], res["flops_per_token"], rel_tol=1e-6
  )
  assert math.isclose(
    res["traced_flops_per_token"]["train"], 3 * res["flops_per_token"], rel_tol=1e-6
  )

  model = res["config"]["model"]
  assert (model["emb_dim"], model["dec_hidden"]) == (16, 32)  # configs/tiny.py sizes.
  assert {"python", "jax", "jaxlib", "flax", "optax", "numpy"} <= set(res["versions"])
  assert "skipped" in res["peer"]  # The peer has no tiny size: a note, no figures.


def test_the_peer_gets_our_deep_output_for_a_like_for_like_run(tmp_path):
  """A stand-in peer script that reports its arguments: the comparison hands it --maxout."""
  import sys

  script = tmp_path / "peer.py"
  script.write_text("import json, sys\nprint(json.dumps({'argv': sys.argv[1:]}))\n")
  like = benchmark._run_peer_mode(Path(sys.executable), script, "train", "paper", 1, 1, 60, 500)
  assert like["argv"][like["argv"].index("--maxout") + 1] == "500"
  assert like["argv"][:3] == ["train", "--size", "paper"]
  plain = benchmark._run_peer_mode(Path(sys.executable), script, "decode", "benchmark", 1, 1, 60)
  assert plain["argv"][plain["argv"].index("--maxout") + 1] == "0"
  args = benchmark.parse_args(["--out", "x.json", "--peer"])
  assert args.peer_output == "like"


@pytest.mark.parametrize("intra", ["dot", "general", "additive", "none"])
def test_the_flop_count_includes_intra_attention(intra: str) -> None:
  """The analytic count against the traced forward pass with the decoder attending to its past."""
  from experiments.lib.configs import apply_overrides

  addons = "none" if intra == "none" else f"intra(score={intra})"
  cfg = apply_overrides(benchmark.make_config("tiny"), {"model.addons": addons})
  length = cfg.data.max_len
  counted = benchmark.forward_flops_per_token(cfg, length, length)
  assert (counted["intra_attention"] > 0) == (intra != "none")
  traced = benchmark.traced_flops_per_token(cfg)["forward"]
  assert math.isclose(traced, counted["total"], rel_tol=1e-6), (traced, counted)


def test_the_scaling_benchmark_predicts_cost_from_the_step_s_matmul_flops():
  """The expected curve's FLOPs: linear in the batch, linear plus quadratic in the sentence
  length (recurrences and attention), linear in the vocabulary with the full softmax and fixed
  by the candidates with the sampled one."""
  from experiments import scaling_bench as sb

  flops = lambda axis, value, softmax="full": sb.step_flops(
    sb.point_config("bench", "float32", axis, value, softmax)
  )
  assert flops("batch", 128) == pytest.approx(2 * flops("batch", 64))
  f10, f20, f30, f40 = (flops("length", n) for n in (10, 20, 30, 40))
  second = f30 - 2 * f20 + f10  # A quadratic part (the attention), no cubic one.
  assert second > 0 and f40 - 2 * f30 + f20 == pytest.approx(second)
  full = [flops("vocab", v) for v in (8_000, 16_000, 32_000)]
  assert full[2] - full[1] == pytest.approx(2 * (full[1] - full[0]))
  sampled = [flops("vocab", v, sb.SAMPLED) for v in (8_000, 100_000)]
  assert sampled[0] == pytest.approx(sampled[1]) and sampled[0] < full[0]


@pytest.mark.slow
def test_the_scaling_benchmark_measures_each_axis_and_draws_it(tmp_path: Path) -> None:
  from experiments import scaling_bench as sb

  args = ["--out", str(tmp_path), "--preset", "tiny", "--axes", "length,vocab"]
  args += ["--values", "length=5,10", "--values", "vocab=50,100", "--repeats", "1", "--steps", "1"]
  result = sb.main(args)
  assert list(result["curves"]) == ["length", "vocab", f"vocab ({sb.SAMPLED})"]
  for curve in result["curves"].values():
    first, second = curve["points"]
    assert first["expected_tokens_per_s"] == pytest.approx(first["tokens_per_s"])
    assert second["proportional_mb"] == pytest.approx(2 * first["planned_mb"])
    assert all(p["tokens_per_s"] > 0 and p["planned_mb"] > 0 for p in curve["points"])
  assert result["cpu"]["vector_isa"] and len(result["load_average"]["start"]) == 3
  saved = json.loads((tmp_path / "scaling.json").read_text())
  assert saved["curves"]["length"]["points"][1]["value"] == 10
  assert (tmp_path / "scaling.png").stat().st_size > 10_000


@pytest.mark.slow
def test_the_profile_attributes_the_step_s_time_to_the_functions_that_made_it(tmp_path):
  """On the tiny preset: every instruction's time goes to a function of this repository (or a
  package's), the parts add up to the thunk total, the score and the GRU are among them, and
  the control-flow thunks that only wait for their bodies are not counted."""
  from experiments import profile_step

  result = profile_step.main(["--out", str(tmp_path), "--configs", "tiny", "--dtypes", "float32"])
  for program in ("train_step", "greedy_decode"):
    prof = result["runs"]["tiny float32"][program]
    parts = {p["part"]: p["ms"] for p in prof["parts"]}
    assert sum(parts.values()) == pytest.approx(prof["thunk_ms"])
    assert sum(p["share"] for p in prof["parts"]) == pytest.approx(1.0)
    assert "seq2seq/model/scores.py:Additive.__call__" in parts
    assert "seq2seq/model/layers.py:GRUCell.__call__" in parts
    assert "while" not in prof["kinds"] and prof["wall_ms"] > 0
  assert "## tiny float32: train step" in (tmp_path / "profile.md").read_text()


def test_the_profile_reads_xla_s_call_stacks():
  """The tables XLA prints after a module: a frame's parent is `parent_frame_id - 1`."""
  from experiments import profile_step

  text = "\n".join(
    [
      "HloModule m",
      '  %dot.1 = f32[2]{0} dot(%a, %b), metadata={op_name="x" stack_frame_id=2}',
      "  %while.3 = (f32[2]) while(%t), condition=%c, body=%b",
      "FileNames",
      f'1 "{profile_step.REPO_ROOT}/seq2seq/model/scores.py"',
      '2 "/x/site-packages/flax/nnx/nn/linear.py"',
      "FunctionNames",
      '1 "Additive.__call__"',
      '2 "Linear.__call__"',
      "FileLocations",
      "1 {file_name_id=1 function_name_id=1 line=10 end_line=10 column=1 end_column=2}",
      "2 {file_name_id=2 function_name_id=2 line=422 end_line=422 column=1 end_column=2}",
      "StackFrames",
      "1 {file_location_id=1 parent_frame_id=0}",
      "2 {file_location_id=2 parent_frame_id=2}",
    ]
  )
  ops = profile_step.instructions(text)
  assert ops["dot.1"] == {
    "part": "seq2seq/model/scores.py:Additive.__call__",
    "kind": "dot",
    "control": False,
  }
  assert ops["while.3"]["control"]
  assert profile_step.part([("/x/site-packages/optax/_src/adam.py", "update", 3)]) == (
    "optax/_src/adam.py:update"
  )


@pytest.mark.slow
def test_the_matmul_rates_of_an_xla_variant_in_a_process_of_its_own(tmp_path):
  from experiments import matmul_options

  args = ["--out", str(tmp_path), "--variants", "default", "--repeats", "1"]
  record = matmul_options.main([*args, "--peer-python", str(tmp_path / "none")])
  assert list(record["rows"]) == ["XLA, default"]
  rates = record["rows"]["XLA, default"]["rates"]
  assert set(rates) == set(matmul_options.SHAPES)
  assert all(_positive_finite(rates[s][d]) for s in rates for d in matmul_options.DTYPES)
  assert "| XLA, default | - |" in (tmp_path / "matmul_options.md").read_text()


def test_the_peer_comparison_states_the_matmul_ceiling():
  """The most ours / peer can be when every matmul runs at the measured rate of the compute
  dtype and nothing else takes time: training 3 MFLOP a token at 1,200 GFLOP/s is 400,000
  tokens/s, 400x a peer at 1,000; greedy decoding 30 words of 1 MFLOP is 40,000 sentences/s,
  200x a peer at 200."""
  results = {
    "dtype": "bfloat16",
    "matmul_gflops": {"float32": 300.0, "bfloat16": 1200.0},
    "flops_per_token": 1e6,
    "train_flops_per_token": 3e6,
    "batch": {"tgt_len": 30},
    "decode": {"greedy_sentences_per_s": {"median": 100.0}},
  }
  peer_run = {"tokens_per_s": 1000.0, "max_tokens_per_s": 1100.0, "gflops": 3.0}
  peer = {
    "train_rounds": [
      {
        "ours_tokens_per_s": 500.0,
        "ours_best_step_tokens_per_s": 600.0,
        "peer": {**peer_run, "fwd_mflop_per_token": 1.0},
      }
    ],
    "decode": {"sentences_per_s": 200.0},
  }
  ratios = benchmark.peer_ratios(results, peer)
  assert ratios["train_tokens_per_s"]["median"] == 0.5
  assert ratios["train_tokens_per_s_ceiling"] == pytest.approx(400.0)
  assert ratios["greedy_sentences_per_s"] == 0.5
  assert ratios["greedy_sentences_per_s_ceiling"] == pytest.approx(200.0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_peer_runs_in_the_benchmarks_dtype(tmp_path, dtype):
  """Every peer run (training rounds and decoding) is handed the dtype our step runs in, so a
  bfloat16 step is compared with the peer's bfloat16 (autocast), never with its float32."""
  import sys
  import types

  script = tmp_path / "peer.py"
  script.write_text("import json, sys\nprint(json.dumps({'argv': sys.argv[1:]}))\n")
  cfg = benchmark.make_config("bench", dtype)
  ours = types.SimpleNamespace(cfg=cfg, tokens_per_step=10, run=lambda steps: [1.0] * steps)
  peer = benchmark.compare_with_peer(
    ours,
    "bench",
    rounds=2,
    steps=1,
    peer_steps=1,
    python=Path(sys.executable),
    script=script,
    threads=1,
    maxout=1024,
  )
  runs = [r["peer"] for r in peer["train_rounds"]] + [peer["decode"]]
  assert [r["argv"][r["argv"].index("--dtype") + 1] for r in runs] == [dtype] * 3
  assert peer["dtype"] == dtype and "note" not in peer  # The record says so, and nothing else.


def test_the_decoder_cost_times_configs_on_the_same_batches_and_the_same_state(tmp_path):
  """A config against itself: both steppers start from the same parameters and take the same
  batches with the same keys, so their losses are identical; each distinct batch shape compiles
  once; the page names the configs."""
  from experiments import decoder_cost

  out = tmp_path / "cost.json"
  result = decoder_cost.main(
    ["--configs", "configs/tiny.py,configs/tiny.py", "--batches", "3", "--rounds", "1"]
    + ["--data-dir", str(tmp_path / "data"), "--out", str(out)]
  )
  first, second = result["configs"]
  assert first["last_round_loss"] == second["last_round_loss"]
  assert len(first["compile_s"]) >= 1 and first["ms_per_update"] > 0
  assert len(first["rounds_ms_per_update"]) == 1 and result["target_tokens_per_update"] > 0
  assert "`configs/tiny.py`" in out.with_suffix(".md").read_text()
  with pytest.raises(SystemExit):  # Configs whose batches differ cannot be compared.
    decoder_cost.main(["--configs", "configs/tiny.py,configs/multi30k.py", "--out", str(out)])


def test_the_attribution_study_scores_every_way_by_aer_on_gold_links(trained, tmp_path):
  """On the trained tiny run (the embedded generator's gold links): every way links the same
  pairs and gets an AER in [0, 1]; the page names each way."""
  from experiments import attribution_aer
  from experiments.lib.pages.attribution_aer import WAYS

  result = attribution_aer.main(
    ["--run", str(trained), "--out", str(tmp_path), "--sentences", "6", "--smooth-samples", "2"]
  )
  assert [w["way"] for w in result["ways"]] == list(WAYS)
  assert result["pairs"] == 6 and all(0.0 <= w["aer"] <= 1.0 for w in result["ways"])
  assert "`smoothgrad`" in (tmp_path / "attribution_aer.md").read_text()

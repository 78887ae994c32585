"""How the training step's cost grows with the work: one axis at a time from the benchmark's
`bench` preset (or `tiny`), the library's real train step at each value.

    python -m experiments.scaling_bench --out experiments/results/scaling \
        [--preset bench] [--dtype float32] [--axes length,vocab,batch,hidden] [--repeats 3]

The axes and their values (`AXES`; `--values AXIS=V1,V2,...` replaces one):

* `length`: the sentence length, source and target alike (10-100 words);
* `vocab`: the target vocabulary (8k-100k words), once with the full softmax and once with the
  sampled softmax of 4,096 candidates (`train.softmax`);
* `batch`: sentences per batch;
* `hidden`: the width of embeddings, both recurrences and the attention (maxout 4x as wide, as
  in the preset).

At every point: target tokens per second of the jitted, donated train step (`train_bench.
TrainBench`: the median of `--repeats` runs of `--steps` steps after a warm-up) and the memory
XLA plans for the step (`Compiled.memory_analysis`: arguments, outputs and temporaries; the
step's peak, free of the process's history that the resident-set peak carries).

The expected curve beside each measured one is the time the step's matmul FLOPs predict
(`train_bench.forward_flops_per_token` times the tokens of a step: linear in length for the
recurrences, length x length for the attention, linear in the vocabulary for the output layer
and flat with the sampled softmax), scaled to equal the measurement at the axis's first value:
where the measured curve falls below it, something other than the counted matmuls (the
elementwise work of the recurrence, the softmax, gathers, the optimiser over every parameter)
grows or shrinks the cost. Memory is drawn against a line through its first point growing in
proportion to the axis value.

Writes OUT/scaling.json (every point, the command, the CPU model, its vector and matrix
instruction sets and the load average before and after), OUT/scaling.md and OUT/scaling.png.
Figures from one run compare with each other only.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_collections

from experiments.lib import reports, train_bench
from experiments.lib.pages.scaling_bench import LABELS, page

SAMPLED = "sampled(size=4096)"
AXES: dict[str, tuple[int, ...]] = {
  "length": (10, 20, 40, 70, 100),
  "vocab": (8_000, 16_000, 32_000, 64_000, 100_000),
  "batch": (16, 32, 64, 128),
  "hidden": (128, 256, 512, 1024),
}


def point_config(
  preset: str, dtype: str, axis: str, value: int, softmax: str = "full"
) -> ml_collections.ConfigDict:
  """The preset's config with `axis` set to `value` (and the training softmax)."""
  cfg = train_bench.make_config(preset, dtype)
  m, d = cfg.model, cfg.data
  if axis == "length":
    d.max_len = value
  elif axis == "vocab":
    d.tgt_vocab_size = value
  elif axis == "batch":
    d.batch_size = value
  elif axis == "hidden":
    ratio = m.maxout_dim // m.dec_hidden
    m.emb_dim = m.enc_hidden = m.dec_hidden = m.attn_dim = value
    m.maxout_dim = ratio * value
  else:
    raise ValueError(f"unknown axis {axis!r}; valid: {', '.join(AXES)}")
  cfg.train.softmax = softmax
  return cfg


def step_flops(cfg: ml_collections.ConfigDict) -> float:
  """Forward matmul FLOPs of one step (per target token times the step's target tokens), the
  output layer over the sampled candidates under a sampled softmax."""
  n = cfg.data.max_len
  parts = train_bench.forward_flops_per_token(cfg, n, n)
  total = parts["total"]
  if cfg.train.softmax != "full":
    size = int(cfg.train.softmax.split("size=")[1].rstrip(")"))
    total += 2 * cfg.model.maxout_dim * min(size, cfg.data.tgt_vocab_size) - parts["output_layer"]
  return total * cfg.data.batch_size * n


def measure_point(cfg: ml_collections.ConfigDict, *, steps: int, repeats: int) -> dict[str, Any]:
  bench = train_bench.TrainBench(cfg)
  timing = train_bench.measure_training(bench, steps=steps, repeats=repeats, warmup=2)
  memory = timing["xla_memory"] or {}
  planned = sum(memory.get(f"{k}_mb", 0.0) for k in ("argument", "output", "temp"))
  planned -= memory.get("alias_mb", 0.0)  # Donated state: outputs reuse the arguments' buffers.
  return {
    "tokens_per_s": timing["train_tokens_per_s"]["median"],
    "step_s": timing["train_step_s"]["median"],
    "compile_s": timing["compile_s"],
    "xla_memory": memory,
    "planned_mb": planned,
    "forward_flops_per_step": step_flops(cfg),
    "loss_last": timing["loss_last"],
  }


def expected(points: list[dict[str, Any]], axis_values: Sequence[int]) -> None:
  """Adds the FLOP-predicted tokens/s and the proportional memory line to every point, both
  scaled to equal the first point's measurement."""
  first = points[0]
  for p, value in zip(points, axis_values, strict=True):
    step_s = first["step_s"] * p["forward_flops_per_step"] / first["forward_flops_per_step"]
    tokens = p["tokens_per_s"] * p["step_s"]  # Target tokens of one step.
    p["expected_tokens_per_s"] = tokens / step_s
    p["proportional_mb"] = first["planned_mb"] * value / axis_values[0]


def run(args: argparse.Namespace, argv: Sequence[str] | None = None) -> dict[str, Any]:
  values = dict(AXES)
  for spec in args.values:
    axis, _, listed = spec.partition("=")
    if axis not in AXES or not listed:
      raise SystemExit(
        f"error: --values {spec!r}: give AXIS=V1,V2,... with AXIS one of {list(AXES)}"
      )
    values[axis] = tuple(int(v) for v in listed.split(","))
  axes = [a for a in args.axes.split(",") if a]
  if unknown := [a for a in axes if a not in AXES]:
    raise SystemExit(f"error: --axes: unknown {', '.join(unknown)}; valid: {', '.join(AXES)}")
  load_start = reports.load_average()
  curves: dict[str, dict[str, Any]] = {}
  for axis in axes:
    softmaxes = ("full", SAMPLED) if axis == "vocab" else ("full",)
    for softmax in softmaxes:
      name = axis if softmax == "full" else f"{axis} ({softmax})"
      points = []
      for value in values[axis]:
        cfg = point_config(args.preset, args.dtype, axis, value, softmax)
        print(f"{name} = {value}", flush=True)
        points.append(
          {"value": value, **measure_point(cfg, steps=args.steps, repeats=args.repeats)}
        )
      expected(points, values[axis])
      curves[name] = {"axis": axis, "softmax": softmax, "points": points}
  return {
    "preset": args.preset,
    "dtype": args.dtype,
    "timing": {"repeats": args.repeats, "steps_per_repeat": args.steps, "warmup_steps": 2},
    "curves": curves,
    "versions": reports.versions(),
    **reports.provenance("scaling_bench", argv, load_start),
  }


def plot(result: dict[str, Any], path: Path) -> None:
  """Per curve, tokens/s (measured and FLOP-predicted) and planned memory against the axis."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  curves = result["curves"]
  fig, grid = plt.subplots(2, len(curves), figsize=(4 * len(curves), 6.5), squeeze=False)
  for col, (name, curve) in enumerate(curves.items()):
    xs = [p["value"] for p in curve["points"]]
    speed, memory = grid[0][col], grid[1][col]
    speed.plot(xs, [p["tokens_per_s"] for p in curve["points"]], "o-", label="measured")
    speed.plot(
      xs, [p["expected_tokens_per_s"] for p in curve["points"]], "--", label="FLOPs predict"
    )
    memory.plot(xs, [p["planned_mb"] for p in curve["points"]], "o-", label="XLA plans")
    memory.plot(xs, [p["proportional_mb"] for p in curve["points"]], "--", label="proportional")
    speed.set_title(name, fontsize=9)
    speed.set_ylabel("target tokens / s")
    memory.set_ylabel("MiB")
    memory.set_xlabel(LABELS[curve["axis"]], fontsize=8)
    for ax in (speed, memory):
      if max(xs) >= 8 * min(xs):
        ax.set_xscale("log")
      ax.set_xticks(xs, [f"{x:,}" for x in xs], fontsize=7)
      ax.minorticks_off()
      ax.legend(fontsize=7)
  fig.suptitle(
    f"Train step of {result['preset']} ({result['dtype']}), {result['cpu'].get('cpu_model', '?')}",
    fontsize=9,
  )
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--out", required=True, help="folder for scaling.json and scaling.png")
  p.add_argument("--preset", default="bench", choices=["bench", "tiny"])
  p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
  p.add_argument("--axes", default=",".join(AXES), help="comma-separated, of " + ", ".join(AXES))
  p.add_argument("--values", action="append", default=[], help="AXIS=V1,V2,...: other values")
  p.add_argument("--repeats", type=int, default=3, help="timed runs per point (median kept)")
  p.add_argument("--steps", type=int, default=3, help="steps per timed run")
  args = p.parse_args(argv)
  result = run(args, argv)
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  plot(result, out / "scaling.png")
  reports.publish(out / "scaling.json", result, page(result))
  return result


if __name__ == "__main__":
  main()

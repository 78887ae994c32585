"""The matmul rate under XLA's options (`python -m experiments.matmul_options`): the shapes and
dtypes it measures and the page it writes, drawn again on the results page. No project import at
the top: the script's PyTorch child imports this module in the peer's environment."""

from __future__ import annotations

from typing import Any

from experiments.lib.pages.study import StudyPage, script_page

# (M, K, N, form): form NN is [M, K] x [K, N]; NT multiplies by a stored [N, K] transposed (the
# output layer's input gradient g W^T); TN a stored [K, M] transposed (its weight gradient h^T g).
SHAPES = {
  "square 2048": (2048, 2048, 2048, "NN"),
  "output layer forward": (1920, 1024, 8000, "NN"),
  "output layer input gradient": (1920, 8000, 1024, "NT"),
  "output layer weight gradient": (1024, 1920, 8000, "TN"),
}


DTYPES = ("float32", "bfloat16")


def page(record: dict[str, Any]) -> str:
  from experiments.lib import reports

  fmt = reports.fmt
  header = ["variant", "XLA_FLAGS"] + [f"{s}, {d}" for s in SHAPES for d in DTYPES]
  cells = []
  for name, row in record["rows"].items():
    rates = row.get("rates")
    values = [fmt(rates[s][d], 0) for s in SHAPES for d in DTYPES] if rates else ["-"] * 8
    note = f"`{row['flags']}`" if row.get("flags") else "-"
    cells.append([name, note if "error" not in row else f"failed: {row['error']}"] + values)
  lines = [
    "# Matmul rate under XLA's options, and PyTorch's",
    "",
    f"{reports.made_by('matmul_options', record)} and {record['load_average']['end']} at the end "
    f"({', '.join(record['cpu'].get('vector_isa', []))}). GFLOP/s, median of "
    f"{record['repeats']} calls; bfloat16: bfloat16 factors, float32 accumulation and output "
    "(PyTorch: `torch.autocast`). Shapes (M x K x N): "
    + ", ".join(f"{s} {m:,} x {k:,} x {n:,} ({f})" for s, (m, k, n, f) in SHAPES.items())
    + ".",
    "",
    *reports.table(header, cells),
    "",
    *reports.command_block(record["command"]),
  ]
  return "\n".join(lines) + "\n"


STUDIES = {
  "matmul_options": StudyPage(
    "Matmul rate under XLA's options, and PyTorch's",
    "The development CPU's matmul rate on a square matrix and on the benchmark's output layer, "
    "in float32 and bfloat16, under XLA's default and three of its CPU options, beside "
    "PyTorch's on the same shapes.",
    measurements=script_page(page, "matmul_options.json"),
  ),
}

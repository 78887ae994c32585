"""Where a step's time goes (`python -m experiments.profile_step`): the page the script writes,
drawn again on the results page."""

from __future__ import annotations

from typing import Any

from experiments.lib import reports
from experiments.lib.pages.study import StudyPage, script_page


def page(result: dict[str, Any], top_parts: int = 10) -> str:
  fmt = reports.fmt
  lines = [
    "# Where a step's time goes",
    "",
    f"{reports.made_by('profile_step', result)} and {result['load_average']['end']} at the end "
    f"({', '.join(result['cpu'].get('vector_isa', []))}). Per config, dtype and program: the "
    "wall time of one call under the profiler, the summed time of XLA's thunks (two threads may "
    "run at once) and the parts that took most of it, each the function whose source line made "
    "the operation (the share is of the summed thunk time). A plain `dot` (an Eigen matmul) can "
    "be timed short of its work, the rest charged to the thunks that wait for it.",
  ]
  for key, programs in result["runs"].items():
    for program, prof in programs.items():
      if program == "batch":
        continue
      lines += [
        "",
        f"## {key}: {program.replace('_', ' ')}",
        "",
        f"Wall {fmt(prof['wall_ms'], 1)} ms per call, thunks {fmt(prof['thunk_ms'], 1)} ms; by "
        "kind: "
        + ", ".join(f"{k} {fmt(ms, 1)}" for k, ms in list(prof["kinds"].items())[:6])
        + ".",
        "",
      ]
      cells = [
        [f"`{p['part']}`", fmt(p["ms"], 2), fmt(100 * p["share"], 1)]
        for p in prof["parts"][:top_parts]
      ]
      lines += reports.table(["part", "ms", "%"], cells)
  lines += ["", "```bash", result["command"], "```"]
  return "\n".join(lines) + "\n"


STUDIES = {
  "profile": StudyPage(
    "Where a step's time goes",
    "The train step and greedy decoding of the benchmark's presets and the 30-minute Multi30k "
    "config, in float32 and bfloat16, broken down by operation from XLA's trace and attributed "
    "to the functions that made each operation.",
    measurements=script_page(page, "profile.json"),
  ),
}

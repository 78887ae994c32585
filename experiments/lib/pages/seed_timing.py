"""Seeds together or one after another (`python -m experiments.seed_timing`)."""

from __future__ import annotations

from pathlib import Path

from experiments.lib import records, reports
from experiments.lib.pages.sections import cpu_name, data_files, date_of
from experiments.lib.pages.study import StudyPage
from experiments.lib.reports import fmt


def seed_timing_tables(study: Path) -> list[str]:
  """Each `experiments.seed_timing` measurement: its command and every way's figures."""
  lines = ["## Measurements", ""]
  header = ["way", "training wall s", "model updates/s", "steady tokens/s, all seeds"]
  header += ["1-minute load before, after"]
  for name, t in data_files(study, records.load_definition(study)).items():
    lines += [f"### {name}", ""]
    lines += [
      f"{len(t['seeds'])} seeds of {t['steps_per_seed']:,} updates each, `{t['config']}`, on "
      f"{cpu_name(t)}, {date_of(t)}:",
      "",
      *reports.command_block(t["command"]),
      "",
    ]
    cells = [
      [w["way"], fmt(w["training_wall_s"], 0), fmt(w["model_updates_per_s"], 3)]
      + [fmt(w["steady_tokens_per_s_all_seeds"], 0)]
      + [f"{w['load_average_before'][0]:.2f}, {w['load_average_after'][0]:.2f}"]
      for w in t["ways"]
    ]
    lines += [*reports.table(header, cells), ""]
  return lines


def seed_timing_conclusion(study: Path) -> list[str]:
  if study.name != "seed_timing":
    return []
  out = []
  for name, t in data_files(study, records.load_definition(study)).items():
    ways = [w["way"] for w in t["ways"]]
    for way in ways:
      wall = t.get(f"{way}_speedup_wall")
      if wall is None:
        continue
      other = next(w for w in ways if w != way)
      steady = t.get(f"{way}_speedup_steady")
      steady = "" if steady is None else f", {steady:.2f}x in steady-state tokens/s"
      out.append(
        f"`{way}` against `{other}`, {len(t['seeds'])} seeds on {cpu_name(t)}: {wall:.2f}x the "
        f"speed over the training wall clock{steady} (`{name}`)."
      )
  return out


STUDIES = {
  "seed_timing": StudyPage(
    "Seeds together or one after another",
    "The same configuration trained for the same updates per seed, the seeds vmapped in one "
    "process, one after another in one process, or in one process each.",
    measurements=seed_timing_tables,
    conclusion=seed_timing_conclusion,
  ),
}

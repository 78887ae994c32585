"""Every study's `StudyPage`, gathered from the study modules (a study without one is titled by
its folder's name)."""

from __future__ import annotations

from experiments.lib.pages import (
  architectures_study,
  attention_offsets,
  attribution_aer,
  benchmark,
  best30,
  decoder_cost,
  decoding_study,
  demo_run,
  embedded_sweeps,
  explorer_timing,
  matmul_options,
  mbr_study,
  multi30k_sweeps,
  plateau,
  profile_step,
  realtext,
  reproduce_paper,
  scale_bench,
  scaling_bench,
  seed_timing,
  serve_bench,
  tabulate,
  translate_sorted_bench,
  translate_timing,
)
from experiments.lib.pages.study import StudyPage

MODULES = (
  multi30k_sweeps,
  embedded_sweeps,
  plateau,
  reproduce_paper,
  realtext,
  best30,
  decoding_study,
  mbr_study,
  attention_offsets,
  seed_timing,
  translate_timing,
  translate_sorted_bench,
  matmul_options,
  profile_step,
  decoder_cost,
  attribution_aer,
  architectures_study,
  scaling_bench,
  scale_bench,
  serve_bench,
  explorer_timing,
  demo_run,
  benchmark,
  tabulate,
)


def _gather() -> dict[str, StudyPage]:
  found: dict[str, StudyPage] = {}
  for module in MODULES:
    twice = set(found) & set(module.STUDIES)
    if twice:
      raise ValueError(f"{module.__name__}: studies named twice: {', '.join(sorted(twice))}")
    found |= module.STUDIES
  return found


STUDIES = _gather()


def about(name: str) -> StudyPage:
  """The study `name`'s page entry; one titled by its name where no module has it."""
  return STUDIES.get(name) or StudyPage(name)

"""Several seeds of one configuration trained together: one compiled step, vmapped over seeds.

`train_together(config, seeds, workdirs)` runs the training loop (`train.train_members`) with
the G seeds' train states stacked along a leading axis and `jax.vmap(train_state.train_step)` over
it, so every update of all G models is one call of one compiled program: the small matmuls of
the recurrences become G-times larger batched ones, which pays on a CPU (fewer, larger
operations) and more on an accelerator.

What the seeds share and what they do not:

* each seed `s` initialises its parameters and draws its dropout masks exactly as a lone run of
  `config` with `seed=s` does (`rt.initial_state`, `fold_in(key(s), 1)`);
* all of them read the same batches, in the data order of the FIRST seed (one batch stream
  feeds the vmapped step). A lone run of seed `s` shuffles with `s`, so a grouped seed is not
  bit-identical to a lone one; seeds here measure initialisation and dropout variance.

Every seed gets an ordinary workdir: its `config.json` (with its own `seed`), `vocab/` (a copy of
the first seed's), Orbax `checkpoints/` (one per seed, the shared iterator state inside),
`best/` (its best greedy validation BLEU), `metrics.jsonl` and TensorBoard events, and
`eval/{valid,test}/` from `evaluation.evaluate_splits` at the end, so each can be inspected,
evaluated (`main.py --mode=eval`) or continued alone like any other run. Rerunning
`train_together` with the same arguments resumes the group from the latest step checkpointed
in every workdir. Train lines carry `seeds_together` (G); their `tokens_per_s` counts one
model's target tokens (the group trains G times as many).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_collections

from seq2seq import train


def seed_configs(config: ml_collections.ConfigDict, seeds: Sequence[int]):
  """`config` once per seed, identical but for `seed`."""
  out = []
  for seed in seeds:
    c = config.copy_and_resolve_references()
    c.seed = int(seed)
    out.append(c)
  return out


def train_together(
  config: ml_collections.ConfigDict, seeds: Sequence[int], workdirs: Sequence[str | Path]
) -> list[dict[str, Any]]:
  """Trains `config` for every seed in `seeds` together, then evaluates each seed's workdir.

  Returns each seed's `evaluation.evaluate_splits` results ({} without `train.final_eval`), or
  [{"preempted_at_step": N}] * G when SIGTERM/SIGINT stopped it (checkpoints saved; rerun).
  """
  if len(seeds) != len(workdirs) or len(set(seeds)) != len(seeds) or not seeds:
    raise ValueError(f"need distinct seeds, one workdir each; got {seeds} and {workdirs}")
  return train.train_members(seed_configs(config, seeds), workdirs, together=True)

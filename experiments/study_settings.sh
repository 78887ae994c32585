# What the Multi30k study scripts share (experiments/luong_studies.sh, training_studies.sh):
# sourced from the repository root after `set -euo pipefail`.
PY=${PY:-.venv/bin/python}
# Where the studies' folders are: this tree's experiments/results unless RESULTS names another
# (a run from a git worktree, so that edits to the main tree cannot change a study halfway).
RESULTS=${RESULTS:-$PWD/experiments/results}
# How the runs share the machine: `local` trains them one after another on all cores; `cores`
# (LAUNCHER=cores) runs one per CPU core side by side, which on a 2-core machine finished two
# seeds 1.09x (AMD EPYC, AVX2) to 1.28x (Intel Xeon, AVX-512) sooner (docs/results/seed_timing.md).
# The runs have the same settings either way (one thread each instead of two may change rounding).
LAUNCHER=${LAUNCHER:-local}
# 3,000 updates, seeds 0, 1 and 2 each its own run, checkpoints every 100 updates.
COMMON=(--seeds 0,1,2 --training sequential --launcher="$LAUNCHER"
  --set train.max_minutes=0 --set train.num_steps=3000
  --set train.eval_every=500 --set train.checkpoint_every=100 --set train.keep_checkpoints=5)
# The Bahdanau-decoder system on the score study's corpus files.
PAPER=(--config=configs/multi30k.py --set "data.cache_dir=$RESULTS/multi30k_scores/data")

# SWEEP_ARGS: more flags for every sweep (`--collect --partial`: report what is finished).
sweep() { nice -n 10 "$PY" -m experiments.sweep "$@" ${SWEEP_ARGS:-}; }

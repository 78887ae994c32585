#!/usr/bin/env bash
# The embedded-corpus studies at a budget where the additive baseline has flattened, and the
# paper's Fig. 2 with error bars (studies issue, items 3 and 4). They come after the Multi30k
# studies (experiments/multi30k_studies.sh) in the order of work; each step is resumable in the
# same way (rerun the script: finished runs are skipped, unfinished ones resume from their last
# checkpoint where the working tree kept it), and a finished step's results folder is committed
# without weights (.gitignore).
#
# The cpu preset (experiments/lib/presets.py) compares configurations after 400 updates, early in
# training. Step 1 measures where its additive baseline flattens: one run with greedy validation
# BLEU every 500 updates, to 8,000. The score, alignment and structure studies are then rerun at
# the first budget whose last quarter gains under 1 BLEU (added here once step 1 has said which).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
RESULTS=experiments/results

# 1. The plateau of the cpu preset's additive baseline on the embedded corpus.
nice -n 10 "$PY" -m experiments.sweep_scores --preset cpu --scores additive --seeds 0 \
  --training sequential --out $RESULTS/embedded_plateau \
  --set train.num_steps=8000 --set train.eval_every=500 --set train.checkpoint_every=500 \
  --set train.keep_checkpoints=2 --set train.valid_bleu=true

# 2. Table 1 and Fig. 2 with three seeds per model (bands of one standard deviation).
nice -n 10 "$PY" -m experiments.reproduce_paper --preset cpu --seeds 0,1,2 \
  --out $RESULTS/paper_cpu_seeds

"""The presets the study scripts share: `smoke` (seconds, for the tests) and `cpu`.

`cpu` is one budget for the score sweep, the alignment study and the structural study, so their
baselines are the same model and their tables can be read side by side: configs/demo.py at half
its width (embeddings 64, encoder 64 per direction, decoder 128, attention and maxout 64),
Glorot initialisation, Adam 3e-3, `CPU_STEPS` = 400 updates of 64 pairs on a 20k-pair corpus
whose sentences reach 80 words (training keeps those of at most 30), the last checkpoint
evaluated on 1,000 test pairs with beam 5. It compares configurations early in training, at a
budget that lets the three studies run in one working session on 2 CPU cores.
"""

from __future__ import annotations

from typing import Any

SMOKE_STEPS = 10
# configs/tiny.py for SMOKE_STEPS steps without validation BLEU, one heatmap per evaluated split
# (drawing them was a sixth of the smoke studies' time): checks files and keys.
SMOKE: dict[str, Any] = {
  "train.num_steps": SMOKE_STEPS,
  "train.log_every": SMOKE_STEPS // 2,
  "train.eval_every": SMOKE_STEPS,
  "train.checkpoint_every": SMOKE_STEPS,
  "train.valid_bleu": False,
  "decode.num_heatmaps": 1,
}

CPU_STEPS = 400
CPU: dict[str, Any] = {
  "model.emb_dim": 64,  # Half of configs/demo.py's width: about twice its tokens/s.
  "model.enc_hidden": 64,
  "model.dec_hidden": 128,  # = 2 * enc_hidden, as in the demo: every score applies.
  "model.attn_dim": 64,
  "model.maxout_dim": 64,
  "model.init": "glorot",  # The paper's init keeps attention uniform for hundreds of steps.
  "train.learning_rate": 3e-3,
  "data.synthetic.max_len": 80,  # Sentences up to 80 words exist (the long test split) ...
  "data.max_len": 30,  # ... but training keeps pairs of at most 30 tokens.
  "data.synthetic.train_pairs": 20_000,  # More than the 400 x 64 pairs seen.
  "data.synthetic.valid_pairs": 200,
  "data.synthetic.test_pairs": 1_000,
  "data.long_test_min_words": 40,  # The `test_long` split: test pairs of 40-80 source words.
  "data.long_test_max_words": 80,
  "train.num_steps": CPU_STEPS,
  "train.log_every": CPU_STEPS // 5,
  "train.eval_every": CPU_STEPS,  # One validation loss at the end ...
  "train.checkpoint_every": CPU_STEPS,
  "train.valid_bleu": False,  # ... and the last checkpoint is evaluated.
  "decode.num_heatmaps": 2,
}

# --preset NAME of the study scripts: (config file, overrides).
STUDIES: dict[str, tuple[str, dict[str, Any]]] = {
  "smoke": ("configs/tiny.py", SMOKE),
  "cpu": ("configs/demo.py", CPU),
}

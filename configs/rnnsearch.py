"""RNNsearch at the paper's sizes and cost (summed over words, mean over sentences). Variant
argument: `maxlen=30` or `maxlen=50` (default 50).

`--config=configs/rnnsearch.py:maxlen=30` gives RNNsearch-30.
"""

import ml_collections

from configs import default


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  c = default.get_config()
  opts = dict(kv.split("=", 1) for kv in arg.split(",") if kv)
  c.model.name = "rnnsearch"
  c.data.max_len = int(opts.pop("maxlen", 50))
  c.train.loss_normalization = "sentences"  # GroundHog's cost, which Adadelta's steps follow.
  if opts:
    raise ValueError(f"unknown variant options {sorted(opts)}; valid: maxlen")
  return c

"""RNNencdec (the paper's baseline) at the paper's sizes. Variant: `maxlen=30` or `maxlen=50`."""

import ml_collections

from configs import rnnsearch


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  c = rnnsearch.get_config(arg)
  c.model.name = "rnnencdec"
  return c

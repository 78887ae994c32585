"""A Transformer encoder-decoder (Vaswani et al. 2017) in this project's registry, at a CPU size,
at the paper's base size, or on Multi30k. The variant argument picks one:

  --config=configs/transformer.py            CPU size on the embedded corpus, data, widths and
                                             updates as `make demo`'s RNNsearch (configs/demo.py)
  --config=configs/transformer.py:base       the paper's base model (6 + 6 layers of 512, 8 heads,
                                             2,048 feed-forward units; WMT'14 en-fr, 32k words)
  --config=configs/transformer.py:multi30k   Multi30k en->fr, data and batches as
                                             configs/multi30k.py, so runs compare with its studies

Every variant takes the paper's recipe: pre-norm layers (the toolkits' current choice; the paper
normalises after each sublayer), sinusoidal positions, scaled dot-product cross-attention
(`model.score="scaled"`, softmax), dropout 0.1 on every sublayer and on the attention weights,
label smoothing 0.1, Adam with b2 = 0.98 and eps = 1e-9, a linear warm-up then the inverse
square root of the update count. The paper's rate, d^-0.5 min(n^-0.5, n w^-1.5), peaks at
d^-0.5 w^-0.5 after w warm-up updates: `train.learning_rate` is that peak. Where this differs
from the paper: the annotations are `2 * model.enc_hidden` wide (the encoder takes the width a
bidirectional recurrent encoder would give, so every score and decoder applies unchanged), the
vocabularies are separate and untied, and the CPU and Multi30k sizes are smaller. Any score or
normaliser of the registry can replace the heads' (`model.score="additive"`, `model.normaliser=
"entmax15"`); `alignment_layer` and `alignment_head` in `model.decoder` choose the attention the
project reports and guided alignment supervises (Garg et al. 2019: one head, penultimate layer).
"""

import ml_collections

from configs import default, demo, multi30k

VARIANTS = ("", "base", "multi30k")


def _transformer(c, layers: int, heads: int, inner: int, width: int, warmup: int):
  """The paper's recipe at `width` (annotations and decoder alike) and `layers` each side."""
  blocks = f"layers={layers}, heads={heads}, inner={inner}"
  c.model.encoder = f"transformer({blocks})"
  c.model.decoder = f"transformer({blocks})"
  c.model.score = "scaled"
  c.model.enc_hidden = width // 2  # The encoder's width is 2 * enc_hidden.
  c.model.dec_hidden = width
  c.model.emb_dim = width
  c.model.dropout = 0.1
  c.model.init = "glorot"
  c.train.optimizer = "adam"
  c.train.adam_b2 = 0.98
  c.train.adam_eps = 1e-9
  c.train.learning_rate = (width * warmup) ** -0.5
  c.train.warmup_steps = warmup
  c.train.decay = "rsqrt"
  c.train.label_smoothing = 0.1
  c.train.clip_norm = 0.0


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  if arg not in VARIANTS:
    raise ValueError(f"variant {arg!r}; valid: {', '.join(v or '(none)' for v in VARIANTS)}")
  if arg == "multi30k":
    c = multi30k.get_config()
    _transformer(c, layers=3, heads=8, inner=1024, width=512, warmup=1_000)
    return c
  if arg == "base":
    c = default.get_config()
    c.data.corpus = "wmt14"
    c.data.src_vocab_size = c.data.tgt_vocab_size = 32_004
    c.data.batch_size = 128
    _transformer(c, layers=6, heads=8, inner=2048, width=512, warmup=4_000)
    c.train.num_steps = 100_000
    return c
  c = demo.get_config()
  _transformer(c, layers=2, heads=4, inner=1024, width=256, warmup=400)
  return c

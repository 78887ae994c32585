"""Luong, Pham and Manning (2015)'s attentional decoder, at a CPU size, at the paper's, or on
Multi30k. The variant argument picks one:

  --config=configs/luong.py            CPU size on the embedded corpus (the default corpus)
  --config=configs/luong.py:paper      the paper's settings (4 x 1000 LSTM: not a CPU's job)
  --config=configs/luong.py:multi30k   Multi30k en->fr, everything but the decoder as
                                       configs/multi30k.py, so runs compare with its studies

Every variant uses the paper's best system: local-p attention (window D = 10) with the general
score, input feeding, an LSTM decoder. What is scaled down from the paper at the CPU size and on
Multi30k: 2 decoder layers of 512 units instead of 4 of 1,000, embeddings of 256 instead of
1,000, and the encoder is this project's bidirectional GRU, so that on Multi30k the decoder is
the only difference from the Bahdanau-decoder studies. The `paper` variant has the paper's
encoder, 4 unidirectional LSTM layers of 1,000 over the reversed source, and the rest of its
recipe for the dropout models: 12 epochs of SGD at 1.0, halved after epoch 8 and every epoch
after (given in updates of 128 pairs on WMT'14's 4.5M), gradient norm rescaled to 5, dropout
0.2, 50k vocabularies, sentences up to 50 tokens. What differs from the paper in every variant:
each decoder layer starts from s_0 = tanh(W_s h) of the encoder's last state (the paper copies
each encoder layer's final state to the decoder layer above it), and uniform initialisation in
[-0.1, 0.1] is not among this project's schemes (`model.init`: paper or glorot).
"""

import ml_collections

from configs import default, multi30k

VARIANTS = ("", "paper", "multi30k")
PAPER_EPOCH = 4_500_000 // 128  # Updates per epoch of WMT'14 en-de in batches of 128.


def _luong(c: ml_collections.ConfigDict, layers: int) -> None:
  """The decoder, score and window of the paper's best system."""
  c.model.decoder = f"luong(cell=lstm, layers={layers}, input_feeding=true)"
  c.model.score = "general"
  c.model.attention = "local_p"  # Its default window, D = 10, is the paper's.


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  if arg not in VARIANTS:
    raise ValueError(f"variant {arg!r}; valid: {', '.join(v or '(none)' for v in VARIANTS)}")
  if arg == "multi30k":
    c = multi30k.get_config()
    _luong(c, layers=2)
    return c
  c = default.get_config()
  if arg == "paper":
    c.data.corpus = "wmt14"
    c.data.src_vocab_size = c.data.tgt_vocab_size = 50_004
    c.data.max_len = 50
    c.data.batch_size = 128
    c.model.emb_dim = 1000
    c.model.encoder = "rnn(cell=lstm, layers=4, bidirectional=false, reverse=true)"
    c.model.enc_hidden = 1000  # Annotations of 1,000, the size of h_t: `dot` applies.
    c.model.dec_hidden = 1000
    c.model.attn_dim = 1000
    c.model.dropout = 0.2
    _luong(c, layers=4)
    c.train.optimizer = "sgd"
    c.train.learning_rate = 1.0
    c.train.decay = f"halving(after={8 * PAPER_EPOCH}, every={PAPER_EPOCH})"
    c.train.clip_norm = 5.0
    c.train.num_steps = 12 * PAPER_EPOCH
    return c
  c.model.emb_dim = 256
  c.model.enc_hidden = 256
  c.model.dec_hidden = 512
  c.model.attn_dim = 256
  c.model.dropout = 0.2
  _luong(c, layers=2)
  c.train.optimizer = "adam"
  c.train.learning_rate = 1e-3
  c.train.clip_norm = 5.0
  return c

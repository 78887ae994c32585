"""RNNsearch on the embedded corpus, sized to train in about 5 minutes on 2 CPU cores (`make demo`)."""

import ml_collections

from configs import default


def get_config() -> ml_collections.ConfigDict:
  c = default.get_config()
  c.model.emb_dim = 128
  c.model.enc_hidden = 128
  c.model.dec_hidden = 256  # = 2 * enc_hidden, so every score function applies unchanged.
  c.model.attn_dim = 128
  c.model.maxout_dim = 128
  c.data.src_vocab_size = 2_004
  c.data.tgt_vocab_size = 2_004
  c.data.max_len = 30
  c.data.batch_size = 64
  c.data.synthetic.train_pairs = 60_000
  c.data.synthetic.valid_pairs = 500
  c.data.synthetic.test_pairs = 1_000
  c.data.synthetic.vocab_size = 3_000
  c.data.synthetic.max_len = 40
  c.train.optimizer = "adam"
  c.train.learning_rate = 2e-3
  c.train.num_steps = 1_200
  c.train.log_every = 50
  c.train.eval_every = 500
  c.train.checkpoint_every = 500
  c.decode.beam_size = 5
  return c

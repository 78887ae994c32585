"""A model that trains in seconds on a CPU: for tests and smoke runs."""

import ml_collections

from configs import default


def get_config() -> ml_collections.ConfigDict:
  c = default.get_config()
  c.model.emb_dim = 16
  c.model.enc_hidden = 16
  c.model.dec_hidden = 32  # = 2 * enc_hidden, so dot/scaled/cosine scores apply as they are.
  c.model.attn_dim = 16
  c.model.maxout_dim = 16
  c.data.src_vocab_size = 200
  c.data.tgt_vocab_size = 200
  c.data.max_len = 20
  c.data.bucket_step = 24  # One padded length: a single compiled shape keeps tests fast.
  c.data.batch_size = 16
  c.data.pool_batches = 4
  c.data.synthetic.train_pairs = 2_000
  c.data.synthetic.valid_pairs = 64
  c.data.synthetic.test_pairs = 64
  c.data.synthetic.vocab_size = 1000
  c.data.synthetic.max_len = 18
  c.train.optimizer = "adam"
  c.train.learning_rate = 3e-3
  c.train.num_steps = 20
  c.train.log_every = 5
  c.train.eval_every = 10
  c.train.checkpoint_every = 10
  c.decode.beam_size = 3
  c.decode.batch_size = 16
  c.decode.num_heatmaps = 2
  return c

"""RNNsearch on WMT'14 English->French as the paper trained it (Bahdanau et al. 2014, section 4):
configs/rnnsearch.py's model and training (620-dim embeddings, 1,000 hidden units, maxout 500,
minibatches of 80, Adadelta with eps 1e-6 and rho 0.95, beam 12) on the paper's data. The
variant argument is rnnsearch.py's: `maxlen=30` gives RNNsearch-30.

The data as the paper has it, section 4.1: Europarl, news commentary, UN and the two crawled
corpora (Common Crawl and the 10^9 French-English corpus, giga-fren), tokenised (Moses here),
30,000-word vocabularies on each side with every other word <unk>, training pairs of up to 50
words, validation on newstest2012 and newstest2013 concatenated, test on newstest2014.

One difference: the paper trained on the 348M words that Axelrod et al.'s data selection (as
Cho et al. 2014 ran it) kept of the five corpora's 850M. That selection is not reproduced here:
this config trains on all five corpora, about 2.4 times the paper's words.

The corpus is read from statmt.org's files unpacked in `data.wmt14.dir` (the "raw" reader);
`--config.data.wmt14.reader=tfds` prepares it with tensorflow_datasets instead (downloads).
docs/tutorials/paper_scale.md walks through a run.
"""

import ml_collections

from configs import rnnsearch


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  c = rnnsearch.get_config(arg)
  c.data.corpus = "wmt14"
  c.data.wmt14.reader = "raw"
  c.data.wmt14.dir = "../shared/data/wmt14"
  c.data.wmt14.valid = "newstest2012+newstest2013"
  c.data.pretokenizer = "moses"  # The paper's "usual tokenization".
  # About the paper's RNNsearch-50 budget (2.88e5 updates, its appendix's learning statistics).
  # A checkpoint (80.4M parameters and Adadelta's two accumulators, float32) holds about 1 GB.
  c.train.num_steps = 300_000
  c.train.log_every = 500
  c.train.eval_every = 10_000
  c.train.checkpoint_every = 10_000
  return c

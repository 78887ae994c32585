"""Default settings: every field of every run, each with a one-line comment.

Variants (`rnnsearch.py`, `rnnencdec.py`, `demo.py`, `tiny.py`) import `get_config` from here and
change only what differs. Any field can be overridden on the command line, e.g.
`--config.model.score=dot`.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0  # Seeds parameter init, dropout and data shuffling (each through its own fold_in).

  # ---------------------------------------------------------------- model
  m = c.model = ml_collections.ConfigDict()
  # "rnnsearch", "rnnencdec" (the paper's baseline: one-direction encoder, c = tanh(V h_Tx)),
  # "rnnencdec_bi" (ablation: RNNsearch's encoder, attention removed) or "agreement" (x->y, y->x).
  m.name = "rnnsearch"
  m.direction = "forward"  # Agreement: the model eval/translate use: "forward" (x->y), "reverse".
  m.emb_dim = 620  # Word embedding size, both languages (paper: 620).
  m.enc_hidden = 1000  # Encoder GRU units per direction; annotations have 2x this (paper: 1000).
  m.dec_hidden = 1000  # Decoder GRU units (paper: 1000).
  m.attn_dim = 1000  # Hidden size of the additive alignment model (paper: 1000).
  m.maxout_dim = 500  # Units after maxout over pairs in the deep output (paper: 500).
  # Components are named by specs, NAME or NAME(setting=value, ...): each registered component
  # owns its settings and their defaults (seq2seq/common/registry.py). `python -m seq2seq.settings`
  # lists every component with its settings.
  m.score = (
    "additive"  # Alignment model (seq2seq/model/scores.py), e.g. "dot", "cosine(sharpness=5)".
  )
  # Where attention may look (seq2seq/model/structures.py); "soft" is the paper's global attention.
  m.attention = "soft"  # E.g. "local_p(window=10)", "multihead(heads=4)", "hard".
  # Alignment features of the additive score (seq2seq/model/alignment_features.py), "+"-joined; "" is none.
  m.features = ""  # E.g. "coverage(fertility=true)+prev_attention(filters=8)".
  # Time steps per loop iteration of the encoder's and the teacher-forced decoder's lax.scan
  # (the same results; fewer, larger loop bodies for XLA to schedule). Decoding is unaffected.
  m.scan_unroll = 1
  # Decoder add-ons (seq2seq/model/addons.py), "+"-joined specs in any order; "" none. E.g.
  # "intra(score=dot)+copy(eos=null)". intra(score=SCORE): intra-attention (Cheng et al. 2016;
  # Paulus et al. 2017), the query s_{i-1} also attends over the decoder's earlier states with a
  # content score, a context fed to the GRU and the deep output. lexicon(table=train|FILE): the
  # lexicon bias (Arthur et al. 2016), log(sum_j alpha_ij p_lex(w | x_j) + 0.001) added to the
  # logits, its table learned from the training split when training starts ("train") or a file
  # (python -m seq2seq.build_lexicon). copy(eos=null|target): copying from the source
  # (pointer-generator, See et al. 2017; seq2seq/data/copying.py), the source EOS's attention
  # copied as nothing ("null", chosen on validation data: docs/results/multi30k_copy_eos.md) or
  # as the target EOS ("target"); eos may differ at decoding.
  m.addons = ""
  # Multi-source translation (Zoph and Knight 2016): a corpus of two source languages
  # (data.local.src_lang="en+de") gets a second encoder and attention, their contexts combined by
  # "concat" ([c1 ; c2], Zoph and Knight's) or "gate" (g * c1 + (1 - g) * c2, this project's
  # extension). Unused with one source language.
  m.multi_source = "concat"
  # "paper": s_i = GRU(s_{i-1}, [E y_{i-1}; c_i]), attention queried by s_{i-1}; "cgru": Nematus'
  # conditional GRU, s'_i = GRU1(s_{i-1}, E y_{i-1}), attention queried by s'_i, s_i = GRU2(s'_i, c_i);
  # "luong(cell=lstm, layers=1, input_feeding=true, residual=false)": Luong et al. 2015, stacked
  # cells run first, attention queried by the top h_t, logits from h~_t = tanh(W_c [c_t; h_t]).
  # The source encoder, "rnn(cell=gru, layers=1, bidirectional=true, residual=false,
  # reverse=false)": GRU or LSTM layers, both directions or one (right to left with reverse,
  # Sutskever et al.'s reversed source); the default is the paper's bidirectional GRU. Or
  # "transformer(layers=2, heads=4, inner=0, positions=sinusoidal, max_positions=512)": pre-norm
  # self-attention layers of the recurrent encoder's width (inner 0: four times it), positions
  # sinusoidal or learned.
  m.encoder = "rnn"
  # Attention weights from the scores: "softmax" (the paper's), "sparsemax" (Martins and
  # Astudillo 2016) or "entmax15" (1.5-entmax, Peters et al. 2019), the last two exactly sparse.
  m.normaliser = "softmax"
  m.decoder = "paper"
  m.tie_embeddings = False  # W_o = E^T for the target side (Press & Wolf); needs maxout = emb.
  m.layer_norm = False  # Layer normalisation of every GRU's gate pre-activations (Ba et al.).
  m.dropout = 0.0  # Dropout on embeddings and the deep-output layer (paper: none).
  m.dtype = "float32"  # Compute dtype: "float32" or "bfloat16" (parameters stay float32).
  m.init = "paper"  # "paper": orthogonal recurrent, N(0, 0.001^2) W_a/U_a, 0 v_a/biases, else N(0, 0.01^2).

  # ---------------------------------------------------------------- data
  d = c.data = ml_collections.ConfigDict()
  d.corpus = "synthetic"  # "synthetic" (embedded generator), "local" (text files) or "wmt14".
  d.src_vocab_size = 30_000  # Source ids including the 4 specials (pad, bos, eos, unk); per
  # source language with two of them (`input_pipeline.source_vocab_size`).
  d.tgt_vocab_size = 30_000  # Target ids including the 4 specials (paper: 30k shortlist).
  # (Either size 0, word tokenizer only: every word of the training side, no UNK in training.)
  d.tokenizer = "word"  # "word" (shortlist + <unk>) or "sentencepiece".
  d.pretokenizer = "none"  # Word splitting: "none" (whitespace) or "moses" (sacremoses, per lang).
  d.sp_model_type = (
    "unigram"  # SentencePiece model: "unigram" or "bpe" (tokenizer="sentencepiece" only).
  )
  # Subword regularisation (Kudo 2018; tokenizer="sentencepiece", unigram): "sample(alpha=0.1,
  # nbest_size=64)" segments each training pair anew every time it is drawn, from the model's
  # 64 best segmentations x with probability ~ P(x)**alpha (seeded per example and draw, so a
  # resumed run is bit-identical); validation, test and translation keep the deterministic
  # segmentation. "" turns it off.
  d.subword_sampling = ""
  d.max_len = 50  # Training pairs longer than this (either side, in tokens) are dropped: 30 or 50.
  d.batch_size = 80  # Sentence pairs per update (paper: 80).
  d.batching = "paper"  # "paper" (pool 20 batches, sort by length, split) or "tokens" (budget).
  d.pool_batches = 20  # Paper batching: batches drawn, sorted by length and split together.
  d.max_tokens = 4000  # Token-budget batching: tokens (padded target side) per batch.
  d.bucket_step = 10  # Pad lengths up to a multiple of this, bounding the compiled shapes.
  d.shuffle_seed = 0  # Seed of the training-order shuffle (folded with `seed`).
  d.cache_dir = ""  # Where built datasets go; "" means WORKDIR/data.
  d.train_pairs = 0  # Train on the first N training pairs only (vocabularies too); 0: all.
  d.long_test_min_words = 0  # Also evaluate test pairs of >= this many source words: test_long.
  d.long_test_max_words = 80  # ... and of at most this many (test_long is off while min is 0).
  # The embedded corpus (seq2seq/data/synthetic.py).
  d.synthetic = ml_collections.ConfigDict()
  d.synthetic.train_pairs = 100_000  # Training pairs generated.
  d.synthetic.valid_pairs = 1_000  # Validation pairs.
  d.synthetic.test_pairs = 2_000  # Test pairs.
  d.synthetic.vocab_size = 40_000  # Word types per language in the generated lexicon.
  d.synthetic.min_len = 3  # Shortest source sentence in words.
  d.synthetic.max_len = 80  # Longest source sentence in words.
  d.synthetic.seed = 1234  # Generator seed; the corpus is a pure function of it.
  # Local parallel text: PREFIX.SRC_LANG and PREFIX.TGT_LANG per split.
  d.local = ml_collections.ConfigDict()
  d.local.dir = "../shared/data/multi30k"  # Folder holding the split files.
  d.local.src_lang = "en"  # Source file suffix.
  d.local.tgt_lang = "fr"  # Target file suffix.
  d.local.train = "train"  # Training split prefix.
  d.local.valid = "val"  # Validation split prefix.
  d.local.test = "test_2016_flickr"  # Test split prefix.
  # Training alignments (Pharaoh), if any: a suffix (DIR/TRAIN.SUFFIX) or a file's path
  # (what `python -m seq2seq.build_alignments` writes).
  d.local.align = ""
  # WMT'14 English->French (seq2seq/data/wmt14.py): corpora named as in tfds, "+" between two.
  d.wmt14 = ml_collections.ConfigDict()
  # "tfds": tfds' WMT builder, prepared in data.cache_dir (downloads); "raw": statmt.org's files.
  d.wmt14.reader = "tfds"
  d.wmt14.dir = ""  # raw: the folder the WMT'14 archives were unpacked in.
  d.wmt14.train = "europarl_v7+commoncrawl+multiun+newscommentary_v9+gigafren"  # Training corpora.
  d.wmt14.valid = "newstest2013"  # Validation: the catalogue's; the paper's adds newstest2012.
  d.wmt14.test = "newstest2014"  # Test: raw also has newstest2014_full (test-full.tgz).

  # ---------------------------------------------------------------- training
  t = c.train = ml_collections.ConfigDict()
  t.optimizer = "adadelta"  # "adadelta" (paper), "adam" or "sgd".
  t.learning_rate = 1.0  # Step size (Adadelta: 1.0 as in the paper; Adam: e.g. 1e-3).
  t.adadelta_rho = 0.95  # Adadelta decay (paper: 0.95).
  t.adadelta_eps = 1e-6  # Adadelta epsilon (paper: 1e-6).
  # Adam's decay of the mean and of the second moment, and its epsilon (Kingma and Ba 2015's;
  # Vaswani et al. 2017 take b2 = 0.98, eps = 1e-9).
  t.adam_b1 = 0.9
  t.adam_b2 = 0.999
  t.adam_eps = 1e-8
  t.warmup_steps = 0  # Linear learning-rate warm-up steps.
  # Schedule after warm-up: "constant", "rsqrt", "halving(after=A, every=E)": the rate halves
  # after update A and every E updates after (Luong et al.: after epoch 5, each epoch), or
  # "plateau(metric=loss, factor=F, patience=P, min_delta=D, cooldown=C)": the rate is
  # multiplied by F after P evaluations without a gain of more than D (optax's reduce_on_plateau).
  t.decay = "constant"
  # Anneal the learning rate over the budget: "none", "linear" or "cosine" from 1x down to
  # `anneal_to` x, by the share spent of num_steps or of the wall clock (max_minutes), whichever
  # is larger, so a run its wall-clock budget stops ends annealed (it then follows the clock:
  # not bit-reproducible).
  t.anneal = "none"
  t.anneal_to = 0.0
  t.clip_norm = 1.0  # Global gradient-norm clip (paper: 1); 0 disables.
  t.label_smoothing = 0.0  # Label smoothing of the cross-entropy (paper: 0).
  # The training softmax (seq2seq/training/softmax.py): "full", or "sampled(size=4096)" over the batch's
  # target words plus uniformly drawn others (Jean et al. 2015); evaluation always uses "full".
  t.softmax = "full"
  # Keep an exponential moving average of the parameters with this decay (0: none); validation,
  # evaluation and translation then use it (decay min(d, (1 + step) / (10 + step)) per update).
  t.ema_decay = 0.0
  # The summed loss divided by the batch's target "tokens", or by its "sentences" (GroundHog's
  # cost: summed over a sentence's words, mean over sentences; the paper's configs use it).
  t.loss_normalization = "tokens"
  # Terms added to the cross-entropy (seq2seq/training/objective.py), "+"-joined specs; "" is none. The
  # model implies some (REINFORCE for hard attention, the bonus of agreement runs): list those
  # only to change their settings.
  t.loss_terms = ""  # E.g. "fertility(weight=0.1)", "supervision(weight=1.0, loss=mse)".
  t.num_steps = 10_000  # Updates to run.
  # Compute each update's gradient over this many slices of the batch, one after another: the
  # same update (to rounding) in a fraction of the memory (gradient accumulation).
  t.micro_batches = 1
  t.max_minutes = (
    0.0  # Wall-clock budget over all invocations of a run (checkpoint, then evaluate); 0: none.
  )
  t.log_every = 100  # Steps between train metric lines.
  t.eval_every = 1000  # Steps between validation passes.
  t.checkpoint_every = 1000  # Steps between checkpoints (and one at the end).
  t.keep_checkpoints = 3  # Checkpoints kept on disk.
  t.valid_bleu = True  # Greedy validation BLEU at every evaluation; the best checkpoint is kept.
  # Stop once a validation metric stops improving (seq2seq/training/early_stopping.py): "" trains the whole
  # budget; "early(metric=bleu|chrf|loss, patience=N, min_delta=D)" stops after N evaluations
  # in a row without a gain of more than D.
  t.early_stopping = ""
  t.final_eval = True  # After training, decode and score valid and test (WORKDIR/eval/).
  # Copy the config, every metric and the final results to an experiment tracker
  # (seq2seq/training/trackers.py): "" is none; "mlflow(uri=U, experiment=E)" logs to MLflow,
  # by default its file store in WORKDIR/mlruns (uri: a folder or a tracking URI).
  t.tracker = ""
  t.nonfinite = (
    "stop"  # Non-finite loss/gradient: "stop" (error, last good checkpoint kept) or "skip".
  )

  # ---------------------------------------------------------------- decoding
  dec = c.decode = ml_collections.ConfigDict()
  dec.beam_size = 12  # Beam width (paper: 12); 1 is greedy.
  dec.max_len_ratio = 2.0  # Longest output as a multiple of the source length (plus 10).
  # What finished outputs are ranked by (seq2seq/decoding/length_penalties.py): "power(alpha=A)" divides
  # the score by length**A (A = 1: GroundHog's), "gnmt(alpha=A)" by ((5 + length) / 6)**A,
  # "word(penalty=P)" subtracts P per token, "none" ranks by the score alone.
  dec.length_penalty = "power"
  dec.coverage_penalty = 0.0  # GNMT coverage penalty beta (0: off).
  dec.batch_size = 64  # Sentences decoded together (at most; their rows: see max_tokens).
  # The order sentences are decoded in: "length" longest first, so a batch holds sentences of
  # about one length and wastes little on padding, or "file"; outputs keep the input's order.
  dec.order = "length"
  # Source tokens of a batch, padding included (rows x padded length): a batch of long
  # sentences then takes fewer rows (batch_size halved until it fits); 0: batch_size rows always.
  dec.max_tokens = 0
  # Translation leaves a line of more tokens than this untranslated, with a warning (search's
  # memory grows with the square of a sentence's length); 0: no limit.
  dec.max_input_tokens = 250
  # Evaluate and translate with the ensemble of these runs (comma-separated workdirs sharing the
  # vocabularies) instead of the workdir's own checkpoint (seq2seq/decoding/ensemble.py); "" is none.
  dec.ensemble = ""
  dec.ensemble_combination = "mean_prob"  # "mean_prob" (log of the mean) or "mean_logprob".
  dec.ensemble_attention = "mean"  # The attention reported: "mean" over members, or an index.
  # Shortlist decoding: a lexical table (python -m seq2seq.build_lexicon writes WORKDIR/lexicon.npz);
  # the output layer then runs over a shortlist only: the specials, the `shortlist_frequent`
  # most frequent target words and each source word's `shortlist_per_word` best translations.
  # Scores are then log-probabilities normalised over the shortlist, in decoding and in score
  # mode alike. "" decodes over the full vocabulary.
  dec.shortlist = ""
  dec.shortlist_frequent = 1000
  dec.shortlist_per_word = 10
  # "batch": one shortlist from all the batch's source words (Marian's and Sockeye's way); a
  # sentence's output can then depend on its batch-mates. "sentence": each sentence decodes over
  # the candidates of its own source words (Jean et al. 2015), the same alone or in any batch.
  dec.shortlist_scope = "batch"
  # Sample instead of searching (seq2seq/decoding/sampling.py): "" searches (beam_size); a spec
  # "sample(n=16, temperature=1.0, top_k=0, top_p=1.0, epsilon=0.0, seed=0)" draws n outputs per
  # sentence (the best of them the translation, all of them the --nbest list).
  dec.sampling = ""
  # Minimum Bayes risk (seq2seq/decoding/mbr.py): "" keeps the search's order; "mbr(utility=chrf|bleu,
  # evidence=uniform|model)" picks, of the samples or the beam's n-best, the one of highest
  # expected utility over all the candidates, itself included (evidence=model: n-best only).
  dec.mbr = ""
  # The search (seq2seq/decoding/): "" is the one the settings above imply (greedy at beam_size
  # 1, beam search wider or with constraints, sampling with `sampling`); or a registered search
  # by name, e.g. "diverse(groups=4, strength=0.5)" (`python -m seq2seq.settings` lists them).
  dec.search = ""
  dec.replace_unk = False  # Replace each <unk> output by the source word it attends to most.
  dec.num_heatmaps = 8  # Alignment heatmaps drawn per evaluated split (first N sentences).
  # Attribution beside attention in the explorer: "" none, or "saliency(method=grad_x_input|
  # grad_norm|integrated_gradients, samples=N, noise=F)" (seq2seq/decoding/attribution.py), one
  # map more per evaluated output, at T backward passes per sentence and sample.
  dec.saliency = ""
  return c

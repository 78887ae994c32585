"""seq2seq-attention: RNNsearch, RNNencdec and alignment models in JAX/Flax NNX."""

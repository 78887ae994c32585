"""The model: layers, the attention families (scores, structures, normalisers, alignment
features), encoders, decoders, add-ons and the model classes that assemble them.

Imports only `seq2seq.common` and `seq2seq.data`."""

"""The text: vocabularies and tokenizers, the corpora (tfds builders and the embedded generator),
the grain input pipeline, lexical tables, copying's source-to-target map and the metrics over text
and word links.

Imports only `seq2seq.common`."""

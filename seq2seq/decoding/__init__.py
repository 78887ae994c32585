"""Decoding: greedy, sampling and beam searches with their length penalties, lexical constraints
and shortlists, forced scoring, minimum Bayes risk, ensembles, and a split decoded and scored.

Imports only the folders below it (`common`, `data`, `model`, `training`)."""

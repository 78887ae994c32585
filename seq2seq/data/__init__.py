"""Corpora the project can train on: the embedded generator and dataset builders."""

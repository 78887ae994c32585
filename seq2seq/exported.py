"""Runs a model written by `python -m seq2seq.export`, with JAX and NumPy alone.

    from seq2seq import exported  # or, where the project is not installed: DIR/exported.py
    model = exported.load("runs/demo-export")
    model.translate(["the cat sleeps ."])  # beam search
    model.translate(["the cat sleeps ."], beam=False)  # greedy search

This module imports the standard library, NumPy and JAX, and SentencePiece or sacremoses only
for a vocabulary that needs them; nothing of the project, so the export copies it into its
folder. It batches and pads sentences as the Translator does (`batches`, `manifest.json`'s
rules), so its translations are `seq2seq.load(run).translate`'s.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.export
import numpy as np

FORMAT = 1  # manifest.json's format, which this loader reads.
MANIFEST = "manifest.json"
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")  # Ids 0 to 3.
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)


class Vocabulary:
  """Text to ids and back, as the run's tokenizer: words (split on whitespace or by Moses) or
  SentencePiece, read from a vocabulary folder (tokenizer.json, vocab.txt or spm.model)."""

  def __init__(self, directory: str | Path):
    directory = Path(directory)
    meta = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
    self.kind, self.size = meta["kind"], int(meta["size"])
    if self.kind == "word":
      lines = (directory / "vocab.txt").read_text(encoding="utf-8").split("\n")
      self.pieces = lines[:-1] if lines and lines[-1] == "" else lines
      if tuple(self.pieces[:4]) != SPECIALS:
        raise ValueError(f"{directory}/vocab.txt does not start with {SPECIALS}")
      self.ids = {w: i for i, w in enumerate(self.pieces[4:], start=4)}
      self.ids[SPECIALS[UNK_ID]] = UNK_ID
      self.moses = None  # (tokenizer, detokenizer) of sacremoses for a Moses-split vocabulary.
      if meta.get("pretokenizer", "none") == "moses":
        import sacremoses

        lang = meta.get("lang", "") or "en"
        self.moses = sacremoses.MosesTokenizer(lang), sacremoses.MosesDetokenizer(lang)
    elif self.kind == "sentencepiece":
      import sentencepiece

      model = (directory / "spm.model").read_bytes()
      self.sp = sentencepiece.SentencePieceProcessor(model_proto=model)
    else:
      raise ValueError(f"{directory}: unknown vocabulary kind {self.kind!r}")

  def encode(self, text: str) -> list[int]:
    """The ids of `text`, without BOS or EOS."""
    if self.kind == "sentencepiece":
      return self.sp.encode(text, out_type=int)
    if self.moses:
      words = self.moses[0].tokenize(text, escape=False)
    else:
      words = text.split()
    return [self.ids.get(w, UNK_ID) for w in words]

  def decode(self, ids: Sequence[int]) -> str:
    """The text of output `ids`: cut at EOS, PAD and BOS dropped, unused ids read as <unk>."""
    kept = []
    for i in ids:
      if i == EOS_ID:
        break
      if i not in (PAD_ID, BOS_ID):
        kept.append(int(i))
    if self.kind == "sentencepiece":
      pieces = self.sp.get_piece_size()
      return self.sp.decode_pieces([self.sp.id_to_piece(i if i < pieces else UNK_ID) for i in kept])
    words = [self.pieces[i] if i < len(self.pieces) else SPECIALS[UNK_ID] for i in kept]
    if self.moses:
      return self.moses[1].detokenize(words)
    return " ".join(words)


@dataclasses.dataclass(frozen=True)
class Translation:
  """One sentence's output, as the program found it."""

  text: str
  ids: list[int]  # Output ids, EOS left out.
  score: float  # log p(ids, EOS | source).
  norm_score: float  # What beam search ranks by.
  finished: bool  # False: cut at the length limit without EOS.


def round_up(n: int, step: int) -> int:
  """The smallest multiple of `step` that is >= max(n, 1)."""
  return -(-max(int(n), 1) // step) * step


def batches(lengths: Sequence[int], batching: dict[str, Any]) -> Iterator[list[int]]:
  """The sentences of `lengths` (their token counts) in decoding batches, as index lists; a
  batch's rows are `len(list)` rounded up by `rows`. Longest first for order "length", in at
  most batch_size sentences, or under the max_tokens budget (rows times padded columns)."""
  size, step, budget = batching["batch_size"], batching["bucket_step"], batching["max_tokens"]
  order = np.arange(len(lengths))
  if batching["order"] == "length":
    order = np.argsort(-np.asarray(lengths, np.int64), kind="stable")
  order = [int(i) for i in order]
  if not budget:
    for start in range(0, len(order), size):
      yield order[start : start + size]
    return
  columns = [round_up(lengths[i] + 1, step) for i in order]
  start = 0
  while start < len(order):
    end, widest = start + 1, columns[start]
    while end < len(order) and end - start < size:
      wider = max(widest, columns[end])
      if rows(end + 1 - start, batching) * wider > budget:
        break
      end, widest = end + 1, wider
    yield order[start:end]
    start = end


def rows(n: int, batching: dict[str, Any]) -> int:
  """The rows of a batch of `n` sentences: batch_size, or under a budget the fewest of
  batch_size and its halvings that hold them."""
  size = batching["batch_size"]
  if not batching["max_tokens"]:
    return size
  sizes, r = [], size
  while r >= 1:
    sizes.append(r)
    r //= 2
  return min(s for s in sizes if s >= n)


def padded(ids: Sequence[Sequence[int]], n_rows: int, step: int) -> tuple[np.ndarray, np.ndarray]:
  """(src [rows, S], src_mask [rows, S]) int32: each sentence's ids and EOS, PAD after, the rows
  beyond the sentences empty; S the longest + 1 rounded up to a multiple of `step`."""
  width = round_up(max(len(x) for x in ids) + 1, step)
  src = np.zeros((n_rows, width), np.int32)
  mask = np.zeros((n_rows, width), np.int32)
  for row, x in enumerate(ids):
    src[row, : len(x) + 1] = [*x, EOS_ID]
    mask[row, : len(x) + 1] = 1
  return src, mask


class Model:
  """An exported model: its programs, parameters, vocabularies and manifest."""

  def __init__(self, directory: str | Path):
    directory = Path(directory)
    self.manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    if self.manifest.get("format") != FORMAT:
      raise ValueError(f"{directory}: manifest format {self.manifest.get('format')}, not {FORMAT}")
    specials = self.manifest["special_ids"]
    if (specials["pad"], specials["bos"], specials["eos"], specials["unk"]) != (0, 1, 2, 3):
      raise ValueError(f"{directory}: special ids {specials}, not 0 to 3")
    with np.load(directory / self.manifest["params"]["file"]) as saved:
      self.params = jax.device_put({name: saved[name] for name in saved.files})
    self.programs = {
      name: jax.export.deserialize(bytearray((directory / entry["file"]).read_bytes()))
      for name, entry in self.manifest["programs"].items()
    }
    vocab = self.manifest["vocab"]
    self.src_vocab = Vocabulary(directory / vocab["src"]["dir"])
    self.tgt_vocab = Vocabulary(directory / vocab["tgt"]["dir"])

  def _sources(self, sentences: Sequence[str]) -> list[list[int] | None]:
    """Each sentence's ids; None for a blank one or one over max_input_tokens, which get no
    translation. Sentences over max_source_tokens are cut there."""
    longest, limit = self.manifest["max_input_tokens"], self.manifest["max_source_tokens"]
    out = []
    for text in sentences:
      ids = self.src_vocab.encode(text) if text.strip() else None
      if ids is not None and longest and len(ids) > longest:
        ids = None
      out.append(ids if ids is None or limit is None else ids[:limit])
    return out

  def search(
    self, sentences: Sequence[str], *, beam: bool = True, max_len_ratio: float | None = None
  ) -> list[Translation | None]:
    """Each sentence's `Translation` by beam search (the width the export chose) or greedy
    search (`beam` False), None where it gets none; `max_len_ratio` in place of the run's."""
    program = self.programs["beam" if beam else "greedy"]
    ratio = self.manifest["max_len"]["max_len_ratio"] if max_len_ratio is None else max_len_ratio
    batching = self.manifest["batching"]
    sources = self._sources(sentences)
    kept = [i for i, ids in enumerate(sources) if ids is not None]
    out: list[Translation | None] = [None] * len(sentences)
    for batch in batches([len(sources[i]) for i in kept], batching):
      chosen = [kept[b] for b in batch]
      step = batching["bucket_step"]
      src, mask = padded([sources[i] for i in chosen], rows(len(chosen), batching), step)
      steps = np.zeros(int(ratio * src.shape[1]) + 10, np.int8)
      found = jax.device_get(program.call(self.params, src, mask, steps))
      for row, i in enumerate(chosen):
        n = int(found["lengths"][row])
        tokens = [int(t) for t in found["tokens"][row, :n]]
        ids = [t for t in tokens if t not in (EOS_ID, PAD_ID)]
        finished = bool(n) and tokens[-1] == EOS_ID
        score, norm = float(found["scores"][row]), float(found["norm_scores"][row])
        out[i] = Translation(self.tgt_vocab.decode(ids), ids, score, norm, finished)
    return out

  def translate(
    self, sentences: Sequence[str], *, beam: bool = True, max_len_ratio: float | None = None
  ) -> list[str]:
    """Each sentence's translation as text ("" where it gets none: a blank sentence, or one
    over max_input_tokens), by beam search or greedy search (`beam` False)."""
    found = self.search(sentences, beam=beam, max_len_ratio=max_len_ratio)
    return [t.text if t is not None else "" for t in found]

  def encode(self, sentences: Sequence[str]) -> list[np.ndarray | None]:
    """Each sentence's annotations [tokens + 1, H] (its tokens and EOS), None as `search`."""
    sources = self._sources(sentences)
    out: list[np.ndarray | None] = [None] * len(sentences)
    for i, ids in enumerate(sources):
      if ids is not None:
        src, mask = padded([ids], 1, self.manifest["batching"]["bucket_step"])
        found = self.programs["encoder"].call(self.params, src, mask)
        out[i] = np.asarray(found["annotations"][0, : len(ids) + 1])
    return out


def load(directory: str | Path) -> Model:
  """The model exported to `directory` (`python -m seq2seq.export`), ready to translate."""
  return Model(directory)

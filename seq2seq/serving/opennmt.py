"""OpenNMT-py's REST translation format, which computer-assisted-translation tools call:
`POST /translator/translate` with a JSON list of `{"src": TEXT, "id": MODEL_ID}`, answered with
a list holding, for each rank of the n best, one entry per input in input order: `src`, `tgt`,
`n_best`, `pred_score` and, where the model gives word links, `align` (a list with the
Pharaoh links `"i-j ..."` of the hypothesis). This service holds one model: every `id` names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ROUTE = "/translator/translate"


class FormatError(ValueError):
  """A body that is not the format's: the message, and the field at fault (or None)."""

  def __init__(self, message: str, field: str | None = None):
    super().__init__(message)
    self.field = field


def sources(data: Any) -> list[str]:
  """The source texts of a request body (parsed JSON), in order; FormatError if it is not a
  non-empty list of objects each with a text `src` and at most an integer `id` beside it."""
  if not isinstance(data, list) or not data:
    raise FormatError('the body must be a non-empty JSON list of {"src": ..., "id": ...}')
  texts = []
  for i, entry in enumerate(data):
    if not isinstance(entry, dict) or not isinstance(entry.get("src"), str):
      raise FormatError('each entry must be an object with a text "src"', f"[{i}].src")
    if "id" in entry and (isinstance(entry["id"], bool) or not isinstance(entry["id"], int)):
      raise FormatError('"id" must be an integer (the model\'s; this service has one)', f"[{i}].id")
    unknown = sorted(set(entry) - {"src", "id"})
    if unknown:
      raise FormatError(f"unknown field {unknown[0]!r}", f"[{i}].{unknown[0]}")
    texts.append(entry["src"])
  return texts


def answer(
  texts: Sequence[str], hypotheses: Sequence[Sequence[dict[str, Any]]]
) -> list[list[dict[str, Any]]]:
  """The format's answer: `hypotheses[i]` are input i's n best as the service writes them
  (`text`, `score`, and `word_alignments` when the model has links)."""
  n_best = min(len(h) for h in hypotheses)
  out: list[list[dict[str, Any]]] = [[] for _ in range(n_best)]
  for src, hyps in zip(texts, hypotheses, strict=True):
    for rank, h in enumerate(hyps[:n_best]):
      entry = {"src": src, "tgt": h["text"], "n_best": n_best, "pred_score": h["score"]}
      if "word_alignments" in h:
        entry["align"] = [h["word_alignments"]]
      out[rank].append(entry)
  return out

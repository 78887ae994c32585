"""Translate and score modes, and the `Translator` that `seq2seq.load` hands out.

A `Translator` is a trained run loaded for use: its best (else latest) checkpoint, vocabularies
and config. `translate_lines` gives the N best translations of raw sentences and `score_lines`
the log-probabilities of given translations (forced decoding); main.py's modes
(`translate_file`, `score_file`) and the Python API (`Translator.translate`, `.score`) are both
these two functions, so the command line and a notebook get the same numbers.

Input is tokenised the way training text was (the run's saved vocabularies). Invalid UTF-8 is
decoded with replacement characters (counted and logged), never a crash. Both modes read,
decode and write their files `CHUNK_LINES` lines at a time (`read_chunks`), so memory stays
bounded for an input of any length; within a chunk sentences are decoded longest first
(`decode.order`) and written in the input's order.

translate (`--mode=translate`): one output line per input line; an empty (or blank) input line,
or one with a blank source of a multi-source run, gives an empty output line. Lines longer than
the model can address (only the `location` score has a limit, `location(max_len=N)`) are
truncated with a warning. A line longer than `decode.max_input_tokens` tokens is left
untranslated (an empty output line, a warning naming it); every other line is translated in
full. With `--nbest=N`
(N <= decode.beam_size) the output is an n-best list (`NBEST_FORMAT`).

score (`--mode=score`): one JSON object per pair of source and target lines (`score_record`).
A pair with an empty side, or whose source the model cannot address, is reported on its line
with the reason (`error`) and no score; nothing is truncated, since that would change the score.

Scores are log-probabilities normalised over the full target vocabulary, or, when the run
decodes with a shortlist (`decode.shortlist`), over that shortlist, in both modes alike, so a
translation scores the same in score mode as its search reported (with
`decode.shortlist_scope="sentence"` whatever the batches; with "batch", when the batch is the
same). Every record says which (`normalised_over`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from absl import logging

from seq2seq import checkpoints, restoring, settings
from seq2seq import sharding as rt
from seq2seq.common import files
from seq2seq.data import builders, copying, input_pipeline
from seq2seq.data import tokenizer as tok
from seq2seq.decoding import attribution, core, decode, ensemble, inference, processes
from seq2seq.decoding import constraints as constraints_
from seq2seq.decoding.inference import Hypothesis, Scored
from seq2seq.model import models, scores

NBEST_FORMAT = "{index} ||| {text} ||| {score:.6f} ||| {norm_score:.6f}"
NBEST_SEPARATOR = " ||| "


class Translator:
  """A trained run ready to translate and score: its typed settings `run` (from a config, or
  given typed by a caller that validated it, `settings.validate`), the restored model `state`
  (best checkpoint, else latest) and the source and target tokenizers.

  An agreement run uses its `model.direction` model ("reverse": target-language text in,
  source language out), as evaluation does.
  """

  def __init__(self, config: settings.Config, workdir: str | Path):
    self.run = settings.validate(config)  # Before loading anything.
    config = self.run.config
    self.decoding = self.run.decode  # What a call changes from.
    if not ensemble.workdirs(self.decoding):  # (An ensemble's members load their own configs.)
      checkpoints.check_model_config(Path(workdir), config)
    ensemble.prepare_workdir(self.decoding, workdir)  # An ensemble's vocabularies, checked.
    workdir = Path(workdir)
    self.workdir = workdir
    vocab = {side: tok.load(workdir / "vocab" / side) for side in ("src", "tgt")}
    state = restoring.restore_for_eval(
      self.run, workdir, vocab["src"].size, vocab["tgt"].size, rt.Runtime()
    )
    self.config = config  # What `decoding_with` changes and validates again.
    self._decodings: dict[tuple, decode.DecodeSettings] = {}  # `decoding_with`'s, by settings.
    self.state = rt.host_local(restoring.direction_state(state, self.run.model.direction))
    self.src_tok, self.tgt_tok = vocab["src"], vocab["tgt"]
    if self.run.model.direction == "reverse":  # Target-language text in, source language out.
      self.src_tok, self.tgt_tok = self.tgt_tok, self.src_tok
    self.score_spec = self.run.model.score
    positions = scores.get(self.score_spec.name).source_limit(self.score_spec.settings)
    # The most source tokens the model can address (room left for EOS); None: no limit.
    self.max_source_tokens = None if positions is None else positions - 1

  def translate(
    self,
    sentences: Sequence[str],
    *,
    nbest: int = 1,
    prefixes: Sequence[str] | None = None,
    constraints: Sequence[Sequence[str]] | None = None,
    **decode_settings: Any,
  ) -> list[list[Hypothesis]]:
    """The `nbest` best translations of each sentence, best first (`translate_lines`), with
    the run's decode settings or those given (`beam_size=5`, any `decode.*` field); each
    starting with its sentence's prefix, or containing its sentence's constraint phrases, where
    those are given."""
    guide = {"prefixes": prefixes, "constraints": constraints}
    return translate_lines(self, sentences, nbest=nbest, **guide, **decode_settings)[0]

  def decoding_with(self, **decode_settings: Any) -> decode.DecodeSettings:
    """The run's decoding settings with `decode_settings` (decode.* fields) in place of its own,
    validated as a config is; the run's own when none is given. What picks the models (the
    ensemble settings) is fixed when the run loads: ValueError for those, and for a name that is
    no decode field."""
    if not decode_settings:
      return self.decoding
    if unknown := sorted(set(decode_settings) - set(self.config.decode)):
      raise ValueError(f"not decode settings: {', '.join(unknown)}")
    if fixed := sorted(k for k in decode_settings if k.startswith("ensemble")):
      raise ValueError(f"decode.{fixed[0]} is fixed when the run loads: pass it to seq2seq.load")
    try:  # Validating a config takes about a millisecond: a service asks this for every request.
      key = tuple(sorted((k, type(v).__name__, v) for k, v in decode_settings.items()))
      hash(key)  # (The type keeps 1 and True apart.)
    except TypeError:
      key = None  # An unhashable value (a list): validated, not kept.
    if key in self._decodings:
      return self._decodings[key]
    config = self.config.copy_and_resolve_references()
    config.decode.update(decode_settings)
    dec = settings.validate(config).decode
    if key is not None and len(self._decodings) < 256:
      self._decodings[key] = dec
    return dec

  def score(self, sources: Sequence[str], targets: Sequence[str]) -> list[Scored]:
    """Each target's log-probabilities given its source (`score_lines`)."""
    return score_lines(self, sources, targets)


def _split(src: list[list[list[int]]], tgt: list[list[int]]) -> input_pipeline.Split:
  """The pairs as a split: `src` holds each line's sources' ids (one list per source)."""
  ragged = input_pipeline.Ragged.from_lists
  src2 = ragged([ids[1] for ids in src]) if src and len(src[0]) > 1 else None
  return input_pipeline.Split(
    "given", ragged([ids[0] for ids in src]), ragged(tgt), np.arange(len(src)), src2=src2
  )


def _sources(t: Translator, line: str) -> list[str]:
  """The texts of `line`'s sources: the line itself, or for a multi-source run its sources
  joined by `builders.SOURCE_SEPARATOR` (`read_sources` joins one file per language); ValueError
  where a line holds another number of them."""
  count = t.run.data.sources
  texts = builders.split_sources(line, count)
  if len(texts) != count:
    raise ValueError(
      f"this run reads {count} sources per line, joined by builders.SOURCE_SEPARATOR "
      f"({builders.SOURCE_SEPARATOR!r}); the line {line!r} holds {len(texts)}"
    )
  return texts


def _blank(t: Translator, line: str) -> bool:
  """Whether any source of `line` is blank (such a line gets no translation, as training skips
  such pairs)."""
  return not line.strip() or not all(text.strip() for text in _sources(t, line))


def _encode_sources(t: Translator, line: str) -> list[list[int]]:
  """The ids of each source of `line` (`_sources`)."""
  return [t.src_tok.encode(text) for text in _sources(t, line)]


def translate_lines(
  t: Translator,
  lines: Sequence[str],
  *,
  nbest: int = 1,
  prefixes: Sequence[str] | None = None,
  constraints: Sequence[Sequence[str]] | None = None,
  progress: str | None = "translating",
  first_line: int = 1,
  **decode_settings: Any,
) -> tuple[list[list[Hypothesis]], dict[str, int]]:
  """([the `nbest` best `Hypothesis` of each line, best first], counts of lines "truncated"
  and left "too_long").

  `prefixes` (a text per line, "" for none): each translation of a line starts with its
  prefix's words, which count in its score (`core.forced_words`) and which `replace_unk`
  leaves alone. `constraints` (a list of phrases per line, [] for none): each translation
  contains every phrase of its line, as consecutive words (`seq2seq.decoding.constraints`); beam
  search then runs even at beam size 1. The two are not combined, nor used with a shortlist, and
  constraints not with sampling (ValueError, as for a prefix or phrases too long for the line's
  length limit, a prefix or phrase with a word outside the target vocabulary, or a list of
  another length than `lines`).

  `decode_settings` (decode.* fields, `Translator.decoding_with`) replace the run's for this
  call; 1 <= nbest <= decode.beam_size (ValueError otherwise). Progress shows on the console
  under the label `progress` (None: not shown). A blank line gets no hypothesis ([]); a list is
  shorter than `nbest` only where fewer hypotheses finished within the length limit
  (`beams.nbest_of_pool`). Lines longer than the model can address are truncated, with a
  warning. A line of more than `decode.max_input_tokens` tokens (in any source) is not decoded:
  it gets no hypothesis, and a warning names it (search memory grows with the square of a
  sentence's length, and its batch's padding with it, so one such line would sink the file).
  Warnings and errors number `lines[0]` `first_line` (a chunk of a file: its place there).

  The lines are decoded in `decode.order` (by default longest first, `inference`), within this
  call: `translate_file` calls it for one chunk of a file at a time.
  """
  dec = t.decoding_with(**decode_settings)
  dec.check_nbest(nbest)
  guides = _guides(t, dec, lines, prefixes, constraints, first_line)
  ids, keep, truncated, too_long = _encode_lines(t, dec, lines)
  longest = dec.max_input_tokens
  if truncated:
    logging.warning(
      "%d lines truncated to the %s score's %d tokens", truncated, t.score_spec, t.max_source_tokens
    )
  if too_long:
    numbers = (str(i + first_line) for i in too_long[:10])
    shown = ", ".join(numbers) + (" ..." if len(too_long) > 10 else "")
    logging.warning(
      "%d lines of more than decode.max_input_tokens=%d tokens left untranslated (empty output "
      "lines): line %s",
      len(too_long),
      longest,
      shown,
    )
  for i, encoded in zip(keep, ids, strict=True):
    _check_fits(guides, i, encoded, dec, first_line)
  # MBR chooses among every candidate, so it decodes them all and keeps `nbest` of its order.
  wanted = dec.candidates() if dec.mbr else nbest
  prefix_ids = [guides.prefixes[i] if guides.prefixes else [] for i in keep]
  found = inference.nbest_split(
    t.state,
    _split(ids, prefix_ids),
    dec,
    wanted,
    progress=progress,
    prefixes=guides.prefixes is not None,
    constraints=None if guides.constraints is None else [guides.constraints[i] for i in keep],
  )
  out: list[list[Hypothesis]] = [[] for _ in lines]
  replace_unk = dec.replace_unk
  for i, hyps, prefix in zip(keep, found, prefix_ids, strict=True):
    hyps = [
      inference.with_text(h, lines[i], t.src_tok, t.tgt_tok, replace_unk, forced=len(prefix))
      for h in hyps
    ]
    out[i] = inference.mbr_reordered(hyps, [h.text for h in hyps], dec)[:nbest]
  return out, {"truncated": truncated, "too_long": len(too_long)}


def output_limits(t: Translator, lines: Sequence[str], **decode_settings: Any) -> list[int | None]:
  """The most output steps (EOS included) that `translate_lines` with `decode_settings` gives
  each of `lines` (None for a line it does not decode): its batch's limit, which follows the
  longest source in the batch (`inference.output_limits`). Where two decoding orders give a line
  different limits, its translations can differ only if the shorter limit cut one (left it
  unfinished) or the other needed more steps (tests/decoding/test_inference.py)."""
  dec = t.decoding_with(**decode_settings)
  ids, keep, _, _ = _encode_lines(t, dec, lines)
  limits = inference.output_limits(_split(ids, [[] for _ in ids]), dec)
  out: list[int | None] = [None] * len(lines)
  for i, limit in zip(keep, limits, strict=True):
    out[i] = int(limit)
  return out


def _encode_lines(
  t: Translator, dec: decode.DecodeSettings, lines: Sequence[str]
) -> tuple[list[list[list[int]]], list[int], int, list[int]]:
  """(the ids of each line's sources, the indices of those lines, how many were truncated to
  what the model can address, the indices of the lines over `decode.max_input_tokens`): blank
  lines and lines too long are left out."""
  ids, keep, truncated, too_long = [], [], 0, []
  longest, limit = dec.max_input_tokens, t.max_source_tokens
  for i, line in enumerate(lines):
    if _blank(t, line):
      continue
    encoded = _encode_sources(t, line)
    if longest and max(len(e) for e in encoded) > longest:
      too_long.append(i)
      continue
    if limit is not None and any(len(e) > limit for e in encoded):
      truncated += 1
      encoded = [e[:limit] for e in encoded]
    ids.append(encoded)
    keep.append(i)
  return ids, keep, truncated, too_long


def beam_view(t: Translator, line: str, *, prefix: str = "", **decode_settings: Any) -> dict:
  """What beam search did for `line`, step by step, as JSON for the explorer's beam view:
  {"source": the attention columns' tokens, "beam_size", "length_penalty", "translation": the
  best (`Hypothesis` fields), "steps": per step t, "live": the hypotheses kept (slot, the slot
  of step t - 1 it extends as "from", tokens, score) and "finished": the extensions by EOS
  (from, tokens, score, norm_score, "entered": whether they entered the pool of finished
  hypotheses), and "winner": [step, "finished" or "live", index] of the translation}.

  The run's decode settings, or those given, apply (one line, batch size 1); `prefix` forces the
  first words as in `translate_lines`. At beam size 1 it shows greedy search's one path, which
  translation runs at that width (`_greedy_steps`). Sampling and MBR are refused (ValueError)."""
  dec = t.decoding_with(**{"batch_size": 1, **decode_settings})
  if dec.sampling or dec.mbr:
    raise ValueError("the beam view shows search: decode without sampling or MBR")
  guides = _guides(t, dec, [line], [prefix] if prefix else None, None)
  ids, keep, _, too_long = _encode_lines(t, dec, [line])
  if not keep:
    why = "over decode.max_input_tokens" if too_long else "blank"
    raise ValueError(f"no beam to show: the line is {why}")
  _check_fits(guides, 0, ids[0], dec, 1)
  prefix_ids = guides.prefixes[0] if guides.prefixes else []
  if dec.beam_size == 1:
    return _view(t, line, dec, *_greedy_steps(t, line, dec, ids, prefix_ids))
  [(best, steps)] = inference.traced_split(
    t.state, _split(ids, [prefix_ids]), dec, prefixes=bool(prefix_ids)
  )
  best = inference.with_text(
    best, line, t.src_tok, t.tgt_tok, dec.replace_unk, forced=len(prefix_ids)
  )
  words = lambda ids: inference.output_tokens(ids, line, t.src_tok, t.tgt_tok)
  found = np.isfinite(steps.scores).any(1) | np.isfinite(steps.eos_scores).any(1)
  count = int(np.flatnonzero(found).max()) + 1 if found.any() else 0
  k = steps.scores.shape[1]
  before: list[list[int]] = [[] for _ in range(k)]  # Each live slot's tokens after step t - 1.
  rows, winner = [], None
  for step in range(count):
    finished = []
    for slot in range(k):
      if np.isfinite(steps.eos_scores[step, slot]):
        if best.finished and before[slot] == best.ids and step == len(best.ids):
          winner = [step, "finished", len(finished)]
        finished.append(
          {
            "from": slot,
            "tokens": [*words(before[slot]), tok.EOS],
            "score": float(steps.eos_scores[step, slot]),
            "norm_score": float(steps.eos_norm[step, slot]),
            "entered": bool(steps.entered[step, slot]),
          }
        )
    after, live = [], []
    for slot in range(k):
      origin = int(steps.origins[step, slot])
      after.append([*before[origin], int(steps.tokens[step, slot])])
      if np.isfinite(steps.scores[step, slot]):
        if not best.finished and step == count - 1 and after[slot] == best.ids:
          winner = [step, "live", len(live)]
        live.append(
          {
            "slot": slot,
            "from": origin,
            "tokens": words(after[slot]),
            "score": float(steps.scores[step, slot]),
          }
        )
    rows.append({"live": live, "finished": finished})
    before = after
  return _view(t, line, dec, best, rows, winner)


def _greedy_steps(t: Translator, line: str, dec: decode.DecodeSettings, ids, prefix_ids):
  """(greedy's translation of `line`, its steps as the beam view shows them, the winner). A beam
  of one is not greedy: it keeps the ends with EOS it passed and may return an earlier one. Each
  step keeps one hypothesis, scored by forced decoding; the last step ends it with EOS."""
  split = _split(ids, [prefix_ids])
  [[best]] = inference.nbest_split(t.state, split, dec, 1, prefixes=bool(prefix_ids))
  [forced] = inference.score_split(t.state, _split(ids, [best.ids]), dec)
  best = inference.with_text(
    best, line, t.src_tok, t.tgt_tok, dec.replace_unk, forced=len(prefix_ids)
  )
  words = lambda ids: inference.output_tokens(ids, line, t.src_tok, t.tgt_tok)
  running = np.cumsum(forced.token_scores[: len(best.ids)])
  rows = []
  for i, score in enumerate(running):
    kept = {"slot": 0, "from": 0, "tokens": words(best.ids[: i + 1]), "score": float(score)}
    rows.append({"live": [kept], "finished": []})
  if not best.finished:
    return best, rows, [len(rows) - 1, "live", 0]
  ending = {
    "from": 0,
    "tokens": [*words(best.ids), tok.EOS],
    "score": best.score,
    "norm_score": best.norm_score,
    "entered": True,
  }
  rows.append({"live": [], "finished": [ending]})
  return best, rows, [len(rows) - 1, "finished", 0]


def _view(t: Translator, line: str, dec: decode.DecodeSettings, best, rows, winner) -> dict:
  """`beam_view`'s answer from the search's best `Hypothesis`, its steps and its winner."""
  return {
    "source": inference.source_tokens(line, t.src_tok)[: best.attention.shape[1]],
    "beam_size": dec.beam_size,
    "length_penalty": str(dec.length_penalty),
    "translation": {
      "text": best.text,
      "tokens": best.tokens,
      "score": best.score,
      "norm_score": best.norm_score,
      "finished": best.finished,
      "normalised_over": best.normalised_over,
    },
    "steps": rows,
    "winner": winner,
  }


@dataclasses.dataclass(frozen=True)
class _Guides:
  """What steers the search of each line, as target ids: a prefix, or constraint phrases."""

  prefixes: list[list[int]] | None = None
  constraints: list[list[list[int]]] | None = None


def _guides(
  t: Translator,
  dec: decode.DecodeSettings,
  lines: Sequence[str],
  prefixes: Sequence[str] | None,
  constraints: Sequence[Sequence[str]] | None,
  first_line: int = 1,
) -> _Guides:
  """The lines' prefixes and constraint phrases as target ids, or ValueError in one line for
  what cannot be, naming the line (`lines[0]` is line `first_line`): see `translate_lines`."""
  if prefixes is None and constraints is None:
    return _Guides()
  if prefixes is not None and constraints is not None:
    raise ValueError("forced prefixes and lexical constraints cannot be combined: give one")
  name, given = ("prefixes", prefixes) if prefixes is not None else ("constraints", constraints)
  if isinstance(given, str) or len(given) != len(lines):
    count = "a string" if isinstance(given, str) else f"{len(given)} entries"
    raise ValueError(f"{name}: {count} for {len(lines)} lines; give one per line")
  if dec.shortlist:
    raise ValueError(f"{name} cannot be combined with decode.shortlist: decode without it")
  if prefixes is not None:
    return _Guides(prefixes=[_prefix_ids(t, n, p) for n, p in enumerate(prefixes, first_line)])
  if dec.sampling:
    raise ValueError("constraints cannot be combined with decode.sampling: search with a beam")
  encoded = []
  for number, phrases in enumerate(constraints, first_line):
    if isinstance(phrases, str):
      raise ValueError(f"constraints of line {number}: a list of phrases, not a string")
    ids = []
    for phrase in phrases:
      phrase_ids = t.tgt_tok.encode(phrase) if isinstance(phrase, str) else []
      if not phrase_ids:
        raise ValueError(f"constraints of line {number}: {phrase!r} is no phrase (give words)")
      if tok.UNK_ID in phrase_ids:
        raise ValueError(
          f"constraints of line {number}: {phrase!r} holds a word outside the target vocabulary, "
          "which no translation can contain"
        )
      ids.append(phrase_ids)
    encoded.append(ids)
  return _Guides(constraints=encoded)


def _prefix_ids(t: Translator, number: int, prefix: str) -> list[int]:
  """The target ids of the prefix of line `number` (from 1); ValueError for a word outside the
  target vocabulary, which would be forced as <unk>, not as the word."""
  ids = t.tgt_tok.encode(prefix)
  if tok.UNK_ID in ids:
    words = t.tgt_tok.tokenize(prefix)
    unknown = [repr(w) for w in words if t.tgt_tok.encode_tokens([w]) == [tok.UNK_ID]]
    raise ValueError(
      f"prefix of line {number}: {prefix!r} holds {', '.join(unknown) or 'a word'}, outside the "
      "target vocabulary: no translation can start with it"
    )
  return ids


def _check_fits(
  guides: _Guides, i: int, sources: list[list[int]], dec: decode.DecodeSettings, first_line: int
):
  """ValueError unless line i's prefix or constraints (and EOS) fit the longest output its own
  source allows in any batch (`core.max_output_len`); line 0 is numbered `first_line`."""
  limit = core.max_output_len(max(len(ids) for ids in sources) + 1, dec.max_len_ratio)
  if guides.prefixes is not None:
    what, needed = "prefix", len(guides.prefixes[i]) + 1
  elif guides.constraints is not None:
    what, needed = "constraints", constraints_.needed_length(guides.constraints[i])
  else:
    return
  if needed > limit:
    raise ValueError(
      f"line {i + first_line}: its {what} and EOS need {needed} output tokens, more than the "
      f"{limit} its source allows (decode.max_len_ratio={dec.max_len_ratio})"
    )


def _unscorable(t: Translator, source: str, target: str) -> str | None:
  """Why a pair cannot be scored, or None."""
  blank = (("source", _blank(t, source)), ("target", not target.strip()))
  empty = [side for side, is_blank in blank if is_blank]
  if empty:
    return f"empty {' and '.join(empty)}"
  n = max(len(ids) for ids in _encode_sources(t, source))
  if t.max_source_tokens is not None and n > t.max_source_tokens:
    return (
      f"source of {n} tokens: model.score={t.score_spec} addresses at most "
      f"{t.max_source_tokens} and EOS"
    )
  return None


def score_lines(t: Translator, sources: Sequence[str], targets: Sequence[str]) -> list[Scored]:
  """One `Scored` per (source, target) pair, in order: the target's log-probabilities given the
  source under the model (`inference.score_split`: batched, jitted, bucketed), or the reason it
  was not scored (an empty side; a source longer than the model can address)."""
  if len(sources) != len(targets):
    raise ValueError(f"{len(sources)} sources but {len(targets)} targets: give one per source")
  out: list[Scored | None] = [None] * len(sources)
  over = decode.normalised_over(t.decoding)
  src_ids, tgt_ids, keep = [], [], []
  for i, (source, target) in enumerate(zip(sources, targets, strict=True)):
    error = _unscorable(t, source, target)
    if error is not None:
      out[i] = Scored([], None, None, np.zeros((0, 0), np.float32), over, error=error)
      continue
    src_ids.append(_encode_sources(t, source))
    ids = t.tgt_tok.encode(target)
    if t.run.model.addon(copying.ADDON):  # Words outside the vocabulary are scored as copies.
      tokens = (t.tgt_tok.tokenize(target), t.src_tok.tokenize(source), t.tgt_tok.size)
      ids = copying.copy_targets(ids, *tokens)
    tgt_ids.append(ids)
    keep.append(i)
  forced = inference.score_split(t.state, _split(src_ids, tgt_ids), t.decoding)
  for i, ids, f in zip(keep, tgt_ids, forced, strict=True):
    tokens = [*inference.output_tokens(ids, sources[i], t.src_tok, t.tgt_tok), tok.EOS]
    out[i] = dataclasses.replace(f, tokens=tokens)
  return out


def saliency_links(
  t: Translator, sources: Sequence[str], targets: Sequence[str], **settings: Any
) -> list[str | None]:
  """The Pharaoh line of each (source, target) pair read from attribution instead of attention
  (`inference.saliency_split` with `settings`: method, samples, noise; each target word linked
  to its most salient source word, as `word_alignments` links attention), or None for a pair
  that cannot be scored (an empty side, a source too long)."""
  if len(sources) != len(targets):
    raise ValueError(f"{len(sources)} sources but {len(targets)} targets: give one per source")
  attribution.check_model(t.state.model())
  src_ids, tgt_ids, keep = [], [], []
  for i, (source, target) in enumerate(zip(sources, targets, strict=True)):
    if _unscorable(t, source, target) is None:
      src_ids.append(_encode_sources(t, source))
      tgt_ids.append(t.tgt_tok.encode(target))
      keep.append(i)
  out: list[str | None] = [None] * len(sources)
  psis = inference.saliency_split(t.state, _split(src_ids, tgt_ids), t.decoding, **settings)
  for i, ids, psi in zip(keep, tgt_ids, psis, strict=True):
    tokens = inference.output_tokens(ids, sources[i], t.src_tok, t.tgt_tok)
    out[i] = pharaoh_line(t, sources[i], psi, tokens, 0.0)
  return out


# ------------------------------------------------------------------------------ files

# How many lines translate and score mode read, decode and write at a time: memory holds one
# chunk whatever the file's length, and a chunk holds enough sentences for decoding them longest
# first (`decode.order`) to fill batches of about one length.
CHUNK_LINES = 10_000
BOM = b"\xef\xbb\xbf"


def source_files(paths: str, count: int) -> dict[str, str]:
  """The files of `--input` by name ("source 1", ...): one, or for a multi-source run (`count`
  sources) one per source language joined by commas ("test.en,test.de"); ValueError in one
  line for another number of them."""
  given = [p.strip() for p in paths.split(",")] if count > 1 else [paths]
  if len(given) != count:
    raise ValueError(
      f"--input={paths!r}: this run reads {count} source languages; give one file per "
      "language, joined by commas (e.g. test.en,test.de)"
    )
  return {f"source {k + 1}": path for k, path in enumerate(given)}


def check_aligned(paths: Mapping[str, str], why: str) -> int | None:
  """The number of lines of the files `paths` (name -> path), counted before anything loads
  (a missing file fails here); ValueError in one line naming two that differ, and `why` they
  must not. Standard input ("-") is not counted (None where it is the only file): `read_chunks`
  checks it as it reads."""
  counts = {path: builders.count_lines(path) for path in paths.values() if path != "-"}
  (first, n), *rest = counts.items() if counts else [(None, None)]
  for path, m in rest:
    if m != n:
      raise ValueError(f"{first} has {n} lines but {path} has {m}: {why}")
  return n


@dataclasses.dataclass(frozen=True)
class Chunk:
  """Consecutive lines of files read in step (`read_chunks`)."""

  first: int  # The index of its first line in the files (0 in the first chunk).
  lines: dict[str, list[str]]  # Each file's lines, by the file's name.
  invalid: dict[str, int]  # Each file's lines that held invalid UTF-8 (decoded with U+FFFD).

  def __len__(self) -> int:
    return len(next(iter(self.lines.values())))

  def sources(self) -> list[str]:
    """The input's lines: each line's sources ("source 1", ...) joined by
    `builders.SOURCE_SEPARATOR` (any the texts hold replaced by spaces)."""
    columns = [lines for name, lines in self.lines.items() if name.startswith("source ")]
    return [builders.join_sources(texts) for texts in zip(*columns, strict=True)]


def read_chunks(paths: Mapping[str, str], why: str, size: int = CHUNK_LINES) -> Iterator[Chunk]:
  """The files `paths` (name -> path, "-" for standard input) read in step, one line of each at
  a time, in chunks of `size` lines (the last may be shorter): memory holds one chunk whatever
  the files' length. Where one file ends before another (standard input, which `check_aligned`
  cannot count), ValueError in one line with `why` they must not."""
  names = list(paths)
  streams = [_read_lines(paths[name]) for name in names]
  rows = _in_step(streams, [paths[name] for name in names], why)
  first = 0
  while block := list(itertools.islice(rows, size)):
    columns = dict(zip(names, zip(*block, strict=True), strict=True))
    lines = {name: [text for text, _ in column] for name, column in columns.items()}
    invalid = {name: sum(bad for _, bad in column) for name, column in columns.items()}
    yield Chunk(first, lines, invalid)
    first += len(block)


def _in_step(streams: list[Iterator], paths: list[str], why: str) -> Iterator[tuple]:
  """Line i of every stream at a time; ValueError once one ends before the others."""
  for count in itertools.count():
    row = [next(stream, None) for stream in streams]
    ended = [path for path, item in zip(paths, row, strict=True) if item is None]
    if len(ended) == len(row):
      return
    if ended:
      going = next(path for path, item in zip(paths, row, strict=True) if item is not None)
      raise ValueError(f"{ended[0]} ended after {count} lines but {going} goes on: {why}")
    yield tuple(row)


def parse_constraints(line: str, path: str, number: int) -> list[str]:
  """The constraints of line `number` (from 1) of the JSON-lines file `path`: a JSON list of
  phrases (strings), such as `["le chat", "dort"]`; an empty line or `[]` for none. ValueError
  naming the line when it is not such a list."""
  try:
    phrases = json.loads(line) if line.strip() else []
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}, line {number}: not JSON ({e.msg})") from None
  if not isinstance(phrases, list) or not all(isinstance(p, str) for p in phrases):
    raise ValueError(f'{path}, line {number}: give a JSON list of phrases, e.g. ["le chat"]')
  return phrases


def _read_lines(path: str) -> Iterator[tuple[str, bool]]:
  """Each line of `path` ("-" for standard input), read one at a time, with whether it held
  invalid UTF-8 (decoded with replacement characters). Lines are split as training reads a
  corpus (`builders.read_parallel`) and `wc -l` counts them: on "\\n" only, a trailing "\\r"
  dropped, a UTF-8 byte-order mark at the start dropped."""
  with contextlib.ExitStack() as stack:
    f = sys.stdin.buffer if path == "-" else stack.enter_context(open(path, "rb"))
    for number, raw in enumerate(f):
      raw = raw.removesuffix(b"\n").removesuffix(b"\r")
      if number == 0:
        raw = raw.removeprefix(BOM)
      try:
        yield raw.decode("utf-8"), False
      except UnicodeDecodeError:
        yield raw.decode("utf-8", errors="replace"), True


@contextlib.contextmanager
def _sinks(paths: Mapping[str, str | None]) -> Iterator[dict[str, Callable[[str], None]]]:
  """A writer of text for each of `paths` (name -> path) that is given: standard output for
  "-" (flushed each time), else the file, which replaces `path` when the block ends
  (`files.atomic_file`) and is never left half written when the block raises. In a decoding
  shared between processes, only process 0 writes (`processes.writes`)."""
  with contextlib.ExitStack() as stack:
    out: dict[str, Callable[[str], None]] = {}
    for name, path in paths.items():
      if not path:
        continue
      if not processes.writes():
        out[name] = lambda text: None
      elif path == "-":
        out[name] = lambda text: (sys.stdout.write(text), sys.stdout.flush())
      else:
        f = stack.enter_context(files.atomic_file(path))
        out[name] = lambda text, f=f: f.write(text.encode("utf-8"))
    yield out


def _jsonl(records: Iterable[dict[str, Any]]) -> str:
  return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def nbest_lines(index: int, hypotheses: Sequence[Hypothesis]) -> list[str]:
  """The n-best block of input line `index`: one `NBEST_FORMAT` line per hypothesis, best first,
  or, for a line with none (a blank input line), the one line `index |||  ||| 0.000000 |||
  0.000000` (an empty translation, which is certain: log-probability 0)."""
  if not hypotheses:
    return [NBEST_FORMAT.format(index=index, text="", score=0.0, norm_score=0.0)]
  return [
    NBEST_FORMAT.format(index=index, text=h.text, score=h.score, norm_score=h.norm_score)
    for h in hypotheses
  ]


def translate_file(
  config: settings.Config,
  workdir: str | Path,
  input_path: str,
  output_path: str,
  alignments_path: str | None = None,
  nbest: int = 0,
  *,
  links_path: str | None = None,
  links_threshold: float = 0.0,
  prefixes_path: str | None = None,
  constraints_path: str | None = None,
  chunk_lines: int | None = None,
) -> dict[str, int]:
  """Translates `input_path` with the run in `workdir` (best checkpoint, else latest).

  Without `nbest`, writes one output line per input line to `output_path` ("-" for standard
  output) and, when `alignments_path` is given, one JSON object per line with `source`, `target`
  and `attention` (a list per output word, EOS included, of weights over the source words and
  EOS). With `nbest=N` writes the n-best list (`nbest_lines`) and one such JSON object per
  n-best line, with its `index` and `rank` (0: the best) added. With `links_path`, hard word
  alignments in Pharaoh format, one line per output line (`word_links`: argmax, or the links of
  weight at least `links_threshold`). `prefixes_path`: a file of one target prefix per input
  line (an empty line: none); `constraints_path`: a JSON-lines file of one list of phrases per
  input line (`parse_constraints`); see `translate_lines`. Returns counts: lines, empty,
  invalid_utf8, truncated, too_long (untranslated: `translate_lines`).

  The files are read, translated and written `chunk_lines` (None: `CHUNK_LINES`) lines at a time
  (`read_chunks`; each chunk decoded in `decode.order`, written in the input's order), so memory
  stays bounded for an input of any length; files are written whole or not at all (`_sinks`).
  """
  chunk_lines = chunk_lines or CHUNK_LINES
  run = settings.validate(config)  # Before loading anything.
  if nbest:
    run.decode.check_nbest(nbest)
  check_links(run, links_path, links_threshold)
  for path in (output_path, alignments_path, links_path):
    if path and path != "-":
      files.check_writable(path)
  inputs = source_files(input_path, run.data.sources)
  guides = {"prefixes": prefixes_path, "constraints": constraints_path}
  guides = {name: path for name, path in guides.items() if path}
  why = "give one line per input line (and the sources of a multi-source run aligned)"
  total = check_aligned({**inputs, **guides}, why)
  t = Translator(run, workdir)
  over = decode.normalised_over(t.decoding)
  if nbest and over != "vocabulary":
    logging.warning("n-best scores are log-probabilities normalised over the %s", over)
  counts = dict.fromkeys(("lines", "empty", "invalid_utf8", "truncated", "too_long"), 0)
  outputs = {"text": output_path, "alignments": alignments_path, "links": links_path}
  with processes.shared(), _sinks(outputs) as write:
    for chunk in read_chunks({**inputs, **guides}, why, chunk_lines):
      lines = chunk.sources()
      last = chunk.first + len(chunk)
      whole = total is not None and total <= chunk_lines
      label = "translating" if whole else f"translating lines {chunk.first + 1}-{last}"
      steer = _chunk_guides(chunk, constraints_path)
      found, skipped = translate_lines(
        t, lines, nbest=max(nbest, 1), progress=label, first_line=chunk.first + 1, **steer
      )
      _write_translations(write, t, chunk.first, lines, found, nbest, over, links_threshold)
      counts["lines"] += len(lines)
      counts["empty"] += sum(not hyps for hyps in found)
      counts["invalid_utf8"] += sum(chunk.invalid[name] for name in inputs)
      for name, n in skipped.items():
        counts[name] += n
  if counts["invalid_utf8"]:
    logging.warning(
      "%d input lines held invalid UTF-8 (decoded with replacements)", counts["invalid_utf8"]
    )
  return counts


def _chunk_guides(chunk: Chunk, constraints_path: str | None) -> dict[str, Any]:
  """`translate_lines`' prefixes and constraints of a chunk's lines, where files give them."""
  if "prefixes" in chunk.lines:
    return {"prefixes": chunk.lines["prefixes"]}
  if "constraints" in chunk.lines:
    lines = enumerate(chunk.lines["constraints"], chunk.first + 1)
    return {"constraints": [parse_constraints(line, constraints_path, n) for n, line in lines]}
  return {}


def _write_translations(
  write: dict[str, Callable[[str], None]],
  t: Translator,
  first: int,
  lines: list[str],
  found: list[list[Hypothesis]],
  nbest: int,
  over: str,
  threshold: float,
) -> None:
  """The outputs of input lines `first`, ... (`lines`, their hypotheses `found`) to the writers
  `translate_file` opened: text (or the n-best list), alignments and Pharaoh links."""
  numbered = list(enumerate(found, first))

  def record(source: str, h: Hypothesis | None) -> dict[str, Any]:
    attention = [] if h is None else np.round(h.attention, 4).tolist()
    return {"source": source, "target": "" if h is None else h.text, "attention": attention}

  if nbest:
    text = "".join(line + "\n" for i, hyps in numbered for line in nbest_lines(i, hyps))
    records = (
      {"index": i, "rank": rank, **record(lines[i - first], h), "normalised_over": over}
      for i, hyps in numbered
      for rank, h in enumerate(hyps or [None])
    )
  else:
    text = "".join((hyps[0].text if hyps else "") + "\n" for hyps in found)
    records = (
      record(line, hyps[0] if hyps else None) for line, hyps in zip(lines, found, strict=True)
    )
  write["text"](text)
  if "alignments" in write:
    write["alignments"](_jsonl(records))
  if "links" in write:  # A line per output line: per n-best line (a blank input's one too).
    shown = [(i, h) for i, hyps in enumerate(found) for h in hyps[: max(nbest, 1)] or [None]]
    pharaoh = (
      "" if h is None else pharaoh_line(t, lines[i], h.attention, h.tokens, threshold)
      for i, h in shown
    )
    write["links"]("".join(line + "\n" for line in pharaoh))


def check_links(run: settings.RunSettings, path: str | None, threshold: float) -> None:
  """Refuses, in one line, word alignments that the run or the threshold cannot give."""
  if not path:
    return
  if not 0.0 <= threshold <= 1.0:
    raise ValueError(f"--alignment_threshold must be in [0, 1] (0: argmax), got {threshold}")
  if run.model.name in models.ENCDEC_NAMES:
    raise ValueError(f"word alignments read the attention: model.name={run.model.name} has none")
  if run.data.sources > 1:
    raise ValueError("word alignments name one source's words: this run reads two sources")


def pharaoh_line(t: Translator, line: str, attention, out_tokens, threshold: float) -> str:
  """The Pharaoh line of one output of source `line` (`inference.word_links`)."""
  src_ids = _encode_sources(t, line)[0]
  links = inference.word_links(attention, src_ids, out_tokens, t.src_tok, t.tgt_tok, threshold)
  return inference.pharaoh(links)


def score_record(index: int, scored: Scored) -> dict[str, Any]:
  """The score mode's JSON object of pair `index`: index, score, norm_score, tokens,
  token_scores, error (null when scored; score and norm_score are null when not) and
  normalised_over (what the log-probabilities are normalised over: `Scored.normalised_over`)."""
  return {
    "index": index,
    "score": scored.score,
    "norm_score": scored.norm_score,
    "tokens": scored.tokens,
    "token_scores": scored.token_scores,
    "error": scored.error,
    "normalised_over": scored.normalised_over,
  }


def score_file(
  config: settings.Config,
  workdir: str | Path,
  input_path: str,
  reference_path: str,
  output_path: str = "-",
  alignments_path: str | None = None,
  *,
  links_path: str | None = None,
  links_threshold: float = 0.0,
  chunk_lines: int | None = None,
) -> dict[str, int]:
  """Scores each line of `reference_path` as the translation of the same line of `input_path`
  with the run in `workdir`: one `score_record` per pair to `output_path` ("-" for standard
  output) and, with `alignments_path`, one JSON object per pair with `source`, `target` and the
  teacher-forced `attention` (a list per target token, EOS included, over the source tokens and
  EOS; [] when not scored). With `links_path`, the pairs' hard word alignments in Pharaoh
  format, one line per pair, as `translate_file` writes them (empty when not scored). Files of
  different line counts are refused before the model loads. Returns counts: pairs, scored,
  unscored, invalid_utf8. Like `translate_file` it reads, scores and writes `chunk_lines` (None:
  `CHUNK_LINES`) pairs at a time.
  """
  chunk_lines = chunk_lines or CHUNK_LINES
  run = settings.validate(config)  # Before loading anything.
  check_links(run, links_path, links_threshold)
  for path in (output_path, alignments_path, links_path):
    if path and path != "-":
      files.check_writable(path)
  paths = {**source_files(input_path, run.data.sources), "reference": reference_path}
  why = "score mode needs one reference line per input line"
  check_aligned(paths, why)
  t = Translator(run, workdir)
  counts = dict.fromkeys(("pairs", "scored", "unscored", "invalid_utf8"), 0)
  outputs = {"scores": output_path, "alignments": alignments_path, "links": links_path}
  with processes.shared(), _sinks(outputs) as write:
    for chunk in read_chunks(paths, why, chunk_lines):
      sources, targets = chunk.sources(), chunk.lines["reference"]
      results = score_lines(t, sources, targets)
      numbered = enumerate(results, chunk.first)
      write["scores"](_jsonl(score_record(i, r) for i, r in numbered))
      if "alignments" in write:
        attention = lambda r: np.round(r.attention, 4).tolist() if r.error is None else []
        records = (
          {"source": s, "target": g, "attention": attention(r)}
          for s, g, r in zip(sources, targets, results, strict=True)
        )
        write["alignments"](_jsonl(records))
      if "links" in write:
        pharaoh = (
          "" if r.error else pharaoh_line(t, s, r.attention, r.tokens[:-1], links_threshold)
          for s, r in zip(sources, results, strict=True)
        )
        write["links"]("".join(line + "\n" for line in pharaoh))
      unscored = sum(r.error is not None for r in results)
      counts["pairs"] += len(results)
      counts["scored"] += len(results) - unscored
      counts["unscored"] += unscored
      counts["invalid_utf8"] += sum(chunk.invalid.values())
  if counts["invalid_utf8"]:
    invalid = counts["invalid_utf8"]
    logging.warning("%d lines held invalid UTF-8 (decoded with replacements)", invalid)
  return counts

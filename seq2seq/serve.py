"""A trained run as a local HTTP service: translate and score over JSON, with concurrent requests
gathered into batches.

    python -m seq2seq.serve --workdir=runs/demo [--port=8000]    # or: seq2seq-serve ...
    curl -s localhost:8000/translate --json '{"sentences": ["the cat sleeps ."], "beam_size": 5}'

or from Python, `seq2seq.serve.serve(seq2seq.load("runs/demo"), ServeSettings(port=8000))`.

Endpoints (the OpenAPI description at /docs and /openapi.json):
* POST /translate: `TranslateRequest` -> {"translations": per sentence, its n best, each with
  text, score, norm_score, normalised_over and, when asked, the attention and Pharaoh links};
* POST /score: `ScoreRequest` -> {"scores": per pair, as `translate.score_record`};
* POST /beam: `BeamRequest` -> {"beam": what beam search did for one sentence, step by step,
  `translate.beam_view`};
* GET /explorer: the run's explorer page, live (`explorer.live_page`): its what-if tab
  translates edited sources under forced prefixes and shows the beam through the two above;
* GET /health: {"status": "ok"}, or 503 once the server is shutting down;
* GET /info: the run (workdir, step, model and decode settings, vocabulary sizes) and the limits.

One thread decodes (`Batcher`): a request waits at most `ServeSettings.wait_ms` for others that
decode with the same settings, and up to `max_batch` sentences go through `translate_lines` (or
`score_lines`) together, with `decode.batch_size` the smallest of `ServeSettings.batch_sizes`
that holds them, so the compiled programs are those of a few batch shapes; `warm_up` compiles
them at start-up.

Every bad request gets a 4xx and a JSON body {"error": ..., "field": ...} naming the field:
malformed JSON (400), over a limit (`Limits`: 413 for bytes; 422 for sentences, words, and the
decoding options that size the work), a wrong type, an empty list, an unknown option, a sentence
none of whose words the model knows (422). A request that is not answered within
`Limits.timeout_s` gets 504. Beyond loopback the server is only bound with a token, which every
request but /health must then carry (`Authorization: Bearer TOKEN`, else 401). On loopback, a
web page cannot use it: a POST body must be declared JSON (415) and `Host` must name the
loopback service (403), against DNS rebinding (`refusal`). SIGTERM or
SIGINT: no new connections, the requests in flight are answered, then the process exits
(uvicorn's graceful shutdown).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import hmac
import ipaddress
import json
import math
import os
import signal
import sys
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import fastapi
import numpy as np
import pydantic
import starlette.exceptions
import starlette.requests
import uvicorn
from absl import logging
from fastapi import responses

from seq2seq import checkpoints, cli, explorer, translate
from seq2seq.common import console
from seq2seq.data import tokenizer as tok
from seq2seq.decoding import decode, inference
from seq2seq.serving import batcher as batching
from seq2seq.serving import capacity, metrics, opennmt
from seq2seq.serving.batcher import BATCH_SIZES, Batcher, batch_size_for

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Per-request decode fields a client may set; the others (shortlists, ensembles, the batch
# size) belong to the run and the server.
DECODE_OPTIONS = ("beam_size", "length_penalty", "max_len_ratio", "replace_unk", "sampling", "mbr")
BEAM_OPTIONS = DECODE_OPTIONS[:4]  # Those of the beam view (beam search only).


@dataclasses.dataclass(frozen=True)
class Limits:
  """What one request may ask for; past these it is refused with a 4xx. The decoding limits
  bound what a request sets: the run's own decode settings are served as they are."""

  max_sentences: int = 64  # Sentences (or pairs to score) per request.
  max_words: int = 100  # Words per sentence, its prefix, and its constraint phrases together.
  max_request_bytes: int = 1_000_000  # The request body.
  timeout_s: float = 60.0  # From arrival to answer; then 504.
  max_beam_size: int = 16  # A request's beam_size (/translate and /beam).
  max_samples: int = 16  # Samples a request's `sampling` draws per sentence.
  max_mbr_candidates: int = 16  # Candidates per sentence MBR compares, each with each.
  max_len_ratio: float = 4.0  # A request's max_len_ratio (outputs end by ratio * source + 10).
  body_timeout_s: float = 10.0  # To receive a request's whole body; then 408.

  def __post_init__(self):
    counts = ("max_sentences", "max_words", "max_request_bytes", "max_beam_size", "max_samples")
    for name in (*counts, "max_mbr_candidates"):
      if getattr(self, name) < 1:
        raise ValueError(f"serve limit {name} must be at least 1, got {getattr(self, name)}")
    for name in ("timeout_s", "max_len_ratio", "body_timeout_s"):
      if not 0 < getattr(self, name) < math.inf:
        raise ValueError(
          f"serve limit {name} must be positive and finite, got {getattr(self, name)}"
        )


@dataclasses.dataclass(frozen=True)
class ServeSettings:
  host: str = "127.0.0.1"
  port: int = 8000
  token: str = ""  # Required to bind beyond loopback; then every request but /health needs it.
  max_batch: int = 64  # The most sentences decoded together.
  # The batch shapes compiled: a gathered batch is padded to the first that holds it.
  batch_sizes: tuple[int, ...] = BATCH_SIZES
  wait_ms: float = 5.0  # How long a request waits for others to share its batch.
  # Distinct decoding options (beyond the run's own and greedy) whose compiled programs are
  # kept; one more clears the compiled decoding programs (`Service.note_options`).
  max_option_sets: int = 8
  # Sentences that may wait for the decoder; past it a request gets 429 at once. 0: those the
  # service decodes within `Limits.timeout_s`, timed after the warm-up (`Service.warm_up`).
  max_queue: int = 0
  warm_up: bool = True  # Compile the batch shapes before answering (`Service.warm_up`).
  limits: Limits = dataclasses.field(default_factory=Limits)

  def __post_init__(self):
    if not 1 <= self.max_batch:
      raise ValueError(f"serve max_batch must be at least 1, got {self.max_batch}")
    if not self.batch_sizes or min(self.batch_sizes) < 1:
      raise ValueError(f"serve batch_sizes must be positive, got {self.batch_sizes}")
    if max(self.batch_sizes) < self.max_batch:  # Else a full batch compiles while serving.
      raise ValueError(
        f"serve max_batch ({self.max_batch}) is past the largest of batch_sizes "
        f"({max(self.batch_sizes)}): add a size of at least {self.max_batch} to "
        "--batch_sizes, or lower --max_batch"
      )
    if self.wait_ms < 0:
      raise ValueError(f"serve wait_ms must be at least 0, got {self.wait_ms}")
    if self.max_option_sets < 1:
      raise ValueError(f"serve max_option_sets must be at least 1, got {self.max_option_sets}")
    if self.max_queue < 0:
      raise ValueError(f"serve max_queue must be at least 0 (0: derived), got {self.max_queue}")
    if not is_loopback(self.host) and not self.token:
      raise ValueError(
        f"--host={self.host} is reachable from other machines: give a token as well "
        "(--token, or the SEQ2SEQ_SERVE_TOKEN environment variable)"
      )


def is_loopback(host: str) -> bool:
  if host == "localhost":
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False


# Requests. Unknown fields are refused, so a misspelt option is an error, not a silent default.
class RequestModel(pydantic.BaseModel):
  """A request body: unknown fields and values of another type are refused."""

  model_config = pydantic.ConfigDict(extra="forbid", strict=True)


class TranslateRequest(RequestModel):
  sentences: list[str] = pydantic.Field(min_length=1)
  nbest: int = pydantic.Field(1, ge=1)
  beam_size: int | None = pydantic.Field(None, ge=1)
  length_penalty: str | None = None
  max_len_ratio: float | None = pydantic.Field(None, gt=0, allow_inf_nan=False)
  replace_unk: bool | None = None
  sampling: str | None = None  # `decode.sampling`, e.g. "sample(n=8, top_p=0.9)".
  mbr: str | None = None  # `decode.mbr`, e.g. "mbr(utility=chrf)".
  prefixes: list[str] | None = None  # A target prefix per sentence ("" for none).
  constraints: list[list[str]] | None = None  # Phrases per sentence that must appear.
  attention: bool = False  # Each hypothesis' attention matrix.
  word_alignments: bool = False  # Each hypothesis' Pharaoh links (argmax).

  def decode_settings(self) -> dict[str, Any]:
    return {k: getattr(self, k) for k in DECODE_OPTIONS if getattr(self, k) is not None}


class BeamRequest(RequestModel):
  sentence: str
  prefix: str = ""  # Target words every hypothesis starts with.
  beam_size: int | None = pydantic.Field(None, ge=1)
  length_penalty: str | None = None
  max_len_ratio: float | None = pydantic.Field(None, gt=0, allow_inf_nan=False)
  replace_unk: bool | None = None

  def decode_settings(self) -> dict[str, Any]:
    return {k: getattr(self, k) for k in BEAM_OPTIONS if getattr(self, k) is not None}


class ScoreRequest(RequestModel):
  sources: list[str] = pydantic.Field(min_length=1)
  targets: list[str] = pydantic.Field(min_length=1)


class SessionRequest(RequestModel):
  token: str


REPLACED = (
  "the workdir's config.json has changed since this service loaded its model: the files there "
  "describe another run; restart the service to serve it"
)


def config_digest(workdir: str | Path) -> str | None:
  """SHA-256 of WORKDIR/config.json (None where there is none): a run's identity, cheap enough
  to check at every request that reads the workdir's files."""
  try:
    return hashlib.sha256((Path(workdir) / "config.json").read_bytes()).hexdigest()
  except FileNotFoundError:
    return None


class RequestError(Exception):
  """A request the server refuses: HTTP `status`, the `field` at fault (or None) and why."""

  def __init__(
    self,
    status: int,
    message: str,
    field: str | None = None,
    headers: dict[str, str] | None = None,
  ):
    super().__init__(message)
    self.status, self.field, self.headers = status, field, headers

  def body(self) -> dict[str, Any]:
    return {"error": str(self), "field": self.field}


# What the service does with a loaded run.
class Service:
  """Checks requests against the run and the limits, and answers them through a `Batcher` on
  `translator` (a `translate.Translator`)."""

  def __init__(self, translator: translate.Translator, cfg: ServeSettings):
    self.t, self.cfg = translator, cfg
    self.capacity = capacity.Capacity(
      cfg.max_batch, cfg.limits.timeout_s, cfg.max_option_sets, decode.jit_decode.clear_cache
    )
    bound = cfg.max_queue or self.capacity.queue_bound()
    self.batcher = Batcher(self._run_batch, cfg.max_batch, cfg.wait_ms / 1000.0, bound)
    self.closing = False
    self.loaded = config_digest(translator.workdir)  # What `replaced` compares against.
    self.requests = metrics.Requests()  # Its routes: the application's (`create_app`).
    self.has_links = _has_links(translator)  # Whether hypotheses can carry Pharaoh links.

  def replaced(self) -> bool:
    """Whether the workdir's config.json has changed since the model was loaded: another run
    (or a resumed one) now writes there, so its files (the explorer's evaluation) need not
    describe the model this service answers with."""
    return config_digest(self.t.workdir) != self.loaded

  # Batches, on the batcher's thread.
  def note_options(self, key: Hashable) -> None:
    """Bounds the compiled programs a client can make the service keep (`Capacity.note_options`):
    the run's own settings and its greedy search are not counted, and their programs load again
    from the compilation cache after a clearing."""
    kind, options = key[0], dict(key[1])
    if kind == "score" or (kind == "translate" and key[2:] == (1, ()) and self._own(options)):
      return
    if self.capacity.note_options(key):
      logging.info("cleared the compiled decoding programs (--max_option_sets)")

  def _own(self, options: dict[str, Any]) -> bool:
    """Whether `options` decode as the run's own settings or as its greedy search do."""
    try:
      dec = self.t.decoding_with(**options)
    except ValueError:
      return False
    return dec in (self.t.decoding, self.t.decoding_with(beam_size=1))

  def _run_batch(self, key: Hashable, items: list[Any]) -> list[Any]:
    self.note_options(key)
    kind, options = key[0], dict(key[1])
    if kind == "score":
      return translate.score_lines(self.t, [s for s, _ in items], [t for _, t in items])
    if kind == "beam":
      return [translate.beam_view(self.t, s, prefix=p, **options) for s, p in items]
    nbest, guided = key[2], key[3]
    sentences = [s for s, _, _ in items]
    guides = {}
    if "prefixes" in guided:
      guides["prefixes"] = [p for _, p, _ in items]
    if "constraints" in guided:
      guides["constraints"] = [c for _, _, c in items]
    size = batch_size_for(len(items), self.cfg.max_batch, self.cfg.batch_sizes)
    found, _ = translate.translate_lines(
      self.t, sentences, nbest=nbest, progress=None, batch_size=size, **guides, **options
    )
    return found

  def warm_up(self, lengths: Sequence[int] | None = None) -> int:
    """Compiles the run's own decoding and greedy search for every batch size of `batch_sizes`
    up to the one that holds `max_batch` and every source length bucket up to `Limits.max_words`
    (or `lengths`), so requests with the run's settings or `beam_size: 1` find their programs
    compiled; returns how many programs it ran."""
    step = self.t.decoding.bucket_step
    if lengths is None:
      lengths = range(step, self.cfg.limits.max_words + step, step)
    word = _known_word(self.t)
    beams = sorted({self.t.decoding.beam_size, 1})
    largest = batch_size_for(self.cfg.max_batch, self.cfg.max_batch, self.cfg.batch_sizes)
    shapes = [
      (k, b, n)
      for k in beams
      for b in sorted(self.cfg.batch_sizes)
      if b <= largest
      for n in lengths
    ]
    for k, b, n in shapes:
      sentence = " ".join([word] * max(n - 1, 1))  # EOS makes the n-th token.
      translate.translate_lines(self.t, [sentence] * b, progress=None, batch_size=b, beam_size=k)
    self._time_a_batch(word, largest, max(lengths))
    return len(shapes)

  def _time_a_batch(self, word: str, size: int, length: int) -> None:
    """Times a full batch of the run's decoding at half the longest warmed length (compiled by
    the warm-up), and bounds the queue by it unless `max_queue` is set."""
    sentence = " ".join([word] * max(length // 2 - 1, 1))
    start = time.monotonic()
    translate.translate_lines(self.t, [sentence] * size, progress=None, batch_size=size)
    width = self.t.decoding.candidates()
    self.capacity.timed(time.monotonic() - start, len(sentence.split()), width)
    if not self.cfg.max_queue:
      self.batcher.max_waiting = self.capacity.queue_bound()

  # Requests, on the event loop.
  def check_translate(self, req: TranslateRequest) -> tuple[Hashable, list[Any]]:
    check_sentences(self.t, self.cfg.limits, req.sentences, "sentences")
    n = len(req.sentences)
    for name in ("prefixes", "constraints"):
      given = getattr(req, name)
      if given is not None and len(given) != n:
        raise RequestError(422, f"{name} has {len(given)} entries for {n} sentences", name)
    for i, prefix in enumerate(req.prefixes or []):
      check_words(self.cfg.limits, len(prefix.split()), f"prefixes[{i}]", "in its prefix")
    for i, phrases in enumerate(req.constraints or []):
      count = sum(max(len(p.split()), 1) for p in phrases)
      check_words(self.cfg.limits, count, f"constraints[{i}]", "in its phrases (each at least one)")
    options = req.decode_settings()
    self._check_numbers(options)
    try:
      dec = self.t.decoding_with(**options)
      dec.check_nbest(req.nbest)
    except ValueError as e:
      raise RequestError(422, str(e), _field_of(str(e), options, "nbest")) from None
    self._check_candidates(options, dec)
    self._check_cost(req.sentences, dec.candidates())
    if req.word_alignments:
      try:
        translate.check_links(self.t.run, "links", 0.0)
      except ValueError as e:
        raise RequestError(422, str(e), "word_alignments") from None
    guided = tuple(name for name in ("prefixes", "constraints") if getattr(req, name) is not None)
    key = ("translate", tuple(sorted(options.items())), req.nbest, guided)
    prefixes = req.prefixes or [""] * n
    constraints = req.constraints or [[] for _ in range(n)]
    return key, list(zip(req.sentences, prefixes, constraints, strict=True))

  def check_score(self, req: ScoreRequest) -> tuple[Hashable, list[Any]]:
    if len(req.sources) != len(req.targets):
      raise RequestError(
        422, f"{len(req.sources)} sources but {len(req.targets)} targets", "targets"
      )
    check_sentences(self.t, self.cfg.limits, req.sources, "sources")
    check_sentences(self.t, self.cfg.limits, req.targets, "targets", known=False)
    return ("score", ()), list(zip(req.sources, req.targets, strict=True))

  def check_beam(self, req: BeamRequest) -> tuple[Hashable, list[Any]]:
    if not req.sentence.strip():
      raise RequestError(422, "the sentence is blank", "sentence")
    check_sentences(self.t, self.cfg.limits, [req.sentence], "sentence", one=True)
    check_words(self.cfg.limits, len(req.prefix.split()), "prefix", "in its prefix")
    options = req.decode_settings()
    options.setdefault("beam_size", self.t.decoding.beam_size)
    self._check_numbers(options)
    try:
      self.t.decoding_with(**options)
    except ValueError as e:
      raise RequestError(422, str(e), _field_of(str(e), options, "sentence")) from None
    return ("beam", tuple(sorted(options.items()))), [(req.sentence, req.prefix)]

  def _check_numbers(self, options: dict[str, Any]) -> None:
    """Refuses a beam size or a length ratio past its limit (the run's own is allowed)."""
    limits, own = self.cfg.limits, self.t.decoding
    for name, limit in (
      ("beam_size", limits.max_beam_size),
      ("max_len_ratio", limits.max_len_ratio),
    ):
      value = options.get(name)
      if value is not None and value != getattr(own, name) and not value <= limit:
        raise RequestError(422, f"{name}={value}: at most {limit} on this server", name)

  def _check_candidates(self, options: dict[str, Any], dec) -> None:
    """Refuses samples, or MBR candidates, past their limits (the run's own are allowed)."""
    limits, own = self.cfg.limits, self.t.decoding
    if "sampling" in options and dec.sampling is not None and dec.sampling != own.sampling:
      if dec.sampling.n > limits.max_samples:
        message = f"{dec.sampling.n} samples per sentence: at most {limits.max_samples}"
        raise RequestError(422, f"{message} on this server", "sampling")
    if dec.mbr is None or dec.candidates() <= limits.max_mbr_candidates:
      return
    if (dec.mbr, dec.candidates()) != (own.mbr, own.candidates()):
      message = f"MBR over {dec.candidates()} candidates per sentence (the beam or the samples)"
      raise RequestError(
        422, f"{message}: at most {limits.max_mbr_candidates} on this server", "mbr"
      )

  def _check_cost(self, sentences: Sequence[str], width: int) -> None:
    """Refuses a request whose estimated decoding (`estimated_s`) is past `Limits.timeout_s`:
    it would hold the decoder for others after its own client had been told 504."""
    estimate, limit = self.capacity.estimated_s(sentences, width), self.cfg.limits.timeout_s
    if estimate is not None and estimate > limit:
      raise RequestError(
        422,
        f"about {estimate:.0f} s of decoding, past the {limit:g} s this server answers within: "
        "send fewer or shorter sentences, or a smaller beam_size, sampling n or MBR",
      )

  def hypothesis(self, h, source: str, req: TranslateRequest) -> dict[str, Any]:
    out = {
      "text": h.text,
      "tokens": h.tokens,
      "score": _number(h.score),
      "norm_score": _number(h.norm_score),
      "finished": h.finished,
      "normalised_over": h.normalised_over,
    }
    if req.attention:
      out["attention"] = np.round(h.attention, 4).tolist()
      out["source_tokens"] = inference.source_tokens(source, self.t.src_tok)[: h.attention.shape[1]]
    if req.word_alignments:
      out["word_alignments"] = translate.pharaoh_line(self.t, source, h.attention, h.tokens, 0.0)
    return out

  def explorer_page(self, split: str | None = None) -> str:
    """The explorer of the run's evaluated `split` (its first without one; none if the run has
    not been evaluated) in live mode, the what-if and beam views asking this service.
    RequestError (409) once the workdir holds another run (`replaced`)."""
    if self.replaced():
      raise RequestError(409, REPLACED)
    return explorer.live_page(self.t.workdir, split, beam_size=self.t.decoding.beam_size)

  def info(self) -> dict[str, Any]:
    run = self.t.run
    return {
      "step": int(np.asarray(self.t.state.step)),
      "workdir": str(self.t.workdir),
      "workdir_replaced": self.replaced(),  # The rest describes the model loaded at start.
      "model": run.config.model.to_dict(),
      "decode": run.config.decode.to_dict(),
      "vocabulary": {"source": self.t.src_tok.size, "target": self.t.tgt_tok.size},
      "limits": dataclasses.asdict(self.cfg.limits),
      "max_batch": self.cfg.max_batch,
      "max_queue": self.batcher.max_waiting,
      "max_option_sets": self.cfg.max_option_sets,
      "decode_options": list(DECODE_OPTIONS),
    }

  def health(self) -> dict[str, Any]:
    requests, sentences = self.batcher.waiting()
    queue = {
      "requests": requests,
      "sentences": sentences,
      "max_sentences": self.batcher.max_waiting,
    }
    return {"status": "ok", "queue": queue}

  def metrics_text(self) -> str:
    return metrics.render(
      self.requests,
      self.batcher.stats,
      self.batcher.waiting(),
      self.batcher.max_waiting,
      self.cfg.batch_sizes,
      self.capacity.program_clears,
    )


def _number(x: float) -> float | None:
  return float(x) if np.isfinite(x) else None


def check_words(limits: Limits, count: int, field: str, where: str) -> None:
  """Refuses `count` words `where` (a prefix, constraint phrases) past `limits.max_words`."""
  if count > limits.max_words:
    message = f"{count} words {where}: at most {limits.max_words} per sentence"
    raise RequestError(422, message, field)


def check_sentences(
  t: translate.Translator,
  limits: Limits,
  sentences: list[str],
  field: str,
  known: bool = True,
  one: bool = False,
) -> None:
  """Checks `sentences`, request field `field` (a list, or with `one` the field of one
  sentence), against `limits`, and with `known` that each holds a word of `t`'s source
  vocabulary."""
  if len(sentences) > limits.max_sentences:
    raise RequestError(
      422, f"{len(sentences)} sentences: at most {limits.max_sentences} per request", field
    )
  for i, s in enumerate(sentences):
    name = field if one else f"{field}[{i}]"
    words = len(s.split())
    if words > limits.max_words:
      raise RequestError(422, f"{words} words: at most {limits.max_words} per sentence", name)
    if known and words and _all_unknown(t, s):
      raise RequestError(
        422,
        "none of its words is in the model's source vocabulary (another language or script?)",
        name,
      )


def _has_links(t: translate.Translator) -> bool:
  try:
    translate.check_links(t.run, "links", 0.0)
  except ValueError:
    return False
  return True


def _known_word(t: translate.Translator) -> str:
  """A word of the source vocabulary (for warm-up sentences)."""
  for i in range(t.src_tok.size):
    if i not in (tok.PAD_ID, tok.BOS_ID, tok.EOS_ID, tok.UNK_ID):
      word = t.src_tok.decode([i]).strip()
      if word and not _all_unknown(t, word):
        return word
  raise ValueError("the source vocabulary holds no word")


def _all_unknown(t: translate.Translator, sentence: str) -> bool:
  ids = t.src_tok.encode(sentence)
  return bool(ids) and all(i == tok.UNK_ID for i in ids)


def field_name(loc: Sequence[str | int]) -> str | None:
  """A pydantic error location as the request's field: ("sentences", 2) -> "sentences[2]"."""
  name = ""
  for part in loc:
    name += f"[{part}]" if isinstance(part, int) else f".{part}" if name else str(part)
  return name or None


def _field_of(message: str, options: dict[str, Any], default: str) -> str:
  """The request field an error message names: an option it mentions, else `default`."""
  for name in options:
    if name in message:
      return name
  return default


# The HTTP application: the routes' parts, then `create_app`, which wires them.
UNAUTHORISED = "missing or wrong token (Authorization: Bearer TOKEN)"
SHUTTING_DOWN = "the server is shutting down"


class ErrorBody(responses.JSONResponse):
  """A JSON error body in ASCII (non-ASCII text escaped), so any text a message quotes can be
  sent, a lone surrogate included."""

  def render(self, content: Any) -> bytes:
    return json.dumps(content).encode("ascii")


def error_response(e: RequestError, headers: dict[str, str] | None = None) -> ErrorBody:
  headers = {**(e.headers or {}), **(headers or {})} or None
  return ErrorBody(e.body(), status_code=e.status, headers=headers)


def not_text(data: Any, loc: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
  """The location of the first string (or key) in the JSON value `data` that is no Unicode
  text, as a lone surrogate ("\\ud800", which JSON allows) is; None if there is none."""
  if isinstance(data, str):
    return None if _is_text(data) else loc
  pairs = (
    data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
  )
  for key, value in pairs:
    if isinstance(key, str) and not _is_text(key):
      return (*loc, key.encode("utf-8", "backslashreplace").decode())
    if (found := not_text(value, (*loc, key))) is not None:
      return found
  return None


def _is_text(s: str) -> bool:
  try:
    s.encode("utf-8")
  except UnicodeEncodeError:
    return False
  return True


SESSION_COOKIE = "seq2seq_session"


def session_value(token: str) -> str:
  """The explorer's session cookie for `token`: derived from it, so the browser never holds the
  token itself."""
  return hmac.new(token.encode(), b"seq2seq explorer session", hashlib.sha256).hexdigest()


def authorised(request: fastapi.Request, token: str) -> bool:
  """Whether `request` carries `token` (`Authorization: Bearer TOKEN`) or the session cookie
  `POST /session` sets for it; any request does without a token."""
  if not token:
    return True
  given = request.headers.get("authorization", "")
  if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
    return True
  cookie = request.cookies.get(SESSION_COOKIE, "")
  return hmac.compare_digest(cookie.encode(), session_value(token).encode())


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def own_hosts(cfg: ServeSettings, port: int) -> frozenset[str] | None:
  """The Host headers a loopback service on `port` answers: its loopback names with the port
  (without one too on port 80, where browsers leave it out). None beyond loopback, where the
  token guards every request instead."""
  if not is_loopback(cfg.host):
    return None
  bound = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
  names = {*LOOPBACK_NAMES, bound.lower()}
  return frozenset({f"{name}:{port}" for name in names} | (names if port == 80 else set()))


def refusal(request: starlette.requests.Request, cfg: ServeSettings) -> RequestError | None:
  """Why a web page the user opens must not reach the service with `request`, else None: on
  loopback a Host that is not the service's own (a page of another site whose name was rebound
  to 127.0.0.1), and a POST body not declared JSON (which any page may send without asking).
  The port is the one the request came in on (`--port=0` binds any free one), else `cfg.port`."""
  port = request.scope["server"][1] if request.scope.get("server") else cfg.port
  hosts, host = own_hosts(cfg, port), request.headers.get("host", "").lower()
  if hosts is not None and host not in hosts:
    allowed = ", ".join(sorted(h for h in hosts if ":" in h))
    return RequestError(403, f"Host {host!r} is not this service's ({allowed})", "Host")
  kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
  if request.method == "POST" and kind != "application/json":
    return RequestError(
      415, f"the body is {kind or 'undeclared'}: send application/json", "Content-Type"
    )
  return None


class Guard:
  """ASGI middleware: answers a request with its `refusal` before any route sees it."""

  def __init__(self, app, cfg: ServeSettings):
    self.app, self.cfg = app, cfg

  async def __call__(self, scope, receive, send) -> None:
    if scope["type"] == "http":
      if (e := refusal(starlette.requests.Request(scope), self.cfg)) is not None:
        await error_response(e)(scope, receive, send)
        return
    await self.app(scope, receive, send)


async def read_json(request: fastapi.Request, limits: Limits) -> Any:
  """The request body parsed as JSON, read up to `limits.max_request_bytes` within
  `limits.body_timeout_s`; else a `RequestError` (413 past the size, 408 past the time, so a
  client that never sends its body holds no connection; 400 for what is not JSON, 422 for text
  that is not Unicode)."""
  max_bytes = limits.max_request_bytes
  declared = request.headers.get("content-length")
  if declared and declared.isdigit() and int(declared) > max_bytes:
    raise RequestError(413, f"the body is over {max_bytes} bytes")
  raw = bytearray()

  async def receive():
    async for chunk in request.stream():
      raw.extend(chunk)
      if len(raw) > max_bytes:
        raise RequestError(413, f"the body is over {max_bytes} bytes")

  try:
    await asyncio.wait_for(receive(), limits.body_timeout_s)
  except TimeoutError:
    message = f"the body did not arrive within {limits.body_timeout_s:g} s"
    raise RequestError(408, message) from None
  try:
    data = json.loads(bytes(raw))
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise RequestError(400, f"the body is not JSON: {e}") from None
  if (loc := not_text(data)) is not None:
    raise RequestError(422, "not Unicode text: it holds a lone surrogate", field_name(loc))
  return data


async def read_body(request: fastapi.Request, model: type[RequestModel], limits: Limits):
  """The request body (`read_json`) as `model`: 400 for what is not a JSON object, 422 naming
  the field `model` refuses."""
  data = await read_json(request, limits)
  if not isinstance(data, dict):
    raise RequestError(400, "the body must be a JSON object")
  try:
    return model.model_validate(data)
  except pydantic.ValidationError as e:
    first = e.errors()[0]
    raise RequestError(422, first["msg"], field_name(first["loc"])) from None


async def answered(
  service: Service, key: Hashable, items: list[Any], request: fastapi.Request | None = None
) -> list[Any]:
  """The batcher's results for `items`, awaited at most `Limits.timeout_s` (504 past it); 503
  once the service is closing, 429 past the queue's bound, 422 for what the run cannot decode (a
  prefix too long, ...). With `request`, its client's turn among the clients waiting
  (`Batcher`), and work it leaves unfinished by closing the connection is dropped (499)."""
  if service.closing:
    raise RequestError(503, SHUTTING_DOWN)
  owner = request.client.host if request is not None and request.client else None
  try:
    future = service.batcher.submit(key, items, owner)
  except RuntimeError:
    raise RequestError(503, SHUTTING_DOWN) from None
  except batching.QueueFull as e:
    retry = service.capacity.retry_after_s(service.batcher.waiting()[1])
    message = f"busy: {e}; try again in {retry} s"
    raise RequestError(429, message, None, {"Retry-After": str(retry)}) from None
  timeout_s = service.cfg.limits.timeout_s
  result = asyncio.wrap_future(future)
  gone = asyncio.ensure_future(disconnected(request)) if request is not None else None
  try:
    done, _ = await asyncio.wait({result} | ({gone} if gone else set()), timeout=timeout_s,
                                 return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
  finally:
    if gone is not None:
      gone.cancel()
  if result not in done:
    future.cancel()  # Dropped unless its batch has started.
    if gone in done:
      raise RequestError(499, "the client closed the connection")
    raise RequestError(504, f"not answered within {timeout_s} s")
  try:
    return result.result()
  except ValueError as e:
    raise RequestError(422, str(e)) from None


async def disconnected(request: fastapi.Request) -> None:
  """Returns once the client of `request` (its body read) has closed the connection."""
  while (await request.receive())["type"] != "http.disconnect":
    pass


async def handled(service: Service, request: fastapi.Request, model, check, answer):
  """A POST's path: the token, the body, `check(req) -> (key, items)`, the batcher, then
  `answer(req, found)`; a refusal on the way as its JSON error."""
  if not authorised(request, service.cfg.token):
    return error_response(RequestError(401, UNAUTHORISED))
  try:
    req = await read_body(request, model, service.cfg.limits)
    found = await answered(service, *check(req), request)
  except RequestError as e:
    return error_response(e)
  return answer(req, found)


def openapi_body(model: type[RequestModel]) -> dict[str, Any]:
  """The OpenAPI `requestBody` of a route that reads its body itself (`read_body`)."""
  return _json_body(model.model_json_schema())


def opennmt_body() -> dict[str, Any]:
  entry = {"src": {"type": "string"}, "id": {"type": "integer"}}
  item = {"type": "object", "properties": entry, "required": ["src"]}
  return _json_body({"type": "array", "items": item, "minItems": 1})


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
  return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


# What a browser without the session cookie gets from /explorer when the service has a token:
# a form that sends the token once in a JSON body (POST /session), then reloads the page.
SIGN_IN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>seq2seq-attention: token</title></head>
<body><form id="f"><label>This service needs its token:
<input id="t" type="password" autocomplete="off" autofocus></label>
<button>Open the explorer</button> <span id="m"></span></form>
<script>
document.getElementById("f").addEventListener("submit", async (e) => {
  e.preventDefault();
  const r = await fetch("/session", {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({token: document.getElementById("t").value})});
  if (r.ok) location.reload(); else document.getElementById("m").textContent = "wrong token";
});
</script></body></html>
"""
SIGN_IN_POLICY = (
  "default-src 'none'; script-src 'unsafe-inline'; connect-src 'self'; form-action 'none'; "
  "frame-ancestors 'none'"
)
TOKEN_IN_ADDRESS = (
  "the token never goes in the address (it would stay in logs and the browser's history): "
  "send it as Authorization: Bearer TOKEN, or open /explorer and give it there once"
)


def explorer_response(service: Service, request: fastapi.Request, split: str | None):
  """The live explorer page; with a token, only for a request that carries it (the header, or
  the session cookie its sign-in form has `POST /session` set): a browser without either gets
  the form (401)."""
  if "token" in request.query_params:
    return error_response(RequestError(401, TOKEN_IN_ADDRESS, "token"))
  if not authorised(request, service.cfg.token):
    headers = {"Content-Security-Policy": SIGN_IN_POLICY}
    return responses.HTMLResponse(SIGN_IN_PAGE, status_code=401, headers=headers)
  try:
    return responses.HTMLResponse(service.explorer_page(split))
  except RequestError as e:
    return error_response(e)
  except FileNotFoundError as e:
    return error_response(RequestError(404, str(e), "split"))
  except ValueError as e:  # A line of sentences.jsonl half written (--mode=eval is running).
    message = f"the run's evaluation cannot be read yet, try again: {e}"
    return error_response(RequestError(503, message, "split"), {"Retry-After": "5"})


async def session_response(service: Service, request: fastapi.Request):
  """`POST /session {"token": TOKEN}`: the right token gets the session cookie (HttpOnly,
  SameSite=Strict, so no other site's page sends it), which then stands for the token."""
  token = service.cfg.token
  try:
    req = await read_body(request, SessionRequest, service.cfg.limits)
  except RequestError as e:
    return error_response(e)
  if not token or not hmac.compare_digest(req.token.encode(), token.encode()):
    reason = "this service has no token" if not token else "wrong token"
    return error_response(RequestError(401 if token else 404, reason, "token"))
  response = responses.JSONResponse({"status": "ok"})
  response.set_cookie(
    SESSION_COOKIE, session_value(token), httponly=True, samesite="strict", path="/"
  )
  return response


async def opennmt_response(service: Service, request: fastapi.Request):
  """OpenNMT-py's `POST /translator/translate` (`serving.opennmt`): each source translated with
  the run's own settings, its links given where the model has them."""
  if not authorised(request, service.cfg.token):
    return error_response(RequestError(401, UNAUTHORISED))
  try:
    data = await read_json(request, service.cfg.limits)
    try:
      texts = opennmt.sources(data)
    except opennmt.FormatError as e:
      raise RequestError(400, str(e), e.field) from None
    req = TranslateRequest(sentences=texts, word_alignments=service.has_links)
    found = await answered(service, *service.check_translate(req), request)
  except RequestError as e:
    return error_response(e)
  hypotheses = [
    [service.hypothesis(h, s, req) for h in hyps] for s, hyps in zip(texts, found, strict=True)
  ]
  return opennmt.answer(texts, hypotheses)


def create_app(service: Service):
  """The FastAPI application of `service`."""
  app = fastapi.FastAPI(
    title="seq2seq-attention",
    description="Translate and score with a trained run (seq2seq.serve).",
    docs_url="/docs",
  )
  app.add_middleware(Guard, cfg=service.cfg)
  app.add_middleware(metrics.Counting, requests=service.requests)  # Outside: refusals count.

  @app.post("/translate", openapi_extra=openapi_body(TranslateRequest))
  async def translate_endpoint(request: fastapi.Request):
    def answer(req, found):
      pairs = zip(req.sentences, found, strict=True)
      return {"translations": [[service.hypothesis(h, s, req) for h in hyps] for s, hyps in pairs]}

    return await handled(service, request, TranslateRequest, service.check_translate, answer)

  @app.post("/score", openapi_extra=openapi_body(ScoreRequest))
  async def score_endpoint(request: fastapi.Request):
    def answer(req, found):
      return {"scores": [translate.score_record(i, s) for i, s in enumerate(found)]}

    return await handled(service, request, ScoreRequest, service.check_score, answer)

  @app.post("/beam", openapi_extra=openapi_body(BeamRequest))
  async def beam_endpoint(request: fastapi.Request):
    answer = lambda req, found: {"beam": found[0]}
    return await handled(service, request, BeamRequest, service.check_beam, answer)

  @app.post(opennmt.ROUTE, openapi_extra=opennmt_body())
  async def opennmt_endpoint(request: fastapi.Request):
    return await opennmt_response(service, request)

  @app.get("/explorer", response_class=responses.HTMLResponse)
  async def explorer_page(request: fastapi.Request, split: str | None = None):
    return explorer_response(service, request, split)

  @app.post("/session", openapi_extra=openapi_body(SessionRequest))
  async def session(request: fastapi.Request):
    return await session_response(service, request)

  @app.get("/", include_in_schema=False)
  async def home(request: fastapi.Request):
    return responses.RedirectResponse(f"/explorer?{request.url.query}".rstrip("?"))

  @app.get("/health")
  async def health():
    if service.closing:
      return error_response(RequestError(503, SHUTTING_DOWN))
    return service.health()

  @app.get("/info")
  async def info(request: fastapi.Request):
    if not authorised(request, service.cfg.token):
      return error_response(RequestError(401, UNAUTHORISED))
    return service.info()

  @app.get("/metrics", response_class=responses.PlainTextResponse)
  async def metrics_page(request: fastapi.Request):
    if not authorised(request, service.cfg.token):
      return error_response(RequestError(401, UNAUTHORISED))
    return responses.Response(service.metrics_text(), media_type=metrics.CONTENT_TYPE)

  service.requests.routes = frozenset(route.path for route in app.routes)

  @app.exception_handler(fastapi.exceptions.RequestValidationError)
  async def invalid(request, exc):  # Query or path errors FastAPI finds itself.
    first = exc.errors()[0]
    return error_response(RequestError(422, first["msg"], field_name(first["loc"])))

  @app.exception_handler(starlette.exceptions.HTTPException)
  async def refused(request, exc):  # No such route (404), or not its method (405).
    return error_response(RequestError(exc.status_code, str(exc.detail)), exc.headers)

  @app.exception_handler(Exception)
  async def failed(request, exc):  # A bug: its traceback goes to the log as well.
    return error_response(RequestError(500, f"internal error: {type(exc).__name__}: {exc}"))

  return app


class StoppingServer(uvicorn.Server):
  """uvicorn's server that marks `service` closing as soon as a stop signal arrives, so /health
  and requests that arrive while the ones in flight finish get 503."""

  def __init__(self, config: uvicorn.Config, service: Service):
    super().__init__(config)
    self.service = service

  def handle_exit(self, sig, frame) -> None:
    self.service.closing = True
    super().handle_exit(sig, frame)


def serve(translator: translate.Translator, cfg: ServeSettings = ServeSettings()) -> None:
  """Serves `translator` until SIGTERM or SIGINT, then answers the requests in flight and
  returns."""
  service = Service(translator, cfg)
  if cfg.warm_up:
    start = time.monotonic()
    count = service.warm_up()
    console.say(f"compiled {count} programs in {time.monotonic() - start:.0f} s")
  config = uvicorn.Config(
    create_app(service),
    host=cfg.host,
    port=cfg.port,
    log_level="warning",
    timeout_graceful_shutdown=max(int(cfg.limits.timeout_s), 1),
    limit_concurrency=None,
  )
  server = StoppingServer(config, service)
  console.say(f"serving on http://{cfg.host}:{cfg.port} (API: /docs); stop with Ctrl-C")
  # uvicorn answers what is in flight on SIGTERM or SIGINT, then raises the signal again for the
  # handler it found: this one notes it, so the process ends as a finished job (status 0).
  stopped_by = []
  handlers = {sig: signal.signal(sig, lambda s, _: stopped_by.append(s)) for sig in STOP_SIGNALS}
  try:
    server.run()
  finally:
    for sig, handler in handlers.items():
      signal.signal(sig, handler)
    service.batcher.close()
    logging.info("served batches of sizes: %s", service.batcher.stats.sizes)
  if stopped_by:
    console.say(f"stopped by {signal.Signals(stopped_by[0]).name}: every request answered")


# The command line: python -m seq2seq.serve (the console script seq2seq-serve).
def serve_workdir(
  workdir: str | Path,
  cfg: ServeSettings = ServeSettings(),
  verbose: bool = False,
  compilation_cache: str | None = "workdir",
) -> int:
  """Serves the run in `workdir` with its saved config, logging to WORKDIR/log.txt as main.py's
  modes do (`cli.logged`); returns the exit status, 1 after a one-line error."""
  workdir = Path(workdir)
  try:
    config = checkpoints.load_config(workdir)
  except (ValueError, OSError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  run_settings = cli.validated(config)
  if run_settings is None:
    return 1
  job = lambda: serve(translate.Translator(run_settings, workdir), cfg)
  return cli.logged("serve", config, workdir, job, verbose, compilation_cache)


# The command's numeric flags, each a field of `ServeSettings` or `Limits` (its type and default).
NUMBER_FLAGS = {
  "port": "the port",
  "max_batch": "the most sentences decoded together",
  "wait_ms": "how long a request waits for batch-mates",
  "max_queue": "sentences that may wait; past it 429 (0: those answered within --timeout_s)",
  "max_option_sets": "decoding option sets whose compiled programs are kept",
  "max_sentences": "sentences per request, at most",
  "max_words": "words per sentence, at most",
  "max_request_bytes": "request body bytes, at most",
  "timeout_s": "seconds to answer a request, else 504",
  "max_beam_size": "a request's beam_size, at most",
  "max_samples": "samples per sentence a request's sampling draws, at most",
  "max_mbr_candidates": "candidates per sentence a request's MBR compares, at most",
  "max_len_ratio": "a request's max_len_ratio, at most",
  "body_timeout_s": "seconds to receive a request's body, else 408",
}


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
    prog="python -m seq2seq.serve",
    description="Serves a trained run over HTTP until SIGTERM or Ctrl-C: translate, score and the "
    "beam view as JSON, the live explorer at /explorer (docs/howto/serve.md).",
  )
  add = parser.add_argument
  add("--workdir", required=True, help="the trained run to serve (its saved config)")
  add("--host", default="127.0.0.1", help="the address to bind (%(default)s; beyond it: a token)")
  add(
    "--token",
    default=os.environ.get("SEQ2SEQ_SERVE_TOKEN", ""),
    help="the token every request but /health must carry (Authorization: Bearer TOKEN); "
    "default: the SEQ2SEQ_SERVE_TOKEN environment variable",
  )
  for name, what in NUMBER_FLAGS.items():
    default = getattr(Limits() if hasattr(Limits, name) else ServeSettings(), name)
    add(f"--{name}", type=type(default), default=default, help=f"{what} (%(default)s)")
  add(
    "--batch_sizes",
    type=_sizes,
    default=BATCH_SIZES,
    help="the batch shapes compiled, comma-separated; a gathered batch is padded to the first "
    "that holds it, so the largest must hold --max_batch (default: 1,4,8,16,32,64)",
  )
  add(
    "--no_warm_up",
    dest="warm_up",
    action="store_false",
    help="answer at once; each batch shape compiles on its first request",
  )
  add(
    "--compilation_cache",
    default="workdir",
    help="where compiled programs are kept for the next start: 'workdir' (WORKDIR/jax_cache), a "
    "folder, or 'none'",
  )
  add(
    "--verbose",
    action="store_true",
    help="library logs on the terminal too, not only in WORKDIR/log.txt",
  )
  return parser


def _sizes(text: str) -> tuple[int, ...]:
  sizes = text.split(",")
  if not all(b.strip().isdigit() and int(b) > 0 for b in sizes):
    raise argparse.ArgumentTypeError("positive whole numbers, comma-separated (e.g. 1,4,16,64)")
  return tuple(int(b) for b in sizes)


def main(argv: Sequence[str] | None = None) -> None:
  """`python -m seq2seq.serve --workdir=RUN [...]`: serves until SIGTERM or Ctrl-C."""
  args = _parser().parse_args(argv)
  fields = {f.name for f in dataclasses.fields(ServeSettings)} - {"limits"}
  limits = {f.name for f in dataclasses.fields(Limits)}
  try:
    cfg = ServeSettings(
      **{f: getattr(args, f) for f in fields},
      limits=Limits(**{f: getattr(args, f) for f in limits}),
    )
  except ValueError as e:  # Before the run is read.
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  logging.use_absl_handler()  # As absl's app.run: log records reach the terminal through it.
  sys.exit(serve_workdir(args.workdir, cfg, args.verbose, args.compilation_cache))


if __name__ == "__main__":
  main()

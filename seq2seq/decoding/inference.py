"""Inference over a split: every sentence of a split decoded (greedy or beam search, the n best),
its given translation scored (forced decoding), and the teacher-forced attention of the
references and of the model's own outputs (the heads of multi-head attention).

Sentences are batched in `decode.order`: by default longest first, so each batch holds
sentences of about one length, which wastes little on padding and keeps short sentences from
waiting on long ones; every function returns its results in the split's order. Inside
`processes.shared()` the searches and forced scoring decode this process's share of the batches
and return every process's results.

A sentence's result has one type from search to file: `Hypothesis` (a translation found by
search) and `Scored` (a given translation scored). The split functions fill the model's side
(ids, scores, attention); `with_text` and the translate layer add the text."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from seq2seq.common import console
from seq2seq.data import builders, copying, input_pipeline, metrics
from seq2seq.data import tokenizer as tok
from seq2seq.decoding import attribution, beams, core, decode, forcing, mbr, processes
from seq2seq.decoding import constraints as constraints_
from seq2seq.decoding.unknowns import replace_unknowns
from seq2seq.model import models


@dataclasses.dataclass(frozen=True, eq=False)
class Hypothesis:
  """One translation of a sentence, as greedy or beam search found it."""

  ids: list[int]  # Output ids, EOS left out (a copying model's V + j: source token j).
  attention: np.ndarray  # [len(ids) + 1, source tokens + 1]: each output token and EOS over the
  # source tokens and EOS (zeros for models without attention; one row fewer when unfinished).
  score: float = float("nan")  # log p(ids, EOS | source): the sum over the tokens and EOS.
  norm_score: float = float("nan")  # What beam search ranks by (`core.ranking_score`).
  finished: bool = True  # False: cut at the length limit without EOS (then `score` and
  # `attention` cover the tokens only, and `norm_score` counts len(ids) as the length).
  # What p is normalised over: "vocabulary", or "shortlist (batch)" / "shortlist (sentence)"
  # when decoding with `decode.shortlist` (`decode.normalised_over`).
  normalised_over: str = "vocabulary"
  text: str = ""  # Detokenised, UNKs replaced with decode.replace_unk (`with_text`).
  tokens: list[str] = dataclasses.field(default_factory=list)  # The ids' tokens (`with_text`).


@dataclasses.dataclass(frozen=True, eq=False)
class Scored:
  """A given translation scored by the model (forced decoding), or the reason it was not."""

  token_scores: list[float]  # log p of each token given the source and the tokens before it.
  score: float | None  # Their sum, as search scores an output; None when not scored.
  norm_score: float | None  # What beam search would rank it by (`core.ranking_score`).
  attention: np.ndarray  # [len(tokens), source tokens + 1], teacher-forced; [0, 0] unscored.
  normalised_over: str = "vocabulary"  # As `Hypothesis.normalised_over`: the two agree.
  tokens: list[str] = dataclasses.field(default_factory=list)  # The target as the model reads
  # it (<unk> for unknown words), </s> last: filled by the translate layer.
  error: str | None = None  # Why the pair was not scored: "empty source", "empty target", ...


def with_text(
  hyp: Hypothesis,
  src_text: str,
  src_tok: tok.Tokenizer,
  tgt_tok: tok.Tokenizer,
  replace_unk: bool = False,
  *,
  forced: int = 0,
) -> Hypothesis:
  """`hyp` with its `text` (`output_text`) and `tokens` (`output_tokens`) filled in; its first
  `forced` tokens (a forced prefix) are never replaced by `replace_unk`."""
  tokens = output_tokens(hyp.ids, src_text, src_tok, tgt_tok)
  text = _text(tokens, hyp, src_text, src_tok, tgt_tok, replace_unk, forced)
  return dataclasses.replace(hyp, text=text, tokens=tokens)


def word_links(
  attention: np.ndarray,
  src_ids: Sequence[int],
  out_tokens: Sequence[str],
  src_tok: tok.Tokenizer,
  tgt_tok: tok.Tokenizer,
  threshold: float = 0.0,
) -> list[metrics.Link]:
  """Hard word alignments of one sentence pair, (source word, target word) sorted: the attention
  between tokens (rows: the output tokens, then EOS; columns: the source tokens, then EOS)
  mapped to words as AER reads it (`metrics.pieces_to_words`: pieces merged, EOS left out),
  then one link per target word to its highest-weighted source word (`threshold` 0), or every
  link of weight at least `threshold`."""
  src_spans = metrics.id_spans(src_tok, list(src_ids)[: max(attention.shape[1] - 1, 0)])
  words = metrics.pieces_to_words(
    np.asarray(attention), metrics.token_spans(tgt_tok, list(out_tokens)), src_spans
  )
  if threshold > 0:
    return sorted(metrics.threshold_links(words, threshold))
  return sorted(metrics.argmax_links(words))


def pharaoh(links: Sequence[metrics.Link]) -> str:
  """Links in Pharaoh format: "i-j" (source word i, target word j) separated by spaces."""
  return " ".join(f"{s}-{t}" for s, t in links)


def output_text(
  tr: Hypothesis,
  src_text: str,
  src_tok: tok.Tokenizer,
  tgt_tok: tok.Tokenizer,
  replace_unk: bool = False,
) -> str:
  """The plain text of one translation (detokenised; UNKs replaced by attention if asked).

  With `replace_unk` each <unk> output becomes the real source word it attends to most: the
  attention's last column (the source EOS) is never copied, nor a word cut from a line longer
  than the score addresses (`translate`), and a source of no words leaves the <unk> as it is.
  Models without attention are refused earlier (`check_replace_unk`). A copying model's extended
  id V + j is source token j (`copying.output_tokens`).
  """
  return _text(
    output_tokens(tr.ids, src_text, src_tok, tgt_tok), tr, src_text, src_tok, tgt_tok, replace_unk
  )


def _text(
  tokens, tr: Hypothesis, src_text: str, src_tok, tgt_tok, replace_unk: bool, forced: int = 0
) -> str:
  """`output_text` of the translation `tr` whose output tokens are `tokens`, the first `forced`
  of them kept as they are."""
  if replace_unk and tr.attention.size:  # Copied from the first source's real words (no EOS).
    src_tokens = src_tok.tokenize(builders.split_sources(src_text)[0])
    src_tokens = src_tokens[: tr.attention.shape[1] - 1]  # Those decoded: a line can be cut.
    free = replace_unknowns(tokens[forced:], tr.attention[forced:], src_tokens, unk_id=tok.UNK)
    tokens = [*tokens[:forced], *free]
  return tgt_tok.detokenize(tokens)


def source_tokens(src_text: str, src_tok: tok.Tokenizer) -> list[str]:
  """The tokens the attention's columns stand for: each source's tokens and EOS (a multi-source
  example's two sources one after the other, as `Hypothesis.attention` keeps their columns)."""
  texts = builders.split_sources(src_text)
  return [t for text in texts for t in [*src_tok.tokenize(text), tok.EOS]]


def output_tokens(
  ids: Sequence[int] | np.ndarray, src_text: str, src_tok: tok.Tokenizer, tgt_tok: tok.Tokenizer
) -> list[str]:
  """The tokens of output `ids` (cut at EOS, PAD and BOS dropped); a copying model's extended
  id V + j is token j of `src_text`."""
  if max(ids, default=0) >= tgt_tok.size:
    return copying.output_tokens(ids, src_tok.tokenize(src_text), tgt_tok)
  return tgt_tok.decode_tokens(ids)


def check_replace_unk(dec: decode.DecodeSettings, model: models.ModelSettings) -> None:
  """Raises ValueError when `decode.replace_unk` is set for a model without attention.

  UNK replacement copies the source word an output attends to most; RNNencdec (any model whose
  class has `uses_attention` False) has no attention, so it would copy an arbitrary word. It
  takes the model's settings, so callers can check before building or loading anything.
  """
  if dec.replace_unk and not models.MODELS[model.name].uses_attention:
    raise ValueError(
      f"decode.replace_unk needs attention: model.name={model.name} has none "
      "(set --config.decode.replace_unk=False)"
    )


def _batches(split: input_pipeline.Split, dec: decode.DecodeSettings):
  """The split in batches of at most `decode.batch_size` sentences padded to multiples of
  `data.bucket_step`, taken in `decode.order` (longest first, or the split's) under the token
  budget `decode.max_tokens`, their rows a multiple of the devices decoding splits them over
  (`input_pipeline.decoding_batches`). Each batch's `index` places its results."""
  return input_pipeline.decoding_batches(
    split,
    dec.batch_size,
    dec.bucket_step,
    order=dec.order,
    max_tokens=dec.max_tokens,
    multiple=decode.row_multiple(),
  )


def output_limits(split: input_pipeline.Split, dec: decode.DecodeSettings) -> np.ndarray:
  """[N] the most output steps (EOS included) decoding gives each sentence of `split` under
  `dec`: its batch's `decode.output_limit`, set by the longest source in the batch. A sentence's
  translation can therefore change with its batch-mates (another `decode.order`, batch size or
  token budget) where it runs to that limit; decoded longest first, a sentence's batch-mates are
  about as long as it is."""
  out = np.zeros(len(split), np.int64)
  for batch in _batches(split, dec):
    real = batch["index"] >= 0
    out[batch["index"][real]] = decode.output_limit(batch["src"].shape[1], dec)
  return out


def translate_split(
  state,
  split: input_pipeline.Split,
  dec: decode.DecodeSettings,
  *,
  ban_unk: bool = False,
  progress: str | None = None,
) -> list[Hypothesis]:
  """Decodes every sentence of `split` with the decoding settings `dec` (never producing UNK
  with `ban_unk`), in the split's order, showing progress on the console under the label `progress`
  if one is given."""
  out: dict[int, Hypothesis] = {}
  over = decode.normalised_over(dec)
  shown = console.Progress(progress, len(split)) if progress else None
  state = decode.placed(state)  # Once, not at every batch.
  for batch in processes.share(_batches(split, dec)):
    result = jax.device_get(decode.decode_batch(state, batch, dec, ban_unk=ban_unk))
    for row, index in enumerate(batch["index"]):
      if index >= 0:
        out[int(index)] = _hypothesis(result, (row,), batch["src_mask"][row], over)
    if shown:
      shown.advance(int((batch["index"] >= 0).sum()))
  if shown:
    shown.close()
  return processes.gathered(out, len(split))


def _hypothesis(
  result: core.DecodeResult, at: tuple[int, ...], src_mask_S: np.ndarray, over: str
) -> Hypothesis:
  """The hypothesis at index `at` ((row,) or (row, rank)) of a host-side `DecodeResult`, whose
  source row has mask src_mask_S [S], its scores normalised over `over`."""
  hyp = core.DecodeResult(*(x[at] for x in result))
  n_out = int(hyp.lengths)
  ids = [int(t) for t in hyp.tokens[:n_out] if t not in (tok.EOS_ID, tok.PAD_ID)]
  alpha = np.asarray(hyp.alpha[:n_out][:, np.flatnonzero(src_mask_S)])  # Real columns only.
  finished = bool(n_out) and int(hyp.tokens[n_out - 1]) == tok.EOS_ID
  return Hypothesis(ids, alpha, float(hyp.scores), float(hyp.norm_scores), finished, over)


def nbest_split(
  state,
  split: input_pipeline.Split,
  dec: decode.DecodeSettings,
  nbest: int,
  *,
  ban_unk: bool = False,
  progress: str | None = None,
  prefixes: bool = False,
  constraints: Sequence[Sequence[Sequence[int]]] | None = None,
) -> list[list[Hypothesis]]:
  """The `nbest` best translations of every sentence of `split`, in the split's order, best
  first, with the decoding settings `dec` (`beams.beam_search_nbest`; greedy's one for
  beam_size 1). A list is shorter than `nbest` only where fewer hypotheses finished within the
  length limit; its first is what `translate_split` returns. Progress shows under the label
  `progress`.

  With `prefixes`, each translation starts with its sentence's target side in `split` (a forced
  prefix, `core.forced_words`); `constraints` gives each sentence's phrases (target ids), which
  every translation then contains (`seq2seq.decoding.constraints`)."""
  dec.check_nbest(nbest)
  out: dict[int, list[Hypothesis]] = {}
  over = decode.normalised_over(dec)
  shown = console.Progress(progress, len(split)) if progress else None
  state = decode.placed(state)  # Once, not at every batch.
  for batch in processes.share(_batches(split, dec)):
    forced = _guides(batch, prefixes, constraints)
    result = decode.decode_batch(state, batch, dec, ban_unk=ban_unk, nbest=nbest, **forced)
    result = jax.device_get(result)
    for row, index in enumerate(batch["index"]):
      if index >= 0:  # Empty slots score -inf.
        ranks = [r for r in range(nbest) if r == 0 or np.isfinite(result.scores[row, r])]
        mask = batch["src_mask"][row]
        out[int(index)] = [_hypothesis(result, (row, r), mask, over) for r in ranks]
    if shown:
      shown.advance(int((batch["index"] >= 0).sum()))
  if shown:
    shown.close()
  return processes.gathered(out, len(split))


def _guides(batch, prefixes: bool, constraints) -> dict[str, Any]:
  """`decode_batch`'s prefix and constraint arguments for `batch`: its target side as each
  row's forced prefix (with `prefixes`), each row's constraint phrases (from `constraints`)."""
  forced = {}
  if prefixes and batch["tgt_in"].shape[1] > 1:  # BOS, then the prefix, then PAD.
    forced["prefix_BP"] = batch["tgt_in"][:, 1:]
  if constraints is not None:
    rows = [constraints[i] if i >= 0 else [] for i in batch["index"]]
    forced["constraints"] = constraints_.pack(rows)
  return forced


def traced_split(
  state, split: input_pipeline.Split, dec: decode.DecodeSettings, *, prefixes: bool = False
) -> list[tuple[Hypothesis, beams.BeamTrace]]:
  """Each sentence of `split`'s best translation by beam search (of width `decode.beam_size`,
  even 1) with what each step of the search did (its `beams.BeamTrace`, host arrays [L, K]);
  with `prefixes`, starting with its target side (as `nbest_split`)."""
  out: dict[int, tuple[Hypothesis, beams.BeamTrace]] = {}
  over = decode.normalised_over(dec)
  state = decode.placed(state)  # Once, not at every batch.
  for batch in processes.share(_batches(split, dec)):
    forced = _guides(batch, prefixes, None)
    result, steps = jax.device_get(decode.decode_batch(state, batch, dec, trace=True, **forced))
    for row, index in enumerate(batch["index"]):
      if index >= 0:
        best = _hypothesis(result, (row,), batch["src_mask"][row], over)
        out[int(index)] = (best, beams.BeamTrace(*(x[row] for x in steps)))
  return processes.gathered(out, len(split))


def mbr_reordered(hyps: list[Hypothesis], texts: list[str], dec: decode.DecodeSettings):
  """A sentence's candidates `hyps` (their texts `texts`) in `decode.mbr`'s order; as they are
  without MBR."""
  if dec.mbr is None or len(hyps) < 2:
    return hyps
  return [hyps[i] for i in mbr.order(texts, [h.score for h in hyps], dec.mbr)]


def best_split(
  state,
  split: input_pipeline.Split,
  dec: decode.DecodeSettings,
  text_of: Callable[[Hypothesis, int], str],
  *,
  ban_unk: bool = False,
  progress: str | None = None,
) -> list[Hypothesis]:
  """The translation of every sentence of `split` in order: `translate_split`'s, or with
  `decode.mbr` the MBR choice among its candidates (`dec.candidates()` of them), whose texts
  `text_of(hypothesis, sentence index)` gives."""
  if not dec.mbr:
    return translate_split(state, split, dec, ban_unk=ban_unk, progress=progress)
  found = nbest_split(state, split, dec, dec.candidates(), ban_unk=ban_unk, progress=progress)
  return [
    mbr_reordered(hyps, [text_of(h, i) for h in hyps], dec)[0] for i, hyps in enumerate(found)
  ]


def score_split(state, split: input_pipeline.Split, dec: decode.DecodeSettings) -> list[Scored]:
  """Scores the target of every pair of `split` given its source, in the split's order
  (`forcing.score_batch` with the ranking settings of `dec`), in the batches decoding takes
  (`_batches`: padded to multiples of `data.bucket_step`, so few shapes compile)."""
  out: dict[int, Scored] = {}
  over = decode.normalised_over(dec)
  state = decode.placed(state)  # Once, not at every batch.
  for batch in processes.share(_batches(split, dec)):
    result = jax.device_get(forcing.score_batch(state, batch, dec))
    for row, index in enumerate(batch["index"]):
      if index < 0:
        continue
      n_tgt, real = int(batch["tgt_mask"][row].sum()), np.flatnonzero(batch["src_mask"][row])
      out[int(index)] = Scored(
        np.asarray(result.token_scores[row, :n_tgt]).tolist(),
        float(result.scores[row]),
        float(result.norm_scores[row]),
        np.asarray(result.alpha[row, :n_tgt][:, real]),
        over,
      )
  return processes.gathered(out, len(split))


def saliency_split(
  state, split: input_pipeline.Split, dec: decode.DecodeSettings, **settings: Any
) -> list[np.ndarray]:
  """psi [T, S] of every pair of `split` (`attribution.saliency` with `settings`: method,
  samples, noise), in the split's order: rows the target tokens then EOS, columns the source
  tokens then EOS, as `score_split`'s attention, so `word_links` reads it the same way."""
  out: dict[int, np.ndarray] = {}
  state = decode.placed(state)
  for batch in processes.share(_batches(split, dec)):
    psi = np.asarray(jax.device_get(attribution.saliency_batch(state, batch, **settings)))
    for row, index in enumerate(batch["index"]):
      if index < 0:
        continue
      n_tgt, real = int(batch["tgt_mask"][row].sum()), np.flatnonzero(batch["src_mask"][row])
      out[int(index)] = psi[row, :n_tgt][:, real]
  return processes.gathered(out, len(split))


def _teacher_forced(state, split: input_pipeline.Split, dec: decode.DecodeSettings, output: str):
  """(index, the model's teacher-forced aux `output` for that sentence [T_pad, ...]) for every
  sentence of `split`, in the batches decoding takes (`_batches`; jitted: one compilation per
  padded shape)."""
  model_fn = jax.jit(
    lambda params, b: state.replace(params=params).model()(
      b["src"], b["src_mask"], b["tgt_in"], return_aux=True
    )[1][output]
  )
  for batch in _batches(split, dec):
    keys = {k: batch[k] for k in ("src", "src_mask", "tgt_in")}
    values = np.asarray(jax.device_get(model_fn(state.params, keys)))
    for row, index in enumerate(batch["index"]):
      if index >= 0:
        yield int(index), values[row]


def teacher_forced_attention(
  state, split: input_pipeline.Split, dec: decode.DecodeSettings, output: str = "alpha"
) -> list[np.ndarray]:
  """alpha [T, S] of the reference translations over the split's tokens (words or pieces; the
  target EOS step and the source EOS column dropped). `word_attention` maps them to words.
  `output`: another attention the model's aux holds, cut alike, e.g. a Transformer decoder's
  "alpha_layers" [T, layers, heads, S]."""
  out: list[np.ndarray | None] = [None] * len(split)
  for index, alpha in _teacher_forced(state, split, dec, output):
    n_tgt, n_src = len(split.tgt.row(index)), len(split.src.row(index))
    out[index] = alpha[:n_tgt, ..., :n_src]
  return out


def words_of(data, split: input_pipeline.Split, matrices: Sequence[np.ndarray]) -> list[np.ndarray]:
  """Each pair's matrix over the split's tokens [T, S] (attention, saliency) as one between
  words [T', S'] (`metrics.pieces_to_words`: the identity for word tokens)."""
  return [
    metrics.pieces_to_words(
      matrix,
      metrics.id_spans(data.tgt_tokenizer, split.tgt.row(i)),
      metrics.id_spans(data.src_tokenizer, split.src.row(i)),
    )
    for i, matrix in enumerate(matrices)
  ]


def word_attention(state, data, split_name: str, dec: decode.DecodeSettings) -> list[np.ndarray]:
  """Teacher-forced attention of the references between words [T', S'], whatever the tokens:
  `teacher_forced_attention` mapped by `words_of`."""
  split = data.splits[split_name]
  return words_of(data, split, teacher_forced_attention(state, split, dec))


def decoded_split(
  split: input_pipeline.Split, translations: Sequence[Hypothesis]
) -> input_pipeline.Split:
  """`split` with its decoded outputs as the targets, to force them through the decoder."""
  outputs = input_pipeline.Ragged.from_lists([tr.ids for tr in translations])
  return input_pipeline.Split(split.name, split.src, outputs, split.line)


def decoded_saliency(
  state, split: input_pipeline.Split, translations: Sequence[Hypothesis], dec: decode.DecodeSettings
) -> tuple[str, list[np.ndarray]] | None:
  """The attribution `dec.saliency` asks for over every decoded sentence, named by its method
  ("integrated gradients"): (name, psi [len(tr.attention), S_real] per sentence, cut as
  `tr.attention` is, so the explorer shows the two side by side), or None when it asks for
  none. Each output is scored as given, as `decoded_heads` forces the heads."""
  if dec.saliency is None:
    return None
  forced = decoded_split(split, translations)
  chosen = dataclasses.asdict(dec.saliency)
  psi = saliency_split(state, forced, dec, **chosen)
  maps = [
    p[: tr.attention.shape[0], : tr.attention.shape[1]]
    for p, tr in zip(psi, translations, strict=True)
  ]
  return dec.saliency.method.replace("_", " "), maps


def head_name(n: int) -> str:
  """Head n's name (n from 0) in sentences.jsonl and the explorer, and, without its space, in
  heatmap file names (000_head1.png): one place, so the two count heads alike."""
  return f"head {n + 1}"


def decoded_heads(
  state,
  split: input_pipeline.Split,
  translations: Sequence[Hypothesis],
  dec: decode.DecodeSettings,
) -> list[list[np.ndarray]] | None:
  """Each head's attention over every decoded sentence: per sentence a list of N arrays
  [len(tr.attention), S_real], or None unless the reported attention has several heads
  ("alpha_heads": a multi-head structure's, or the Transformer decoder's reported layer's).

  Attention at a step depends only on the output before it, so forcing the decoder through each
  translation's own words (in batches, as `teacher_forced_attention` does with the references)
  reproduces the heads that decoding (greedy or beam) used; `tr.attention` is their mean, or
  the one head a Transformer decoder reports.
  """
  if getattr(state.model(), "attention_heads", 1) < 2:
    return None
  forced = decoded_split(split, translations)
  out: list[list[np.ndarray] | None] = [None] * len(split)
  for index, heads_TNS in _teacher_forced(state, forced, dec, "alpha_heads"):
    n_out, n_src = translations[index].attention.shape
    heads_TNS = heads_TNS[:n_out, :, :n_src]
    out[index] = [heads_TNS[:, n] for n in range(heads_TNS.shape[1])]
  return out

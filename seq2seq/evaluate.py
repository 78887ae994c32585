"""Translation and alignment metrics, the paper's ways.

* `bleu`: sacrebleu corpus BLEU on detokenised text (13a tokenisation, signature kept), the
  headline figure, and `tokenized_bleu` on text split into the target side's words as the paper
  reports it (multi-bleu.perl on tokenised text): `bleu_words` says how each tokenizer kind
  splits, `bleu_conventions` writes every figure's convention into results.json.
* `no_unk_subset`: the sentences with no unknown word in the source or the reference (the
  paper's "No UNK" column).
* `bleu_by_length`: BLEU per bin of source length (bins of 10 words, the paper's Fig. 2).
* `alignment_error_rate`: AER of attention-derived links against gold links (Och and Ney), with
  argmax and thresholded attention, and after `shift_links` moves them one target position
  either way (Koehn and Knowles 2017: attention often points at the word before or after);
  `attention_entropy`.
* `over_translation` (output words repeated beyond their count in the reference) and
  `under_translation` (source content words that no output word attends to most).

Alignment links are (source index, target index) pairs, 0-based, as the corpus writes them.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import jax
import numpy as np
import sacrebleu
import sacremoses
from flax import nnx

from seq2seq import decode, input_pipeline, models, plots
from seq2seq import tokenizer as tok
from seq2seq.data import synthetic
from seq2seq.decode import replace_unknowns

Link = tuple[int, int]


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
  """(corpus BLEU, sacrebleu signature) with sacrebleu's default 13a tokenisation."""
  metric = sacrebleu.metrics.BLEU()
  score = metric.corpus_score(list(hypotheses), [list(references)])
  return float(score.score), str(metric.get_signature())


@functools.cache
def _moses(lang: str) -> sacremoses.MosesTokenizer:
  return sacremoses.MosesTokenizer(lang or "en")


def bleu_words(text: str, tokenizer: tok.Tokenizer | None = None, lang: str = "") -> list[str]:
  """The words of plain `text` that tokenised BLEU counts n-grams of.

  A word vocabulary splits as it does for training (`tokenizer.tokenize`: whitespace, or Moses
  for its language with `data.pretokenizer="moses"`), so "chat." is "chat ." when the run saw it
  so. SentencePiece pieces are not words (n-grams of pieces would inflate the score), so a
  SentencePiece run splits with the Moses tokenizer of `lang`, the target language: the
  multi-bleu.perl convention on real text. On the embedded corpus, written pre-split, that is
  the whitespace split except for words with an apostrophe ("l'" -> "l '", "'s" -> "' s",
  "aujourd'hui" -> "aujourd' hui"). Without a tokenizer the text is taken as already tokenised.
  """
  if tokenizer is None:
    return text.split()
  if isinstance(tokenizer, tok.SentencePieceTokenizer):
    return _moses(lang).tokenize(text, escape=False)
  return tokenizer.tokenize(text)


def tokenized_bleu(
  hypotheses: Sequence[str],
  references: Sequence[str],
  tokenizer: tok.Tokenizer | None = None,
  lang: str = "",
) -> float:
  """BLEU on both sides split by `bleu_words(text, tokenizer, lang)` and joined with single
  spaces, scored without further tokenisation (sacrebleu tokenize="none"): what multi-bleu.perl
  computes on tokenised text. Without a tokenizer the texts must already be tokenised."""
  split = lambda texts: [" ".join(bleu_words(t, tokenizer, lang)) for t in texts]
  metric = sacrebleu.metrics.BLEU(tokenize="none", force=True)
  return float(metric.corpus_score(split(hypotheses), [split(references)]).score)


def bleu_conventions(tokenizer: tok.Tokenizer, lang: str = "") -> dict[str, str]:
  """One line per BLEU-like figure of results.json saying which tokenisation it scores."""
  if isinstance(tokenizer, tok.SentencePieceTokenizer):
    words = f"sacremoses' Moses tokenizer ({lang or 'en'}; SentencePiece pieces are not words)"
  elif isinstance(tokenizer, tok.WordVocab) and tokenizer.pretokenizer.name == "moses":
    words = f"the target vocabulary's moses pretokenizer ({tokenizer.pretokenizer.lang})"
  else:
    words = "whitespace (the target vocabulary's word split)"
  detok = "sacrebleu 13a on detokenised text (signature in bleu_signature)"
  return {
    "bleu": detok,
    "bleu_no_unk": f"{detok}, sentences with no <unk> in source or reference only",
    "bleu_by_length": f"{detok}, per source-length bin (source words split on whitespace)",
    "bleu_tokenized": f"sacrebleu tokenize=none (multi-bleu.perl) on both sides split by {words}",
    "chrf": "sacrebleu chrF defaults on detokenised text (character n-grams, spaces ignored)",
  }


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """Corpus chrF (sacrebleu defaults)."""
  return float(sacrebleu.metrics.CHRF().corpus_score(list(hypotheses), [list(references)]).score)


def no_unk_subset(src_has_unk: Sequence[bool], ref_has_unk: Sequence[bool]) -> list[int]:
  """Indices of sentences with no unknown word on either side."""
  return [i for i, (s, r) in enumerate(zip(src_has_unk, ref_has_unk, strict=True)) if not (s or r)]


def bleu_by_length(
  hypotheses: Sequence[str],
  references: Sequence[str],
  src_lengths: Sequence[int],
  bin_width: int = 10,
) -> list[dict]:
  """BLEU per source-length bin [1-10], [11-20], ...: {"min_len", "max_len", "count", "bleu"}.

  Empty bins are left out; bins run up to the longest source.
  """
  lengths = np.asarray(src_lengths)
  rows = []
  top = int(lengths.max()) if len(lengths) else 0
  for lo in range(1, top + 1, bin_width):
    hi = lo + bin_width - 1
    idx = np.flatnonzero((lengths >= lo) & (lengths <= hi))
    if len(idx):
      score, _ = bleu([hypotheses[i] for i in idx], [references[i] for i in idx])
      rows.append({"min_len": lo, "max_len": hi, "count": len(idx), "bleu": score})
  return rows


def argmax_links(alpha_TS: np.ndarray) -> set[Link]:
  """One link per target word: the source position with the highest attention weight."""
  return {(int(j), t) for t, j in enumerate(np.argmax(alpha_TS, axis=1))}


def threshold_links(alpha_TS: np.ndarray, threshold: float = 0.3) -> set[Link]:
  """Every (source, target) pair whose attention weight reaches `threshold`."""
  ts, ss = np.nonzero(alpha_TS >= threshold)
  return {(int(s), int(t)) for t, s in zip(ts, ss, strict=True)}


def alignment_error_rate(
  predicted: Iterable[set[Link]], sure: Iterable[set[Link]], possible=None
) -> float:
  """Corpus AER = 1 - (|A & S| + |A & P|) / (|A| + |S|); P defaults to S (gold links only).

  0 for a perfect alignment, 1 for a disjoint one.
  """
  predicted, sure = list(predicted), list(sure)
  possible = sure if possible is None else list(possible)
  a_s = a_p = a = s = 0
  for pred, gold_s, gold_p in zip(predicted, sure, possible, strict=True):
    gold_p = gold_p | gold_s
    a_s += len(pred & gold_s)
    a_p += len(pred & gold_p)
    a += len(pred)
    s += len(gold_s)
  return 1.0 - (a_s + a_p) / max(a + s, 1)


def shift_links(links: Iterable[Link], shift: int, num_target: int) -> set[Link]:
  """Links moved `shift` target positions, (s, t) -> (s, t + shift); those leaving
  [0, num_target) are dropped."""
  return {(s, t + shift) for s, t in links if 0 <= t + shift < num_target}


def over_translation(hypothesis: Sequence[str], reference: Sequence[str]) -> int:
  """Repeated output words beyond the reference: sum_w max(0, n_hyp(w) - max(1, n_ref(w)))."""
  hyp, ref = collections.Counter(hypothesis), collections.Counter(reference)
  return sum(max(0, n - max(1, ref[w])) for w, n in hyp.items())


CONTENT_RANK = 50  # Word ids past the specials and the 50 most frequent words: content words.


def under_translation(alpha_TS: np.ndarray, src_ids: Sequence[int]) -> int:
  """Source content words (id >= 4 + CONTENT_RANK, i.e. outside the most frequent words of a
  frequency-ranked word vocabulary) that are the argmax of no output word's attention.

  alpha_TS: attention of the output words [T, S'] (S' >= len(src_ids); extra columns ignored).
  """
  src = np.asarray(src_ids)
  if not len(src):
    return 0
  attended = set(np.argmax(np.asarray(alpha_TS)[:, : len(src)], axis=1).tolist())
  content = np.flatnonzero(src >= tok.NUM_SPECIALS + CONTENT_RANK)
  return int(sum(j not in attended for j in content.tolist()))


def attention_entropy(alphas: Iterable[np.ndarray]) -> float:
  """Mean over target words of the entropy (nats) of their attention distribution."""
  values = []
  for alpha in alphas:
    p = np.clip(np.asarray(alpha, np.float64), 1e-12, 1.0)
    values.extend((-(p * np.log(p)).sum(axis=1)).tolist())
  return float(np.mean(values)) if values else 0.0


# ------------------------------------------------------------------------ evaluating a model


@dataclasses.dataclass
class Translation:
  """One decoded sentence: output ids (no EOS) and their attention [len(ids) + 1, S_real]."""

  ids: list[int]
  alpha: np.ndarray


def output_text(
  tr: Translation,
  src_text: str,
  src_tok: tok.Tokenizer,
  tgt_tok: tok.Tokenizer,
  replace_unk: bool = False,
) -> str:
  """The plain text of one translation (detokenised; UNKs replaced by attention if asked).

  With `replace_unk` each <unk> output becomes the real source word it attends to most: the
  attention's last column (the source EOS) is never copied, and a source of no words leaves the
  <unk> as it is. Models without attention are refused earlier (`check_replace_unk`).
  """
  tokens = tgt_tok.decode_tokens(tr.ids)
  if replace_unk and tr.alpha.size:
    src_tokens = src_tok.tokenize(src_text)  # The real words only: no EOS column to copy.
    tokens = replace_unknowns(tokens, tr.alpha, src_tokens, unk_id=tok.UNK)
  return tgt_tok.detokenize(tokens)


def check_replace_unk(config, model: nnx.Module | None = None) -> None:
  """Raises ValueError when `decode.replace_unk` is set for a model without attention.

  UNK replacement copies the source word an output attends to most; RNNencdec (any model whose
  `uses_attention` is False) has no attention, so it would copy an arbitrary word. `model` is
  the model that will decode; without one, the model `config.model` describes is built
  abstractly (shapes only, no parameters), so callers can check before loading anything.
  """
  if not config.decode.replace_unk:
    return
  if model is None:
    size = tok.NUM_SPECIALS + 1
    build = lambda: models.build_model(config.model, size, size, rngs=nnx.Rngs(0))
    model = nnx.eval_shape(build)
  if not model.uses_attention:
    raise ValueError(
      f"decode.replace_unk needs attention: model.name={config.model.name} has none "
      "(set --config.decode.replace_unk=False)"
    )


def translate_split(state, split: input_pipeline.Split, config) -> list[Translation]:
  """Decodes every sentence of `split` in order with the `config.decode` settings."""
  out: list[Translation | None] = [None] * len(split)
  for batch in input_pipeline.iter_batches(
    split, config.decode.batch_size, config.data.bucket_step
  ):
    result = jax.device_get(decode.decode_batch(state, batch, config))
    for row, index in enumerate(batch["index"]):
      if index < 0:
        continue
      n_out = int(result.lengths[row])
      ids = [int(t) for t in result.tokens[row, :n_out] if t not in (tok.EOS_ID, tok.PAD_ID)]
      n_src = int(batch["src_mask"][row].sum())
      out[index] = Translation(ids, np.asarray(result.alpha[row, :n_out, :n_src]))
  return out


def teacher_forced_attention(state, split: input_pipeline.Split, config) -> list[np.ndarray]:
  """alpha [T_words, S_words] of the reference translations (target EOS and source EOS dropped)."""
  model_fn = jax.jit(
    lambda params, b: state.replace(params=params).model()(
      b["src"], b["src_mask"], b["tgt_in"], return_alpha=True
    )[1]
  )
  out: list[np.ndarray | None] = [None] * len(split)
  for batch in input_pipeline.iter_batches(
    split, config.decode.batch_size, config.data.bucket_step
  ):
    keys = {k: batch[k] for k in ("src", "src_mask", "tgt_in")}
    alpha = np.asarray(jax.device_get(model_fn(state.params, keys)))
    for row, index in enumerate(batch["index"]):
      if index >= 0:
        n_tgt, n_src = len(split.tgt.row(index)), len(split.src.row(index))
        out[index] = alpha[row, :n_tgt, :n_src]
  return out


def evaluate_split(
  state, data, split_name: str, config, out_dir: Path, *, extra=None, writer=None, write=True
) -> dict:
  """Decodes a split and scores it: BLEU (all / No UNK / tokenised / by length), chrF, AER.

  Writes OUT_DIR/results.json, hypotheses.txt (one line per source line), bleu_vs_length.png
  and alignments/*.png (heatmaps of the first `decode.num_heatmaps` sentences) when `write`;
  `extra` (loss, step, ...) is merged into the results first.
  """
  check_replace_unk(config, state.model())
  split = data.splits[split_name]
  raw = data.raw(split_name)
  tgt_tok = data.tgt_tokenizer
  tgt_lang = input_pipeline.languages(config.data)[0 if data.reverse else 1]
  translations = translate_split(state, split, config)
  hyps = [
    output_text(tr, src, data.src_tokenizer, tgt_tok, config.decode.replace_unk)
    for tr, (src, _, _) in zip(translations, raw, strict=True)
  ]
  refs = [r[1] for r in raw]
  src_lengths = [len(r[0].split()) for r in raw]
  score, signature = bleu(hyps, refs)
  keep = no_unk_subset(
    [bool(np.any(split.src.row(i) == tok.UNK_ID)) for i in range(len(split))],
    [bool(np.any(split.tgt.row(i) == tok.UNK_ID)) for i in range(len(split))],
  )
  results = dict(extra or {})
  results.update(
    {
      "bleu": score,
      "bleu_signature": signature,
      "bleu_tokenized": tokenized_bleu(hyps, refs, tgt_tok, tgt_lang),
      "bleu_no_unk": bleu([hyps[i] for i in keep], [refs[i] for i in keep])[0] if keep else 0.0,
      "num_no_unk": len(keep),
      "chrf": chrf(hyps, refs),
      "num_sentences": len(hyps),
      "beam_size": int(config.decode.beam_size),
      "bleu_by_length": bleu_by_length(hyps, refs, src_lengths),
      "bleu_conventions": bleu_conventions(tgt_tok, tgt_lang),
    }
  )
  if state.model().uses_attention:
    results["over_translation"] = sum(
      over_translation(tgt_tok.decode_tokens(tr.ids), tgt_tok.tokenize(r[1]))
      for tr, r in zip(translations, raw, strict=True)
    )
    results["under_translation"] = sum(
      under_translation(tr.alpha[: len(tr.ids)], split.src.row(i))
      for i, tr in enumerate(translations)
    )
    results["source_words"] = int(split.src.values.size)
  if all(r[2] is not None for r in raw) and state.model().uses_attention:
    gold = [set(synthetic.parse_alignment(r[2])) for r in raw]
    forced = teacher_forced_attention(state, split, config)
    links = [argmax_links(a) for a in forced]
    results["aer"] = alignment_error_rate(links, gold)
    for name, shift in (("aer_shift_minus1", -1), ("aer_shift_plus1", 1)):
      shifted = [shift_links(x, shift, len(a)) for x, a in zip(links, forced, strict=True)]
      results[name] = alignment_error_rate(shifted, gold)
    results["aer_threshold"] = alignment_error_rate([threshold_links(a) for a in forced], gold)
    results["attention_entropy"] = attention_entropy(forced)
  if not write:
    return results
  out_dir.mkdir(parents=True, exist_ok=True)
  (out_dir / "hypotheses.txt").write_text("".join(h + "\n" for h in hyps))
  (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
  plots.bleu_vs_length(
    {config.model.name: results["bleu_by_length"]}, out_dir / "bleu_vs_length.png"
  )
  step = int(jax.device_get(state.step))
  for i in range(min(config.decode.num_heatmaps, len(hyps))):
    tr = translations[i]
    src_words = data.src_tokenizer.tokenize(raw[i][0]) + [tok.EOS]
    out_words = tgt_tok.decode_tokens(tr.ids) + [tok.EOS]
    if not (tr.alpha.size and state.model().uses_attention):
      continue
    maps = {"": tr.alpha}  # The attention used (multi-head: the mean of the heads) ...
    heads = translation_heads(state, split.src.row(i), tr)
    maps |= {f"_head{n}": a for n, a in enumerate(heads)}  # ... then each head's, if any.
    for suffix, alpha in maps.items():
      image = plots.alignment_heatmap(
        alpha, src_words, out_words[: len(alpha)], out_dir / "alignments" / f"{i:03d}{suffix}.png"
      )
      if writer is not None:
        writer.write_image(step, f"{split_name}/alignment_{i}{suffix}", image)
  return results


def translation_heads(state, src_ids: np.ndarray, tr: Translation) -> list[np.ndarray]:
  """Each head's attention [len(tr.alpha), S_real] over a decoded sentence ([] unless the
  attention structure has several heads: "alpha_heads").

  Attention at a step depends only on the output before it, so forcing the decoder through the
  translation's own words reproduces the heads that decoding (greedy or beam) used.
  """
  model = state.model()
  if getattr(model.structure, "num_heads", 1) < 2:
    return []
  steps = len(tr.alpha)
  src = np.concatenate([src_ids, [tok.EOS_ID]]).astype(np.int32)[None]
  tgt_in = np.asarray([[tok.BOS_ID, *tr.ids][:steps]], np.int32)
  _, aux = model(src, np.ones_like(src), tgt_in, return_aux=True)
  heads_TNS = np.asarray(jax.device_get(aux["alpha_heads"]))[0]
  return [heads_TNS[:, n] for n in range(heads_TNS.shape[1])]

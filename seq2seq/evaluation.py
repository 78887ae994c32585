"""Evaluating a run: its best (else latest) intact checkpoint restored, loss and perplexity,
every split decoded (`seq2seq.decoding.inference`) and scored (`seq2seq.data.metrics`), results and
the explorer's per-sentence records written under WORKDIR/eval (`evaluate_splits`, what
`main.py --mode=eval` does), and the greedy validation BLEU the training loop selects on."""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import sacrebleu
from absl import logging

from seq2seq import checkpoints, explorer, plots, restoring, settings
from seq2seq import sharding as rt
from seq2seq.common import files
from seq2seq.data import builders, input_pipeline, metrics, synthetic
from seq2seq.data import tokenizer as tok
from seq2seq.decoding import decode, ensemble, inference, processes
from seq2seq.training import train_state


def evaluate_loss(
  eval_fn, state: train_state.TrainState, batches, runtime: rt.Runtime
) -> dict[str, Any]:
  """Token-level loss and perplexity of `batches` (an iterable of host batches), summed in
  float64. For a stacked state (`eval_fn` vmapped over members) each value is an array [G]."""
  total, tokens = 0.0, 0.0
  for batch in batches:
    m = jax.device_get(eval_fn(state, runtime.put_batch(batch)))
    total = total + np.asarray(m["loss_sum"], np.float64)
    tokens = tokens + np.asarray(m["tokens"], np.float64)
  loss = total / np.maximum(tokens, 1.0)
  out = {"loss": loss, "perplexity": np.exp(np.minimum(loss, 50.0)), "tokens": tokens}
  return {k: float(v) for k, v in out.items()} if np.ndim(loss) == 0 else out


def valid_scores(
  state: train_state.TrainState, data, run: settings.RunSettings, hypotheses_out=None, chrf=False
) -> dict[str, float]:
  """Validation BLEU with greedy decoding (cheap enough to run at every evaluation), and
  `unk_rate`: the share of the output's words that are <unk> (before any UNK replacement), what
  a smaller target vocabulary costs; with `chrf`, the chrF of the same outputs. `hypotheses_out`:
  also write the outputs there, one line per sentence, gzipped (`VALID_HYPOTHESES`), so a
  learning curve can be scored again without retraining."""
  greedy = dataclasses.replace(run.decode, beam_size=1, sampling="", mbr="")  # Search, always.
  with processes.shared():  # Every process of a job validates: each decodes its share.
    translations = inference.translate_split(
      rt.host_local(state), data.splits["valid"], greedy, progress="validation BLEU (greedy)"
    )
  raw = data.raw("valid")
  hyps = [
    inference.output_text(t, r[0], data.src_tokenizer, data.tgt_tokenizer)
    for t, r in zip(translations, raw, strict=True)
  ]
  if hypotheses_out is not None:
    Path(hypotheses_out).parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(hypotheses_out, "wt", encoding="utf-8") as f:
      f.writelines(h + "\n" for h in hyps)
  words = sum(len(t.ids) for t in translations)
  unks = sum(t.ids.count(tok.UNK_ID) for t in translations)
  refs = [r[1] for r in raw]
  scores = {
    "bleu": metrics.bleu(hyps, refs, pretokenized=metrics.pretokenized(run.data.corpus))[0],
    "unk_rate": unks / max(words, 1),
  }
  return scores | ({"chrf": metrics.chrf(hyps, refs)} if chrf else {})


VALID_HYPOTHESES = "valid_hypotheses/{step}.txt.gz"  # Under the workdir: each evaluation's outputs.


def evaluate_splits(
  config: settings.Config, workdir, *, data=None, runtime=None, eval_fn=None, writer=None
) -> dict:
  """Evaluates (`config`: a run's config, or its `settings.RunSettings`) the best (else latest)
  checkpoint on the valid and test splits (and "test_long"
  with `data.long_test_min_words`).

  Per split: loss and perplexity, then decoding with the `decode` settings and every metric of
  `evaluate_split`, written to WORKDIR/eval/SPLIT/. An agreement run is evaluated with
  its `model.direction` model: the forward one as any RNNsearch, the reverse one on the corpus
  read target -> source, into WORKDIR/eval_reverse/SPLIT/. Returns {split: results}. Holds the
  workdir's lock (`files.workdir_lock`) while it runs.
  """
  run = settings.validate(config)
  if not ensemble.workdirs(run.decode):  # (Members load their own.)
    checkpoints.check_model_config(Path(workdir), run.config)
  with files.workdir_lock([workdir], enabled=jax.process_index() == 0):
    return evaluate_run(run, workdir, data=data, runtime=runtime, eval_fn=eval_fn, writer=writer)


def evaluate_run(
  run: settings.RunSettings,
  workdir,
  *,
  data=None,
  runtime=None,
  eval_fn=None,
  writer=None,
  notes: dict | None = None,
) -> dict:
  """`evaluate_splits` of a run whose settings are typed and checked already, by a caller that
  holds the workdir (the training loop's final evaluation); `notes` (how training ended) go into
  every split's results."""
  ensemble.prepare_workdir(run.decode, workdir)
  workdir = Path(workdir)
  runtime = runtime or rt.Runtime()
  data = data or rt.load_data(run, workdir)
  if eval_fn is None:
    _, eval_fn = rt.compile_steps(run, runtime)
  sizes = (data.src_tokenizer.size, data.tgt_tokenizer.size)
  state = restoring.restore_for_eval(run, workdir, *sizes, runtime, doing="evaluating")
  direction = run.model.direction
  state = restoring.direction_state(state, direction)
  prefix = restoring.eval_prefix(run.model)
  if direction == "reverse":
    data = input_pipeline.reversed_data(data)
  step = int(jax.device_get(state.step))
  results = {}
  for split in ("valid", "test", input_pipeline.LONG_TEST):
    if split not in data.splits:
      continue
    batches = input_pipeline.eval_batches(
      data,
      split,
      run.data,
      process_index=jax.process_index(),
      process_count=jax.process_count(),
    )
    result = evaluate_loss(eval_fn, state, batches, runtime)
    if not np.isfinite(result["loss"]):
      raise ValueError(
        f"the checkpoint of step {step} gives a non-finite {split} loss ({result['loss']}): its "
        f"parameters are unusable, and {workdir / prefix} is left as it was"
      )
    result["step"] = step
    result.update(restoring.checkpoint_note(run, step) | (notes or {}))
    out = workdir / prefix / split
    with processes.shared():  # Every process evaluates: each decodes its share, 0 writes.
      result = evaluate_split(
        rt.host_local(state),
        data,
        split,
        run,
        out,
        extra=result,
        writer=writer,
        write=jax.process_index() == 0,
      )
    if writer is not None:  # Final scalars go to TensorBoard; metrics.jsonl holds training only.
      scalars = {k: v for k, v in result.items() if isinstance(v, int | float)}
      writer.write(step, f"{prefix}_{split}", scalars, jsonl=False)
      if jax.process_index() == 0:  # And the results to the tracker, where one is on.
        writer.attach(out / "results.json", f"{prefix}/{split}")
    if jax.process_index() == 0:
      explorer.write_report(workdir, prefix, split)
    logging.info(
      "%s at step %d: loss %.4f  perplexity %.2f  BLEU %.2f (No UNK %s)",
      split,
      step,
      result["loss"],
      result["perplexity"],
      result["bleu"],
      "-" if result["bleu_no_unk"] is None else f"{result['bleu_no_unk']:.2f}",
    )
    results[split] = result
  return results


def gold_links(raw) -> list[set[metrics.Link]] | None:
  """The gold links of every pair of a split's `raw` rows, or None unless all have them."""
  if not raw or not all(r[2] is not None for r in raw):
    return None
  return [set(synthetic.parse_alignment(r[2])) for r in raw]


def attention_figures(
  state, data, split_name: str, dec: decode.DecodeSettings, translations, raw, forced=None
) -> dict:
  """Over- and under-translation of the decoded `translations`, the share of their attention
  weights that are exactly zero (`metrics.zero_share`), and, with gold links, AER and
  entropy of the references' teacher-forced attention; all over words (`pieces_to_words`).
  `forced`: that attention (`word_attention`) if the caller has it already."""
  split = data.splits[split_name]
  src_tok, tgt_tok = data.src_tokenizer, data.tgt_tokenizer
  src_spans = [metrics.id_spans(src_tok, split.src.row(i)) for i in range(len(split))]
  subword = isinstance(src_tok, tok.SentencePieceTokenizer)
  train_src = data.splits["train"].src
  sources = (train_src.row(i) for i in range(len(train_src)))
  frequent = metrics.frequent_words(sources, src_tok) if subword else None
  over = under = 0
  offsets = []
  for i, (tr, r) in enumerate(zip(translations, raw, strict=True)):
    out, ref = inference.output_tokens(tr.ids, r[0], src_tok, tgt_tok), tgt_tok.tokenize(r[1])
    out_spans = metrics.token_spans(tgt_tok, out)
    out_words = metrics.span_words(out, out_spans)
    over += metrics.over_translation(
      out_words, metrics.span_words(ref, metrics.token_spans(tgt_tok, ref))
    )
    alpha = metrics.pieces_to_words(tr.attention, out_spans, src_spans[i])
    under += metrics.under_translation(alpha, split.src.row(i), src_spans[i], frequent)
    src = src_tok.tokenize(builders.split_sources(r[0])[0])  # Its words, <unk> ones spelled.
    src_words = metrics.span_words(src, metrics.token_spans(src_tok, src))
    src_words = src_words[: len(src_spans[i])]  # As decoded.
    offsets.append(metrics.identical_word_offsets(alpha, out_words, src_words))
  rank = metrics.CONTENT_RANK
  content = (
    f"not among the {rank} most frequent source words (pieces grouped at '▁') of the "
    f"first {metrics.CONTENT_SAMPLE} training sentences"
    if subword
    else f"word id >= {tok.NUM_SPECIALS + rank}: outside the {rank} most "
    "frequent training words (<unk> counts as frequent)"
  )
  results = {
    "over_translation": over,
    "under_translation": under,
    "under_translation_content": content,
    "source_words": sum(len(spans) for spans in src_spans),
    "attention_zero_share": metrics.zero_share(tr.attention for tr in translations),
    **metrics.twin_figures(offsets),
    "aer_subword_mapping": metrics.subword_mapping(src_tok, tgt_tok),
  }
  gold = gold_links(raw)
  if gold is None:
    return results
  if forced is None:
    forced = inference.word_attention(state, data, split_name, dec)
  for i, (alpha, r) in enumerate(zip(forced, raw, strict=True)):
    if alpha.shape != (len(r[1].split()), len(r[0].split())):
      raise ValueError(
        f"{split_name} sentence {i}: attention over {alpha.shape[1]} source and "
        f"{alpha.shape[0]} target words, but the gold links index {len(r[0].split())} and "
        f"{len(r[1].split())} whitespace words"
      )
  links = [metrics.argmax_links(a) for a in forced]
  results["aer"] = metrics.alignment_error_rate(links, gold)
  for name, shift in (("aer_shift_minus1", -1), ("aer_shift_plus1", 1)):
    results[name] = metrics.shifted_aer(links, gold, shift, [len(a) for a in forced])
  results["aer_threshold"] = metrics.alignment_error_rate(
    [metrics.threshold_links(a) for a in forced], gold
  )
  results["attention_entropy"] = metrics.attention_entropy(forced)
  return results


def evaluate_split(
  state,
  data,
  split_name: str,
  run: settings.RunSettings,
  out_dir: Path,
  *,
  extra=None,
  writer=None,
  write=True,
) -> dict:
  """Decodes a split and scores it: BLEU (all / No UNK / tokenised / by length), chrF, and
  for models with attention over/under-translation and (gold links) AER and entropy.

  Writes OUT_DIR/results.json, hypotheses.txt (one line per source line), sentences.jsonl (one
  record per sentence: texts, sentence scores and attention, `sentence_records`, which the
  explorer shows), bleu_vs_length.png and alignments/*.png (heatmaps of the first
  `decode.num_heatmaps` sentences) when `write`; `extra` (loss, step, ...) is merged into the
  results first.
  """
  inference.check_replace_unk(run.decode, run.model)
  split = data.splits[split_name]
  raw = data.raw(split_name)
  tgt_tok = data.tgt_tokenizer
  tgt_lang = input_pipeline.languages(run.data)[0 if data.reverse else 1]
  plain = metrics.pretokenized(run.data.corpus)
  dec = run.decode
  text_of = lambda tr, i: inference.output_text(
    tr, raw[i][0], data.src_tokenizer, tgt_tok, dec.replace_unk
  )
  label = f"decoding {split_name}"
  translations = inference.best_split(state, split, dec, text_of, progress=label)
  hyps = [text_of(tr, i) for i, tr in enumerate(translations)]
  refs = [r[1] for r in raw]
  src_lengths = [len(builders.split_sources(r[0])[0].split()) for r in raw]  # First source's.
  score, signature = metrics.bleu(hyps, refs, pretokenized=plain)
  recall, oov_refs = metrics.oov_recall(hyps, refs, tgt_tok)
  keep, no_unk_hyps = no_unk_hypotheses(state, data, split_name, raw, dec)
  kept_bleu = lambda texts: metrics.bleu(texts, [refs[i] for i in keep], pretokenized=plain)[0]
  results = dict(extra or {})
  results.update(
    {
      "bleu": score,
      "bleu_signature": signature,
      "length_ratio": metrics.length_ratio(hyps, refs, pretokenized=plain),
      "bleu_tokenized": metrics.tokenized_bleu(hyps, refs, tgt_tok, tgt_lang),
      "bleu_no_unk": kept_bleu(no_unk_hyps) if keep else None,
      "bleu_no_unk_plain": kept_bleu([hyps[i] for i in keep]) if keep else None,
      "num_no_unk": len(keep),
      "chrf": metrics.chrf(hyps, refs),
      "bleu_lowercase": metrics.bleu(hyps, refs, pretokenized=plain, lowercase=True)[0],
      "chrf_lowercase": metrics.chrf(hyps, refs, lowercase=True),
      "oov_recall": recall,
      "oov_reference_tokens": oov_refs,
      "num_sentences": len(hyps),
      "beam_size": dec.beam_size,
      "bleu_by_length": metrics.bleu_by_length(hyps, refs, src_lengths, pretokenized=plain),
      "bleu_conventions": metrics.bleu_conventions(tgt_tok, tgt_lang, pretokenized=plain),
    }
  )
  attends = state.model().uses_attention
  forced = heads = salient = None
  if attends:
    if gold_links(raw) is not None:
      forced = inference.word_attention(state, data, split_name, dec)
    results.update(attention_figures(state, data, split_name, dec, translations, raw, forced))
    heads = inference.decoded_heads(state, split, translations, dec)
    salient = inference.decoded_saliency(state, split, translations, dec) if write else None
  if not write:
    return results
  out_dir.mkdir(parents=True, exist_ok=True)
  files.write_atomic(out_dir / "hypotheses.txt", "".join(h + "\n" for h in hyps))
  files.write_atomic(out_dir / "results.json", json.dumps(results, indent=2) + "\n")
  records = sentence_records(
    data,
    split_name,
    translations,
    hyps,
    plain,
    attends=attends,
    heads=heads,
    forced=forced,
    salient=salient,
  )
  explorer.write_sentences(out_dir, records)
  plots.bleu_vs_length({run.model.name: results["bleu_by_length"]}, out_dir / "bleu_vs_length.png")
  if attends:
    step = int(jax.device_get(state.step))
    shown = range(min(dec.num_heatmaps, len(hyps)))
    write_heatmaps(data, split_name, raw, translations, heads, shown, out_dir, writer, step)
  return results


def no_unk_hypotheses(
  state, data, split_name: str, raw, dec: decode.DecodeSettings
) -> tuple[list[int], list[str]]:
  """The paper's No-UNK subset of a split (`raw`: its rows): the indices of the sentences
  with no <unk> in any source nor in the reference, and their outputs decoded again with <unk>
  forbidden (the paper's --ignore-unk; none for an empty subset)."""
  split = data.splits[split_name]
  keep = metrics.no_unk_subset(  # Every source of a multi-source split counts.
    [any(metrics.count_unk(src.row(i)) for src in split.sources) for i in range(len(split))],
    [bool(metrics.count_unk(split.tgt.row(i))) for i in range(len(split))],
  )
  if not keep:
    return keep, []
  sub = input_pipeline.subset(split, keep)
  label = f"decoding {split_name}'s No-UNK subset with <unk> forbidden"
  src_tok, tgt_tok = data.src_tokenizer, data.tgt_tokenizer
  sub_text = lambda tr, i: inference.output_text(tr, raw[keep[i]][0], src_tok, tgt_tok)
  again = inference.best_split(state, sub, dec, sub_text, ban_unk=True, progress=label)
  return keep, [sub_text(tr, i) for i, tr in enumerate(again)]


def write_heatmaps(
  data, split_name: str, raw, translations, heads, shown, out_dir: Path, writer, step: int
) -> None:
  """OUT_DIR/alignments/NNN.png, the attention heatmap of sentence NNN of a split for each
  index in `shown`, and with several heads NNN_HEAD.png, each head's (`heads`:
  `inference.decoded_heads`); each image also goes to `writer` at `step`, when there is one."""
  src_tok, tgt_tok = data.src_tokenizer, data.tgt_tokenizer
  for i in shown:
    tr = translations[i]
    src_words = inference.source_tokens(raw[i][0], src_tok)
    out_words = inference.output_tokens(tr.ids, raw[i][0], src_tok, tgt_tok) + [tok.EOS]
    if not tr.attention.size:
      continue
    # The attention used (multi-head: the mean of the heads), then each head's.
    maps = {"": tr.attention}
    maps |= {
      "_" + inference.head_name(n).replace(" ", ""): a
      for n, a in enumerate(heads[i] if heads else [])
    }
    for suffix, alpha in maps.items():
      image = plots.alignment_heatmap(
        alpha, src_words, out_words[: len(alpha)], out_dir / "alignments" / f"{i:03d}{suffix}.png"
      )
      if writer is not None:
        writer.write_image(step, f"{split_name}/alignment_{i}{suffix}", image)


# ---------------------------------------------------------------------- sentence by sentence


def sentence_records(
  data,
  split_name: str,
  translations: Sequence[inference.Hypothesis],
  hyps: Sequence[str],
  pretokenized: bool = False,
  *,
  attends: bool = True,
  heads: Sequence[Sequence[np.ndarray]] | None = None,
  forced: Sequence[np.ndarray] | None = None,
  salient: tuple[str, Sequence[np.ndarray]] | None = None,
) -> list[dict]:
  """One JSON-able record per sentence of an evaluated split, in corpus order: what the
  explorer (`seq2seq.explorer`) shows and OUT_DIR/sentences.jsonl holds.

  Each has `index`, `line` (in the corpus files), `source`, `reference`, `hypothesis`, sentence
  `bleu` (sacrebleu, effective order: short sentences are not zero for a missing 4-gram) and
  `chrf`, `source_words`, `unk` (<unk> tokens in the source (all its sources), the reference
  and the output; the No-UNK subset is the sentences with none in the first two), and, for
  models with attention:
  `entropy` (mean over output steps of the decoded attention's entropy, nats) and `attention`
  (the decoded attention's tokens and maps: the one used, then each head's when there are
  several, then the attribution `salient` (`decode.saliency`'s name and maps,
  `inference.decoded_saliency`; each row's magnitudes as shares, `explorer.row_shares`) when
  asked for,
  `explorer.encode_map`); with gold links also `aer` (argmax links of the reference's
  teacher-forced attention `forced`, as results.json's `aer` but for one sentence) and
  `reference_attention` (that attention over the whitespace words of reference and source, with
  the gold links).
  """
  split, raw = data.splits[split_name], data.raw(split_name)
  src_tok, tgt_tok = data.src_tokenizer, data.tgt_tokenizer
  gold = gold_links(raw) if forced is not None else None
  sentence_bleu = sacrebleu.metrics.BLEU(effective_order=True, force=pretokenized)
  sentence_chrf = sacrebleu.metrics.CHRF()
  records = []
  scored = metrics.scored_text(hyps)
  for i, (tr, hyp, (src, ref, _)) in enumerate(zip(translations, hyps, raw, strict=True)):
    record = {
      "index": i,
      "line": int(split.line[i]),
      "source": src,
      "reference": ref,
      "hypothesis": hyp,
      "bleu": float(sentence_bleu.sentence_score(scored[i], [ref]).score),
      "chrf": float(sentence_chrf.sentence_score(scored[i], [ref]).score),
      "source_words": len(builders.split_sources(src)[0].split()),
      "unk": {
        "source": sum(metrics.count_unk(src.row(i)) for src in split.sources),
        "reference": metrics.count_unk(split.tgt.row(i)),
        "output": metrics.count_unk(tr.ids),
      },
    }
    if attends and tr.attention.size:
      maps = [("attention", tr.attention)]
      maps += [(inference.head_name(n), a) for n, a in enumerate(heads[i] if heads else [])]
      if salient is not None:  # Attribution beside attention (`decode.saliency`).
        maps.append((salient[0], explorer.row_shares(salient[1][i])))
      record["entropy"] = metrics.attention_entropy([tr.attention])
      record["attention"] = {
        "source": inference.source_tokens(src, src_tok),
        "output": (inference.output_tokens(tr.ids, src, src_tok, tgt_tok) + [tok.EOS])[
          : len(tr.attention)
        ],
        "maps": [{"name": name, **explorer.encode_map(a)} for name, a in maps],
      }
    if gold is not None:
      record["aer"] = metrics.alignment_error_rate([metrics.argmax_links(forced[i])], [gold[i]])
      record["reference_attention"] = {  # Over the whitespace words of reference and source.
        "map": explorer.encode_map(forced[i]),
        "gold": sorted([s, t] for s, t in gold[i]),
      }
    records.append(record)
  return records

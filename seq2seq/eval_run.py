"""Evaluating a run: its best (else latest) checkpoint restored, loss and perplexity, decoding
and every metric of `seq2seq.evaluate` on the valid and test splits (`evaluate_splits`, what
`main.py --mode=eval` does), and the greedy validation BLEU the training loop selects on."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging
from flax import nnx

from seq2seq import (
  checkpoints,
  console,
  ensemble,
  evaluate,
  files,
  input_pipeline,
  models,
  report,
  settings,
  steps,
  summary,
)
from seq2seq import runtime as rt
from seq2seq import tokenizer as tok


def evaluate_loss(eval_fn, state: steps.TrainState, batches, runtime: rt.Runtime) -> dict[str, Any]:
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
  state: steps.TrainState, data, config: ml_collections.ConfigDict, hypotheses_out=None
) -> dict[str, float]:
  """Validation BLEU with greedy decoding (cheap enough to run at every evaluation), and
  `unk_rate`: the share of the output's words that are <unk> (before any UNK replacement), what
  a smaller target vocabulary costs. `hypotheses_out`: also write the outputs there, one line per
  sentence, gzipped (`VALID_HYPOTHESES`), so a learning curve can be scored again without
  retraining."""
  greedy = config.copy_and_resolve_references()
  greedy.decode.beam_size = 1
  translations = evaluate.translate_split(
    rt.host_local(state), data.splits["valid"], greedy, progress="validation BLEU (greedy)"
  )
  raw = data.raw("valid")
  hyps = [
    evaluate.output_text(t, r[0], data.src_tokenizer, data.tgt_tokenizer)
    for t, r in zip(translations, raw, strict=True)
  ]
  if hypotheses_out is not None:
    Path(hypotheses_out).parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(hypotheses_out, "wt", encoding="utf-8") as f:
      f.writelines(h + "\n" for h in hyps)
  words = sum(len(t.ids) for t in translations)
  unks = sum(t.ids.count(tok.UNK_ID) for t in translations)
  return {
    "bleu": evaluate.bleu(hyps, [r[1] for r in raw], pretokenized=evaluate.pretokenized(config))[0],
    "unk_rate": unks / max(words, 1),
  }


VALID_HYPOTHESES = "valid_hypotheses/{step}.txt.gz"  # Under the workdir: each evaluation's outputs.


def restore_run(config, workdir: Path, src_vocab: int, tgt_vocab: int, runtime) -> steps.TrainState:
  """The run's best checkpoint by validation BLEU if one was kept and is intact, else, of the
  intact regular checkpoints, the one with the best validation BLEU in metrics.jsonl (the latest
  among equals, and when none was validated), with the parameters evaluation uses
  (`TrainState.for_eval`: the moving average when there is one). A damaged checkpoint is
  reported by its folder and skipped (`checkpoints.Checkpointer` sets aside those that fail
  their checksums); never restored as garbage."""
  workdir = Path(workdir)
  fresh = rt.abstract_state(config, src_vocab, tgt_vocab, runtime)
  bleu = {
    r["step"]: r["bleu"]
    for r in summary.read_metrics(workdir)
    if r["split"] == "valid" and "bleu" in r
  }
  for subdir in ("best", "checkpoints"):
    ckpt = checkpoints.Checkpointer(workdir, config, subdir=subdir)
    held = sorted(ckpt.manager.all_steps(), key=lambda s: (bleu.get(s, -1.0), s), reverse=True)
    try:
      for step in held:
        try:
          state, _ = ckpt.restore(fresh, step, with_data=False)
        except checkpoints.CheckpointError as e:
          logging.warning("%s; trying the next one", e)
          continue
        console.say(f"evaluating the {subdir} checkpoint (step {int(state.step)})")
        return state.for_eval()
    finally:
      ckpt.close()
  raise FileNotFoundError(f"no intact checkpoint in {workdir / 'checkpoints'}; train first")


def restore_member(workdir: Path, runtime) -> steps.TrainState:
  """An ensemble member: its run restored with the config it was trained with, as the
  direction that config names."""
  config = checkpoints.load_config(workdir)
  sizes = [tok.load(Path(workdir) / "vocab" / side).size for side in ("src", "tgt")]
  state = restore_run(config, Path(workdir), *sizes, runtime)
  return direction_state(state, config.model.direction)


def restore_for_eval(
  config, workdir: Path, src_vocab: int, tgt_vocab: int, runtime
) -> steps.TrainState:
  """What evaluation and translation decode: the ensemble `decode.ensemble` names (see
  `seq2seq.ensemble`), else the run in `workdir` (`restore_run`)."""
  if ensemble.workdirs(config):
    return ensemble.load(config, lambda member: restore_member(member, runtime))
  return restore_run(config, workdir, src_vocab, tgt_vocab, runtime)


DIRECTIONS = settings.DIRECTIONS


def eval_prefix(config) -> str:
  """The folder of a run's evaluations: "eval", or "eval_reverse" for an agreement run's
  reverse model."""
  direction = config.model.direction
  return "eval" if direction == "forward" else f"eval_{direction}"


def direction_state(state: steps.TrainState, direction: str) -> steps.TrainState:
  """One direction of an agreement run as the state of a plain RNNsearch, which decoding,
  evaluation and translation take like any run's state (no optimiser state: it decodes only).

  Any other run's state is returned as it is for "forward"; "reverse" needs an agreement run.
  """
  if direction not in DIRECTIONS:
    raise ValueError(f"model.direction={direction!r} is not one of {DIRECTIONS}")
  model = state.model()
  if not isinstance(model, models.Agreement):
    if direction == "reverse":
      raise ValueError("model.direction=reverse needs an agreement run (model.name=agreement)")
    return state
  graphdef, params = nnx.split(getattr(model, direction), nnx.Param)
  return steps.TrainState(state.step, params, None, graphdef, state.tx)


def evaluate_splits(config, workdir, *, data=None, runtime=None, eval_fn=None, writer=None):
  """Evaluates the best (else latest) checkpoint on the valid and test splits (and "test_long"
  with `data.long_test_min_words`).

  Per split: loss and perplexity, then decoding with the `decode` settings and every metric of
  `evaluate.evaluate_split`, written to WORKDIR/eval/SPLIT/. An agreement run is evaluated with
  its `model.direction` model: the forward one as any RNNsearch, the reverse one on the corpus
  read target -> source, into WORKDIR/eval_reverse/SPLIT/. Returns {split: results}. Holds the
  workdir's lock (`files.workdir_lock`) while it runs.
  """
  settings.validate(config)
  if not ensemble.workdirs(config):  # (An ensemble's members load their own configs.)
    checkpoints.check_model_config(Path(workdir), config)
  with files.workdir_lock([workdir], enabled=jax.process_index() == 0):
    return _evaluate_splits(config, workdir, data, runtime, eval_fn, writer)


def _evaluate_splits(config, workdir, data, runtime, eval_fn, writer):
  ensemble.prepare_workdir(config, workdir)
  workdir = Path(workdir)
  runtime = runtime or rt.Runtime()
  data = data or rt.load_data(config, workdir)
  if eval_fn is None:
    _, eval_fn = rt.compile_steps(config, runtime)
  state = restore_for_eval(
    config, workdir, data.src_tokenizer.size, data.tgt_tokenizer.size, runtime
  )
  direction = config.model.direction
  state = direction_state(state, direction)
  prefix = eval_prefix(config)
  if direction == "reverse":
    data = input_pipeline.reversed_data(data)
  step = int(jax.device_get(state.step))
  results = {}
  for split in ("valid", "test", input_pipeline.LONG_TEST):
    if split not in data.splits:
      continue
    batches = input_pipeline.eval_batches(
      data, split, config, process_index=jax.process_index(), process_count=jax.process_count()
    )
    result = evaluate_loss(eval_fn, state, batches, runtime)
    if not np.isfinite(result["loss"]):
      raise ValueError(
        f"the checkpoint of step {step} gives a non-finite {split} loss ({result['loss']}): its "
        f"parameters are unusable, and {workdir / prefix} is left as it was"
      )
    result["step"] = step
    out = workdir / prefix / split
    result = evaluate.evaluate_split(
      rt.host_local(state),
      data,
      split,
      config,
      out,
      extra=result,
      writer=writer,
      write=jax.process_index() == 0,
    )
    if writer is not None:  # Final scalars go to TensorBoard; metrics.jsonl holds training only.
      scalars = {k: v for k, v in result.items() if isinstance(v, int | float)}
      writer.write(step, f"{prefix}_{split}", scalars, jsonl=False)
    if jax.process_index() == 0:
      report.write_report(workdir, prefix, split)
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

"""Beam search's trace (beams.BeamTrace) and the beam view built from it
(translate.beam_view): what each step kept and finished, checked against the search's own final
state and against enumeration on table models, and the view of a trained run against its
translations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import TableModel, score_of

import seq2seq
from seq2seq import translate
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.decoding import beams, decode, inference


def traced(table, beam_size=3, max_len=5, **settings):
  src = jnp.full((table.shape[0], 3), 5, jnp.int32)
  run = lambda trace: jax.jit(
    lambda s, m: beams.beam_search_pool(
      TableModel(table), s, m, beam_size=beam_size, max_len=max_len, trace=trace, **settings
    )
  )(src, jnp.ones_like(src))
  return jax.device_get(run(False)), jax.device_get(run(True))


def live_paths(steps, row, count):
  """Each live slot's tokens after `count` steps, followed through the trace's origins."""
  k = steps.tokens.shape[2]
  paths = [[] for _ in range(k)]
  for t in range(count):
    paths = [[*paths[steps.origins[row, t, j]], int(steps.tokens[row, t, j])] for j in range(k)]
  return paths


TABLE = 2.0 * np.random.default_rng(3).normal(size=(4, 7, 7))


def test_tracing_changes_nothing_the_search_does():
  plain, with_trace = traced(TABLE)
  assert plain.trace is None and with_trace.trace is not None
  for name in plain._fields:
    if name not in ("trace", "progress", "dec_state"):
      np.testing.assert_array_equal(getattr(plain, name), getattr(with_trace, name), err_msg=name)


def test_the_trace_rebuilds_the_final_live_beam_and_scores_every_step():
  _, bs = traced(TABLE)
  steps, count = bs.trace, int(bs.t)
  for row in range(TABLE.shape[0]):
    paths = live_paths(steps, row, count)
    for j, path in enumerate(paths):
      assert path == [int(x) for x in bs.live_tokens[row, j, :count]]
    for t in range(count):  # Every kept hypothesis' score is its path's, by the table.
      for j, path in enumerate(live_paths(steps, row, t + 1)):
        if np.isfinite(steps.scores[row, t, j]):
          assert EOS_ID not in path and PAD_ID not in path and BOS_ID not in path
          np.testing.assert_allclose(
            steps.scores[row, t, j], score_of(TABLE[row], path), rtol=1e-5, atol=1e-5
          )
    # Rows after the last step are never written.
    assert not np.isfinite(steps.scores[row, count:]).any()


def test_the_finished_pool_is_what_entered_it_and_was_not_pushed_out():
  _, bs = traced(TABLE, beam_size=2, max_len=6)
  steps, count = bs.trace, int(bs.t)
  for row in range(TABLE.shape[0]):
    entered = []
    for t in range(count):
      before = live_paths(steps, row, t)
      for j in range(2):
        if steps.entered[row, t, j]:
          assert np.isfinite(steps.eos_scores[row, t, j])
          seq = (*before[j], EOS_ID)
          np.testing.assert_allclose(
            steps.eos_scores[row, t, j], score_of(TABLE[row], seq), rtol=1e-5, atol=1e-5
          )
          entered.append((float(steps.eos_norm[row, t, j]), seq))
    pool = [
      tuple(int(x) for x in bs.fin_tokens[row, j, : bs.fin_lengths[row, j]])
      for j in range(2)
      if np.isfinite(bs.fin_scores[row, j])
    ]
    best_entered = [seq for _, seq in sorted(entered, key=lambda e: -e[0])[: len(pool)]]
    assert pool == best_entered


class NNXTable(nnx.Module):
  """A TableModel that `jit_decode` can take (an NNX module), and that runs over a shortlist."""

  uses_attention = True

  def __init__(self, table_BVV):
    self.table = nnx.Param(jnp.asarray(table_BVV, jnp.float32))

  def encode(self, src_BS, src_mask_BS, steps=None):
    return TableModel(self.table.value).encode(src_BS, src_mask_BS)

  def decoder_step(self, enc, state, y_prev_B, output_ids=None, output_mask=None):
    new_state, logits_BV, alpha = TableModel(self.table.value).decoder_step(enc, state, y_prev_B)
    return new_state, logits_BV if output_ids is None else logits_BV[:, output_ids], alpha


def test_a_shortlists_trace_names_words_as_its_result_does():
  """Under a shortlist the search runs over candidate positions; jit_decode maps the trace's
  tokens to word ids as it maps the result's."""
  table = np.full((1, 7, 7), -4.0)
  table[0, :, 5] = 3.0  # Word 5 (candidate position 4), then word 6 (position 5), then EOS.
  table[0, 5, 6] = table[0, 6, EOS_ID] = 5.0
  ids = jnp.asarray([0, 1, 2, 3, 5, 6], jnp.int32)  # Word 4 is no candidate.
  graphdef, params = nnx.split(NNXTable(table))
  src = jnp.full((1, 3), 5, jnp.int32)
  result, steps = decode.jit_decode(
    graphdef, params, src, jnp.ones_like(src), beam_size=2, max_len=4, output_ids=ids, trace=True
  )
  assert [int(x) for x in result.tokens[0, :3]] == [5, 6, EOS_ID]
  kept = np.asarray(steps.tokens[0])[np.isfinite(np.asarray(steps.scores[0]))]
  assert {5, 6} <= set(kept.tolist()) and 4 not in kept
  assert live_paths(jax.device_get(steps), 0, 2)[0] == [5, 6]


# The view of a trained run.
@pytest.fixture(scope="module")
def translator(trained):
  return seq2seq.load(trained)


def winner_of(view):
  step, kind, index = view["winner"]
  return view["steps"][step][kind][index]


@pytest.mark.parametrize("beam_size", [2, 4])
def test_the_view_shows_the_translation_the_search_returns(translator, beam_size):
  sentence = "the man will not"
  view = translate.beam_view(translator, sentence, beam_size=beam_size)
  [best] = translator.translate([sentence], beam_size=beam_size)[0]
  assert view["translation"]["text"] == best.text
  np.testing.assert_allclose(view["translation"]["score"], best.score, rtol=1e-6)
  won = winner_of(view)
  tokens = view["translation"]["tokens"] + (["</s>"] if best.finished else [])
  assert won["tokens"] == tokens
  if best.finished:
    np.testing.assert_allclose(won["norm_score"], best.norm_score, rtol=1e-6)
    assert won["entered"]
  for step in view["steps"]:
    assert 1 <= len(step["live"]) <= beam_size
    assert all(len(c["tokens"]) == len(step["live"][0]["tokens"]) for c in step["live"])
  assert view["source"] == ["the", "man", "will", "not", "</s>"]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_view_under_a_prefix_keeps_it_in_every_hypothesis(translator, beam_size):
  view = translate.beam_view(translator, "the man will not", prefix="le chat", beam_size=beam_size)
  [best] = translator.translate(["the man will not"], beam_size=beam_size, prefixes=["le chat"])[0]
  assert view["translation"]["text"] == best.text
  assert [len(s["live"]) for s in view["steps"][:2]] == [1, 1]  # Forced: one way on.
  for t, step in enumerate(view["steps"]):
    for c in step["live"]:
      assert c["tokens"][:2] == ["le", "chat"][: t + 1]


def test_the_view_at_width_1_follows_greedy_search_as_translation_does(translator):
  """Translation searches greedily at width 1. A beam of one differs: it keeps a finished pool,
  and on this run ends one word earlier where greedy runs to the length limit."""
  sentence = "the man will not"
  [greedy] = translator.translate([sentence], beam_size=1)[0]
  dec = translator.decoding_with(beam_size=1, batch_size=1)
  ids, *_ = translate._encode_lines(translator, dec, [sentence])
  [(beam1, _)] = inference.traced_split(translator.state, translate._split(ids, [[]]), dec)
  assert beam1.ids != greedy.ids  # The case this test is for.
  view = translate.beam_view(translator, sentence, beam_size=1)
  assert view["translation"]["text"] == greedy.text
  assert view["translation"]["finished"] == greedy.finished
  np.testing.assert_allclose(view["translation"]["score"], greedy.score, rtol=1e-6)
  won = winner_of(view)
  assert won["tokens"] == greedy.tokens + (["</s>"] if greedy.finished else [])
  path = [s["live"] for s in view["steps"] if s["live"]]
  assert [c[0]["tokens"] for c in path] == [greedy.tokens[: i + 1] for i in range(len(path))]
  assert all(len(c) == 1 for c in path)
  np.testing.assert_allclose(path[-1][0]["score"], greedy.score, rtol=1e-4)


def test_the_greedy_view_ends_a_finished_translation_with_eos(translator, monkeypatch):
  """Where greedy ends with EOS (on this run it never does, so a scored output stands in), the
  last step holds that ending, the winner, after one kept hypothesis per word."""
  [scored] = translator.score(["the man"], ["le chat"])
  ids = translator.tgt_tok.encode("le chat")
  ends = inference.Hypothesis(ids, np.zeros((3, 3)), scored.score, scored.norm_score)
  monkeypatch.setattr(inference, "nbest_split", lambda *args, **kwargs: [[ends]])
  view = translate.beam_view(translator, "the man", beam_size=1)
  kept = [step["live"] for step in view["steps"][:2]]
  assert [[c["tokens"] for c in k] for k in kept] == [[["le"]], [["le", "chat"]]]
  np.testing.assert_allclose(kept[1][0]["score"], sum(scored.token_scores[:2]), rtol=1e-6)
  assert len(view["steps"]) == 3 and view["steps"][2]["live"] == []
  assert winner_of(view) == view["steps"][2]["finished"][0] and view["winner"][1] == "finished"
  assert winner_of(view)["tokens"] == ["le", "chat", "</s>"]
  assert winner_of(view)["score"] == scored.score and view["translation"]["finished"]


@pytest.mark.parametrize(
  ("settings", "message"),
  [
    ({"sampling": "sample(n=2)"}, "without sampling"),
    ({"beam": 3}, "not decode settings"),
  ],
)
def test_the_view_refuses_what_is_not_beam_search(translator, settings, message):
  with pytest.raises(ValueError, match=message):
    translate.beam_view(translator, "the man", **settings)


def test_the_view_refuses_a_blank_line(translator):
  with pytest.raises(ValueError, match="blank"):
    translate.beam_view(translator, "   ", beam_size=2)

"""Length penalties (`seq2seq.decoding.length_penalties`): each ranks as its formula, written here
by hand; each bound is the best rank any ending of a live hypothesis can reach (an upper bound, and
reached); specs parse, print canonically and refuse bad settings in one line. Beam search under
every penalty is checked against exhaustive search in tests/decoding/test_decode.py."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.decoding import length_penalties

BY_HAND = {
  "none": lambda s, n: s,
  "power": lambda s, n: s / n,
  "power(alpha=0.5)": lambda s, n: s / n**0.5,
  "power(alpha=0)": lambda s, n: s,
  "gnmt": lambda s, n: s / ((5 + n) / 6) ** 0.6,
  "gnmt(alpha=1.2)": lambda s, n: s / ((5 + n) / 6) ** 1.2,
  "word(penalty=0.7)": lambda s, n: s - 0.7 * n,
  "word(penalty=-1.5)": lambda s, n: s + 1.5 * n,
  "word": lambda s, n: s,
}


@pytest.mark.parametrize("spec", list(BY_HAND))
def test_each_penalty_ranks_as_its_formula(spec):
  penalty = length_penalties.make(spec)
  scores = np.array([-0.3, -4.0, -12.5, 0.0])
  lengths = np.array([1, 3, 7, 2])
  want = [BY_HAND[spec](s, n) for s, n in zip(scores, lengths, strict=True)]
  np.testing.assert_allclose(
    penalty.rank(jnp.asarray(scores), jnp.asarray(lengths)), want, rtol=1e-6
  )
  # An empty slot stays empty, whatever the length.
  assert float(penalty.rank(jnp.asarray(-jnp.inf), 5)) == -np.inf


@pytest.mark.parametrize("spec", list(BY_HAND))
def test_the_bound_is_the_best_rank_any_ending_can_reach(spec):
  """For a live score s at t tokens, every output extending it ends at a length n in
  t + 1 .. max_len with a score s' <= s: the bound must be >= every such rank (else the search
  stops too early) and equal to the best of them (else it runs on for nothing)."""
  penalty, rank, max_len = length_penalties.make(spec), BY_HAND[spec], 9
  for s, t in itertools.product([0.0, -0.2, -3.0, -20.0], range(max_len)):
    bound = float(penalty.bound(jnp.asarray(s, jnp.float32), t, max_len))
    reachable = [rank(s2, n) for n in range(t + 1, max_len + 1) for s2 in (s, s - 1.0, s - 7.0)]
    assert max(reachable) <= bound + 1e-5 * (1 + abs(bound)), (s, t)
    np.testing.assert_allclose(bound, max(reachable), rtol=1e-6, atol=1e-6)


def test_specs_print_canonically_and_the_same_spec_is_the_same_penalty():
  assert str(length_penalties.make("power(alpha=1.0)")) == "power"
  assert str(length_penalties.make("gnmt(alpha=0.6)")) == "gnmt"
  assert str(length_penalties.make("word(penalty=-2)")) == "word(penalty=-2.0)"
  assert length_penalties.make("power") is length_penalties.make("power(alpha=1)")
  penalty = length_penalties.make("gnmt(alpha=0.7)")
  assert length_penalties.make(penalty) is penalty
  assert hash(penalty) == hash(length_penalties.make("gnmt(alpha=0.70)"))  # A static jit argument.


@pytest.mark.parametrize(
  ("spec", "message"),
  [
    ("power(alpha=-1)", "alpha must be >= 0, got -1.0"),
    ("gnmt(alpha=-0.1)", "alpha must be >= 0, got -0.1"),
    ("power(alpha=nan)", "alpha must be >= 0, got nan"),
    ("power(alpha=inf)", "alpha must be finite, got inf"),  # Every length would rank alike.
    ("gnmt(alpha=inf)", "alpha must be finite, got inf"),
    ("word(penalty=nan)", "penalty must be finite, got nan"),
    ("word(penalty=-inf)", "penalty must be finite, got -inf"),
    ("linear", "unknown length penalty 'linear' \\(decode.length_penalty\\); valid: none, power"),
    ("word(weight=1)", "word has no setting 'weight'; valid: penalty"),
    ("power(alpha=x)", "power\\(alpha=...\\) must be float"),
  ],
)
def test_bad_specs_fail_in_one_line(spec, message):
  with pytest.raises(ValueError, match=message) as error:
    length_penalties.make(spec)
  assert "\n" not in str(error.value)

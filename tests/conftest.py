"""Shared fixtures: small configs and random padded batches.

Most of the tests' time is JAX tracing, lowering and compiling small programs (and starting
Python processes, which `helpers.run_main` avoids where it can). Before JAX starts, this file
points the persistent compilation cache of this process and of the processes it starts (runs
that need their own, a sweep's jobs) at one folder per session, so a program compiled once is
loaded by the others (the same executable: results do not change), and turns XLA's backend
optimisations down (`helpers.FAST_COMPILE`) unless XLA_FLAGS is set: the tests check shapes,
equalities and that models learn, not speed. With them the suite took 9:07 instead of 11:20
on 2 cores, every test passing (test_supervised_attention_lowers_aer: AER 0.35 supervised
against 0.64). Turning XLA's CPU fusion emitters off as well took it from 15:41 to 10:30 (user
CPU 25:34 to 16:34) on a 2-core Intel Xeon beside a training run, all 483 tests passing.
"""

import os
import shutil
import tempfile

from helpers import FAST_COMPILE

os.environ.setdefault("XLA_FLAGS", FAST_COMPILE)

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _CACHE = tempfile.mkdtemp(prefix="seq2seq-jax-cache-")  # Removed when the session ends.
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
else:
  _CACHE = None
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402

from configs import tiny  # noqa: E402

# On a GPU, JAX multiplies float32 matrices in TF32 by default (about 1e-3 relative error: the
# float64-reference tests of the score functions fail so on an H100). The tests
# check the maths, not the backend's default, so they ask for full float32 products there. On
# the CPU float32 products are always full, and this does not run.
if jax.default_backend() != "cpu":
  jax.config.update("jax_default_matmul_precision", "highest")


def pytest_collection_modifyitems(config, items):
  """Tests marked slow run first (in their files' order), the quick ones after them. Across
  the workers of `pytest -n 2 --dist worksteal` the last tests are then short ones, so neither
  core sits idle while the other finishes a long end-to-end run."""
  items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_sessionfinish(session, exitstatus):
  if _CACHE is not None:
    shutil.rmtree(_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
  """A 20-step run of configs/tiny.py through main.py (shared by the end-to-end tests)."""
  from helpers import run_main

  workdir = tmp_path_factory.mktemp("run") / "full"
  run_main(workdir, "--config.train.num_steps=20")
  return workdir


@pytest.fixture
def tiny_config():
  return tiny.get_config()


def random_batch(seed=0, batch=4, src_len=7, tgt_len=6, vocab=50, pad_rows=True):
  """A batch dict of int32 arrays with ragged padding on both sides."""
  rng = np.random.default_rng(seed)
  src_lens = rng.integers(1, src_len + 1, batch)
  tgt_lens = rng.integers(1, tgt_len + 1, batch)
  if not pad_rows:
    src_lens[:], tgt_lens[:] = src_len, tgt_len
  src_mask = (np.arange(src_len)[None] < src_lens[:, None]).astype(np.int32)
  tgt_mask = (np.arange(tgt_len)[None] < tgt_lens[:, None]).astype(np.int32)
  return {
    "src": (rng.integers(4, vocab, (batch, src_len)) * src_mask).astype(np.int32),
    "src_mask": src_mask,
    "tgt_in": (rng.integers(4, vocab, (batch, tgt_len)) * tgt_mask).astype(np.int32),
    "tgt_out": (rng.integers(4, vocab, (batch, tgt_len)) * tgt_mask).astype(np.int32),
    "tgt_mask": tgt_mask,
  }


def randomise(module, seed=1, scale=0.3):
  """Adds N(0, scale^2) noise to every parameter, so scores and attention are far from uniform
  (the paper init starts with v_a = 0, which makes every score function look alike). The tables
  a model stores but never trains (`models.LexiconTable`: lexicon bias, copy map) stay as built:
  noise would turn their ids into other words and their probabilities negative."""
  from seq2seq.models import LexiconTable

  graphdef, tables, state = nnx.split(module, LexiconTable, ...)
  leaves, treedef = jax.tree.flatten(state)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  pairs = zip(keys, leaves, strict=True)
  noise = [scale * jax.random.normal(k, x.shape, x.dtype) for k, x in pairs]
  leaves = [x + n for x, n in zip(leaves, noise, strict=True)]
  return nnx.merge(graphdef, tables, jax.tree.unflatten(treedef, leaves))


def random_lexicon(vocab, k=3, seed=0):
  """A lexical table (`seq2seq.lexicon.Lexicon`) giving every source id `k` distinct target ids
  from 4 up with Dirichlet-drawn probabilities; the frequency order is the ids'."""
  from seq2seq import lexicon

  rng = np.random.default_rng(seed)
  ids = np.stack([rng.choice(np.arange(4, vocab), k, replace=False) for _ in range(vocab)])
  probs = rng.dirichlet(np.ones(k), vocab).astype(np.float32)
  return lexicon.Lexicon(ids.astype(np.int32), probs, np.arange(vocab, dtype=np.int32))

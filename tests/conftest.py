"""The tests' fixtures and pytest hooks (what they share besides: helpers.py).

Most of the tests' time is JAX tracing, lowering and compiling small programs (and starting Python
processes, which `helpers.run_main` avoids where it can). Before JAX starts, this file points the
persistent compilation cache of the processes the tests start (runs that need their own, a sweep's
jobs) at one folder per session, so a program compiled once is loaded by the others (the same
executable: results do not change); the pytest processes themselves do not use it (below). It also
turns XLA's backend optimisations down (`helpers.FAST_COMPILE`) unless XLA_FLAGS is set: the tests
check shapes, equalities and that models learn, not speed. With them the suite took 9:07 instead of
11:20 on 2 cores, every test passing (test_supervised_attention_lowers_aer: AER 0.35 supervised
against 0.64). Turning XLA's CPU fusion emitters off as well took it from 15:41 to 10:30 (user CPU
25:34 to 16:34) on a 2-core Intel Xeon beside a training run, all 483 tests passing.
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
import pytest  # noqa: E402

# This process itself writes nothing to the cache (the processes it starts still share the
# folder): on a 2-core Sapphire Rapids, XLA's executable.serialize() segfaulted inside JAX's
# cache write twice in three full runs (2026-12-03, decoding programs of tests/test_decode.py),
# taking a pytest worker down with it.
jax.config.update("jax_enable_compilation_cache", False)

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


@pytest.fixture(scope="session")
def cache_flags() -> list[str]:
  """An experiment script's flags for the session's compilation cache (set above), which it
  shares with the main.py runs of other tests and the other test workers: programs they
  compiled are loaded, not rebuilt."""
  return ["--compilation-cache", os.environ["JAX_COMPILATION_CACHE_DIR"]]

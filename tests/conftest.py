"""The tests' fixtures and pytest hooks (what they share besides: helpers.py).

Most of the tests' time is JAX tracing, lowering and compiling small programs (and starting Python
processes, which `helpers.run_main` avoids where it can). Before JAX starts, this file points the
persistent compilation cache at one folder per session, shared by the pytest workers and the
processes the tests start (runs that need their own, a sweep's jobs), so a program compiled once is
loaded by the others (the same executable: results do not change). It also
turns XLA's backend optimisations down (`helpers.FAST_COMPILE`) unless XLA_FLAGS is set: the tests
check shapes, equalities and that models learn, not speed. With them the suite took 9:07 instead of
11:20 on 2 cores, every test passing (test_supervised_attention_lowers_aer: AER 0.35 supervised
against 0.64). Turning XLA's CPU fusion emitters off as well took it from 15:41 to 10:30 (user CPU
25:34 to 16:34) on a 2-core Intel Xeon beside a training run, all 483 tests passing.
"""

import gc
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


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
  """Drops JAX's compiled programs after each test file. Every executable JAX keeps holds memory
  mappings of its own, and a pytest worker that compiled a few hundred files' programs reached
  Linux's limit of 65,530 mappings a process (vm.max_map_count): the next mmap failed inside XLA
  and the worker died of a segmentation fault (2026-12-03, measured from /proc/PID/maps: 65,341
  mappings in the worker that crashed, in tests/decoding/test_decode.py near the end of the
  suite)."""
  yield
  jax.clear_caches()
  gc.collect()


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

"""Where arrays live: the device mesh, batch placement, the jitted steps with their shardings,
and what every process of a multi-host run must agree on."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.experimental.compilation_cache import compilation_cache

from seq2seq import settings
from seq2seq.data import input_pipeline
from seq2seq.training import train_state

MODEL_KEYS = ("src", "src_mask", "tgt_in", "tgt_out", "tgt_mask", "align")  # "align": optional.


class Runtime:
  """The device mesh (one data axis over every device) and how arrays are placed on it."""

  def __init__(self):
    self.mesh = jax.sharding.Mesh(np.asarray(jax.devices()), ("data",))
    self.replicated = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())
    self.batch = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec("data"))

  def put_batch(self, batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
    """This process's rows of a batch -> global arrays sharded over the data axis."""
    return {
      k: jax.make_array_from_process_local_data(self.batch, batch[k])
      for k in MODEL_KEYS
      if k in batch
    }

  def check_batch_size(self, batch_size: int) -> None:
    devices = jax.device_count()
    if batch_size % devices:
      raise ValueError(
        f"data.batch_size={batch_size} does not split over {devices} devices; "
        "choose a multiple of the device count"
      )


def compile_steps(
  run: settings.RunSettings,
  runtime: Runtime,
  *,
  stacked: bool = False,
  train_step: Callable | None = None,
):
  """The jitted train and eval steps with their shardings (state replicated, batch sharded).

  `train_step(state, batch, rng) -> (state, metrics)` defaults to `train_state.train_step` of the
  run; `stacked`: vmap both steps over a leading member axis of the state (and of the rng),
  one batch shared by every member (seeds trained together).
  """
  rep, bat = runtime.replicated, runtime.batch
  train_fn = train_step or functools.partial(train_state.train_step, run=run)
  eval_fn = train_state.eval_step
  if stacked:
    train_fn = jax.vmap(train_fn, in_axes=(0, None, 0))
    eval_fn = jax.vmap(eval_fn, in_axes=(0, None))
  train_fn = jax.jit(
    train_fn, in_shardings=(rep, bat, rep), out_shardings=(rep, rep), donate_argnums=0
  )
  eval_fn = jax.jit(eval_fn, in_shardings=(rep, bat), out_shardings=rep)
  return train_fn, eval_fn


def load_data(run: settings.RunSettings, workdir: Path) -> input_pipeline.Data:
  """`input_pipeline.load_data` with the batch keys the objective reads; with several
  processes, process 0 builds the datasets and vocabularies in the shared workdir first (and
  checks the store's CRC-32s, preparing it again if damaged), and the others then open them
  checking file sizes only, so each of them reads only the rows it batches."""
  load = functools.partial(
    input_pipeline.load_data,
    run.data,
    workdir,
    batch_keys=run.objective.batch_keys,
  )
  if jax.process_count() == 1:
    return load()
  data = load() if jax.process_index() == 0 else None
  multihost_utils.sync_global_devices("seq2seq:data-ready")
  return data or load(verify=False)


def _init(run: settings.RunSettings, src_vocab: int, tgt_vocab: int, copy_map=None, lexicon=None):
  """`train_state.create_train_state` of the run with everything but the key bound."""
  return functools.partial(
    train_state.create_train_state,
    run,
    src_vocab=src_vocab,
    tgt_vocab=tgt_vocab,
    copy_map=copy_map,
    lexicon=lexicon,
  )


def _init_key(run: settings.RunSettings) -> jax.Array:
  return jax.random.fold_in(jax.random.key(run.seed), 0)


def initial_state(
  run: settings.RunSettings,
  src_vocab: int,
  tgt_vocab: int,
  runtime: Runtime,
  copy_map: np.ndarray | None = None,
  lexicon=None,
) -> train_state.TrainState:
  """A fresh, replicated state from the run's seed (`copy_map`, `lexicon`: tables built from
  the data, see `train_state.create_train_state`)."""
  init = _init(run, src_vocab, tgt_vocab, copy_map, lexicon)
  return jax.jit(init, out_shardings=runtime.replicated)(_init_key(run))


def abstract_state(
  run: settings.RunSettings, src_vocab: int, tgt_vocab: int, runtime: Runtime
) -> train_state.TrainState:
  """The shapes, dtypes and (replicated) shardings of `initial_state`, computed without
  compiling or running the initialisers: the template a checkpoint is restored into."""
  shapes = jax.eval_shape(_init(run, src_vocab, tgt_vocab), _init_key(run))
  return jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=runtime.replicated), shapes
  )


def from_process0(value):
  """Process 0's `value` (a host scalar) on every process, so all of them act alike."""
  if jax.process_count() == 1:
    return value
  return multihost_utils.broadcast_one_to_all(np.asarray(value)).item()


def all_agree(flag: bool) -> bool:
  """Process 0's `flag` on every process (so all of them stop at the same step)."""
  return bool(from_process0(flag))


def host_local(state: train_state.TrainState) -> train_state.TrainState:
  """The state with parameters as this process's local copies (decoding runs per process)."""
  if jax.process_count() == 1:
    return state
  return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), state)


def enable_compilation_cache(path: str | Path | None, *, replace: bool = True) -> Path | None:
  """JAX's persistent compilation cache in `path` for every program this process compiles, so a
  later process (a second `--mode=translate`, a resumed run, a sweep's next run) loads them
  instead of compiling again: the same executables, so results do not change. None or "none"
  leaves it off; with `replace` False a process that already has a cache folder (a sweep's
  shared one, the tests') keeps it. Returns the folder in use, or None.

  Processes may share one folder: an entry read while another process writes it is a cache
  miss (JAX warns and compiles), never a wrong program.
  """
  current = jax.config.jax_compilation_cache_dir
  if path is None or str(path).lower() == "none" or (current and not replace):
    return Path(current) if current else None
  Path(path).mkdir(parents=True, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", str(path))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  # A cache already opened (a program compiled before, as validating a config does) keeps its
  # folder until reset; the next compilation opens the new one.
  compilation_cache.reset_cache()
  return Path(path)

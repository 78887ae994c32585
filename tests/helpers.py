"""What several test modules share besides fixtures (those, and pytest's hooks, are in
conftest.py): running main.py and the experiment scripts as a user runs them, with cheap
compilation; reading a run's metrics and checkpoints; random padded batches, parameter noise and
lexical tables; a stand-in model whose next-word logits come from a fixed table; made-up
explorer records. Test modules import from here, never from one another.

conftest.py imports this module before it points JAX at the session's compilation cache, which
JAX reads when it is imported: so JAX, Flax and the package are imported inside the functions
that use them, never at the top of this file.

A run goes through the program's own entry point (main.py's flags and `main`, a script's
`main(argv)`) in the test's process unless it asks for a process of its own: a fresh Python
spends some 4 s importing JAX, Flax, Orbax, tfds and matplotlib before it does anything, and
the tests run some thirty such programs. Runs that need their own process ask for it: those
given XLA flags (XLA reads them once, when its backend starts), those that must die of a bad
command line (absl ends the process there), and those a test signals or runs side by side.
On a 2-core AMD EPYC beside two training runs, the 96 tests of test_experiments_*, test_main,
test_agreement, test_explorer, test_translate, test_reliability and test_console took 288 and
306 s so (user+sys CPU 504 and 531 s) against 364 and 384 s (646 and 688 s) with a fresh
process for every run (`pytest -n 2 --dist worksteal` on those files, the two trees in turn).
The main.py and `-m` commands a script runs in turn (`experiments.lib.configs.run_command`: a
sweep's runs, a study's evaluations) run in the test's process too: the MBR study's test, twelve
such commands, took 61 s instead of 135 s alone on a 2-core AMD EPYC (AVX2) beside a training
run (user+sys CPU of the whole pytest 100 s against 173 s).
"""

import contextlib
import importlib
import io
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


# main.py runs check files, shapes and equalities between runs, not speed: compile cheaply. XLA's
# CPU fusion emitters cost about 45% of the compile time of the tiny config's train step and of
# eager ops (their programs run as fast without them): they are off too.
FAST_COMPILE = (
  "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
  " --xla_cpu_use_fusion_emitters=false"
)


TEST_SENTENCES = 64  # configs/tiny.py: data.synthetic.test_pairs.


def is_score(value: object) -> bool:
  """Whether `value` is a finite BLEU or chrF score: a number from 0 to 100."""
  return isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 100.0


def subprocess_env(extra_xla_flags: str = "") -> dict[str, str]:
  """The environment of a main.py run: this one, with FAST_COMPILE (and `extra_xla_flags`)."""
  return {**os.environ, "XLA_FLAGS": f"{FAST_COMPILE} {extra_xla_flags}".strip()}


def main_command(workdir, *overrides) -> list[str]:
  """main.py on configs/tiny.py in `workdir` with `overrides`."""
  return [sys.executable, "main.py", "--config=configs/tiny.py", f"--workdir={workdir}", *overrides]


def run_main(workdir, *overrides, **how):
  """main.py on configs/tiny.py in `workdir` with `overrides` (`run_main_py`'s keywords)."""
  return run_main_py(main_command(workdir, *overrides), **how)


def run_main_py(cmd: list[str], *, xla_flags="", check=True, own_process=False):
  """`cmd`, a `python main.py ARGS` command line: its exit status and output as a
  `subprocess.CompletedProcess`. It runs in this process (see the module's docstring) unless
  `own_process` or `xla_flags`; with `check`, a non-zero exit fails the test."""
  if own_process or xla_flags:
    proc = _in_own_process(cmd, subprocess_env(xla_flags))
  else:
    proc = _in_this_process(_main_py, cmd[1:])
  if check and proc.returncode != 0:
    raise AssertionError(f"exit {proc.returncode}\n{proc.stderr[-3000:]}")
  return proc


def _main_py(argv: list[str]) -> None:
  """main.py's `__main__` without `app.run`'s process setup: its flags parsed from `argv` (the
  config file's field overrides, which ml_collections reads from sys.argv), then `main`; the
  flags are left unparsed again, as this process had them (absl's log handler writes elsewhere
  once flags are parsed)."""
  from absl import flags

  import main as entry

  flag_values, absl_logger = flags.FLAGS, logging.getLogger("absl")
  saved_argv, saved_level = sys.argv, absl_logger.level
  sys.argv = argv
  try:
    rest = flag_values(argv)
    # app.run puts absl's handler on the root logger, and --verbosity then leaves the "absl"
    # logger's level unset (root decides, as `console.logged_to` sets it); without app.run,
    # parsing the flag sets it to WARNING, which would keep Orbax's INFO lines out of log.txt.
    absl_logger.setLevel(logging.NOTSET)
    entry.main(rest)
  finally:
    sys.argv = saved_argv
    flag_values.unparse_flags()
    for name in [n for n in flag_values if n.startswith("config.")]:  # This run's overrides.
      delattr(flag_values, name)
    absl_logger.setLevel(saved_level)


def _in_own_process(cmd: list[str], env: dict[str, str], timeout: float = 600):
  """`cmd` in a fresh process from the repository root, its output captured."""
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _in_this_process(entry, argv: list[str]) -> subprocess.CompletedProcess:
  """`entry(argv)` from the repository root with standard output and error captured. The exit
  status is what `python` would give: the code of a SystemExit (a message: printed, status 1),
  an int that `entry` returns (plateau.py exits with its main's), else 0. Any other exception
  fails the test where it is raised."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      result = entry(argv)
    except SystemExit as stop:
      result = stop.code
    if isinstance(result, str):
      print(result, file=sys.stderr)
      result = 1
  status = result if isinstance(result, int) else 0
  return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


def run_processes(commands: list[list[str]], envs: list[dict[str, str]]) -> None:
  """Starts every command at once from the repository root, each with its environment (the
  processes of one multi-process run), and fails the calling test unless all exit 0."""
  procs = [
    subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for cmd, env in zip(commands, envs, strict=True)
  ]
  outputs = [p.communicate(timeout=600) for p in procs]
  for p, (_, err) in zip(procs, outputs, strict=True):
    assert p.returncode == 0, err.decode()[-3000:]


def metric_rows(workdir):
  return [json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]


def final_params(workdir):
  """The parameters of the latest checkpoint as a flat dict of arrays."""
  import orbax.checkpoint as ocp

  ckpt_dir = Path(workdir) / "checkpoints"
  step = max(int(p.name) for p in ckpt_dir.iterdir() if p.name.isdigit())
  tree = ocp.StandardCheckpointer().restore(ckpt_dir / str(step) / "state")
  flat = {}

  def walk(prefix, node):
    if isinstance(node, dict):
      for k, v in node.items():
        walk(f"{prefix}/{k}", v)
    else:
      flat[prefix] = np.asarray(node)

  walk("", tree["params"])
  return step, flat


def run_module(module: str, *args: str, own_process: bool = False, timeout: float = 600):
  """`python -m MODULE ARGS` from the repository root on the CPU with FAST_COMPILE: the
  script's `main(argv)` in this process (see the module's docstring) unless `own_process`; fails
  the calling test on a non-zero exit."""
  cmd = [sys.executable, "-m", module, *args]
  if own_process:
    proc = _in_own_process(cmd, {**subprocess_env(), "JAX_PLATFORMS": "cpu"}, timeout)
  else:
    from experiments.lib import configs

    saved, configs.subprocess = configs.subprocess, _CommandsHere
    try:
      proc = _module_here(module, list(args))
    finally:
      configs.subprocess = saved
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def _module_here(module: str, args: list[str]) -> subprocess.CompletedProcess:
  """`python -m MODULE ARGS` as the script's `main(ARGS)` in this process."""
  script = importlib.import_module(module)
  return _in_this_process(lambda argv: script.main(argv[1:]), [module, *args])


class _CommandsHere:
  """`subprocess` as `experiments.lib.configs.run_command` sees it while a script runs in the
  test's process: the `python main.py ...` and `python -m MODULE ...` commands the script runs
  through it (a sweep's training runs, a study's evaluations) run in this process as well, their
  output passed on."""

  @staticmethod
  def run(cmd: list[str], **_) -> subprocess.CompletedProcess:
    if cmd[1] == "main.py":
      proc = _in_this_process(_main_py, cmd[1:])
    else:  # -m MODULE ARGS
      proc = _module_here(cmd[2], cmd[3:])
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc


def tiny_sweep_args(out, steps: int, seeds: str = "0") -> list[str]:
  """A one-point sweep of configs/tiny.py (additive), `steps` updates a seed with one
  evaluation and one checkpoint at the end, no validation BLEU, no heatmaps (drawing them took
  some 2 s of each split's final evaluation), a short bootstrap and randomisation, into `out`."""
  args = ["--config=configs/tiny.py", "--grid", "model.score=additive", "--seeds", seeds]
  args += [f"--set=train.num_steps={steps}", f"--set=train.eval_every={steps}"]
  args += [f"--set=train.checkpoint_every={steps}", "--set=train.valid_bleu=0"]
  args += ["--set=decode.num_heatmaps=0"]
  return [*args, "--bootstrap-samples", "10", "--ar-trials", "10", "--out", str(out)]


def tiny_without_heatmaps(folder) -> str:
  """A config file in `folder`: configs/tiny.py drawing no heatmaps. For a study given a run of
  configs/tiny.py whose `--config` reaches every evaluation it runs (as decode.* settings of an
  ensemble of the run), where no test reads the heatmaps: drawing them took some 2 s of each
  split an evaluation decodes."""
  path = Path(folder) / "tiny_without_heatmaps.py"
  path.write_text(
    "from configs import tiny\n\n\ndef get_config():\n  config = tiny.get_config()\n"
    "  config.decode.num_heatmaps = 0\n  return config\n"
  )
  return str(path)


def explorer_records(n: int, seed: int = 0, max_words: int = 30, heads: int = 0) -> list[dict]:
  """`n` sentence records shaped as `evaluate.sentence_records` writes them, without a model:
  made-up words, attention peaked near the diagonal (rows sum to 1), gold links on the
  diagonal. For explorer tests that need no training, and for timing reports of any size."""
  from seq2seq import explorer

  rng = np.random.default_rng(seed)
  records = []
  for i in range(n):
    words = int(rng.integers(3, max_words + 1))
    out_len = max(1, words + int(rng.integers(-2, 3)))
    src = [f"s{i}w{j}" for j in range(words)]
    ref = [f"r{i}w{j}" for j in range(words)]
    out = [f"h{i}w{t}" for t in range(out_len)]
    logits = -np.abs(np.arange(out_len + 1)[:, None] - np.arange(words + 1)[None]) * 3.0
    alpha = np.exp(logits + rng.normal(0, 0.5, logits.shape))
    alpha /= alpha.sum(axis=1, keepdims=True)
    forced = alpha[:words, :words] / alpha[:words, :words].sum(axis=1, keepdims=True)
    maps = [{"name": "attention", **explorer.encode_map(alpha)}]
    maps += [{"name": f"head {h + 1}", **explorer.encode_map(alpha[:, ::-1])} for h in range(heads)]
    records.append(
      {
        "index": i,
        "line": i,
        "source": " ".join(src),
        "reference": " ".join(ref),
        "hypothesis": " ".join(out),
        "bleu": float(rng.uniform(0, 100)),
        "chrf": float(rng.uniform(0, 100)),
        "source_words": words,
        "unk": {"source": int(rng.integers(0, 2)), "reference": 0, "output": 0},
        "entropy": float(rng.uniform(0, 2)),
        "aer": float(rng.uniform(0, 1)),
        "attention": {"source": src + ["</s>"], "output": out + ["</s>"], "maps": maps},
        "reference_attention": {
          "map": explorer.encode_map(forced),
          "gold": [[j, j] for j in range(words)],
        },
      }
    )
  return records


def explorer_run(name: str = "run", steps: int = 100) -> dict:
  """A run summary shaped as `explorer.run_summary` returns it, with made-up curves."""
  return {
    "name": name,
    "workdir": f"runs/{name}",
    "results": {"step": steps, "bleu": 30.0, "chrf": 55.0, "num_sentences": 10},
    "bleu_by_length": [
      {"min_len": 1, "max_len": 10, "count": 4, "bleu": 35.0},
      {"min_len": 11, "max_len": 20, "count": 6, "bleu": 28.0},
    ],
    "curves": {
      "train": [{"step": s, "minutes": s / 50, "loss": 5.0 / (1 + s / 20)} for s in (10, 50, 100)],
      "valid": [{"step": s, "minutes": s / 50, "loss": 4.0, "bleu": s / 4} for s in (50, 100)],
    },
    "config": {"model": {"score": "additive"}, "train": {"num_steps": steps}},
  }


def decode_random_batch(
  model, beam_size: int, max_len: int, *, seed: int, src_len: int, vocab: int, **kw
):
  """`decode.jit_decode` of `model` on a random padded batch of 4 sources (`random_batch`)."""
  import jax.numpy as jnp
  from flax import nnx

  from seq2seq.decoding import decode

  b = random_batch(seed=seed, batch=4, src_len=src_len, vocab=vocab)
  graphdef, params = nnx.split(model, nnx.Param)
  src, mask = jnp.asarray(b["src"]), jnp.asarray(b["src_mask"])
  return decode.jit_decode(graphdef, params, src, mask, beam_size=beam_size, max_len=max_len, **kw)


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


def build_model(model_config, src_vocab, tgt_vocab, *, sources=1, **tables):
  """`models.build_model` for a test's `config.model` section (tests configure as ConfigDicts;
  the library takes the section's typed `ModelSettings`); `tables` are its `rngs`, `copy_map`
  and `lexicon`."""
  from seq2seq.model import models

  typed = models.ModelSettings.from_config(model_config, sources)
  return models.build_model(typed, src_vocab, tgt_vocab, **tables)


def randomise(module, seed=1, scale=0.3):
  """Adds N(0, scale^2) noise to every parameter, so scores and attention are far from uniform
  (the paper init starts with v_a = 0, which makes every score function look alike). The tables
  a model stores but never trains (`addons.FrozenTable`: lexicon bias, copy map) stay as built:
  noise would turn their ids into other words and their probabilities negative."""
  import jax
  from flax import nnx

  from seq2seq.model.addons import FrozenTable as LexiconTable

  graphdef, tables, state = nnx.split(module, LexiconTable, ...)
  leaves, treedef = jax.tree.flatten(state)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  pairs = zip(keys, leaves, strict=True)
  noise = [scale * jax.random.normal(k, x.shape, x.dtype) for k, x in pairs]
  leaves = [x + n for x, n in zip(leaves, noise, strict=True)]
  return nnx.merge(graphdef, tables, jax.tree.unflatten(treedef, leaves))


def random_lexicon(vocab, k=3, seed=0):
  """A lexical table (`seq2seq.data.lexicon.Lexicon`) giving every source id `k` distinct target ids
  from 4 up with Dirichlet-drawn probabilities; the frequency order is the ids'."""
  from seq2seq.data import lexicon

  rng = np.random.default_rng(seed)
  ids = np.stack([rng.choice(np.arange(4, vocab), k, replace=False) for _ in range(vocab)])
  probs = rng.dirichlet(np.ones(k), vocab).astype(np.float32)
  return lexicon.Lexicon(ids.astype(np.int32), probs, np.arange(vocab, dtype=np.int32))


class TableModel:
  """Next-word logits depend only on the previous word: logits = table[b, y_prev] ([B, V, V]).

  The sentence index b rides in the decoder state, so beams of one sentence share its table. The
  attention at each step is one-hot at position y_prev % S, which makes histories checkable.
  """

  def __init__(self, table_BVV, on_step=None):
    import jax.numpy as jnp

    self.table = jnp.asarray(table_BVV, jnp.float32)
    self.on_step = on_step

  def encode(self, src_BS, src_mask_BS, steps=None):  # `steps`: the decoder steps to follow.
    import jax.numpy as jnp

    from seq2seq.model.models import Encoded

    batch, src_len = src_BS.shape
    annotations = jnp.zeros((batch, src_len, 2), jnp.float32)
    row = jnp.arange(batch, dtype=jnp.float32)[:, None]
    ones = jnp.ones(src_mask_BS.shape)
    return Encoded(annotations, annotations[..., :0], src_mask_BS, row, jnp.zeros((batch, 2)), ones)

  def decoder_step(self, enc, state_BD, y_prev_B):
    import jax
    import jax.numpy as jnp

    if self.on_step is not None:
      jax.debug.callback(self.on_step)
    logits = self.table[state_BD[:, 0].astype(jnp.int32), y_prev_B]
    alpha = jax.nn.one_hot(y_prev_B % enc.mask.shape[1], enc.mask.shape[1])
    return state_BD, logits, alpha


def check_scores_match_search(translator, sources: list[str], nbest: int, searches=None) -> None:
  """Greedy and beam (`nbest` of them) outputs of `translator` (a `seq2seq.load`), or those of
  `searches` ([(decode settings, n-best size)]), scored as given translations, get the scores,
  ranking scores and attention their search reported. An output cut at the length limit is
  scored with EOS after it: its tokens' part equals what the search reported. Asks for at least
  three finished outputs, to compare whole scores."""
  finished = 0
  searches = searches or [({"beam_size": 1}, 1), ({"beam_size": nbest}, nbest)]
  for decode_settings, n in searches:
    found = translator.translate(sources, nbest=n, **decode_settings)
    # An empty output (a sample may end at once) is not scored: scoring refuses an empty side.
    pairs = [(s, h) for s, hyps in zip(sources, found, strict=True) for h in hyps if h.tokens]
    scored = translator.score([s for s, _ in pairs], [h.text for _, h in pairs])
    for (_, h), r in zip(pairs, scored, strict=True):
      assert r.error is None and r.tokens == [*h.tokens, "</s>"]
      k = len(r.tokens) if h.finished else len(h.tokens)
      np.testing.assert_allclose(sum(r.token_scores[:k]), h.score, rtol=1e-4, atol=1e-4)
      np.testing.assert_allclose(r.attention[:k], h.attention, atol=1e-5)
      if h.finished:
        np.testing.assert_allclose(r.score, h.score, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(r.norm_score, h.norm_score, rtol=1e-4, atol=1e-4)
      finished += h.finished
  assert finished >= 3, "want finished outputs to compare whole scores"


def data_config(**data_overrides):
  """configs/tiny.py with a small bucket step (several padded lengths) and `data_overrides`
  (fields of `config.data`)."""
  from configs import tiny

  c = tiny.get_config()
  c.data.bucket_step = 5
  for key, value in data_overrides.items():
    c.data[key] = value
  return c


def data_settings(config):
  """A run's config -> its typed data section (`input_pipeline.DataSettings`), what the data
  functions take."""
  from seq2seq.data import input_pipeline

  return input_pipeline.DataSettings.from_config(config)


def check_trains(cfg, batch, vocab: int, steps: int = 8, **state_args) -> None:
  """`steps` train steps of `cfg` on one batch (from `random_batch`) give finite losses that
  fall, and the parameters stay float32 whatever the compute dtype."""
  import functools

  import jax
  import jax.numpy as jnp

  from seq2seq import settings
  from seq2seq.training import train_state

  run = settings.validate(cfg)
  state = train_state.create_train_state(run, jax.random.key(0), vocab, vocab, **state_args)
  b = {k: jnp.asarray(v) for k, v in batch.items()}
  step = jax.jit(functools.partial(train_state.train_step, run=run))
  losses = []
  for i in range(steps):
    state, metrics = step(state, b, jax.random.key(i))
    losses.append(float(metrics["loss"]))
  assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.params))


def float64(x) -> np.ndarray:
  """A parameter's (or array's) value in float64."""
  return np.asarray(x[...], np.float64)


def dense64(layer, x: np.ndarray) -> np.ndarray:
  """A dense layer (`layers.dense`) applied in float64: x W (+ b)."""
  out = x @ float64(layer.kernel)
  return out + float64(layer.bias) if layer.bias is not None else out


def layer_norm64(norm, x: np.ndarray) -> np.ndarray:
  """`transformer.LayerNorm` in float64 over the last axis."""
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + norm.eps) * float64(norm.gain) + float64(norm.bias)


def reference_cell_step(cell, kind: str, state, x_proj: np.ndarray):
  """One step of a `layers.GRUCell` or `layers.LSTMCell` (`kind` "gru" or "lstm") in float64,
  as the equations write it, from its projected input x_proj: the new state, h or (h, c)."""
  sigmoid = lambda x: 1.0 / (1.0 + np.exp(-x))
  if kind == "lstm":
    h, c = state
    i, f, g, o = np.split(x_proj + h @ float64(cell.u.kernel), 4)
    c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    return sigmoid(o) * np.tanh(c), c
  d = state.shape[0]
  zr = sigmoid(x_proj[: 2 * d] + state @ float64(cell.u_zr.kernel))
  z, r = zr[:d], zr[d:]
  return (1 - z) * state + z * np.tanh(x_proj[2 * d :] + (r * state) @ float64(cell.u_h.kernel))


_COMPILED = {}


def compiled(fn, model, *args, **kwargs):
  """`fn(model, *args, **kwargs)` as one compiled program: the model split into its graph
  (static) and state, the keywords whose values are numbers, strings or None static, the rest
  traced. Called outside `jit`, a model compiles each of its operations for each shape, and each
  scan or while loop again at every call (its body is a new function): 417 programs and 11.6 s
  for one test that force-decoded six pairs one at a time. Here each (function, graph, settings)
  is compiled once per shape."""
  import jax
  from flax import nnx

  static = tuple(sorted((k, v) for k, v in kwargs.items() if _is_static(v)))
  dynamic = {k: v for k, v in kwargs.items() if not _is_static(v)}
  graphdef, state = nnx.split(model)
  key = (fn, graphdef, static)
  if key not in _COMPILED:

    def run(state, args, dynamic):
      return fn(nnx.merge(graphdef, state), *args, **dynamic, **dict(static))

    _COMPILED[key] = jax.jit(run)
  return _COMPILED[key](state, args, dynamic)


def _is_static(value) -> bool:
  return value is None or isinstance(value, bool | int | float | str)


def check_steps_match_forced(model, batch, rtol: float = 2e-5, atol: float = 2e-5) -> None:
  """Search's step-by-step decoder (`decoder_step` from `encode`'s initial state) gives the
  teacher-forced logits of `batch` (jnp arrays from `random_batch`) at every position."""
  forced = compiled(type(model).__call__, model, batch["src"], batch["src_mask"], batch["tgt_in"])
  # `steps`: an intra-attention model's memory has one slot per decoder step.
  steps = batch["tgt_in"].shape[1]
  enc = compiled(type(model).encode, model, batch["src"], batch["src_mask"], steps=steps)
  state = enc.init_state
  for i in range(steps):
    state, logits, _ = compiled(type(model).decoder_step, model, enc, state, batch["tgt_in"][:, i])
    np.testing.assert_allclose(np.asarray(logits), np.asarray(forced[:, i]), rtol=rtol, atol=atol)


# ------------------------------------------------ tiny models and hand-computed rankings
VOCAB = 30  # The vocabulary of `tiny_model`.


def tiny_model(name="rnnsearch", eos_bias=1.0, attention="soft", sources=1, **model_fields):
  """A randomised tiny model whose EOS logit is raised so that some outputs end early;
  `model_fields` set further fields of configs/tiny.py's model section."""
  from flax import nnx

  from configs import tiny
  from seq2seq.data.tokenizer import EOS_ID

  cfg = tiny.get_config()
  cfg.model.name = name
  cfg.model.attention = attention
  cfg.model.update(model_fields)
  model = build_model(cfg.model, VOCAB, VOCAB, rngs=nnx.Rngs(0), sources=sources)
  model = randomise(model)
  model.w_o.bias.value = model.w_o.bias.value.at[EOS_ID].add(eos_bias)
  return model


# Each length penalty, computed here by hand from a summed log-probability s and a length n.
PENALTIES = {
  "none": lambda s, n: s,
  "power(alpha=0.6)": lambda s, n: s / n**0.6,
  "power": lambda s, n: s / n,
  "gnmt(alpha=0.6)": lambda s, n: s / ((5 + n) / 6) ** 0.6,
  "word(penalty=0.5)": lambda s, n: s - 0.5 * n,
  "word(penalty=3)": lambda s, n: s - 3.0 * n,
  "word(penalty=-2)": lambda s, n: s + 2.0 * n,  # A reward: the longest outputs are reachable.
}


def penalised(penalty):
  """A ranking function (s, n) -> rank: PENALTIES' entry, or s / n**alpha for a float alpha."""
  if isinstance(penalty, str):
    return PENALTIES[penalty]
  return lambda s, n: s / n**penalty


def score_of(table_VV, seq):
  """The summed log-probability of `seq` (EOS included) under a fixed table, in float64."""
  from seq2seq.data.tokenizer import BOS_ID

  logp = np.asarray(table_VV, np.float64)
  logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
  return sum(logp[p, w] for p, w in zip((BOS_ID, *seq[:-1]), seq, strict=True))


@contextlib.contextmanager
def loopback_server(translator, **settings):
  """The translation service of `translator` on a free loopback port, in a thread of this
  process (`serve.ServeSettings` from `settings`, without warm-up; `limits` a dict of
  `serve.Limits` fields): yields (service, base URL), and stops it on leaving."""
  import threading
  import time

  import uvicorn

  from seq2seq import serve

  limits = serve.Limits(**settings.pop("limits", {}))
  cfg = serve.ServeSettings(warm_up=False, limits=limits, **settings)
  service = serve.Service(translator, cfg)
  config = uvicorn.Config(serve.create_app(service), host="127.0.0.1", port=0, log_level="warning")
  server = serve.StoppingServer(config, service)
  thread = threading.Thread(target=server.run, daemon=True)
  thread.start()
  deadline = time.monotonic() + 60
  while not server.started and time.monotonic() < deadline:
    time.sleep(0.02)
  port = server.servers[0].sockets[0].getsockname()[1]
  try:
    yield service, f"http://127.0.0.1:{port}"
  finally:
    server.should_exit = True
    thread.join(30)
    service.batcher.close()

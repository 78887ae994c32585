"""What a refactoring must not change: every model variant's training losses and decoding outputs.

Model variants (`MODELS`: the tiny config with overrides, one per component and add-on) are
checked in this process: a digest of the initial parameters (independent of their paths, so a
renamed parameter still matches), three training steps' loss and gradient norm as exact float
text, and digests of greedy, beam and n-best search and forced scoring of a fixed random batch.
Whole runs (`RUNS`: the demo config, shortlist decoding) go through main.py in a fresh workdir:
a few updates, then translation and scoring of test sentences of the embedded corpus; their
record holds the logged losses and the output text. Run it before and after a change:

  python -m experiments.fingerprint --out /tmp/before.json
  (change the code)
  python -m experiments.fingerprint --out /tmp/after.json --compare /tmp/before.json

`--compare` lists each variant whose record differs and exits 1 if any does. `--only NAME,...`
runs a subset.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from seq2seq.data import synthetic

ROOT = Path(__file__).resolve().parents[1]

TINY = "configs/tiny.py"
STEPS = ["--config.train.num_steps=12", "--config.train.log_every=1"]
STEPS += ["--config.train.eval_every=12", "--config.train.checkpoint_every=12"]
STEPS += ["--config.decode.num_heatmaps=0"]

# name -> tiny-config overrides: every model component and add-on, and the loss terms that carry
# state.
MODELS: dict[str, dict[str, object]] = {
  "tiny": {},
  "dot": {"model.score": "dot"},
  "local_p": {"model.attention": "local_p"},
  "hard": {"model.attention": "hard"},
  "multihead": {"model.attention": "multihead"},
  "coverage": {"model.features": "coverage(fertility=true)+prev_attention"},
  "cgru": {"model.decoder": "cgru"},
  "intra": {"model.addons": "intra(score=dot)"},
  "intra_additive": {"model.addons": "intra(score=additive)", "model.decoder": "cgru"},
  "tied": {"model.tie_embeddings": True},
  "lexicon": {"model.addons": "lexicon(table=train)"},
  "copy": {"model.addons": "copy"},
  "copy_null_eos": {"model.addons": "copy(eos=null)"},
  "layer_norm": {"model.layer_norm": True},
  "bf16": {"model.dtype": "bfloat16"},
  "dropout": {"model.dropout": 0.2},
  "rnnencdec": {"model.name": "rnnencdec"},
  "rnnencdec_bi": {"model.name": "rnnencdec_bi"},
  "agreement": {"model.name": "agreement"},
  "two_sources": {"data.corpus": "local", "data.local.src_lang": "en+de"},
  "two_sources_gate": {
    "data.corpus": "local",
    "data.local.src_lang": "en+de",
    "model.multi_source": "gate",
  },
  "sampled": {"train.softmax": "sampled(size=64)"},
  "ema": {"train.ema_decay": 0.9},
}
# name -> (config file, main.py overrides): whole runs.
# name -> (config file, training overrides, decoding overrides; "{workdir}" is the run's).
SHORTLIST = ["--config.decode.shortlist={workdir}/lexicon.npz"]
SHORTLIST += ["--config.decode.shortlist_frequent=20"]
RUNS: dict[str, tuple[str, list[str], list[str]]] = {
  "demo": ("configs/demo.py", ["--config.train.num_steps=20", "--config.train.log_every=1"], []),
  "shortlist": (TINY, ["--config.model.addons=lexicon(table=train)"], SHORTLIST),
  "shortlist_sentence": (
    TINY,
    ["--config.model.addons=lexicon(table=train)"],
    [*SHORTLIST, "--config.decode.shortlist_scope=sentence"],
  ),
}
# The decoding of each trained variant: (name, extra main.py flags).
DECODES = [
  ("greedy", ["--config.decode.beam_size=1"]),
  ("beam", ["--config.decode.beam_size=3"]),
  ("nbest", ["--config.decode.beam_size=3", "--nbest=3"]),
]


def digest(path: Path) -> str:
  """Of the file's content (a .gz file's decompressed: its header holds the time it was written)."""
  data = path.read_bytes()
  return hashlib.sha256(gzip.decompress(data) if path.suffix == ".gz" else data).hexdigest()[:16]


def main_py(args: list[str], cwd: Path) -> None:
  cmd = [sys.executable, str(ROOT / "main.py"), *args]
  done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
  if done.returncode != 0:
    raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")


def source_lines(n: int = 6) -> tuple[list[str], list[str]]:
  """A few test pairs of the embedded corpus (source, reference), as the tiny config draws it."""
  pairs = synthetic.generate(n, split="test", vocab_size=1000, max_len=18)
  return zip(*((" ".join(p.src), " ".join(p.tgt)) for p in pairs), strict=True)


def run_fingerprint(name: str, scratch: Path) -> dict:
  """The record of whole run `name` (`RUNS`) trained and decoded with main.py."""
  config, overrides, decoding = RUNS[name]
  workdir = scratch / name
  base = [f"--config={config}", f"--workdir={workdir}", *overrides]
  steps = STEPS if config == TINY else []
  main_py([*base, *steps], ROOT)
  base += [flag.replace("{workdir}", str(workdir)) for flag in decoding]
  record: dict = {"train": [], "valid": []}
  for line in (workdir / "metrics.jsonl").read_text().splitlines():
    row = json.loads(line)
    split = row.get("split")
    kept = {k: repr(v) for k, v in row.items() if k not in ("elapsed_s", "tokens_per_s")}
    if split in ("train", "valid"):
      record[split].append(kept)
  outputs = {}
  for path in sorted(workdir.rglob("*")):
    rel = path.relative_to(workdir).as_posix()
    if path.is_file() and rel.startswith("valid_hypotheses"):
      outputs[rel] = digest(path)
  record["files"] = outputs
  src, ref = source_lines()
  inp, refs = scratch / f"{name}.src", scratch / f"{name}.ref"
  inp.write_text("\n".join(src) + "\n")
  refs.write_text("\n".join(ref) + "\n")
  for mode, extra in DECODES:
    out, att = scratch / f"{name}.{mode}.out", scratch / f"{name}.{mode}.att"
    main_py(
      [
        *base,
        "--mode=translate",
        f"--input={inp}",
        f"--output={out}",
        f"--alignments={att}",
        *extra,
      ],
      ROOT,
    )
    record[f"translate_{mode}"] = out.read_text()
    record[f"translate_{mode}_attention"] = digest(att)
  out = scratch / f"{name}.score.out"
  main_py([*base, "--mode=score", f"--input={inp}", f"--reference={refs}", f"--output={out}"], ROOT)
  record["score"] = out.read_text()
  return record


def model_fingerprint(name: str) -> dict:
  """The record of model variant `name` (`MODELS`), computed in this process."""
  import functools

  import jax
  import jax.numpy as jnp
  import numpy as np

  from configs import tiny
  from seq2seq import settings
  from seq2seq.data import lexicon
  from seq2seq.decoding import decode, forcing
  from seq2seq.training import train_state

  cfg = tiny.get_config()
  for dotted, value in MODELS[name].items():
    section, *path, field = dotted.split(".")
    node = cfg[section]
    for key in path:
      node = node[key]
    node[field] = value
  vocab = 40
  rng = np.random.default_rng(0)
  table = lexicon.Lexicon(
    rng.integers(0, vocab, (vocab, 3)).astype(np.int32),
    rng.dirichlet(np.ones(3), vocab).astype(np.float32),
    np.arange(vocab, dtype=np.int32),
  )
  copy_map = np.where(np.arange(vocab) % 3 == 0, -1, np.arange(vocab)).astype(np.int32)
  run = settings.validate(cfg)
  state = train_state.create_train_state(run, jax.random.key(0), vocab, vocab, copy_map, table)
  sources = run.data.sources
  batch, src_len, tgt_len = 4, 7, 6
  src_mask = np.tile((np.arange(src_len)[None] < rng.integers(2, src_len + 1, (batch, 1))), sources)
  tgt_mask = np.arange(tgt_len)[None] < rng.integers(2, tgt_len + 1, (batch, 1))
  arrays = {
    "src": rng.integers(4, vocab, src_mask.shape) * src_mask,
    "src_mask": src_mask,
    "tgt_in": rng.integers(4, vocab, (batch, tgt_len)) * tgt_mask,
    "tgt_out": rng.integers(4, vocab, (batch, tgt_len)) * tgt_mask,
    "tgt_mask": tgt_mask,
  }
  arrays = {k: jnp.asarray(v, jnp.int32) for k, v in arrays.items()}
  leaves = jax.tree.leaves(state.params)
  record: dict = {"params": sorted(_digest_array(x) for x in leaves), "train": []}
  step = jax.jit(functools.partial(train_state.train_step, run=run))
  for i in range(3):
    state, metrics = step(state, arrays, jax.random.fold_in(jax.random.key(1), i))
    record["train"].append({k: repr(float(v)) for k, v in sorted(metrics.items())})
  record["trained_params"] = sorted(_digest_array(x) for x in jax.tree.leaves(state.params))
  for mode, beam, nbest in (("greedy", 1, None), ("beam", 3, None), ("nbest", 3, 3)):
    cfg.decode.beam_size = beam
    result = decode.decode_batch(state, arrays, decode.DecodeSettings.from_config(cfg), nbest=nbest)
    record[mode] = [_digest_array(x) for x in result]
  record["score"] = [
    _digest_array(x)
    for x in forcing.score_batch(state, arrays, decode.DecodeSettings.from_config(cfg))
  ]
  return record


def _digest_array(x) -> str:
  import numpy as np

  a = np.asarray(x)
  return f"{a.dtype}{list(a.shape)}:" + hashlib.sha256(a.tobytes()).hexdigest()[:16]


def compare(now: dict, before: dict) -> list[str]:
  """Names of the variants whose records differ, with the first differing key."""
  differing = []
  for name in sorted(set(now) | set(before)):
    a, b = now.get(name), before.get(name)
    if a == b:
      continue
    if a is None or b is None:
      differing.append(f"{name}: only in {'before' if a is None else 'now'}")
      continue
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    differing.append(f"{name}: {', '.join(keys)}")
  return differing


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--out", required=True, help="the JSON to write")
  p.add_argument("--compare", help="a JSON this script wrote before: list what differs")
  p.add_argument("--only", help="comma-separated variant names")
  args = p.parse_args(argv)
  known = [*MODELS, *RUNS]
  names = args.only.split(",") if args.only else known
  unknown = sorted(set(names) - set(known))
  if unknown:
    p.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(known)}")
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  records = {}
  with tempfile.TemporaryDirectory() as scratch:
    for name in names:
      if name in MODELS:
        records[name] = model_fingerprint(name)
      else:
        records[name] = run_fingerprint(name, Path(scratch))
      print(f"{name}: {len(records[name]['train'])} training steps", flush=True)
  Path(args.out).write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
  if args.compare:
    before = json.loads(Path(args.compare).read_text())
    differing = compare(records, {k: v for k, v in before.items() if k in records})
    for line in differing:
      print(f"differs: {line}")
    print(f"{len(records) - len(differing)} of {len(records)} variants identical")
    return 1 if differing else 0
  return 0


if __name__ == "__main__":
  sys.exit(main())

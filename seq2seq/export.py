"""A trained run as serialised JAX programs that translate without this code.

    python -m seq2seq.export --workdir=runs/demo --out=runs/demo-export
    python -m seq2seq.export --workdir=runs/demo --out=DIR --beam_size=5 --max_len_ratio=1.5

DIR holds three programs lowered to StableHLO by `jax.export` and serialised: `encoder` (the
annotations of a batch of sources), `greedy` and `beam` (the run's search at its
`decode.beam_size`, or `--beam_size`; both run the encoder first). Beside them: `params.npz`,
the parameters every program takes as its first argument; `vocab/src` and `vocab/tgt`, the
vocabularies as the run saved them; `manifest.json`, what each program computes, its inputs and
outputs, the special ids, the batching and length rules and the JAX version; and `exported.py`,
a copy of the loader (`seq2seq.exported`), which needs JAX and NumPy only:

    import exported  # DIR on sys.path; or `from seq2seq import exported`
    model = exported.load("runs/demo-export")
    model.translate(["the cat sleeps ."])  # beam search; beam=False: greedy

The batch, the source length and the output length are symbolic dimensions, so one program
serves every batch and length. The output length L is the length of a dummy input `steps_L`:
the loader computes decoding's limit, int(max_len_ratio * S) + 10, in Python as the Translator
does, so any `max_len_ratio` works with the same programs.

The parameters are an argument, not constants baked into each program: the three programs
share one copy of them, each program stays some tens of kB, and the weights stay an ordinary
NumPy file. The programs are lowered for CPU and CUDA (`--platforms`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from seq2seq import checkpoints, exported, translate
from seq2seq.data import tokenizer as tok
from seq2seq.decoding import core, decode

PLATFORMS = ("cpu", "cuda")


def unsupported(t: translate.Translator) -> list[str]:
  """What of the run's settings the exported programs cannot reproduce (empty: none)."""
  dec, run = t.decoding, t.run
  search = core.search_of(dec.search, beam_size=dec.beam_size, sampling=dec.sampling).name
  checks = {
    f"decode.search={search}": search not in ("greedy", "beam", "sample"),
    "decode.ensemble (export one member)": bool(dec.ensemble),
    "decode.shortlist": bool(dec.shortlist),
    "decode.sampling": dec.sampling is not None,
    "decode.mbr": dec.mbr is not None,
    "decode.replace_unk": bool(dec.replace_unk),
    "two sources (data.sources)": run.data.sources != 1,
    "copying (model.addons)": run.data.copy,
  }
  return [name for name, found in checks.items() if found]


def leaf_name(path: tuple) -> str:
  """A parameter's name in params.npz: its path's keys joined by "/" ("cell/u_h/kernel")."""
  parts = []
  for key in path:
    part = getattr(key, "key", getattr(key, "name", getattr(key, "idx", key)))
    parts.append(str(part))
  if parts and parts[-1] == "value":  # An nnx.Variable's array.
    parts.pop()
  return "/".join(parts)


def flat_params(params: Any) -> tuple[dict[str, np.ndarray], Any, list[str]]:
  """(the arrays of `params` by name, its tree structure, the names in leaf order)."""
  leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
  names = [leaf_name(path) for path, _ in leaves]
  if len(set(names)) != len(names):
    raise ValueError("two parameters share a name; cannot write params.npz")
  arrays = {name: np.asarray(leaf) for name, (_, leaf) in zip(names, leaves, strict=True)}
  odd = [f"{n} ({a.dtype})" for n, a in arrays.items() if a.dtype.kind not in "fiub"]
  if odd:
    raise ValueError(f"parameters NumPy cannot save: {', '.join(odd)}")
  return arrays, treedef, names


def _programs(t: translate.Translator, treedef, names: list[str]) -> dict[str, Any]:
  """The three functions to export, each (params by name, src_BS, src_mask_BS[, steps_L])."""
  graphdef, dec = t.state.graphdef, t.decoding
  tree = lambda params: jax.tree_util.tree_unflatten(treedef, [params[n] for n in names])

  def encoder(params, src_BS, src_mask_BS):
    model = nnx.merge(graphdef, tree(params))
    return {"annotations": model.encode(src_BS, src_mask_BS).annotations}

  def search(beam_size: int, spec):
    def run(params, src_BS, src_mask_BS, steps_L):
      result = decode.jit_decode(
        graphdef,
        tree(params),
        src_BS,
        src_mask_BS,
        beam_size=beam_size,
        max_len=steps_L.shape[0],
        length_penalty=dec.length_penalty,
        coverage_beta=float(dec.coverage_penalty),
        nbest=1,  # As the Translator asks for one translation: the search stops alike.
        search=spec,
      )
      return {name: x[:, 0] for name, x in result._asdict().items()}

    return run

  return {
    "encoder": encoder,
    "greedy": search(1, None),
    "beam": search(int(dec.beam_size), dec.search),
  }


WHAT = {
  "encoder": "the encoder: annotations [B, S, H] of the sources (the padded positions too)",
  "greedy": "greedy search: the encoder, then the most probable word at each step",
  "beam": "{search} of width {beam_size}, the best output; the encoder first",
}
OUTPUTS = {
  "annotations": "the encoder's states over the source positions",
  "tokens": "output ids, PAD after EOS; the first `lengths` are the output, EOS included",
  "lengths": "output tokens up to and including EOS (L where it did not end)",
  "scores": "log p(output | source), the sum over its tokens",
  "norm_scores": "what beam search ranks by (the length penalty, the coverage penalty)",
  "alpha": "each output token's attention over the source positions",
}


def _avals(avals, tree) -> dict[str, dict[str, Any]]:
  """{name: shape and dtype} of a program's outputs (a dict of arrays)."""
  named = jax.tree_util.tree_unflatten(tree, list(avals))
  return {k: {"shape": [str(d) for d in v.shape], "dtype": str(v.dtype)} for k, v in named.items()}


def _program_entry(name: str, program, t: translate.Translator) -> dict[str, Any]:
  dec = t.decoding
  inputs = {
    "params": "params.npz, every array by its name",
    "src_BS": {"shape": ["B", "S"], "dtype": "int32", "what": "source ids, then EOS, then PAD"},
    "src_mask_BS": {"shape": ["B", "S"], "dtype": "int32", "what": "1 over the ids and EOS"},
  }
  entry: dict[str, Any] = {"file": f"{name}.jax_exported"}
  if name != "encoder":
    inputs["steps_L"] = {"shape": ["L"], "dtype": "int8", "what": "its length is the limit"}
    entry["beam_size"] = 1 if name == "greedy" else int(dec.beam_size)
    spec = core.search_of(None if name == "greedy" else dec.search, beam_size=entry["beam_size"])
    entry["search"] = spec.name
    entry["length_penalty"] = str(dec.length_penalty)
    entry["coverage_penalty"] = float(dec.coverage_penalty)
  entry["computes"] = WHAT[name].format(search=entry.get("search"), beam_size=dec.beam_size)
  outputs = _avals(program.out_avals, program.out_tree)
  for k, v in outputs.items():
    v["what"] = OUTPUTS[k]
  return {**entry, "inputs": inputs, "outputs": outputs}


def export_run(
  workdir: str | Path,
  out: str | Path,
  *,
  beam_size: int | None = None,
  max_len_ratio: float | None = None,
  platforms: Sequence[str] = PLATFORMS,
) -> dict[str, Any]:
  """Writes the run in `workdir` (its best checkpoint, as `seq2seq.load` reads it) to the new
  folder `out`, with `beam_size` and `max_len_ratio` in place of the run's where given; returns
  the manifest. ValueError for a setting the programs cannot reproduce (`unsupported`)."""
  workdir, out = Path(workdir), Path(out)
  if out.exists() and any(out.iterdir()):
    raise FileExistsError(f"{out} exists and is not empty; give a new --out")
  config = checkpoints.load_config(workdir)
  changes = {"beam_size": beam_size, "max_len_ratio": max_len_ratio}
  config.decode.update({k: v for k, v in changes.items() if v is not None})
  t = translate.Translator(config, workdir)
  if found := unsupported(t):
    raise ValueError(f"the exported programs cannot reproduce {', '.join(found)}")
  arrays, treedef, names = flat_params(t.state.params)
  specs = {n: jax.ShapeDtypeStruct(a.shape, a.dtype) for n, a in arrays.items()}
  b, s, length = jax.export.symbolic_shape("B, S, L")
  ids = jax.ShapeDtypeStruct((b, s), jnp.int32)
  steps = jax.ShapeDtypeStruct((length,), jnp.int8)
  lower = lambda fn: jax.export.export(jax.jit(fn), platforms=tuple(platforms))
  programs = {}
  for name, fn in _programs(t, treedef, names).items():
    args = (specs, ids, ids) if name == "encoder" else (specs, ids, ids, steps)
    programs[name] = lower(fn)(*args)
  manifest = _manifest(t, programs, arrays, platforms)

  partial = out.with_name(f".{out.name}.partial{os.getpid()}")
  shutil.rmtree(partial, ignore_errors=True)
  partial.mkdir(parents=True)
  np.savez(partial / "params.npz", **arrays)
  for name, program in programs.items():
    (partial / manifest["programs"][name]["file"]).write_bytes(program.serialize())
  t.src_tok.save(partial / "vocab" / "src")
  t.tgt_tok.save(partial / "vocab" / "tgt")
  shutil.copyfile(exported.__file__, partial / "exported.py")
  (partial / exported.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
  if out.exists():
    out.rmdir()  # Empty (checked above).
  out.parent.mkdir(parents=True, exist_ok=True)
  os.replace(partial, out)
  return manifest


def _manifest(t: translate.Translator, programs, arrays, platforms) -> dict[str, Any]:
  dec = t.decoding
  vocab = {
    side: {"dir": f"vocab/{side}", "kind": tokenizer.kind, "size": tokenizer.size}
    for side, tokenizer in (("src", t.src_tok), ("tgt", t.tgt_tok))
  }
  return {
    "format": exported.FORMAT,
    "jax_version": jax.__version__,
    "platforms": list(platforms),
    "run": {"workdir": str(t.workdir.resolve()), "step": int(t.state.step)},
    "params": {
      "file": "params.npz",
      "arrays": len(arrays),
      "values": int(sum(a.size for a in arrays.values())),
    },
    "programs": {name: _program_entry(name, p, t) for name, p in programs.items()},
    "vocab": vocab,
    "special_ids": {"pad": tok.PAD_ID, "bos": tok.BOS_ID, "eos": tok.EOS_ID, "unk": tok.UNK_ID},
    "batching": {
      "rule": (
        "sentences longest first (order 'length'; 'file': as given), batch_size to a batch, "
        "or under max_tokens (rows x S) in batch_size and its halvings of rows; S = the "
        "longest source + 1 (EOS) rounded up to a multiple of bucket_step"
      ),
      "order": dec.order,
      "batch_size": int(dec.batch_size),
      "max_tokens": int(dec.max_tokens),
      "bucket_step": int(dec.bucket_step),
    },
    "max_len": {"rule": "L = int(max_len_ratio * S) + 10", "max_len_ratio": dec.max_len_ratio},
    "max_input_tokens": int(dec.max_input_tokens),  # Longer sentences: no translation.
    "max_source_tokens": t.max_source_tokens,  # Longer sentences are cut (None: no limit).
  }


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m seq2seq.export", description=__doc__)
  parser.add_argument("--workdir", required=True, help="the trained run to export")
  parser.add_argument("--out", required=True, help="the new folder (must not exist, or be empty)")
  parser.add_argument("--beam_size", type=int, default=None, help="the beam program's width")
  parser.add_argument(
    "--max_len_ratio", type=float, default=None, help="the loader's default length ratio"
  )
  parser.add_argument(
    "--platforms", default=",".join(PLATFORMS), help="comma-separated: cpu, cuda, rocm, tpu"
  )
  args = parser.parse_args(argv)
  platforms = [p.strip() for p in args.platforms.split(",") if p.strip()]
  try:
    manifest = export_run(
      args.workdir,
      args.out,
      beam_size=args.beam_size,
      max_len_ratio=args.max_len_ratio,
      platforms=platforms,
    )
  except (ValueError, OSError) as e:
    raise SystemExit(f"error: {e}") from None
  sizes = {p.name: p.stat().st_size for p in sorted(Path(args.out).iterdir()) if p.is_file()}
  print(json.dumps({"out": args.out, "step": manifest["run"]["step"], "bytes": sizes}))


if __name__ == "__main__":
  main()

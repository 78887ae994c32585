"""The exported model (seq2seq/export.py, seq2seq/exported.py): its programs, loaded in a process
that imports nothing of the project, translate as `seq2seq.load` does, sentence for sentence and
score for score; the loader batches and pads as the Translator does."""

import ast
import json
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT, subprocess_env

import seq2seq
from seq2seq import export, exported
from seq2seq.data import input_pipeline
from seq2seq.data import tokenizer as tok

# What the loader may import: the standard library's modules it names, NumPy and JAX, and the
# tokenizers' own packages.
LOADER_IMPORTS = {
  "__future__", "collections", "dataclasses", "json", "pathlib", "typing",
  "jax", "numpy", "sentencepiece", "sacremoses",
}  # fmt: skip
# Packages of the training code that the process running the programs must not import.
TRAINING_PACKAGES = {"seq2seq", "flax", "optax", "orbax", "ml_collections", "grain", "configs"}

LOADER_RUN = """
import dataclasses, json, sys
import exported
lines = json.loads(sys.stdin.read())
model = exported.load(".")
found = {
  "beam": model.search(lines),
  "greedy": model.search(lines, beam=False),
  "short": model.search(lines, beam=False, max_len_ratio=0.25),
}
found = {k: [t and dataclasses.asdict(t) for t in v] for k, v in found.items()}
found["texts"] = model.translate(lines)
found["encoded"] = [a if a is None else list(a.shape) for a in model.encode(lines[:2] + [""])]
found["modules"] = sorted(sys.modules)
print(json.dumps(found))
"""


def _sentences(workdir, n=24, seed=0) -> list[str]:
  """`n` sentences of 1 to 30 of the run's source words (two batches, two padded lengths),
  then a blank line, an empty one and words the vocabulary does not know."""
  words = (workdir / "vocab" / "src" / "vocab.txt").read_text().split()[4:]
  rng = random.Random(seed)
  lines = [" ".join(rng.choices(words, k=rng.randint(1, 30))) for _ in range(n)]
  return [*lines, "  ", "", "qqq zzz ."]


def _record(hyp) -> dict:
  """The fields of a `seq2seq.load` hypothesis that an exported `Translation` holds."""
  fields = ("text", "ids", "score", "norm_score", "finished")
  return {name: getattr(hyp, name) for name in fields}


@pytest.fixture(scope="module")
def exported_dir(trained, tmp_path_factory):
  out = tmp_path_factory.mktemp("export") / "model"
  export.main([f"--workdir={trained}", f"--out={out}"])
  return out


@pytest.mark.slow
def test_the_exported_programs_translate_as_the_model_does(trained, exported_dir):
  lines = _sentences(trained)
  proc = subprocess.run(
    [sys.executable, "-c", LOADER_RUN],
    cwd=exported_dir,  # `import exported` finds the copy there, not the project.
    input=json.dumps(lines),
    env=subprocess_env(),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  found = json.loads(proc.stdout)
  assert {m.split(".")[0] for m in found["modules"]} & TRAINING_PACKAGES == set()

  t = seq2seq.load(trained)
  own = {
    "beam": t.translate(lines),
    "greedy": t.translate(lines, beam_size=1),
    "short": t.translate(lines, beam_size=1, max_len_ratio=0.25),
  }
  for search, hyps in own.items():
    assert found[search] == [_record(h[0]) if h else None for h in hyps], search
  assert found["texts"] == [h[0].text if h else "" for h in own["beam"]]
  assert not all(h["finished"] for h in found["short"] if h)  # The limit cut some.
  assert found["greedy"] != found["beam"]  # The two programs are two searches.
  manifest = json.loads((exported_dir / "manifest.json").read_text())
  width = int(manifest["programs"]["encoder"]["outputs"]["annotations"]["shape"][-1])
  assert found["encoded"] == [[len(line.split()) + 1, width] for line in lines[:2]] + [None]


def test_the_folder_holds_the_programs_parameters_vocabularies_and_loader(trained, exported_dir):
  manifest = json.loads((exported_dir / "manifest.json").read_text())
  assert set(manifest["programs"]) == {"encoder", "greedy", "beam"}
  for program in manifest["programs"].values():
    assert (exported_dir / program["file"]).stat().st_size > 1000
  assert manifest["programs"]["beam"]["beam_size"] == 3  # configs/tiny.py's.
  assert manifest["programs"]["beam"]["outputs"]["tokens"]["shape"] == ["B", "L"]
  assert manifest["special_ids"] == {"pad": 0, "bos": 1, "eos": 2, "unk": 3}
  for side in ("src", "tgt"):
    saved = (trained / "vocab" / side / "vocab.txt").read_text()
    assert (exported_dir / "vocab" / side / "vocab.txt").read_text() == saved
  with np.load(exported_dir / "params.npz") as params:
    assert len(params.files) == manifest["params"]["arrays"]
  assert (exported_dir / "exported.py").read_bytes() == (ROOT / "seq2seq/exported.py").read_bytes()


def test_the_loader_imports_nothing_of_the_project():
  tree = ast.parse((ROOT / "seq2seq" / "exported.py").read_text())
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names |= {alias.name.split(".")[0] for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
      names.add(node.module.split(".")[0])
  assert names <= LOADER_IMPORTS, names - LOADER_IMPORTS


@pytest.mark.parametrize("order", ["length", "file"])
@pytest.mark.parametrize("max_tokens", [0, 60, 200])
def test_batches_and_padding_are_the_translators(order, max_tokens):
  rng = np.random.default_rng(len(order) + max_tokens)
  lengths = rng.integers(1, 40, size=37)
  ids = [list(rng.integers(4, 100, size=n)) for n in lengths]
  split = input_pipeline.Split(
    "given",
    input_pipeline.Ragged.from_lists(ids),
    input_pipeline.Ragged.from_lists([[] for _ in ids]),
    np.arange(len(ids)),
  )
  batching = {"order": order, "batch_size": 8, "max_tokens": max_tokens, "bucket_step": 12}
  theirs = list(input_pipeline.decoding_batches(split, 8, 12, order=order, max_tokens=max_tokens))
  ours = list(exported.batches([int(n) for n in lengths], batching))
  assert len(ours) == len(theirs)
  for chosen, batch in zip(ours, theirs, strict=True):
    index = batch["index"]
    assert chosen == [int(i) for i in index if i >= 0]
    src, mask = exported.padded([ids[i] for i in chosen], exported.rows(len(chosen), batching), 12)
    np.testing.assert_array_equal(src, batch["src"])
    np.testing.assert_array_equal(mask, batch["src_mask"])


TEXTS = [
  "L'homme n'a pas vu le chat, qui dort.",
  "Aujourd'hui, il fait 2,5 degrés : « froid » !",
  "the dog doesn't eat apples; it eats bread.",
  "a big house, a small garden and three trees.",
] * 5


@pytest.mark.parametrize("kind", ["word", "moses", "sentencepiece"])
def test_the_loaders_vocabularies_are_the_tokenizers(kind, tmp_path):
  if kind == "sentencepiece":
    saved = tok.SentencePieceTokenizer.train(TEXTS, 60)
  else:
    saved = tok.WordVocab.build(
      TEXTS, 30, tok.Pretokenizer("moses" if kind == "moses" else "none", "fr")
    )
  saved.save(tmp_path)
  vocab = exported.Vocabulary(tmp_path)
  for text in [*TEXTS[:4], "un mot inconnu <s> </s> <unk>", "  "]:
    assert vocab.encode(text) == saved.encode(text)
  rng = np.random.default_rng(0)
  for ids in [
    saved.encode(TEXTS[0]),
    [1, 5, 0, 7, 2, 9, 9],
    *rng.integers(0, 30, (20, 8)).tolist(),
  ]:
    # The Translator's text of output ids (`inference.output_text`).
    assert vocab.decode(ids) == saved.detokenize(saved.decode_tokens(ids)), ids


def test_what_the_programs_cannot_reproduce_is_refused_in_one_line(trained, tmp_path):
  taken = tmp_path / "taken"
  taken.mkdir()
  (taken / "file").write_text("")
  with pytest.raises(SystemExit, match="exists and is not empty"):
    export.main([f"--workdir={trained}", f"--out={taken}"])
  run = tmp_path / "run"
  shutil.copytree(trained, run, ignore=shutil.ignore_patterns("jax_cache", "eval"))
  config = json.loads((run / "config.json").read_text())
  config["decode"]["replace_unk"] = True
  (run / "config.json").write_text(json.dumps(config))
  with pytest.raises(SystemExit, match="cannot reproduce decode.replace_unk"):
    export.main([f"--workdir={run}", f"--out={tmp_path / 'out'}"])
  assert not (tmp_path / "out").exists()

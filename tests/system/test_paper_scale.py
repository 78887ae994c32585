"""docs/tutorials/paper_scale.md's commands as the page writes them, on tests/data/wmt14_mini with
the model made tiny: prepare the corpus, train, translate newstest2014 and score it with
sacrebleu. The downloads and the SLURM job are left out (no network, no cluster)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, run_main_py

PAGE = ROOT / "docs" / "tutorials" / "paper_scale.md"
MINI = ROOT / "tests" / "data" / "wmt14_mini"
# What makes configs/wmt14.py a model that trains in seconds, for the fields a command does not
# set itself: configs/tiny.py's sizes, two updates, beams of 2.
TINY = {
  "model.emb_dim": 16,
  "model.enc_hidden": 16,
  "model.dec_hidden": 32,
  "model.attn_dim": 16,
  "model.maxout_dim": 16,
  "data.src_vocab_size": 200,
  "data.tgt_vocab_size": 200,
  "data.batch_size": 8,
  "data.pool_batches": 2,
  "train.num_steps": 2,
  "train.log_every": 1,
  "train.eval_every": 2,
  "train.checkpoint_every": 2,
  "decode.beam_size": 2,
  "decode.num_heatmaps": 1,
}


def page_commands() -> list[str]:
  """The command lines of the page's code blocks, backslash continuations joined."""
  blocks = re.findall(r"```text\n(.*?)```", PAGE.read_text(), re.S)
  return [line.strip() for block in blocks for line in block.replace("\\\n", " ").splitlines()]


def _main_py(line: str, workdir: Path, here: Path) -> list[str]:
  """A `python main.py` line as this test runs it: the miniature for $WMT14, the workdir and
  the files under `here`, and TINY's fields the line leaves unset."""
  args = shlex.split(line.replace("$WMT14", str(MINI)))[2:]
  for i, arg in enumerate(args):
    flag, _, value = arg.partition("=")
    if flag == "--workdir":
      args[i] = f"--workdir={workdir}"
    elif flag in ("--input", "--output"):
      args[i] = f"{flag}={here / value}"
  given = {arg.partition("=")[0] for arg in args}
  args += [f"--config.{k}={v}" for k, v in TINY.items() if f"--config.{k}" not in given]
  return [sys.executable, "main.py", *args]


@pytest.mark.slow
def test_the_tutorials_commands_run_on_the_miniature(tmp_path):
  lines = page_commands()
  runs = [line for line in lines if line.startswith("python main.py")]
  shell = [line for line in lines if line.startswith(("sed ", "sacrebleu "))]
  assert len(runs) == 3 and len(shell) == 3, (runs, shell)  # Prepare, train, translate; 2 + 1.
  workdir = tmp_path / "runs" / "wmt14"
  env = {**os.environ, "WMT14": str(MINI)}
  env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
  outputs = []
  for line in lines:
    if line in runs:
      run_main_py(_main_py(line, workdir, tmp_path))
      if "--mode=prepare" in line:  # Step 2 made the vocabularies and the store only.
        assert (workdir / "vocab" / "tgt").is_dir() and not (workdir / "eval").exists()
        assert list((workdir / "data" / "store").glob("*/manifest.json"))
    elif line in shell:
      done = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True)
      assert done.returncode == 0, done.stderr
      outputs.append(done.stdout)

  results = json.loads((workdir / "eval" / "test" / "results.json").read_text())
  assert results["num_sentences"] == 10 and results["beam_size"] == 2
  assert len((workdir / "eval" / "test" / "hypotheses.txt").read_text().splitlines()) == 10
  assert (tmp_path / "newstest2014.en").read_text().splitlines()[0] == (
    "Police arrested 20 people after the match."
  )
  assert len((tmp_path / "newstest2014.hyp.fr").read_text().splitlines()) == 10
  scores = json.loads(outputs[-1])  # sacrebleu's JSON: one record per metric.
  assert [score["name"] for score in scores] == ["BLEU", "chrF2"]

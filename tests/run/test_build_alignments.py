"""Learned word alignments for guided alignment: the symmetrisation against cases worked out
here, eflomal's links of the embedded corpus against its gold links, and the file they make
read by a local-text run with the supervision term (eflomal is optional: those tests skip
without it)."""

import importlib.util
from pathlib import Path

import pytest
from helpers import run_main, run_module

from seq2seq import build_alignments, checkpoints, settings
from seq2seq import sharding as rt
from seq2seq.data import metrics, synthetic

needs_eflomal = pytest.mark.skipif(
  importlib.util.find_spec("eflomal") is None,
  reason="eflomal (optional, GPLv3) is not installed: pip install eflomal==2.0.0",
)


def test_grow_diag_final_and_grows_from_the_intersection():
  # Both directions agree on 0-0 and 1-1. 2-1 neighbours 1-1 and aligns the unaligned source
  # word 2: grown. 0-1 neighbours 0-0 but both its words are aligned: out. 3-3 neighbours no
  # link, but both its words are unaligned: in by final-and.
  forward = {(0, 0), (1, 1), (0, 1), (3, 3)}
  reverse = {(0, 0), (1, 1), (2, 1)}
  assert build_alignments.grow_diag_final_and(forward, reverse) == {(0, 0), (1, 1), (2, 1), (3, 3)}
  assert build_alignments.symmetrized(forward, reverse, "intersect") == {(0, 0), (1, 1)}
  assert len(build_alignments.symmetrized(forward, reverse, "union")) == 5
  with pytest.raises(ValueError, match="--symmetrize must be one of"):
    build_alignments.symmetrized(forward, reverse, "sideways")


@needs_eflomal
@pytest.mark.slow
def test_eflomal_aligns_the_embedded_corpus_and_a_local_run_trains_on_the_file(tmp_path):
  """On the embedded corpus (2,000 pairs, gold links known) the written links have AER 0.07
  (below 0.15 here) and every training pair has a line; the same text as local files with the
  links' file trains with the supervision term."""
  workdir = tmp_path / "run"
  run_main(workdir, "--config.train.num_steps=0", "--config.train.final_eval=false")
  # In a process of its own: eflomal is C code, kept out of the pytest worker.
  run_module("seq2seq.build_alignments", "--workdir", str(workdir), own_process=True)
  lines = (workdir / "train.align").read_text().splitlines()
  run = settings.validate(checkpoints.load_config(workdir))
  examples = list(rt.load_data(run, workdir).corpus.read("train"))
  assert len(lines) == len(examples) == 2000
  found = [{tuple(map(int, p.split("-"))) for p in lines[ex.line].split()} for ex in examples]
  gold = [set(synthetic.parse_alignment(ex.align)) for ex in examples]
  assert metrics.alignment_error_rate(found, gold) < 0.15

  corpus = tmp_path / "text"
  corpus.mkdir()
  for prefix in ("train", "val", "test_2016_flickr"):
    (corpus / f"{prefix}.en").write_text("".join(ex.src + "\n" for ex in examples[:200]))
    (corpus / f"{prefix}.fr").write_text("".join(ex.tgt + "\n" for ex in examples[:200]))
  links = tmp_path / "links.align"  # A path, not a suffix: the corpus folder stays as it was.
  links.write_text("".join(line + "\n" for line in lines[:200]))
  guided = tmp_path / "guided"
  run_main(
    guided,
    "--config.data.corpus=local",
    f"--config.data.local.dir={corpus}",
    f"--config.data.local.align={links}",
    "--config.train.loss_terms=supervision(weight=1.0)",
    "--config.train.num_steps=4",
    "--config.train.final_eval=false",
  )
  rows = [r for r in _rows(guided) if r["split"] == "train"]
  assert rows and all(r["supervision_loss"] > 0 for r in rows)


def _rows(workdir: Path):
  from seq2seq.training import metric_writer

  return metric_writer.read_metrics(workdir)

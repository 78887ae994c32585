"""`python -m seq2seq.attribute`: Pharaoh lines read from attribution, and AER beside
attention's, on the session's trained run."""

import json

from seq2seq import attribute


def test_the_command_writes_a_pharaoh_line_per_pair_and_both_aers(trained, tmp_path, capsys):
  from seq2seq import checkpoints
  from seq2seq.data import builders, input_pipeline

  config = checkpoints.load_config(trained)
  d = input_pipeline.DataSettings.from_config(config)
  corpus = builders.prepare_corpus(d, input_pipeline.data_dir(d, trained))
  examples = list(corpus.read("test"))[:12]
  paths = {}
  for name, lines in (
    ("src", [e.src for e in examples]),
    ("tgt", [e.tgt for e in examples]),
    ("gold", [e.align or "" for e in examples]),
  ):
    paths[name] = tmp_path / name
    paths[name].write_text("".join(f"{line}\n" for line in lines))
  out = tmp_path / "saliency.align"
  attribute.main(
    [f"--workdir={trained}", f"--sources={paths['src']}", f"--targets={paths['tgt']}"]
    + [f"--out={out}", f"--gold={paths['gold']}"]
  )
  lines = out.read_text().splitlines()
  assert len(lines) == len(examples)
  for line, example in zip(lines, examples, strict=True):
    links = attribute.read_links(line)
    target_words = len(example.tgt.split())
    assert sorted(j for _, j in links) == list(range(target_words))  # One link per word.
    assert all(0 <= i < len(example.src.split()) for i, _ in links)
  figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert figures["pairs"] == len(examples)
  assert 0.0 <= figures["aer_saliency"] <= 1.0 and 0.0 <= figures["aer_attention"] <= 1.0


def test_the_command_refuses_bad_input_in_one_line(trained, tmp_path):
  import pytest

  sources = tmp_path / "src"
  sources.write_text("a b\n")
  with pytest.raises(SystemExit, match="error: 1 gold lines for 1 sources|error: .*samples"):
    attribute.main(
      [f"--workdir={trained}", f"--sources={sources}", f"--targets={sources}"]
      + [f"--out={tmp_path / 'o'}", "--samples=0"]
    )

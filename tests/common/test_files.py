"""Files written whole or appended to: what a refused write reports."""

from pathlib import Path

import pytest

from seq2seq.common import files


def test_a_line_a_full_disk_refuses_names_its_file(tmp_path):
  """/dev/full takes the write and refuses it at the flush, with an error that names no file:
  the error the run's one line shows names the file being appended to."""
  if not Path("/dev/full").exists():
    pytest.skip("no /dev/full on this system")
  path = tmp_path / "metrics.jsonl"
  path.symlink_to("/dev/full")
  with pytest.raises(OSError) as e:
    files.append_line(path, '{"step": 1}')
  assert e.value.errno == 28 and e.value.filename == str(path)
  assert str(path) in str(e.value)

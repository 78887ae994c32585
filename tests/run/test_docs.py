"""The documentation's generated reference pages cover the code: every config field with its
comment, every registered component with its settings (`docs/_ext/reference.py`)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import reference  # noqa: E402

from configs import default  # noqa: E402
from seq2seq import settings  # noqa: E402


def test_every_config_field_is_in_the_config_reference_with_a_comment():
  page = reference.config_page()
  fields = reference.config_fields((ROOT / "configs" / "default.py").read_text())
  values = reference.flatten(default.get_config())
  found = {f.path: f for f in fields if not f.section}
  assert set(found) == set(values)
  for name in values:
    assert f"| `{name}` |" in page, name
  uncommented = [f.path for f in fields if not f.section and not f.comment]
  # A field without a comment of its own shares the block comment of the field before it.
  assert len(uncommented) < len(found) // 10, uncommented


def test_the_parser_reads_block_trailing_and_continued_comments():
  source = """
def get_config():
  c = ml_collections.ConfigDict()
  m = c.model = ml_collections.ConfigDict()
  m.a = 1  # Trailing, continued
  # on the next line.
  # A block comment
  # for b.
  m.b = (
    2  # And its own.
  )
  return c
"""
  fields = {f.path: f.comment for f in reference.config_fields(source)}
  assert fields["model.a"] == "Trailing, continued on the next line."
  assert fields["model.b"] == "A block comment for b. And its own."


def test_every_registered_component_is_in_the_components_reference():
  page = reference.components_page()
  for line in settings.components_help().splitlines():
    if line and not line.endswith(":"):
      assert f"`{line}`" in page, line


def test_markdown_text_escapes_outside_code_spans_only():
  assert reference.md_text("a_b `c_d` |x|") == r"a\_b `c_d` \|x\|"

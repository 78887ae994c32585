"""The package's docstrings as reStructuredText for autodoc.

They are written as plain text with Markdown's `code` spans: `|x|` is a length, not an RST
substitution, `*` a product, an indented line a formula, and a list may follow its paragraph
without a blank line. This `autodoc-process-docstring` hook (run before napoleon's) rewrites
each docstring so that RST reads it as written: code spans become literals, the other inline
markup characters are escaped, indented runs become literal blocks and lists get the blank line
RST wants before them.
"""

from __future__ import annotations

import re
from typing import Any

_BULLET = re.compile(r"^(\s*)([*-]) (.*)$")
_SPECIAL = re.compile(r"([\\*|_<>])")


class _Inline:
  """Lines of one docstring with their `code` spans (which may run over a line break) as RST
  literals and every other markup character escaped."""

  def __init__(self):
    self.in_code = False

  def __call__(self, text: str) -> str:
    out, prev = [], " "
    for i, char in enumerate(text):
      nxt = text[i + 1] if i + 1 < len(text) else " "
      if char == "`":
        if not self.in_code:
          out.append(("" if prev in " \t([{'\"/-:" else "\\ ") + "``")
        else:
          out.append("``" + ("" if nxt in " \t.,;:!?)]}'\"/-" else "\\ "))
        self.in_code = not self.in_code
      elif self.in_code:
        out.append(char)
      else:
        out.append(_SPECIAL.sub(r"\\\1", char))
      prev = char
    return "".join(out)


def _indent(line: str) -> int:
  return len(line) - len(line.lstrip())


def convert(lines: list[str]) -> list[str]:
  """The docstring `lines` (already dedented by autodoc) as RST lines."""
  _inline = _Inline()
  out: list[str] = []
  literal_indent = None  # Inside a literal block: the indent its lines keep.
  base = 0  # The indent of the current paragraph or list item's text.
  in_list = False
  prev = ""
  for line in lines:
    if not line.strip():
      _inline.in_code = False  # A span never runs over a blank line.
      out.append("")
      prev = ""
      continue
    indent = _indent(line)
    if literal_indent is not None and indent >= literal_indent:
      out.append("    " + line)
      prev = line
      continue
    if literal_indent is not None:
      out.append("")  # RST ends a literal block at a blank line.
      literal_indent, prev = None, ""
    bullet = _BULLET.match(line)
    if bullet and (not in_list or indent <= base):
      if prev and not in_list:
        out.append("")
      in_list, base = True, indent + 2
      out.append(f"{bullet.group(1)}* {_inline(bullet.group(3))}")
      prev = line
      continue
    if in_list and indent >= base and prev:
      out.append(" " * base + _inline(line.strip()))
      prev = line
      continue
    if prev and indent > (base if in_list else _indent(prev)) or (not prev and indent > 0):
      # An indented run: a formula or an example, kept as it is written.
      if out and out[-1]:
        out[-1] += " ::" if not out[-1].endswith("::") else ""
      else:
        out.append("::")
      out.append("")
      literal_indent = indent
      out.append("    " + line)
      prev = line
      continue
    in_list, base = False, indent
    out.append(" " * indent + _inline(line.strip()))
    prev = line
  return out


def process(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
  if name.startswith("seq2seq"):
    lines[:] = convert(lines)


def setup(app: Any) -> dict[str, Any]:
  app.connect("autodoc-process-docstring", process, priority=400)
  return {"parallel_read_safe": True, "parallel_write_safe": True}

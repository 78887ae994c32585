"""Sphinx configuration of the documentation site (`make docs`).

The reference pages are generated at build time (`_ext/reference.py`) from the code: the config
fields and their comments, the registered components, the command lines' --help and the
docstrings. Nothing is fetched from the network while building.
"""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]

project = "seq2seq-attention"
author = "the seq2seq-attention authors"
copyright = "the seq2seq-attention authors"

extensions = [
  "myst_parser",
  "sphinx.ext.autodoc",
  "sphinx.ext.napoleon",
  "sphinx.ext.graphviz",
  "reference",  # docs/_ext/reference.py: the generated reference pages.
  "plain_docstrings",  # docs/_ext/plain_docstrings.py: the docstrings as autodoc reads them.
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "reference/_generated", "README.md"]
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

# Warnings are errors (-W) and every internal reference must resolve (-n). Names from other
# libraries (jax, flax, ml_collections, numpy, the standard library) have no target here, as
# nothing is fetched: only references into this project are checked.
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(?!seq2seq\b).*")]
# A type variable and a private base class, which have no page of their own.
nitpick_ignore = [
  ("py:obj", "seq2seq.common.registry.T"),
  ("py:class", "seq2seq.data.builders._Builder"),
]

autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_mock_imports: list[str] = []
napoleon_google_docstring = True
napoleon_numpy_docstring = False

graphviz_output_format = "svg"

html_theme = "sphinx_book_theme"
html_title = "seq2seq-attention"
html_static_path: list[str] = []
html_theme_options = {
  "show_toc_level": 2,
  "navigation_with_keys": False,
  "use_download_button": False,
  "use_fullscreen_button": False,
}
html_last_updated_fmt = None

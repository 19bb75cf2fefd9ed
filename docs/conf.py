"""Sphinx configuration for the gpframe documentation.

Build with ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` from the repository
root (tests/test_docs.py runs the same command).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# build against this checkout's package, not an installed copy elsewhere
sys.path.insert(0, str(ROOT))

project = "gpframe"
author = "the gpframe authors"
copyright = "the gpframe authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# MyST: $...$ / $$...$$ maths, ::: fences, definition lists, anchors on h1-h3 so that pages can
# link to sections ("concepts.md#what-is-public")
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# numpy-style docstrings
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": False}
# annotations are strings (``from __future__ import annotations``) naming types that the modules
# import under TYPE_CHECKING only; show them as written rather than resolving them
autodoc_type_aliases: dict[str, str] = {}

nitpicky = False

html_theme = "furo"
html_title = "gpframe"


# --- docstring text -> reStructuredText ------------------------------------------------------
# The docstrings are written to read well in ``help()``: they use ``|x|`` and ``||x||`` for
# absolute values and norms. In reStructuredText ``|x|`` is a substitution reference, and an
# undefined one is an error. We define no substitutions, so escape the bars outside inline
# literals and maths before the text reaches docutils.
_LITERAL = re.compile(r"(``.*?``|:math:`[^`]*`)")
_BARS = re.compile(r"(?<!\\)\|(?=\S)([^|`\n]*?\S)?\|")


def _escape_bars(text: str) -> str:
    parts = _LITERAL.split(text)
    for i in range(0, len(parts), 2):  # even indices are outside literals
        parts[i] = _BARS.sub(lambda m: "\\|" + (m.group(1) or "") + "\\|", parts[i])
    return "".join(parts)


def _process_docstring(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    lines[:] = _escape_bars("\n".join(lines)).split("\n")


def setup(app: Any) -> None:
    """Connect the docstring hook (Sphinx calls this for the conf module)."""
    # priority < 500 (napoleon's): run on the raw numpy-style text, before napoleon converts it
    app.connect("autodoc-process-docstring", _process_docstring, priority=100)

"""mkdocs hook: the docstrings are written with reST roles (``:func:`vitviz.x```), which mkdocstrings' Google-style
parser leaves as text before the code span; drop the role so that ``:func:`x``` reads as ``x``."""

from __future__ import annotations

import re

ROLE = re.compile(r":(?:func|class|meth|attr|mod|data|exc|obj|py:\w+):(\s*<code>)")


def on_page_content(html: str, **kwargs) -> str:
    return ROLE.sub(r"\1", html)

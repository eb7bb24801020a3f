"""A linear look at JSON text before it is parsed: the text without its strings, whose brackets and commas bound
how many lists, objects and values a parser would build (a parser builds them all before anyone can check them:
ten megabytes of ``[],`` are three million lists, over 250 MB)."""

from __future__ import annotations

import re

__all__ = ["FLAT_STRING_OBJECT", "without_strings"]

# a string, or an unterminated one up to the end: it always matches where it starts, so scanning stays linear
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)

FLAT_STRING_OBJECT = re.compile(r'\s*\{\s*(?:""\s*:\s*""\s*(?:,\s*""\s*:\s*""\s*)*)?\}\s*')
"""``without_strings(text)`` of a JSON object whose values are all strings (match with ``fullmatch``)."""


def without_strings(text: str) -> str:
    """``text`` with every JSON string replaced by ``""`` (linear in the length of ``text``)."""
    return _STRING.sub('""', text)

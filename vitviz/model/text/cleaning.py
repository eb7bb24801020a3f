"""The text cleaning of the reference tokenizers (OpenAI / open_clip, big_vision, transformers' SigLIP) and the lazy
import of the optional libraries, shared by :mod:`.bpe` and :mod:`.pieces`. No Qt, no torch.

open_clip's ``tokenizer_kwargs.clean`` chooses among ``"lower"`` (CLIP's default), ``"whitespace"`` and
``"canonicalize"`` (SigLIP); ``"siglip"`` is transformers' ``SiglipTokenizer.canonicalize_text``.
"""

from __future__ import annotations

import html
import importlib
import re
import string
from typing import Any

EXTRA_HINT = "pip install 'vitviz[text]'"
CLEAN_MODES = ("lower", "whitespace", "canonicalize", "siglip")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


class TokenizerError(ValueError):
    """A tokenizer that cannot be built or used: a missing library or a broken vocabulary (one line naming it)."""


def need(module: str) -> Any:
    """``import module``, or :class:`TokenizerError` saying which extra brings it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TokenizerError(f"the text towers need the Python package {module!r} ({EXTRA_HINT})") from None


def basic_clean(text: str) -> str:
    """``ftfy.fix_text``, HTML entities unescaped twice, stripped (OpenAI's and open_clip's ``basic_clean``)."""
    return html.unescape(html.unescape(need("ftfy").fix_text(text))).strip()


def whitespace_clean(text: str) -> str:
    """Whitespace runs to one space, stripped."""
    return " ".join(text.split()).strip()


def canonicalize(text: str) -> str:
    """big_vision's ``canonicalize_text`` as open_clip has it: ``_`` -> space, ``string.punctuation`` removed,
    lower-case, whitespace runs to one space, stripped."""
    return whitespace_clean(text.replace("_", " ").translate(_PUNCTUATION).lower())


def siglip_clean(text: str, lower: bool = True) -> str:
    """transformers' ``SiglipTokenizer.canonicalize_text``: lower-case (its ``do_lower_case``), punctuation removed,
    ``\\s+`` -> one space, stripped; no ftfy, no HTML unescaping, ``_`` removed as punctuation."""
    if lower:
        text = text.lower()
    return re.sub(r"\s+", " ", text.translate(_PUNCTUATION)).strip()


def clean(text: str, mode: str, lower: bool = True) -> str:
    """``text`` cleaned as ``mode`` (:data:`CLEAN_MODES`) says; ``lower`` applies to ``"siglip"`` only."""
    if mode == "lower":
        return whitespace_clean(basic_clean(text)).lower()
    if mode == "whitespace":
        return whitespace_clean(basic_clean(text))
    if mode == "canonicalize":
        return canonicalize(basic_clean(text))
    if mode == "siglip":
        return siglip_clean(text, lower)
    raise TokenizerError(f"unknown text cleaning {mode!r} (known: {', '.join(CLEAN_MODES)})")


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__

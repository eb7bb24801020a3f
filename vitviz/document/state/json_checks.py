"""Strict, bounded checks of the values of a parsed JSON document: each returns the value or raises
:class:`FieldProblem` naming the field (``where``, e.g. ``"options.layer"``) and the problem; the reader adds the
file's name. No Qt, no torch."""

from __future__ import annotations

import math
from typing import Any

from vitviz.document.state.schema import MAX_DEPTH, MAX_INDEX, MAX_TEXT
from vitviz.views.view_registry import all_views

__all__ = ["FieldProblem", "boolean", "choice", "depth", "integer", "json_list", "json_object", "number", "text",
           "type_name", "view_key"]


class FieldProblem(ValueError):
    """A problem with one field (the caller adds the file's name)."""


def depth(obj: Any, limit: int = MAX_DEPTH + 1) -> int:
    """How deeply ``obj`` nests (counted up to just past ``limit``)."""
    stack, deepest = [(obj, 1)], 1
    while stack:
        o, d = stack.pop()
        deepest = max(deepest, d)
        if d > limit:
            return d
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return deepest


def type_name(v: Any) -> str:
    """``v``'s JSON type in words ("a string", "true/false" ...)."""
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", int: "an integer",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def json_object(v: Any, where: str, keys: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object with only the ``keys`` and every ``required`` one."""
    if not isinstance(v, dict):
        raise FieldProblem(f"{where} must be an object, not {type_name(v)}")
    unknown = sorted(set(v) - set(keys))
    if unknown:
        raise FieldProblem(f"{where} has unknown {'keys' if len(unknown) > 1 else 'key'} "
                           f"{', '.join(map(repr, unknown))} (known: {', '.join(keys)})")
    missing = [k for k in required if k not in v]
    if missing:
        raise FieldProblem(f"{where} lacks {', '.join(map(repr, missing))}")
    return v


def text(v: Any, where: str, *, empty: bool = True) -> str:
    """A string of at most :data:`MAX_TEXT` characters, without NUL (and not empty unless ``empty``)."""
    if not isinstance(v, str):
        raise FieldProblem(f"{where} must be a string, not {type_name(v)}")
    if len(v) > MAX_TEXT:
        raise FieldProblem(f"{where} is {len(v)} characters long (at most {MAX_TEXT})")
    if "\x00" in v:
        raise FieldProblem(f"{where} contains a NUL character")
    if not empty and not v:
        raise FieldProblem(f"{where} is empty")
    return v


def integer(v: Any, where: str, lo: int = -MAX_INDEX, hi: int = MAX_INDEX) -> int:
    """An integer (not true/false) in ``lo .. hi``."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise FieldProblem(f"{where} must be an integer, not {type_name(v)}")
    if not lo <= v <= hi:
        raise FieldProblem(f"{where} is {v}; it must lie in {lo} .. {hi}")
    return v


def number(v: Any, where: str, lo: float = -1e300, hi: float = 1e300) -> float:
    """A finite number in ``lo .. hi``, as a float."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise FieldProblem(f"{where} must be a number, not {type_name(v)}")
    v = float(v)
    if not (math.isfinite(v) and lo <= v <= hi):
        raise FieldProblem(f"{where} is {v:g}; it must lie in {lo:g} .. {hi:g}")
    return v


def boolean(v: Any, where: str) -> bool:
    """true or false."""
    if not isinstance(v, bool):
        raise FieldProblem(f"{where} must be true or false, not {type_name(v)}")
    return v


def choice(v: Any, where: str, choices: tuple[str, ...] | list[str]) -> str:
    """One of the string ``choices``."""
    s = text(v, where)
    if s not in choices:
        raise FieldProblem(f"{where} is {s!r}; valid: {', '.join(choices)}")
    return s


def json_list(v: Any, where: str, most: int) -> list[Any]:
    """A list of at most ``most`` entries."""
    if not isinstance(v, list):
        raise FieldProblem(f"{where} must be a list, not {type_name(v)}")
    if len(v) > most:
        raise FieldProblem(f"{where} has {len(v)} entries (at most {most})")
    return v


def view_key(v: Any, where: str) -> str:
    """The key of a registered view (:mod:`vitviz.views`)."""
    keys = [x.key for x in all_views()]
    s = text(v, where)
    if s not in keys:
        raise FieldProblem(f"{where}: unknown view {s!r} (this vitviz has {', '.join(keys)})")
    return s


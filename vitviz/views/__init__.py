"""The registry of views: what the canvas can show. No Qt here.

A view is a small object (see :class:`View`) that declares its name, its keyboard shortcut, which options it reads
(layer, head, query patch, rollout options, target), how to compute its map from an
:class:`~vitviz.pipeline.InferenceResult`, its caption, the quantity and unit of its colour bar, and why it is
unavailable for a model. The window builds its view list, shortcuts, enabled controls and export names from here;
the session computes and caches maps through it.

Adding a view: one module in this package that defines ``VIEW = MyView()``, and its name in ``_BUILTIN`` below (or
``register(MyView())`` from anywhere, e.g. a test or a plug-in).
"""

from __future__ import annotations

import importlib

from vitviz.views.base import HEAD_REDUCTIONS, OPTION_NAMES, View, as_grid, head_text, patch_text

__all__ = ["HEAD_REDUCTIONS", "OPTION_NAMES", "View", "all_views", "as_grid", "get", "head_text", "patch_text",
           "register", "unregister"]

_BUILTIN = ("cls", "query", "rollout", "grad_rollout", "relevance", "token_sim", "pos_sim", "token_norm")
_REGISTRY: dict[str, View] = {}


def register(view: View) -> View:
    """Add ``view`` (replacing a view with the same key, keeping its place); returns it."""
    if not isinstance(view, View):
        raise TypeError(f"register() takes a vitviz.views.View, got {type(view).__name__}")
    unknown = set(view.reads) - set(OPTION_NAMES)
    if unknown:
        raise ValueError(f"view {view.key!r} reads unknown options {sorted(unknown)}; valid: {OPTION_NAMES}")
    _REGISTRY[view.key] = view
    return view


def unregister(key: str) -> None:
    """Remove the view ``key`` (no error when absent)."""
    _REGISTRY.pop(key, None)


def all_views() -> tuple[View, ...]:
    """Every registered view, in menu order."""
    return tuple(_REGISTRY.values())


def get(key: str) -> View:
    """The view ``key``; ValueError naming the valid keys when there is none."""
    try:
        return _REGISTRY[key]
    except KeyError:
        raise ValueError(f"unknown view {key!r}; valid: {list(_REGISTRY)}") from None


def shortcut(view: View) -> str | None:
    """The view's own shortcut, else its position in the menu (1-9)."""
    if view.shortcut:
        return view.shortcut
    i = list(_REGISTRY).index(view.key)
    return str(i + 1) if i < 9 else None


for _name in _BUILTIN:
    register(importlib.import_module(f"vitviz.views.{_name}").VIEW)

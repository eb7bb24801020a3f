"""The registry of views: what the canvas can show, in menu order. No Qt here.

Adding a view: one module in this package that defines ``VIEW = MyView()``, and its name in ``_BUILTIN`` below (or
``register(MyView())`` from anywhere, e.g. a test or a plug-in).
"""

from __future__ import annotations

import importlib

from vitviz.views.base import View
from vitviz.views.options import readable_options

__all__ = ["all_views", "get", "register", "shortcut", "unregister"]

_BUILTIN = ("cls", "query", "rollout", "grad_rollout", "relevance", "legrad", "gradcam", "token_sim", "pos_sim",
            "token_norm", "feature_pca", "rope_sim", "logit_lens")
_REGISTRY: dict[str, View] = {}


def register(view: View) -> View:
    """Add ``view`` (replacing a view with the same key, keeping its place); returns it."""
    if not isinstance(view, View):
        raise TypeError(f"register() takes a vitviz.views.View, got {type(view).__name__}")
    unknown = set(view.reads) - set(readable_options())
    if unknown:
        raise ValueError(f"view {view.key!r} reads unknown options {sorted(unknown)}; valid: {readable_options()}")
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

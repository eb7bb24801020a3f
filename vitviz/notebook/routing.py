"""Where ``vitviz.show`` shows: the window, or the notebook viewer (:func:`notebook_wanted`). No Qt, no torch."""

from __future__ import annotations

import sys
from typing import Any

from vitviz._util.display import display_problem

__all__ = ["in_notebook_kernel", "no_display", "notebook_wanted"]


def _shell() -> Any:
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]
    except ImportError:
        return None
    return get_ipython()


def in_notebook_kernel() -> bool:
    """True inside a Jupyter kernel (JupyterLab, Notebook, VS Code, Colab) whose event loop is not Qt's (after
    ``%gui qt`` the window can show beside the notebook, so it is not one)."""
    ip = _shell()
    kernel = getattr(ip, "kernel", None) if ip is not None else None
    if kernel is None:
        return "marimo" in sys.modules and _in_marimo()
    loop = getattr(kernel, "eventloop", None)
    return not (loop is not None and "qt" in getattr(loop, "__name__", "").lower())


def _in_marimo() -> bool:
    try:
        import marimo  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - marimo imported means importable
        return False
    running = getattr(marimo, "running_in_notebook", None)
    return bool(running()) if callable(running) else False


def no_display() -> bool:
    """True where Qt can have no window (:func:`vitviz._util.display.display_problem` names a reason: no ``DISPLAY``
    or ``WAYLAND_DISPLAY`` on Linux, no platform plugin, Qt's X11 plugin without its system library, no PySide6),
    e.g. a GPU server over SSH."""
    return display_problem() is not None


def notebook_wanted() -> bool:
    """``vitviz.show`` returns the notebook viewer: called in a notebook kernel, or where no window can show."""
    return in_notebook_kernel() or no_display()

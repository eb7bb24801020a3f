"""vitviz in a notebook (Jupyter, VS Code, Colab, marimo): :class:`Viewer`, an anywidget on the Qt-free library.

Needs the ``notebook`` extra (``pip install vitviz[notebook]``: anywidget). ``vitviz.show`` returns a viewer in a
notebook kernel or where no display can show the window (:mod:`vitviz.notebook.routing`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Viewer"]


def __getattr__(name: str) -> Any:
    if name == "Viewer":
        try:
            from vitviz.notebook.viewer import Viewer
        except ImportError as e:
            if "anywidget" not in str(e):
                raise
            raise ImportError("the notebook viewer needs anywidget: pip install 'vitviz[notebook]'") from None
        return Viewer
    raise AttributeError(f"module 'vitviz.notebook' has no attribute {name!r}")

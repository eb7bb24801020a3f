"""Start-up: the window is on screen before torch is imported, and says when (``VITVIZ_STARTUP_LOG=1``).

The window is built from Qt, pyqtgraph, numpy and vitviz's torch-free modules; the first model load imports torch
(about 2 s) on the worker thread. Started while the window is still being built and painted, that import would hold
the GIL for long stretches and delay the first paint, so :class:`WorkAfterShow` holds the worker's jobs until the
window's first show has been handled (a window that is built but not shown: until the event loop's first turn).

With ``VITVIZ_STARTUP_LOG=1`` :func:`startup_log` prints ``vitviz: window shown after X.XX s (heavy modules loaded:
none)`` and ``vitviz: first overlay after X.XX s (...)`` on stderr, the seconds counted from ``import vitviz``;
``bench/startup.py`` reads these lines, and a test checks that nothing in :data:`HEAVY_MODULES` is loaded when the
window is shown.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QWidget

import vitviz
from vitviz.gui.worker import TaskRunner

HEAVY_MODULES = ("torch", "torchvision", "matplotlib", "scipy", "timm", "transformers", "open_clip", "sklearn",
                 "cuda.bindings")
"""Libraries the window must not import before it is shown (each costs 0.3-2 s; torch comes with the first model;
cuda-python, 60-70 ms, would come with pyqtgraph: :mod:`vitviz.gui` keeps it out)."""

_LOGGED: set[str] = set()  # the start-up lines printed in this process


def heavy_modules_loaded() -> list[str]:
    """Which of :data:`HEAVY_MODULES` this process has imported (or is importing)."""
    return [m for m in HEAVY_MODULES if m in sys.modules]


def startup_log(what: str) -> None:
    """With ``VITVIZ_STARTUP_LOG`` set: print once per process ``vitviz: WHAT after X.XX s (heavy modules loaded:
    ...)`` on stderr."""
    if os.environ.get("VITVIZ_STARTUP_LOG") and what not in _LOGGED:
        _LOGGED.add(what)
        heavy = ", ".join(heavy_modules_loaded()) or "none"
        seconds = time.perf_counter() - vitviz._T0
        print(f"vitviz: {what} after {seconds:.2f} s (heavy modules loaded: {heavy})", file=sys.stderr, flush=True)


class WorkAfterShow(QObject):
    """Holds ``runner``'s jobs (:meth:`TaskRunner.hold`) until ``window`` has been shown once, then logs "window
    shown", runs what was put off with :meth:`after_show` and releases the jobs; a window not shown by the event
    loop's first turn (tests, scripts) does all this then."""

    def __init__(self, window: QWidget, runner: TaskRunner):
        super().__init__(window)
        self._window, self._runner = window, runner
        self._later: list[Callable[[], Any]] | None = []  # None once the window is up
        runner.hold()
        window.installEventFilter(self)
        QTimer.singleShot(0, self._unless_shown)

    def after_show(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` once the window is up (at once when it is)."""
        if self._later is None:
            fn()
        else:
            self._later.append(fn)

    def _unless_shown(self) -> None:
        if not self._window.isVisible():
            self._up()

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if obj is self._window and event.type() == QEvent.Type.Show:
            self._window.removeEventFilter(self)
            QTimer.singleShot(0, self._shown)  # after the show (and its first layout and paint) has been handled
        return False

    def _shown(self) -> None:
        startup_log("window shown")
        self._up()

    def _up(self) -> None:
        later, self._later = self._later or [], None
        for fn in later:
            fn()
        self._runner.release()

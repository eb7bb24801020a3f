"""Helpers shared by the GUI tests (imported as ``gui_helpers``; fixtures live in conftest.py)."""

import threading
import time

import numpy as np
from PIL import Image


def make_image(path, h=70, w=110, seed=0):
    rng = np.random.default_rng(seed)
    arr = (rng.random((h, w, 3)) * 255).astype(np.uint8)
    Image.fromarray(arr).save(path)
    return arr


class Recorder:
    """Replaces the window's dialogs: records errors and answers questions."""

    def __init__(self):
        self.errors = []
        self.infos = []
        self.confirm_answer = False
        self.confirms = []

    def error(self, title, message, detail=""):
        self.errors.append((title, message))

    def info(self, title, html):
        self.infos.append((title, html))

    def confirm(self, title, text):
        self.confirms.append(text)
        return self.confirm_answer

    def confirm_overwrite(self, path):
        self.confirms.append(path)
        return self.confirm_answer

    def open_images(self, folder):
        return []

    def open_reference_image(self, folder):
        return None

    def open_vector(self, folder):
        return None

    def ask_patch(self, name, grid):
        return None


def shown_window(qtbot, settings, model, *, model_key=None, dialogs=None, size=(1400, 900)):
    """A main window on ``model`` (``model_key``: what it was opened from), its dialogs replaced by ``dialogs`` when
    given, shown at ``size`` and exposed; closed by qtbot at the end of the test."""
    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow

    make_app()
    w = MainWindow(settings=settings, model=model, **({} if model_key is None else {"model_key": model_key}))
    if dialogs is not None:
        w.dialogs = dialogs
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    qtbot.waitExposed(w)
    return w


def open_and_wait(qtbot, w, path, timeout=30000):
    with qtbot.waitSignal(w.resultShown, timeout=timeout):
        w.open_images([str(path)])
    return w.session.result


def leftover_threads(before: set, wait_s: float = 10.0) -> list:
    """vitviz's own threads (named ``vitviz-...``) started since ``before`` that are still running after up to
    ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [t for t in threading.enumerate()
                if t not in before and t.is_alive() and t.name.startswith("vitviz-")]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)

"""Fixtures for the GUI tests: a tiny random model, a non-square test image, settings in tmp_path."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("pytestqt")


@pytest.fixture
def tiny_model():
    """ViT with a 4x4 grid of 8 px patches on 32 px input, 3 layers x 4 heads, 5 classes, labelled."""
    from vitviz.model import create_model

    torch.manual_seed(0)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4,
                     num_classes=5)
    m.spec = m.spec.replace(labels=("circle", "square", "star", "cross", "heart"), name="tiny test ViT")
    # make attention peaky so maps differ clearly between layers and heads
    with torch.no_grad():
        for b in m.blocks:
            b.attn.qkv.weight.mul_(25.0)
    return m.eval()


def make_image(path, h=70, w=110, seed=0):
    rng = np.random.default_rng(seed)
    arr = (rng.random((h, w, 3)) * 255).astype(np.uint8)
    Image.fromarray(arr).save(path)
    return arr


@pytest.fixture
def image_path(tmp_path):
    p = tmp_path / "photo.png"
    make_image(p)
    return p


@pytest.fixture
def settings(tmp_path):
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


class Recorder:
    """Replaces the window's dialogs: records errors and answers questions."""

    def __init__(self):
        self.errors = []
        self.infos = []
        self.confirm_answer = False
        self.confirms = []
        self.save_path = None

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

    def save_png(self, suggested):
        return self.save_path

    def open_images(self, folder):
        return []


@pytest.fixture
def window(qtbot, tiny_model, settings):
    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow

    make_app()
    w = MainWindow(settings=settings, model=tiny_model)
    w.dialogs_recorder = Recorder()
    qtbot.addWidget(w)
    w.resize(1400, 900)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.close()


def open_and_wait(qtbot, w, path, timeout=30000):
    with qtbot.waitSignal(w.resultShown, timeout=timeout):
        w.open_images([str(path)])
    return w.session.result

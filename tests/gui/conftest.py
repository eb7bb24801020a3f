"""Fixtures for the GUI tests: a tiny random model, a non-square test image, settings in tmp_path."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
import torch

pytest.importorskip("pytestqt")

from gui_helpers import Recorder, make_image  # noqa: E402


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


@pytest.fixture
def image_path(tmp_path):
    p = tmp_path / "photo.png"
    make_image(p)
    return p


@pytest.fixture
def settings(tmp_path):
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


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


@pytest.fixture(autouse=True)
def _private_settings(tmp_path, monkeypatch):
    """No GUI test ever touches the user's real settings."""
    monkeypatch.setenv("VITVIZ_SETTINGS", str(tmp_path / "default-settings.ini"))

"""Fixtures for the GUI tests: a tiny random model, a non-square test image, settings in tmp_path."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("pytestqt")

from gui_helpers import Recorder, make_image  # noqa: E402


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

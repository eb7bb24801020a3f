"""Fixtures for the GUI tests: a tiny random model, a non-square test image, settings in tmp_path."""

import os
import threading

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("pytestqt")

from gui_helpers import Recorder, leftover_threads, make_image, shown_window  # noqa: E402


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
    w = shown_window(qtbot, settings, tiny_model)
    w.dialogs_recorder = Recorder()
    yield w
    w.close()


# a saved checkpoint of the tiny model and two images (files), and a window on that checkpoint (win): the session tests
@pytest.fixture
def files(tmp_path, tiny_model):
    from vitviz.model import save_checkpoint

    ckpt = save_checkpoint(tiny_model, tmp_path / "tiny.safetensors")
    images = []
    for i in range(2):
        make_image(tmp_path / f"im{i}.png", seed=i)
        images.append(str(tmp_path / f"im{i}.png"))
    return {"ckpt": ckpt, "images": images, "folder": tmp_path}


@pytest.fixture
def win(qtbot, tiny_model, settings, files):
    w = shown_window(qtbot, settings, tiny_model, model_key=f"file:{files['ckpt']}", dialogs=Recorder(),
                     size=(1300, 850))
    yield w
    w.close()


@pytest.fixture(autouse=True)
def _private_settings(tmp_path, monkeypatch):
    """No GUI test ever touches the user's real settings."""
    monkeypatch.setenv("VITVIZ_SETTINGS", str(tmp_path / "default-settings.ini"))


@pytest.fixture(autouse=True)
def no_thread_outlives_its_test():
    """A GUI test fails when a thread of vitviz it started (the window's worker, a loader, a writer: their names start
    with ``vitviz-``) is still running after its windows were closed. Autouse fixtures are set up first, so this
    check runs after qtbot and the window closed theirs. (Test infrastructure such as the fake Hub's server threads
    and tqdm's monitor is not vitviz's to stop.)"""
    before = set(threading.enumerate())
    yield
    left = leftover_threads(before)
    assert not left, f"threads still running after the test: {[t.name for t in left]}"

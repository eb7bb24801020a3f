"""vitviz.show: the window on an in-memory model of the user's own, offscreen."""

import numpy as np
import pytest
import torch
from PIL import Image
from PySide6.QtCore import QTimer
from textbook_models import ViTC, train

import vitviz


@pytest.fixture(autouse=True)
def errors(monkeypatch):
    """Error dialogs recorded instead of shown (a modal box would wait forever offscreen)."""
    from vitviz.gui import dialogs

    seen = []
    monkeypatch.setattr(dialogs.Dialogs, "error", lambda self, title, message, detail="": seen.append((title, message)))
    return seen


@pytest.fixture
def style_c():
    torch.manual_seed(0)
    return train(ViTC(img_size=32, patch_size=8, num_classes=10, emb_size=32, depth=2, num_heads=4))


def _sample():
    from vitviz.demo import sample_images

    return str(sample_images()[0])


def test_show_draws_a_map_for_a_style_c_model(qtbot, style_c, settings, errors):
    pil = Image.fromarray((np.random.default_rng(0).random((50, 70, 3)) * 255).astype(np.uint8))
    labels = [f"shape {i}" for i in range(10)]
    w = vitviz.show(style_c, [_sample(), pil], labels=labels, block=False, settings=settings)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: errors or w.session.result is not None, timeout=30000)
    assert not errors
    r = w.session.result
    assert r.model_name == "ViTC" and r.grid == (4, 4) and r.num_layers == 2 and r.num_heads == 4
    assert r.labels == tuple(labels) and r.attention_grads is not None
    assert w.session.images[1] == "image 2"  # the in-memory image is one of the set
    for view in ("cls", "rollout", "relevance", "token_norm", "pos_sim"):
        w.set_view(view)
        m = np.asarray(w.canvas.overlay_values)
        assert m.shape == (4, 4) and np.isfinite(m).all() and m.std() > 0, view
        assert w.canvas.overlay_item.isVisible(), view
    # the map drawn is the relevance of this model's capture, recomputed independently
    w.set_view("relevance")
    from vitviz import analysis as A

    ref = A.relevance(r.attentions, r.attention_grads, grid=r.grid, num_prefix_tokens=1)
    np.testing.assert_allclose(np.asarray(w.canvas.overlay_values), ref.numpy(), rtol=1e-5, atol=1e-7)
    w.step_image(1)  # PageDown: the in-memory image
    qtbot.waitUntil(lambda: errors or w.session.result.source == "image 2", timeout=30000)
    assert w.session.result.source == "image 2" and w.session.result.image_size == (50, 70)
    assert "ViTC" in w.model_label.text() and not errors
    w.close()


def test_show_keeps_the_models_precision(qtbot, style_c, settings, errors):
    settings.setValue("precision", "bf16")  # the window's remembered choice does not cast the caller's model
    w = vitviz.show(style_c, _sample(), block=False, settings=settings)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: errors or w.session.result is not None, timeout=30000)
    assert not errors and w.precision == "fp32" and w.session.result.precision == "fp32"
    assert next(style_c.parameters()).dtype == torch.float32
    w.close()


def test_show_blocks_until_the_window_closes(qtbot, style_c, settings, errors):
    from PySide6.QtWidgets import QApplication

    from vitviz.gui.main_window import MainWindow

    seen = []

    def close_when_shown():
        wins = [x for x in QApplication.topLevelWidgets() if isinstance(x, MainWindow) and x.isVisible()]
        if errors or wins and wins[-1].session.result is not None:
            seen.append(None if errors else wins[-1].session.result.source)
            wins[-1].close()
        else:
            QTimer.singleShot(50, close_when_shown)

    QTimer.singleShot(50, close_when_shown)
    assert vitviz.show(style_c, _sample(), block=True, settings=settings) is None
    assert not errors and seen and seen[0].endswith(".png")


def test_show_refuses_a_model_without_attention_before_any_window(settings):
    from vitviz.capture import CaptureError

    with pytest.raises(CaptureError, match="found no attention to capture"):
        vitviz.show(torch.nn.Linear(3, 3), _sample(), block=False, settings=settings)
    with pytest.raises(ValueError, match="no such image file"):
        vitviz.show(ViTC(), "/nonexistent/cat.png", block=False, settings=settings)


def test_show_does_not_block_in_ipython_with_the_qt_loop(qtbot, style_c, settings, errors, monkeypatch):
    """Under IPython with ``%gui qt`` (its shell says active_eventloop='qt'), show returns the open window at once."""
    import sys
    import types

    shell = types.SimpleNamespace(active_eventloop="qt")
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    w = vitviz.show(style_c, _sample(), settings=settings)  # block=None: decided by the running loop
    qtbot.addWidget(w)
    assert w.isVisible()
    qtbot.waitUntil(lambda: errors or w.session.result is not None, timeout=30000)
    assert not errors
    w.close()

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


# ----------------------------------------------------------------------------------------------- targets (issue 23)
def margin(out):
    return out[3] - out[1]


def test_show_with_a_function_as_the_target_explains_it_for_every_image(qtbot, tiny_model, settings, errors):
    from vitviz import analysis as A
    from vitviz.capture import capture
    from vitviz.imaging import load_image

    pil = Image.fromarray((np.random.default_rng(1).random((40, 60, 3)) * 255).astype(np.uint8))
    w = vitviz.show(tiny_model, [_sample(), pil], target=margin, block=False, settings=settings)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: errors or w.session.result is not None, timeout=30000)
    assert not errors
    r = w.session.result
    assert r.target_spec.fn is margin and r.target is None and r.target_text() == "margin(output)"
    x = w.controller.pipeline.prepare(load_image(_sample())).x[None]
    cap = capture(tiny_model, x, target=margin, store_dtype=torch.float32)
    want = A.relevance(cap.attentions[:, 0], cap.attention_grads[:, 0], grid=cap.grid, num_prefix_tokens=1)
    w.set_view("relevance")
    np.testing.assert_allclose(np.asarray(w.canvas.overlay_values), want.numpy(), rtol=1e-5, atol=1e-7)
    assert "margin(output)" in w.canvas.title.text() and "value" in w.predictions.box.label.text()
    w.step_image(1)  # the in-memory image: the same target
    qtbot.waitUntil(lambda: errors or w.session.result.source == "image 2", timeout=30000)
    assert not errors and w.session.result.target_spec.fn is margin
    w.close()


def test_show_makes_every_gradient_view_of_a_feature_model_explain_the_target(qtbot, settings, errors):
    from vitviz import views
    from vitviz.model import create_model
    from vitviz.pipeline import Pipeline, reference_target

    torch.manual_seed(0)
    dino = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4,
                        num_classes=0).eval()
    ref = reference_target(Pipeline(dino), _sample(), patch=(1, 1))
    w = vitviz.show(dino, _sample(), target=ref, block=False, settings=settings)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: errors or w.session.result is not None, timeout=30000)
    assert not errors and w.session.result.target_spec is ref
    for v in views.all_views():
        if v.needs_grads:
            w.set_view(v.key)
            assert w.session.current_map() is not None and ref.describe() in w.canvas.title.text(), v.key
    w.close()


def raises(out):
    raise RuntimeError("no score here")


def vector(out):
    return out[:2]


def detached(out):
    return torch.tensor(1.0)


@pytest.mark.parametrize("target, words", [
    (raises, "target function raises raised RuntimeError: no score here"),
    (vector, r"target function vector returned shape \(2,\), not a scalar"),
    (detached, "its value does not depend on the model's output"),
    (lambda out: 3, "returned a int, not a tensor"),
    (9, "target class 9 out of range for a model with 5 classes"),
    ("dog", "got 'dog'"),
])
def test_show_refuses_a_bad_target_before_any_window(tiny_model, settings, errors, target, words):
    from PySide6.QtWidgets import QApplication

    from vitviz.capture.targets import TargetError
    from vitviz.gui.main_window import MainWindow

    before = [x for x in QApplication.topLevelWidgets() if isinstance(x, MainWindow)]
    with pytest.raises(TargetError, match=words) as e:
        vitviz.show(tiny_model, _sample(), target=target, block=False, settings=settings)
    assert "\n" not in str(e.value) and not errors
    assert [x for x in QApplication.topLevelWidgets() if isinstance(x, MainWindow)] == before


def test_show_explains_a_function_of_a_foreign_modules_output(qtbot, style_c, settings, errors):
    w = vitviz.show(style_c, _sample(), target=margin, block=False, settings=settings)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: errors or w.session.result is not None, timeout=30000)
    assert not errors and w.session.result.target_spec.fn is margin
    w.set_view("relevance")
    m = np.asarray(w.canvas.overlay_values)
    assert m.shape == (4, 4) and np.isfinite(m).all() and m.std() > 0
    w.close()


def test_show_refuses_a_prompt_without_a_text_tower_before_any_window(tiny_model, settings, errors):
    from vitviz.capture.targets import TargetError, Text

    with pytest.raises(TargetError, match="its text tower is unknown"):
        vitviz.show(tiny_model, _sample(), target=Text("a cat"), block=False, settings=settings)
    assert not errors


def test_show_takes_image_tensors_in_reduced_precision(qtbot, style_c, settings, errors):
    """A [C, H, W] tensor in [0, 1] is an image in any float precision (bfloat16 has no numpy dtype)."""
    x = torch.rand(3, 30, 40)
    w = vitviz.show(style_c, [x.to(torch.bfloat16), x.to(torch.float16)], block=False, settings=settings)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: errors or w.session.result is not None, timeout=30000)
    assert not errors and w.session.result.image_size == (30, 40)
    want = np.clip(np.round(x.to(torch.bfloat16).double().permute(1, 2, 0).numpy() * 255), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(w.session.result.rgb, want)

"""The desktop app through the real window object (pytest-qt, offscreen, tiny random model, no network)."""

import math

import numpy as np
import pytest
import torch
from gui_helpers import make_image, open_and_wait
from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from vitviz import analysis as A
from vitviz.capture import capture


def _reference_capture(model, path, target=None):
    """Preprocess + capture independently of the GUI (what the window should be showing)."""
    img = Image.open(path).convert("RGB")
    x, geo = model.spec.preprocess.apply(img)
    cap = capture(model, x[None], target=target)
    return cap, geo


def _overlay(w):
    """The raw map on the canvas (checked against the colour-normalised image it shows)."""
    raw = np.asarray(w.canvas.overlay_values)
    scale = w.canvas.colorbar.scale
    np.testing.assert_allclose(np.asarray(w.canvas.overlay_item.image), scale.normalise(raw), atol=1e-6)
    return raw


def test_open_image_shows_cls_attention_of_the_first_layer(qtbot, window, image_path, tiny_model):
    r = open_and_wait(qtbot, window, image_path)
    assert r.rgb.shape == (70, 110, 3)
    assert np.asarray(window.canvas.image_item.image).shape == (70, 110, 3)  # the full photo, not the crop
    cap, _ = _reference_capture(tiny_model, image_path)
    ref = A.cls_attention(cap.attentions[:, 0], 0, "mean", grid=cap.grid, num_prefix_tokens=1).numpy()
    np.testing.assert_allclose(_overlay(window), ref, rtol=1e-5, atol=1e-7)
    # the predictions panel lists the top classes with the spec's labels
    first = window.predictions.table.item(0, 0).text()
    top = int(cap.logits[0].argmax())
    assert first.startswith(tiny_model.spec.labels[top])
    assert "photo.png" in window.windowTitle()


def test_right_key_changes_layer_and_overlay_equals_analysis_map(qtbot, window, image_path, tiny_model):
    open_and_wait(qtbot, window, image_path)
    before = _overlay(window).copy()
    window.activateWindow()
    window.canvas.setFocus()
    qtbot.keyClick(window.canvas, Qt.Key.Key_Right)
    assert window.session.options.layer == 1
    assert window.controls.layer_slider.value() == 1
    cap, _ = _reference_capture(tiny_model, image_path)
    ref = A.cls_attention(cap.attentions[:, 0], 1, "mean", grid=cap.grid, num_prefix_tokens=1).numpy()
    np.testing.assert_allclose(_overlay(window), ref, rtol=1e-5, atol=1e-7)
    assert not np.allclose(before, ref)
    qtbot.keyClick(window.canvas, Qt.Key.Key_End)
    assert window.session.options.layer == 2
    qtbot.keyClick(window.canvas, Qt.Key.Key_Home)
    assert window.session.options.layer == 0
    qtbot.keyClick(window.canvas, Qt.Key.Key_Left)  # clamps at the first layer
    assert window.session.options.layer == 0
    qtbot.keyClick(window.canvas, Qt.Key.Key_Down)  # mean -> max
    assert window.session.options.head == "max"
    ref_max = A.cls_attention(cap.attentions[:, 0], 0, "max", grid=cap.grid, num_prefix_tokens=1).numpy()
    np.testing.assert_allclose(_overlay(window), ref_max, rtol=1e-5, atol=1e-7)
    qtbot.keyClick(window.canvas, Qt.Key.Key_Up)
    assert window.session.options.head == "mean"


def test_changing_layer_head_colormap_never_reruns_the_model(qtbot, window, image_path, monkeypatch):
    open_and_wait(qtbot, window, image_path)
    calls = []
    monkeypatch.setattr(window.runner, "submit", lambda *a, **k: calls.append(a))
    for v in ("cls", "query", "rollout", "grad_rollout", "relevance", "token_sim", "pos_sim"):
        window.set_view(v)
        assert window.session.current_map() is not None, v
        assert _overlay(window).shape == (4, 4)
    window.set_view("cls")
    window.step_layer(1)
    window.step_head(1)
    window.controls.cmap_combo.setCurrentText("viridis")
    window.controls.opacity_slider.setValue(30)
    assert window.session.options.cmap == "viridis"
    assert window.canvas.overlay_item.opacity() == pytest.approx(0.3)
    assert calls == []


def test_clicking_a_head_tile_selects_that_head(qtbot, window, image_path, tiny_model):
    open_and_wait(qtbot, window, image_path)
    before = _overlay(window).copy()
    head = 2  # 4 heads: one row of 4 thumbnails
    assert window.heads.mosaic.cols == 4
    pos = window.heads.mosaic.tile_center(*divmod(head, window.heads.mosaic.cols))
    qtbot.mouseClick(window.heads.mosaic.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert window.session.options.head == head
    cap, _ = _reference_capture(tiny_model, image_path)
    ref = A.cls_attention(cap.attentions[:, 0], 0, head, grid=cap.grid, num_prefix_tokens=1).numpy()
    np.testing.assert_allclose(_overlay(window), ref, rtol=1e-5, atol=1e-7)
    assert not np.allclose(before, ref)
    assert window.heads.mosaic.highlight.isVisible()
    # the all-layers grid: click layer 2, head 1
    window.heads.grid_toggle.setChecked(True)
    qtbot.waitUntil(lambda: window.heads.mosaic.rows == 3, timeout=30000)
    pos = window.heads.mosaic.tile_center(2, 1)
    qtbot.mouseClick(window.heads.mosaic.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert (window.session.options.layer, window.session.options.head) == (2, 1)
    ref = A.cls_attention(cap.attentions[:, 0], 2, 1, grid=cap.grid, num_prefix_tokens=1).numpy()
    np.testing.assert_allclose(_overlay(window), ref, rtol=1e-5, atol=1e-7)


def _expected_patch(geo, x, y, patch):
    """Independent reference: image pixel -> resized pixel -> crop pixel -> patch."""
    h, w = geo.image_size
    rh, rw = geo.resized_size
    top, left, _, _ = geo.crop_box
    return math.floor((y * rh / h - top) / patch), math.floor((x * rw / w - left) / patch)


def test_click_on_canvas_selects_the_patch_under_the_cursor(qtbot, window, image_path, tiny_model):
    r = open_and_wait(qtbot, window, image_path)
    window.set_view("query")
    geo = r.geometry
    y0, x0, y1, x1 = geo.crop_in_image()
    gh, gw = r.grid
    cases = {
        "top-left patch": (x0 + 0.5 * (x1 - x0) / gw, y0 + 0.5 * (y1 - y0) / gh),
        "bottom-right patch": (x1 - 0.5 * (x1 - x0) / gw, y1 - 0.5 * (y1 - y0) / gh),
        "image centre": (110 / 2 + 1.3, 70 / 2 + 1.3),
    }
    seen = set()
    for name, (x, y) in cases.items():
        pos = window.canvas.image_to_widget(x, y)
        qtbot.mouseClick(window.canvas.viewport(), Qt.MouseButton.LeftButton, pos=pos)
        row, col = _expected_patch(geo, x, y, r.patch_size)
        assert 0 <= row < gh and 0 <= col < gw
        assert window.session.options.query == row * gw + col, name
        seen.add((row, col))
        # the marker outlines the selected patch
        rect = window.canvas.marker.rect()
        assert window.canvas.marker.isVisible()
        assert rect.contains(x, y)
        # the query view shows that patch's attention row
        cap, _ = _reference_capture(tiny_model, image_path)
        ref = A.query_attention(cap.attentions[:, 0], 0, "mean", 1 + row * gw + col, grid=cap.grid).numpy()
        np.testing.assert_allclose(_overlay(window), ref, rtol=1e-5, atol=1e-7)
    assert seen == {(0, 0), (gh - 1, gw - 1), (2, 2)}
    # a click outside the crop (left margin of the wide image) changes nothing
    q = window.session.options.query
    qtbot.mouseClick(window.canvas.viewport(), Qt.MouseButton.LeftButton, pos=window.canvas.image_to_widget(2, 35))
    assert window.session.options.query == q


def test_hover_reports_patch_token_and_value(qtbot, window, image_path):
    r = open_and_wait(qtbot, window, image_path)
    y0, x0, y1, x1 = r.geometry.crop_in_image()
    x, y = x0 + 1.5 * (x1 - x0) / 4, y0 + 0.5 * (y1 - y0) / 4  # patch (0, 1)
    window._on_hover(x, y)
    text = window.hover_label.text()
    value = window.session.current_map()[0, 1]
    assert "patch (row 0, col 1)" in text and "token 2" in text and f"{value:.4g}" in text


def test_export_writes_png_of_image_size_that_differs_where_the_map_is_high(qtbot, window, image_path, tmp_path):
    open_and_wait(qtbot, window, image_path)
    window.controls.export_colorbar.setChecked(False)
    window.controls.export_caption.setChecked(False)
    window.dialogs = window.dialogs_recorder
    out = tmp_path / "out" / "view.png"
    out.parent.mkdir()
    written = window.export_view(str(out), scale="native")  # the default, "print", is tested in test_export_gui
    assert written == out and out.is_file()
    png = np.asarray(Image.open(out).convert("RGB"))
    plain = np.asarray(Image.open(image_path).convert("RGB"))
    assert png.shape == plain.shape == (70, 110, 3)
    values = window.session.image_map()
    high = np.isfinite(values) & (values >= np.nanpercentile(values, 90))
    outside = ~np.isfinite(values)
    assert high.any() and outside.any()
    diff = np.abs(png.astype(int) - plain.astype(int)).sum(-1)
    assert (diff[high] > 0).mean() > 0.9
    assert (diff[outside] == 0).all()  # outside the model's crop the photo is untouched
    # never overwrite without asking: refused -> file unchanged
    before = out.read_bytes()
    window.set_layer(2)
    window.dialogs_recorder.confirm_answer = False
    assert window.export_view(str(out), scale="native") is None
    assert window.dialogs_recorder.confirms == [str(out)]
    assert out.read_bytes() == before
    # accepted -> replaced
    window.dialogs_recorder.confirm_answer = True
    assert window.export_view(str(out), scale="native") == out
    assert out.read_bytes() != before
    # with colour bar and caption the picture grows beyond the image
    window.controls.export_colorbar.setChecked(True)
    window.controls.export_caption.setChecked(True)
    p2 = window.export_view(str(tmp_path / "out" / "captioned.png"), scale="native")
    big = np.asarray(Image.open(p2))
    assert big.shape[0] > 70 and big.shape[1] > 110
    # all heads of this layer as one grid
    grid = window.export_heads(str(tmp_path / "out" / "heads.png"), scale="native")
    g = np.asarray(Image.open(grid))
    assert g.shape[0] > 2 * 70 and g.shape[1] > 2 * 110
    assert window.dialogs_recorder.errors == []


def test_export_to_unwritable_folder_shows_an_error(qtbot, window, image_path, tmp_path):
    open_and_wait(qtbot, window, image_path)
    window.dialogs = window.dialogs_recorder
    missing = tmp_path / "no such folder" / "x.png"
    assert window.export_view(str(missing)) is None
    (title, msg), = window.dialogs_recorder.errors
    assert "Export failed" in title and str(missing) in msg


def test_corrupt_image_shows_error_and_keeps_state(qtbot, window, image_path, tmp_path, monkeypatch):
    open_and_wait(qtbot, window, image_path)
    shown = []
    monkeypatch.setattr(QMessageBox, "exec", lambda self: shown.append((self.windowTitle(), self.text())) or 0)
    result, overlay, title = window.session.result, _overlay(window).copy(), window.windowTitle()
    images = list(window.session.images)
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not really a JPEG" * 10)
    with qtbot.waitSignal(window.errorShown, timeout=30000):
        window.open_images([str(bad)])
    assert len(shown) == 1
    assert "broken.jpg" in shown[0][1]
    assert window.session.result is result
    np.testing.assert_array_equal(_overlay(window), overlay)
    assert window.windowTitle() == title
    assert window.session.images == images


def test_bad_checkpoint_shows_error_and_keeps_model(qtbot, window, image_path, tmp_path, monkeypatch):
    open_and_wait(qtbot, window, image_path)
    shown = []
    monkeypatch.setattr(QMessageBox, "exec", lambda self: shown.append(self.text()) or 0)
    model, key, result = window.model, window.model_key, window.session.result
    bad = tmp_path / "weights.safetensors"
    bad.write_bytes(b"\x00" * 64)
    with qtbot.waitSignal(window.errorShown, timeout=30000):
        window.open_checkpoint(str(bad))
    assert len(shown) == 1 and "weights.safetensors" in shown[0]
    assert window.model is model and window.model_key == key
    assert window.session.result is result
    assert not window.runner.is_busy()


def test_good_checkpoint_loads_and_reruns(qtbot, window, image_path, tmp_path, tiny_model):
    from vitviz.model import save_checkpoint

    open_and_wait(qtbot, window, image_path)
    torch.manual_seed(1)
    from vitviz.model import create_model
    other = create_model("vit_tiny_patch16_224", img_size=48, patch_size=16, embed_dim=32, depth=2, num_heads=2,
                         num_classes=3)
    path = save_checkpoint(other, tmp_path / "other.safetensors")
    with qtbot.waitSignal(window.resultShown, timeout=30000):
        window.open_checkpoint(str(path))
    r = window.session.result
    assert window.model_key == f"file:{path}"
    assert (r.num_layers, r.num_heads, r.grid) == (2, 2, (3, 3))
    assert _overlay(window).shape == (3, 3)
    assert window.controls.layer_slider.maximum() == 1
    assert window.controls.head_combo.count() == 3 + 2


def test_prediction_click_sets_gradient_target(qtbot, window, image_path, tiny_model):
    r = open_and_wait(qtbot, window, image_path)
    window.set_view("relevance")
    top = r.top_k(5)
    assert r.target == top[0][0]
    second = top[1][0]
    with qtbot.waitSignal(window.resultShown, timeout=30000):
        pos = window.predictions.row_center(1)
        qtbot.mouseClick(window.predictions.table.viewport(), Qt.MouseButton.LeftButton,
                         pos=window.predictions.table.viewport().mapFrom(window.predictions, pos))
    assert window.session.result.target == second
    cap, _ = _reference_capture(tiny_model, image_path, target=second)
    ref = A.relevance(cap.attentions[:, 0], cap.attention_grads[:, 0], grid=cap.grid, num_prefix_tokens=1).numpy()
    np.testing.assert_allclose(_overlay(window), ref, rtol=1e-4, atol=1e-6)
    assert "target" in window.predictions.table.item(1, 0).text()


def test_newest_request_wins(qtbot, window, tmp_path):
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    make_image(a, 50, 50, seed=1)
    make_image(b, 64, 40, seed=2)
    shown = []
    window.resultShown.connect(lambda: shown.append(window.session.result.source))
    window.open_images([str(a)])
    window.open_images([str(b)])
    qtbot.waitUntil(lambda: len(shown) >= 1, timeout=30000)
    qtbot.waitUntil(lambda: not window.runner.is_busy(), timeout=30000)  # a's job, if it ran, is over
    assert shown == [str(b)]
    assert window.session.result.rgb.shape == (64, 40, 3)
    # PageUp/PageDown walk through the opened set
    assert window.session.images == [str(a), str(b)]
    with qtbot.waitSignal(window.resultShown, timeout=30000):
        qtbot.keyClick(window.canvas, Qt.Key.Key_PageDown)
    assert window.session.result.source == str(a)


def test_closing_while_work_runs_exits_cleanly(qtbot, tiny_model, settings, image_path):
    from vitviz.gui.main_window import MainWindow

    w = MainWindow(settings=settings, model=tiny_model)
    qtbot.addWidget(w)
    w.show()
    dropped = []
    w.resultShown.connect(lambda: dropped.append(1))
    w.open_images([str(image_path)])
    w.close()
    assert not w.runner._thread.is_alive()
    QApplication.processEvents()  # deliver anything the worker queued before it stopped
    assert dropped == []


def test_settings_round_trip(qtbot, tiny_model, settings, tmp_path):
    from vitviz.gui.main_window import MainWindow
    from vitviz.model import save_checkpoint

    ckpt = save_checkpoint(tiny_model, tmp_path / "tiny.safetensors")
    w = MainWindow(settings=settings, model=tiny_model, model_key=f"file:{ckpt}")
    qtbot.addWidget(w)
    w.show()
    w.resize(781, 517)  # above the window's minimum width (the plots tab bar shows all five tabs)
    w.controls.cmap_combo.setCurrentText("viridis")
    w.controls.opacity_slider.setValue(35)
    w.controls.interp_combo.setCurrentIndex(1)
    w.set_view("rollout")
    w.docks["plots"].hide()
    w.prefs.remember_folder(str(tmp_path / "x.png"))
    size = (w.width(), w.height())
    w.close()

    w2 = MainWindow(settings=settings, model=tiny_model)
    qtbot.addWidget(w2)
    o = w2.session.options
    assert (o.cmap, o.opacity, o.interpolation, o.view) == ("viridis", 0.35, "bilinear", "rollout")
    assert w2.controls.cmap_combo.currentText() == "viridis"
    assert w2.width() == size[0] == 781  # (heights are clamped to the offscreen screen)
    assert w2.prefs.last_folder() == str(tmp_path)
    assert w2.device == "cpu" and w2.precision == "auto"  # the default, remembered as the choice "auto"
    assert settings.value("model") == f"file:{ckpt}"
    w2.show()
    assert not w2.docks["plots"].isVisible()
    w2.close()
    # a window started without a model loads the remembered checkpoint
    w3 = MainWindow(settings=settings)
    qtbot.addWidget(w3)
    qtbot.waitUntil(lambda: w3.model is not None, timeout=30000)
    assert w3.model_key == f"file:{ckpt}"
    w3.close()


def test_help_dialogs(qtbot, window):
    window.dialogs = window.dialogs_recorder
    window.show_shortcuts()
    window.show_about()
    (t1, shortcuts), (t2, about) = window.dialogs_recorder.infos
    assert "Left / Right" in shortcuts and "Ctrl+E" in shortcuts
    assert "torch" in about and torch.__version__ in about and "Qt" in about and "cpu" in about

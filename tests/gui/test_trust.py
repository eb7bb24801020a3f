"""What the window says it shows: class search, the colour-scale controls, artefact outlines, the mask, and three
stale-state bugs (prediction highlight, hover value after a click, the loading state)."""

import numpy as np
from gui_helpers import make_image, open_and_wait
from PySide6.QtCore import Qt

from vitviz.document import appearance


def test_any_class_can_be_the_target_by_search(qtbot, window, image_path):
    r = open_and_wait(qtbot, window, image_path)
    p = window.predictions.box
    assert len(p._entries) == r.logits.shape[-1]  # every class is listed, not only the top 5
    least = int(r.probabilities.argmin())
    name = r.label(least)
    with qtbot.waitSignal(window.resultShown, timeout=30000):
        qtbot.keyClicks(p.search, name[:4])  # part of the name
        matches = [k for k in p._entries if name[:4].lower() in k.lower()]
        p._on_pick(matches[0] if len(matches) == 1 else f"{name} ({least})")
    assert window.session.result.target == least
    assert name in window.canvas.title.text() or "target" not in window.session.view.reads
    window.set_view("relevance")
    assert name in window.canvas.title.text() and name.split()[0] in window.session.export_name()
    p._on_pick("no such class at all")
    assert "No single class" in p.label.text()


def test_prediction_highlight_follows_the_new_image(qtbot, window, tmp_path):
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    make_image(a, 60, 40, seed=1)
    make_image(b, 50, 70, seed=2)
    open_and_wait(qtbot, window, a)
    t = window.predictions.table
    qtbot.mouseClick(t.viewport(), Qt.MouseButton.LeftButton, pos=t.visualItemRect(t.item(3, 0)).center())
    qtbot.waitUntil(lambda: window.session.result.target == window.predictions._classes[3], timeout=30000)
    r = open_and_wait(qtbot, window, b)
    rows = {i.row() for i in t.selectionModel().selectedRows()}
    assert rows == {window.predictions._classes.index(r.target)}  # the new target's row, not row 3


def test_hover_value_follows_a_click_at_once(qtbot, window, image_path):
    open_and_wait(qtbot, window, image_path)
    window.set_view("query")
    s = window.session
    y0, x0, y1, x1 = s.crop_rect_yx()
    x, y = x0 + 1, y0 + 1
    window._on_hover(x, y)
    before = window.hover_label.text()
    window.edits.canvas_click(x1 - 1, y1 - 1)  # another patch: the query map changes under the still cursor
    assert window.hover_label.text() == s.hover_text(x, y) != before
    assert f"value {float(s.current_map()[0, 0]):.4g}" in window.hover_label.text()


def test_loading_state_names_the_model_being_loaded(qtbot, settings, tmp_path, tiny_model):
    from vitviz.gui.main_window import MainWindow
    from vitviz.model import save_checkpoint

    path = tmp_path / "mine.safetensors"
    save_checkpoint(tiny_model, path)
    w = MainWindow(settings=settings, model_key=f"file:{path}")
    qtbot.addWidget(w)
    # before the model is there: the bar names it (not the bundled model) and the layer does not read "0 / 0"
    assert "mine.safetensors" in w.model_bar.model_combo.currentText()
    assert w.controls.layer_label.text() == "–"
    qtbot.waitUntil(lambda: w.model is not None, timeout=60000)
    assert w.model_bar.model_combo.currentData() == f"file:{path}"


def test_scale_controls_artefact_outlines_and_mask_on_the_canvas(qtbot, window, image_path):
    r = open_and_wait(qtbot, window, image_path)
    s, c = window.session, window.controls.scale_panel
    window.set_view("cls")
    c.mode_combo.setCurrentIndex(c.mode_combo.findData("per_map"))
    c.mode_combo.activated.emit(c.mode_combo.currentIndex())
    assert s.options.scale == "per_map"
    m = s.current_map()
    assert window.canvas.colorbar.levels == (float(m.min()), float(m.max()))
    assert window.canvas.colorbar.label == "attention weight"
    ticks = window.canvas.colorbar.ticks()
    assert len(ticks) >= 3 and all(len(t) <= 7 for _, t in ticks)  # nice ticks, no "0.000807"
    # a fixed range typed by the user; a bad one is refused with a message and the scale kept
    c.fixed_lo.setText("0.5")
    c.fixed_hi.setText("0.1")
    c.fixed_lo.editingFinished.emit()
    assert s.options.scale == "per_map" and "Colour scale not changed" in window.statusBar().currentMessage()
    c.fixed_lo.setText("0")
    c.fixed_lo.editingFinished.emit()
    assert s.options.scale == "fixed" and window.canvas.colorbar.levels == (0.0, 0.1)
    assert window.canvas.colorbar.scale.clipped_high == bool(m.max() > 0.1)
    # signed view: diverging and centred
    window.set_view("token_sim")
    c.mode_combo.activated.emit(c.mode_combo.findData("robust"))
    lo, hi = window.canvas.colorbar.levels
    assert lo == -hi and window.canvas._cmap_name == s.levels().cmap != s.options.cmap
    # the mask
    window.set_view("rollout")
    c.mask_check.setChecked(True)
    assert s.options.mask_keep == 0.6 and window.canvas.mask_outline.isVisible()
    c.mask_style.activated.emit(c.mask_style.findData("dim"))
    assert window.canvas.mask_item.isVisible() and not window.canvas.mask_outline.isVisible()
    veil = np.asarray(window.canvas.mask_item.image)
    assert ((veil[..., 3] == 0) == appearance.mask(s.current_map(), s.view, s.options, s.cache)).all()
    # artefact tokens: planted, outlined and listed
    p, gw = r.num_prefix_tokens, r.grid[1]
    r.capture.tokens[r.num_layers // 2:, p + 2 * gw + 1] *= 50.0
    s.set_result(r)
    window.refresh_view()
    assert window.canvas.artefact_cells == [(2, 1)] and window.canvas.artefact_outline.isVisible()
    assert "(2, 1)" in window.status.artefact_label.text()
    c.ignore_check.setChecked(True)
    assert s.options.ignore_artefacts and "artefact tokens ignored" in window.canvas.title.text()

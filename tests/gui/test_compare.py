"""The Compare window: grid layout and labels, linked hover and patch selection (real mouse clicks), shared and
per-panel colour bars, following the main window, and the exported figure."""

import re

import numpy as np
import pytest
from gui_helpers import make_image, open_and_wait
from PySide6.QtCore import Qt

from vitviz.document import comparison as cmp
from vitviz.render.figures import layout as figure_layout


@pytest.fixture
def three(tmp_path):
    paths = []
    for i in range(3):
        make_image(tmp_path / f"im{i}.png", seed=i)
        paths.append(str(tmp_path / f"im{i}.png"))
    return paths


def _open_compare(qtbot, window, spec=None):
    window.dialogs = window.dialogs_recorder  # an error is recorded (and asserted on), never a modal dialog
    cw = window.show_compare(spec)
    qtbot.addWidget(cw)
    qtbot.waitUntil(lambda: cw.comparison is not None and len(cw.panels) == len(cw.comparison.cells)
                    and (spec is None or cw.comparison.spec == spec), timeout=30000)
    return cw


def test_grid_of_images_by_views_with_labels(qtbot, window, three):
    for p in reversed(three):
        open_and_wait(qtbot, window, p)  # im0 is shown
    spec = cmp.CompareSpec(layout="views", views=("cls", "rollout", "relevance"), images=tuple(three[:2]))
    cw = _open_compare(qtbot, window, spec)
    c = cw.comparison
    assert (c.nrows, c.ncols) == (2, 3) and len(cw.panels) == 6
    assert [w.text() for w in cw.col_label_widgets] == ["[CLS] attention", "Rollout", "Relevance"]
    assert [w.toolTip().split(" (")[0] for w in cw.row_label_widgets] == ["im0.png", "im1.png"]
    grid = cw.grid
    for panel, cell in zip(cw.panels, c.cells):  # each panel at its row and column (below / right of the labels)
        idx = grid.indexOf(panel)
        row, col, _, _ = grid.getItemPosition(idx)
        assert (row, col) == (cell.row + 1, cell.col + 1)
        assert panel.canvas.overlay_values is not None
    # the other image was analysed by the worker, the shown one is the window's own result
    assert c.cell(0, 0).session.result is window.session.result
    assert c.cell(1, 0).session.result.source == three[1] and c.cell(1, 2).session.result is c.cell(1, 0).session.result
    # one colour bar per column (each view's panels share a scale)
    assert all(b.isVisible() for b in cw.column_bars) and not cw.all_bar.isVisible()
    assert not any(p.scale_bar.isVisible() for p in cw.panels)
    levels = [b.levels for b in cw.column_bars]
    assert levels[0] == (c.cell(1, 0).scale.lo, c.cell(1, 0).scale.hi)
    # per panel: a bar under each panel
    cw.bar.shared_check.setChecked(False)
    qtbot.waitUntil(lambda: not cw.comparison.spec.shared_scale, timeout=30000)
    assert all(p.scale_bar.isVisible() for p in cw.panels) and not any(b.isVisible() for b in cw.column_bars)


def test_linked_hover_and_patch_selection(qtbot, window, three):
    open_and_wait(qtbot, window, three[0])
    spec = cmp.CompareSpec(layout="layers", views=("query",), layers=(0, 1, 2))
    cw = _open_compare(qtbot, window, spec)
    cw.resize(1200, 600)
    qtbot.wait(50)
    s = window.session
    gw = s.result.grid[1]
    # hover over patch (2, 1) of the middle panel: every panel outlines that patch and shows its value there
    x, y, w, h = s.patch_rect(2 * gw + 1)
    cw.panels[1].canvas.hovered.emit(x + w / 2, y + h / 2)
    for p, cell in zip(cw.panels, cw.comparison.cells):
        assert p.hover_marker.isVisible()
        r = p.hover_marker.rect()
        assert (r.x(), r.y(), r.width(), r.height()) == pytest.approx((x, y, w, h))
        assert f"{float(cell.map[2, 1]):.4g}" in p.value.text()
    assert "patch (row 2, col 1)" in cw.statusBar().currentMessage()
    cw.panels[1].canvas.hovered.emit(float("nan"), float("nan"))
    assert not any(p.hover_marker.isVisible() for p in cw.panels)
    # a real click on patch (1, 3) of the last panel selects it everywhere, the main window included
    x, y, w, h = s.patch_rect(1 * gw + 3)
    canvas = cw.panels[2].canvas
    before = [c.map.copy() for c in cw.comparison.cells]
    with qtbot.waitSignal(cw.drawn, timeout=30000):
        qtbot.mouseClick(canvas.viewport(), Qt.MouseButton.LeftButton, pos=canvas.image_to_widget(x + w / 2, y + h / 2))
    assert window.session.options.query == 1 * gw + 3
    assert {c.session.options.query for c in cw.comparison.cells} == {1 * gw + 3}
    for p in cw.panels:
        r = p.canvas.marker.rect()
        assert p.canvas.marker.isVisible() and (r.x(), r.y()) == pytest.approx((x, y))
    after = [c.map for c in cw.comparison.cells]
    assert all(not np.array_equal(a, b) for a, b in zip(before, after))  # the query view's maps follow


def test_follows_the_main_window(qtbot, window, three):
    open_and_wait(qtbot, window, three[0])
    cw = _open_compare(qtbot, window, cmp.CompareSpec(layout="layers", layers=(0, 2)))
    assert cw.comparison.cells[0].view.key == window.session.options.view == "cls"
    with qtbot.waitSignal(cw.drawn, timeout=30000):
        window.set_view("token_norm")
    assert [c.view.key for c in cw.comparison.cells] == ["token_norm", "token_norm"]
    with qtbot.waitSignal(cw.drawn, timeout=30000):
        window.controls.cmap_combo.setCurrentText("viridis")
    assert {c.scale.cmap for c in cw.comparison.cells} == {"viridis"}
    # a view that does not change with the layer: said in the window, no crash
    window.set_view("pos_sim")
    assert "does not change with the layer" in cw.message.text() and cw.message.isVisible()


def test_classes_layout_and_exported_figure(qtbot, window, three, tmp_path, monkeypatch):
    open_and_wait(qtbot, window, three[0])
    r = window.session.result
    classes = tuple(i for i, _, _ in r.top_k(4))
    spec = cmp.CompareSpec(layout="classes", views=("relevance",), classes=classes)
    cw = _open_compare(qtbot, window, spec)
    c = cw.comparison
    assert len(cw.panels) == 4 and (c.nrows, c.ncols) == (2, 2)
    assert [p.label.text().split(" (")[0] for p in cw.panels] == [r.label(k) for k in classes]
    assert cw.all_bar.isVisible()  # one view: one scale, one bar for the whole grid
    out = cw.export(str(tmp_path / "grid.svg"))
    assert out is not None and window.dialogs_recorder.errors == []
    text = out.read_text(encoding="utf-8")
    assert len(re.findall(r"<image\b", text)) == 4
    # over the figure limit: refused from the images' sizes before a panel is drawn at an image's pixels
    monkeypatch.setattr(figure_layout, "MAX_FIGURE_PIXELS", 4 * 110 * 70 - 1)  # the four panels, at native size
    monkeypatch.setattr(cmp, "comparison_figure", lambda comp: pytest.fail("the figure was built"))
    assert cw.export(str(tmp_path / "big.png"), scale="native") is None
    ((title, msg),) = window.dialogs_recorder.errors
    assert title == "Export refused" and msg.startswith(f"{three[0]}: the figure would be at least 220 x 140 = ")
    assert not (tmp_path / "big.png").exists()
    for k in classes:
        assert r.label(k) in text
    from vitviz.document import state as st

    back = st.read_state(out)
    assert back.compare == spec and back.options == window.session.options


def test_layout_controls_switch_and_keep_a_valid_spec(qtbot, window, three):
    open_and_wait(qtbot, window, three[0])
    cw = _open_compare(qtbot, window)
    assert cw.spec.layout == "views" and cw.bar.views_button.isVisible() and not cw.bar.view_combo.isVisible()
    cw.bar.layout_combo.setCurrentIndex(cmp.LAYOUTS.index("layers"))
    qtbot.waitUntil(lambda: cw.comparison.spec.layout == "layers", timeout=30000)
    assert cw.bar.view_combo.isVisible() and cw.bar.layers_button.isVisible() and not cw.bar.images_button.isVisible()
    assert [p.label.text() for p in cw.panels] == ["layer 0", "layer 1", "layer 2"]
    # the layer menu toggles one layer off
    menu = cw.bar.layers_button.menu()
    menu.aboutToShow.emit()
    menu.actions()[1].setChecked(False)
    qtbot.waitUntil(lambda: cw.comparison.spec.layers == (0, 2), timeout=30000)
    assert [p.label.text() for p in cw.panels] == ["layer 0", "layer 2"]
    # a smaller grid after a larger one fills the window (no stretch left over from the larger grid)
    cw.resize(1000, 700)
    cw.set_spec(cmp.CompareSpec(layout="views", views=("cls", "rollout", "token_norm"), images=tuple(three)))
    qtbot.waitUntil(lambda: len(cw.panels) == 9, timeout=30000)
    cw.set_spec(cmp.CompareSpec(layout="classes", views=("relevance",)))
    qtbot.waitUntil(lambda: len(cw.panels) == 4 and cw.comparison.spec.layout == "classes", timeout=30000)
    qtbot.wait(50)
    view = cw.scroll.viewport()
    right = max(p.geometry().right() for p in cw.panels)
    bottom = max(p.geometry().bottom() for p in cw.panels)
    assert right > 0.9 * view.width() and bottom > 0.7 * view.height(), (right, bottom, view.size())


def test_an_unreadable_image_is_named_and_not_retried(qtbot, window, three, tmp_path):
    open_and_wait(qtbot, window, three[0])
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not a png at all")
    spec = cmp.CompareSpec(layout="views", views=("cls",), images=(three[0], str(bad)))
    window.dialogs = window.dialogs_recorder
    cw = window.show_compare(spec)
    qtbot.addWidget(cw)
    qtbot.waitUntil(lambda: "broken.png" in cw.message.text(), timeout=30000)
    assert "not an image file" in cw.message.text() and cw.message.isVisible()
    asked = []
    cw._request = lambda missing: asked.append(missing)
    window.set_layer(1)  # the main window redraws: the grid does not ask for the broken image again
    window.set_layer(2)
    assert asked == [] and "broken.png" in cw.message.text()
    assert window.dialogs_recorder.errors == []
    cw.set_spec(cmp.CompareSpec(layout="views", views=("cls",), images=(three[0],)))
    qtbot.waitUntil(lambda: cw.comparison is not None and len(cw.panels) == 1, timeout=30000)
    assert not cw.message.isVisible()

"""What a researcher sees first (issue 37): excluded artefact tokens drawn in the neutral grey (canvas and figures),
the default query patch, the prefix-token share of a head tile, the precision in the tables, prompts after a
precision change, and the layout at 1280x800."""

import numpy as np
from gui_helpers import open_and_wait

from vitviz.document import appearance
from vitviz.document.panel import panel_of, render_view
from vitviz.render.colormaps import NEUTRAL_RGB


def _plant_artefact(session, result, row, col):
    """One patch token made high-norm in the later layers (as ViT-Ti's corner tokens are) and the highest value of
    every map that reads the tokens' attention (the key column of that patch weighs 50x)."""
    p, gw = result.num_prefix_tokens, result.grid[1]
    t = p + row * gw + col
    result.capture.tokens[result.num_layers // 2:, t] *= 50.0
    session.set_result(result)


def _pixel(widget, x, y):
    img = widget.grab().toImage()
    c = img.pixelColor(x, y)
    return c.red(), c.green(), c.blue()


def test_excluded_artefact_tokens_are_neutral_on_the_canvas_and_in_the_figure(qtbot, window, image_path):
    r = open_and_wait(qtbot, window, image_path)
    s = window.session
    _plant_artefact(s, r, 2, 1)
    window.set_view("token_norm")  # the token norm: the planted token is the highest value
    s.set_options(opacity=1.0, interpolation="nearest")
    window.refresh_view()
    assert appearance.artefact_patches(s.artefact_grid()) == [(2, 1)] and s.options.scale_excludes_artefacts
    p = panel_of(s, on_image=True)
    assert p.neutral == ((2, 1),) and "grey" in p.caption
    # the canvas: the overlay is transparent there and the neutral item grey
    assert np.isnan(p.grid_values[2, 1]) and window.canvas.neutral_cells == [(2, 1)]
    x0, y0, w, h = s.patch_rect(2 * r.grid[1] + 1)
    pt = window.canvas.image_to_widget(x0 + w / 2, y0 + h / 2)
    assert _pixel(window.canvas, pt.x(), pt.y()) == NEUTRAL_RGB
    # a kept patch is in a colour of the scale, not grey
    x0, y0, w, h = s.patch_rect(0)
    pt = window.canvas.image_to_widget(x0 + w / 2, y0 + h / 2)
    assert _pixel(window.canvas, pt.x(), pt.y()) != NEUTRAL_RGB
    # the exported figure (no caption, no bar: the overlay at the image's pixels) draws it grey too
    s.set_options(caption=False, colorbar=False)
    px = render_view(s)
    x0, y0, w, h = s.patch_rect(2 * r.grid[1] + 1)
    cell = px[int(y0 + 1):int(y0 + h - 1), int(x0 + 1):int(x0 + w - 1)]
    assert cell.size and (cell == np.asarray(NEUTRAL_RGB, dtype=np.uint8)).all()
    # with the scale including them, the token is drawn in the scale's colours again
    s.set_options(scale_excludes_artefacts=False)
    window.refresh_view()
    assert panel_of(s).neutral == () and not window.canvas.neutral_item.isVisible()


def test_the_default_query_patch_is_the_centre_of_the_grid_not_an_artefact(qtbot, window, image_path):
    from vitviz.document.appearance import default_query

    r = open_and_wait(qtbot, window, image_path)
    gh, gw = r.grid
    assert window.session.options.query == (gh // 2) * gw + gw // 2 != 0
    # the centre flagged as an artefact token: its nearest kept neighbour
    art = np.zeros(r.grid, dtype=bool)
    art[gh // 2, gw // 2] = True
    q = default_query(r, art)
    assert not art.reshape(-1)[q] and abs(q // gw - gh // 2) + abs(q % gw - gw // 2) == 1
    # a patch the user picked is kept for the next image
    window.set_query(3)
    open_and_wait(qtbot, window, image_path)
    assert window.session.options.query == 3


def test_a_head_tile_says_its_prefix_share_when_most_attention_goes_to_cls(qtbot, window, image_path):
    from vitviz.document.panel import heads_figure

    r = open_and_wait(qtbot, window, image_path)
    s = window.session
    att = r.attentions  # [L, H, N, N], the result's own store
    att[0, 1, 0] = 0.0
    att[0, 1, 0, 0] = 0.97  # head 1 of layer 0: 97 % of the [CLS] row to [CLS] itself
    att[0, 1, 0, r.num_prefix_tokens:] = 0.03 / r.num_patches
    s.set_result(r)
    window.set_view("cls")
    s.set_options(layer=0)
    window.heads.refresh(s, force=True)
    notes = window.heads.notes
    assert notes[1] == "97% [CLS]"
    # the others, ordinary softmax rows of a random model, spread over the patches: no note
    shares = 1 - att[0, :, 0, r.num_prefix_tokens:].float().sum(-1)
    assert all((n == "") == (float(v) < 0.5) for n, v in zip(notes, shares))
    assert window.heads.mosaic.label_texts()[1] == "h1 · 97% [CLS]"  # drawn on the tile
    assert heads_figure(s).panels[1].label == "head 1 · 97% to [CLS]"
    window.heads.grid_toggle.setChecked(True)  # every layer x head: the short note on layer 0 head 1
    assert window.heads.notes[1] == "97% [CLS]"


def test_the_figures_and_the_faithfulness_table_say_their_precision(qtbot, window, image_path):
    import pytest
    from PySide6.QtCore import Qt

    from vitviz.devices import available_precisions
    from vitviz.document.panel import heads_figure, view_figure

    open_and_wait(qtbot, window, image_path)
    first = window.controller.pipeline.precision  # "auto": bf16 where the CPU multiplies it natively, else fp32
    s = window.session
    assert view_figure(s).caption.endswith(f"computed in {first}") and f"computed in {first}" in heads_figure(s).caption
    second = "fp32" if first == "bf16" else "bf16"
    if second not in available_precisions("cpu"):
        pytest.skip("the CPU offers no bf16 here")
    with qtbot.waitSignal(window.resultShown, timeout=60000):
        window.set_precision(second)
    assert view_figure(window.session).caption.endswith(f"computed in {second}")
    if second == "fp32":
        with qtbot.waitSignal(window.resultShown, timeout=60000):
            window.set_precision("bf16")
    tab = window.plots.faithfulness
    window.plots.show_page(tab)
    tab.steps_spin.setValue(4)
    tab.seeds = 2
    tab.precision_combo.setCurrentIndex(tab.precision_combo.findData("window"))  # (default: fp32, as evaluate)
    with qtbot.waitSignal(window.controller.faithfulness.ready, timeout=120000):
        qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    text = tab.status.text()
    assert "computed in bf16" in text and "vitviz evaluate runs fp32" in text


def test_the_layout_at_1280x800_gives_the_canvas_half_the_width(qtbot, tiny_model, settings, image_path):
    from gui_helpers import shown_window
    from PySide6.QtCore import QPoint

    w = shown_window(qtbot, settings, tiny_model, size=(1280, 800))
    open_and_wait(qtbot, w, image_path)
    qtbot.wait(50)
    assert w.width() == 1280
    assert w.canvas.width() >= 0.5 * w.width(), (w.canvas.width(), {k: d.width() for k, d in w.docks.items()})
    # every plot tab's name whole (no "Distan…"): the tab is as wide as its text needs
    bar = w.plots.tabBar()
    for i in range(w.plots.count()):
        need = bar.fontMetrics().horizontalAdvance(w.plots.tabText(i))
        assert bar.tabRect(i).width() >= need, w.plots.tabText(i)
    # the status bar keeps the model's layers, heads and precision; a passing message hides neither part
    w.statusBar().showMessage("Exported somewhere.png", 5000)
    qtbot.wait(20)
    m = w.status.model_label
    assert m.isVisible() and " L" in m.text() and " H" in m.text() and ("fp32" in m.text() or "bf16" in m.text())
    assert m.width() >= m.sizeHint().width()  # not clipped
    assert w.status.artefact_label.isVisible() and w.status.artefact_text
    assert w.status.artefact_label.mapTo(w, QPoint(0, 0)).x() + w.status.artefact_label.width() <= w.width()
    # "no artefact tokens" is no warning: not in the outline's orange
    w.status.set_artefacts("no artefact tokens")
    assert "255, 170, 80" not in w.status.artefact_label.styleSheet()
    w.close()


def test_the_app_first_opens_on_rollout_and_then_on_the_remembered_view(qtbot, settings):
    from gui_helpers import shown_window

    from vitviz.gui.settings import FIRST_VIEW

    w = shown_window(qtbot, settings, None, model_key="demo")  # the app: it opens its model from a reference
    assert FIRST_VIEW == "rollout" and w.session.options.view == "rollout"
    w.set_view("relevance")
    w.close()  # remembers the view
    again = shown_window(qtbot, settings, None, model_key="demo")
    assert again.session.options.view == "relevance"
    again.close()


def test_the_compare_window_closes_with_escape_and_ctrl_w(qtbot, window, image_path):
    from PySide6.QtCore import Qt

    open_and_wait(qtbot, window, image_path)
    for key, mod in ((Qt.Key.Key_Escape, Qt.KeyboardModifier.NoModifier),
                     (Qt.Key.Key_W, Qt.KeyboardModifier.ControlModifier)):
        cw = window.show_compare()
        qtbot.waitExposed(cw)
        cw.activateWindow()
        assert cw.isVisible()
        qtbot.keyClick(cw, key, mod)
        qtbot.waitUntil(lambda cw=cw: not cw.isVisible(), timeout=5000)


def test_pca_colours_only_draws_the_components_alone_on_black(qtbot, window, image_path):
    r = open_and_wait(qtbot, window, image_path)
    s = window.session
    window.set_view("feature_pca")
    blended = panel_of(s, on_image=True)
    assert blended.photo_shown and blended.opacity == s.options.opacity
    assert window.controls.pca_colours_only.isEnabled()
    window.controls.pca_colours_only.setChecked(True)  # the option row's check box
    assert s.options.pca_colours_only
    p = panel_of(s, on_image=True)
    assert not p.photo_shown and p.opacity == 1.0 and not window.canvas.image_item.isVisible()
    s.set_options(caption=False, colorbar=False)
    px = render_view(s)  # the figure: black outside the crop, the components' colours inside
    x0, y0, w, h = p.crop
    assert (px[:, : int(x0)] == 0).all() and (px[:, int(np.ceil(x0 + w)):] == 0).all()
    rgb = s.rgb_map()
    cx, cy = x0 + w / (2 * r.grid[1]), y0 + h / (2 * r.grid[0])  # patch (0, 0)'s centre
    np.testing.assert_allclose(px[int(cy), int(cx)], np.round(rgb[0, 0, :3] * rgb[0, 0, 3] * 255), atol=1)
    window.set_view("rollout")  # the option is feature PCA's alone
    assert not window.controls.pca_colours_only.isEnabled() and window.canvas.image_item.isVisible()


def test_the_all_layers_heads_grid_takes_the_whole_window(qtbot, tiny_model, settings, image_path):
    from gui_helpers import shown_window

    w = shown_window(qtbot, settings, tiny_model, size=(1280, 800))
    r = open_and_wait(qtbot, w, image_path)
    h = w.heads
    h.full_toggle.setChecked(True)
    dock = w.docks["heads"]
    qtbot.waitUntil(lambda: dock.isFloating() and dock.width() >= 0.9 * w.width(), timeout=5000)
    assert h.all_layers and h.mosaic.rows == r.num_layers and h.mosaic.cols == r.num_heads
    assert dock.height() >= 0.9 * w.height()
    h.full_toggle.setChecked(False)
    assert not dock.isFloating()
    w.close()


def test_head_colours_are_the_same_in_the_window_and_in_the_stats_figure(qtbot, window, image_path):
    from vitviz.batch.stats_plot import head_colours

    r = open_and_wait(qtbot, window, image_path)
    window.plots.setCurrentIndex(0)
    window.plots.refresh(window.session)
    brushes = window.plots.distance.scatter.data["brush"]
    data = window.plots.distance.scatter.data["data"]
    seen = {h: b.color().getRgb()[:3] for b, (_layer, h) in zip(brushes, data)}
    figure = head_colours(r.num_heads)
    assert len(seen) == r.num_heads and len(set(seen.values())) == r.num_heads
    for h, rgb in seen.items():
        assert rgb == tuple(round(c * 255) for c in figure[h]), h


def test_a_diffuse_method_on_a_small_model_points_to_the_faithfulness_table(qtbot, window, image_path):
    from vitviz.document.panel import heads_figure, view_figure

    open_and_wait(qtbot, window, image_path)  # the tiny test ViT: a width far below ViT-S's 384
    s = window.session
    for key in ("legrad", "gradcam"):
        window.set_view(key)
        assert "Faithfulness tab" in view_figure(s).caption and "often diffuse" in view_figure(s).caption, key
    assert "Faithfulness tab" not in heads_figure(s).caption
    window.set_view("rollout")
    assert "Faithfulness tab" not in view_figure(s).caption


def test_heads_grid_tiles_draw_excluded_artefact_tokens_grey_as_the_canvas_does(qtbot, window, image_path):
    from vitviz.document.panel import heads_figure

    r = open_and_wait(qtbot, window, image_path)
    s = window.session
    _plant_artefact(s, r, 2, 1)
    window.set_view("cls")
    window.refresh_view()
    gh, gw = r.grid
    for all_layers in (False, True):
        window.heads.grid_toggle.setChecked(all_layers)
        window.heads.refresh(s, force=True)
        m = window.heads.mosaic
        th, tw = m.tile
        f = th // gh
        img = np.asarray(m.item.image)  # [H, W, 4]: the tiles laid out with their gaps
        for t in range(m.rows * m.cols if not all_layers else 3):
            ty, tx = divmod(t, m.cols)
            y, x = ty * (th + m.gap), tx * (tw + m.gap)
            assert tuple(img[y + 2 * f, x + 1 * f]) == (*NEUTRAL_RGB, 255)  # the flagged patch: grey on every tile
            assert tuple(img[y, x][:3]) != NEUTRAL_RGB  # a kept one (0, 0): a colour of the scale
        assert "grey" in window.heads.scale_bar.toolTip()
    fig = heads_figure(s)
    assert all(p.neutral == ((2, 1),) for p in fig.panels) and "(grey)" in fig.caption
    # the scale including them again: no grey
    s.set_options(scale_excludes_artefacts=False)
    window.heads.refresh(s, force=True)
    img = np.asarray(window.heads.mosaic.item.image)
    f = window.heads.mosaic.tile[0] // gh
    assert tuple(img[2 * f, 1 * f][:3]) != NEUTRAL_RGB and heads_figure(s).panels[0].neutral == ()


def test_the_distance_and_entropy_plots_say_their_precision(qtbot, window, image_path):
    import pytest

    from vitviz.devices import available_precisions

    open_and_wait(qtbot, window, image_path)
    first = window.controller.pipeline.precision
    plots = window.plots
    assert plots.distance.title.text().endswith(f"· computed in {first}")
    assert plots.ent_title.text().endswith(f"· computed in {first}")
    second = "fp32" if first == "bf16" else "bf16"
    if second not in available_precisions("cpu"):
        pytest.skip("the CPU offers no bf16 here")
    with qtbot.waitSignal(window.resultShown, timeout=60000):
        window.set_precision(second)
    assert plots.distance.title.text().endswith(f"· computed in {second}")
    assert plots.ent_title.text().endswith(f"· computed in {second}")


def test_undo_and_redo_step_through_view_layer_option_and_target_changes(qtbot, window, image_path):
    from PySide6.QtGui import QKeySequence

    r = open_and_wait(qtbot, window, image_path)
    s = window.session
    assert window.acts.undo.shortcut() == QKeySequence("Ctrl+Z")
    assert QKeySequence("Ctrl+Shift+Z") in window.acts.redo.shortcuts()
    first = s.options
    window.set_view("cls")
    start = s.options.layer
    end = 0 if start != 0 else 1
    for layer in (*range(r.num_layers), end):  # a slider dragged through the layers: one step
        window.set_layer(layer)
    window._set(cmap="viridis")
    assert (s.options.view, s.options.layer, s.options.cmap) == ("cls", end, "viridis")
    window.acts.undo.trigger()  # the colour map
    assert (s.options.view, s.options.layer, s.options.cmap) == ("cls", end, first.cmap)
    window.acts.undo.trigger()  # the whole drag: back to the layer the view started at
    assert s.options.view == "cls" and s.options.layer == start
    window.acts.undo.trigger()  # the view
    assert s.options == first
    assert not window.undo() and "Nothing to undo" in window.statusBar().currentMessage()
    window.acts.redo.trigger()
    assert s.options.view == "cls"
    window.redo()
    window.redo()
    assert (s.options.view, s.options.layer, s.options.cmap) == ("cls", end, "viridis")
    # a new change after an undo drops the redo steps
    window.undo()
    window.set_query(0)
    assert not window.redo()
    # a choice is a step of its own: two views chosen, two steps
    window.set_view("relevance")
    window.set_view("rollout")
    window.undo()
    assert s.options.view == "relevance"
    # a target: undone by running the image again with the earlier one
    before = s.result.target
    other = (before + 1) % len(s.result.labels)
    third = (before + 2) % len(s.result.labels)
    for t in (other, third):
        with qtbot.waitSignal(window.resultShown, timeout=60000):
            window.set_target(t)
    assert s.result.target == third
    for t in (other, before):  # each target a step
        with qtbot.waitSignal(window.resultShown, timeout=60000):
            window.acts.undo.trigger()
        assert s.result.target == t


def test_opening_a_photo_with_the_demo_model_does_not_widen_the_controls_dock(qtbot, settings, image_path):
    """The first-run offer (a photo on the bundled shapes model) once had one-line buttons 445 px wide: the left docks
    grew from 314 to 449 px at 1280x800 and the canvas lost that width for good. Its buttons are two short lines now;
    a file name of 150 characters does not widen anything either."""
    from gui_helpers import make_image, shown_window

    from vitviz.demo import load_demo_model

    w = shown_window(qtbot, settings, load_demo_model(), model_key="demo", size=(1280, 800))
    qtbot.wait(50)
    before = (w.docks["controls"].width(), w.centralWidget().width())
    photo = image_path.parent / ("a_very_long_photo_file_name_from_a_camera_roll_" * 3 + ".png")
    make_image(photo)
    open_and_wait(qtbot, w, photo)
    assert w.predictions.offer_shown()
    qtbot.wait(50)
    assert (w.docks["controls"].width(), w.centralWidget().width()) == before
    assert w.predictions.offer_box.minimumSizeHint().width() <= w.controls.minimumSizeHint().width()
    w.close()

"""The window fits the screen: window and dock geometry at 1280x800, thumbnails of at least 48 px,
one colour scale for the head thumbnails, the plots' titles, legends, axes and colour bars (offscreen, tiny model)."""

import numpy as np
import pytest
from gui_helpers import open_and_wait
from PySide6.QtCore import QByteArray, QPoint, QRect, QSize

from vitviz.gui import geometry
from vitviz.gui.mosaic import MIN_TILE
from vitviz.render import colormaps

SMALL = QRect(0, 0, 1280, 800)


def _settle(qtbot, w, ms=60):
    qtbot.wait(ms)
    w.layout().activate()
    qtbot.wait(ms)


def _inside(inner: QRect, outer: QRect) -> bool:
    return outer.contains(inner.topLeft()) and outer.contains(inner.bottomRight())


def _dock_rects(w) -> dict[str, QRect]:
    return {name: QRect(d.mapTo(w, QPoint(0, 0)), d.size()) for name, d in w.docks.items() if d.isVisible()}


# ---------------------------------------------------------------------------------------------- geometry rules
def test_first_open_is_90_percent_of_the_available_area_capped():
    assert geometry.initial_size(QRect(0, 0, 1280, 800)) == QSize(1152, 720)
    assert geometry.initial_size(QRect(0, 0, 2560, 1400)) == QSize(1600, 1000)
    assert geometry.initial_size(QRect(0, 30, 1366, 738)) == QSize(1229, 664)


def test_clamp_rect_moves_and_shrinks_into_the_available_area():
    avail = QRect(0, 25, 1280, 775)
    assert geometry.clamp_rect(QRect(100, 100, 800, 600), avail) == QRect(100, 100, 800, 600)  # already inside
    assert geometry.clamp_rect(QRect(900, 500, 800, 600), avail) == QRect(480, 200, 800, 600)  # moved back
    assert geometry.clamp_rect(QRect(-50, 0, 1600, 1000), avail) == QRect(0, 25, 1280, 775)  # shrunk
    assert geometry.clamp_rect(QRect(3000, 2000, 400, 300), avail) == QRect(880, 500, 400, 300)  # a gone monitor


def test_dock_columns_take_at_most_half_the_width():
    assert geometry.dock_widths(1600, 300) == (300, 400)  # today's layout on a wide window
    for width in (1152, 1280, 1440):
        left, right = geometry.dock_widths(width, 314)
        assert left + right + 12 <= width // 2 and right >= geometry.RIGHT_MIN


def test_window_opens_inside_a_1280x800_screen_and_a_remembered_geometry_is_clamped(window):
    geometry.place_window(window, window.docks, None, None, available=SMALL)  # no remembered geometry: a first open
    assert window.size() == QSize(1152, 720)
    assert _inside(window.frameGeometry(), SMALL)
    window.setGeometry(QRect(600, 400, 1600, 1000))  # last time, on a bigger monitor
    saved: QByteArray = window.saveGeometry()
    state = window.saveState()
    geometry.place_window(window, window.docks, saved, state, available=SMALL)
    assert _inside(window.frameGeometry(), SMALL), window.frameGeometry()


def test_at_1280x800_every_dock_and_the_status_bar_are_on_screen_and_the_canvas_gets_half(
        qtbot, window, image_path):
    open_and_wait(qtbot, window, image_path)
    window.heads.grid_toggle.setChecked(True)  # the widest heads panel
    geometry.fit_to(window, window.docks, SMALL)
    _settle(qtbot, window)
    # no minimum size pushes the window (frame included) past the screen
    assert window.frameGeometry() == SMALL, (window.frameGeometry(), window.geometry())
    area = window.rect()
    docks = _dock_rects(window)
    assert set(docks) == {"controls", "predictions", "heads", "plots"}
    for name, r in docks.items():
        assert _inside(r, area), (name, r, area)
    bar = window.statusBar()
    assert bar.isVisible() and _inside(QRect(bar.mapTo(window, QPoint(0, 0)), bar.size()), area)
    central = window.centralWidget()
    assert central.width() >= window.width() / 2, (central.width(), window.width())
    assert window.canvas.width() >= 0.4 * window.width()  # the map itself (its colour bar is 96 px of the centre)
    # nothing inside the narrow docks is wider than its view (the distance plot with its legend, the tiles' area)
    plots = window.plots
    plots.setCurrentIndex(0)
    _settle(qtbot, window)
    assert plots.distance.widget.ci.minimumWidth() <= plots.distance.widget.width()
    assert window.heads.scroll.width() <= window.docks["heads"].width()
    # the same on the first-open size of that screen (90 %)
    window.resize(geometry.initial_size(SMALL))
    geometry.fit_docks(window, window.docks)
    _settle(qtbot, window)
    assert window.size() == QSize(1152, 720), window.size()
    for name, r in _dock_rects(window).items():
        assert _inside(r, window.rect()), (name, r)
    assert window.centralWidget().width() >= window.width() / 2


# ---------------------------------------------------------------------------------------------- heads
def test_all_layers_grid_tiles_are_at_least_48_px_and_the_current_layer_is_marked(qtbot, window, image_path):
    r = open_and_wait(qtbot, window, image_path)
    window.set_layer(1)
    window.heads.grid_toggle.setChecked(True)
    geometry.fit_to(window, window.docks, SMALL)
    _settle(qtbot, window)
    m = window.heads.mosaic
    assert (m.rows, m.cols) == (r.num_layers, r.num_heads)
    tw, th = m.tile_screen_size()
    assert tw >= MIN_TILE - 0.5 and th >= MIN_TILE - 0.5, (tw, th)
    assert m.row_marker.isVisible()
    marked, row1 = m.row_marker.rect(), m.tile_rect(1, 0)
    assert marked.top() < row1.center().y() < marked.bottom()
    assert marked.contains(m.tile_rect(1, r.num_heads - 1).center())
    assert not marked.contains(m.tile_rect(0, 0).center())
    # a panel too small for the grid scrolls instead of shrinking the tiles
    window.heads.scroll.resize(150, 120)
    _settle(qtbot, window)
    tw, th = m.tile_screen_size()
    assert min(tw, th) >= MIN_TILE - 0.5
    # "Fit" trades the 48 px for the whole grid in view
    window.heads.fit_toggle.setChecked(True)
    _settle(qtbot, window)
    assert m.minimumWidth() == 0 and max(m.tile_screen_size()) < MIN_TILE


def test_head_thumbnails_share_one_colour_scale_shown_by_a_colour_bar(qtbot, window, image_path, monkeypatch):
    r = open_and_wait(qtbot, window, image_path)
    gh, gw = r.grid
    H = r.num_heads
    rng = np.random.default_rng(0)
    maps = (rng.random((H, gh, gw)) * 0.1 * (np.arange(H)[:, None, None] + 1)).astype(np.float32)
    maps[:, 0, 0] = 0.15  # the same value in every head, whose ranges all differ
    monkeypatch.setattr(window.session, "head_maps", lambda layer=None: maps)
    panel = window.heads
    panel.refresh(window.session, force=True)
    img = np.asarray(panel.mosaic.item.image)
    m = panel.mosaic
    corners = []
    for h in range(H):
        t = m.tile_rect(*divmod(h, m.cols))
        corners.append(tuple(img[int(t.top()), int(t.left())]))
    assert len(set(corners)) == 1, corners  # equal values, equal colours
    s = panel.scale
    # the colours are those of that one scale
    expected = colormaps.apply_colormap(np.array([[0.15]], np.float32), s.cmap, s.lo, s.hi)[0, 0]
    np.testing.assert_array_equal(np.asarray(corners[0]), expected)
    assert float(maps.min()) - 1e-6 <= s.lo < s.hi <= float(maps.max()) + 1e-6  # robust: inside the data
    assert panel.scale_bar.levels == (s.lo, s.hi) and panel.scale_bar.label == "attention weight"
    assert len(panel.scale_bar.ticks()) >= 2
    # per-tile scaling (as before) would have given different colours
    from vitviz.gui.mosaic import colorize_tiles

    per_tile = colorize_tiles(maps, s.cmap)
    assert len({tuple(per_tile[h, 0, 0]) for h in range(H)}) > 1


# ---------------------------------------------------------------------------------------------- plots
def test_distance_plot_starts_at_0_has_a_head_legend_and_says_this_image(qtbot, window, image_path):
    r = open_and_wait(qtbot, window, image_path)
    p = window.plots
    p.setCurrentIndex(0)
    _settle(qtbot, window)
    (_x0, _x1), (y0, y1) = p.distance.plot.viewRange()
    assert -0.1 * y1 <= y0 <= 0.0, (y0, y1)  # from 0 (and a few px for its label), never negative distances
    ax = p.distance.plot.getAxis("left")
    levels = ax.tickValues(y0, y1, ax.height())
    assert min(v for _spacing, values in levels for v in values) == 0.0
    from PySide6.QtGui import QImage, QPainter

    img = QImage(8, 8, QImage.Format.Format_RGB32)
    painter = QPainter(img)
    texts = [t[2] for t in ax.generateDrawSpecs(painter)[2]]
    painter.end()
    assert "0" in texts, texts  # the 0 label is drawn, not dropped at the plot's edge
    assert p.distance.plot.getViewBox().state["limits"]["yLimits"][0] == pytest.approx(y0)
    d = window.session.mean_distances()
    assert y1 >= float(d.max())
    assert p.distance.legend_labels() == [f"h{h}" for h in range(r.num_heads)]
    assert "this image" in p.distance.title.text()
    # the legend's colours are the points' colours
    for h, sample in enumerate(p.distance.legend_samples):
        pt = next(q for q in p.distance.scatter.points() if tuple(q.data()) == (0, h))
        assert sample.opts["brush"].color() == pt.brush().color()
    # entropy is non-negative: its colour scale starts at 0
    assert p.ent_bar.levels()[0] == 0.0
    assert "this image" in p.ent_title.text()


def test_position_embedding_grid_has_a_diverging_colour_bar_and_48_px_tiles(qtbot, window, image_path):
    r = open_and_wait(qtbot, window, image_path)
    p = window.plots
    p.setCurrentIndex(1)
    geometry.fit_to(window, window.docks, SMALL)
    _settle(qtbot, window)
    bar = p.pos_bar
    assert bar.levels == (-1.0, 1.0)
    assert bar.cmap == "coolwarm" and bar.label == "cosine similarity"
    ticks = dict((t, pos) for pos, t in bar.ticks())
    assert ticks["0"] == pytest.approx(0.5)  # 0 in the middle
    tw, th = p.pos_mosaic.tile_screen_size()
    assert min(tw, th) >= MIN_TILE - 0.5, (tw, th)
    # tiles are coloured on that fixed scale: a patch's similarity with itself (1) is the top colour
    gh, gw = r.grid
    m = p.pos_mosaic
    img = np.asarray(m.item.image)
    f = m.tile[0] // gh
    top = colormaps.get_colormap("coolwarm")[-1]
    t = m.tile_rect(1, 2)
    np.testing.assert_array_equal(img[int(t.top()) + 1 * f, int(t.left()) + 2 * f], top)
    # "Fit" shows the whole grid in the panel
    p.pos_fit.setChecked(True)
    _settle(qtbot, window)
    assert p.pos_mosaic.minimumWidth() == 0


def test_filters_tab_shows_each_components_index_and_explained_variance(qtbot, window, image_path, tiny_model):
    open_and_wait(qtbot, window, image_path)
    p = window.plots
    p.setCurrentIndex(2)
    _settle(qtbot, window)
    # the weights the window runs (bf16 where "auto" picks it)
    w = tiny_model.patch_embed.proj.weight.detach().float().numpy().astype(np.float64)
    X = w.reshape(w.shape[0], -1)
    s = np.linalg.svd(X - X.mean(0), compute_uv=False)
    ref = s ** 2 / (s ** 2).sum()
    k = len(p._filter_tiles)
    assert k == min(28, *X.shape)
    np.testing.assert_allclose(p.filter_variance[:k], ref[:k], rtol=1e-6, atol=1e-9)
    labels = p._filter_labels
    assert labels[0] == f"PC1 {100 * ref[0]:.1f} %"
    assert all(lab.startswith(f"PC{i + 1} ") and lab.endswith("%") for i, lab in enumerate(labels))
    assert [t.toPlainText() for t in p.filter_mosaic._labels[:k]] == labels
    title = p.filter_title.text()
    assert "principal components" in title and f"{100 * ref[:k].sum():.0f} % in all" in title
    tw, th = p.filter_mosaic.tile_screen_size()
    assert min(tw, th) >= 48

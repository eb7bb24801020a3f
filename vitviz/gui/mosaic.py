"""A grid of equal image tiles in one pyqtgraph item (heads, position embeddings, filters), with tile clicks; a
scroll area that keeps the tiles at least a given size on screen; a small horizontal colour bar for a shared scale."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QImage, QPainter, QPen
from PySide6.QtWidgets import QFrame, QGraphicsRectItem, QScrollArea, QSizePolicy, QWidget

from vitviz.gui.canvas import highlight_rect, outline
from vitviz.render import colormaps
from vitviz.render.scales import DEFAULT_PERCENTILE, format_ticks, nice_ticks, scale_for

BACKGROUND = QColor(38, 38, 42)
MIN_TILE = 48  # px on screen: the smallest thumbnail the panels show (they scroll instead)


class Mosaic(pg.GraphicsLayoutWidget):
    """One ImageItem showing a grid of equal tiles (gap of one pixel), with click -> (row, col) of the tile.

    Signals:
        tileClicked(row, col)
    """

    tileClicked = Signal(int, int)

    def __init__(self, parent=None, *, axes: bool = False):
        super().__init__(parent)
        self.setBackground(BACKGROUND)
        self.ci.setContentsMargins(2, 2, 2, 2)
        self.plot: pg.PlotItem = self.addPlot(row=0, col=0, enableMenu=False)  # (no menu: none built)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.setAspectLocked(True)
        self.vb = self.plot.getViewBox()
        self.vb.setDefaultPadding(0.01)
        for name in ("left", "bottom", "right", "top"):
            self.plot.hideAxis(name)
        self.item = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.item)
        self.highlight = highlight_rect(2.0, z=5, visible=False)
        self.plot.addItem(self.highlight)
        self.row_marker = outline(QGraphicsRectItem(), QColor(255, 255, 255, 200), 1.5, 4, dashed=True,
                                  visible=False)
        self.plot.addItem(self.row_marker)
        self._labels: list[pg.TextItem] = []
        self.rows = self.cols = 0
        self.tile = (1, 1)
        self.gap = 1
        self.min_tile = 0
        self._axes_extra = (0, 0)
        self.scene().sigMouseClicked.connect(self._on_click)

    # ------------------------------------------------------------------ size on screen
    def set_min_tile(self, px: int) -> None:
        """Keep every tile at least ``px`` screen pixels wide and high: the widget's minimum size grows with the
        grid (put the mosaic in a :class:`MosaicScroll`, which then scrolls). 0: fit whatever the size."""
        self.min_tile = int(px)
        self._update_minimum_size()

    def needed_size(self, tile_px: int | None = None) -> QSize:
        """The widget size at which every tile is ``tile_px`` (default: :attr:`min_tile`) screen pixels."""
        m = self.min_tile if tile_px is None else tile_px
        if not m or self.rows == 0:
            return QSize(0, 0)
        th, tw = self.tile
        W = self.cols * tw + (self.cols - 1) * self.gap
        H = self.rows * th + (self.rows - 1) * self.gap
        scale = m / min(th, tw) * 1.03  # the view's padding (1 % a side) and rounding
        ax_w, ax_h = self._axes_extra
        return QSize(math.ceil(W * scale) + ax_w + 8, math.ceil(H * scale) + ax_h + 8)

    def _update_minimum_size(self) -> None:
        self.setMinimumSize(self.needed_size() if self.min_tile else QSize(0, 0))

    def tile_screen_size(self) -> tuple[float, float]:
        """Width and height of one tile on screen, in widget pixels (0 before the first layout)."""
        if self.rows == 0:
            return 0.0, 0.0
        r = self.tile_rect(0, 0)
        a = self.mapFromScene(self.vb.mapViewToScene(r.topLeft()))
        b = self.mapFromScene(self.vb.mapViewToScene(r.bottomRight()))
        return float(abs(b.x() - a.x())), float(abs(b.y() - a.y()))

    def set_tiles(self, rgba_tiles: list[np.ndarray], rows: int, cols: int, gap: int = 1,
                  labels: list[str] | None = None) -> None:
        """Lay out ``uint8 [th, tw, 3|4]`` tiles row-major in ``rows x cols``."""
        if len(rgba_tiles) == 0:
            self.item.clear()
            return
        th, tw = rgba_tiles[0].shape[:2]
        ch = rgba_tiles[0].shape[2]
        H = rows * th + (rows - 1) * gap
        W = cols * tw + (cols - 1) * gap
        tiles = np.asarray(rgba_tiles)
        if ch == 3:
            tiles = np.concatenate([tiles, np.full(tiles.shape[:3] + (1,), 255, np.uint8)], axis=-1)
        n = tiles.shape[0]
        full = np.zeros((rows * cols, th + gap, tw + gap, 4), dtype=np.uint8)
        full[:n, :th, :tw] = tiles
        canvas = full.reshape(rows, cols, th + gap, tw + gap, 4).transpose(0, 2, 1, 3, 4)
        canvas = np.ascontiguousarray(canvas.reshape(rows * (th + gap), cols * (tw + gap), 4)[:H, :W])
        refit = (rows, cols, th, tw) != (self.rows, self.cols, *self.tile)
        self.rows, self.cols, self.tile, self.gap = rows, cols, (th, tw), gap
        self.item.setImage(canvas, autoLevels=False, levels=(0, 255))
        self._set_labels(labels)
        self._update_minimum_size()
        if refit:
            self.vb.setRange(QRectF(0, 0, W, H), padding=0.01)

    def set_axes(self, row_labels: list[str] | None = None, col_labels: list[str] | None = None,
                 row_title: str = "", col_title: str = "") -> None:
        """Tick labels at the tile centres on the left (rows) and the top (columns); None hides that axis."""
        th, tw = self.tile
        extra = [0, 0]
        for name, labels, title, step, _axis in (("left", row_labels, row_title, th, 0),
                                                 ("top", col_labels, col_title, tw, 1)):
            if labels is None:
                self.plot.hideAxis(name)
                continue
            self.plot.showAxis(name)
            ax = self.plot.getAxis(name)
            ax.setTicks([[((i + 0.5) * step + i * self.gap, text) for i, text in enumerate(labels)], []])
            ax.setLabel(title)
            ax.setStyle(tickLength=-3)
            f = QFont()
            f.setPointSize(7)
            ax.setTickFont(f)
            if name == "left":
                extra[0] = 22 + (10 if title else 0)
                ax.setWidth(extra[0])
            else:
                extra[1] = 16 + (14 if title else 0)
                ax.setHeight(extra[1])
        self._axes_extra = (extra[0], extra[1])
        self._update_minimum_size()

    def set_labels(self, labels: list[str] | None) -> None:
        """A small text at the top-left corner of each tile, row-major (None: none)."""
        self._set_labels(labels)

    def _set_labels(self, labels: list[str] | None) -> None:
        labels = labels or []
        key = (tuple(labels), self.cols, self.tile, self.gap)
        if key == getattr(self, "_labels_key", None):
            return
        self._labels_key = key
        while len(self._labels) > len(labels):
            self.plot.removeItem(self._labels.pop())
        th, tw = self.tile
        for i, text in enumerate(labels):
            if i >= len(self._labels):
                t = pg.TextItem(color=(235, 235, 235), anchor=(0, 0), fill=pg.mkBrush(0, 0, 0, 140))
                t.setFont(QFont("Sans", 7))
                t.setZValue(6)
                self.plot.addItem(t)
                self._labels.append(t)
            r, c = divmod(i, self.cols)
            self._labels[i].setText(text)
            self._labels[i].setPos(c * (tw + self.gap), r * (th + self.gap))

    def label_texts(self) -> list[str]:
        """The texts drawn on the tiles, row-major."""
        return [t.toPlainText() for t in self._labels]

    def tile_rect(self, row: int, col: int) -> QRectF:
        th, tw = self.tile
        return QRectF(col * (tw + self.gap), row * (th + self.gap), tw, th)

    def set_highlight(self, row: int | None, col: int | None = None) -> None:
        if row is None or col is None:
            self.highlight.setVisible(False)
            return
        self.highlight.setRect(self.tile_rect(row, col))
        self.highlight.setVisible(True)

    def set_row_marker(self, row: int | None) -> None:
        """A dashed outline around the whole row ``row`` (the current layer of the all-layers grid); None hides it."""
        if row is None or not 0 <= row < self.rows:
            self.row_marker.setVisible(False)
            return
        th, tw = self.tile
        g = self.gap / 2
        W = self.cols * tw + (self.cols - 1) * self.gap
        self.row_marker.setRect(QRectF(-g, row * (th + self.gap) - g, W + 2 * g, th + 2 * g))
        self.row_marker.setVisible(True)

    def tile_center(self, row: int, col: int) -> QPoint:
        """Widget position of a tile's centre (for tests)."""
        c = self.tile_rect(row, col).center()
        return self.mapFromScene(self.vb.mapViewToScene(c))

    def _on_click(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton or self.rows == 0:
            return
        p = self.vb.mapSceneToView(ev.scenePos())
        th, tw = self.tile
        c = int(p.x() // (tw + self.gap))
        r = int(p.y() // (th + self.gap))
        if 0 <= r < self.rows and 0 <= c < self.cols and p.x() >= 0 and p.y() >= 0:
            self.tileClicked.emit(r, c)


def colorize_tiles(maps: np.ndarray, cmap: str, *, per_tile: bool = True, vmin=None, vmax=None) -> np.ndarray:
    """``[T, h, w]`` floats -> ``uint8 [T, h, w, 4]`` RGBA, each tile normalised to its own range unless
    ``per_tile=False`` (then one range for all). NaN becomes transparent (the colour mapping is
    :func:`vitviz.render.colormaps.apply_colormap`'s)."""
    m = np.asarray(maps, dtype=np.float32)
    if not (per_tile and vmin is None and vmax is None):
        return colormaps.apply_colormap(m, cmap, vmin, vmax)
    finite = np.isfinite(m)
    lo = np.where(finite, m, np.inf).reshape(len(m), -1).min(axis=1)
    hi = np.where(finite, m, -np.inf).reshape(len(m), -1).max(axis=1)
    lo = np.where(np.isfinite(lo), lo, 0.0)[:, None, None]
    hi = np.where(np.isfinite(hi), hi, 1.0)[:, None, None]
    with np.errstate(invalid="ignore"):
        n = (m - lo) / np.where(hi > lo, hi - lo, 1.0)
    return colormaps.apply_colormap(n, cmap, 0.0, 1.0)


def upscale(rgba: np.ndarray, factor: int) -> np.ndarray:
    """Nearest upscaling of ``[..., h, w, C]`` by an integer factor."""
    if factor <= 1:
        return rgba
    return np.repeat(np.repeat(rgba, factor, axis=-3), factor, axis=-2)




def shared_scale(maps: np.ndarray, cmap: str, *, signed: bool | None = None,
                 fixed: tuple[float, float] | None = None, percentile: float = DEFAULT_PERCENTILE,
                 exclude: np.ndarray | None = None):
    """One colour scale for a whole stack of tiles (:func:`vitviz.render.scales.scale_for`): the robust (``percentile``)
    range of all their values without the ``exclude``d entries (a mask broadcast over the stack: artefact patches),
    or ``fixed``; a signed quantity gets a diverging colormap centred at 0."""
    m = np.asarray(maps, dtype=np.float64)
    if fixed is not None:
        return scale_for(m, mode="fixed", fixed=fixed, signed=signed, cmap=cmap)
    ex = None if exclude is None else np.broadcast_to(np.asarray(exclude, dtype=bool), m.shape)
    return scale_for(m, mode="shared", shared=m, percentile=percentile, signed=signed, exclude=ex, cmap=cmap)


def colorize_shared(maps: np.ndarray, scale, neutral: np.ndarray | None = None) -> np.ndarray:
    """``[T, h, w]`` floats -> ``uint8 [T, h, w, 4]`` through one colour scale (equal values, equal colours);
    ``neutral`` (bool ``[h, w]``: the patches left out of the scale) in the neutral grey on every tile, as the canvas
    and the figures draw them, never a scale colour."""
    rgba = colorize_tiles(maps, scale.cmap, per_tile=False, vmin=scale.lo, vmax=scale.hi)
    if neutral is not None and neutral.shape == rgba.shape[1:3]:
        rgba[:, neutral, :3] = colormaps.NEUTRAL_RGB
        rgba[:, neutral, 3] = 255
    return rgba


class MosaicScroll(QScrollArea):
    """A :class:`Mosaic` that fills the area when there is room and scrolls when its tiles would get smaller than
    its ``min_tile``.

    Signals:
        resized(): the area changed size (a panel may re-flow its tiles).
    """

    resized = Signal()

    def __init__(self, mosaic: Mosaic, parent=None):
        super().__init__(parent)
        self.mosaic = mosaic
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidgetResizable(True)
        self.setWidget(mosaic)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMinimumSize(80, 80)
        pal = self.palette()
        pal.setColor(self.backgroundRole(), BACKGROUND)
        self.setPalette(pal)
        self.setAutoFillBackground(True)

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        self.resized.emit()

    def ensure_tile_visible(self, row: int, col: int | None = None) -> None:
        """Scroll so that tile ``(row, col)`` (or the start of row ``row``) is in view."""
        m = self.mosaic
        if m.rows == 0:
            return
        p = m.tile_center(row, 0 if col is None else col)
        w, h = m.tile_screen_size()
        self.ensureVisible(p.x() if col is not None else 0, p.y(), int(w), int(h))


class ScaleBar(QWidget):
    """A small horizontal colour bar for the tiles of a panel: the colormap from ``lo`` to ``hi``, round ticks,
    the quantity on the left, and an arrow at an end the scale clips."""

    BAR_H = 8

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(30)
        self.scale = None
        self.label = ""
        self._image = QImage()
        self._font = QFont()
        self._font.setPointSize(7)

    @property
    def levels(self) -> tuple[float, float] | None:
        return None if self.scale is None else (float(self.scale.lo), float(self.scale.hi))

    @property
    def cmap(self) -> str | None:
        return None if self.scale is None else self.scale.cmap

    def set_scale(self, scale, label: str = "", note: str = "") -> None:
        """Show ``scale`` (:class:`vitviz.render.scales.ColourScale`) named ``label``; ``note`` goes in the tooltip."""
        if scale is not None and (self.scale is None or scale.cmap != self.scale.cmap):
            lut = np.ascontiguousarray(colormaps.get_colormap(scale.cmap)[:, :4])
            self._image = QImage(lut.data, lut.shape[0], 1, 4 * lut.shape[0], QImage.Format.Format_RGBA8888).copy()
        self.scale, self.label = scale, label
        tip = "" if scale is None else f"{label}: {scale.lo:.4g} .. {scale.hi:.4g}, one scale for every tile{note}"
        self.setToolTip(tip)
        self.update()

    def ticks(self) -> list[tuple[float, str]]:
        """``[(position 0..1 from the left, text)]``."""
        if self.scale is None:
            return []
        lo, hi = self.levels
        values = nice_ticks(lo, hi, n=4)
        texts = format_ticks(values)
        return [((v - lo) / (hi - lo), t) for v, t in zip(values, texts) if -1e-9 <= (v - lo) / (hi - lo) <= 1 + 1e-9]

    def _bar_rect(self) -> QRectF:
        fm_w = self.fontMetrics().horizontalAdvance(self.label) if self.label else 0
        x0 = min(fm_w + 10, self.width() // 3)
        return QRectF(x0 + 6, 4, max(10, self.width() - x0 - 16), self.BAR_H)

    def paintEvent(self, _ev) -> None:
        if self.scale is None:
            return
        p = QPainter(self)
        p.setFont(self._font)
        text = QColor(220, 220, 224)
        r = self._bar_rect()
        p.setPen(text)
        left = Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft
        p.drawText(QRectF(2, 0, r.left() - 6, self.height()), left, self.label)
        p.drawImage(r, self._image)
        p.setPen(QPen(QColor(150, 150, 155), 1))
        p.drawRect(r)
        p.setBrush(text)
        for end, clipped in ((r.left(), self.scale.clipped_low), (r.right(), self.scale.clipped_high)):
            if clipped:  # values beyond the scale take the end colour
                d = -5 if end == r.left() else 5
                y = r.center().y()
                p.drawPolygon([QPointF(end + d, y), QPointF(end, y - 4), QPointF(end, y + 4)])
        p.setPen(text)
        fm = p.fontMetrics()
        for pos, t in self.ticks():
            x = r.left() + pos * r.width()
            p.drawLine(QPointF(x, r.bottom()), QPointF(x, r.bottom() + 3))
            w = fm.horizontalAdvance(t)
            tx = min(max(x - w / 2, r.left() - 4), self.width() - w - 1)
            p.drawText(QPointF(tx, r.bottom() + 4 + fm.ascent()), t)
        p.end()

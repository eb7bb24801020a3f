"""A grid of equal image tiles in one pyqtgraph item (heads, position embeddings, filters), with tile clicks."""

from __future__ import annotations


import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont

from vitviz import imaging
from vitviz.gui.canvas import highlight_rect

BACKGROUND = QColor(38, 38, 42)


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
        self.plot: pg.PlotItem = self.addPlot(row=0, col=0)
        self.plot.setMenuEnabled(False)
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
        self._labels: list[pg.TextItem] = []
        self.rows = self.cols = 0
        self.tile = (1, 1)
        self.gap = 1
        self.scene().sigMouseClicked.connect(self._on_click)

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
        if refit:
            self.vb.setRange(QRectF(0, 0, W, H), padding=0.01)

    def set_axes(self, row_labels: list[str] | None = None, col_labels: list[str] | None = None,
                 row_title: str = "", col_title: str = "") -> None:
        """Tick labels at the tile centres on the left (rows) and the top (columns); None hides that axis."""
        th, tw = self.tile
        for name, labels, title, step, size in (("left", row_labels, row_title, th, 0),
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
                ax.setWidth(22 + (10 if title else 0))
            else:
                ax.setHeight(16 + (14 if title else 0))

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

    def tile_rect(self, row: int, col: int) -> QRectF:
        th, tw = self.tile
        return QRectF(col * (tw + self.gap), row * (th + self.gap), tw, th)

    def set_highlight(self, row: int | None, col: int | None = None) -> None:
        if row is None or col is None:
            self.highlight.setVisible(False)
            return
        self.highlight.setRect(self.tile_rect(row, col))
        self.highlight.setVisible(True)

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
    :func:`vitviz.imaging.apply_colormap`'s)."""
    m = np.asarray(maps, dtype=np.float32)
    if not (per_tile and vmin is None and vmax is None):
        return imaging.apply_colormap(m, cmap, vmin, vmax)
    finite = np.isfinite(m)
    lo = np.where(finite, m, np.inf).reshape(len(m), -1).min(axis=1)
    hi = np.where(finite, m, -np.inf).reshape(len(m), -1).max(axis=1)
    lo = np.where(np.isfinite(lo), lo, 0.0)[:, None, None]
    hi = np.where(np.isfinite(hi), hi, 1.0)[:, None, None]
    with np.errstate(invalid="ignore"):
        n = (m - lo) / np.where(hi > lo, hi - lo, 1.0)
    return imaging.apply_colormap(n, cmap, 0.0, 1.0)


def upscale(rgba: np.ndarray, factor: int) -> np.ndarray:
    """Nearest upscaling of ``[..., h, w, C]`` by an integer factor."""
    if factor <= 1:
        return rgba
    return np.repeat(np.repeat(rgba, factor, axis=-3), factor, axis=-2)



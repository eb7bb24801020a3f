"""The central canvas: the user's whole photo, the current map over the model's crop, the query marker.

Two ``pg.ImageItem`` s in one ``ViewBox`` (row-major, y down): the photo is set once per image; the overlay holds the
raw map ``[gh, gw]`` (or its smooth upsampling) with the colormap as a lookup table, placed over the crop rectangle, so
a change of layer/head/colormap/opacity only uploads a tiny array. A colour bar at the right shows the value range.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QImage, QPainter, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsRectItem, QLabel, QSizePolicy, QWidget

from vitviz import imaging

pg.setConfigOptions(imageAxisOrder="row-major", antialias=True)


HIGHLIGHT_COLOR = QColor(0, 230, 255)


def highlight_rect(width: float = 2.0, z: float | None = None, visible: bool = True) -> QGraphicsRectItem:
    """The cyan outline used for every selection marker (query patch, selected tile, current cell)."""
    item = QGraphicsRectItem()
    pen = QPen(HIGHLIGHT_COLOR)
    pen.setCosmetic(True)
    pen.setWidthF(width)
    item.setPen(pen)
    if z is not None:
        item.setZValue(z)
    item.setVisible(visible)
    return item


class ColorBar(QWidget):
    """A light colour bar beside the canvas: the colormap's gradient and five value labels.

    Painted with QPainter directly (a pyqtgraph ColorBarItem re-lays its axis out on every level change, which
    cost more than the rest of a layer change).
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Expanding)
        self.setFixedWidth(92)
        self._image = QImage()
        self._lut = None
        self.levels: tuple[float, float] | None = None
        self._hidden = True
        self.setToolTip("Colour scale of the current map (raw values)")

    def set_colormap(self, name: str) -> None:
        lut = np.ascontiguousarray(imaging.get_colormap(name)[::-1, :4])  # top = high
        self._lut = lut
        self._image = QImage(lut.data, 1, lut.shape[0], 4, QImage.Format.Format_RGBA8888).copy()
        self.update()

    def hide_bar(self, hidden: bool) -> None:
        """Keep the space but draw nothing (no map on screen)."""
        if hidden != self._hidden:
            self._hidden = hidden
            self.update()

    def set_levels(self, lo: float | None, hi: float | None) -> None:
        new = None if lo is None or hi is None else (float(lo), float(hi))
        if new != self.levels:
            self.levels = new
            self.update()

    def paintEvent(self, _ev) -> None:
        if self._hidden:
            return
        p = QPainter(self)
        fm = QFontMetrics(self.font())
        avail = self.height() - 2 * fm.height()
        length = min(avail, 460)
        top = fm.height() + (avail - length) // 2
        bottom = top + length
        if bottom - top < 20:
            return
        bar = QRectF(6, top, 14, bottom - top)
        p.drawImage(bar, self._image)
        p.setPen(QColor(150, 150, 155))
        p.drawRect(bar)
        if self.levels is None:
            return
        lo, hi = self.levels
        p.setPen(QColor(220, 220, 224))
        for i in range(5):
            f = i / 4
            y = bottom - f * (bottom - top)
            p.drawLine(int(bar.right()), int(y), int(bar.right()) + 4, int(y))
            p.drawText(int(bar.right()) + 7, int(y + fm.ascent() / 2 - 1), f"{lo + f * (hi - lo):.3g}")


class Canvas(pg.GraphicsLayoutWidget):
    """Photo + overlay + query marker + colour bar.

    Signals:
        hovered(x, y): image pixel coordinates under the mouse (NaN when outside the image).
        clicked(x, y): a left click at image pixel coordinates.
    """

    hovered = Signal(float, float)
    clicked = Signal(float, float)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setBackground(QColor(38, 38, 42))
        self.setAcceptDrops(False)
        self.setAntialiasing(False)  # axis-aligned images and rectangles only: AA buys nothing and costs time
        self.ci.setContentsMargins(4, 4, 4, 4)
        self.vb: pg.ViewBox = self.addViewBox(row=0, col=0, lockAspect=True, invertY=True, enableMenu=False)
        self.vb.setDefaultPadding(0.02)
        self.image_item = pg.ImageItem(axisOrder="row-major")
        self.image_item.setZValue(0)
        self.overlay_item = pg.ImageItem(axisOrder="row-major")
        self.overlay_item.setZValue(1)
        self.vb.addItem(self.image_item)
        self.vb.addItem(self.overlay_item)

        self.crop_outline = QGraphicsRectItem()
        pen = QPen(QColor(255, 255, 255, 150))
        pen.setCosmetic(True)
        pen.setWidthF(1.0)
        pen.setStyle(Qt.PenStyle.DashLine)
        self.crop_outline.setPen(pen)
        self.crop_outline.setZValue(2)
        self.crop_outline.setVisible(False)
        self.vb.addItem(self.crop_outline)

        self.marker = highlight_rect(2.5, z=3, visible=False)
        self.vb.addItem(self.marker)

        self._cmap_name = ""
        self.colorbar = ColorBar()
        self.set_colormap(imaging.DEFAULT_COLORMAP)
        # the photo only changes with the image: cache its rendering at device resolution (re-rendered on zoom)
        self.image_item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)

        self.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        self._image_shape: tuple[int, int] | None = None
        self._crop = QRectF(0, 0, 1, 1)
        self.placeholder = QLabel("Open an image (Ctrl+O), drop one here, or paste one (Ctrl+V)", self)
        self.placeholder.setStyleSheet("color: rgb(170, 170, 176); font-size: 15px;")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._overlay_rect: tuple | None = None

    # ------------------------------------------------------------------ content
    def set_photo(self, rgb: np.ndarray | None) -> None:
        """Show a new photo (``uint8 [H, W, 3]``) and fit it to the window."""
        if rgb is None:
            self.image_item.clear()
            self.overlay_item.clear()
            self._image_shape = None
            return
        self.placeholder.hide()
        new_shape = rgb.shape[:2]
        self.image_item.setImage(rgb, autoLevels=False, levels=(0, 255))
        changed = new_shape != self._image_shape
        self._image_shape = new_shape
        if changed:
            self.fit()

    def set_crop(self, x0: float, y0: float, w: float, h: float) -> None:
        """Where the overlay goes: the model's crop in image pixels."""
        self._crop = QRectF(x0, y0, w, h)
        self.crop_outline.setRect(self._crop)
        self.crop_outline.setVisible(True)

    def set_overlay(self, values: np.ndarray | None, levels: tuple[float, float] | None = None) -> None:
        """Show a map (float ``[h, w]``) stretched over the crop; ``None`` hides it."""
        if values is None:
            self.overlay_item.setVisible(False)
            self.colorbar.set_levels(None, None)
            self.colorbar.hide_bar(True)
            return
        if levels is None:
            finite = values[np.isfinite(values)]
            levels = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        lo, hi = levels
        if not hi > lo:
            hi = lo + 1e-12 if math.isfinite(lo) else 1.0
        self.overlay_item.setImage(values, autoLevels=False, levels=(lo, hi))
        if self._overlay_rect != (self._crop, values.shape):
            self._overlay_rect = (self._crop, values.shape)
            self.overlay_item.setRect(self._crop)
        self.overlay_item.setVisible(True)
        self.colorbar.set_levels(lo, hi)
        self.colorbar.hide_bar(False)

    def set_colormap(self, name: str) -> None:
        if name == self._cmap_name:
            return
        self._cmap_name = name
        self.overlay_item.setLookupTable(imaging.get_colormap(name))
        self.colorbar.set_colormap(name)

    def set_opacity(self, opacity: float) -> None:
        self.overlay_item.setOpacity(float(opacity))

    def set_marker(self, rect: tuple[float, float, float, float] | None) -> None:
        """Outline one patch ``(x0, y0, w, h)`` in image pixels; None hides it."""
        if rect is None:
            self.marker.setVisible(False)
            return
        self.marker.setRect(QRectF(*rect))
        self.marker.setVisible(True)

    def fit(self) -> None:
        if self._image_shape is None:
            return
        h, w = self._image_shape
        self.vb.setRange(QRectF(0, 0, w, h), padding=0.02)

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        if hasattr(self, "placeholder"):  # pyqtgraph calls resizeEvent from its constructor
            self.placeholder.setGeometry(0, 0, self.width(), self.height())

    # ------------------------------------------------------------------ coordinates
    def image_to_widget(self, x: float, y: float) -> QPoint:
        """Widget pixel position of image coordinate ``(x, y)`` (for tests and tooltips)."""
        scene = self.vb.mapViewToScene(QPointF(x, y))
        return self.mapFromScene(scene)

    def _on_mouse_moved(self, scene_pos: QPointF) -> None:
        if self._image_shape is None:
            return
        p = self.vb.mapSceneToView(scene_pos)
        h, w = self._image_shape
        if 0 <= p.x() < w and 0 <= p.y() < h and self.vb.sceneBoundingRect().contains(scene_pos):
            self.hovered.emit(p.x(), p.y())
        else:
            self.hovered.emit(float("nan"), float("nan"))

    def _on_mouse_clicked(self, ev) -> None:
        if self._image_shape is None or ev.button() != Qt.MouseButton.LeftButton:
            return
        if ev.double():  # double-click: fit the image to the window
            self.fit()
            return
        if not self.vb.sceneBoundingRect().contains(ev.scenePos()):
            return
        p = self.vb.mapSceneToView(ev.scenePos())
        self.clicked.emit(p.x(), p.y())

"""The central canvas: the user's whole photo, the current map over the model's crop, the query marker.

Two ``pg.ImageItem`` s in one ``ViewBox`` (row-major, y down): the photo is set once per image; the overlay holds the
raw map ``[gh, gw]`` (or its smooth upsampling) with the colormap as a lookup table, placed over the crop rectangle, so
a change of layer/head/colormap/opacity only uploads a tiny array. A colour bar at the right shows the value range.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QPointF, QRect, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QImage, QPainter, QPainterPath, QPen, QPolygonF
from PySide6.QtWidgets import QGraphicsItem, QGraphicsPathItem, QGraphicsRectItem, QLabel, QSizePolicy, QWidget

from vitviz.render import colormaps
from vitviz.render.scales import ColourScale

pg.setConfigOptions(imageAxisOrder="row-major", antialias=True)


HIGHLIGHT_COLOR = QColor(0, 230, 255)
ARTEFACT_COLOR = QColor(255, 150, 40)
TRUTH_COLOR = QColor(255, 235, 60)


def outline(item, color: QColor, width: float, z: float | None = None, *, dashed: bool = False,
            visible: bool = True):
    """``item`` (a rect or path item) drawn as a cosmetic outline of ``color`` and ``width`` screen pixels."""
    pen = QPen(color)
    pen.setCosmetic(True)
    pen.setWidthF(width)
    if dashed:
        pen.setStyle(Qt.PenStyle.DashLine)
    item.setPen(pen)
    if z is not None:
        item.setZValue(z)
    item.setVisible(visible)
    return item


def highlight_rect(width: float = 2.0, z: float | None = None, visible: bool = True) -> QGraphicsRectItem:
    """The cyan outline used for every selection marker (query patch, selected tile, current cell)."""
    return outline(QGraphicsRectItem(), HIGHLIGHT_COLOR, width, z, visible=visible)


class ColorBar(QWidget):
    """A colour bar beside the canvas: the colormap's gradient, nice ticks, the quantity and unit, and arrows at the
    ends the colour scale clips (values beyond them take the end colour).

    Painted with QPainter directly (a pyqtgraph ColorBarItem re-lays its axis out on every level change, which
    cost more than the rest of a layer change).
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Expanding)
        self.setFixedWidth(88)
        self._image = QImage()
        self.levels: tuple[float, float] | None = None
        self.scale = None  # a vitviz.render.scales.ColourScale (or None: linear between levels)
        self.label = ""
        self._hidden = True
        self.setToolTip("Colour scale of the current map")

    def set_colormap(self, name: str) -> None:
        lut = np.ascontiguousarray(colormaps.get_colormap(name)[::-1, :4])  # top = high
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
            self.scale = None
            self.update()

    def set_scale(self, scale, label: str = "", tooltip: str = "") -> None:
        """Show ``scale`` (a :class:`vitviz.render.scales.ColourScale`) with the quantity ``label`` along the bar."""
        self.scale, self.label = scale, label
        self.levels = None if scale is None else (float(scale.lo), float(scale.hi))
        self.setToolTip(tooltip or "Colour scale of the current map")
        self.update()

    def ticks(self) -> list[tuple[float, str]]:
        """``[(position 0..1 from the bottom, text)]`` of the tick labels drawn."""
        if self.levels is None:
            return []
        scale = self.scale if self.scale is not None else ColourScale(*self.levels)
        pairs = scale.ticks(5)
        pos = scale.normalise(np.asarray([v for v, _ in pairs], dtype=np.float64))
        return [(float(p), t) for p, (_, t) in zip(pos, pairs) if 0.0 <= p <= 1.0]

    def paintEvent(self, _ev) -> None:
        if self._hidden:
            return
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        fm = QFontMetrics(self.font())
        avail = self.height() - 4 * fm.height()
        length = min(avail, 460)
        top = 2 * fm.height() + (avail - length) // 2
        bottom = top + length
        if bottom - top < 20:
            return
        x0 = 4 + fm.height()  # room for the rotated label at the left
        bar = QRectF(x0, top, 14, bottom - top)
        p.drawImage(bar, self._image)
        p.setPen(QColor(150, 150, 155))
        p.drawRect(bar)
        text = QColor(220, 220, 224)
        if self.scale is not None:  # arrows: the scale clips values beyond this end
            p.setBrush(QColor(220, 220, 224))
            p.setPen(Qt.PenStyle.NoPen)
            cx, w = bar.center().x(), 7.0
            if getattr(self.scale, "clipped_high", False):
                p.drawPolygon(QPolygonF([QPointF(cx - w, top - 2), QPointF(cx + w, top - 2), QPointF(cx, top - 11)]))
            if getattr(self.scale, "clipped_low", False):
                p.drawPolygon(QPolygonF([QPointF(cx - w, bottom + 2), QPointF(cx + w, bottom + 2),
                                         QPointF(cx, bottom + 11)]))
        p.setPen(text)
        for f, label in self.ticks():
            y = bottom - f * (bottom - top)
            p.drawLine(int(bar.right()), int(y), int(bar.right()) + 4, int(y))
            p.drawText(int(bar.right()) + 7, int(y + fm.ascent() / 2 - 1), label)
        if self.label:
            p.save()
            p.translate(3 + fm.ascent(), (top + bottom) / 2 + fm.horizontalAdvance(self.label) / 2)
            p.rotate(-90)
            p.drawText(0, 0, fm.elidedText(self.label, Qt.TextElideMode.ElideRight, int(bottom - top)))
            p.restore()


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
        self.rgb_item = pg.ImageItem(axisOrder="row-major")  # a view in colours of its own (feature PCA)
        self.rgb_item.setZValue(1)
        self.rgb_item.setVisible(False)
        self.vb.addItem(self.image_item)
        self.vb.addItem(self.overlay_item)
        self.vb.addItem(self.rgb_item)
        # the tokens left out of the colour scale: the neutral grey (the overlay is NaN, transparent, there)
        self.neutral_item = pg.ImageItem(axisOrder="row-major")
        self.neutral_item.setZValue(1.2)
        self.neutral_item.setVisible(False)
        self.vb.addItem(self.neutral_item)
        self.neutral_cells: list[tuple[int, int]] = []

        self.crop_outline = outline(QGraphicsRectItem(), QColor(255, 255, 255, 150), 1.0, 2, dashed=True,
                                    visible=False)
        self.vb.addItem(self.crop_outline)

        self.marker = highlight_rect(2.5, z=3, visible=False)
        self.vb.addItem(self.marker)

        # the top-p mass mask: a dark veil outside it ("dim") or its outline ("contour")
        self.mask_item = pg.ImageItem(axisOrder="row-major")
        self.mask_item.setZValue(1.5)
        self.mask_item.setVisible(False)
        self.vb.addItem(self.mask_item)
        self.mask_outline = outline(QGraphicsPathItem(), QColor(255, 255, 255), 2.0, 2.5, visible=False)
        self.vb.addItem(self.mask_outline)
        # the artefact (high-norm) tokens: dashed orange outlines
        self.artefact_outline = outline(QGraphicsPathItem(), ARTEFACT_COLOR, 1.6, 2.6, dashed=True, visible=False)
        self.vb.addItem(self.artefact_outline)
        # the ground-truth object of the localisation box (vitviz.gui.localisation_box): a yellow outline
        self.truth_outline = outline(QGraphicsPathItem(), TRUTH_COLOR, 1.8, 2.7, visible=False)
        self.vb.addItem(self.truth_outline)
        self._truth: np.ndarray | None = None
        self.artefact_cells: list[tuple[int, int]] = []

        self._cmap_name = ""
        self.colorbar = ColorBar()
        self.set_colormap(colormaps.DEFAULT_COLORMAP)
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
        self.overlay_values: np.ndarray | None = None
        self.rgb_values: np.ndarray | None = None
        # what is shown, in words, over the top of the canvas
        self.title = QLabel("", self)
        self.title.setObjectName("canvasTitle")
        self.title.setStyleSheet("QLabel#canvasTitle { color: rgb(235, 235, 238); background: rgba(20, 20, 24, 170);"
                                 " padding: 3px 8px; border-radius: 3px; font-size: 13px; }")
        self.title.setWordWrap(True)
        self.title.setVisible(False)
        self.title.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)

    # ------------------------------------------------------------------ content
    def set_photo(self, rgb: np.ndarray | None) -> None:
        """Show a new photo (``uint8 [H, W, 3]``) and fit it to the window."""
        if rgb is None:
            self.image_item.clear()
            self.overlay_item.clear()
            self.rgb_item.setVisible(False)
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
        if self._truth is not None:  # the ground truth's outline follows the crop
            self.set_ground_truth(self._truth)

    def set_overlay(self, values: np.ndarray | None, levels=None, *, label: str = "", tooltip: str = "") -> None:
        """Show a map (float ``[h, w]``) stretched over the crop; ``None`` hides it.

        Args:
            levels: a :class:`vitviz.render.scales.ColourScale` (its ``normalise`` maps values to the colormap:
                linear, log or centred at 0), a ``(lo, hi)`` pair, or None for the map's own min-max.
            label: the colour bar's quantity and unit.
        """
        self.overlay_values = values  # the raw map shown (the image item holds its colour-normalised copy)
        if values is None:
            self.overlay_item.setVisible(False)
            self.colorbar.set_levels(None, None)
            self.colorbar.hide_bar(True)
            return
        if levels is not None and hasattr(levels, "normalise"):
            shown = np.asarray(levels.normalise(values), dtype=np.float32)
            self.overlay_item.setImage(shown, autoLevels=False, levels=(0.0, 1.0))
            self.colorbar.set_scale(levels, label, tooltip)
        else:
            if levels is None:
                finite = values[np.isfinite(values)]
                levels = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
            lo, hi = levels
            if not hi > lo:
                hi = lo + 1e-12 if math.isfinite(lo) else 1.0
            self.overlay_item.setImage(values, autoLevels=False, levels=(lo, hi))
            self.colorbar.set_levels(lo, hi)
            self.colorbar.label = label
        if self._overlay_rect != (self._crop, values.shape):
            self._overlay_rect = (self._crop, values.shape)
            self.overlay_item.setRect(self._crop)
        self.overlay_item.setVisible(True)
        self.colorbar.hide_bar(False)

    def set_rgb(self, rgba: np.ndarray | None, *, photo: bool = True, opacity: float | None = None) -> None:
        """Show a picture in colours of its own (float RGBA ``[gh, gw, 4]`` in [0, 1]) stretched over the crop, with
        no colormap and no colour bar (call :meth:`set_overlay` with None first); None hides it. ``photo`` False:
        the picture alone on the canvas's dark background (``opacity``: its own, e.g. 1)."""
        self.rgb_values = rgba
        self.image_item.setVisible(photo or rgba is None)
        if opacity is not None:
            self.rgb_item.setOpacity(float(opacity))
        if rgba is None:
            self.rgb_item.setVisible(False)
            return
        img = np.ascontiguousarray(np.clip(np.round(np.asarray(rgba) * 255.0), 0, 255).astype(np.uint8))
        self.rgb_item.setImage(img, autoLevels=False, levels=(0, 255))
        self.rgb_item.setRect(self._crop)
        self.rgb_item.setVisible(True)

    def show_panel(self, p, cmap: str) -> None:
        """Draw a :class:`vitviz.render.figures.Panel` (:func:`vitviz.document.panel.panel_of`: what the Compare
        window and the figure files draw too): its map in its scale (``cmap`` without one), its own colours, marker,
        artefact outlines, excluded patches in grey, mask and title."""
        self.set_colormap(p.scale.cmap if p.scale is not None else cmap)
        self.set_overlay(p.grid_values, p.scale, label=p.colorbar_label, tooltip=p.scale_text)
        self.set_rgb(p.rgb, photo=p.photo_shown, opacity=p.opacity)
        self.set_marker(p.marker)
        self.set_artefacts(list(p.outlined), p.grid)
        self.set_neutral(list(p.neutral), p.grid)
        self.set_mask(p.mask, p.mask_style)
        self.set_title(p.title)

    def set_title(self, text: str) -> None:
        """The line over the canvas that says what is shown ("" hides it)."""
        self.title.setText(text)
        self.title.setVisible(bool(text))
        self._place_title()

    def _place_title(self) -> None:
        """One line when it fits, wrapped to the canvas width when it does not."""
        if not hasattr(self, "title"):
            return
        avail = max(100, self.width() - 16)
        one_line = self.title.fontMetrics().horizontalAdvance(self.title.text()) + 24
        self.title.setFixedWidth(min(one_line, avail))
        text_h = self.title.fontMetrics().boundingRect(QRect(0, 0, self.title.width() - 18, 10_000),
                                                       int(Qt.TextFlag.TextWordWrap), self.title.text()).height()
        self.title.setFixedHeight(text_h + 8)  # + the style sheet's padding
        self.title.move(8, 6)

    def _cells_path(self, cells, grid: tuple[int, int]) -> QPainterPath:
        """Rectangles of the given patch cells in image pixels (over the crop)."""
        gh, gw = grid
        sy, sx = self._crop.height() / gh, self._crop.width() / gw
        path = QPainterPath()
        for r, c in cells:
            path.addRect(QRectF(self._crop.x() + c * sx, self._crop.y() + r * sy, sx, sy))
        return path

    def set_artefacts(self, cells: list[tuple[int, int]], grid: tuple[int, int] | None) -> None:
        """Outline the flagged (high-norm) patches; an empty list hides the outlines."""
        self.artefact_cells = list(cells)
        if not cells or grid is None:
            self.artefact_outline.setVisible(False)
            return
        self.artefact_outline.setPath(self._cells_path(cells, grid))
        self.artefact_outline.setVisible(True)

    def set_neutral(self, cells: list[tuple[int, int]], grid: tuple[int, int] | None) -> None:
        """Draw the given patches (left out of the colour scale) in the neutral grey at the map's opacity; an empty
        list hides them."""
        self.neutral_cells = list(cells)
        if not cells or grid is None:
            self.neutral_item.setVisible(False)
            return
        rgba = np.zeros(tuple(grid) + (4,), dtype=np.uint8)
        rows, cols = np.asarray(cells).T
        rgba[rows, cols, :3] = colormaps.NEUTRAL_RGB
        rgba[rows, cols, 3] = 255
        self.neutral_item.setImage(rgba, autoLevels=False, levels=(0, 255))
        self.neutral_item.setRect(self._crop)
        self.neutral_item.setVisible(True)

    def set_mask(self, mask: np.ndarray | None, style: str = "contour") -> None:
        """The top-mass mask (bool ``[gh, gw]``): the area outside it darkened ("dim") or its boundary drawn
        ("contour"); None hides it."""
        if mask is None:
            self.mask_item.setVisible(False)
            self.mask_outline.setVisible(False)
            return
        mask = np.asarray(mask, dtype=bool)
        if style == "dim":
            veil = np.zeros(mask.shape + (4,), dtype=np.uint8)
            veil[~mask, 3] = 170
            self.mask_item.setImage(veil, autoLevels=False, levels=(0, 255))
            self.mask_item.setRect(self._crop)
            self.mask_item.setVisible(True)
            self.mask_outline.setVisible(False)
            return
        self.mask_item.setVisible(False)
        self.mask_outline.setPath(mask_boundary(mask, self._crop))
        self.mask_outline.setVisible(True)

    def set_ground_truth(self, mask: np.ndarray | None) -> None:
        """The ground-truth object (bool ``[crop_h, crop_w]``, the model's input crop) outlined over the map; None
        hides it."""
        self._truth = mask
        if mask is None:
            self.truth_outline.setVisible(False)
            return
        self.truth_outline.setPath(mask_boundary(np.asarray(mask, dtype=bool), self._crop))
        self.truth_outline.setVisible(True)

    def set_colormap(self, name: str) -> None:
        if name == self._cmap_name:
            return
        self._cmap_name = name
        self.overlay_item.setLookupTable(colormaps.get_colormap(name))
        self.colorbar.set_colormap(name)

    def set_opacity(self, opacity: float) -> None:
        self.overlay_item.setOpacity(float(opacity))
        self.rgb_item.setOpacity(float(opacity))
        self.neutral_item.setOpacity(float(opacity))

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
            self._place_title()

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


def mask_boundary(mask: np.ndarray, crop: QRectF) -> QPainterPath:
    """The edges between kept and dropped cells of ``mask`` (bool ``[gh, gw]``, kept = True), and the kept cells'
    edges on the grid's border, as line segments in image pixels over ``crop``."""
    gh, gw = mask.shape
    sy, sx = crop.height() / gh, crop.width() / gw
    x0, y0 = crop.x(), crop.y()
    padded = np.pad(mask, 1)
    path = QPainterPath()
    # horizontal edges: between row r-1 and r (r = 0..gh), where the two sides differ
    for r, c in zip(*np.nonzero(padded[:-1, 1:-1] != padded[1:, 1:-1])):
        path.moveTo(x0 + c * sx, y0 + r * sy)
        path.lineTo(x0 + (c + 1) * sx, y0 + r * sy)
    for r, c in zip(*np.nonzero(padded[1:-1, :-1] != padded[1:-1, 1:])):
        path.moveTo(x0 + c * sx, y0 + r * sy)
        path.lineTo(x0 + c * sx, y0 + (r + 1) * sy)
    return path

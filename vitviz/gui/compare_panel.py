"""One panel of the Compare window (:mod:`vitviz.gui.compare_window`): its label, the map on the photo, the value
under the linked hover, and its own colour bar when it has its own scale."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QGraphicsRectItem, QLabel, QVBoxLayout, QWidget

from vitviz.document import comparison as cmp
from vitviz.gui.canvas import Canvas, outline
from vitviz.gui.mosaic import ScaleBar

MIN_PANEL = (170, 130)  # px: smaller panels scroll
HOVER_COLOR = QColor(255, 255, 255)


class ComparePanel(QWidget):
    """One panel: its label, the map on the photo (a :class:`~vitviz.gui.canvas.Canvas`), the value under the
    linked hover, and its own colour bar when it has its own scale.

    Signals:
        hovered(index, x, y): image pixel under the mouse (NaN: left the image).
        clicked(index, x, y): a left click at image pixel coordinates.
    """

    hovered = Signal(int, float, float)
    clicked = Signal(int, float, float)

    def __init__(self, index: int, parent=None):
        super().__init__(parent)
        self.index = index
        lay = QVBoxLayout(self)
        lay.setContentsMargins(1, 1, 1, 1)
        lay.setSpacing(1)
        self.label = QLabel("")
        self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.label.setStyleSheet("color: rgb(230, 230, 234);")
        self.canvas = Canvas()
        self.canvas.setMinimumSize(*MIN_PANEL)
        self.canvas.placeholder.setText("")
        self.canvas.title.setVisible(False)
        self.hover_marker = outline(QGraphicsRectItem(), HOVER_COLOR, 1.5, 3.5, dashed=True, visible=False)
        self.canvas.vb.addItem(self.hover_marker)
        self.value = QLabel(" ")
        self.value.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.value.setStyleSheet("color: rgb(190, 190, 196); font-size: 11px;")
        self.scale_bar = ScaleBar()
        lay.addWidget(self.label)
        lay.addWidget(self.canvas, 1)
        lay.addWidget(self.value)
        lay.addWidget(self.scale_bar)
        self.cell: cmp.Cell | None = None
        self._photo_id = None
        self.canvas.hovered.connect(lambda x, y: self.hovered.emit(self.index, x, y))
        self.canvas.clicked.connect(lambda x, y: self.clicked.emit(self.index, x, y))

    def show_cell(self, cell: cmp.Cell, *, own_bar: bool) -> None:
        """Draw ``cell`` (its map in its colour scale, the query patch where its view uses it, the mask)."""
        self.cell = cell
        p = cell.panel()  # what the panel shows, as the main canvas and the exported figure draw it
        r = cell.session.result
        if self._photo_id != id(r):
            self._photo_id = id(r)
            self.canvas.set_photo(p.photo)
            self.canvas.set_crop(*p.crop)
        self.canvas.set_opacity(p.opacity)
        text = cell.label or ""
        self.canvas.set_rgb(p.rgb, photo=p.photo_shown, opacity=p.opacity)
        if p.rgb is not None:  # a view in colours of its own (feature PCA)
            self.canvas.set_overlay(None)
            self.canvas.set_mask(p.mask, p.mask_style)
            self.label.setText(text)
        elif p.scale is None:
            why = p.unavailable or "not available"
            self.canvas.set_overlay(None)
            self.canvas.set_mask(None)
            self.label.setText(f"{text}: {why}" if text else why)
        else:
            self.canvas.set_colormap(p.scale.cmap)
            self.canvas.set_overlay(p.grid_values, p.scale, label=p.colorbar_label)
            self.canvas.set_mask(p.mask, p.mask_style)
            self.label.setText(text)
        self.label.setVisible(bool(self.label.text()))
        self.label.setToolTip(p.title)
        # the selected patch where the view uses it (as on the main canvas); the hover outline links every panel
        self.canvas.set_marker(p.marker if p.scale is not None else None)
        self.canvas.set_artefacts(list(p.outlined), p.grid)
        self.canvas.set_neutral(list(p.neutral), p.grid)
        self.scale_bar.setVisible(own_bar and p.scale is not None)
        if own_bar and p.scale is not None:
            self.scale_bar.set_scale(p.scale, p.colorbar_label)

    def forget(self) -> None:
        """Let go of the cell shown (its document and result)."""
        self.cell, self._photo_id = None, None

    def set_hover(self, patch: tuple[int, int] | None) -> float | None:
        """Outline ``patch`` (row, col) of this panel's grid (None hides it); returns the map's value there."""
        c = self.cell
        if c is None or patch is None:
            self.hover_marker.setVisible(False)
            self.value.setText(" ")
            return None
        r = c.session.result
        gh, gw = r.grid
        row, col = patch
        if not (0 <= row < gh and 0 <= col < gw):
            self.hover_marker.setVisible(False)
            self.value.setText(" ")
            return None
        self.hover_marker.setRect(QRectF(*c.session.patch_rect(row * gw + col)))
        self.hover_marker.setVisible(True)
        m = c.map
        if m is None:
            self.value.setText(f"patch ({row}, {col})")
            return None
        v = float(m[row, col])
        self.value.setText(f"patch ({row}, {col}): {v:.4g}")
        return v

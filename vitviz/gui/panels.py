"""Dock panels: controls, per-head thumbnails, plots, predictions.

Panels never own state: they emit the user's intent as signals and are refreshed by the main window from the
:class:`~vitviz.session.Session` (under a signal blocker, so a refresh never echoes back as a user action).
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView, QButtonGroup, QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGraphicsItem,
    QGroupBox, QHBoxLayout, QHeaderView, QLabel, QProgressBar, QRadioButton, QSlider, QSpinBox, QTableWidget,
    QTableWidgetItem, QTabWidget, QToolButton, QVBoxLayout, QWidget,
)

from vitviz import imaging
from vitviz.gui.canvas import highlight_rect
from vitviz.session import HEAD_REDUCTIONS, VIEWS

BACKGROUND = QColor(38, 38, 42)


# ====================================================================== mosaic helper
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
    ``per_tile=False`` (then one range for all). NaN becomes transparent. Vectorised over tiles."""
    m = np.asarray(maps, dtype=np.float32)
    finite = np.isfinite(m)
    if per_tile and vmin is None and vmax is None:
        big = np.where(finite, m, np.inf).reshape(len(m), -1).min(axis=1)
        small = np.where(finite, m, -np.inf).reshape(len(m), -1).max(axis=1)
        lo = np.where(np.isfinite(big), big, 0.0)[:, None, None]
        hi = np.where(np.isfinite(small), small, 1.0)[:, None, None]
    else:
        a, b = imaging.value_range(m, vmin, vmax)
        lo, hi = np.float32(a), np.float32(b)
    span = np.where(hi > lo, hi - lo, 1.0)
    with np.errstate(invalid="ignore"):
        n = np.clip((m - lo) / span, 0.0, 1.0)
    idx = np.round(np.nan_to_num(n, nan=0.0) * 255).astype(np.intp)
    out = imaging.get_colormap(cmap)[idx]
    if not finite.all():
        out[~finite, 3] = 0
    return out


def _upscale(rgba: np.ndarray, factor: int) -> np.ndarray:
    """Nearest upscaling of ``[..., h, w, C]`` by an integer factor."""
    if factor <= 1:
        return rgba
    return np.repeat(np.repeat(rgba, factor, axis=-3), factor, axis=-2)


# ====================================================================== controls
class ControlsPanel(QWidget):
    """View selector, layer slider, head selector, rollout options, display options."""

    viewChanged = Signal(str)
    layerChanged = Signal(int)
    headChanged = Signal(object)  # int or "mean"/"max"/"min"
    rolloutChanged = Signal(str, float, int)  # fusion, discard ratio, start layer
    colormapChanged = Signal(str)
    opacityChanged = Signal(float)
    interpolationChanged = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.setSpacing(8)

        views = QGroupBox("View")
        vl = QVBoxLayout(views)
        vl.setSpacing(2)
        self.view_group = QButtonGroup(self)
        self.view_buttons: dict[str, QRadioButton] = {}
        for i, v in enumerate(VIEWS):
            b = QRadioButton(f"&{i + 1}  {v.title}")
            b.setToolTip(f"{v.title} (key {i + 1})")
            self.view_group.addButton(b, i)
            self.view_buttons[v.key] = b
            vl.addWidget(b)
        self.view_buttons["cls"].setChecked(True)
        self.view_group.idClicked.connect(lambda i: self.viewChanged.emit(VIEWS[i].key))
        lay.addWidget(views)

        lh = QGroupBox("Layer and head")
        form = QFormLayout(lh)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        row = QHBoxLayout()
        self.layer_slider = QSlider(Qt.Orientation.Horizontal)
        self.layer_slider.setRange(0, 0)
        self.layer_slider.setPageStep(1)
        self.layer_slider.setTickPosition(QSlider.TickPosition.TicksBelow)
        self.layer_slider.setToolTip("Layer (Left/Right, Home/End)")
        self.layer_label = QLabel("0 / 0")
        self.layer_label.setMinimumWidth(52)
        self.layer_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        f = self.layer_label.font()
        f.setBold(True)
        self.layer_label.setFont(f)
        row.addWidget(self.layer_slider, 1)
        row.addWidget(self.layer_label)
        form.addRow("Layer", row)
        self.layer_slider.valueChanged.connect(self.layerChanged.emit)
        self.head_combo = QComboBox()
        self.head_combo.setToolTip("Head (Up/Down)")
        self.head_combo.currentIndexChanged.connect(self._on_head)
        form.addRow("Head", self.head_combo)
        lay.addWidget(lh)

        ro = QGroupBox("Rollout")
        rf = QFormLayout(ro)
        self.fusion_combo = QComboBox()
        self.fusion_combo.addItems(["mean", "max", "min"])
        self.fusion_combo.setToolTip("How the heads of a layer are fused (attention rollout)")
        self.discard_spin = QDoubleSpinBox()
        self.discard_spin.setRange(0.0, 0.99)
        self.discard_spin.setSingleStep(0.05)
        self.discard_spin.setDecimals(2)
        self.discard_spin.setToolTip("Fraction of the lowest patch attentions discarded per row")
        self.start_spin = QSpinBox()
        self.start_spin.setRange(0, 0)
        self.start_spin.setToolTip("First layer of the rollout / relevance product")
        rf.addRow("Head fusion", self.fusion_combo)
        rf.addRow("Discard ratio", self.discard_spin)
        rf.addRow("Start layer", self.start_spin)
        for w in (self.fusion_combo,):
            w.currentIndexChanged.connect(self._on_rollout)
        self.discard_spin.valueChanged.connect(self._on_rollout)
        self.start_spin.valueChanged.connect(self._on_rollout)
        self.rollout_box = ro
        lay.addWidget(ro)

        disp = QGroupBox("Display")
        df = QFormLayout(disp)
        self.cmap_combo = QComboBox()
        self.cmap_combo.addItems(imaging.colormap_names())
        self.cmap_combo.currentTextChanged.connect(self.colormapChanged.emit)
        self.opacity_slider = QSlider(Qt.Orientation.Horizontal)
        self.opacity_slider.setRange(0, 100)
        self.opacity_slider.valueChanged.connect(lambda v: self.opacityChanged.emit(v / 100.0))
        self.opacity_label = QLabel("60 %")
        self.opacity_label.setMinimumWidth(40)
        self.opacity_slider.valueChanged.connect(lambda v: self.opacity_label.setText(f"{v} %"))
        orow = QHBoxLayout()
        orow.addWidget(self.opacity_slider, 1)
        orow.addWidget(self.opacity_label)
        self.interp_combo = QComboBox()
        self.interp_combo.addItem("Patches (nearest)", "nearest")
        self.interp_combo.addItem("Smooth (bilinear)", "bilinear")
        self.interp_combo.currentIndexChanged.connect(
            lambda i: self.interpolationChanged.emit(self.interp_combo.itemData(i)))
        df.addRow("Colormap", self.cmap_combo)
        df.addRow("Opacity", orow)
        df.addRow("Interpolation", self.interp_combo)
        self.export_colorbar = QCheckBox("Colour bar in exports")
        self.export_caption = QCheckBox("Caption in exports")
        self.export_colorbar.setChecked(True)
        self.export_caption.setChecked(True)
        df.addRow(self.export_colorbar)
        df.addRow(self.export_caption)
        lay.addWidget(disp)
        lay.addStretch(1)

    def _on_head(self, i: int) -> None:
        data = self.head_combo.itemData(i)
        if data is not None:
            self.headChanged.emit(data)

    def _on_rollout(self, *_):
        self.rolloutChanged.emit(self.fusion_combo.currentText(), float(self.discard_spin.value()),
                                 int(self.start_spin.value()))

    def refresh(self, session) -> None:
        """Show the session's options (no signals are emitted)."""
        o = session.options
        r = session.result
        widgets = (self.view_group, self.layer_slider, self.head_combo, self.fusion_combo, self.discard_spin,
                   self.start_spin, self.cmap_combo, self.opacity_slider, self.interp_combo)
        for w in widgets:
            w.blockSignals(True)
        try:
            self.view_buttons[o.view].setChecked(True)
            lo, hi = session.layer_range()
            self.layer_slider.setRange(lo, hi)
            self.layer_slider.setValue(o.layer)
            if o.view == "token_sim":
                self.layer_label.setText("emb" if o.layer == 0 else f"{o.layer} / {hi}")
            else:
                self.layer_label.setText(f"{o.layer} / {hi}")
            nh = r.num_heads if r is not None else 0
            if self.head_combo.count() != nh + 3:
                self.head_combo.clear()
                for h in HEAD_REDUCTIONS:
                    self.head_combo.addItem(f"{h} of heads", h)
                for h in range(nh):
                    self.head_combo.addItem(f"head {h}", h)
            idx = self.head_combo.findData(o.head)
            if isinstance(o.head, int):
                idx = 3 + o.head
            self.head_combo.setCurrentIndex(max(idx, 0))
            self.fusion_combo.setCurrentText(o.head_fusion)
            self.discard_spin.setValue(o.discard_ratio)
            self.start_spin.setRange(0, max(0, (r.num_layers - 1) if r is not None else 0))
            self.start_spin.setValue(o.start_layer)
            self.cmap_combo.setCurrentText(o.cmap)
            self.opacity_slider.setValue(int(round(o.opacity * 100)))
            self.opacity_label.setText(f"{int(round(o.opacity * 100))} %")
            self.interp_combo.setCurrentIndex(max(0, self.interp_combo.findData(o.interpolation)))
            v = session.view
            self.layer_slider.setEnabled(v.uses_layer)
            self.head_combo.setEnabled(v.uses_head)
            self.rollout_box.setEnabled(v.uses_rollout_options)
            self.fusion_combo.setEnabled(o.view == "rollout")
            self.discard_spin.setEnabled(o.view in ("rollout", "grad_rollout"))
            self.start_spin.setEnabled(o.view in ("rollout", "relevance"))
        finally:
            for w in widgets:
                w.blockSignals(False)


# ====================================================================== heads
class HeadsPanel(QWidget):
    """Thumbnails of every head of the current layer, or the all-layers x all-heads grid.

    Signals:
        headSelected(layer, head)
    """

    headSelected = Signal(int, int)

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.setSpacing(2)
        top = QHBoxLayout()
        self.title = QLabel("Heads")
        self.grid_toggle = QToolButton()
        self.grid_toggle.setText("All layers")
        self.grid_toggle.setCheckable(True)
        self.grid_toggle.setToolTip("Show every layer x every head (click a tile to jump there)")
        top.addWidget(self.title, 1)
        top.addWidget(self.grid_toggle)
        lay.addLayout(top)
        self.mosaic = Mosaic()
        self.mosaic.setMinimumHeight(160)
        lay.addWidget(self.mosaic, 1)
        self.mosaic.tileClicked.connect(self._on_tile)
        self.grid_toggle.toggled.connect(lambda _: self.refresh(self._session) if self._session else None)
        self._session = None
        self._layer = 0
        self._key = None

    @property
    def all_layers(self) -> bool:
        return self.grid_toggle.isChecked()

    def _cols(self, n: int) -> int:
        return n if n <= 4 else max(1, int(math.ceil(math.sqrt(n))))

    def refresh(self, session, force: bool = False) -> None:
        self._session = session
        r = session.result
        if r is None:
            return
        o = session.options
        self._layer = o.layer if o.view != "token_sim" else max(0, min(o.layer - 1, r.num_layers - 1))
        q = session._thumb_query()
        qtext = "[CLS]" if q == 0 and r.num_prefix_tokens > 0 else f"patch {divmod(q - r.num_prefix_tokens, r.grid[1])}"
        key = (id(r), self.all_layers, self._layer if not self.all_layers else None, q, o.cmap)
        if key != self._key or force:
            self._key = key
            gh, gw = r.grid
            factor = max(1, int(round(24 / max(gh, gw))))
            if self.all_layers:
                maps = session.all_head_maps()
                L, H = maps.shape[:2]
                tiles = _upscale(colorize_tiles(maps.reshape(L * H, gh, gw), o.cmap), factor)
                self.mosaic.set_tiles(tiles, L, H, gap=max(2, (gh * factor) // 10))
                self.mosaic.set_axes([str(i) for i in range(L)], [str(h) for h in range(H)], "layer", "head")
                self.title.setText(f"All layers x heads · attention from {qtext}")
            else:
                maps = session.head_maps(self._layer)
                H = maps.shape[0]
                cols = self._cols(H)
                tiles = _upscale(colorize_tiles(maps, o.cmap), factor)
                self.mosaic.set_tiles(tiles, int(math.ceil(H / cols)), cols, gap=max(2, (gh * factor) // 10),
                                      labels=[f"h{h}" for h in range(H)])
                self.mosaic.set_axes(None, None)
                self.title.setText(f"Layer {self._layer} heads · attention from {qtext}")
        self._update_highlight(session)

    def _update_highlight(self, session) -> None:
        o = session.options
        if not isinstance(o.head, int) or not session.view.uses_head:
            self.mosaic.set_highlight(None)
            return
        if self.all_layers:
            self.mosaic.set_highlight(self._layer, o.head)
        else:
            self.mosaic.set_highlight(*divmod(o.head, self.mosaic.cols))

    def tile_center(self, layer: int, head: int) -> QPoint:
        """Position of a tile in this panel's coordinates (for tests)."""
        if self.all_layers:
            p = self.mosaic.tile_center(layer, head)
        else:
            p = self.mosaic.tile_center(*divmod(head, self.mosaic.cols))
        return self.mosaic.mapTo(self, p)

    def _on_tile(self, row: int, col: int) -> None:
        if self._session is None or self._session.result is None:
            return
        r = self._session.result
        if self.all_layers:
            layer, head = row, col
        else:
            layer, head = self._layer, row * self.mosaic.cols + col
        if 0 <= head < r.num_heads and 0 <= layer < r.num_layers:
            self.headSelected.emit(layer, head)


# ====================================================================== plots
class PlotsPanel(QTabWidget):
    """Mean attention distance, position-embedding similarity, patch-embedding filters, attention entropy.

    Signals:
        layerHeadSelected(layer, head): a point of the distance plot or a cell of the entropy map was clicked.
        patchSelected(index): a tile of the position-embedding grid was clicked.
    """

    layerHeadSelected = Signal(int, int)
    patchSelected = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setDocumentMode(True)
        # mean attention distance
        self.dist_widget = pg.PlotWidget(background=BACKGROUND)
        self.dist_plot = self.dist_widget.getPlotItem()
        self.dist_plot.setLabel("bottom", "layer")
        self.dist_plot.setLabel("left", "mean attention distance (px)")
        self.dist_plot.showGrid(x=True, y=True, alpha=0.25)
        self.dist_plot.setMenuEnabled(False)
        self.dist_scatter = pg.ScatterPlotItem(size=8, pen=pg.mkPen(None), hoverable=True,
                                               hoverPen=pg.mkPen("w", width=1.5), tip=None)
        self.dist_scatter.sigClicked.connect(self._on_point)
        # static per result: cache the rendering so moving the current-head ring does not repaint 100s of points
        self.dist_scatter.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.dist_plot.addItem(self.dist_scatter)
        self.dist_current = pg.ScatterPlotItem(size=15, pen=pg.mkPen((0, 230, 255), width=2),
                                               brush=pg.mkBrush(None))
        self.dist_plot.addItem(self.dist_current)
        self.addTab(self.dist_widget, "Distance")
        self.setTabToolTip(0, "Mean attention distance per layer and head (ViT paper, Fig. 7 right); click a point")
        # position embeddings
        self.pos_mosaic = Mosaic()
        self.pos_mosaic.tileClicked.connect(self._on_pos_tile)
        self.addTab(self.pos_mosaic, "Pos. embed")
        self.setTabToolTip(1, "Cosine similarity of position embeddings (Fig. 7 centre); click a tile to select the patch")
        # filters
        self.filter_mosaic = Mosaic()
        self.addTab(self.filter_mosaic, "Filters")
        self.setTabToolTip(2, "Principal components of the patch-embedding filters (Fig. 7 left)")
        # entropy
        self.ent_widget = pg.PlotWidget(background=BACKGROUND)
        self.ent_plot = self.ent_widget.getPlotItem()
        self.ent_plot.setMenuEnabled(False)
        self.ent_plot.setMouseEnabled(False, False)
        self.ent_plot.hideButtons()
        self.ent_plot.invertY(True)
        self.ent_plot.setLabel("bottom", "head")
        self.ent_plot.setLabel("left", "layer")
        self.ent_item = pg.ImageItem(axisOrder="row-major")
        self.ent_item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.ent_plot.addItem(self.ent_item)
        self.ent_bar = pg.ColorBarItem(values=(0, 1), colorMap=pg.colormap.get("viridis"), interactive=False,
                                       width=12, label="entropy (nats)")
        self.ent_bar.setImageItem(self.ent_item, insert_in=self.ent_plot)
        self.ent_current = highlight_rect(2.0)
        self.ent_plot.addItem(self.ent_current)
        self.ent_widget.scene().sigMouseClicked.connect(self._on_entropy_click)
        self.addTab(self.ent_widget, "Entropy")
        self.setTabToolTip(3, "Mean attention entropy per layer and head; click a cell")
        self._result_id = None
        self._shape = (0, 0)
        self._pos_grid = (0, 0)

    def refresh(self, session) -> None:
        r = session.result
        if r is None:
            return
        o = session.options
        if id(r) != self._result_id:
            self._result_id = id(r)
            self._fill(session)
        layer, head = o.layer, o.head
        if isinstance(head, int) and 0 <= layer < r.num_layers and session.view.uses_head:
            d = session.mean_distances()
            self.dist_current.setData([layer], [float(d[layer, head])])
            self.ent_current.setRect(QRectF(head, layer, 1, 1))
            self.ent_current.setVisible(True)
        else:
            self.dist_current.setData([], [])
            self.ent_current.setVisible(False)
        gw = r.grid[1]
        self.pos_mosaic.set_highlight(*divmod(o.query, gw)) if self._pos_grid != (0, 0) else None

    def _fill(self, session) -> None:
        r = session.result
        L, H = r.num_layers, r.num_heads
        self._shape = (L, H)
        d = session.mean_distances()
        xs, ys, data, brushes = [], [], [], []
        for h in range(H):
            color = pg.intColor(h, hues=max(H, 2), values=1, maxValue=230, minValue=150, sat=200)
            for layer in range(L):
                xs.append(layer + (h - (H - 1) / 2) * 0.25 / max(H, 1))
                ys.append(float(d[layer, h]))
                data.append((layer, h))
                brushes.append(pg.mkBrush(color))
        self.dist_scatter.setData(x=xs, y=ys, data=data, brush=brushes)
        self.dist_plot.setXRange(-0.5, L - 0.5, padding=0)
        ymax = float(np.nanmax(d)) if d.size else 1.0
        self.dist_plot.setYRange(0, ymax * 1.08 + 1e-9, padding=0)
        ax = self.dist_plot.getAxis("bottom")
        ax.setTicks([[(i, str(i)) for i in range(L)]])

        sim = session.pos_similarity()
        if sim is not None:
            gh, gw = sim.shape[:2]
            self._pos_grid = (gh, gw)
            factor = max(1, int(round(12 / max(gh, gw))))
            tiles = [_upscale(imaging.apply_colormap(sim[i, j], "viridis", -1.0, 1.0), factor)
                     for i in range(gh) for j in range(gw)]
            self.pos_mosaic.set_tiles(tiles, gh, gw, gap=1)
            step = max(1, gh // 7)
            self.pos_mosaic.set_axes([str(i) if i % step == 0 else "" for i in range(gh)],
                                     [str(j) if j % step == 0 else "" for j in range(gw)],
                                     "input patch row", "input patch column")
        else:
            self._pos_grid = (0, 0)
            self.pos_mosaic.item.clear()

        f = session.filters(28)
        if f is not None and f.shape[-1] in (1, 3):
            k, P = f.shape[0], f.shape[1]
            factor = max(1, int(round(32 / P)))
            tiles = []
            for t in f:
                rgb = np.clip(np.asarray(t) * 255.0, 0, 255).astype(np.uint8)
                if rgb.shape[-1] == 1:
                    rgb = np.repeat(rgb, 3, axis=-1)
                tiles.append(_upscale(rgb, factor))
            cols = 7 if k >= 14 else max(1, int(math.ceil(math.sqrt(k))))
            self.filter_mosaic.set_tiles(tiles, int(math.ceil(k / cols)), cols, gap=2)
        else:
            self.filter_mosaic.item.clear()

        e = session.entropies()
        self.ent_item.setImage(e, autoLevels=False, levels=(float(e.min()), float(e.max()) + 1e-12))
        self.ent_bar.setLevels((float(e.min()), float(e.max()) + 1e-12))
        self.ent_plot.setXRange(0, H, padding=0.02)
        self.ent_plot.setYRange(0, L, padding=0.02)
        self.ent_plot.getAxis("bottom").setTicks([[(h + 0.5, str(h)) for h in range(H)]])
        self.ent_plot.getAxis("left").setTicks([[(i + 0.5, str(i)) for i in range(L)]])

    def _on_point(self, _item, points, *args) -> None:
        if len(points):
            layer, head = points[0].data()
            self.layerHeadSelected.emit(int(layer), int(head))

    def _on_pos_tile(self, row: int, col: int) -> None:
        gh, gw = self._pos_grid
        if gw:
            self.patchSelected.emit(row * gw + col)

    def _on_entropy_click(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton:
            return
        p = self.ent_plot.getViewBox().mapSceneToView(ev.scenePos())
        L, H = self._shape
        layer, head = int(math.floor(p.y())), int(math.floor(p.x()))
        if 0 <= layer < L and 0 <= head < H:
            self.layerHeadSelected.emit(layer, head)


# ====================================================================== predictions
class PredictionsPanel(QWidget):
    """Top-5 classes; clicking one makes it the target of the gradient views.

    Signals:
        targetChosen(class_index)
    """

    targetChosen = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["Class", "Probability"])
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Fixed)
        self.table.setColumnWidth(1, 120)
        self.table.setToolTip("Click a class to make it the target of the gradient views")
        self.table.cellClicked.connect(self._on_click)
        lay.addWidget(self.table, 1)
        self.target_label = QLabel("Gradient target: –")
        self.target_label.setWordWrap(True)
        lay.addWidget(self.target_label)
        self._classes: list[int] = []

    def refresh(self, session, pending_target: int | None = None) -> None:
        r = session.result
        if r is None:
            return
        top = r.top_k(5)
        self._classes = [c for c, _, _ in top]
        self.table.blockSignals(True)
        self.table.setRowCount(len(top))
        for i, (c, label, p) in enumerate(top):
            item = QTableWidgetItem(f"{label}" if r.labels else f"class {c}")
            item.setToolTip(f"class index {c}")
            item.setData(Qt.ItemDataRole.UserRole, c)
            if c == r.target:
                f = item.font()
                f.setBold(True)
                item.setFont(f)
                item.setText(item.text() + "  ◀ target")
            self.table.setItem(i, 0, item)
            bar = QProgressBar()
            bar.setRange(0, 1000)
            bar.setValue(int(round(p * 1000)))
            bar.setFormat(f"{p * 100:.1f} %")
            bar.setTextVisible(True)
            self.table.setCellWidget(i, 1, bar)
        self.table.resizeRowsToContents()
        self.table.blockSignals(False)
        if pending_target is not None:
            self.target_label.setText(f"Computing gradients for {r.label(pending_target)}…")
        elif r.target is not None:
            top1 = " (top prediction)" if top and r.target == top[0][0] else ""
            self.target_label.setText(f"Gradient target: {r.label(r.target)}{top1}")
        else:
            self.target_label.setText("Gradient target: – (model has no classifier)")

    def row_center(self, row: int) -> QPoint:
        rect = self.table.visualItemRect(self.table.item(row, 0))
        return self.table.viewport().mapTo(self, rect.center())

    def _on_click(self, row: int, _col: int) -> None:
        if 0 <= row < len(self._classes):
            self.targetChosen.emit(self._classes[row])

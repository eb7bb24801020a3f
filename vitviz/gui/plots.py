"""The plots tab: mean attention distance, position-embedding similarity, patch-embedding filters, entropy."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtWidgets import QGraphicsItem, QTabWidget

from vitviz import imaging
from vitviz.gui.canvas import highlight_rect
from vitviz.gui.mosaic import BACKGROUND, Mosaic, upscale


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
        if isinstance(head, int) and 0 <= layer < r.num_layers and "head" in session.view.reads:
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
            tiles = [upscale(imaging.apply_colormap(sim[i, j], "viridis", -1.0, 1.0), factor)
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
                tiles.append(upscale(rgb, factor))
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

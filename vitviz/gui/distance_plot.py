"""The plots panel's Distance tab: the mean attention distance of every layer and head of the image on screen, with
a data set's statistics (the ``attention_stats.csv`` of ``vitviz stats``) beside it on request.

The y axis starts at 0 (a distance), the head colours are those of ``vitviz stats``' figure, the legend's columns
follow the plot's width, and the title says the precision the numbers were computed in.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFileDialog, QGraphicsItem, QLabel, QToolButton, QVBoxLayout, QWidget

from vitviz.gui.mosaic import BACKGROUND
from vitviz.gui.tab_pages import titled_page
from vitviz.render import colormaps

LEGEND_ENTRY = 62  # px a legend entry (marker and "h11") takes
ZERO_LABEL_PX = 9  # px below 0 on the distance plot: pyqtgraph drops the label of a tick on a gridded plot's edge
TITLE = "Mean attention distance per layer and head · this image"


def point_x(layer: int, head: int, heads: int) -> float:
    """Where head ``head``'s point of ``layer`` is drawn: the layer's heads side by side over a quarter of a layer."""
    return layer + (head - (heads - 1) / 2) * 0.25 / max(heads, 1)


class DistancePage(QWidget):
    """Mean attention distance per layer and head: one point per head and layer, the current head ringed.

    Signals:
        layerHeadSelected(layer, head): a point was clicked.
    """

    layerHeadSelected = Signal(int, int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.widget = pg.GraphicsLayoutWidget()
        self.widget.setBackground(BACKGROUND)
        self.plot = self.widget.addPlot(row=0, col=0, enableMenu=False)
        self.title = QLabel(TITLE)
        self.plot.setLabel("bottom", "layer")
        self.plot.setLabel("left", "distance (input px)")  # the title names the quantity
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.scatter = pg.ScatterPlotItem(size=8, pen=pg.mkPen(None), hoverable=True,
                                          hoverPen=pg.mkPen("w", width=1.5), tip=None)
        self.scatter.sigClicked.connect(self._on_point)
        # static per result: cache the rendering so moving the current-head ring does not repaint 100s of points
        self.scatter.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.plot.addItem(self.scatter)
        self.current = pg.ScatterPlotItem(size=15, pen=pg.mkPen((0, 230, 255), width=2), brush=pg.mkBrush(None))
        self.plot.addItem(self.current)
        self.legend = pg.LegendItem(colCount=4, horSpacing=6, verSpacing=-6, labelTextSize="8pt")
        self.widget.addItem(self.legend, row=1, col=0)
        self.legend_samples: list[pg.ScatterPlotItem] = []
        self.widget.installEventFilter(self)  # the legend's columns follow the plot's width
        self._top: float | None = None  # the y range's top: this image's largest distance, or the data set's
        self._image_top: float | None = None
        self._computed = ""  # " · computed in bf16": the precision of the result drawn
        self._shape = (0, 0)
        self._head_colors: list[QColor] = []
        # a data set's statistics (the attention_stats.csv of `vitviz stats`) beside this image's points
        self.dataset = None  # vitviz.batch.stats.DatasetStats
        self.dataset_path: str | None = None
        self.dataset_points = pg.ScatterPlotItem(size=8, brush=pg.mkBrush(None))
        self.dataset_line = pg.PlotDataItem(pen=pg.mkPen((235, 235, 235), width=1.5, style=Qt.PenStyle.DashLine))
        self.plot.addItem(self.dataset_line)
        self.plot.addItem(self.dataset_points)
        self.dataset_points.setZValue(-1)  # this image's points stay on top
        self._dataset_legend: list[str] = []
        self.dataset_button = QToolButton()
        self.dataset_button.setText("Dataset…")
        self.dataset_button.setToolTip("Open the attention_stats.csv of 'vitviz stats' to draw the data set's "
                                       "mean attention distance beside this image's")
        self.dataset_button.clicked.connect(self.open_dataset_dialog)
        self.dataset_clear = QToolButton()
        self.dataset_clear.setText("×")
        self.dataset_clear.setToolTip("Hide the data set's curve")
        self.dataset_clear.clicked.connect(self.clear_dataset)
        self.dataset_clear.setVisible(False)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(titled_page(self.title, self.widget, self.dataset_button, self.dataset_clear))

    def fill(self, distances: np.ndarray, computed: str) -> None:
        """Draw a result's ``[L, H]`` mean distances; ``computed`` ends the title (" · computed in bf16")."""
        d = distances
        L, H = d.shape
        self._computed, self._shape = computed, (L, H)
        xs, ys, data, brushes = [], [], [], []
        colors = [QColor(*rgb) for rgb in colormaps.head_colours(H)]  # as vitviz stats' figure
        for h in range(H):
            for layer in range(L):
                xs.append(point_x(layer, h, H))
                ys.append(float(d[layer, h]))
                data.append((layer, h))
                brushes.append(pg.mkBrush(colors[h]))
        self.scatter.setData(x=xs, y=ys, data=data, brush=brushes)
        self._fill_legend(colors)
        self.plot.setXRange(-0.5, L - 0.5, padding=0)
        self._top = (float(np.nanmax(d)) if d.size else 1.0) * 1.08 + 1e-9
        self._head_colors = colors
        self._image_top = self._top
        self._draw_dataset()
        self._y_range()
        self.plot.getAxis("bottom").setTicks([[(i, str(i)) for i in range(L)]])

    def mark(self, layer: int | None = None, distance: float = 0.0) -> None:
        """Ring the point of the current head (at ``layer``, ``distance``), or none."""
        self.current.setData([] if layer is None else [layer], [] if layer is None else [distance])

    def eventFilter(self, obj: QObject, ev: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if obj is self.widget and ev.type() == QEvent.Type.Resize:
            self._legend_columns()
            QTimer.singleShot(0, self._y_range)  # after the plot has its new height
        return super().eventFilter(obj, ev)

    def _y_range(self) -> None:
        """A distance: the y axis starts at 0 (never below, also after panning or zooming), with a few pixels under
        0 so that its "0" label is drawn."""
        top = self._top
        if top is None:
            return
        px = max(40.0, self.plot.getViewBox().height())
        below = top * ZERO_LABEL_PX / max(px - ZERO_LABEL_PX, 1.0)
        self.plot.setLimits(yMin=-below)
        self.plot.setYRange(-below, top, padding=0)

    def _legend_columns(self) -> None:
        """As many legend entries a row as fit the plot's width (a wider legend would clip the plot)."""
        n = max(1, len(self.legend_samples))
        cols = max(1, min(n, (self.widget.width() - 30) // LEGEND_ENTRY))
        if cols != self.legend.columnCount:
            self.legend.setColumnCount(cols)

    def _fill_legend(self, colors: list) -> None:
        """One legend entry per head colour, under the plot."""
        H = len(colors)
        if len(self.legend_samples) == H and all(
                s.opts["brush"].color() == c for s, c in zip(self.legend_samples, colors)):
            return
        self.legend.clear()
        self.legend_samples = []
        for h, c in enumerate(colors):
            sample = pg.ScatterPlotItem(size=8, pen=pg.mkPen(None), brush=pg.mkBrush(c))
            self.legend.addItem(sample, f"h{h}")
            self.legend_samples.append(sample)
        self._legend_columns()

    def legend_labels(self) -> list[str]:
        """The legend's entries (for tests)."""
        return [label.text for _sample, label in self.legend.items]

    def _on_point(self, _item, points, *args) -> None:
        if len(points):
            layer, head = points[0].data()
            self.layerHeadSelected.emit(int(layer), int(head))

    # ------------------------------------------------------------------ a data set's curve (vitviz stats)
    def open_dataset_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open data set statistics (vitviz stats)", self.dataset_path or "",
                                              "vitviz stats (attention_stats.csv *.csv);;All files (*)")
        if path:
            self.load_dataset(path)

    def load_dataset(self, path: str) -> bool:
        """Draw the statistics of ``path`` (an ``attention_stats.csv`` of ``vitviz stats``) beside this image's
        points: each head's mean over the images as a hollow marker in the head's colour, the mean of the heads as
        a dashed line. A file that cannot be read is named in the plot's title; the plot is left as it was."""
        from vitviz.batch.stats_files import read_stats_csv  # (csv, tqdm: not at start-up)

        try:
            stats = read_stats_csv(path)
        except ValueError as e:
            self.title.setText(f"<span style='color:#e05050'>Could not open the data set: {e}</span>")
            self.title.setToolTip(str(e))
            return False
        self.dataset, self.dataset_path = stats, str(path)
        self.dataset_clear.setVisible(True)
        self._draw_dataset()
        self._y_range()
        return True

    def clear_dataset(self) -> None:
        self.dataset = None
        self.dataset_clear.setVisible(False)
        self._draw_dataset()
        self._y_range()

    def dataset_curve(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The dashed line drawn (x = layers, y = the data set's mean over heads), or None (for tests)."""
        x, y = self.dataset_line.getData()
        return None if x is None or len(x) == 0 else (np.asarray(x), np.asarray(y))

    def _draw_dataset(self) -> None:
        """The data set's points and line (when its layers and heads are those of the shown model), the legend
        entries and the title that say what is drawn."""
        for name in self._dataset_legend:
            self.legend.removeItem(name)
        self._dataset_legend = []
        self.dataset_points.setData([], [])
        self.dataset_line.setData([], [])
        if self._image_top is not None:
            self._top = self._image_top
        base = f"{TITLE}{self._computed}"
        ds, shape = self.dataset, self._shape
        self.title.setToolTip("")
        if ds is None:
            self.title.setText(base)
            return
        name = f"{ds.images} image{'s' * (ds.images != 1)} of {ds.model}" + \
            (f" in {ds.precision}" if ds.precision else "")
        if (ds.num_layers, ds.num_heads) != tuple(shape):
            self.title.setText(f"{base} · the data set ({name}) has {ds.num_layers} layers x {ds.num_heads} "
                               f"heads, this model {shape[0]} x {shape[1]}: not drawn")
            return
        L, H = shape
        colors = self._head_colors or [pg.intColor(h, hues=max(H, 2)) for h in range(H)]
        xs, ys, pens = [], [], []
        for h in range(H):
            for layer in range(L):
                xs.append(point_x(layer, h, H))
                ys.append(float(ds.distance_mean[layer, h]))
                pens.append(pg.mkPen(colors[h], width=1.5))
        self.dataset_points.setData(x=xs, y=ys, pen=pens, brush=pg.mkBrush(None))
        self.dataset_line.setData(np.arange(L, dtype=float), ds.distance_mean.mean(axis=1))
        self.legend.addItem(self.dataset_line, "data set: mean of heads")
        hollow = pg.ScatterPlotItem(size=8, pen=pg.mkPen((200, 200, 200), width=1.5), brush=pg.mkBrush(None))
        self.legend.addItem(hollow, "data set: each head")
        self._dataset_legend = ["data set: mean of heads", "data set: each head"]
        self.title.setText(f"{base.replace(self._computed, '')} (filled){self._computed} · data set of "
                           f"{ds.images} image{'s' * (ds.images != 1)} (hollow: each head's mean; dashed: mean "
                           "of heads)")
        self.title.setToolTip(f"{self.dataset_path}: mean attention distance per layer and head over {name} "
                              "(the standard deviations over the images are in the CSV)")
        if self._top is not None:
            self._top = max(self._top, float(np.nanmax(ds.distance_mean)) * 1.08)

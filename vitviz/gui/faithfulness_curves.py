"""The Faithfulness tab's curves: deletion and insertion side by side, each map's curve and the random rankings'
mean ± standard deviation, one shared legend under them whose columns follow the width."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, QTimer
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QSizePolicy

from vitviz.gui.faithfulness_style import RANDOM_COLOR, view_color, view_name
from vitviz.gui.mosaic import BACKGROUND

AXIS_TEXT = {"probability": ("p(target class)", "the model's probability of the target class (softmax)"),
             "similarity": ("similarity", "the target's similarity score: the cosine similarity of the image's pooled "
                                          "embedding to the reference's (times the model's scale, plus its bias)"),
             "value": ("target value", "the value of the target function of the model's output")}
LEGEND_SAMPLE = 20  # px of a legend entry's line sample
LEGEND_SPACING = 10
LEGEND_MARGIN = 24  # px the plot layout adds around the legend's columns (measured: 18)
PLOT_MIN_HEIGHT = 240  # px: two plots, their axes and a two-row legend
EDGE = 0.03  # axis room beyond 0 and 1


class FaithfulnessCurves(pg.GraphicsLayoutWidget):
    """The deletion plot (:attr:`del_plot`), the insertion plot (:attr:`ins_plot`) and their :attr:`legend`;
    :meth:`draw` shows a :class:`~vitviz.evaluate.FaithfulnessTable`'s curves, :meth:`set_dimmed` dims them."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setBackground(BACKGROUND)
        self.setMinimumHeight(PLOT_MIN_HEIGHT)
        # whatever height is left (its 640 x 480 size hint would make the tab scroll in any dock)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        self.del_plot = self.addPlot(row=0, col=0, enableMenu=False)
        self.ins_plot = self.addPlot(row=0, col=1, enableMenu=False)
        for plot, mode, verb in ((self.del_plot, "Deletion", "removed"), (self.ins_plot, "Insertion", "revealed")):
            plot.setTitle(mode, size="9pt")
            plot.setLabel("bottom", f"fraction of patches {verb}", **{"font-size": "8pt"})
            for side in ("left", "bottom"):
                plot.getAxis(side).enableAutoSIPrefix(False)
                # the 0 and 1 labels at the ends are drawn (pyqtgraph drops them on a gridded plot: no grid)
                plot.getAxis(side).setStyle(hideOverlappingLabels=False)
            plot.setMouseEnabled(False, False)
            plot.hideButtons()
            plot.setXRange(-EDGE, 1 + EDGE, padding=0)  # a little room so that the 0 and 1 labels are drawn
        self._axis_label("probability")
        self.ins_plot.setYLink(self.del_plot)
        self._y_range(0.0, 1.0)
        self.legend = self._new_legend(1)
        self._legend_entries: list[tuple[Any, str]] = []
        self._curves: list[Any] = []  # items drawn for the shown table

    def set_dimmed(self, dimmed: bool) -> None:
        """Dim the curves (they are not the current image's, target's or options')."""
        for item in self._curves:
            item.setOpacity(0.3 if dimmed else 1.0)

    def draw(self, t) -> None:
        """The curves of the table ``t`` (:class:`~vitviz.evaluate.FaithfulnessTable`)."""
        for plot in (self.del_plot, self.ins_plot):
            plot.clear()
        self._legend_entries = []
        self._curves = []
        measure = getattr(t, "measure", "probability")
        self._axis_label(measure)
        top, bottom = 1e-6, 0.0
        for plot, rb in ((self.del_plot, t.random_deletion), (self.ins_plot, t.random_insertion)):
            mean = rb.scores.mean(0)
            sd = rb.scores.std(0, ddof=1) if rb.seeds > 1 else np.zeros_like(mean)
            low = np.clip(mean - sd, 0, None) if measure == "probability" else mean - sd
            bottom = min(bottom, float(np.min(low)))
            lo = pg.PlotCurveItem(rb.fractions, low, pen=pg.mkPen(None))
            hi = pg.PlotCurveItem(rb.fractions, mean + sd, pen=pg.mkPen(None))
            band = pg.FillBetweenItem(lo, hi, brush=pg.mkBrush(*RANDOM_COLOR, 60))
            line = pg.PlotDataItem(rb.fractions, mean, pen=pg.mkPen(RANDOM_COLOR, width=2,
                                                                    style=Qt.PenStyle.DashLine))
            for item in (lo, hi, band, line):
                plot.addItem(item)
                self._curves.append(item)
            top = max(top, float(np.max(mean + sd)))
            if plot is self.del_plot:
                random_line = line
        for i, v in enumerate(t.views):
            if v.deletion is None:
                continue
            pen = pg.mkPen(view_color(v.key, i), width=2)
            for plot, curve in ((self.del_plot, v.deletion), (self.ins_plot, v.insertion)):
                item = pg.PlotDataItem(curve.fractions, curve.scores, pen=pen)
                plot.addItem(item)
                self._curves.append(item)
                top = max(top, float(np.max(curve.scores)))
                bottom = min(bottom, float(np.min(curve.scores)))
                if plot is self.del_plot:
                    self._legend_entries.append((item, view_name(v.key, v.title)))
        self._legend_entries.append((random_line, "random ± sd"))
        self._set_legend(self._legend_columns_for(self.width()), force=True)
        if measure == "probability":
            self._y_range(0.0, min(1.0, top * 1.05))
        else:  # a similarity or a function's value: any range, 0 kept in view
            span = max(top - bottom, 1e-6)
            self._y_range(bottom - 0.05 * span if bottom < 0 else 0.0, top + 0.05 * span)
        self._fit_legend()

    def _y_range(self, bottom: float, top: float) -> None:
        """From ``bottom`` (with room for its label) to just above the highest point drawn (probabilities: from 0)."""
        self.del_plot.setYRange(bottom - EDGE * (top - bottom), top, padding=0)

    def _axis_label(self, measure: str) -> None:
        """The y axis says what the curves read: a probability, a similarity, a function's value."""
        text, tip = AXIS_TEXT.get(measure, AXIS_TEXT["value"])
        self.del_plot.setLabel("left", text, **{"font-size": "8pt"})
        self.del_plot.getAxis("left").setToolTip(tip)

    # ------------------------------------------------------------------ the legend
    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        QTimer.singleShot(0, self._fit_legend)

    def _new_legend(self, cols: int):
        legend = pg.LegendItem(colCount=cols, horSpacing=LEGEND_SPACING, verSpacing=-6, labelTextSize="8pt")
        self.addItem(legend, row=1, col=0, colspan=2)
        return legend

    def _set_legend(self, cols: int, force: bool = False) -> None:
        """A new legend of ``cols`` columns (pyqtgraph's ``setColumnCount`` keeps the old grid's width)."""
        if not force and cols == self.legend.columnCount:
            return
        self.removeItem(self.legend)
        self.legend = self._new_legend(cols)
        for item, name in self._legend_entries:
            self.legend.addItem(item, name)
        # lay the plots out again in the view's width (a wider legend before may have widened the layout)
        size = self.size()
        self.setRange(QRectF(0, 0, size.width(), size.height()), padding=0, disableAutoPixel=False)

    def _legend_columns_for(self, width: int) -> int:
        """The most columns whose entries (filled row by row) fit ``width`` px."""
        font = QFont(self.font())
        font.setPointSizeF(8.0)
        fm = QFontMetrics(font)
        w = [fm.horizontalAdvance(name) + LEGEND_SAMPLE + 3 * LEGEND_SPACING for _item, name in self._legend_entries]
        for cols in range(max(1, len(w)), 1, -1):
            if sum(max(w[j::cols]) for j in range(cols)) <= width - LEGEND_MARGIN:
                return cols
        return 1

    def _fit_legend(self) -> None:
        """As many legend entries a row as fit the width (a wider legend would widen the plots past the panel)."""
        if self._legend_entries:
            self._set_legend(self._legend_columns_for(self.width()))

"""The plots panel's "Faithfulness" tab: which map reflects what the model uses, measured on the image on screen.

For the current image and target, the deletion and insertion curves (:func:`vitviz.evaluate.evaluate_views`) of
last-layer [CLS] attention, rollout, gradient rollout, relevance, LeGrad and GradCAM, and of a few random rankings of
the patches (the floor any map must beat). The curves read the target's score: the probability of a class, the
similarity to a reference for a similarity target (so a feature model's curves follow the similarity), the value of a
function of the output. A table costs a few hundred forwards (seconds to tens of seconds), so it runs only
when asked (Run), on the controller's worker, with progress and Cancel; tables are kept per (image, target, model,
options), so going back to an image shows its table at once. A table that is not the current image's, target's or
options' is shown dimmed and says so. Clicking a row shows that row's map on the canvas. Under the table, the
localisation box (:mod:`vitviz.gui.localisation_box`): the image's ground-truth mask, its outline over the map and
each map's localisation scores.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetrics, QIcon, QPainter, QPen, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from vitviz import views
from vitviz.evaluate import view_options
from vitviz.gui.localisation_box import LocalisationBox
from vitviz.gui.mosaic import BACKGROUND
from vitviz.views.presets import CLS_LAST, FAITHFULNESS_VIEWS

EXPLAIN = ("Patches are ranked by each map and removed (deletion: replaced by the baseline, most salient first) or "
           "revealed (insertion: starting from the baseline image) a whole patch at a time; each curve is the target's "
           "score after each step (the model's probability of the target class; for a similarity target, the "
           "similarity to the reference), its area (AUC) the score. A faithful map makes the score fall fast when "
           "deleting (low AUC) and rise fast when inserting (high AUC). Random rankings of the patches are the floor "
           "(Petsiuk et al. 2018).")
VIEWS = FAITHFULNESS_VIEWS  # = vitviz.evaluate.DEFAULT_VIEWS (importing vitviz.evaluate imports torch)
SEEDS = 5  # random rankings per mode: a ViT-Ti/16 table is then ~350 forwards
STEPS = 20
BASELINES = ("mean", "blur")
BASELINE_TEXT = {"mean": "mean", "blur": "blur"}
PRESET_NAMES = {CLS_LAST: "[CLS], last layer"}
"""Short names of the presets among :data:`VIEWS` (a view's is its short title)."""
VIEW_COLORS = dict(zip(VIEWS, [(255, 170, 60), (90, 170, 255), (110, 220, 120), (240, 100, 200), (255, 230, 90),
                               (120, 230, 230)]))
"""The colours of the default views, in :data:`VIEWS`' order; others take :data:`OTHER_COLORS`."""
AXIS_TEXT = {"probability": ("p(target class)", "the model's probability of the target class (softmax)"),
             "similarity": ("similarity", "the target's similarity score: the cosine similarity of the image's pooled "
                                          "embedding to the reference's (times the model's scale, plus its bias)"),
             "value": ("target value", "the value of the target function of the model's output")}
OTHER_COLORS = [(250, 120, 110), (190, 150, 255), (200, 200, 120), (150, 200, 255)]
RANDOM_COLOR = (175, 175, 175)
BEST = "★"
LEGEND_SAMPLE = 20  # px of a legend entry's line sample
LEGEND_SPACING = 10
LEGEND_MARGIN = 24  # px the plot layout adds around the legend's columns (measured: 18)
PLOT_MIN_HEIGHT = 240  # px: two plots, their axes and a two-row legend
EDGE = 0.03  # axis room beyond 0 and 1
STALE_STYLE = "color: rgb(255, 190, 90);"
NOTE_STYLE = "color: rgb(200, 200, 200);"


def view_name(key: str, title: str = "") -> str:
    """A row's name in the plot's legend and the table: a default view's short title, else ``title``."""
    if key in PRESET_NAMES:
        return PRESET_NAMES[key]
    if key in VIEWS:
        v = views.get(key)
        return v.short_title or v.title
    return title or key


def view_color(key: str, index: int) -> tuple[int, int, int]:
    return VIEW_COLORS.get(key, OTHER_COLORS[index % len(OTHER_COLORS)])


def forwards_estimate(steps: int, views: int, seeds: int) -> int:
    """Perturbed images of a table: a deletion and an insertion curve of ``steps + 1`` points per map and per
    random ranking, less the shared end points (the whole image and the all-baseline image, evaluated once)."""
    return 2 * (steps - 1) * (views + seeds) + 2


def _swatch(rgb: tuple[int, int, int], dashed: bool = False) -> QIcon:
    pm = QPixmap(14, 14)
    pm.fill(QColor(0, 0, 0, 0))
    p = QPainter(pm)
    pen = QPen(QColor(*rgb), 3)
    if dashed:
        pen.setStyle(Qt.PenStyle.DashLine)
    p.setPen(pen)
    p.drawLine(1, 7, 13, 7)
    p.end()
    return QIcon(pm)


class FaithfulnessPanel(QWidget):
    """The Faithfulness tab.

    Call :meth:`attach` once with the window's :class:`~vitviz.gui.controller.Controller` and :meth:`refresh` with
    the session whenever what is shown changes.

    Signals:
        viewRequested(view, changes): a row was clicked: show ``view`` with the option ``changes`` (the options the
            row's map was computed with, :func:`vitviz.evaluate.view_options`).
    """

    viewRequested = Signal(str, dict)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.controller = None
        self.session = None
        self.seeds = SEEDS
        self.shown_key: tuple | None = None
        self.shown: Any = None  # the FaithfulnessTable on screen
        self.current_key: tuple | None = None
        self.unavailable: str = "open an image first"
        self._note = ""  # what happened last (cancelled, failed), until the next run or table
        self._progress = (0, 0)
        self._row_keys: list[str | None] = []

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self.scroll = QScrollArea()  # a short dock scrolls the tab rather than squeezing the table or the plots
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        outer.addWidget(self.scroll)
        body = QWidget()
        self.scroll.setWidget(body)
        lay = QVBoxLayout(body)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.setSpacing(3)

        row = QHBoxLayout()
        row.setSpacing(4)
        self.steps_spin = QSpinBox()
        self.steps_spin.setRange(1, 196)
        self.steps_spin.setValue(STEPS)
        self.steps_spin.setToolTip("Steps per curve (the patches are removed or revealed in this many steps)")
        self.baseline_combo = QComboBox()
        for b in BASELINES:
            self.baseline_combo.addItem(BASELINE_TEXT[b], b)
        self.baseline_combo.setToolTip("What a removed patch is replaced by: the normalisation mean (a flat grey) or "
                                       "the image blurred with sigma = one patch")
        self.precision_combo = QComboBox()
        self.precision_combo.addItem("Precision: fp32 (as vitviz evaluate)", "fp32")
        self.precision_combo.addItem("Precision: the window's", "window")
        self.precision_combo.setToolTip("fp32: the numbers of vitviz evaluate for this image (a window in bf16 runs "
                                        "the image again in fp32 for the table); the window's precision: from the "
                                        "maps on screen (bf16 numbers differ in the second or third digit)")
        self.precision_combo.currentIndexChanged.connect(lambda _i: self._sync())
        self.run_button = QPushButton("Run")
        self.run_button.setToolTip("Measure the curves for the image and target on screen")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the measurement")
        for w in (QLabel("Steps"), self.steps_spin, QLabel("Baseline"), self.baseline_combo):
            row.addWidget(w)
        row.addStretch(1)
        lay.addLayout(row)
        lay.addWidget(self.precision_combo, 0, Qt.AlignmentFlag.AlignLeft)
        prow = QHBoxLayout()  # Run, and while running the progress and Cancel (two short rows fit a narrow dock)
        prow.setSpacing(4)
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.progress.setMaximumHeight(18)
        self.progress.setMinimumWidth(40)
        prow.addWidget(self.run_button)
        prow.addWidget(self.progress, 1)
        prow.addWidget(self.cancel_button)
        prow.addStretch(0)
        lay.addLayout(prow)

        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setToolTip(EXPLAIN)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.status)

        # the AUC table: every row in view (its height follows the rows)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["Map", "Deletion\nAUC ↓", "Insertion\nAUC ↑"])
        hh = self.table.horizontalHeader()
        hh.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        hh.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        hh.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeaderItem(1).setToolTip("Area under the deletion curve: lower is better")
        self.table.horizontalHeaderItem(2).setToolTip("Area under the insertion curve: higher is better")
        self.table.verticalHeader().setVisible(False)
        self.table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(False)
        self.table.cellClicked.connect(self._on_row)
        lay.addWidget(self.table)
        self.table_note = QLabel(f"↓ lower is better, ↑ higher · {BEST} best · grey: no better than random · "
                                 "click a row to show its map")
        self.table_note.setWordWrap(True)
        self.table_note.setStyleSheet(NOTE_STYLE)
        lay.addWidget(self.table_note)
        self._fit_table(len(VIEWS) + 1)
        self.localisation = LocalisationBox()  # ground truth: the object's outline and each map's scores
        lay.addWidget(self.localisation)

        # the curves: deletion and insertion side by side, one shared legend under them
        self.plot_widget = pg.GraphicsLayoutWidget()
        self.plot_widget.setBackground(BACKGROUND)
        self.plot_widget.setMinimumHeight(PLOT_MIN_HEIGHT)
        # whatever height is left (its 640 x 480 size hint would make the tab scroll in any dock)
        self.plot_widget.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        self.del_plot = self.plot_widget.addPlot(row=0, col=0)
        self.ins_plot = self.plot_widget.addPlot(row=0, col=1)
        for plot, mode, verb in ((self.del_plot, "Deletion", "removed"), (self.ins_plot, "Insertion", "revealed")):
            plot.setTitle(mode, size="9pt")
            plot.setLabel("bottom", f"fraction of patches {verb}", **{"font-size": "8pt"})
            for side in ("left", "bottom"):
                plot.getAxis(side).enableAutoSIPrefix(False)
                # the 0 and 1 labels at the ends are drawn (pyqtgraph drops them on a gridded plot: no grid)
                plot.getAxis(side).setStyle(hideOverlappingLabels=False)
            plot.setMenuEnabled(False)
            plot.setMouseEnabled(False, False)
            plot.hideButtons()
            plot.setXRange(-EDGE, 1 + EDGE, padding=0)  # a little room so that the 0 and 1 labels are drawn
        self._axis_label("probability")
        self.ins_plot.setYLink(self.del_plot)
        self._y_range(0.0, 1.0)
        self.legend = self._new_legend(1)
        self._legend_entries: list[tuple[Any, str]] = []
        self.plot_widget.installEventFilter(self)
        self._curves: list[Any] = []  # items drawn for the shown table
        lay.addWidget(self.plot_widget, 1)

        self.run_button.clicked.connect(self.run)
        self.cancel_button.clicked.connect(self.cancel)
        self.steps_spin.valueChanged.connect(lambda _v: self._sync())
        self.baseline_combo.currentIndexChanged.connect(lambda _i: self._sync())
        self._sync()

    # ------------------------------------------------------------------ wiring
    def attach(self, controller) -> None:
        """Use ``controller`` for the jobs and the kept tables."""
        self.controller = controller
        controller.evaluationReady.connect(self._on_ready)
        controller.evaluationProgress.connect(self._on_progress)
        controller.evaluationStopped.connect(self._on_stopped)
        controller.failed.connect(self._on_failed)
        controller.modelChanged.connect(lambda _note: self._sync())
        controller.busy.connect(lambda _text, _cancellable: self._sync())  # a model load starts or stops

    @property
    def steps(self) -> int:
        return int(self.steps_spin.value())

    @property
    def baseline(self) -> str:
        return str(self.baseline_combo.currentData())

    @property
    def precision(self) -> str:
        """``"fp32"`` (as ``vitviz evaluate``, the default) or ``"window"`` (the window's precision)."""
        return str(self.precision_combo.currentData())

    def refresh(self, session) -> None:
        """The image, target or view on screen changed."""
        self.session = session
        self._sync()

    # ------------------------------------------------------------------ actions
    def run(self) -> None:
        """Measure the table of the image on screen (at once from the kept tables when it was measured before)."""
        c, r = self.controller, self._result()
        if c is None or r is None:
            return
        self._note = ""
        self._progress = (0, self._forwards())
        c.evaluate(r, steps=self.steps, baseline=self.baseline, seeds=self.seeds, precision=self.precision)
        self._sync()

    def cancel(self) -> None:
        if self.controller is not None:
            self.controller.cancel_evaluation()

    # ------------------------------------------------------------------ controller signals
    def _on_ready(self, key: tuple, table: Any) -> None:
        self._note = ""
        self._show(key, table)
        self._sync()

    def _on_progress(self, done: int, total: int) -> None:
        self._progress = (done, total)
        self._sync()

    def _on_stopped(self, _key: tuple, why: str) -> None:
        if why != "failed":
            self._note = ("Cancelled." if why == "cancelled" else f"Stopped: {why}.") + " Press Run to start again."
        self._sync()

    def _on_failed(self, kind: str, _title: str, message: str, _detail: str, _subject: str) -> None:
        if kind == "evaluate":
            first = message.strip().splitlines()
            self._note = f"Could not measure: {first[-1] if first else 'unknown error'}"
        self._sync()

    # ------------------------------------------------------------------ state
    def _result(self):
        return None if self.session is None else self.session.result

    def _sync(self) -> None:
        """Buttons, progress, status line and the shown table from the controller's state and the session."""
        c, r = self.controller, self._result()
        if c is None:
            key, why = None, "not connected to a model"
        else:
            key, why = c.evaluation_key(r, steps=self.steps, baseline=self.baseline, seeds=self.seeds,
                                        precision=self.precision)
        self.current_key, self.unavailable = key, why
        if key is not None and key != self.shown_key and key in c.evaluations:
            self._show(key, c.evaluations[key])  # measured before: at once, no job
        running = c is not None and c.evaluating is not None
        self.run_button.setEnabled(key is not None and (c.evaluating != key))
        self.cancel_button.setVisible(running)
        self.progress.setVisible(running)
        if running:
            done, total = self._progress
            self.progress.setRange(0, max(total, 1))
            self.progress.setValue(min(done, max(total, 1)))
            self.progress.setFormat(f"{done} / {total} images" if total else "starting…")
        stale = self.shown is not None and self.shown_key != key
        self._set_stale(stale)
        self.status.setStyleSheet(STALE_STYLE if stale or key is None else "")
        self.status.setText(self._status_text(key, why, running, stale))
        self.localisation.update_for(self._result(), None if stale else self.shown, view_name)
        self._select_current_row()

    def _status_text(self, key, why: str, running: bool, stale: bool) -> str:
        c = self.controller
        parts = []
        if key is None:
            parts.append(f"Not available: {why}." if why else "Not available.")
        elif running and c.evaluating == key:
            parts.append(f"Measuring {self._forwards()} perturbed images…")
        elif not stale and self.shown is not None:
            t = self.shown
            score = (f"{t.label} (p = {t.probability:.2f})" if t.target is not None
                     else f"{t.label} ({t.measure} {t.probability:.2f})")
            parts.append(f"Target {score} · {t.random_deletion.seeds} random rankings")
            prec = c.evaluated_in.get(key, "")
            if prec:
                parts.append(f"· computed in {prec}." + (" (as vitviz evaluate)" if prec == "fp32" else
                             " (vitviz evaluate runs fp32: its numbers differ in the second or third digit; "
                             "choose the fp32 precision to match them.)"))
        else:
            what = "image and target" if self.shown is None else _what_changed(self.shown_key, key)
            parts.append(f"Not measured for this {what} yet: press Run (about {self._forwards()} model forwards).")
        if running and key is not None and c.evaluating != key:
            parts.append("Measuring another image, target or options meanwhile.")
        if stale:
            t = self.shown
            parts.append(f"The table shown is for {Path(t.source).name} · {t.label} · {t.steps} steps · "
                         f"{t.baseline} baseline.")
        if self._note:
            parts.append(self._note)
        return " ".join(parts)

    def _forwards(self) -> int:
        return forwards_estimate(self.steps, len(VIEWS), self.seeds)

    def _set_stale(self, stale: bool) -> None:
        self.table.setEnabled(not stale and self.shown is not None)
        for item in self._curves:
            item.setOpacity(0.3 if stale else 1.0)

    # ------------------------------------------------------------------ drawing
    def _show(self, key: tuple, table: Any) -> None:
        self.shown_key, self.shown = key, table
        self._draw_curves(table)
        self._fill_table(table)

    def _draw_curves(self, t) -> None:
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
        self._set_legend(self._legend_columns_for(self.plot_widget.width()), force=True)
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

    def _fit_table(self, rows: int) -> None:
        """The table as tall as its header and ``rows`` rows: every row in view, no scroll bar."""
        vh = self.table.verticalHeader()
        h = sum(vh.sectionSize(i) for i in range(self.table.rowCount())) if self.table.rowCount() else 0
        h += max(0, rows - self.table.rowCount()) * vh.defaultSectionSize()
        hh = self.table.horizontalHeader().sizeHint().height()
        self.table.setFixedHeight(hh + h + 2 * self.table.frameWidth() + 2)

    def _fill_table(self, t) -> None:
        best_del, best_ins = t.best()
        rows = list(t.views)
        self.table.blockSignals(True)
        self.table.clearContents()
        self.table.setRowCount(len(rows) + 1)
        self._row_keys = []
        bold = QFont(self.table.font())
        bold.setBold(True)
        rd, ri = t.random_deletion, t.random_insertion
        for i, v in enumerate(rows):
            name = QTableWidgetItem(view_name(v.key, v.title))
            name.setIcon(_swatch(view_color(v.key, i)))
            name.setToolTip(f"{v.title}: click to show this map" if v.unavailable is None
                            else f"{v.title}: {v.unavailable}")
            self.table.setItem(i, 0, name)
            if v.unavailable is not None or v.deletion is None:
                for col in (1, 2):
                    item = QTableWidgetItem("—")
                    item.setToolTip(v.unavailable or "no map")
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                    self.table.setItem(i, col, item)
                self._row_keys.append(None)
                continue
            self._row_keys.append(v.key)
            for col, auc, best, rand, lower in ((1, v.deletion_auc, best_del, rd, True),
                                                (2, v.insertion_auc, best_ins, ri, False)):
                is_best = v.key == best
                item = QTableWidgetItem(f"{auc:.3f}" + (f" {BEST}" if is_best else ""))
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if is_best:
                    item.setFont(bold)
                gap = (rand.auc_mean - auc) if lower else (auc - rand.auc_mean)
                sds = gap / rand.auc_std if rand.auc_std > 0 else math.copysign(math.inf, gap) if gap else 0.0
                verdict = ("better than" if gap > 0 else "no better than")
                item.setToolTip(f"{'deletion' if lower else 'insertion'} AUC {auc:.4f}"
                                f"{' (best of the maps)' if is_best else ''}: {verdict} random rankings "
                                f"({rand.auc_mean:.4f} ± {rand.auc_std:.4f}; {sds:+.1f} sd)")
                if gap <= 0:
                    item.setForeground(QBrush(QColor(150, 150, 150)))
                item.setData(Qt.ItemDataRole.UserRole, is_best)
                self.table.setItem(i, col, item)
        n = len(rows)
        name = QTableWidgetItem(f"Random ({rd.seeds})")
        name.setIcon(_swatch(RANDOM_COLOR, dashed=True))
        name.setToolTip(f"The same curves for {rd.seeds} random rankings of the patches (mean ± standard "
                        "deviation): the floor any map must beat")
        self.table.setItem(n, 0, name)
        for col, rb in ((1, rd), (2, ri)):
            item = QTableWidgetItem(f"{rb.auc_mean:.3f}\n± {rb.auc_std:.3f}")  # two lines: a narrow dock
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            item.setToolTip(f"mean ± standard deviation over {rb.seeds} random rankings")
            self.table.setItem(n, col, item)
        self._row_keys.append(None)
        self.table.resizeRowsToContents()
        self._fit_table(self.table.rowCount())
        self.table.blockSignals(False)

    def _select_current_row(self) -> None:
        """Select the row whose map the canvas shows (none when it shows another)."""
        s, r = self.session, self._result()
        self.table.blockSignals(True)
        self.table.clearSelection()
        if s is not None and r is not None and self.shown is not None and self.shown_key == self.current_key:
            o = s.options
            for i, k in enumerate(self._row_keys):
                if k is None:
                    continue
                view, changes = view_options(k, r.num_layers)
                if o.view == view and all(getattr(o, n) == val for n, val in changes.items()):
                    self.table.selectRow(i)
                    break
        self.table.blockSignals(False)

    # ------------------------------------------------------------------ events
    def _on_row(self, row: int, _col: int) -> None:
        r = self._result()
        if r is None or self.shown_key != self.current_key or not 0 <= row < len(self._row_keys):
            return
        key = self._row_keys[row]
        if key is None:
            return
        view, changes = view_options(key, r.num_layers)
        self.viewRequested.emit(view, changes)

    def eventFilter(self, obj, ev) -> bool:
        if obj is self.plot_widget and ev.type() == QEvent.Type.Resize:
            QTimer.singleShot(0, self._fit_legend)
        return super().eventFilter(obj, ev)

    def _new_legend(self, cols: int):
        legend = pg.LegendItem(colCount=cols, horSpacing=LEGEND_SPACING, verSpacing=-6, labelTextSize="8pt")
        self.plot_widget.addItem(legend, row=1, col=0, colspan=2)
        return legend

    def _set_legend(self, cols: int, force: bool = False) -> None:
        """A new legend of ``cols`` columns (pyqtgraph's ``setColumnCount`` keeps the old grid's width)."""
        if not force and cols == self.legend.columnCount:
            return
        self.plot_widget.removeItem(self.legend)
        self.legend = self._new_legend(cols)
        for item, name in self._legend_entries:
            self.legend.addItem(item, name)
        # lay the plots out again in the view's width (a wider legend before may have widened the layout)
        size = self.plot_widget.size()
        self.plot_widget.setRange(QRectF(0, 0, size.width(), size.height()), padding=0, disableAutoPixel=False)

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
            self._set_legend(self._legend_columns_for(self.plot_widget.width()))

    # ------------------------------------------------------------------ for tests
    def cell_text(self, row: int, col: int) -> str:
        item = self.table.item(row, col)
        return "" if item is None else item.text()

    def row_center(self, row: int):
        rect = self.table.visualItemRect(self.table.item(row, 0))
        return rect.center()


def _what_changed(old: tuple | None, new: tuple) -> str:
    """Which part of the key differs: "image", "target", "model", "precision" or "options" (key: digest, source,
    target, generation, steps, baseline, seeds, precision)."""
    if old is None:
        return "image and target"
    for part, name in ((slice(0, 2), "image"), (2, "target"), (3, "model"), (7, "precision")):
        if old[part] != new[part]:
            return name
    return "steps and baseline"

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

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from vitviz.evaluate import view_options
from vitviz.gui.faithfulness_curves import FaithfulnessCurves
from vitviz.gui.faithfulness_style import VIEWS, view_name
from vitviz.gui.faithfulness_table import BEST, AucTable
from vitviz.gui.localisation_box import LocalisationBox

EXPLAIN = ("Patches are ranked by each map and removed (deletion: replaced by the baseline, most salient first) or "
           "revealed (insertion: starting from the baseline image) a whole patch at a time; each curve is the target's "
           "score after each step (the model's probability of the target class; for a similarity target, the "
           "similarity to the reference), its area (AUC) the score. A faithful map makes the score fall fast when "
           "deleting (low AUC) and rise fast when inserting (high AUC). Random rankings of the patches are the floor "
           "(Petsiuk et al. 2018).")
SEEDS = 5  # random rankings per mode: a ViT-Ti/16 table is then ~350 forwards
STEPS = 20
BASELINES = ("mean", "blur")
BASELINE_TEXT = {"mean": "mean", "blur": "blur"}
STALE_STYLE = "color: rgb(255, 190, 90);"
NOTE_STYLE = "color: rgb(200, 200, 200);"


def forwards_estimate(steps: int, views: int, seeds: int) -> int:
    """Perturbed images of a table: a deletion and an insertion curve of ``steps + 1`` points per map and per
    random ranking, less the shared end points (the whole image and the all-baseline image, evaluated once)."""
    return 2 * (steps - 1) * (views + seeds) + 2


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
        self.table = AucTable()
        self.table.cellClicked.connect(self._on_row)
        lay.addWidget(self.table)
        self.table_note = QLabel(f"↓ lower is better, ↑ higher · {BEST} best · grey: no better than random · "
                                 "click a row to show its map")
        self.table_note.setWordWrap(True)
        self.table_note.setStyleSheet(NOTE_STYLE)
        lay.addWidget(self.table_note)
        self.table.fit(len(VIEWS) + 1)
        self.localisation = LocalisationBox()  # ground truth: the object's outline and each map's scores
        lay.addWidget(self.localisation)

        # the curves: deletion and insertion side by side, one shared legend under them
        self.plot_widget = FaithfulnessCurves()
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
        jobs = controller.faithfulness
        jobs.ready.connect(self._on_ready)
        jobs.progress.connect(self._on_progress)
        jobs.stopped.connect(self._on_stopped)
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
        c.faithfulness.evaluate(r, steps=self.steps, baseline=self.baseline, seeds=self.seeds, precision=self.precision)
        self._sync()

    def cancel(self) -> None:
        if self.controller is not None:
            self.controller.faithfulness.cancel()

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
            key, why = c.faithfulness.key(r, steps=self.steps, baseline=self.baseline, seeds=self.seeds,
                                          precision=self.precision)
        self.current_key, self.unavailable = key, why
        if key is not None and key != self.shown_key and key in c.faithfulness.tables:
            self._show(key, c.faithfulness.tables[key])  # measured before: at once, no job
        running = c is not None and c.faithfulness.running is not None
        self.run_button.setEnabled(key is not None and (c.faithfulness.running != key))
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
        elif running and c.faithfulness.running == key:
            parts.append(f"Measuring {self._forwards()} perturbed images…")
        elif not stale and self.shown is not None:
            t = self.shown
            score = (f"{t.label} (p = {t.probability:.2f})" if t.target is not None
                     else f"{t.label} ({t.measure} {t.probability:.2f})")
            parts.append(f"Target {score} · {t.random_deletion.seeds} random rankings")
            prec = c.faithfulness.measured_in.get(key, "")
            if prec:
                parts.append(f"· computed in {prec}." + (" (as vitviz evaluate)" if prec == "fp32" else
                             " (vitviz evaluate runs fp32: its numbers differ in the second or third digit; "
                             "choose the fp32 precision to match them.)"))
        else:
            what = "image and target" if self.shown is None else _what_changed(self.shown_key, key)
            parts.append(f"Not measured for this {what} yet: press Run (about {self._forwards()} model forwards).")
        if running and key is not None and c.faithfulness.running != key:
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
        self.plot_widget.set_dimmed(stale)

    # ------------------------------------------------------------------ drawing
    def _show(self, key: tuple, table: Any) -> None:
        self.shown_key, self.shown = key, table
        self.plot_widget.draw(table)
        self.table.fill(table)

    def _select_current_row(self) -> None:
        """Select the row whose map the canvas shows (none when it shows another)."""
        s, r = self.session, self._result()
        shows = None
        if s is not None and r is not None and self.shown is not None and self.shown_key == self.current_key:
            o = s.options

            def shows(k: str) -> bool:
                view, changes = view_options(k, r.num_layers)
                return o.view == view and all(getattr(o, n) == val for n, val in changes.items())
        self.table.select_row_of(shows)

    # ------------------------------------------------------------------ events
    def _on_row(self, row: int, _col: int) -> None:
        r = self._result()
        if r is None or self.shown_key != self.current_key or not 0 <= row < len(self.table.row_keys):
            return
        key = self.table.row_keys[row]
        if key is None:
            return
        view, changes = view_options(key, r.num_layers)
        self.viewRequested.emit(view, changes)

    # ------------------------------------------------------------------ for tests
    def cell_text(self, row: int, col: int) -> str:
        return self.table.cell_text(row, col)

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

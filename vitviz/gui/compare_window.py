"""The Compare window: a grid of maps side by side (:mod:`vitviz.document.comparison`), linked to the main window.

A window of its own rather than a mode of the main window: the main window keeps its canvas, docks and view while
the grid takes a whole (second) screen, and both stay live. The grid follows the main window's options (layer,
head, query patch, colormap, opacity, scale options, mask ...) and its image and target: every change there redraws
it. Hovering a panel outlines the same patch in every panel and shows each panel's value there; clicking a patch
selects it as the query patch in every panel and in the main window. Panels of one view share a colour scale (or
each has its own); the grid exports as one figure (PNG / SVG / PDF) through :mod:`vitviz.render.figures`, carrying the
session's state (the comparison included) in its metadata.

Other images (``"views"`` layout) and other classes (``"classes"``) are run on the window's worker with the main
window's model (kind ``"compare"``, a batch at a time); the newest :data:`KEEP_RESULTS` results (more while the grid
needs more) are kept until the model changes or the window closes. Closing the window frees what it holds (its
results, their map caches, its panels); opening it again analyses what it needs again.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QGridLayout,
    QLabel,
    QMainWindow,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from vitviz.document import comparison as cmp
from vitviz.document.appearance import quantity_text
from vitviz.document.session import Session
from vitviz.gui.compare_bar import CompareBar, default_spec
from vitviz.gui.compare_panel import ComparePanel
from vitviz.gui.controller import Controller
from vitviz.gui.export_service import ExportService
from vitviz.gui.mosaic import BACKGROUND, ScaleBar
from vitviz.gui.patching_panel import PatchingPanel
from vitviz.gui.worker import split_detail
from vitviz.imaging import load_image

KIND = "compare"  # the worker's job kind
BATCH = 8  # images per forward when analysing other images or classes
KEEP_RESULTS = 12  # results kept for comparisons (each holds every layer's attention: ~50 MB for a ViT-B); those
#                    the grid on screen needs are never dropped (a grid of more images keeps them all: at most
#                    comparison.MAX_PANELS)


class CompareWindow(QMainWindow):
    """Images x views, one view over layers, or one view per class, of the main window's document (see the module
    docstring); the main window makes it and calls :meth:`refresh` whenever it redraws.

    Args:
        parent: the main window (the Qt parent only).
        session: the main window's document (its image, options, images and result).
        controller: the main window's model and worker (other images and classes run there).
        exports: the export service both windows share; ``metadata(path, compare=spec)``: the session's state for
            an exported grid's metadata.
        show_error: the one place errors reach the user.
        spec: what to compare first (default: :func:`default_spec`).

    Signals:
        drawn(): the grid was redrawn (tests wait for it).
        querySelected(index): a patch clicked in a panel, as the query patch index of the main window's grid.
    """

    drawn = Signal()
    querySelected = Signal(int)

    def __init__(self, parent: QWidget, *, session: Session, controller: Controller, exports: ExportService,
                 show_error: Callable[..., None], metadata: Callable[..., dict[str, str] | None],
                 spec: cmp.CompareSpec | None = None):
        super().__init__(parent)
        self.setWindowFlag(Qt.WindowType.Window, True)
        self.setWindowTitle("Compare — vitviz")
        self.session, self.controller, self.exports = session, controller, exports
        self.show_error, self.metadata = show_error, metadata
        self.spec = spec or default_spec(session)  # what the grid shows (self.bar shows it and edits a copy)
        self.results: dict[tuple[str, int | None], Any] = {}
        # the map caches of the results drawn (comparison.build_comparison's pool): only of the results kept and
        # the main window's result (see _prune_pool)
        self._pool: dict = {}
        self._asked: set = set()  # runs submitted and not yet back
        self._failed: dict[tuple[str, int | None], str] = {}  # runs that failed: not asked again for this spec
        self.comparison: cmp.Comparison | None = None
        self.panels: list[ComparePanel] = []
        self.column_bars: list[ScaleBar] = []
        self._grid_key = None
        self._hover: tuple[int, int] | None = None
        self._build()
        controller.modelChanged.connect(self._on_model_changed)
        controller.targetChanged.connect(self._on_model_changed)  # the rows' target (the standing one) changed
        controller.runner.done.connect(self._on_done)
        controller.runner.failed.connect(self._on_failed)
        self.resize(1200, 760)

    # ------------------------------------------------------------------ construction
    def _build(self) -> None:
        central = QWidget()
        outer = QVBoxLayout(central)
        outer.setContentsMargins(6, 6, 6, 6)
        outer.setSpacing(4)
        self.bar = CompareBar(self.session, self.spec)
        outer.addWidget(self.bar)
        self.title = QLabel("")
        self.title.setWordWrap(True)
        self.title.setStyleSheet("font-size: 14px; color: rgb(235, 235, 238);")
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        outer.addWidget(self.title)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.setStyleSheet("color: rgb(255, 190, 90);")
        self.message.setVisible(False)
        outer.addWidget(self.message)
        self.grid_host = QWidget()
        self.grid = QGridLayout(self.grid_host)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setSpacing(4)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setWidget(self.grid_host)
        pal = self.scroll.palette()
        pal.setColor(self.scroll.backgroundRole(), BACKGROUND)
        self.scroll.setPalette(pal)
        self.scroll.setAutoFillBackground(True)
        outer.addWidget(self.scroll, 1)
        self.caption = QLabel("")
        self.caption.setWordWrap(True)
        self.caption.setStyleSheet("color: rgb(185, 185, 190); font-size: 11px;")
        outer.addWidget(self.caption)
        self.setCentralWidget(central)
        self.bar.changed.connect(self.set_spec)
        self.bar.export_button.clicked.connect(self.export_dialog)
        # activation patching from the shown image into another open one (vitviz.gui.patching_panel)
        self.patching = PatchingPanel(self.session, self.controller)
        dock = QDockWidget("Patching", self)
        dock.setObjectName("patching")
        dock.setWidget(self.patching)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, dock)

    # ------------------------------------------------------------------ the user's choices
    def set_spec(self, spec: cmp.CompareSpec) -> None:
        """Show ``spec`` (e.g. from an opened session)."""
        self.spec = spec
        self._failed.clear()
        self.bar.show_spec(spec)
        self.refresh()

    # ------------------------------------------------------------------ results
    def _on_model_changed(self, _note: str = "") -> None:
        self.results.clear()
        self._pool.clear()
        self._asked.clear()
        self._failed.clear()
        if self.isVisible():
            self.refresh()

    def _request(self, missing: list[tuple[str, int | None]]) -> None:
        """Analyse ``missing`` (image, target) runs on the worker with the main window's model."""
        c = self.controller
        pipeline = c.pipeline
        base = self.session.result
        if pipeline is None or base is None:
            return
        self._asked = set(missing)
        base_rgb, base_src = base.rgb, base.source
        standing = c.standing_target()  # the other images are explained by the window's standing target
        memory = {src: c.memory_images[src] for src, _ in missing if src in c.memory_images}

        def work(job):
            out, failed = {}, {}
            todo = []
            for src, t in missing:  # an unreadable image is named, the others are still compared
                try:
                    image = (Image.fromarray(np.ascontiguousarray(base_rgb), "RGB")
                             if src == base_src and not os.path.isfile(src) else memory[src] if src in memory
                             else load_image(src))
                except Exception as e:  # noqa: BLE001 - ImageError names the file and the problem
                    failed[(src, t)] = str(e)
                else:
                    todo.append(((src, t), image))
            for i in range(0, len(todo), BATCH):
                if job.cancelled:
                    return pipeline, None, failed
                part = todo[i:i + BATCH]
                targets = [t for (_, t), _ in part]  # all None (other images: the standing target) or all classes
                res = pipeline.run_batch([im for _, im in part], sources=[src for (src, _), _ in part],
                                         target=standing if None in targets else targets)
                out.update(zip([k for k, _ in part], res))
                job.report(min(len(todo), i + BATCH), len(todo))
            return pipeline, out, failed

        n = len(missing)
        self._show_message(f"Analysing {n} {'image' if self.spec.layout == 'views' else 'class'}"
                           f"{'s' * (n > 1)} with {c.title()}…", warn=False)
        c.runner.submit(KIND, work, subject="comparison", title="Could not compare")

    def _on_done(self, kind: str, payload: Any, job) -> None:
        if kind != KIND:
            return
        pipeline, out, failed = payload
        self._asked.clear()
        if out is None or pipeline is not self.controller.pipeline or not self.isVisible():
            return  # cancelled, another model since, or the window was closed
        self._failed.update(failed)
        self.results.update(out)
        self._trim_results()
        self.refresh()

    def _trim_results(self) -> None:
        """Keep the newest :data:`KEEP_RESULTS` results, and every one the grid asks for (dropping a run it needs
        would only make it ask for that run again, without end)."""
        needed = set(cmp.needed_runs(self.spec, self.session)) if self.session.result is not None else set()
        extra = len(self.results) - KEEP_RESULTS
        for k in [k for k in self.results if k not in needed][:max(0, extra)]:
            del self.results[k]

    def _prune_pool(self, comp: cmp.Comparison) -> None:
        """Forget the map caches of results neither drawn now nor kept (the main window's earlier images)."""
        keep = {id(c.session.result) for c in comp.cells} | {id(r) for r in self.results.values()}
        for k in [k for k in self._pool if k not in keep]:
            del self._pool[k]

    def release(self) -> None:
        """Free what the window holds (called when it closes): the comparison job in flight is cancelled, the
        results, their map caches and the panels (with their pictures) are dropped. The spec is kept: opening the
        window again shows the same comparison, analysed again."""
        if self._asked:
            self.controller.runner.cancel(KIND)
        self.results.clear()
        self._pool.clear()
        self._asked.clear()
        self._failed.clear()
        self.comparison = None
        self._hover = None
        self._grid_key = None
        for p in self.panels:  # (a panel's Python side may outlive its widget)
            p.forget()
        host = QWidget()
        QGridLayout(host)
        self.scroll.setWidget(host)  # the old grid and its panels are deleted with their host
        self.grid_host, self.grid = host, host.layout()
        self.panels, self.column_bars = [], []
        self.col_label_widgets, self.row_label_widgets = [], []
        self._show_message("")

    def _on_failed(self, kind: str, title: str, message: str, job) -> None:
        if kind != KIND:
            return
        text, _ = split_detail(message)
        self._failed.update({k: text for k in self._asked})  # not asked again until the choice changes
        self._asked.clear()
        self._show_message(f"{title}: {text}")

    # ------------------------------------------------------------------ drawing
    def _show_message(self, text: str, warn: bool = True) -> None:
        self.message.setStyleSheet(f"color: rgb({'255, 190, 90' if warn else '170, 200, 230'});")
        self.message.setText(text)
        self.message.setVisible(bool(text))

    def refresh(self) -> None:
        """Rebuild the comparison from the main window's document and draw it (runs what is missing first)."""
        self.patching.refresh()
        if not self.isVisible():
            return
        base = self.session
        if base.result is None:
            self._show_message("Open an image in the main window first.")
            return
        runs = cmp.needed_runs(self.spec, base)
        missing = [k for k in runs if k not in self.results]
        failed = [k for k in missing if k in self._failed]
        if failed:
            self._show_message("Cannot compare: " + "; ".join(dict.fromkeys(self._failed[k] for k in failed))
                               + (" (untick it under Images)" if self.spec.layout == "views" else ""))
            return
        if missing:
            if set(missing) != self._asked:
                self._request(missing)
            return
        try:
            comp = cmp.build_comparison(self.spec, base, self.results, pool=self._pool)
        except ValueError as e:
            self._show_message(str(e))
            return
        self._prune_pool(comp)
        self._show_message("; ".join(comp.notes))
        self._draw(comp)

    def _draw(self, comp: cmp.Comparison) -> None:
        self.comparison = comp
        self.title.setText(comp.title)
        self.caption.setText(comp.caption)
        key = (comp.nrows, comp.ncols, len(comp.cells), comp.row_labels, comp.col_labels)
        if key != self._grid_key:
            self._relayout(comp)
            self._grid_key = key
        shared = comp.spec.shared_scale and comp.shared is None and self.spec.layout == "views"
        single = comp.shared
        for panel, cell in zip(self.panels, comp.cells):
            panel.show_cell(cell, own_bar=single is None and not shared)
        # colour bars: one for all panels, one per column (a view's panels), or one per panel
        for c, bar in enumerate(self.column_bars):
            cells = [x for x in comp.cells if x.col == c and x.scale is not None]
            show = shared and bool(cells)
            bar.setVisible(show)
            if show:
                bar.set_scale(cells[0].scale, quantity_text(cells[0].view))
        self.all_bar.setVisible(single is not None)
        if single is not None:
            with_map = next(x for x in comp.cells if x.scale is not None)
            self.all_bar.set_scale(single, quantity_text(with_map.view))
        self._apply_hover()
        self.drawn.emit()

    def _relayout(self, comp: cmp.Comparison) -> None:
        # a new grid each time: a QGridLayout keeps the row and column stretches (and count) of a larger grid
        self.grid_host = QWidget()
        self.grid = QGridLayout(self.grid_host)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setSpacing(4)
        self.scroll.setWidget(self.grid_host)  # the old grid and its panels are deleted with their host
        self.panels, self.column_bars = [], []
        top = 1 if comp.col_labels else 0
        left = 1 if comp.row_labels else 0
        self.col_label_widgets: list[QLabel] = []
        self.row_label_widgets: list[QLabel] = []
        for j, text in enumerate(comp.col_labels or ()):
            lab = QLabel(text)
            lab.setAlignment(Qt.AlignmentFlag.AlignCenter)
            lab.setStyleSheet("font-weight: bold; color: rgb(235, 235, 238);")
            self.grid.addWidget(lab, 0, left + j)
            self.col_label_widgets.append(lab)
        for i, text in enumerate(comp.row_labels or ()):
            # not word-wrapped: a height-for-width label makes the scroll area size the grid by its preferred
            # heights (panels three times too tall); a long name is split at its " (" instead
            lab = QLabel(text.replace(" (", "\n(", 1))
            lab.setToolTip(text)
            lab.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            lab.setStyleSheet("font-weight: bold; color: rgb(235, 235, 238);")
            self.grid.addWidget(lab, top + i, 0)
            self.row_label_widgets.append(lab)
        for idx, cell in enumerate(comp.cells):
            p = ComparePanel(idx)
            p.hovered.connect(self._on_hover)
            p.clicked.connect(self._on_click)
            self.grid.addWidget(p, top + cell.row, left + cell.col)
            self.panels.append(p)
        for j in range(comp.ncols):
            b = ScaleBar()
            b.setVisible(False)
            self.grid.addWidget(b, top + comp.nrows, left + j)
            self.column_bars.append(b)
        self.all_bar = ScaleBar()
        self.all_bar.setVisible(False)
        self.grid.addWidget(self.all_bar, top + comp.nrows + 1, left, 1, comp.ncols)
        for w in [self.grid_host] + self.col_label_widgets + self.row_label_widgets + self.panels:
            w.show()  # at once: a widget added to a shown parent is otherwise shown by a queued call
        for i in range(comp.nrows):
            self.grid.setRowStretch(top + i, 1)
        for j in range(comp.ncols):
            self.grid.setColumnStretch(left + j, 1)

    # ------------------------------------------------------------------ linked hover and selection
    def _patch_of(self, index: int, x: float, y: float) -> tuple[int, int] | None:
        if self.comparison is None or math.isnan(x):
            return None
        return self.comparison.cells[index].session.image_to_patch(x, y)

    def _on_hover(self, index: int, x: float, y: float) -> None:
        self._hover = self._patch_of(index, x, y)
        self._apply_hover()

    def _apply_hover(self) -> None:
        values = [p.set_hover(self._hover) for p in self.panels]
        if self._hover is None:
            self.statusBar().clearMessage()
            return
        shown = [f"{v:.4g}" for v in values if v is not None]
        self.statusBar().showMessage(f"patch (row {self._hover[0]}, col {self._hover[1]}) · values: "
                                     + ", ".join(shown))

    def _on_click(self, index: int, x: float, y: float) -> None:
        """A patch clicked in any panel becomes the query patch everywhere (the main window included)."""
        rc = self._patch_of(index, x, y)
        if rc is None:
            return
        gw = self.comparison.cells[index].session.result.grid[1]
        self.querySelected.emit(rc[0] * gw + rc[1])  # the main window redraws, and this grid with it

    # ------------------------------------------------------------------ export
    def figure(self):
        """The comparison as a :class:`vitviz.render.figures.FigureSpec` (None before the first drawing)."""
        return None if self.comparison is None else cmp.comparison_figure(self.comparison)

    def export(self, path: str, scale: Any = None, *, background: bool = False):
        """Write the grid as one figure to ``path`` (PNG / SVG / PDF by extension; PNG at ``scale``, default the
        main window's remembered export size) with the session, comparison included, in its metadata. Asks before
        replacing a file; errors are shown. Returns the file written, or None (``background``: off the GUI thread
        with a progress dialog, as File > Export; the running task)."""
        if not Path(path).suffix:
            path = str(path) + ".png"
        if self.comparison is not None and self.exports.refused(  # from the images' sizes, before any map is drawn
                cmp.comparison_size_problem(self.comparison, self.exports.figure_scale(path, scale))):
            return None
        spec = self.figure()
        if spec is None:
            self.show_error("Nothing to export", "The comparison has not been drawn yet.")
            return None
        return self.exports.save_figure(spec, path, scale=scale, metadata=self.metadata(path, compare=self.spec),
                                        status=self.statusBar().showMessage, background=background)

    def export_dialog(self):
        if self.comparison is None:
            self.show_error("Nothing to export", "The comparison has not been drawn yet.")
            return None
        name = f"{Path(self.session.result.source).stem}_compare_{self.spec.layout}.png"
        answer = self.exports.ask_figure("Export comparison", name)
        return None if not answer else self.export(*answer, background=True)

    # ------------------------------------------------------------------ events
    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh()

    def keyPressEvent(self, event) -> None:
        """Esc and Ctrl+W (Cmd+W) close the window, as a dialog or a document window closes."""
        if event.key() == Qt.Key.Key_Escape or event.matches(QKeySequence.StandardKey.Close):
            self.close()
            return
        super().keyPressEvent(event)

    def closeEvent(self, event) -> None:
        super().closeEvent(event)
        if event.isAccepted():
            self.release()


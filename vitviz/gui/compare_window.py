"""The Compare window: a grid of maps side by side (:mod:`vitviz.document.comparison`), linked to the main window.

A window of its own rather than a mode of the main window: the main window keeps its canvas, docks and view while
the grid takes a whole (second) screen, and both stay live. The grid follows the main window's options (layer,
head, query patch, colormap, opacity, scale options, mask ...) and its image and target: every change there redraws
it. Hovering a panel outlines the same patch in every panel and shows each panel's value there; clicking a patch
selects it as the query patch in every panel and in the main window. Panels of one view share a colour scale (or
each has its own); the grid exports as one figure (PNG / SVG / PDF) through :mod:`vitviz.render.figures`, carrying the
session's state (the comparison included) in its metadata.

Other images (``"views"`` layout) and other classes (``"classes"``) are run on the window's worker with the main
window's model (kind ``"compare"``, a batch at a time); results are kept until the model changes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QAction, QColor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGraphicsRectItem,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMenu,
    QPushButton,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from vitviz.document import comparison as cmp
from vitviz import views
from vitviz.gui.canvas import Canvas, outline
from vitviz.gui.mosaic import BACKGROUND, ScaleBar

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.gui.main_window import MainWindow

KIND = "compare"  # the worker's job kind
BATCH = 8  # images per forward when analysing other images or classes
KEEP_RESULTS = 12  # results kept for comparisons (each holds every layer's attention: ~50 MB for a ViT-B)
MIN_PANEL = (170, 130)  # px: smaller panels scroll
DEFAULT_VIEWS = ("cls", "rollout", "grad_rollout", "relevance")
HOVER_COLOR = QColor(255, 255, 255)


def default_spec(win: MainWindow) -> cmp.CompareSpec:
    """The first comparison: the main window's view beside three others, for up to four open images."""
    s = win.session
    keys = [v.key for v in views.all_views()]
    chosen = [s.options.view] + [k for k in DEFAULT_VIEWS if k != s.options.view]
    shown = s.result.source if s.result is not None else None
    images = [shown] if shown else []
    images += [p for p in s.images if p != shown][:3]
    return cmp.CompareSpec(layout="views", views=tuple(k for k in chosen if k in keys)[:4], images=tuple(images))


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
        s, o = cell.session, cell.session.options
        r = s.result
        if self._photo_id != id(r):
            self._photo_id = id(r)
            self.canvas.set_photo(r.rgb)
            y0, x0, y1, x1 = s.crop_rect_yx()
            self.canvas.set_crop(x0, y0, x1 - x0, y1 - y0)
        self.canvas.set_opacity(o.opacity)
        text = cell.label or ""
        if cell.scale is None:
            why = cell.unavailable or "not available"
            self.canvas.set_overlay(None)
            self.canvas.set_mask(None)
            self.label.setText(f"{text}: {why}" if text else why)
        else:
            self.canvas.set_colormap(cell.scale.cmap)
            self.canvas.set_overlay(s.display_map(), cell.scale, label=s.quantity_text())
            self.canvas.set_mask(s.mask(), o.mask_style)
            self.label.setText(text)
        self.label.setVisible(bool(self.label.text()))
        self.label.setToolTip(s.title())
        # the selected patch where the view uses it (as on the main canvas); the hover outline links every panel
        self.canvas.set_marker(s.patch_rect(o.query) if cell.scale is not None and s.shows_query() else None)
        self.canvas.set_artefacts(s.artefact_patches(), r.grid)
        self.scale_bar.setVisible(own_bar and cell.scale is not None)
        if own_bar and cell.scale is not None:
            self.scale_bar.set_scale(cell.scale, s.quantity_text())

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


class CompareWindow(QMainWindow):
    """Images x views, one view over layers, or one view per class, linked to ``main`` (see the module docstring).

    Signals:
        drawn(): the grid was redrawn (tests wait for it).
    """

    drawn = Signal()

    def __init__(self, main: MainWindow, spec: cmp.CompareSpec | None = None):
        super().__init__(main)
        self.setWindowFlag(Qt.WindowType.Window, True)
        self.setWindowTitle("Compare — vitviz")
        self.main = main
        self.spec = spec or default_spec(main)
        self.results: dict[tuple[str, int | None], Any] = {}
        self._pool: dict = {}
        self._asked: set = set()  # runs submitted and not yet back
        self._failed: dict[tuple[str, int | None], str] = {}  # runs that failed: not asked again for this spec
        self.comparison: cmp.Comparison | None = None
        self.panels: list[ComparePanel] = []
        self.column_bars: list[ScaleBar] = []
        self._grid_key = None
        self._hover: tuple[int, int] | None = None
        self._build()
        main.viewRefreshed.connect(self.refresh)
        main.controller.modelChanged.connect(self._on_model_changed)
        main.controller.runner.done.connect(self._on_done)
        main.controller.runner.failed.connect(self._on_failed)
        self.resize(1200, 760)

    # ------------------------------------------------------------------ construction
    def _build(self) -> None:
        central = QWidget()
        outer = QVBoxLayout(central)
        outer.setContentsMargins(6, 6, 6, 6)
        outer.setSpacing(4)
        bar = QHBoxLayout()
        self.layout_combo = QComboBox()
        for key in cmp.LAYOUTS:
            self.layout_combo.addItem(cmp.LAYOUT_TITLES[key], key)
        self.layout_combo.setToolTip("What the grid compares")
        self.views_button = self._menu_button("Views", self._fill_views_menu)
        self.images_button = self._menu_button("Images", self._fill_images_menu)
        self.layers_button = self._menu_button("Layers", self._fill_layers_menu)
        self.classes_button = self._menu_button("Classes", self._fill_classes_menu)
        self.view_combo = QComboBox()
        self.view_combo.addItem("the main window's view", "")
        for v in views.all_views():
            self.view_combo.addItem(v.title, v.key)
        self.shared_check = QCheckBox("One colour scale per view")
        self.shared_check.setToolTip("Panels that show the same view share one colour scale (robust percentile of "
                                     "all their maps); off: each panel has its own")
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Export the grid as one figure (PNG, SVG or PDF) carrying the session")
        bar.addWidget(QLabel("Compare:"))
        for w in (self.layout_combo, self.views_button, self.images_button, self.view_combo, self.layers_button,
                  self.classes_button, self.shared_check):
            bar.addWidget(w)
        bar.addStretch(1)
        bar.addWidget(self.export_button)
        outer.addLayout(bar)
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
        self.layout_combo.currentIndexChanged.connect(lambda _: self._set(layout=self.layout_combo.currentData()))
        self.view_combo.currentIndexChanged.connect(self._on_view_combo)
        self.shared_check.toggled.connect(lambda b: self._set(shared_scale=bool(b)))
        self.export_button.clicked.connect(self.export_dialog)
        self._sync_controls()

    def _menu_button(self, text: str, fill) -> QToolButton:
        b = QToolButton()
        b.setText(text)
        b.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(b)
        menu.aboutToShow.connect(lambda m=menu: fill(m))
        b.setMenu(menu)
        return b

    def _check_action(self, menu: QMenu, text: str, checked: bool, toggled) -> QAction:
        a = menu.addAction(text)
        a.setCheckable(True)
        a.setChecked(checked)
        a.toggled.connect(toggled)
        return a

    def _fill_views_menu(self, menu: QMenu) -> None:
        menu.clear()
        for v in views.all_views():
            self._check_action(menu, v.title, v.key in self.spec.views,
                               lambda on, k=v.key: self._toggle("views", k, on))

    def _fill_images_menu(self, menu: QMenu) -> None:
        menu.clear()
        for p in self.main.session.images:
            a = self._check_action(menu, Path(p).name, p in self.spec.images,
                                   lambda on, p=p: self._toggle("images", p, on))
            a.setToolTip(p)

    def _fill_layers_menu(self, menu: QMenu) -> None:
        menu.clear()
        r = self.main.session.result
        if r is None:
            return
        v = self._layers_view()
        if v.slider is None:
            menu.addAction(f"{v.title} does not change with the layer").setEnabled(False)
            return
        lo, hi = (0, r.num_layers - 1) if v.slider == "start_layer" else v.layer_range(r)
        chosen = self.spec.layers or cmp.default_layers(v, r)
        for x in range(lo, hi + 1):
            text = v.layer_text(x) if v.slider == "layer" else f"start layer {x}"
            self._check_action(menu, text, x in chosen, lambda on, x=x, c=chosen: self._toggle("layers", x, on, c))

    def _fill_classes_menu(self, menu: QMenu) -> None:
        menu.clear()
        r = self.main.session.result
        if r is None or r.attention_grads is None:
            menu.addAction("this model has no classifier").setEnabled(False)
            return
        chosen = self.spec.classes or cmp.default_classes(r)
        offered = [i for i, _, _ in r.top_k(10)]
        offered += [c for c in chosen if c not in offered]
        probs = r.probabilities
        for c in offered:
            self._check_action(menu, f"{r.label(c)} ({float(probs[c]):.1%})", c in chosen,
                               lambda on, c=c, ch=chosen: self._toggle("classes", c, on, ch))

    def _layers_view(self) -> views.View:
        return views.get(self.spec.views[0]) if self.spec.views and self.spec.layout != "views" \
            else self.main.session.view

    # ------------------------------------------------------------------ the user's choices
    def set_spec(self, spec: cmp.CompareSpec) -> None:
        """Show ``spec`` (e.g. from an opened session)."""
        self.spec = spec
        self._failed.clear()
        self._sync_controls()
        self.refresh()

    def _set(self, **changes: Any) -> None:
        if self.spec.layout != changes.get("layout", self.spec.layout):
            # each layout reads views differently: keep the views only where they mean the same thing
            changes.setdefault("views", () if changes["layout"] != "views" else default_spec(self.main).views)
        self.set_spec(cmp.CompareSpec(**{**self.spec.__dict__, **changes}))

    def _toggle(self, name: str, value: Any, on: bool, current: tuple | None = None) -> None:
        have = list(current if current is not None and not getattr(self.spec, name) else getattr(self.spec, name))
        if on and value not in have:
            have.append(value)
        elif not on and value in have:
            have.remove(value)
        if name == "layers":
            have.sort()
        self._set(**{name: tuple(have)})

    def _on_view_combo(self) -> None:
        key = self.view_combo.currentData()
        if self.spec.layout != "views":
            self._set(views=(key,) if key else ())

    def _sync_controls(self) -> None:
        s = self.spec
        for w in (self.layout_combo, self.view_combo, self.shared_check):
            w.blockSignals(True)
        self.layout_combo.setCurrentIndex(cmp.LAYOUTS.index(s.layout))
        self.shared_check.setChecked(s.shared_scale)
        key = s.views[0] if s.views and s.layout != "views" else ""
        self.view_combo.setCurrentIndex(max(0, self.view_combo.findData(key)))
        for w in (self.layout_combo, self.view_combo, self.shared_check):
            w.blockSignals(False)
        views_layout = s.layout == "views"
        self.views_button.setVisible(views_layout)
        self.images_button.setVisible(views_layout)
        self.view_combo.setVisible(not views_layout)
        self.layers_button.setVisible(s.layout == "layers")
        self.classes_button.setVisible(s.layout == "classes")

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
        c = self.main.controller
        pipeline = c.pipeline
        base = self.main.session.result
        if pipeline is None or base is None:
            return
        self._asked = set(missing)
        base_rgb, base_src = base.rgb, base.source

        def work(job):
            import os

            from PIL import Image

            from vitviz.imaging import load_image

            out, failed = {}, {}
            todo = []
            for src, t in missing:  # an unreadable image is named, the others are still compared
                try:
                    image = (Image.fromarray(np.ascontiguousarray(base_rgb), "RGB")
                             if src == base_src and not os.path.isfile(src) else load_image(src))
                except Exception as e:  # noqa: BLE001 - ImageError names the file and the problem
                    failed[(src, t)] = str(e)
                else:
                    todo.append(((src, t), image))
            for i in range(0, len(todo), BATCH):
                if job.cancelled:
                    return pipeline, None, failed
                part = todo[i:i + BATCH]
                targets = [t for (_, t), _ in part]  # all None (other images, top class) or all classes
                res = pipeline.run_batch([im for _, im in part], sources=[src for (src, _), _ in part],
                                         target=None if None in targets else targets)
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
        if out is None or pipeline is not self.main.controller.pipeline:
            return  # cancelled, or another model since
        self._failed.update(failed)
        self.results.update(out)
        if len(self.results) > KEEP_RESULTS:  # keep the newest
            for k in list(self.results)[:len(self.results) - KEEP_RESULTS]:
                del self.results[k]
        self.refresh()

    def _on_failed(self, kind: str, title: str, message: str, job) -> None:
        if kind != KIND:
            return
        from vitviz.gui.worker import split_detail

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
        if not self.isVisible():
            return
        base = self.main.session
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
                bar.set_scale(cells[0].scale, cells[0].session.quantity_text())
        self.all_bar.setVisible(single is not None)
        if single is not None:
            with_map = next(x for x in comp.cells if x.scale is not None)
            self.all_bar.set_scale(single, with_map.session.quantity_text())
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
        self.main.set_query(rc[0] * gw + rc[1])  # the main window redraws, and this grid with it

    # ------------------------------------------------------------------ export
    def figure(self):
        """The comparison as a :class:`vitviz.render.figures.FigureSpec` (None before the first drawing)."""
        return None if self.comparison is None else cmp.comparison_figure(self.comparison)

    def export(self, path: str, scale: Any = None):
        """Write the grid as one figure to ``path`` (PNG / SVG / PDF by extension; PNG at ``scale``, default the
        main window's remembered export size) with the session, comparison included, in its metadata. Asks before
        replacing a file; errors are shown. Returns the file written, or None."""
        from vitviz.render import figures
        from vitviz.gui import export_service as exporting

        w = self.main
        spec = self.figure()
        if spec is None:
            w.show_error("Nothing to export", "The comparison has not been drawn yet.")
            return None
        if not Path(path).suffix:
            path = str(path) + ".png"
        scale = exporting._settings(w, "scale", "print") if scale is None else scale
        meta = w.sessions.metadata(path, compare=self.spec)
        out = exporting._write_asking(w, path, lambda ow: figures.save(spec, path, scale=scale, metadata=meta,
                                                                       overwrite=ow))
        if out is not None:
            w.prefs.set_export_folder(str(Path(out).parent))
            self.statusBar().showMessage(f"Exported {out} ({exporting._size_note(out)})", 8000)
        return out

    def export_dialog(self):
        from vitviz import imaging
        from vitviz.gui import export_service as exporting

        w = self.main
        if self.comparison is None:
            w.show_error("Nothing to export", "The comparison has not been drawn yet.")
            return None
        r = w.session.result
        name = f"{Path(r.source).stem}_compare_{self.spec.layout}.png"
        suggested = str(imaging.next_free_path(Path(w.prefs.export_folder()) / name))
        answer = w.dialogs.save_export("Export comparison", suggested, exporting.FIGURE_FILTERS,
                                       exporting.FIGURE_SCALES, exporting._settings(w, "scale", "print"))
        if not answer:
            return None
        path, scale = answer
        w.settings.setValue("export_scale", scale)
        return self.export(path, scale)

    # ------------------------------------------------------------------ events
    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh()


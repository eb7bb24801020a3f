"""The main window: canvas in the centre, docks for controls, heads, plots and predictions.

Thin by design: the document is :class:`vitviz.document.session.Session`, the model and its jobs are
:class:`~vitviz.gui.controller.Controller`, the remembered settings :class:`~vitviz.gui.settings.Prefs`, the views
come from :mod:`vitviz.views`, and every dialog goes through :class:`~vitviz.gui.dialogs.Dialogs` (tests replace it).
The window creates its children and hands each helper only what it needs (the session, the controller, the dialogs,
the settings, a status callback): the model choices (:mod:`vitviz.gui.model_choice`), the exports of both windows
(:mod:`vitviz.gui.export_service`), session files (:mod:`vitviz.gui.session_files`), the target
(:mod:`vitviz.gui.targeting`), the text prompts (:mod:`vitviz.gui.prompting`), the open images' tokens of feature
PCA's joint fit (:mod:`vitviz.gui.token_reader`) and the Compare window.
Widgets write the user's intent here; the window passes it on and redraws from the session.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSettings, QSignalBlocker, Signal
from PySide6.QtWidgets import QApplication, QMainWindow

from vitviz.document.panel import panel_of, render_view
from vitviz.document.session import Session
from vitviz.gui import help
from vitviz.gui.actions import WindowActions
from vitviz.gui.canvas import Canvas
from vitviz.gui.controller import Controller
from vitviz.gui.dialogs import Dialogs, qimage_from_rgb
from vitviz.gui.export_service import ExportService
from vitviz.gui.geometry import fit_docks, place_window
from vitviz.gui.heads import HeadsPanel
from vitviz.gui.image_drops import ImageDrops
from vitviz.gui.menus import LEFT, RIGHT, add_docks, build_menus, build_toolbar, canvas_area, fill_recent_menu
from vitviz.gui.model_choice import ModelChoice
from vitviz.gui.panels import ControlsPanel, PredictionsPanel
from vitviz.gui.plots import PlotsPanel
from vitviz.gui.prompting import PromptPicker
from vitviz.gui.session_files import Sessions, is_session_file
from vitviz.gui.settings import FIRST_VIEW, Prefs, default_settings  # noqa: F401 - default_settings re-exported for callers
from vitviz.gui.startup import WorkAfterShow, startup_log
from vitviz.gui.statusbar import StatusParts
from vitviz.gui.targeting import TargetPicker
from vitviz.gui.token_reader import TokenReader
from vitviz.gui.toolbar import ModelBar
from vitviz.gui.worker import describe_error
from vitviz.model.sources import catalog  # plain data: no torch at start-up
from vitviz.resources import sample_images  # (not vitviz.demo: its dataset needs numpy and PIL)

if TYPE_CHECKING:
    from vitviz.gui.compare_window import CompareWindow


class MainWindow(ImageDrops, QMainWindow):
    """The vitviz window.

    Args:
        settings: where preferences persist (default: ``$VITVIZ_SETTINGS`` or the user's settings).
        model: an already-built model to use instead of the remembered one (tests, scripts).
        model_key: a model reference (:mod:`vitviz.model.sources.refs`) to load on start.
        device, precision: torch device and precision to start on (default: remembered, else CPU and auto).
        dialogs: a :class:`Dialogs` replacement.
        load_samples: open the bundled sample images when nothing else is opened.

    Signals:
        resultShown(): a new inference result is on screen.
        errorShown(title, message): an error dialog was shown.
        modelChanged(): a newly loaded model is in use.
        viewRefreshed(): the view was redrawn from the session (the Compare window follows it).
    """

    resultShown = Signal()
    errorShown = Signal(str, str)
    modelChanged = Signal()
    viewRefreshed = Signal()

    def __init__(self, *, settings: QSettings | None = None, model: Any = None, model_key: str | None = None,
                 device: str | None = None, dialogs: Dialogs | None = None, load_samples: bool = False,
                 precision: str | None = None):
        super().__init__()
        self.prefs = Prefs(settings)
        self.settings = self.prefs.qsettings
        self._dialogs = dialogs or Dialogs(self)
        self.session = Session()
        self.controller = Controller(self, device=device or self.prefs.device(),
                                     precision=precision or self.prefs.precision())
        self._closing = False
        self._docks_fitted = self._query_chosen = False  # (the user's query patch is kept across patch grids)
        self._hover_xy: tuple[float, float] | None = None

        self.setWindowTitle("vitviz")
        self.setAcceptDrops(True)
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks)
        # the window's children: the canvas in the centre, the panels in docks, the status bar's parts
        self.canvas = Canvas()
        self.setCentralWidget(canvas_area(self.canvas))
        self.controls, self.heads = ControlsPanel(), HeadsPanel()
        self.plots, self.predictions = PlotsPanel(), PredictionsPanel()
        self.docks = add_docks(self, {"controls": ("Controls", self.controls, LEFT),
                                      "predictions": ("Predictions", self.predictions, LEFT),
                                      "heads": ("Heads", self.heads, RIGHT), "plots": ("Plots", self.plots, RIGHT)})
        self.status = StatusParts(self.statusBar())
        self.hover_label, self.busy_label, self.busy_bar = (self.status.hover_label, self.status.busy_label,
                                                            self.status.busy_bar)
        self.cancel_button, self.model_label = self.status.cancel_button, self.status.model_label
        # the helpers, each with what it needs
        say, error = self.statusBar().showMessage, self.show_error
        self.sessions = Sessions(self, session=self.session, controller=self.controller, prefs=self.prefs,
                                 dialogs=self._dialogs, show_error=error, status=say,
                                 heads_all_layers=lambda: self.heads.all_layers, shown_comparison=self.shown_comparison)
        self.exports = ExportService(self, self.session, self.prefs, self._dialogs, show_error=error, status=say,
                                     metadata=lambda: self.export_metadata())  # (the hook, looked up at each export)
        self.acts = WindowActions(self, {
            "open": self.open_images_dialog, "paste": self.paste_image, "step_image": self.step_image,
            "export": self.export_dialog, "copy": self.copy_view, "quit": self.close,
            "open_session": self.sessions.open_dialog, "save_session": self.sessions.save_dialog,
            "compare": self.show_compare, "step_layer": self.step_layer, "set_layer": self.set_layer,
            "step_head": self.step_head, "fit": self.canvas.fit, "grid": self._toggle_grid, "view": self.set_view,
            "shortcuts": self.show_shortcuts, "about": self.show_about,
            "open_checkpoint": lambda folder: self.models.open_checkpoint_dialog(folder),
            "open_by_name": lambda: self.models.open_by_name(), "model": lambda ref: self.models.choose(ref)})
        self.menus = build_menus(self.menuBar(), self.acts, self.docks)
        self.model_bar = ModelBar(self.menus.device, self.menus.precision)
        build_toolbar(self.addToolBar("Main"), self.acts, self.model_bar)
        self.models = ModelChoice(self, self.controller, self.prefs, self._dialogs, model_bar=self.model_bar,
                                  actions=self.acts, status=say, show_error=error, demo_chosen=model_key == "demo")
        self.targets = TargetPicker(self, session=self.session, controller=self.controller, dialogs=self._dialogs,
                                    prefs=self.prefs, predictions=self.predictions, show_error=error, status=say)
        self.prompts = PromptPicker(self, session=self.session, controller=self.controller, shown=self.resultShown,
                                    predictions=self.predictions, set_options=self._set, status=say)
        self.open_tokens = TokenReader(self, session=self.session, controller=self.controller,
                                       redraw=lambda: self.refresh_view(), status=say)  # feature PCA's joint fit
        self._connect()
        self.compare_window: CompareWindow | None = None  # File > Compare, made when first asked for
        self._restore_settings(first_view=None if model is not None else FIRST_VIEW)  # (vitviz.show: the table's)

        self._startup = WorkAfterShow(self, self.controller.runner)  # the model opens once the window is on screen
        if model is not None:
            self.controller.adopt(model, model_key or "memory")
        else:
            self.load_model(model_key or self.prefs.model_ref(), initial=True)
        if load_samples:
            self._startup.after_show(self._open_samples)

    # ================================================================== the controller's state, for callers
    @property
    def model(self):
        return self.controller.model

    @property
    def model_key(self) -> str:
        return self.controller.ref

    @property
    def device(self) -> str:
        return self.controller.device

    @property
    def precision(self) -> str:
        return self.controller.precision

    @property
    def runner(self):
        return self.controller.runner

    @property
    def dialogs(self) -> Dialogs:
        """Every dialog the window shows; another one assigned here (tests) is handed to the window's helpers."""
        return self._dialogs

    @dialogs.setter
    def dialogs(self, dialogs: Dialogs) -> None:
        self._dialogs = dialogs
        for helper in (self.sessions, self.exports, self.models, self.targets):
            helper.dialogs = dialogs

    # ================================================================== construction
    def _connect(self) -> None:
        c = self.controls
        c.viewChanged.connect(self.set_view)
        c.layerChanged.connect(self.set_layer)
        c.headChanged.connect(self.set_head)
        c.rolloutChanged.connect(lambda f, d: self._set(head_fusion=f, discard_ratio=d))
        c.scale_panel.changed.connect(self._set_scale_options)
        c.colormapChanged.connect(lambda name: self._set(cmap=name))
        c.opacityChanged.connect(lambda v: self._set(opacity=v))
        c.interpolationChanged.connect(lambda m: self._set(interpolation=m))
        c.export_colorbar.toggled.connect(lambda b: self._set(colorbar=b))
        c.export_caption.toggled.connect(lambda b: self._set(caption=b))
        for name in ("mask_background", "pca_joint", "pca_colours_only"):  # feature PCA's check boxes
            getattr(c, name).toggled.connect(lambda b, n=name: self._set(**{n: b}))
        c.legrad_pooling.currentIndexChanged.connect(lambda i: self._set(legrad_pooling=c.legrad_pooling.itemData(i)))
        self.viewRefreshed.connect(self.open_tokens.follow)
        self.heads.headSelected.connect(self._on_head_tile)
        self.heads.grid_toggle.toggled.connect(self.acts.grid.setChecked)
        self.plots.layerHeadSelected.connect(self._on_head_tile)
        self.plots.patchSelected.connect(self.set_query)
        self.plots.faithfulness.attach(self.controller)
        self.plots.mechanistic.attach(self.controller)
        self.plots.faithfulness.viewRequested.connect(lambda view, changes: self._set(view=view, **changes))
        self.plots.faithfulness.localisation.outlineChanged.connect(self.canvas.set_ground_truth)
        self.predictions.targetChosen.connect(self.set_target)
        self.predictions.modelOffered.connect(self.choose_photo_model)
        self.canvas.hovered.connect(self._on_hover)
        self.canvas.clicked.connect(self._on_canvas_click)
        self.cancel_button.clicked.connect(self.cancel_model_load)
        self.menus.model.aboutToShow.connect(self.models.refresh_menu)
        self.sessions.gridRestored.connect(self._restore_grid)
        self.sessions.comparisonOpened.connect(self.show_compare)
        ctl = self.controller
        ctl.modelChanged.connect(self._on_model_changed)
        ctl.resultReady.connect(self._on_result)
        ctl.failed.connect(self._on_failed)
        ctl.busy.connect(self._set_busy)
        ctl.progress.connect(self.status.set_progress)

    # ================================================================== settings
    def _restore_settings(self, first_view: str | None = None) -> None:
        place_window(self, self.docks, self.prefs.geometry(), self.prefs.window_state())  # clamped to the screen
        self.session.set_options(**self.prefs.view_options(first_view=first_view))
        self.model_bar.fill_devices(self.device, self.precision)
        self.models.fill_bar()
        self._rebuild_recent_menu()
        self._refresh_all()

    def save_settings(self) -> None:
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("windowState", self.saveState())
        self.prefs.save_view_options(self.session.options)
        self.prefs.save_model(self.model_key, self.device, self.precision)
        self.prefs.sync()

    def _rebuild_recent_menu(self) -> None:
        fill_recent_menu(self.menus.recent, self.prefs.recent_files(), lambda p: self.open_images([p]),
                         lambda: (self.prefs.clear_recent_files(), self._rebuild_recent_menu()))

    # ================================================================== models (vitviz.gui.model_choice)
    def load_model(self, ref: str, *, initial: bool = False) -> None:
        """Load a model reference in the background (asks before a download unless named at start)."""
        self.models.load(ref, initial=initial)

    def cancel_model_load(self) -> None:
        self.models.cancel()

    def choose_photo_model(self, ref: str) -> None:
        """A button of the first-run offer: load ``ref``; once loaded it is the model for photos."""
        self.models.choose_photo_model(ref)

    def open_checkpoint(self, path: str) -> None:
        self.models.open_checkpoint(path)

    def set_device(self, device: str) -> None:
        self.controller.set_device(device)

    def set_precision(self, precision: str) -> None:
        self.controller.set_precision(precision)

    def _update_offer(self) -> None:
        """The first-run offer in the predictions panel: shown for a photo analysed by the bundled shapes model."""
        r = self.session.result
        show = r is not None and self.model_key == "demo" and catalog.is_photo(r.source)
        offers = catalog.photo_offers() if show else []
        self.predictions.set_offer(offers, {m.ref for m in offers if catalog.ref_is_cached(m.ref)})

    def _on_model_changed(self, note: str) -> None:
        self._update_offer()
        self._update_model_label()
        if note:
            self.statusBar().showMessage(note, 15000)
        self.modelChanged.emit()
        r = self.session.result
        if r is not None and self.controller.requested is None:
            self.controller.rerun(r)  # the shown image with the new model

    def _update_model_label(self) -> None:
        self.status.set_model(self.model, self.controller.title(), self.device, self.precision)

    # ================================================================== images
    def _open_samples(self) -> None:
        if self.session.images:
            return
        try:
            samples = [str(p) for p in sample_images()]
        except Exception:  # noqa: BLE001 - no samples: an empty window is fine
            samples = []
        if samples:
            self.open_images(samples, remember=False)

    def open_images_dialog(self) -> None:
        files = self.dialogs.open_images(self.prefs.last_folder())
        if files:
            self.open_images(files)

    def open_images(self, paths: list[str], *, remember: bool = True) -> None:
        """Add images to the set and show the first of them (a ``.vitviz.json`` among them opens as a session)."""
        paths = [str(p) for p in paths if str(p)]
        sessions = [p for p in paths if is_session_file(p)]
        if sessions:
            self.open_session(sessions[0])
            paths = [p for p in paths if not is_session_file(p)]
        if not paths:
            return
        self.session.add_images(paths)
        if remember:
            self.prefs.remember_folder(paths[0])
        self.run_image(paths[0], remember=remember)

    def step_image(self, delta: int) -> None:
        """PageDown / PageUp: counts from the image last asked for, so quick presses each move on."""
        p = self.session.step(delta, start=self.controller.requested)
        if p is not None:
            self.run_image(p)

    def run_image(self, source: str, pil: Any = None, *, remember: bool = True) -> None:
        """Analyse ``source`` (a path, or the name of pixels ``pil``) with the model it asks for."""
        self.models.switch_for_photo(source)
        self.controller.run(source, pil, remember=remember)

    def set_target(self, target: Any) -> None:
        """Make ``target`` the gradient target: a class index, or any target (:mod:`vitviz.gui.targeting`); re-runs
        the shown image in the background (a target that cannot be used: one message, the window unchanged)."""
        r = self.session.result
        if r is None or (isinstance(target, int) and target == r.target):
            return
        self.targets.choose(target)

    def _on_result(self, result: Any, remember: bool) -> None:
        if self._closing:
            return
        try:
            centre = not self._query_chosen and self.sessions.pending is None  # (a session's own patch is kept)
            self.sessions.before_result(result)  # an opened session's options, as its image arrives
            self.session.set_result(result, centre_query=centre)
            if remember and result.source in self.session.images:
                self.prefs.add_recent_file(result.source)
                self._rebuild_recent_menu()
            self._refresh_all(new_result=True)
            self._update_offer()
        except Exception as e:  # noqa: BLE001 - shown, never only printed
            self.show_error("Could not show the result", describe_error(e, result.source), traceback.format_exc())
            return
        startup_log("first overlay")
        self.resultShown.emit()

    def _on_failed(self, kind: str, title: str, message: str, detail: str, subject: str) -> None:
        if self._closing:
            return
        if kind == "infer":  # (a model that failed: vitviz.gui.model_choice)
            r = self.session.result
            if r is None or subject != r.source:
                self.session.forget_image(subject)  # unreadable: keep it out of the image set
            self.predictions.refresh(self.session)
        self.show_error(title, message, detail)

    def _set_busy(self, text: str, cancellable: bool = False) -> None:
        c = self.controller
        self.status.set_busy(text, c.is_busy(), cancellable, c.is_busy("model"))

    def show_error(self, title: str, message: str, detail: str = "") -> None:
        """The one place errors reach the user."""
        self.errorShown.emit(title, message)
        self.statusBar().showMessage(f"{title}: {message.splitlines()[0] if message else ''}", 10000)
        self.dialogs.error(title, message, detail)

    # ================================================================== view options
    def _set(self, **changes: Any) -> None:
        self.session.set_options(**changes)
        self.refresh_view()
        r, pooling = self.session.result, self.session.options.legrad_pooling
        self.controller.legrad_poolings = (pooling,)  # LeGrad is taken in the pass for the pooling shown
        if "legrad_pooling" in changes and r is not None and r.legrad and pooling not in r.legrad:
            self.controller.rerun(r, r.target)

    def set_view(self, key: str) -> None:
        self._set(view=key)

    def set_layer(self, layer: int) -> None:
        """The layer slider: the layer, or the start layer of a cumulative view (clamped)."""
        self.session.set_slider(layer)
        self.refresh_view()

    def step_layer(self, delta: int) -> None:
        self.set_layer(self.session.slider_value() + delta)

    def _set_scale_options(self, changes: dict) -> None:
        """Colour scale, artefact and mask options; a fixed range that cannot be used is said, not applied."""
        try:
            self.session.set_options(**changes)
        except ValueError as e:
            self.statusBar().showMessage(f"Colour scale not changed: {e}", 8000)
        self.refresh_view()

    def set_head(self, head: Any) -> None:
        self._set(head=head)

    def step_head(self, delta: int) -> None:
        self.set_head(self.session.next_head(delta))

    def set_query(self, index: int) -> None:
        self._query_chosen = True  # the user's patch is kept across models
        self._set(query=int(index))

    def _on_head_tile(self, layer: int, head: int) -> None:
        changes: dict[str, Any] = {"layer": layer, "head": head}
        if "head" not in self.session.view.reads:  # a head was picked: show it
            changes["view"] = "cls"
        self._set(**changes)

    def _toggle_grid(self) -> None:
        self.heads.grid_toggle.setChecked(not self.heads.grid_toggle.isChecked())
        self.docks["heads"].show()

    def _restore_grid(self, all_layers: bool) -> None:
        """An opened session's heads grid toggle, set before its result is drawn (no redraw of its own)."""
        with QSignalBlocker(self.heads.grid_toggle):
            self.heads.grid_toggle.setChecked(all_layers)
        self.acts.grid.setChecked(all_layers)

    def _on_canvas_click(self, x: float, y: float) -> None:
        rc = self.session.image_to_patch(x, y)
        if rc is not None and self.session.result is not None:
            self.set_query(rc[0] * self.session.result.grid[1] + rc[1])

    def _on_hover(self, x: float, y: float) -> None:
        self._hover_xy = None if x != x else (x, y)  # NaN: the cursor left the image
        self.hover_label.setText(self.session.hover_text(x, y))

    # ================================================================== drawing
    def refresh_view(self) -> None:
        """Redraw from the stored result (never runs the model). Errors go to the dialog, never only to stderr."""
        try:
            self._refresh_view()
        except Exception as e:  # noqa: BLE001
            self.show_error("Could not draw the view", describe_error(e, self.session.caption()),
                            traceback.format_exc())

    def _refresh_view(self) -> None:
        s, o = self.session, self.session.options
        self.canvas.set_colormap(o.cmap)
        self.canvas.set_opacity(o.opacity)
        r = s.result
        v = s.view
        if r is not None:
            p = panel_of(s)  # what the panel shows: the Compare window and the figure files draw the same
            self.canvas.set_colormap(p.scale.cmap if p.scale is not None else o.cmap)
            self.canvas.set_overlay(p.grid_values, p.scale, label=p.colorbar_label, tooltip=p.scale_text)
            self.canvas.set_rgb(p.rgb, photo=p.photo_shown, opacity=p.opacity)
            self.canvas.set_marker(p.marker)
            self.canvas.set_artefacts(list(p.outlined), p.grid)
            self.canvas.set_neutral(list(p.neutral), p.grid)
            self.canvas.set_mask(p.mask, p.mask_style)
            self.canvas.set_title(p.title)
            self.status.set_artefacts(s.artefact_text())
            if p.unavailable is not None:
                self.statusBar().showMessage(f"{v.title} is not available: {p.unavailable}", 8000)
            elif " is not available: " in self.statusBar().currentMessage():
                self.statusBar().clearMessage()  # the view is available now (e.g. a target was chosen)
            if self._hover_xy is not None:  # the read-out follows the new map at once (not at the next move)
                self._on_hover(*self._hover_xy)
        self.controls.refresh(s)
        for key, a in self.acts.views.items():
            a.setChecked(key == o.view)
        if r is not None:
            self.heads.refresh(s)
            self.plots.refresh(s)
        self._update_title()
        self.viewRefreshed.emit()

    def _refresh_all(self, new_result: bool = False) -> None:
        r = self.session.result
        if r is not None and new_result:
            self.canvas.set_photo(r.rgb)
            y0, x0, y1, x1 = self.session.crop_rect_yx()
            self.canvas.set_crop(x0, y0, x1 - x0, y1 - y0)
            self.predictions.refresh(self.session)
        self.refresh_view()
        self._update_model_label()

    def _update_title(self) -> None:
        r = self.session.result
        if r is None:
            self.setWindowTitle("vitviz")
            return
        n = len(self.session.images)
        pos = f" ({self.session.index + 1}/{n})" if n > 1 and self.session.index >= 0 else ""
        self.setWindowTitle(f"{Path(r.source).name}{pos} — {self.session.describe_view()} — vitviz")

    # ================================================================== export (vitviz.gui.export_service)
    def export_view(self, path: str, scale: Any = None) -> Path | None:
        """Write the current view as a figure to ``path`` (PNG / SVG / PDF; PNG at ``scale``, default "print")."""
        return self.exports.export_view(path, scale=scale)

    def export_heads(self, path: str, scale: Any = None) -> Path | None:
        """Write every head of the current layer (every layer x head when the heads panel shows all) to ``path``."""
        return self.exports.export_view(path, heads=True, all_layers=self.heads.all_layers, scale=scale)

    def export_animation(self, path: str, scale: Any = None) -> Path | None:
        """Write the current view over every layer as GIF / APNG / MP4 (by extension) to ``path``."""
        return self.exports.export_animation(path, scale=scale)

    def export_dialog(self, heads: bool = False, animation: bool = False) -> None:
        self.exports.export_dialog(heads=heads, animation=animation, all_layers=self.heads.all_layers)

    def export_metadata(self) -> dict[str, str] | None:
        """Text entries written into every exported figure (:func:`vitviz.render.figures.save`): the session's state
        (``{"vitviz.session": ...}``, read back by :func:`vitviz.render.figures.read_metadata`); None: none."""
        return self.sessions.metadata()

    # ================================================================== sessions and comparisons
    def save_session(self, path: str) -> Path | None:
        """Write the window's state to ``path`` (:mod:`vitviz.document.state`); asks before replacing a file."""
        return self.sessions.save(path)

    def open_session(self, path: str) -> bool:
        """Open a ``.vitviz.json`` or a figure vitviz exported: its model, images, target and options (in the
        background); False, with an error dialog and the window unchanged, when it cannot be."""
        return self.sessions.open(path)

    def show_compare(self, spec: Any = None) -> Any:
        """Show the Compare window (:mod:`vitviz.gui.compare_window`), with ``spec`` (a
        :class:`vitviz.document.comparison.CompareSpec`) when given."""
        if self.compare_window is None:
            from vitviz.gui.compare_window import CompareWindow  # (made when first asked for: not at start-up)

            cw = CompareWindow(self, session=self.session, controller=self.controller, exports=self.exports,
                               show_error=self.show_error, metadata=self.sessions.metadata, spec=spec)
            self.viewRefreshed.connect(cw.refresh)
            cw.querySelected.connect(self.set_query)  # a patch clicked there: the query patch here (and there)
            self.compare_window = cw
        elif spec is not None:
            self.compare_window.set_spec(spec)
        self.compare_window.show()
        self.compare_window.raise_()
        return self.compare_window

    def shown_comparison(self) -> Any:
        """The Compare window's spec while it is shown (a session saved now keeps it), else None."""
        cw = self.compare_window
        return cw.spec if cw is not None and cw.isVisible() else None

    def copy_view(self) -> None:
        arr = render_view(self.session)
        if arr is not None:
            QApplication.clipboard().setImage(qimage_from_rgb(arr))
            self.statusBar().showMessage(f"Copied the view ({arr.shape[1]}×{arr.shape[0]}) to the clipboard", 5000)

    # ================================================================== help
    def show_shortcuts(self) -> None:
        self.dialogs.info("Keyboard shortcuts", help.shortcuts_html())

    def show_about(self) -> None:
        title = self.controller.title() if self.model is not None else "–"
        self.dialogs.info("About vitviz", help.about_html(title, self.device, self.precision))

    # ================================================================== events
    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self._docks_fitted and self.prefs.window_state() is None:  # the docks fit the size first shown at
            fit_docks(self, self.docks, reserve=self.canvas.colorbar.width())  # the canvas keeps half the width
        self._docks_fitted = True

    def closeEvent(self, event) -> None:
        self._closing = True
        try:
            self.save_settings()
        finally:
            if self.compare_window is not None:
                self.compare_window.close()  # it frees its results
            self.controller.shutdown()  # the worker stops; the model and the kept tables are let go
        super().closeEvent(event)

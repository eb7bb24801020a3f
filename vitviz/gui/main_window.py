"""The main window: canvas in the centre, docks for controls, heads, plots and predictions.

Thin by design: the document is :class:`vitviz.document.session.Session`, the model and its jobs are
:class:`~vitviz.gui.controller.Controller`, the remembered settings :class:`~vitviz.gui.settings.Prefs`, the views
come from :mod:`vitviz.views`, and every dialog goes through :class:`~vitviz.gui.dialogs.Dialogs` (tests replace it).
The window creates its children and hands each helper only what it needs (the session, the controller, the dialogs,
the settings, a status callback): the model choices (:mod:`vitviz.gui.model_choice`), the exports of both windows
(:mod:`vitviz.gui.export_service`), session files (:mod:`vitviz.gui.session_files`), the target
(:mod:`vitviz.gui.targeting`), the text prompts (:mod:`vitviz.gui.prompting`), the open images' tokens of feature
PCA's joint fit (:mod:`vitviz.gui.token_reader`), opening images (:mod:`vitviz.gui.image_opening`), the user's
changes and their undo (:mod:`vitviz.gui.view_edits`), the drawing of the view (:mod:`vitviz.gui.view_drawing`) and
the Compare window (:mod:`vitviz.gui.compare_opening`). Menus and actions are :mod:`vitviz.gui.menus` and
:mod:`vitviz.gui.actions`, the status bar :mod:`vitviz.gui.statusbar`, the docks' sizes :mod:`vitviz.gui.geometry`.
Widgets write the user's intent here; the window passes it on and redraws from the session.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSettings, QSignalBlocker, Signal
from PySide6.QtWidgets import QMainWindow

from vitviz.document.session import Session
from vitviz.gui import help
from vitviz.gui.actions import WindowActions
from vitviz.gui.canvas import Canvas
from vitviz.gui.compare_opening import CompareOpener
from vitviz.gui.controller import Controller
from vitviz.gui.dialogs import Dialogs
from vitviz.gui.export_service import ExportService
from vitviz.gui.geometry import fit_docks, place_window
from vitviz.gui.heads import HeadsPanel
from vitviz.gui.image_drops import ImageDrops
from vitviz.gui.image_opening import ImageOpener
from vitviz.gui.menus import LEFT, RIGHT, add_docks, build_menus, build_toolbar, canvas_area
from vitviz.gui.model_choice import ModelChoice, offer_photo_models
from vitviz.gui.panels import ControlsPanel, PredictionsPanel
from vitviz.gui.plots import PlotsPanel
from vitviz.gui.prompting import PromptPicker
from vitviz.gui.session_files import Sessions
from vitviz.gui.settings import FIRST_VIEW, Prefs, default_settings  # noqa: F401 - default_settings re-exported for callers
from vitviz.gui.startup import WorkAfterShow, startup_log
from vitviz.gui.statusbar import StatusParts
from vitviz.gui.targeting import TargetPicker
from vitviz.gui.token_reader import TokenReader
from vitviz.gui.toolbar import ModelBar
from vitviz.gui.view_drawing import draw_view, window_title
from vitviz.gui.view_edits import ViewEdits, follow_controls
from vitviz.gui.worker import describe_error

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
        self._docks_fitted = False
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
            "open_by_name": lambda: self.models.open_by_name(), "model": lambda ref: self.models.choose(ref),
            "undo": lambda: self.edits.undo(), "redo": lambda: self.edits.redo()})
        self.menus = build_menus(self.menuBar(), self.acts, self.docks)
        self.model_bar = ModelBar(self.menus.device, self.menus.precision)
        build_toolbar(self.addToolBar("Main"), self.acts, self.model_bar)
        self.models = ModelChoice(self, self.controller, self.prefs, self._dialogs, model_bar=self.model_bar,
                                  actions=self.acts, status=say, show_error=error, demo_chosen=model_key == "demo")
        self.targets = TargetPicker(self, session=self.session, controller=self.controller, dialogs=self._dialogs,
                                    prefs=self.prefs, predictions=self.predictions, show_error=error, status=say)
        self.prompts = PromptPicker(self, session=self.session, controller=self.controller, shown=self.resultShown,
                                    predictions=self.predictions, set_options=self._set, status=say)
        self.images = ImageOpener(self.session, self.controller, self.prefs, self._dialogs,
                                  switch_for_photo=self.models.switch_for_photo, open_session=self.open_session,
                                  recent_menu=self.menus.recent)
        self.edits = ViewEdits(self.session, redraw=lambda: self.refresh_view(), controller=self.controller,
                               choose_target=self.targets.choose, status=say)  # every change, and its undo
        self.open_tokens = TokenReader(self, session=self.session, controller=self.controller,
                                       redraw=lambda: self.refresh_view(), status=say)  # feature PCA's joint fit
        self._connect()
        self.comparisons = CompareOpener(self, session=self.session, controller=self.controller, exports=self.exports,
                                         show_error=self.show_error, metadata=self.sessions.metadata,
                                         followed=self.viewRefreshed, set_query=self.set_query)  # File > Compare
        self._restore_settings(first_view=None if model is not None else FIRST_VIEW)  # (vitviz.show: the table's)

        self._startup = WorkAfterShow(self, self.controller.runner)  # the model opens once the window is on screen
        if model is not None:
            self.controller.adopt(model, model_key or "memory")
        else:
            self.load_model(model_key or self.prefs.model_ref(), initial=True)
        if load_samples:
            self._startup.after_show(self.images.open_samples)

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
        for helper in (self.sessions, self.exports, self.models, self.targets, self.images):
            helper.dialogs = dialogs

    # ================================================================== construction
    def _connect(self) -> None:
        follow_controls(self.controls, self.edits)  # each control's change goes to the options, remembered
        self.viewRefreshed.connect(self.open_tokens.follow)
        self.heads.headSelected.connect(self.edits.head_tile)
        self.heads.grid_toggle.toggled.connect(self.acts.grid.setChecked)
        self.plots.layerHeadSelected.connect(self.edits.head_tile)
        self.plots.patchSelected.connect(self.set_query)
        self.plots.attach(self.controller)  # the Faithfulness and knock-out pages are built when first opened
        self.plots.viewRequested.connect(lambda view, changes: self._set(view=view, **changes))
        self.plots.outlineChanged.connect(self.canvas.set_ground_truth)
        self.predictions.targetChosen.connect(self.set_target)
        self.predictions.modelOffered.connect(self.models.choose_photo_model)  # once loaded: the model for photos
        self.canvas.hovered.connect(self._on_hover)
        self.canvas.clicked.connect(self.edits.canvas_click)
        self.cancel_button.clicked.connect(self.models.cancel)
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
        self.images.fill_recent()
        self._refresh_all()

    def save_settings(self) -> None:
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("windowState", self.saveState())
        self.prefs.save_view_options(self.session.options)
        self.prefs.save_model(self.model_key, self.device, self.precision)
        self.prefs.sync()

    # ================================================================== models (vitviz.gui.model_choice)
    def load_model(self, ref: str, *, initial: bool = False) -> None:
        """Load a model reference in the background (asks before a download unless named at start)."""
        self.models.load(ref, initial=initial)

    def open_checkpoint(self, path: str) -> None:
        self.models.open_checkpoint(path)

    def set_device(self, device: str) -> None:
        self.controller.set_device(device)

    def set_precision(self, precision: str) -> None:
        self.controller.set_precision(precision)

    def _update_offer(self) -> None:
        offer_photo_models(self.predictions, self.session.result, self.model_key)

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
    def open_images_dialog(self) -> None:
        self.images.open_dialog()

    def open_images(self, paths: list[str], *, remember: bool = True) -> None:
        """Add images to the set and show the first of them (a ``.vitviz.json`` among them opens as a session)."""
        self.images.open(paths, remember=remember)

    def step_image(self, delta: int) -> None:
        self.images.step(delta)

    def run_image(self, source: str, pil: Any = None, *, remember: bool = True) -> None:
        """Analyse ``source`` (a path, or the name of pixels ``pil``) with the model it asks for."""
        self.images.run(source, pil, remember=remember)

    def set_target(self, target: Any) -> None:
        """Make ``target`` the gradient target: a class index, or any target (:mod:`vitviz.gui.targeting`); re-runs
        the shown image in the background (a target that cannot be used: one message, the window unchanged)."""
        r = self.session.result
        if r is None or (isinstance(target, int) and target == r.target):
            return
        self.edits.set_target(target)  # (remembered for Ctrl+Z)

    def _on_result(self, result: Any, remember: bool) -> None:
        if self._closing:
            return
        try:
            centre = not self.edits.query_chosen and self.sessions.pending is None  # (a session's own patch is kept)
            self.sessions.before_result(result)  # an opened session's options, as its image arrives
            self.session.set_result(result, centre_query=centre)
            if remember:
                self.images.remember_shown(result.source)  # File > Open recent
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

    # ================================================================== view options (vitviz.gui.view_edits)
    def _set(self, **changes: Any) -> None:
        self.edits.set(**changes)

    def set_view(self, key: str) -> None:
        self.edits.set(view=key)

    def set_layer(self, layer: int) -> None:
        """The layer slider: the layer, or the start layer of a cumulative view (clamped)."""
        self.edits.set_layer(layer)

    def step_layer(self, delta: int) -> None:
        self.edits.step_layer(delta)

    def set_head(self, head: Any) -> None:
        self.edits.set(head=head)

    def step_head(self, delta: int) -> None:
        self.edits.step_head(delta)

    def set_query(self, index: int) -> None:
        self.edits.set_query(index)

    def undo(self) -> bool:
        """Ctrl+Z: back to the view, options and target shown before the last change."""
        return self.edits.undo()

    def redo(self) -> bool:
        return self.edits.redo()

    def _toggle_grid(self) -> None:
        self.heads.grid_toggle.setChecked(not self.heads.grid_toggle.isChecked())
        self.docks["heads"].show()

    def _restore_grid(self, all_layers: bool) -> None:
        """An opened session's heads grid toggle, set before its result is drawn (no redraw of its own)."""
        with QSignalBlocker(self.heads.grid_toggle):
            self.heads.grid_toggle.setChecked(all_layers)
        self.acts.grid.setChecked(all_layers)

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
        s = self.session
        draw_view(s, self.canvas, self.status)  # (what the Compare window and the figure files draw too)
        if s.result is not None and self._hover_xy is not None:  # the read-out follows the new map at once
            self._on_hover(*self._hover_xy)
        self.controls.refresh(s)
        for key, a in self.acts.views.items():
            a.setChecked(key == s.options.view)
        if s.result is not None:
            self.heads.refresh(s)
            self.plots.refresh(s)
        self.setWindowTitle(window_title(s))
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
        return self.comparisons.show(spec)

    @property
    def compare_window(self) -> CompareWindow | None:
        return self.comparisons.window

    def shown_comparison(self) -> Any:
        """The Compare window's spec while it is shown (a session saved now keeps it), else None."""
        return self.comparisons.shown_spec()

    def copy_view(self) -> None:
        self.exports.copy_view()

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
            self.comparisons.close()  # it frees its results
            self.exports.shutdown()  # an export still running is cancelled (its file: complete or absent)
            self.controller.shutdown()  # the worker stops; the model and the kept tables are let go
        super().closeEvent(event)

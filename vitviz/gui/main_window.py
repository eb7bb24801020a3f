"""The main window: canvas in the centre, docks for controls, heads, plots and predictions.

Thin by design: the document is :class:`vitviz.document.session.Session`, the model and its jobs are
:class:`~vitviz.gui.controller.Controller`, the remembered settings :class:`~vitviz.gui.settings.Prefs`, the views
come from :mod:`vitviz.views`, and every dialog goes through :class:`~vitviz.gui.dialogs.Dialogs` (tests replace it).
Widgets write the user's intent here; the window passes it on and redraws from the session.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, QTimer, Signal
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QMainWindow

from vitviz import imaging
from vitviz.gui import export_service as exporting, help
from vitviz.gui.controller import Controller
from vitviz.gui.dialogs import Dialogs, DownloadDialog, confirm_download, mime_content, qimage_from_rgb
from vitviz.gui.geometry import place_window
from vitviz.gui.menus import build_actions, build_layout, build_menus, build_toolbar, fill_recent_menu
from vitviz.gui.session_files import Sessions, is_session_file
from vitviz.gui.settings import Prefs, default_settings  # noqa: F401 - default_settings re-exported for callers
from vitviz.gui.statusbar import StatusParts
from vitviz.gui.worker import describe_error
from vitviz.document.session import Session


class MainWindow(QMainWindow):
    """The vitviz window.

    Args:
        settings: where preferences persist (default: ``$VITVIZ_SETTINGS`` or the user's settings).
        model: an already-built model to use instead of the remembered one (tests, scripts).
        model_key: a model reference (:mod:`vitviz.model.sources.refs`) to load on start.
        device: torch device to start on (default: remembered, else CPU).
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
                 device: str | None = None, dialogs: Dialogs | None = None, load_samples: bool = False):
        super().__init__()
        self.prefs = Prefs(settings)
        self.settings = self.prefs.qsettings
        self.dialogs = dialogs or Dialogs(self)
        self.session = Session()
        self.controller = Controller(self, device=device or self.prefs.device(), precision=self.prefs.precision())
        self._closing = False
        self._hover_xy: tuple[float, float] | None = None
        # the bundled model named by the caller or picked by the user: photos do not switch away from it
        self._demo_chosen = model_key == "demo"
        self.download_dialog = DownloadDialog(self, self.cancel_model_load)

        self.setWindowTitle("vitviz")
        self.setAcceptDrops(True)
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks)
        build_layout(self)

        self.status = StatusParts(self.statusBar())
        self.hover_label, self.busy_label, self.busy_bar = (self.status.hover_label, self.status.busy_label,
                                                            self.status.busy_bar)
        self.cancel_button, self.model_label = self.status.cancel_button, self.status.model_label
        self.cancel_button.clicked.connect(self.cancel_model_load)
        build_actions(self)
        build_menus(self)
        build_toolbar(self)
        self._connect()
        self.sessions = Sessions(self)  # File > Save / Open session (vitviz.gui.session_files)
        self.compare_window = None  # File > Compare (vitviz.gui.compare_window), made when first asked for
        self._restore_settings()

        if model is not None:
            self.controller.adopt(model, model_key or "memory")
        else:
            self.load_model(model_key or self.prefs.model_ref(), initial=True)
        if load_samples:
            QTimer.singleShot(0, self._open_samples)

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
        self.heads.headSelected.connect(self._on_head_tile)
        self.heads.grid_toggle.toggled.connect(self.act_grid.setChecked)
        self.plots.layerHeadSelected.connect(self._on_head_tile)
        self.plots.patchSelected.connect(self.set_query)
        self.plots.faithfulness.attach(self.controller)
        self.plots.faithfulness.viewRequested.connect(lambda view, changes: self._set(view=view, **changes))
        self.predictions.targetChosen.connect(self.set_target)
        self.predictions.modelOffered.connect(self.choose_photo_model)
        self.canvas.hovered.connect(self._on_hover)
        self.canvas.clicked.connect(self._on_canvas_click)
        self.model_bar.modelChosen.connect(self._on_model_chosen)
        self.model_bar.deviceChosen.connect(self.controller.set_device)
        self.model_bar.precisionChosen.connect(self.controller.set_precision)
        ctl = self.controller
        ctl.modelChanged.connect(self._on_model_changed)
        ctl.resultReady.connect(self._on_result)
        ctl.failed.connect(self._on_failed)
        ctl.busy.connect(self._set_busy)
        ctl.progress.connect(self._on_progress)

    # ================================================================== settings
    def _restore_settings(self) -> None:
        place_window(self, self.prefs.geometry(), self.prefs.window_state())  # sized and clamped to the screen
        self.session.set_options(**self.prefs.view_options())
        self.model_bar.fill_devices(self.device, self.precision)
        self._fill_model_combo()
        self._rebuild_recent_menu()
        self._refresh_all()

    def save_settings(self) -> None:
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("windowState", self.saveState())
        self.prefs.save_view_options(self.session.options)
        self.prefs.save_model(self.model_key, self.device, self.precision)
        self.prefs.sync()

    def _rebuild_recent_menu(self) -> None:
        fill_recent_menu(self.recent_menu, self.prefs.recent_files(), lambda p: self.open_images([p]),
                         lambda: (self.prefs.clear_recent_files(), self._rebuild_recent_menu()))

    # ================================================================== models
    def load_model(self, ref: str, *, initial: bool = False) -> None:
        """Load a model reference in the background (asks before a download unless named at start)."""
        if not initial and ref == "demo":
            self._demo_chosen = True
        if not initial and not confirm_download(self.dialogs, ref):
            self._fill_model_combo()
            if self.model is None:  # first start without the remembered weights: use the demo model
                self.load_model("demo", initial=True)
            return
        self.controller.load(ref)
        self._fill_model_combo()

    def cancel_model_load(self) -> None:
        self.download_dialog.close()
        self.controller.cancel_load()
        self._fill_model_combo()
        self.statusBar().showMessage("Model loading cancelled", 4000)
        if self.model is None:  # cancelled before any model was in use: the bundled one
            self.load_model("demo", initial=True)

    def choose_photo_model(self, ref: str) -> None:
        """A button of the first-run offer: load ``ref`` (the button showed its size: no second question); once
        loaded it is remembered as the model for photos (:meth:`_on_model_changed`)."""
        if ref != self.model_key and ref != self.controller.loading:
            self.load_model(ref, initial=True)

    def _switch_for_photo(self, source: str) -> None:
        """A photo opened with the bundled shapes model switches to the model for photos when one is cached
        (:func:`vitviz.model.sources.catalog.photo_default`), unless the user chose the shapes model."""
        from vitviz.model.sources import catalog
        from vitviz.model.sources.refs import describe_ref

        c = self.controller
        if (c.loading or c.ref) != "demo" or self._demo_chosen or not catalog.is_photo(source):
            return
        ref = catalog.photo_default(self.prefs.photo_model())
        if ref is not None:
            self.statusBar().showMessage(f"Photos open with {describe_ref(ref)} (the bundled model only knows 8 "
                                         "synthetic shapes); the Model menu changes it", 10000)
            self.load_model(ref, initial=True)

    def _update_offer(self) -> None:
        """The first-run offer in the predictions panel: shown for a photo analysed by the bundled shapes model."""
        from vitviz.model.sources import catalog

        r = self.session.result
        show = r is not None and self.model_key == "demo" and catalog.is_photo(r.source)
        offers = catalog.photo_offers() if show else []
        self.predictions.set_offer(offers, {m.ref for m in offers if catalog.ref_is_cached(m.ref)})

    def open_checkpoint(self, path: str) -> None:
        self.prefs.remember_folder(path)
        self.load_model(f"file:{path}")

    def open_checkpoint_dialog(self, folder: bool = False) -> None:
        ask = self.dialogs.open_checkpoint_folder if folder else self.dialogs.open_checkpoint_file
        p = ask(self.prefs.last_folder())
        if p:
            self.open_checkpoint(p)
        else:
            self._fill_model_combo()

    def _on_model_chosen(self, ref: str) -> None:
        if ref in ("open-file", "open-folder"):
            self.open_checkpoint_dialog(ref == "open-folder")
        elif ref and ref != self.model_key:
            self.load_model(ref)

    def set_device(self, device: str) -> None:
        self.controller.set_device(device)

    def set_precision(self, precision: str) -> None:
        self.controller.set_precision(precision)

    def _fill_model_combo(self) -> None:
        """The model bar names the model in use, or the one being loaded (never the previous one meanwhile)."""
        from vitviz.model.sources.refs import describe_ref

        c = self.controller
        if c.loading:
            self.model_bar.fill_models(c.loading, f"{describe_ref(c.loading)} (loading…)", self.prefs.recent_models())
        else:
            self.model_bar.fill_models(self.model_key, c.title(), self.prefs.recent_models())

    def _on_model_changed(self, note: str) -> None:
        self.prefs.add_recent_model(self.model_key)
        self.prefs.set_photo_model(self.model_key)  # the last named model used is the one photos open with
        self.download_dialog.close()
        self._update_offer()
        self._fill_model_combo()
        self.model_bar.fill_devices(self.device, self.precision)
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
            from vitviz.demo import sample_images
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
        self._run(paths[0], remember=remember)

    def step_image(self, delta: int) -> None:
        """PageDown / PageUp: counts from the image last asked for, so quick presses each move on."""
        p = self.session.step(delta, start=self.controller.requested)
        if p is not None:
            self._run(p)

    def paste_image(self) -> None:
        cb = QApplication.clipboard()
        if not self._open_mime(cb.mimeData(), "pasted image", cb.image()):
            self.show_error("Nothing to paste", "The clipboard holds no image and no image file.")

    def _open_mime(self, md: Any, source: str, image: QImage | None = None) -> bool:
        """Open the files of a paste or drop, else its pixels; False when it holds neither."""
        files, rgb = mime_content(md, image)
        if files:
            self.open_images(files)
        elif rgb is not None:
            try:
                self._run(source, imaging.image_from_array(rgb).image)
            except Exception as e:  # noqa: BLE001 - shown, never only printed
                self.show_error(f"Could not open the {source}", describe_error(e, source))
        return bool(files) or rgb is not None

    def _run(self, source: str, pil: Any = None, *, remember: bool = True) -> None:
        self._switch_for_photo(source)
        self.controller.run(source, pil, remember=remember)

    def set_target(self, class_index: int) -> None:
        """Make ``class_index`` the gradient target (re-runs the model in the background)."""
        r = self.session.result
        if r is None or class_index == r.target:
            return
        self.controller.rerun(r, target=int(class_index))
        self.predictions.refresh(self.session, pending_target=int(class_index))

    def _on_result(self, result: Any, remember: bool) -> None:
        if self._closing:
            return
        try:
            self.sessions.before_result(result)  # an opened session's options, as its image arrives
            self.session.set_result(result)
            if remember and result.source in self.session.images:
                self.prefs.add_recent_file(result.source)
                self._rebuild_recent_menu()
            self._refresh_all(new_result=True)
            self._update_offer()
        except Exception as e:  # noqa: BLE001 - shown, never only printed
            import traceback

            self.show_error("Could not show the result", describe_error(e, result.source), traceback.format_exc())
            return
        self._startup_log("first overlay")
        self.resultShown.emit()

    def _on_failed(self, kind: str, title: str, message: str, detail: str, subject: str) -> None:
        if self._closing:
            return
        if kind == "model":
            self.download_dialog.close()
            self._fill_model_combo()
            self.model_bar.fill_devices(self.device, self.precision)
        elif kind == "infer":
            r = self.session.result
            if r is None or subject != r.source:
                self.session.forget_image(subject)  # unreadable: keep it out of the image set
            self.predictions.refresh(self.session)
        self.show_error(title, message, detail)

    def _on_progress(self, done: int, total: int) -> None:
        self.status.set_progress(done, total)
        loading = self.controller.loading
        if loading:
            from vitviz.model.sources.refs import describe_ref

            self.download_dialog.update(describe_ref(loading), done, total)

    def _set_busy(self, text: str, cancellable: bool = False) -> None:
        c = self.controller
        self.status.set_busy(text, c.is_busy(), cancellable, c.is_busy("model"))
        if not c.loading:
            self.download_dialog.close()

    def show_error(self, title: str, message: str, detail: str = "") -> None:
        """The one place errors reach the user."""
        self.errorShown.emit(title, message)
        self.statusBar().showMessage(f"{title}: {message.splitlines()[0] if message else ''}", 10000)
        self.dialogs.error(title, message, detail)

    # ================================================================== view options
    def _set(self, **changes: Any) -> None:
        self.session.set_options(**changes)
        self.refresh_view()

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
        self._set(query=int(index))

    def _on_head_tile(self, layer: int, head: int) -> None:
        changes: dict[str, Any] = {"layer": layer, "head": head}
        if "head" not in self.session.view.reads:  # a head was picked: show it
            changes["view"] = "cls"
        self._set(**changes)

    def _toggle_grid(self) -> None:
        self.heads.grid_toggle.setChecked(not self.heads.grid_toggle.isChecked())
        self._docks["heads"].show()

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
            import traceback

            self.show_error("Could not draw the view", describe_error(e, self.session.caption()),
                            traceback.format_exc())

    def _refresh_view(self) -> None:
        s, o = self.session, self.session.options
        self.canvas.set_colormap(o.cmap)
        self.canvas.set_opacity(o.opacity)
        r = s.result
        v = s.view
        if r is not None:
            m = s.current_map()
            scale = s.levels() if m is not None else None
            self.canvas.set_colormap(s.colormap(scale))
            self.canvas.set_overlay(s.display_map(), scale, label=s.quantity_text(), tooltip=s.scale_text())
            self.canvas.set_marker(s.patch_rect(o.query) if s.shows_query() else None)
            self.canvas.set_artefacts(s.artefact_patches(), r.grid)
            self.canvas.set_mask(s.mask(), o.mask_style)
            self.canvas.set_title(s.title() if m is not None else f"{v.title}: not available")
            self.status.set_artefacts(s.artefact_text())
            if m is None:
                self.statusBar().showMessage(f"{v.title} is not available: {s.unavailable_reason()}", 8000)
            if self._hover_xy is not None:  # the read-out follows the new map at once (not at the next move)
                self._on_hover(*self._hover_xy)
        self.controls.refresh(s)
        for key, a in self.view_actions.items():
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

    # ================================================================== export
    def export_view(self, path: str, scale: Any = None) -> Path | None:
        """Write the current view as a figure to ``path`` (PNG / SVG / PDF by extension; PNG at ``scale``, default
        the remembered one, "print"); asks before replacing a file (:mod:`vitviz.gui.export_service`)."""
        return exporting.export_figure(self, path, scale=scale)

    def export_heads(self, path: str, scale: Any = None) -> Path | None:
        """Write every head of the current layer (every layer x head when the heads panel shows all) to ``path``."""
        return exporting.export_figure(self, path, heads=True, scale=scale)

    def export_animation(self, path: str, scale: Any = None) -> Path | None:
        """Write the current view over every layer as GIF / APNG / MP4 (by extension) to ``path``."""
        return exporting.export_animation(self, path, scale=scale)

    def export_dialog(self, heads: bool = False, animation: bool = False) -> None:
        exporting.export_dialog(self, heads=heads, animation=animation)

    def export_metadata(self) -> dict[str, str] | None:
        """Text entries written into every exported figure and animation (PNG text chunks, SVG and PDF metadata;
        see :func:`vitviz.render.figures.save`); None: only the figure's title and caption. The session's state goes
        here, e.g. ``{"vitviz.document.session": json.dumps(state)}``; :func:`vitviz.render.figures.read_metadata` reads it back."""
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
        from vitviz.gui.compare_window import CompareWindow

        if self.compare_window is None:
            self.compare_window = CompareWindow(self, spec)
        elif spec is not None:
            self.compare_window.set_spec(spec)
        self.compare_window.show()
        self.compare_window.raise_()
        return self.compare_window

    def copy_view(self) -> None:
        arr = self.session.render_export()
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
    def _startup_log(self, what: str) -> None:
        """With ``VITVIZ_STARTUP_LOG=1``: print when the window is first shown / the first overlay is drawn."""
        if os.environ.get("VITVIZ_STARTUP_LOG") and what not in getattr(self, "_logged", set()):
            import vitviz

            self._logged = getattr(self, "_logged", set()) | {what}
            print(f"vitviz: {what} after {time.perf_counter() - vitviz._T0:.2f} s", file=sys.stderr, flush=True)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        QTimer.singleShot(0, lambda: self._startup_log("window shown"))

    def dragEnterEvent(self, event) -> None:
        md = event.mimeData()
        if md.hasUrls() and any(u.isLocalFile() for u in md.urls()) or md.hasImage():
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event) -> None:
        if self._open_mime(event.mimeData(), "dropped image"):
            event.acceptProposedAction()

    def closeEvent(self, event) -> None:
        self._closing = True
        try:
            self.save_settings()
        finally:
            self.controller.shutdown()
        super().closeEvent(event)

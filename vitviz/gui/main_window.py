"""The main window: canvas in the centre, docks for controls, heads, plots and predictions.

Thin by design: the document is :class:`vitviz.session.Session`, the model and its jobs are
:class:`~vitviz.gui.controller.Controller`, the remembered settings :class:`~vitviz.gui.settings.Prefs`, the views
come from :mod:`vitviz.views`, and every dialog goes through :class:`~vitviz.gui.dialogs.Dialogs` (tests replace it).
Widgets write the user's intent here; the window passes it on and redraws from the session.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QActionGroup, QColor, QImage, QKeySequence
from PySide6.QtWidgets import (
    QApplication, QDockWidget, QHBoxLayout, QLabel, QMainWindow, QProgressBar, QStyle, QToolButton, QWidget,
)

from vitviz import __version__, imaging, views
from vitviz.gui.canvas import Canvas
from vitviz.gui.controller import Controller
from vitviz.gui.dialogs import Dialogs, qimage_from_rgb, rgb_from_qimage
from vitviz.gui.panels import ControlsPanel, HeadsPanel, PredictionsPanel
from vitviz.gui.plots import PlotsPanel
from vitviz.gui.settings import Prefs, default_settings  # noqa: F401 - default_settings re-exported for callers
from vitviz.gui.toolbar import ModelBar
from vitviz.gui.worker import describe_error
from vitviz.session import HEAD_REDUCTIONS, Session


def shortcut_rows() -> list[tuple[str, str]]:
    """The keyboard shortcuts (the view keys come from the registry)."""
    keys = [views.shortcut(v) for v in views.all_views()]
    keys = [k for k in keys if k]
    view_keys = f"{keys[0]} ... {keys[-1]}" if len(keys) > 1 else (keys[0] if keys else "")
    return [
        ("Left / Right", "previous / next layer"),
        ("Home / End", "first / last layer"),
        ("Up / Down", "previous / next head (mean, max, min, head 0 ...)"),
        (view_keys, "choose the view"),
        ("Click on the image", "select the query patch"),
        ("Mouse wheel / drag", "zoom / pan"),
        ("F / double-click", "fit the image to the window"),
        ("G", "heads panel: this layer / all layers"),
        ("PageUp / PageDown", "previous / next image"),
        ("Ctrl+O", "open images"),
        ("Ctrl+V", "paste an image"),
        ("Ctrl+E", "export the view as PNG (image resolution)"),
        ("Ctrl+Shift+E", "export all heads of this layer as one PNG"),
        ("Ctrl+C", "copy the view to the clipboard"),
        ("F1", "this list"),
    ]


class MainWindow(QMainWindow):
    """The vitviz window.

    Args:
        settings: where preferences persist (default: ``$VITVIZ_SETTINGS`` or the user's settings).
        model: an already-built model to use instead of the remembered one (tests, scripts).
        model_key: a model reference (:mod:`vitviz.model.sources`) to load on start.
        device: torch device to start on (default: remembered, else CPU).
        dialogs: a :class:`Dialogs` replacement.
        load_samples: open the bundled sample images when nothing else is opened.

    Signals:
        resultShown(): a new inference result is on screen.
        errorShown(title, message): an error dialog was shown.
        modelChanged(): a newly loaded model is in use.
    """

    resultShown = Signal()
    errorShown = Signal(str, str)
    modelChanged = Signal()

    def __init__(self, *, settings: QSettings | None = None, model: Any = None, model_key: str | None = None,
                 device: str | None = None, dialogs: Dialogs | None = None, load_samples: bool = False):
        super().__init__()
        self.prefs = Prefs(settings)
        self.settings = self.prefs.qsettings
        self.dialogs = dialogs or Dialogs(self)
        self.session = Session()
        self.controller = Controller(self, device=device or self.prefs.device(), precision=self.prefs.precision())
        self._closing = False
        self._shown_once = False

        self.setWindowTitle("vitviz")
        self.setAcceptDrops(True)
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks)
        self.canvas = Canvas()
        central = QWidget()
        cl = QHBoxLayout(central)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(self.canvas, 1)
        cl.addWidget(self.canvas.colorbar)
        central.setAutoFillBackground(True)
        pal = central.palette()
        pal.setColor(central.backgroundRole(), QColor(38, 38, 42))
        central.setPalette(pal)
        self.setCentralWidget(central)
        self.controls, self.heads = ControlsPanel(), HeadsPanel()
        self.plots, self.predictions = PlotsPanel(), PredictionsPanel()
        self._docks: dict[str, QDockWidget] = {}
        left, right = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
        for name, title, widget, area in (("controls", "Controls", self.controls, left),
                                          ("predictions", "Predictions", self.predictions, left),
                                          ("heads", "Heads", self.heads, right), ("plots", "Plots", self.plots, right)):
            self._add_dock(name, title, widget, area)
        d = self._docks
        self.resizeDocks([d["controls"], d["predictions"]], [560, 200], Qt.Orientation.Vertical)
        self.resizeDocks([d["heads"], d["plots"]], [360, 460], Qt.Orientation.Vertical)
        self.resizeDocks([d["controls"], d["heads"]], [290, 400], Qt.Orientation.Horizontal)

        self._build_status_bar()
        self._build_actions()
        self._build_menus()
        self._build_toolbar()
        self._connect()
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
    def _add_dock(self, name: str, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> None:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock_{name}")
        dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetFloatable
                         | QDockWidget.DockWidgetFeature.DockWidgetClosable)
        self.addDockWidget(area, dock)
        self._docks[name] = dock

    def _build_status_bar(self) -> None:
        sb = self.statusBar()
        self.hover_label = QLabel("")
        self.hover_label.setMinimumWidth(380)
        sb.addWidget(self.hover_label, 1)
        self.busy_label = QLabel("")
        self.busy_bar = QProgressBar()
        self.busy_bar.setMaximumWidth(160)
        self.busy_bar.setMaximumHeight(14)
        self.busy_bar.setTextVisible(False)
        self.busy_bar.setRange(0, 0)
        self.cancel_button = QToolButton()
        self.cancel_button.setText("Cancel")
        self.cancel_button.clicked.connect(self.cancel_model_load)
        for w in (self.busy_label, self.busy_bar, self.cancel_button):
            w.setVisible(False)
            sb.addPermanentWidget(w)
        self.model_label = QLabel("no model")
        self.model_label.setToolTip("Model · input size · device · precision")
        sb.addPermanentWidget(self.model_label)

    def _action(self, text: str, slot, shortcut: Any = None) -> QAction:
        a = QAction(text, self)
        if shortcut is not None:
            if isinstance(shortcut, (list, tuple)):
                a.setShortcuts([QKeySequence(s) for s in shortcut])
            else:
                a.setShortcut(QKeySequence(shortcut))
            a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        a.triggered.connect(lambda *_: slot())
        self.addAction(a)
        return a

    def _build_actions(self) -> None:
        K, S = Qt.Key, QKeySequence.StandardKey
        self.act_open = self._action("&Open images…", self.open_images_dialog, S.Open)
        self.act_paste = self._action("&Paste image", self.paste_image, S.Paste)
        self.act_next_image = self._action("&Next image", lambda: self.step_image(1), K.Key_PageDown)
        self.act_prev_image = self._action("P&revious image", lambda: self.step_image(-1), K.Key_PageUp)
        self.act_export = self._action("&Export view as PNG…", lambda: self.export_dialog(heads=False), "Ctrl+E")
        self.act_export_heads = self._action("Export all &heads of this layer…",
                                             lambda: self.export_dialog(heads=True), "Ctrl+Shift+E")
        self.act_copy = self._action("&Copy view to clipboard", self.copy_view, S.Copy)
        self.act_quit = self._action("&Quit", self.close, S.Quit)
        self.act_prev_layer = self._action("Previous layer", lambda: self.step_layer(-1), K.Key_Left)
        self.act_next_layer = self._action("Next layer", lambda: self.step_layer(1), K.Key_Right)
        self.act_first_layer = self._action("First layer", lambda: self.set_layer(0), K.Key_Home)
        self.act_last_layer = self._action("Last layer", lambda: self.set_layer(10 ** 6), K.Key_End)
        self.act_prev_head = self._action("Previous head", lambda: self.step_head(-1), K.Key_Up)
        self.act_next_head = self._action("Next head", lambda: self.step_head(1), K.Key_Down)
        self.act_fit = self._action("&Fit image", self.canvas.fit, ["F", "Ctrl+0"])
        self.act_grid = self._action("All layers × heads grid", self._toggle_grid, "G")
        self.act_grid.setCheckable(True)
        self.view_actions: dict[str, QAction] = {}
        self.view_group = QActionGroup(self)
        for v in views.all_views():  # one action per registered view, with its shortcut
            a = self._action(v.title, lambda k=v.key: self.set_view(k), views.shortcut(v))
            a.setCheckable(True)
            self.view_group.addAction(a)
            self.view_actions[v.key] = a
        self.act_shortcuts = self._action("&Keyboard shortcuts", self.show_shortcuts, "F1")
        self.act_about = self._action("&About vitviz", self.show_about)
        self.act_open_ckpt = self._action("Open checkpoint &file…", lambda: self.open_checkpoint_dialog(False))
        self.act_open_ckpt_dir = self._action("Open checkpoint f&older…", lambda: self.open_checkpoint_dialog(True))

    def _build_menus(self) -> None:
        mb = self.menuBar()
        f = mb.addMenu("&File")
        f.addAction(self.act_open)
        self.recent_menu = f.addMenu("Open &recent")
        for group in ((self.act_paste,), (self.act_prev_image, self.act_next_image),
                      (self.act_export, self.act_export_heads, self.act_copy), (self.act_quit,)):
            for a in group:
                f.addAction(a)
            f.addSeparator()
        m = mb.addMenu("&Model")
        m.addAction(self.act_open_ckpt)
        m.addAction(self.act_open_ckpt_dir)
        self.device_menu = m.addMenu("&Device")
        self.precision_menu = m.addMenu("&Precision")
        v = mb.addMenu("&View")
        for a in self.view_actions.values():
            v.addAction(a)
        v.addSeparator()
        for a in (self.act_prev_layer, self.act_next_layer, self.act_first_layer, self.act_last_layer,
                  self.act_prev_head, self.act_next_head):
            v.addAction(a)
        v.addSeparator()
        v.addAction(self.act_fit)
        v.addAction(self.act_grid)
        v.addSeparator()
        panels = v.addMenu("&Panels")
        for dock in self._docks.values():
            panels.addAction(dock.toggleViewAction())
        h = mb.addMenu("&Help")
        h.addAction(self.act_shortcuts)
        h.addAction(self.act_about)

    def _build_toolbar(self) -> None:
        tb = self.addToolBar("Main")
        tb.setObjectName("toolbar_main")
        tb.setMovable(False)
        tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        st, SP = self.style(), QStyle.StandardPixmap
        for act, icon, short in ((self.act_open, SP.SP_DialogOpenButton, "Open"),
                                 (self.act_export, SP.SP_DialogSaveButton, "Export")):
            act.setIcon(st.standardIcon(icon))
            act.setIconText(short)
        self.act_prev_image.setIconText("◀ Prev")
        self.act_next_image.setIconText("Next ▶")
        self.act_fit.setIconText("Fit")
        for act in (self.act_open, self.act_prev_image, self.act_next_image, self.act_fit, self.act_export):
            act.setToolTip(f"{act.text().replace('&', '').rstrip('…')} ({act.shortcut().toString()})")
        for a in (self.act_open, self.act_prev_image, self.act_next_image):
            tb.addAction(a)
        tb.addSeparator()
        self.model_bar = ModelBar(self.device_menu, self.precision_menu)
        self.model_combo = self.model_bar.model_combo
        self.precision_combo = self.model_bar.precision_combo
        tb.addWidget(self.model_bar)
        tb.addSeparator()
        tb.addAction(self.act_fit)
        tb.addAction(self.act_export)

    def _connect(self) -> None:
        c = self.controls
        c.viewChanged.connect(self.set_view)
        c.layerChanged.connect(self.set_layer)
        c.headChanged.connect(self.set_head)
        c.rolloutChanged.connect(lambda f, d, s: self._set(head_fusion=f, discard_ratio=d, start_layer=s))
        c.colormapChanged.connect(lambda name: self._set(cmap=name))
        c.opacityChanged.connect(lambda v: self._set(opacity=v))
        c.interpolationChanged.connect(lambda m: self._set(interpolation=m))
        c.export_colorbar.toggled.connect(lambda b: self._set(colorbar=b))
        c.export_caption.toggled.connect(lambda b: self._set(caption=b))
        self.heads.headSelected.connect(self._on_head_tile)
        self.heads.grid_toggle.toggled.connect(self.act_grid.setChecked)
        self.plots.layerHeadSelected.connect(self._on_head_tile)
        self.plots.patchSelected.connect(self.set_query)
        self.predictions.targetChosen.connect(self.set_target)
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
        geo, state = self.prefs.geometry(), self.prefs.window_state()
        if geo is not None:
            self.restoreGeometry(geo)
        else:
            self.resize(1600, 1000)
        if state is not None:
            self.restoreState(state)
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

    def last_folder(self) -> str:
        return self.prefs.last_folder()

    def _remember_folder(self, path: str) -> None:
        self.prefs.remember_folder(path)

    def recent_files(self) -> list[str]:
        return self.prefs.recent_files()

    def _rebuild_recent_menu(self) -> None:
        self.recent_menu.clear()
        rec = self.prefs.recent_files()
        for p in rec:
            a = self.recent_menu.addAction(Path(p).name)
            a.setToolTip(p)
            a.setStatusTip(p)
            a.triggered.connect(lambda _=False, p=p: self.open_images([p]))
        if not rec:
            self.recent_menu.addAction("(none)").setEnabled(False)
        else:
            self.recent_menu.addSeparator()
            clear = self.recent_menu.addAction("Clear list")
            clear.triggered.connect(lambda: (self.prefs.clear_recent_files(), self._rebuild_recent_menu()))

    # ================================================================== models
    def load_model(self, ref: str, *, initial: bool = False) -> None:
        """Load a model reference in the background (asks before a download unless named at start)."""
        if ref.startswith("pretrained:") and not initial:
            from vitviz.model.pretrained import PRETRAINED, is_cached

            name = ref.split(":", 1)[1]
            info = PRETRAINED.get(name)
            if info is not None and not is_cached(name) and not self.dialogs.confirm(
                    "Download weights?", f"{name}: {getattr(info, 'description', '')}\n\nDownload "
                                         f"{getattr(info, 'size_mb', 0):.0f} MB from\n{info.url}?"):
                self._fill_model_combo()
                if self.model is None:  # first start without the remembered weights: use the demo model
                    self.load_model("demo", initial=True)
                return
        self.controller.load(ref)

    def cancel_model_load(self) -> None:
        self.controller.cancel_load()
        self._fill_model_combo()
        self.statusBar().showMessage("Model loading cancelled", 4000)

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
        self.model_bar.fill_models(self.model_key, self.controller.title(), self.prefs.recent_models())

    def _on_model_changed(self, note: str) -> None:
        self.prefs.add_recent_model(self.model_key)
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
        model = self.model
        if model is None:
            self.model_label.setText("no model")
            return
        spec = getattr(model, "spec", None)
        size = getattr(spec, "input_size", None)
        cfg = getattr(model, "config", None)
        arch = f"L{cfg.depth} H{cfg.num_heads} P{cfg.patch_size}" if cfg is not None else ""
        size_text = f"{size[0]}×{size[1]}" if size else "?"
        self.model_label.setText(f"<b>{self.controller.title()}</b> · {size_text} · {arch} · {self.device} · "
                                 f"{self.precision}")
        self.model_label.setToolTip(spec.describe() if hasattr(spec, "describe") else self.controller.title())

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
        """Add images to the set and show the first of them."""
        paths = [str(p) for p in paths if str(p)]
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
        md = QApplication.clipboard().mimeData()
        if md is not None and md.hasImage():
            img = QApplication.clipboard().image()
            if not img.isNull():
                try:
                    loaded = imaging.image_from_array(rgb_from_qimage(img), name=None)
                except Exception as e:  # noqa: BLE001
                    self.show_error("Could not paste the image", describe_error(e, "clipboard image"))
                    return
                self._run("pasted image", loaded.image)
                return
        files = [u.toLocalFile() for u in md.urls() if u.isLocalFile()] if md is not None and md.hasUrls() else []
        if not files and md is not None and md.hasText() and os.path.isfile(md.text().strip()):
            files = [md.text().strip()]
        if files:
            self.open_images(files)
        else:
            self.show_error("Nothing to paste", "The clipboard holds no image and no image file.")

    def _run(self, source: str, pil: Any = None, *, remember: bool = True) -> None:
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
            self.session.set_result(result)
            if remember and result.source in self.session.images:
                self.prefs.add_recent_file(result.source)
                self._rebuild_recent_menu()
            self._refresh_all(new_result=True)
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
            self._fill_model_combo()
            self.model_bar.fill_devices(self.device, self.precision)
        elif kind == "infer":
            r = self.session.result
            if r is None or subject != r.source:
                self.session.forget_image(subject)  # unreadable: keep it out of the image set
            self.predictions.refresh(self.session)
        self.show_error(title, message, detail)

    def _on_progress(self, done: int, total: int) -> None:
        if total > 0:
            self.busy_bar.setRange(0, 1000)
            self.busy_bar.setValue(int(1000 * done / total))
            self.busy_label.setText(f"Downloading… {done / 1e6:.0f} / {total / 1e6:.0f} MB")
        else:
            self.busy_bar.setRange(0, 0)

    def _set_busy(self, text: str, cancellable: bool = False) -> None:
        """Busy indicator in the status bar: shown while any job runs; Cancel only for downloads."""
        busy = self.controller.is_busy()
        if text:
            self.busy_label.setText(text)
            self.busy_bar.setRange(0, 0)
        elif not busy:
            self.busy_label.setText("")
        show = bool(text) or busy
        self.busy_label.setVisible(show)
        self.busy_bar.setVisible(show)
        if cancellable:
            self.cancel_button.setVisible(True)
        elif not self.controller.is_busy("model"):
            self.cancel_button.setVisible(False)

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
        lo, hi = self.session.layer_range()
        self._set(layer=min(max(int(layer), lo), hi))

    def step_layer(self, delta: int) -> None:
        self.set_layer(self.session.options.layer + delta)

    def set_head(self, head: Any) -> None:
        self._set(head=head)

    def step_head(self, delta: int) -> None:
        r = self.session.result
        choices = list(HEAD_REDUCTIONS) + (list(range(r.num_heads)) if r is not None else [])
        cur = self.session.options.head
        i = choices.index(cur) if cur in choices else 0
        self.set_head(choices[(i + delta) % len(choices)])

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
        if math.isnan(x) or self.session.result is None:
            self.hover_label.setText("")
            return
        info = self.session.hover(x, y)
        pix = f"pixel ({int(x)}, {int(y)})"
        if info is None:
            self.hover_label.setText(f"{pix} · outside the model's crop")
        else:
            self.hover_label.setText(f"{pix} · patch (row {info.row}, col {info.col}) · token {info.token} · "
                                     f"value {info.value:.4g}")

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
        if r is not None:
            m = s.current_map()
            self.canvas.set_overlay(s.display_map(), imaging.value_range(m) if m is not None else None)
            self.canvas.set_marker(s.patch_rect(o.query))
            if m is None:
                self.statusBar().showMessage(f"{s.view.title} is not available: {s.unavailable_reason()}", 8000)
        self.controls.refresh(s)
        for key, a in self.view_actions.items():
            a.setChecked(key == o.view)
        if r is not None:
            self.heads.refresh(s)
            self.plots.refresh(s)
        self._update_title()

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
    def export_view(self, path: str) -> Path | None:
        """Write the current view at the image's resolution to ``path`` (asks before replacing a file)."""
        return self._write_png(path, self.session.render_export())

    def export_heads(self, path: str) -> Path | None:
        """Write every head of the current layer, tiled, to ``path``."""
        return self._write_png(path, self.session.render_heads_grid())

    def export_dialog(self, heads: bool = False) -> None:
        if self.session.result is None:
            self.show_error("Nothing to export", "Open an image first.")
            return
        name = self.session.export_name("_heads" if heads else "")
        p = self.dialogs.save_png(str(imaging.next_free_path(Path(self.prefs.export_folder()) / name)))
        if p:
            (self.export_heads if heads else self.export_view)(p)

    def _write_png(self, path: str, arr: np.ndarray | None) -> Path | None:
        if arr is None:
            self.show_error("Nothing to export", "Open an image first.")
            return None
        try:
            try:
                out = imaging.write_png(path, arr, overwrite=False)
            except FileExistsError:
                if not self.dialogs.confirm_overwrite(str(path)):
                    return None
                out = imaging.write_png(path, arr, overwrite=True)
        except Exception as e:  # noqa: BLE001 - ExportError, OSError, ValueError: all shown
            self.show_error("Export failed", describe_error(e, str(path)))
            return None
        self.prefs.set_export_folder(str(Path(out).parent))
        self.statusBar().showMessage(f"Exported {out} ({arr.shape[1]}×{arr.shape[0]})", 8000)
        return out

    def copy_view(self) -> None:
        arr = self.session.render_export()
        if arr is not None:
            QApplication.clipboard().setImage(qimage_from_rgb(arr))
            self.statusBar().showMessage(f"Copied the view ({arr.shape[1]}×{arr.shape[0]}) to the clipboard", 5000)

    # ================================================================== help
    def show_shortcuts(self) -> None:
        rows = "".join(f"<tr><td style='padding-right:16px'><b>{k}</b></td><td>{v}</td></tr>"
                       for k, v in shortcut_rows())
        self.dialogs.info("Keyboard shortcuts", f"<table>{rows}</table>")

    def about_text(self) -> str:
        import PySide6
        import pyqtgraph
        import torch
        from PySide6.QtCore import qVersion

        from vitviz.pipeline import device_description

        model = self.controller.title() if self.model is not None else "–"
        return (f"<h3>vitviz {__version__}</h3><p>See what a Vision Transformer looks at.</p>"
                f"<table><tr><td>torch</td><td>{torch.__version__}</td></tr>"
                f"<tr><td>Qt</td><td>{qVersion()} (PySide6 {PySide6.__version__})</td></tr>"
                f"<tr><td>pyqtgraph</td><td>{pyqtgraph.__version__}</td></tr>"
                f"<tr><td>device</td><td>{device_description(self.device)}, {self.precision}</td></tr>"
                f"<tr><td>model</td><td>{model}</td></tr></table>")

    def show_about(self) -> None:
        self.dialogs.info("About vitviz", self.about_text())

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
        md = event.mimeData()
        files = [u.toLocalFile() for u in md.urls() if u.isLocalFile()] if md.hasUrls() else []
        files = [f for f in files if os.path.isfile(f)]
        if files:
            self.open_images(files)
            event.acceptProposedAction()
        elif md.hasImage():
            img = QImage(md.imageData())
            if not img.isNull():
                self._run("dropped image", imaging.image_from_array(rgb_from_qimage(img)).image)
                event.acceptProposedAction()

    def closeEvent(self, event) -> None:
        self._closing = True
        try:
            self.save_settings()
        finally:
            self.controller.shutdown()
        super().closeEvent(event)

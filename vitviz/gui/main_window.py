"""The main window: canvas in the centre, docks for controls, heads, plots and predictions.

State lives in :class:`vitviz.session.Session`; model runs go through :class:`~vitviz.gui.worker.TaskRunner`
(one worker thread, newest request wins); every dialog goes through :class:`Dialogs`, which tests replace.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QActionGroup, QColor, QImage, QKeySequence
from PySide6.QtWidgets import (
    QApplication, QComboBox, QDockWidget, QFileDialog, QLabel, QMainWindow, QMessageBox, QProgressBar,
    QHBoxLayout, QStyle, QToolButton, QWidget,
)

from vitviz import __version__, imaging
from vitviz.gui.canvas import Canvas
from vitviz.gui.panels import ControlsPanel, HeadsPanel, PlotsPanel, PredictionsPanel
from vitviz.gui.worker import Job, TaskRunner, describe_error, split_detail
from vitviz.session import (
    DTYPES, HEAD_REDUCTIONS, VIEWS, InferenceResult, Session, available_devices, available_precisions,
    device_description, run_inference,
)

ORGANIZATION = "vitviz"
APPLICATION = "vitviz"
MAX_RECENT = 10
IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.bmp *.tif *.tiff *.webp *.gif);;All files (*)"
CHECKPOINT_FILTER = ("Checkpoints (*.safetensors *.pth *.pt *.bin *.npz *.ckpt);;All files (*)")

SHORTCUTS: list[tuple[str, str]] = [
    ("Left / Right", "previous / next layer"),
    ("Home / End", "first / last layer"),
    ("Up / Down", "previous / next head (mean, max, min, head 0 ...)"),
    ("1 ... 7", "choose the view"),
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


def default_settings() -> QSettings:
    """The user's settings (``QSettings("vitviz", "vitviz")``), or the INI file named by ``$VITVIZ_SETTINGS``."""
    path = os.environ.get("VITVIZ_SETTINGS")
    if path:
        return QSettings(path, QSettings.Format.IniFormat)
    return QSettings(ORGANIZATION, APPLICATION)


class Dialogs:
    """Every dialog the window shows. Tests replace methods (or patch QMessageBox / QFileDialog)."""

    def __init__(self, parent: QWidget):
        self.parent = parent

    def error(self, title: str, message: str, detail: str = "") -> None:
        box = QMessageBox(QMessageBox.Icon.Critical, title, message, QMessageBox.StandardButton.Ok, self.parent)
        if detail:
            box.setDetailedText(detail)
        box.exec()

    def info(self, title: str, html: str) -> None:
        box = QMessageBox(QMessageBox.Icon.NoIcon, title, html, QMessageBox.StandardButton.Ok, self.parent)
        box.setTextFormat(Qt.TextFormat.RichText)
        box.exec()

    def confirm(self, title: str, text: str) -> bool:
        r = QMessageBox.question(self.parent, title, text,
                                 QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                 QMessageBox.StandardButton.No)
        return r == QMessageBox.StandardButton.Yes

    def confirm_overwrite(self, path: str) -> bool:
        return self.confirm("Replace file?", f"{path} already exists.\n\nReplace it?")

    def open_images(self, folder: str) -> list[str]:
        files, _ = QFileDialog.getOpenFileNames(self.parent, "Open images", folder, IMAGE_FILTER)
        return list(files)

    def open_checkpoint_file(self, folder: str) -> str | None:
        f, _ = QFileDialog.getOpenFileName(self.parent, "Open checkpoint", folder, CHECKPOINT_FILTER)
        return f or None

    def open_checkpoint_folder(self, folder: str) -> str | None:
        d = QFileDialog.getExistingDirectory(self.parent, "Open checkpoint folder", folder)
        return d or None

    def save_png(self, suggested: str) -> str | None:
        f, _ = QFileDialog.getSaveFileName(self.parent, "Export PNG", suggested, "PNG image (*.png)",
                                           options=QFileDialog.Option.DontConfirmOverwrite)
        if not f:
            return None
        return f if f.lower().endswith(".png") else f + ".png"


def _pil_from_rgb(rgb: np.ndarray) -> Image.Image:
    return Image.fromarray(np.ascontiguousarray(rgb), "RGB")


def qimage_from_rgb(rgb: np.ndarray) -> QImage:
    rgb = np.ascontiguousarray(rgb[..., :3], dtype=np.uint8)
    h, w = rgb.shape[:2]
    return QImage(rgb.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()


def rgb_from_qimage(img: QImage) -> np.ndarray:
    img = img.convertToFormat(QImage.Format.Format_RGBA8888)
    w, h = img.width(), img.height()
    ptr = img.constBits()
    arr = np.frombuffer(ptr, dtype=np.uint8, count=img.bytesPerLine() * h).reshape(h, img.bytesPerLine())
    return arr[:, : 4 * w].reshape(h, w, 4)[..., :3].copy()


class MainWindow(QMainWindow):
    """The vitviz window.

    Args:
        settings: where preferences persist (default: :func:`default_settings`).
        model: an already-built model to use instead of the remembered one (tests, scripts).
        model_key: ``"demo"``, ``"file:PATH"``, ``"pretrained:NAME"`` or ``"random:NAME"`` to load on start.
        device: torch device to start on (default: remembered, else CPU).
        dialogs: a :class:`Dialogs` replacement.

    Signals:
        resultShown(): a new inference result is on screen.
        errorShown(title, message): an error dialog was shown.
        modelChanged(): a newly loaded model is in use.
    """

    resultShown = Signal()
    errorShown = Signal(str, str)
    modelChanged = Signal()

    def __init__(self, *, settings: QSettings | None = None, model: torch.nn.Module | None = None,
                 model_key: str | None = None, device: str | None = None, dialogs: Dialogs | None = None,
                 load_samples: bool = False):
        super().__init__()
        self.settings = settings if settings is not None else default_settings()
        self.dialogs = dialogs or Dialogs(self)
        self.session = Session()
        self.runner = TaskRunner(self)
        self.model: torch.nn.Module | None = None
        self.model_key = ""
        self.device = "cpu"
        self.precision = "fp32"
        self._waiting_image: tuple[str, Image.Image | None] | None = None
        self._pending_target: int | None = None
        self._closing = False

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
        self.controls = ControlsPanel()
        self.heads = HeadsPanel()
        self.plots = PlotsPanel()
        self.predictions = PredictionsPanel()
        self._docks: dict[str, QDockWidget] = {}
        self._add_dock("controls", "Controls", self.controls, Qt.DockWidgetArea.LeftDockWidgetArea)
        self._add_dock("predictions", "Predictions", self.predictions, Qt.DockWidgetArea.LeftDockWidgetArea)
        self._add_dock("heads", "Heads", self.heads, Qt.DockWidgetArea.RightDockWidgetArea)
        self._add_dock("plots", "Plots", self.plots, Qt.DockWidgetArea.RightDockWidgetArea)
        self.resizeDocks([self._docks["controls"], self._docks["predictions"]], [560, 200], Qt.Orientation.Vertical)
        self.resizeDocks([self._docks["heads"], self._docks["plots"]], [360, 460], Qt.Orientation.Vertical)
        self.resizeDocks([self._docks["controls"], self._docks["heads"]], [290, 400], Qt.Orientation.Horizontal)

        self._build_status_bar()
        self._build_actions()
        self._build_menus()
        self._build_toolbar()
        self._connect()
        self._restore_settings(device)

        self.runner.done.connect(self._on_done)
        self.runner.failed.connect(self._on_failed)
        self.runner.progress.connect(self._on_progress)
        self.runner.busyChanged.connect(self._on_busy)

        if model is not None:
            self._adopt_model(model, model_key or "memory")
        else:
            key = model_key or str(self.settings.value("model", "demo") or "demo")
            self.load_model(key, initial=True)
        if load_samples:
            QTimer.singleShot(0, self._open_samples)

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

    def _action(self, text: str, slot, shortcut: Any = None, tip: str = "") -> QAction:
        a = QAction(text, self)
        if shortcut is not None:
            if isinstance(shortcut, (list, tuple)):
                a.setShortcuts([QKeySequence(s) for s in shortcut])
            else:
                a.setShortcut(QKeySequence(shortcut))
            a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        if tip:
            a.setStatusTip(tip)
        a.triggered.connect(lambda *_: slot())
        self.addAction(a)
        return a

    def _build_actions(self) -> None:
        K = Qt.Key
        self.act_open = self._action("&Open images…", self.open_images_dialog, QKeySequence.StandardKey.Open)
        self.act_paste = self._action("&Paste image", self.paste_image, QKeySequence.StandardKey.Paste)
        self.act_next_image = self._action("&Next image", lambda: self.step_image(1), K.Key_PageDown)
        self.act_prev_image = self._action("P&revious image", lambda: self.step_image(-1), K.Key_PageUp)
        self.act_export = self._action("&Export view as PNG…", self.export_view_dialog, "Ctrl+E")
        self.act_export_heads = self._action("Export all &heads of this layer…", self.export_heads_dialog,
                                             "Ctrl+Shift+E")
        self.act_copy = self._action("&Copy view to clipboard", self.copy_view, QKeySequence.StandardKey.Copy)
        self.act_quit = self._action("&Quit", self.close, QKeySequence.StandardKey.Quit)
        self.act_prev_layer = self._action("Previous layer", lambda: self.step_layer(-1), K.Key_Left)
        self.act_next_layer = self._action("Next layer", lambda: self.step_layer(1), K.Key_Right)
        self.act_first_layer = self._action("First layer", lambda: self.set_layer(0), K.Key_Home)
        self.act_last_layer = self._action("Last layer", lambda: self.set_layer(10 ** 6), K.Key_End)
        self.act_prev_head = self._action("Previous head", lambda: self.step_head(-1), K.Key_Up)
        self.act_next_head = self._action("Next head", lambda: self.step_head(1), K.Key_Down)
        self.act_fit = self._action("&Fit image", self.canvas.fit, ["F", "Ctrl+0"])
        self.act_grid = self._action("All layers × heads grid", self._toggle_grid, "G")
        self.act_grid.setCheckable(True)
        self.view_actions: list[QAction] = []
        self.view_group = QActionGroup(self)
        for i, v in enumerate(VIEWS):
            a = self._action(v.title, lambda k=v.key: self.set_view(k), str(i + 1))
            a.setCheckable(True)
            self.view_group.addAction(a)
            self.view_actions.append(a)
        self.act_shortcuts = self._action("&Keyboard shortcuts", self.show_shortcuts, "F1")
        self.act_about = self._action("&About vitviz", self.show_about)
        self.act_open_ckpt = self._action("Open checkpoint &file…", self.open_checkpoint_dialog)
        self.act_open_ckpt_dir = self._action("Open checkpoint f&older…", self.open_checkpoint_folder_dialog)

    def _build_menus(self) -> None:
        mb = self.menuBar()
        f = mb.addMenu("&File")
        f.addAction(self.act_open)
        self.recent_menu = f.addMenu("Open &recent")
        f.addAction(self.act_paste)
        f.addSeparator()
        f.addAction(self.act_prev_image)
        f.addAction(self.act_next_image)
        f.addSeparator()
        f.addAction(self.act_export)
        f.addAction(self.act_export_heads)
        f.addAction(self.act_copy)
        f.addSeparator()
        f.addAction(self.act_quit)
        m = mb.addMenu("&Model")
        self.model_menu = m
        m.addAction(self.act_open_ckpt)
        m.addAction(self.act_open_ckpt_dir)
        self.device_menu = m.addMenu("&Device")
        self.precision_menu = m.addMenu("&Precision")
        v = mb.addMenu("&View")
        for a in self.view_actions:
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
        st = self.style()
        SP = QStyle.StandardPixmap
        for act, icon, short in ((self.act_open, SP.SP_DialogOpenButton, "Open"),
                                 (self.act_export, SP.SP_DialogSaveButton, "Export")):
            act.setIcon(st.standardIcon(icon))
            act.setIconText(short)
        self.act_prev_image.setIconText("◀ Prev")
        self.act_next_image.setIconText("Next ▶")
        self.act_fit.setIconText("Fit")
        for act in (self.act_open, self.act_prev_image, self.act_next_image, self.act_fit, self.act_export):
            act.setToolTip(f"{act.text().replace('&', '').rstrip('…')} ({act.shortcut().toString()})")
        tb.addAction(self.act_open)
        tb.addAction(self.act_prev_image)
        tb.addAction(self.act_next_image)
        tb.addSeparator()
        tb.addWidget(QLabel(" Model "))
        self.model_combo = QComboBox()
        self.model_combo.setMinimumContentsLength(26)
        self.model_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self._fill_model_combo()
        self.model_combo.activated.connect(self._on_model_combo)
        tb.addWidget(self.model_combo)
        tb.addWidget(QLabel("  Device "))
        self.device_combo = QComboBox()
        for d in available_devices():
            self.device_combo.addItem(d, d)
        self.device_combo.activated.connect(lambda i: self.set_device(self.device_combo.itemData(i)))
        tb.addWidget(self.device_combo)
        tb.addWidget(QLabel("  Precision "))
        self.precision_combo = QComboBox()
        self.precision_combo.activated.connect(lambda i: self.set_precision(self.precision_combo.itemData(i)))
        tb.addWidget(self.precision_combo)
        tb.addSeparator()
        tb.addAction(self.act_fit)
        tb.addAction(self.act_export)

    def _fill_model_combo(self) -> None:
        c = self.model_combo
        c.blockSignals(True)
        c.clear()
        c.addItem("Bundled demo model (shapes)", "demo")
        try:
            from vitviz.model.pretrained import PRETRAINED, is_cached
        except Exception:  # noqa: BLE001
            PRETRAINED, is_cached = {}, (lambda n: False)
        if PRETRAINED:
            c.insertSeparator(c.count())
        for name, info in PRETRAINED.items():
            size = getattr(info, "size_mb", 0.0)
            state = "cached" if is_cached(name) else f"download {size:.0f} MB"
            c.addItem(f"torchvision {name} ({state})", f"pretrained:{name}")
            c.setItemData(c.count() - 1, getattr(info, "description", name), Qt.ItemDataRole.ToolTipRole)
        recent = self._recent_models()
        if recent:
            c.insertSeparator(c.count())
            for key in recent:
                c.addItem(f"{Path(key[5:]).name}  ({key[5:]})", key)
        c.insertSeparator(c.count())
        c.addItem("Open checkpoint…", "open-file")
        c.addItem("Open checkpoint folder…", "open-folder")
        if self.model_key and c.findData(self.model_key) < 0:
            c.insertItem(0, self._model_title(), self.model_key)
        idx = c.findData(self.model_key)
        c.setCurrentIndex(max(idx, 0))
        c.blockSignals(False)

    def _model_title(self) -> str:
        spec = getattr(self.model, "spec", None)
        return getattr(spec, "name", None) or self.model_key

    def _fill_device_menus(self) -> None:
        self.device_menu.clear()
        group = QActionGroup(self.device_menu)
        for d in available_devices():
            a = self.device_menu.addAction(device_description(d))
            a.setCheckable(True)
            a.setChecked(d == self.device)
            a.triggered.connect(lambda _=False, d=d: self.set_device(d))
            group.addAction(a)
        self.precision_menu.clear()
        pgroup = QActionGroup(self.precision_menu)
        self.precision_combo.blockSignals(True)
        self.precision_combo.clear()
        for p in available_precisions(self.device):
            a = self.precision_menu.addAction(p)
            a.setCheckable(True)
            a.setChecked(p == self.precision)
            a.triggered.connect(lambda _=False, p=p: self.set_precision(p))
            pgroup.addAction(a)
            self.precision_combo.addItem(p, p)
        self.precision_combo.setCurrentIndex(max(0, self.precision_combo.findData(self.precision)))
        self.precision_combo.blockSignals(False)
        self.device_combo.blockSignals(True)
        self.device_combo.setCurrentIndex(max(0, self.device_combo.findData(self.device)))
        self.device_combo.blockSignals(False)

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

    # ================================================================== settings
    def _restore_settings(self, device: str | None) -> None:
        s = self.settings
        geo = s.value("geometry")
        if isinstance(geo, (QByteArray, bytes)):
            self.restoreGeometry(geo)
        else:
            self.resize(1600, 1000)
        state = s.value("windowState")
        if isinstance(state, (QByteArray, bytes)):
            self.restoreState(state)
        opts: dict[str, Any] = {}
        cmap = str(s.value("colormap", imaging.DEFAULT_COLORMAP))
        if cmap in imaging.COLORMAPS:
            opts["cmap"] = cmap
        try:
            opts["opacity"] = float(s.value("opacity", 0.6))
        except (TypeError, ValueError):
            pass
        interp = str(s.value("interpolation", "nearest"))
        if interp in ("nearest", "bilinear"):
            opts["interpolation"] = interp
        view = str(s.value("view", "cls"))
        if view in {v.key for v in VIEWS}:
            opts["view"] = view
        self.session.set_options(**opts)
        devices = available_devices()
        want = device or str(s.value("device", "cpu"))
        if want == "cuda" and "cuda:0" in devices:
            want = "cuda:0"
        self.device = want if want in devices else "cpu"
        prec = str(s.value("precision", "fp32"))
        self.precision = prec if prec in available_precisions(self.device) else "fp32"
        self._fill_device_menus()
        self._rebuild_recent_menu()
        self._refresh_all()

    def save_settings(self) -> None:
        s = self.settings
        o = self.session.options
        s.setValue("geometry", self.saveGeometry())
        s.setValue("windowState", self.saveState())
        s.setValue("colormap", o.cmap)
        s.setValue("opacity", float(o.opacity))
        s.setValue("interpolation", o.interpolation)
        s.setValue("view", o.view)
        s.setValue("device", self.device)
        s.setValue("precision", self.precision)
        if self.model_key and self.model_key != "memory" and not self.model_key.startswith("random:"):
            s.setValue("model", self.model_key)
        s.sync()

    def last_folder(self) -> str:
        f = str(self.settings.value("last_folder", "") or "")
        return f if f and os.path.isdir(f) else str(Path.home())

    def _remember_folder(self, path: str) -> None:
        folder = str(Path(path).parent if not os.path.isdir(path) else Path(path))
        self.settings.setValue("last_folder", folder)

    def recent_files(self) -> list[str]:
        v = self.settings.value("recent_files", [])
        if isinstance(v, str):
            v = [v] if v else []
        return [str(x) for x in (v or [])]

    def _add_recent(self, path: str) -> None:
        rec = [p for p in self.recent_files() if p != path]
        rec.insert(0, path)
        self.settings.setValue("recent_files", rec[:MAX_RECENT])
        self._rebuild_recent_menu()

    def _rebuild_recent_menu(self) -> None:
        self.recent_menu.clear()
        rec = self.recent_files()
        for p in rec:
            a = self.recent_menu.addAction(Path(p).name)
            a.setToolTip(p)
            a.setStatusTip(p)
            a.triggered.connect(lambda _=False, p=p: self.open_images([p]))
        if not rec:
            a = self.recent_menu.addAction("(none)")
            a.setEnabled(False)
        else:
            self.recent_menu.addSeparator()
            clear = self.recent_menu.addAction("Clear list")
            clear.triggered.connect(lambda: (self.settings.setValue("recent_files", []), self._rebuild_recent_menu()))

    def _recent_models(self) -> list[str]:
        v = self.settings.value("recent_models", [])
        if isinstance(v, str):
            v = [v] if v else []
        return [str(x) for x in (v or []) if str(x).startswith("file:")]

    # ================================================================== models
    def load_model(self, key: str, *, initial: bool = False) -> None:
        """Load a model in the background: ``demo``, ``file:PATH``, ``pretrained:NAME`` or ``random:NAME``."""
        device, precision = self.device, self.precision
        subject = key.split(":", 1)[1] if ":" in key else "bundled demo model"
        if key.startswith("pretrained:"):
            from vitviz.model.pretrained import PRETRAINED, is_cached
            name = key.split(":", 1)[1]
            info = PRETRAINED.get(name)
            # asked from the menu: confirm the download; named on the command line (initial): just download,
            # with progress and Cancel in the status bar
            if info is not None and not is_cached(name) and not initial:
                if not self.dialogs.confirm("Download weights?",
                                            f"{name}: {getattr(info, 'description', '')}\n\nDownload "
                                            f"{getattr(info, 'size_mb', 0):.0f} MB from\n{info.url}?"):
                    self._fill_model_combo()
                    if self.model is None:  # first start without the remembered weights: use the demo model
                        self.load_model("demo", initial=True)
                    return

        def work(job: Job) -> tuple[str, torch.nn.Module, str | None]:
            model, note = _load_model(key, job)
            model.eval()
            model.to(device=device, dtype=DTYPES[precision])
            return key, model, note

        self._set_busy_text(f"Loading {subject}…", cancellable=key.startswith("pretrained:"))
        self.runner.submit("model", work, subject=subject, title="Could not load the model")

    def cancel_model_load(self) -> None:
        self.runner.cancel("model")
        self._set_busy_text("")
        self._fill_model_combo()
        self._waiting_image_fallback()  # an image that waited for the new model runs with the current one
        self.statusBar().showMessage("Model loading cancelled", 4000)

    def _adopt_model(self, model: torch.nn.Module, key: str, note: str | None = None) -> None:
        self.model = model
        self.model_key = key
        if key.startswith("file:"):
            rec = [k for k in self._recent_models() if k != key]
            self.settings.setValue("recent_models", ([key] + rec)[:5])
        self._fill_model_combo()
        self._update_model_label()
        if note:
            self.statusBar().showMessage(note, 15000)
        self.modelChanged.emit()
        # re-run the current (or waiting) image with the new model
        if self._waiting_image is not None:
            source, pil = self._waiting_image
            self._waiting_image = None
            self._run(source, pil)
        elif self.session.result is not None:
            self._rerun(target=None)

    def _update_model_label(self) -> None:
        if self.model is None:
            self.model_label.setText("no model")
            return
        spec = getattr(self.model, "spec", None)
        name = getattr(spec, "name", self.model_key)
        size = getattr(spec, "input_size", None)
        size_text = f"{size[0]}×{size[1]}" if size else "?"
        cfg = getattr(self.model, "config", None)
        arch = f"L{cfg.depth} H{cfg.num_heads} P{cfg.patch_size}" if cfg is not None else ""
        self.model_label.setText(f"<b>{name}</b> · {size_text} · {arch} · {self.device} · {self.precision}")
        self.model_label.setToolTip(spec.describe() if hasattr(spec, "describe") else name)

    def open_checkpoint(self, path: str) -> None:
        self._remember_folder(path)
        self.load_model(f"file:{path}")

    def open_checkpoint_dialog(self) -> None:
        p = self.dialogs.open_checkpoint_file(self.last_folder())
        if p:
            self.open_checkpoint(p)
        else:
            self._fill_model_combo()

    def open_checkpoint_folder_dialog(self) -> None:
        p = self.dialogs.open_checkpoint_folder(self.last_folder())
        if p:
            self.open_checkpoint(p)
        else:
            self._fill_model_combo()

    def _on_model_combo(self, index: int) -> None:
        key = self.model_combo.itemData(index)
        if key == "open-file":
            self.open_checkpoint_dialog()
        elif key == "open-folder":
            self.open_checkpoint_folder_dialog()
        elif key and key != self.model_key:
            self.load_model(key)

    def set_device(self, device: str) -> None:
        if device == self.device or self.model is None:
            self.device = device
            self._fill_device_menus()
            return
        if self.precision not in available_precisions(device):
            self.precision = "fp32"
        self._move_model(device, self.precision)

    def set_precision(self, precision: str) -> None:
        if precision == self.precision:
            return
        self._move_model(self.device, precision)

    def _move_model(self, device: str, precision: str) -> None:
        model, key = self.model, self.model_key
        old_device, old_precision = self.device, self.precision

        def work(job: Job):
            try:
                model.to(device=device, dtype=DTYPES[precision])
                if device.startswith("cuda"):
                    torch.cuda.synchronize(device)
            except BaseException:
                model.to(device=old_device, dtype=DTYPES[old_precision])
                raise
            return key, model, None

        self._pending_move = (device, precision)
        self._set_busy_text(f"Moving the model to {device} ({precision})…")
        self.runner.submit("model", work, subject=f"{self._model_title()} on {device} ({precision})",
                           title="Could not change device or precision")

    # ================================================================== images and inference
    def _open_samples(self) -> None:
        if self.session.images:
            return
        try:
            from vitviz.demo import sample_images
            samples = [str(p) for p in sample_images()]
        except Exception:  # noqa: BLE001
            samples = []
        if samples:
            self.open_images(samples, remember=False)

    def open_images_dialog(self) -> None:
        files = self.dialogs.open_images(self.last_folder())
        if files:
            self.open_images(files)

    def open_images(self, paths: list[str], *, remember: bool = True) -> None:
        """Add images to the set and show the first of them."""
        paths = [str(p) for p in paths if str(p)]
        if not paths:
            return
        self.session.add_images(paths)
        if remember:
            self._remember_folder(paths[0])
        self._run(paths[0], None, remember=remember)

    def step_image(self, delta: int) -> None:
        p = self.session.step(delta)
        if p is not None:
            self._run(p, None)

    def paste_image(self) -> None:
        cb = QApplication.clipboard()
        md = cb.mimeData()
        if md is not None and md.hasImage():
            img = cb.image()
            if not img.isNull():
                try:
                    loaded = imaging.image_from_array(rgb_from_qimage(img), name=None)
                except Exception as e:  # noqa: BLE001
                    self.show_error("Could not paste the image", describe_error(e, "clipboard image"))
                    return
                self._run("pasted image", loaded.image)
                return
        if md is not None and md.hasUrls():
            files = [u.toLocalFile() for u in md.urls() if u.isLocalFile()]
            if files:
                self.open_images(files)
                return
        if md is not None and md.hasText() and os.path.isfile(md.text().strip()):
            self.open_images([md.text().strip()])
            return
        self.show_error("Nothing to paste", "The clipboard holds no image and no image file.")

    def _run(self, source: str, pil: Image.Image | None, *, target: int | None = None, remember: bool = True) -> None:
        """Run the model on ``source`` (a path, loaded on the worker) or an in-memory PIL image."""
        if self.model is None or self.runner.is_busy("model"):
            self._waiting_image = (source, pil)
            return
        model, device, precision = self.model, self.device, self.precision
        self._pending_target = target

        def work(job: Job) -> tuple[InferenceResult, bool]:
            image = pil
            if image is None:
                image = imaging.load_image(source).image
            if job.cancelled:
                return None, remember  # type: ignore[return-value]
            with torch.inference_mode(False):
                return run_inference(model, image, source=source, target=target, device=device,
                                     precision=precision), remember

        self._set_busy_text(f"Running {Path(source).name}…")
        self.runner.submit("infer", work, subject=source, title="Could not analyse the image")

    def _rerun(self, target: int | None) -> None:
        r = self.session.result
        if r is None:
            return
        pil = _pil_from_rgb(r.rgb) if r.source == "pasted image" or not os.path.isfile(r.source) else None
        self._run(r.source, pil, target=target, remember=False)

    def set_target(self, class_index: int) -> None:
        """Make ``class_index`` the gradient target (re-runs the model in the background)."""
        r = self.session.result
        if r is None or class_index == r.target:
            return
        self._rerun(target=int(class_index))
        self.predictions.refresh(self.session, pending_target=int(class_index))

    # ================================================================== worker results
    def _on_done(self, kind: str, result: Any, job: Job) -> None:
        if self._closing:
            return
        try:
            self._adopt_done(kind, result, job)
        except Exception as e:  # noqa: BLE001 - shown, never only printed
            import traceback

            self._set_busy_text("")
            self.show_error("Could not show the result", describe_error(e, job.subject), traceback.format_exc())

    def _adopt_done(self, kind: str, result: Any, job: Job) -> None:
        if kind == "model":
            key, model, note = result
            moved = getattr(self, "_pending_move", None)
            if moved is not None and model is self.model:
                self.device, self.precision = moved
                self._pending_move = None
                self._fill_device_menus()
            self._set_busy_text("")
            self._adopt_model(model, key, note)
        elif kind == "infer":
            res, remember = result
            if res is None:
                return
            self._pending_target = None
            self.session.set_result(res)
            if remember and res.source in self.session.images:
                self._add_recent(res.source)
            self._set_busy_text("")
            self._refresh_all(new_result=True)
            self.resultShown.emit()

    def _on_failed(self, kind: str, title: str, message: str, job: Job) -> None:
        if self._closing:
            return
        self._set_busy_text("")
        if kind == "model":
            self._pending_move = None
            if self.model is None and job.subject != "bundled demo model":
                # the remembered / requested model failed at start: fall back to the bundled one
                QTimer.singleShot(0, lambda: self.load_model("demo", initial=True))
            self._waiting_image_fallback()
            self._fill_model_combo()
            self._fill_device_menus()
        elif kind == "infer":
            src = job.subject
            if self.session.result is None or src != self.session.result.source:
                if src in self.session.images:  # unreadable: keep it out of the image set
                    self.session.images.remove(src)
                    r = self.session.result
                    self.session.index = self.session.images.index(r.source) if r and r.source in \
                        self.session.images else -1
            self._pending_target = None
            self.predictions.refresh(self.session)
        text, detail = split_detail(message)
        self.show_error(title, text, detail)

    def _waiting_image_fallback(self) -> None:
        # a model load failed: an image that was waiting for it runs with the previous model, if any
        if self._waiting_image is not None and self.model is not None:
            source, pil = self._waiting_image
            self._waiting_image = None
            self._run(source, pil)

    def _on_progress(self, kind: str, done: int, total: int) -> None:
        if total > 0:
            self.busy_bar.setRange(0, 1000)
            self.busy_bar.setValue(int(1000 * done / total))
            self.busy_label.setText(f"Downloading… {done / 1e6:.0f} / {total / 1e6:.0f} MB")
        else:
            self.busy_bar.setRange(0, 0)

    def _on_busy(self, busy: bool) -> None:
        if not busy:
            self._set_busy_text("")

    def _set_busy_text(self, text: str, cancellable: bool = False) -> None:
        """Busy indicator in the status bar: shown while any job runs; Cancel only for downloads."""
        busy = self.runner.is_busy()
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
        elif not self.runner.is_busy("model"):
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

    def head_choices(self) -> list[Any]:
        r = self.session.result
        return list(HEAD_REDUCTIONS) + (list(range(r.num_heads)) if r is not None else [])

    def step_head(self, delta: int) -> None:
        choices = self.head_choices()
        cur = self.session.options.head
        i = choices.index(cur) if cur in choices else 0
        self.set_head(choices[(i + delta) % len(choices)])

    def set_query(self, index: int) -> None:
        self._set(query=int(index))

    def _on_head_tile(self, layer: int, head: int) -> None:
        changes: dict[str, Any] = {"layer": layer, "head": head}
        if not self.session.view.uses_head:  # a head was picked: show it
            changes["view"] = "cls"
        self._set(**changes)

    def _toggle_grid(self) -> None:
        self.heads.grid_toggle.setChecked(not self.heads.grid_toggle.isChecked())
        self._docks["heads"].show()

    def _on_canvas_click(self, x: float, y: float) -> None:
        rc = self.session.image_to_patch(x, y)
        if rc is None or self.session.result is None:
            return
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
    def display_map(self) -> np.ndarray | None:
        """What the overlay item shows: the map itself (nearest) or its 8x bilinear upsampling (smooth)."""
        m = self.session.current_map()
        if m is None or self.session.options.interpolation != "bilinear":
            return m
        from vitviz.analysis import upsample

        key = ("display",) + self.session._map_key(self.session.options)
        return self.session._cache.get_or(key, lambda: upsample(torch.as_tensor(m), (m.shape[0] * 8, m.shape[1] * 8),
                                                                mode="bilinear").numpy())

    def refresh_view(self) -> None:
        """Redraw from the stored result (never runs the model). Errors go to the dialog, never only to stderr."""
        try:
            self._refresh_view()
        except Exception as e:  # noqa: BLE001
            import traceback

            self.show_error("Could not draw the view", describe_error(e, self.session.caption()),
                            traceback.format_exc())

    def _refresh_view(self) -> None:
        s = self.session
        o = s.options
        self.canvas.set_colormap(o.cmap)
        self.canvas.set_opacity(o.opacity)
        r = s.result
        if r is not None:
            m = s.current_map()
            disp = self.display_map()
            levels = imaging.value_range(m) if m is not None else None
            self.canvas.set_overlay(disp, levels)
            self.canvas.set_marker(s.patch_rect(o.query))
            if m is None:
                self.statusBar().showMessage(f"{s.view.title} is not available: {s.unavailable_reason()}", 8000)
        self.controls.refresh(s)
        for i, a in enumerate(self.view_actions):
            a.setChecked(VIEWS[i].key == o.view)
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
    def _suggest_name(self, suffix: str) -> str:
        r = self.session.result
        stem = Path(r.source).stem if r is not None else "view"
        o = self.session.options
        head = o.head if isinstance(o.head, str) else f"h{o.head}"
        folder = str(self.settings.value("export_folder", "") or "") or self.last_folder()
        name = f"{stem}_{o.view}_L{o.layer}_{head}{suffix}.png"
        return str(imaging.next_free_path(Path(folder) / name))

    def export_view(self, path: str) -> Path | None:
        """Write the current view at the image's resolution to ``path`` (asks before replacing a file)."""
        arr = self.session.render_export()
        if arr is None:
            self.show_error("Nothing to export", "Open an image first.")
            return None
        return self._write_png(path, arr)

    def export_heads(self, path: str) -> Path | None:
        arr = self.session.render_heads_grid()
        if arr is None:
            self.show_error("Nothing to export", "Open an image first.")
            return None
        return self._write_png(path, arr)

    def export_view_dialog(self) -> None:
        if self.session.result is None:
            self.show_error("Nothing to export", "Open an image first.")
            return
        p = self.dialogs.save_png(self._suggest_name(""))
        if p:
            self.export_view(p)

    def export_heads_dialog(self) -> None:
        if self.session.result is None:
            self.show_error("Nothing to export", "Open an image first.")
            return
        p = self.dialogs.save_png(self._suggest_name("_heads"))
        if p:
            self.export_heads(p)

    def _write_png(self, path: str, arr: np.ndarray) -> Path | None:
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
        self.settings.setValue("export_folder", str(Path(out).parent))
        self.statusBar().showMessage(f"Exported {out} ({arr.shape[1]}×{arr.shape[0]})", 8000)
        return out

    def copy_view(self) -> None:
        arr = self.session.render_export()
        if arr is None:
            return
        QApplication.clipboard().setImage(qimage_from_rgb(arr))
        self.statusBar().showMessage(f"Copied the view ({arr.shape[1]}×{arr.shape[0]}) to the clipboard", 5000)

    # ================================================================== help
    def show_shortcuts(self) -> None:
        rows = "".join(f"<tr><td style='padding-right:16px'><b>{k}</b></td><td>{v}</td></tr>" for k, v in SHORTCUTS)
        self.dialogs.info("Keyboard shortcuts", f"<table>{rows}</table>")

    def about_text(self) -> str:
        import PySide6
        import pyqtgraph
        from PySide6.QtCore import qVersion

        return (f"<h3>vitviz {__version__}</h3><p>See what a Vision Transformer looks at.</p>"
                f"<table><tr><td>torch</td><td>{torch.__version__}</td></tr>"
                f"<tr><td>Qt</td><td>{qVersion()} (PySide6 {PySide6.__version__})</td></tr>"
                f"<tr><td>pyqtgraph</td><td>{pyqtgraph.__version__}</td></tr>"
                f"<tr><td>device</td><td>{device_description(self.device)}, {self.precision}</td></tr>"
                f"<tr><td>model</td><td>{self._model_title() if self.model is not None else '–'}</td></tr></table>")

    def show_about(self) -> None:
        self.dialogs.info("About vitviz", self.about_text())

    # ================================================================== events
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
            self.runner.shutdown()
        super().closeEvent(event)


def _load_model(key: str, job: Job) -> tuple[torch.nn.Module, str | None]:
    """Build the model named by ``key`` (runs on the worker thread)."""
    if key == "demo":
        try:
            from vitviz.demo import load_demo_model
            return load_demo_model(), None
        except (ImportError, FileNotFoundError) as e:
            from vitviz.model import create_model
            m = create_model("vit_tiny_patch16_224", num_classes=10, depth=4)
            return m, f"The bundled demo model is not available ({e}); showing a randomly initialised ViT."
    if key.startswith("file:"):
        from vitviz.model import load_checkpoint
        return load_checkpoint(key[5:]), None
    if key.startswith("pretrained:"):
        from vitviz.model import pretrained
        return pretrained(key.split(":", 1)[1], progress=job.report, show_bar=False), None
    if key.startswith("random:"):
        from vitviz.model import create_model
        return create_model(key.split(":", 1)[1]), "Randomly initialised weights: the maps show no learned structure."
    raise ValueError(f"unknown model {key!r}: expected demo, file:PATH, pretrained:NAME or random:NAME")

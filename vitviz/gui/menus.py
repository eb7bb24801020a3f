"""The window's layout, actions, menus and toolbar (the view actions and their shortcuts come from the registry)."""

from __future__ import annotations

from typing import Any

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QColor, QKeySequence
from PySide6.QtWidgets import QDockWidget, QHBoxLayout, QMainWindow, QMenu, QStyle, QWidget

from vitviz import views
from vitviz.gui.canvas import Canvas
from vitviz.gui.panels import ControlsPanel, HeadsPanel, PredictionsPanel
from vitviz.gui.plots import PlotsPanel
from vitviz.gui.toolbar import ModelBar


def _action(win: QMainWindow, text: str, slot, shortcut: Any = None) -> QAction:
    a = QAction(text, win)
    if shortcut is not None:
        if isinstance(shortcut, (list, tuple)):
            a.setShortcuts([QKeySequence(s) for s in shortcut])
        else:
            a.setShortcut(QKeySequence(shortcut))
        a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    a.triggered.connect(lambda *_: slot())
    win.addAction(a)
    return a

def build_actions(win: Any) -> None:
    """Every QAction of the window (view actions from the registry), as attributes of ``win``."""
    K, S = Qt.Key, QKeySequence.StandardKey
    win.act_open = _action(win, "&Open images…", win.open_images_dialog, S.Open)
    win.act_paste = _action(win, "&Paste image", win.paste_image, S.Paste)
    win.act_next_image = _action(win, "&Next image", lambda: win.step_image(1), K.Key_PageDown)
    win.act_prev_image = _action(win, "P&revious image", lambda: win.step_image(-1), K.Key_PageUp)
    win.act_export = _action(win, "&Export view (PNG, SVG, PDF)…", lambda: win.export_dialog(heads=False), "Ctrl+E")
    win.act_export_heads = _action(win, "Export all &heads of this layer…",
                                         lambda: win.export_dialog(heads=True), "Ctrl+Shift+E")
    win.act_export_animation = _action(win, "Export layer &animation (GIF, APNG, MP4)…",
                                       lambda: win.export_dialog(animation=True), "Ctrl+Alt+E")
    win.act_copy = _action(win, "&Copy view to clipboard", win.copy_view, S.Copy)
    win.act_quit = _action(win, "&Quit", win.close, S.Quit)
    win.act_open_session = _action(win, "Open &session or exported figure…", lambda: win.sessions.open_dialog(),
                               "Ctrl+Shift+O")
    win.act_save_session = _action(win, "&Save session…", lambda: win.sessions.save_dialog(), "Ctrl+Shift+S")
    win.act_compare = _action(win, "Co&mpare…", lambda: win.show_compare(), "Ctrl+K")
    win.act_prev_layer = _action(win, "Previous layer", lambda: win.step_layer(-1), K.Key_Left)
    win.act_next_layer = _action(win, "Next layer", lambda: win.step_layer(1), K.Key_Right)
    win.act_first_layer = _action(win, "First layer", lambda: win.set_layer(-10 ** 6), K.Key_Home)
    win.act_last_layer = _action(win, "Last layer", lambda: win.set_layer(10 ** 6), K.Key_End)
    win.act_prev_head = _action(win, "Previous head", lambda: win.step_head(-1), K.Key_Up)
    win.act_next_head = _action(win, "Next head", lambda: win.step_head(1), K.Key_Down)
    win.act_fit = _action(win, "&Fit image", win.canvas.fit, ["F", "Ctrl+0"])
    win.act_grid = _action(win, "All layers × heads grid", win._toggle_grid, "G")
    win.act_grid.setCheckable(True)
    win.view_actions = {}
    win.view_group = QActionGroup(win)
    for v in views.all_views():  # one action per registered view, with its shortcut
        a = _action(win, v.title, lambda k=v.key: win.set_view(k), views.shortcut(v))
        a.setCheckable(True)
        win.view_group.addAction(a)
        win.view_actions[v.key] = a
    win.act_shortcuts = _action(win, "&Keyboard shortcuts", win.show_shortcuts, "F1")
    win.act_about = _action(win, "&About vitviz", win.show_about)
    win.act_open_ckpt = _action(win, "Open checkpoint &file…", lambda: win.open_checkpoint_dialog(False))
    win.act_open_ckpt_dir = _action(win, "Open checkpoint f&older…", lambda: win.open_checkpoint_dialog(True))
    win.act_open_by_name = _action(win, "Open model by &name…", lambda: open_model_by_name(win))

def build_menus(win: Any) -> None:
    mb = win.menuBar()
    f = mb.addMenu("&File")
    f.addAction(win.act_open)
    win.recent_menu = f.addMenu("Open &recent")
    f.addAction(win.act_open_session)
    f.addAction(win.act_save_session)
    f.addSeparator()
    for group in ((win.act_paste,), (win.act_prev_image, win.act_next_image),
                  (win.act_export, win.act_export_heads, win.act_export_animation, win.act_copy),
                  (win.act_compare,), (win.act_quit,)):
        for a in group:
            f.addAction(a)
        f.addSeparator()
    m = mb.addMenu("&Model")
    m.addAction(win.act_open_ckpt)
    m.addAction(win.act_open_ckpt_dir)
    m.addAction(win.act_open_by_name)
    build_model_list(win, m)
    m.addSeparator()
    win.device_menu = m.addMenu("&Device")
    win.precision_menu = m.addMenu("&Precision")
    v = mb.addMenu("&View")
    for a in win.view_actions.values():
        v.addAction(a)
    v.addSeparator()
    for a in (win.act_prev_layer, win.act_next_layer, win.act_first_layer, win.act_last_layer,
              win.act_prev_head, win.act_next_head):
        v.addAction(a)
    v.addSeparator()
    v.addAction(win.act_fit)
    v.addAction(win.act_grid)
    v.addSeparator()
    panels = v.addMenu("&Panels")
    for dock in win._docks.values():
        panels.addAction(dock.toggleViewAction())
    h = mb.addMenu("&Help")
    h.addAction(win.act_shortcuts)
    h.addAction(win.act_about)


def build_model_list(win: Any, menu: QMenu) -> None:
    """The named models of the Model menu: the bundled one, the curated Hugging Face Hub models by group (title,
    and on the right their download size or "cached"), torchvision's weights in a sub-menu. The current model is
    checked; sizes and cache marks are refreshed each time the menu opens (:func:`refresh_model_list`)."""
    from vitviz.model.sources import catalog  # plain data: no torch at start-up

    menu.setToolTipsVisible(True)
    win.model_group = QActionGroup(win)
    win.model_actions = {}

    def add(target: QMenu, ref: str, text: str, tip: str) -> None:
        a = target.addAction(text)
        a.setCheckable(True)
        a.setToolTip(tip)
        a.setStatusTip(tip)
        a.triggered.connect(lambda _=False, ref=ref: win._on_model_chosen(ref))
        win.model_group.addAction(a)
        win.model_actions[ref] = a

    menu.addSeparator()
    add(menu, "demo", "Bundled demo model (8 shapes)", "The small ViT trained by vitviz on 8 synthetic shapes")
    for group, heading in catalog.HUB_GROUPS.items():
        header = menu.addAction(heading)
        header.setEnabled(False)
        f = header.font()
        f.setBold(True)
        header.setFont(f)
        for m in (m for m in catalog.HUB_MODELS if m.group == group):
            add(menu, m.ref, m.title, f"{m.title}: {m.what} (https://huggingface.co/{m.repo})")
    win.torchvision_menu = menu.addMenu("torchvision ImageNet ViTs")
    win.torchvision_menu.setToolTipsVisible(True)
    for name in catalog.TORCHVISION_VITS:
        add(win.torchvision_menu, f"pretrained:{name}", name, catalog.description(name))
    menu.aboutToShow.connect(lambda: refresh_model_list(win))
    refresh_model_list(win)


def refresh_model_list(win: Any) -> None:
    """Sizes and cache marks of the named models, and a check at the model in use (or being loaded)."""
    from vitviz.model.sources import catalog

    sizes = {m.ref: m.size_mb for m in catalog.HUB_MODELS}
    sizes.update({f"pretrained:{n}": row[3] for n, row in catalog.TORCHVISION_VITS.items()})
    current = win.controller.loading or win.model_key
    titles = {m.ref: m.title for m in catalog.HUB_MODELS}
    for ref, a in win.model_actions.items():
        if ref in sizes:
            state = "cached" if catalog.ref_is_cached(ref) else f"{sizes[ref]:.0f} MB"
            a.setText(f"{titles.get(ref, ref.split(':', 1)[-1])}\t{state}")
        a.setChecked(ref == current)


def open_model_by_name(win: Any) -> None:
    """Ask for a model name (any form :func:`vitviz.model.sources.refs.parse_model_ref` accepts) and load it."""
    from vitviz.model.sources.refs import parse_model_ref

    text = win.dialogs.ask_model_name()
    if not text:
        return
    try:
        ref = parse_model_ref(text)
    except (ValueError, OSError) as e:  # CheckpointError is a ValueError
        win.show_error("Unknown model", str(e))
        return
    if ref != win.model_key:
        win.load_model(ref)


def build_toolbar(win: Any) -> None:
    """The main toolbar, with the model bar (model, device, precision)."""
    tb = win.addToolBar("Main")
    tb.setObjectName("toolbar_main")
    tb.setMovable(False)
    tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
    st, SP = win.style(), QStyle.StandardPixmap
    for act, icon, short in ((win.act_open, SP.SP_DialogOpenButton, "Open"),
                             (win.act_export, SP.SP_DialogSaveButton, "Export")):
        act.setIcon(st.standardIcon(icon))
        act.setIconText(short)
    win.act_prev_image.setIconText("◀ Prev")
    win.act_next_image.setIconText("Next ▶")
    win.act_fit.setIconText("Fit")
    for act in (win.act_open, win.act_prev_image, win.act_next_image, win.act_fit, win.act_export):
        act.setToolTip(f"{act.text().replace('&', '').rstrip('…')} ({act.shortcut().toString()})")
    for a in (win.act_open, win.act_prev_image, win.act_next_image):
        tb.addAction(a)
    tb.addSeparator()
    win.model_bar = ModelBar(win.device_menu, win.precision_menu)
    tb.addWidget(win.model_bar)
    tb.addSeparator()
    tb.addAction(win.act_fit)
    tb.addAction(win.act_export)


def build_layout(win: Any) -> None:
    """The canvas with its colour bar in the centre; controls and predictions on the left, heads and plots right."""
    win.canvas = Canvas()
    central = QWidget()
    cl = QHBoxLayout(central)
    cl.setContentsMargins(0, 0, 0, 0)
    cl.setSpacing(0)
    cl.addWidget(win.canvas, 1)
    cl.addWidget(win.canvas.colorbar)
    central.setAutoFillBackground(True)
    pal = central.palette()
    pal.setColor(central.backgroundRole(), QColor(38, 38, 42))
    central.setPalette(pal)
    win.setCentralWidget(central)
    win.controls, win.heads = ControlsPanel(), HeadsPanel()
    win.plots, win.predictions = PlotsPanel(), PredictionsPanel()
    win._docks: dict[str, QDockWidget] = {}
    left, right = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
    for name, title, widget, area in (("controls", "Controls", win.controls, left),
                                      ("predictions", "Predictions", win.predictions, left),
                                      ("heads", "Heads", win.heads, right), ("plots", "Plots", win.plots, right)):
        _add_dock(win, name, title, widget, area)
    d = win._docks
    win.resizeDocks([d["controls"], d["predictions"]], [560, 200], Qt.Orientation.Vertical)
    win.resizeDocks([d["heads"], d["plots"]], [360, 460], Qt.Orientation.Vertical)
    win.resizeDocks([d["controls"], d["heads"]], [290, 400], Qt.Orientation.Horizontal)


def _add_dock(win: Any, name: str, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> None:
    dock = QDockWidget(title, win)
    dock.setObjectName(f"dock_{name}")
    dock.setWidget(widget)
    dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                     | QDockWidget.DockWidgetFeature.DockWidgetFloatable
                     | QDockWidget.DockWidgetFeature.DockWidgetClosable)
    win.addDockWidget(area, dock)
    win._docks[name] = dock


def fill_recent_menu(menu: QMenu, files: list[str], open_file, clear) -> None:
    menu.clear()
    for p in files:
        a = menu.addAction(Path(p).name)
        a.setToolTip(p)
        a.setStatusTip(p)
        a.triggered.connect(lambda _=False, p=p: open_file(p))
    if not files:
        menu.addAction("(none)").setEnabled(False)
    else:
        menu.addSeparator()
        menu.addAction("Clear list").triggered.connect(lambda: clear())

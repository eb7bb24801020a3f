"""The main window's furniture: the canvas area, the docks, the menu bar and the toolbar.

Each function places parts the window made (its :class:`~vitviz.gui.actions.WindowActions`, panels, model bar) and
returns what it built; the window keeps them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QDockWidget, QHBoxLayout, QMainWindow, QMenu, QMenuBar, QStyle, QToolBar, QWidget

from vitviz.gui.actions import WindowActions
from vitviz.gui.canvas import Canvas
from vitviz.gui.toolbar import ModelBar
from vitviz.model.sources import catalog  # plain data: no torch at start-up

LEFT, RIGHT = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea


@dataclass
class Menus:
    """The menus the window fills later: recent files, the Model menu (its named models are checked and sized when
    it opens), the model's device and precision."""

    recent: QMenu
    model: QMenu
    device: QMenu
    precision: QMenu


def canvas_area(canvas: Canvas) -> QWidget:
    """The centre of the window: the canvas with its colour bar on a dark background."""
    central = QWidget()
    cl = QHBoxLayout(central)
    cl.setContentsMargins(0, 0, 0, 0)
    cl.setSpacing(0)
    cl.addWidget(canvas, 1)
    cl.addWidget(canvas.colorbar)
    central.setAutoFillBackground(True)
    pal = central.palette()
    pal.setColor(central.backgroundRole(), QColor(38, 38, 42))
    central.setPalette(pal)
    return central


def add_docks(win: QMainWindow, panels: Mapping[str, tuple[str, QWidget, Qt.DockWidgetArea]]) -> dict[str, QDockWidget]:
    """A dock for each ``name: (title, widget, area)`` (controls and predictions on the left, heads and plots on the
    right), sized as on a wide screen (:func:`vitviz.gui.geometry.fit_docks` fits them to the window later)."""
    docks = {}
    for name, (title, widget, area) in panels.items():
        dock = QDockWidget(title, win)
        dock.setObjectName(f"dock_{name}")
        dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetFloatable
                         | QDockWidget.DockWidgetFeature.DockWidgetClosable)
        win.addDockWidget(area, dock)
        docks[name] = dock
    d = docks
    win.resizeDocks([d["controls"], d["predictions"]], [560, 200], Qt.Orientation.Vertical)
    win.resizeDocks([d["heads"], d["plots"]], [360, 460], Qt.Orientation.Vertical)
    win.resizeDocks([d["controls"], d["heads"]], [290, 400], Qt.Orientation.Horizontal)
    return docks


def build_menus(mb: QMenuBar, acts: WindowActions, docks: Mapping[str, QDockWidget]) -> Menus:
    """File, Model, View (with a Panels sub-menu showing or hiding ``docks``) and Help."""
    f = mb.addMenu("&File")
    f.addAction(acts.open)
    recent = f.addMenu("Open &recent")
    f.addAction(acts.open_session)
    f.addAction(acts.save_session)
    f.addSeparator()
    for group in ((acts.paste,), (acts.prev_image, acts.next_image),
                  (acts.export, acts.export_heads, acts.export_animation, acts.copy),
                  (acts.compare,), (acts.quit,)):
        for a in group:
            f.addAction(a)
        f.addSeparator()
    e = mb.addMenu("&Edit")
    for a in (acts.undo, acts.redo):
        e.addAction(a)
    m = mb.addMenu("&Model")
    m.addAction(acts.open_checkpoint)
    m.addAction(acts.open_checkpoint_folder)
    m.addAction(acts.open_by_name)
    add_model_list(m, acts)
    m.addSeparator()
    device = m.addMenu("&Device")
    precision = m.addMenu("&Precision")
    v = mb.addMenu("&View")
    for a in acts.views.values():
        v.addAction(a)
    v.addSeparator()
    for a in (acts.prev_layer, acts.next_layer, acts.first_layer, acts.last_layer, acts.prev_head, acts.next_head):
        v.addAction(a)
    v.addSeparator()
    v.addAction(acts.fit)
    v.addAction(acts.grid)
    v.addSeparator()
    panels = v.addMenu("&Panels")
    for dock in docks.values():
        panels.addAction(dock.toggleViewAction())
    h = mb.addMenu("&Help")
    h.addAction(acts.shortcuts)
    h.addAction(acts.about)
    return Menus(recent=recent, model=m, device=device, precision=precision)


def add_model_list(menu: QMenu, acts: WindowActions) -> None:
    """The named models of the Model menu: the bundled one, the curated Hugging Face Hub models by group (title,
    and on the right their download size or "cached"), torchvision's weights in a sub-menu."""
    menu.setToolTipsVisible(True)
    menu.addSeparator()
    menu.addAction(acts.models["demo"])
    for group, heading in catalog.HUB_GROUPS.items():
        header = menu.addAction(heading)
        header.setEnabled(False)
        f = header.font()
        f.setBold(True)
        header.setFont(f)
        for m in (m for m in catalog.HUB_MODELS if m.group == group):
            menu.addAction(acts.models[m.ref])
    torchvision = menu.addMenu("torchvision ImageNet ViTs")
    torchvision.setToolTipsVisible(True)
    for name in catalog.TORCHVISION_VITS:
        torchvision.addAction(acts.models[f"pretrained:{name}"])


def build_toolbar(tb: QToolBar, acts: WindowActions, model_bar: ModelBar) -> None:
    """The main toolbar: open and step through images, the model bar (model, device, precision), fit, export."""
    tb.setObjectName("toolbar_main")
    tb.setMovable(False)
    tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
    st, SP = tb.style(), QStyle.StandardPixmap
    for act, icon, short in ((acts.open, SP.SP_DialogOpenButton, "Open"),
                             (acts.export, SP.SP_DialogSaveButton, "Export")):
        act.setIcon(st.standardIcon(icon))
        act.setIconText(short)
    acts.prev_image.setIconText("◀ Prev")
    acts.next_image.setIconText("Next ▶")
    acts.fit.setIconText("Fit")
    for act in (acts.open, acts.prev_image, acts.next_image, acts.fit, acts.export):
        act.setToolTip(f"{act.text().replace('&', '').rstrip('…')} ({act.shortcut().toString()})")
    for a in (acts.open, acts.prev_image, acts.next_image):
        tb.addAction(a)
    tb.addSeparator()
    tb.addWidget(model_bar)
    tb.addSeparator()
    tb.addAction(acts.fit)
    tb.addAction(acts.export)


def fill_recent_menu(menu: QMenu, files: list[str], open_file: Callable[[str], None],
                     clear: Callable[[], None]) -> None:
    """The recent files (``open_file(path)`` on a click), else "(none)"; "Clear list" calls ``clear()``."""
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

"""The main window's actions: every command of its menus, toolbar and keyboard, in one object.

The window creates :class:`WindowActions` and says what each command does; the view actions and their shortcuts come
from the view registry (:mod:`vitviz.views`), the named models from :mod:`vitviz.model.sources.catalog`. The menus and
the toolbar (:mod:`vitviz.gui.menus`) only place these actions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QWidget

from vitviz import views
from vitviz.model.sources import catalog  # plain data: no torch at start-up

# the window's commands an action calls (WindowActions' ``on``); ``view`` takes a view key, ``model`` a model
# reference, the steps a signed count, ``export`` keyword flags, ``open_checkpoint`` whether to ask for a folder
COMMANDS = ("open", "paste", "step_image", "export", "copy", "quit", "open_session", "save_session", "compare",
            "step_layer", "set_layer", "step_head", "fit", "grid", "view", "shortcuts", "about", "open_checkpoint",
            "open_by_name", "model", "undo", "redo")


def make_action(parent: QWidget, text: str, slot: Callable[[], Any], shortcut: Any = None) -> QAction:
    """A QAction of ``parent`` (its shortcuts work while that window is active) that calls ``slot()``."""
    a = QAction(text, parent)
    if shortcut is not None:
        if isinstance(shortcut, (list, tuple)):
            a.setShortcuts([QKeySequence(s) for s in shortcut])
        else:
            a.setShortcut(QKeySequence(shortcut))
        a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    a.triggered.connect(lambda *_: slot())
    parent.addAction(a)
    return a


class WindowActions:
    """Every QAction of the main window.

    Args:
        parent: the window the actions belong to.
        on: what each command does, by the names of :data:`COMMANDS`.

    Attributes:
        views: view key -> its checkable action (registry order), in ``view_group``.
        models: model reference -> its checkable action in the Model menu's list (the bundled model, the curated
            Hugging Face Hub models, torchvision's weights), in ``model_group``; :meth:`refresh_models` updates them.
    """

    def __init__(self, parent: QWidget, on: Mapping[str, Callable[..., Any]]):
        missing = set(COMMANDS) - set(on)
        if missing:
            raise KeyError(f"no command for the actions {sorted(missing)}")
        K, S = Qt.Key, QKeySequence.StandardKey

        def act(text: str, slot: Callable[[], Any], shortcut: Any = None) -> QAction:
            return make_action(parent, text, slot, shortcut)

        # File
        self.open = act("&Open images…", on["open"], S.Open)
        self.paste = act("&Paste image", on["paste"], S.Paste)
        self.next_image = act("&Next image", lambda: on["step_image"](1), K.Key_PageDown)
        self.prev_image = act("P&revious image", lambda: on["step_image"](-1), K.Key_PageUp)
        self.export = act("&Export view (PNG, SVG, PDF)…", lambda: on["export"](heads=False), "Ctrl+E")
        self.export_heads = act("Export all &heads of this layer…", lambda: on["export"](heads=True), "Ctrl+Shift+E")
        self.export_animation = act("Export layer &animation (GIF, APNG, MP4)…", lambda: on["export"](animation=True),
                                    "Ctrl+Alt+E")
        self.copy = act("&Copy view to clipboard", on["copy"], S.Copy)
        self.undo = act("&Undo view or target change", on["undo"], "Ctrl+Z")
        self.redo = act("&Redo", on["redo"], ["Ctrl+Shift+Z", "Ctrl+Y"])
        self.quit = act("&Quit", on["quit"], S.Quit)
        self.open_session = act("Open &session or exported figure…", on["open_session"], "Ctrl+Shift+O")
        self.save_session = act("&Save session…", on["save_session"], "Ctrl+Shift+S")
        self.compare = act("Co&mpare…", on["compare"], "Ctrl+K")
        # View
        self.prev_layer = act("Previous layer", lambda: on["step_layer"](-1), K.Key_Left)
        self.next_layer = act("Next layer", lambda: on["step_layer"](1), K.Key_Right)
        self.first_layer = act("First layer", lambda: on["set_layer"](-10 ** 6), K.Key_Home)
        self.last_layer = act("Last layer", lambda: on["set_layer"](10 ** 6), K.Key_End)
        self.prev_head = act("Previous head", lambda: on["step_head"](-1), K.Key_Up)
        self.next_head = act("Next head", lambda: on["step_head"](1), K.Key_Down)
        self.fit = act("&Fit image", on["fit"], ["F", "Ctrl+0"])
        self.grid = act("All layers × heads grid", on["grid"], "G")
        self.grid.setCheckable(True)
        self.views: dict[str, QAction] = {}
        self.view_group = QActionGroup(parent)
        for v in views.all_views():  # one action per registered view, with its shortcut
            a = act(v.title, lambda k=v.key: on["view"](k), views.shortcut(v))
            a.setCheckable(True)
            self.view_group.addAction(a)
            self.views[v.key] = a
        # Help
        self.shortcuts = act("&Keyboard shortcuts", on["shortcuts"], "F1")
        self.about = act("&About vitviz", on["about"])
        # Model
        self.open_checkpoint = act("Open checkpoint &file…", lambda: on["open_checkpoint"](False))
        self.open_checkpoint_folder = act("Open checkpoint f&older…", lambda: on["open_checkpoint"](True))
        self.open_by_name = act("Open model by &name…", on["open_by_name"])
        self.models: dict[str, QAction] = {}
        self.model_group = QActionGroup(parent)

        def model(ref: str, text: str, tip: str) -> None:
            a = QAction(text, parent)
            a.setCheckable(True)
            a.setToolTip(tip)
            a.setStatusTip(tip)
            a.triggered.connect(lambda _=False, ref=ref: on["model"](ref))
            self.model_group.addAction(a)
            self.models[ref] = a

        model("demo", "Bundled demo model (8 shapes)", "The small ViT trained by vitviz on 8 synthetic shapes")
        for group in catalog.HUB_GROUPS:  # the menu's order: by group
            for m in (m for m in catalog.HUB_MODELS if m.group == group):
                model(m.ref, m.title, f"{m.title}: {m.what} (https://huggingface.co/{m.repo})")
        for name in catalog.TORCHVISION_VITS:
            model(f"pretrained:{name}", name, catalog.description(name))

    def refresh_models(self, current: str) -> None:
        """Sizes and cache marks of the named models, and a check at ``current`` (the model in use or being
        loaded)."""
        sizes = {m.ref: m.size_mb for m in catalog.HUB_MODELS}
        sizes.update({f"pretrained:{n}": row[3] for n, row in catalog.TORCHVISION_VITS.items()})
        titles = {m.ref: m.title for m in catalog.HUB_MODELS}
        for ref, a in self.models.items():
            if ref in sizes:
                state = "cached" if catalog.ref_is_cached(ref) else f"{sizes[ref]:.0f} MB"
                a.setText(f"{titles.get(ref, ref.split(':', 1)[-1])}\t{state}")
            a.setChecked(ref == current)

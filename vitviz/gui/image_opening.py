"""Opening images in the main window: the file dialog, a list of paths (a session file among them opens as a session),
PageUp / PageDown through the open images, the bundled samples, File > Open recent, and each image run with the model
it asks for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vitviz.document.session import Session
from vitviz.gui.dialogs import Dialogs
from vitviz.gui.menus import fill_recent_menu
from vitviz.gui.session_files import is_session_file
from vitviz.gui.settings import Prefs
from vitviz.resources import sample_images  # (not vitviz.demo: its dataset needs numpy and PIL)


class ImageOpener:
    """Adds images to ``session`` and runs them on ``controller``.

    Args:
        session: the document's image set.
        controller: runs an image (:meth:`vitviz.gui.controller.Controller.run`).
        prefs: the remembered folder.
        dialogs: the file dialog.
        switch_for_photo: picks the model a photo asks for (the bundled shapes model is for its shapes).
        open_session: opens a ``.vitviz.json`` (or a figure vitviz exported) given among the paths.
        recent_menu: File > Open recent (a ``QMenu``), filled from the remembered files.
    """

    def __init__(self, session: Session, controller: Any, prefs: Prefs, dialogs: Dialogs, *,
                 switch_for_photo: Callable[[str], None], open_session: Callable[[str], Any], recent_menu: Any):
        self.session = session
        self.controller = controller
        self.prefs = prefs
        self.dialogs = dialogs
        self.switch_for_photo = switch_for_photo
        self.open_session = open_session
        self.recent_menu = recent_menu

    def fill_recent(self) -> None:
        """File > Open recent from the remembered files (with its Clear entry)."""
        fill_recent_menu(self.recent_menu, self.prefs.recent_files(), lambda p: self.open([p]),
                         lambda: (self.prefs.clear_recent_files(), self.fill_recent()))

    def remember_shown(self, source: str) -> None:
        """An image of the set was shown: first in File > Open recent."""
        if source in self.session.images:
            self.prefs.add_recent_file(source)
            self.fill_recent()

    def open_samples(self) -> None:
        """The bundled sample images, when nothing else was opened."""
        if self.session.images:
            return
        try:
            samples = [str(p) for p in sample_images()]
        except Exception:  # noqa: BLE001 - no samples: an empty window is fine
            samples = []
        if samples:
            self.open(samples, remember=False)

    def open_dialog(self) -> None:
        files = self.dialogs.open_images(self.prefs.last_folder())
        if files:
            self.open(files)

    def open(self, paths: list[str], *, remember: bool = True) -> None:
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
        self.run(paths[0], remember=remember)

    def step(self, delta: int) -> None:
        """PageDown / PageUp: counts from the image last asked for, so quick presses each move on."""
        p = self.session.step(delta, start=self.controller.requested)
        if p is not None:
            self.run(p)

    def run(self, source: str, pil: Any = None, *, remember: bool = True) -> None:
        """Analyse ``source`` (a path, or the name of pixels ``pil``) with the model it asks for."""
        self.switch_for_photo(source)
        self.controller.run(source, pil, remember=remember)

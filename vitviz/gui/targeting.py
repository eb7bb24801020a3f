"""Choosing the target of the gradient views in the window: the target box's choices made into a
:class:`~vitviz.document.target_choice.TargetChoice` (asking for a file, or a patch's row and column, where one is
needed) and the shown image run again with it.

The run goes through the controller (:meth:`vitviz.gui.controller.Controller.run`): a reference image is read and run
on the worker (an open image of the same model is not run again), the target made, the image captured with it; only
then does the new result replace the shown one and the target become the window's standing target (every image shown
next is explained by it). A target that cannot be made or used (an unknown class, a reference image that cannot be
read, a patch outside its grid, a vector of the wrong length, a function that raises or returns no scalar) gives one
message, and the window keeps its result, target and options.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject

from vitviz.document.session import Session
from vitviz.document.target_choice import TargetChoice
from vitviz.gui.controller import Controller
from vitviz.gui.dialogs import Dialogs
from vitviz.gui.panels import PredictionsPanel
from vitviz.gui.settings import Prefs


class TargetPicker(QObject):
    """The window's target choices.

    Args:
        parent: the window (the Qt parent only).
        session, controller, dialogs, prefs: the window's document, model and jobs, dialogs and settings.
        predictions: the predictions panel (its target box emits the choices; it shows the target being computed).
        show_error: the one place errors reach the user; ``status``: the status bar's ``showMessage``.
    """

    def __init__(self, parent: QObject, *, session: Session, controller: Controller, dialogs: Dialogs, prefs: Prefs,
                 predictions: PredictionsPanel, show_error: Callable[..., None], status: Callable[[str, int], None]):
        super().__init__(parent)
        self.session, self.controller, self.dialogs, self.prefs = session, controller, dialogs, prefs
        self.predictions, self.show_error, self.status = predictions, show_error, status
        box = predictions.box
        box.topChosen.connect(lambda: self.choose(TargetChoice("top")))
        box.imageChosen.connect(self.similar_to_image)
        box.patchChosen.connect(self.similar_to_patch)
        box.vectorChosen.connect(self.similar_to_vector)
        controller.targetChanged.connect(self._on_target_changed)

    def choose(self, choice: Any) -> bool:
        """Run the shown image with ``choice`` (a :class:`TargetChoice`, a class index or any target); False when
        there is no image to run."""
        r = self.session.result
        if r is None:
            self.show_error("No target chosen", "Open an image first: the target is chosen for the image shown.")
            return False
        self.controller.rerun(r, target=choice)
        words = choice.describe(r.labels) if isinstance(choice, TargetChoice) else None
        self.predictions.refresh(self.session, pending_target=words if words is not None else choice)
        return True

    def similar_to_image(self, path: str = "") -> bool:
        """"Similar to image": an open image (its path) or, without one, a file asked for."""
        if not path:
            path = self.dialogs.open_reference_image(self.prefs.last_folder()) or ""
            if not path:
                return False
        return self.choose(TargetChoice("image", path=str(path)))

    def similar_to_patch(self, path: str = "", patch: tuple[int, int] | None = None) -> bool:
        """"Similar to this patch of": the shown image's selected query patch (``path`` its source), or a patch of
        another open image or of a file (asked for), whose row and column are asked (unless ``patch`` is given)."""
        r = self.session.result
        if r is None:
            return self.choose(None)
        if path == r.source and patch is None:
            patch = divmod(int(self.session.options.query), r.grid[1])
        if not path:
            path = self.dialogs.open_reference_image(self.prefs.last_folder()) or ""
            if not path:
                return False
        if patch is None:
            patch = self.dialogs.ask_patch(Path(path).name or path, r.grid)
            if patch is None:
                return False
        return self.choose(TargetChoice("patch", path=str(path), patch=(int(patch[0]), int(patch[1]))))

    def similar_to_vector(self, path: str = "") -> bool:
        """"Similar to a vector (.npy)": a stored vector asked for (or ``path``)."""
        if not path:
            path = self.dialogs.open_vector(self.prefs.last_folder()) or ""
            if not path:
                return False
        return self.choose(TargetChoice("vector", path=str(path)))

    def _on_target_changed(self, note: str) -> None:
        if note:  # the standing target could not be made for another model: dropped, and said
            self.status(note, 15000)

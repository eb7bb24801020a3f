"""Text prompts in the window (CLIP, SigLIP): the prompt box's text made into the model's classes.

What is typed goes to :meth:`vitviz.gui.controller.Controller.use_prompts`: on the worker the text tower is opened
from the model's source (once per model; a download shows the window's progress and can be cancelled), the prompts
encoded and a zero-shot pipeline (:func:`vitviz.pipeline.prompt_pipeline`) adopted like a model, so the shown image
runs again with the prompts as its classes: the predictions table shows their probabilities, a prompt clicked there
is the target (it stays the target for the next images), every gradient view explains its score. The first result
of newly typed prompts is shown in LeGrad, and relevance on CLIP prompts starts at the last layer as Chefer's CLIP
notebook does (:func:`vitviz.views.relevance.clip_prompt_changes`; the caption says so); clearing the box returns to
the image tower and to the view shown before. An error (an empty prompt, no text tower, a tokenizer file missing) is
one message and leaves the window as it was, the box showing the prompts in use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject

from vitviz.document.session import Session
from vitviz.gui.controller import Controller, attached_tower
from vitviz.gui.panels import PredictionsPanel
from vitviz.views.presets import PROMPT_VIEWS
from vitviz.views.relevance import clip_prompt_changes

IN_MEMORY = ("the model was handed over in memory without its text tower (vitviz.show(model, images, text=[...], "
             "text_tower=vitviz.model.text.open_text_tower(...)))")


def text_reason(pipeline: Any, towers: dict[str, Any]) -> str | None:
    """Why ``pipeline``'s model takes no prompts (one line), or None when it has (or may have: a Hub model not
    downloaded yet) a text tower. Reads names only: no weights, no network."""
    if pipeline is None:
        return "no model is loaded yet"
    if pipeline.source is None:
        return None if attached_tower(pipeline) is not None else IN_MEMORY
    if pipeline.source in towers:
        return None
    from vitviz.model.text import text_tower_reason

    try:
        return text_tower_reason(pipeline.source)
    except Exception as e:  # noqa: BLE001 - a source that cannot be read says so in the box
        return f"{pipeline.source}: {e}".splitlines()[0]


class PromptPicker(QObject):
    """The window's prompts.

    Args:
        parent: the window (the Qt parent only).
        session, controller: the window's document and its model and jobs.
        predictions: the predictions panel (its :attr:`~vitviz.gui.panels.PredictionsPanel.prompt_box`).
        set_options: the window's way to change view options and redraw.
        shown: the window's signal that a new result is on screen.
        status: the status bar's ``showMessage``.
    """

    def __init__(self, parent: QObject, *, session: Session, controller: Controller, predictions: PredictionsPanel,
                 set_options: Callable[..., None], shown: Any, status: Callable[[str, int], None]):
        super().__init__(parent)
        self.session, self.controller, self.set_options, self.status = session, controller, set_options, status
        self.box = predictions.prompt_box
        self.box.promptsEntered.connect(self.enter)
        self._asked: str | None = None  # prompts being encoded
        self._fresh = False  # typed prompts: their first result is shown in LeGrad
        self._before: dict[str, Any] | None = None  # the view options before the prompts (restored after them)
        self._shown: list[str] = []
        controller.modelChanged.connect(self._on_model_changed)
        controller.failed.connect(self._on_failed)
        shown.connect(self._on_shown)

    @property
    def prompts(self) -> list[str]:
        return self.controller.prompts

    def enter(self, text: str) -> bool:
        """Use the prompts of ``text`` (``"a cat; a dog"``); "" returns to the image tower. False when nothing was
        started (no model; the model takes no prompts: said once)."""
        c = self.controller
        if c.image_pipeline is None or c.is_busy("model"):
            self.status("Prompts not applied: the model is still loading", 6000)
            self.box.refresh(self.prompts, self._probability())
            return False
        if not str(text).strip():
            if not self.prompts:
                return False
            self._asked, self._fresh = "", False
            c.use_prompts("")
            return True
        reason = text_reason(c.image_pipeline, c.towers)
        if reason is not None:
            c.failed.emit("model", "Could not use the prompts", reason, "", "")
            return False
        self._asked, self._fresh = str(text), True
        if self._before is None:
            o = self.session.options
            self._before = {"view": o.view, "start_layer": o.start_layer}
        c.use_prompts(str(text))
        return True

    def _probability(self) -> str:
        spec = getattr(self.controller.pipeline, "spec", None)
        return str(getattr(spec, "probability", "") or "")

    def _on_model_changed(self, _note: str = "") -> None:
        c = self.controller
        prompts = self.prompts
        if prompts != self._shown:  # other prompts, or none: a target of the former classes is not this one's
            c.set_standing_target(None)
        if not prompts and self._shown and self._before is not None:  # back to the image tower and its view
            before, self._before = self._before, None
            self.set_options(**before)
        self._shown = prompts
        self._asked = None
        self.box.set_reason(None if prompts else text_reason(c.pipeline, c.towers))
        self.box.refresh(prompts, self._probability())

    def _on_failed(self, kind: str, *_args: Any) -> None:
        if kind == "model" and self._asked is not None:  # the prompts could not be used: the box as it was
            self._asked, self._fresh = None, False
            if not self.prompts:
                self._before = None
            self.box.refresh(self.prompts, self._probability())

    def _on_shown(self) -> None:
        r = self.session.result
        if not self._fresh or r is None or getattr(r, "head_kind", "") != "prompts":
            return
        self._fresh = False
        changes: dict[str, Any] = {"view": PROMPT_VIEWS[0], **clip_prompt_changes(r)}
        self.set_options(**changes)

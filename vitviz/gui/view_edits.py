"""The user's edits of what the window shows (view, layer, head, query patch, display options, target), and their undo.

Every control of the window writes its change here; :class:`ViewEdits` writes it to the session's options and asks for
a redraw. Each change first remembers what was shown (the options and the target) on a short history, so Edit > Undo
(Ctrl+Z) and Redo (Ctrl+Shift+Z) step back and forth, as an image editor's history does: consecutive changes of the
same slider or spin box (:data:`GRADUAL`: dragging the layer slider through ten layers, a colour range typed digit by
digit) are one step, every view, head, patch, colour map or target chosen a step of its own, and a new change after
an undo drops the redo steps. Undoing a target runs the image again with the earlier class target (in the background,
as choosing it did); a similarity target chosen in the target box is not in the history.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from vitviz.document.session import Session
from vitviz.views.presets import HEAD_VIEW

HISTORY = 50  # steps kept
GRADUAL = frozenset({"layer", "opacity", "discard_ratio", "percentile", "fixed_range", "scale", "mask_keep"})
"""Options set by a slider or a spin box (a drag, digits typed): a run of changes of the same ones is one step. A
view, head, patch, colour map or target chosen is a step of its own."""


@dataclass(frozen=True)
class Shown:
    """What the window showed before a change: its view options (immutable) and the target of the result."""

    options: Any
    target: Any


class ViewEdits:
    """Writes the user's changes to ``session`` and keeps their history.

    Args:
        session: the document whose options change.
        redraw: redraws the window from the session (never runs the model).
        controller: runs the shown image again when a change needs another pass (LeGrad's pooling, a target).
        choose_target: runs the shown image with a target (:meth:`vitviz.gui.targeting.TargetPicker.choose`).
        status: the status bar's ``showMessage(text, ms)``.
    """

    def __init__(self, session: Session, *, redraw: Callable[[], None], controller: Any,
                 choose_target: Callable[[Any], Any], status: Callable[[str, int], None]):
        self.session = session
        self.redraw = redraw
        self.controller = controller
        self.choose_target = choose_target
        self.status = status
        self.undo_steps: list[Shown] = []
        self.redo_steps: list[Shown] = []
        self.last_keys: frozenset[str] = frozenset()  # what the newest step changed (consecutive ones merge)
        self.query_chosen = False  # the user picked a patch: it is kept across patch grids

    # ------------------------------------------------------------------ history
    def shown(self) -> Shown:
        r = self.session.result
        return Shown(self.session.options, None if r is None else self.target_of(r))

    @staticmethod
    def target_of(result: Any) -> int | None:
        """The class target of ``result`` (a similarity or text target is not kept in the history: None)."""
        return None if result.target is None else int(result.target)

    def remember(self, keys: frozenset[str], shown: Shown | None = None) -> None:
        """Before a change of ``keys``: what is shown now (or ``shown``) becomes an undo step (one step for a run of
        changes of the same keys); the redo steps go."""
        if self.session.result is None:
            return
        if not (keys == self.last_keys and keys <= GRADUAL and self.undo_steps):
            self.undo_steps.append(shown or self.shown())
            del self.undo_steps[:-HISTORY]
        self.last_keys = keys
        self.redo_steps.clear()

    def undo(self) -> bool:
        """Back to what was shown before the last change (False, and a status line, when there is none)."""
        return self._step(self.undo_steps, self.redo_steps, "undo")

    def redo(self) -> bool:
        return self._step(self.redo_steps, self.undo_steps, "redo")

    def _step(self, source: list[Shown], dest: list[Shown], word: str) -> bool:
        if not source or self.session.result is None:
            self.status(f"Nothing to {word}", 3000)
            return False
        dest.append(self.shown())
        state = source.pop()
        self.last_keys = frozenset()  # the next change is a step of its own
        o = state.options
        self.session.set_options(**{f.name: getattr(o, f.name) for f in fields(o)})
        self.redraw()
        if state.target is not None and state.target != self.target_of(self.session.result):
            self.choose_target(state.target)
        self.status(f"{word.capitalize()}: {self.session.describe_view()}", 3000)
        return True

    # ------------------------------------------------------------------ edits
    def set(self, **changes: Any) -> None:
        """Change view options and redraw (LeGrad's pooling taken in a new pass when the result lacks it)."""
        if any(getattr(self.session.options, k, None) != v for k, v in changes.items()):
            self.remember(frozenset(changes))
        self.session.set_options(**changes)
        self.redraw()
        r, pooling = self.session.result, self.session.options.legrad_pooling
        self.controller.legrad_poolings = (pooling,)  # LeGrad is taken in the pass for the pooling shown
        if "legrad_pooling" in changes and r is not None and r.legrad and pooling not in r.legrad:
            self.controller.rerun(r, r.target)

    def set_target(self, target: Any) -> None:
        """A new gradient target: remembered, then the image runs again with it."""
        self.remember(frozenset({"target"}))
        self.choose_target(target)

    def set_layer(self, layer: int) -> None:
        """The layer slider: the layer, or the start layer of a cumulative view (clamped)."""
        if layer != self.session.slider_value():
            self.remember(frozenset({"layer"}))
        self.session.set_slider(layer)
        self.redraw()

    def step_layer(self, delta: int) -> None:
        self.set_layer(self.session.slider_value() + delta)

    def set_scale_options(self, changes: dict) -> None:
        """Colour scale, artefact and mask options; a fixed range that cannot be used is said, not applied."""
        before = self.shown()
        try:
            self.session.set_options(**changes)
        except ValueError as e:
            self.status(f"Colour scale not changed: {e}", 8000)
        if self.session.options != before.options:
            self.remember(frozenset(changes), before)
        self.redraw()

    def step_head(self, delta: int) -> None:
        self.set(head=self.session.next_head(delta))

    def set_query(self, index: int) -> None:
        self.query_chosen = True  # the user's patch is kept across models
        self.set(query=int(index))

    def head_tile(self, layer: int, head: int) -> None:
        """A head tile clicked: that layer and head (the [CLS] attention view when the view reads no head)."""
        changes: dict[str, Any] = {"layer": layer, "head": head}
        if "head" not in self.session.view.reads:
            changes["view"] = HEAD_VIEW
        self.set(**changes)

    def canvas_click(self, x: float, y: float) -> None:
        rc = self.session.image_to_patch(x, y)
        if rc is not None and self.session.result is not None:
            self.set_query(rc[0] * self.session.result.grid[1] + rc[1])


def follow_controls(c: Any, edits: ViewEdits) -> None:
    """Each change of the controls panel ``c`` (:class:`vitviz.gui.panels.ControlsPanel`) written by ``edits``."""
    c.viewChanged.connect(lambda key: edits.set(view=key))
    c.layerChanged.connect(edits.set_layer)
    c.headChanged.connect(lambda head: edits.set(head=head))
    c.rolloutChanged.connect(lambda f, d: edits.set(head_fusion=f, discard_ratio=d))
    c.scale_panel.changed.connect(edits.set_scale_options)
    c.colormapChanged.connect(lambda name: edits.set(cmap=name))
    c.opacityChanged.connect(lambda v: edits.set(opacity=v))
    c.interpolationChanged.connect(lambda m: edits.set(interpolation=m))
    c.export_colorbar.toggled.connect(lambda b: edits.set(colorbar=b))
    c.export_caption.toggled.connect(lambda b: edits.set(caption=b))
    for name in ("mask_background", "pca_joint", "pca_colours_only"):  # feature PCA's check boxes
        getattr(c, name).toggled.connect(lambda b, n=name: edits.set(**{n: b}))
    c.legrad_pooling.currentIndexChanged.connect(lambda i: edits.set(legrad_pooling=c.legrad_pooling.itemData(i)))

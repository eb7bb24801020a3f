"""File > Save session and File > Open session: the window's side of :mod:`vitviz.document.state`.

Saving captures the window's state (model reference, images, target, every option, the heads grid toggle, the open
comparison) and writes it atomically. Opening reads a ``.vitviz.json`` or a figure vitviz exported, checks
everything before anything changes (the file, every image, the model: :func:`vitviz.document.state.locate`), then on the
worker opens the model when it is another one and checks the shown image and the target; only when all of that
succeeded does the window adopt the model and run the image the usual way (so the result is the window's own, as
for any image), and the state's options are applied as that result arrives. Any failure is one error dialog naming
the file and every problem, and the window stays as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from vitviz import imaging
from vitviz.devices import available_precisions
from vitviz.document import state as st
from vitviz.document.session import Session
from vitviz.gui.controller import Controller
from vitviz.gui.dialogs import Dialogs, confirm_download, write_asking
from vitviz.gui.settings import Prefs
from vitviz.gui.worker import Job, describe_error
from vitviz.render import figures

KIND = "session"  # the worker's job kind


FIGURE_SUFFIXES = (".png", ".svg")  # the figures vitviz exports with its session in their metadata


def is_session_file(path: str) -> bool:
    """A file that opens as a session rather than as an image: a ``.vitviz.json``, or a PNG / SVG figure vitviz
    exported, which carries its session (only its metadata is read, within bounds; anything unreadable: an image)."""
    p = str(path).lower()
    if p.endswith(st.SUFFIX):
        return True
    if not p.endswith(FIGURE_SUFFIXES) or not Path(path).is_file():
        return False
    try:
        return st.METADATA_KEY in figures.read_metadata(path)
    except Exception:  # noqa: BLE001 - not a figure of ours: opened as the image it is
        return False


class Sessions(QObject):
    """Saving and opening sessions of one window's document.

    Args:
        parent: the window (the Qt parent only).
        session, controller, prefs, dialogs: the window's document, model and jobs, settings and dialogs.
        show_error: the one place errors reach the user; ``status``: the status bar's ``showMessage``.
        heads_all_layers: whether the heads panel shows every layer (saved with the session).
        shown_comparison: the Compare window's spec while it is shown, else None (saved with the session).

    Signals:
        gridRestored(all_layers): an opened session's heads grid toggle, as its image arrives (before the redraw).
        comparisonOpened(spec): an opened session carries a comparison (a
            :class:`vitviz.document.comparison.CompareSpec`): show it.
    """

    gridRestored = Signal(bool)
    comparisonOpened = Signal(object)

    def __init__(self, parent: QObject, *, session: Session, controller: Controller, prefs: Prefs, dialogs: Dialogs,
                 show_error: Callable[..., None], status: Callable[[str, int], None],
                 heads_all_layers: Callable[[], bool], shown_comparison: Callable[[], Any]):
        super().__init__(parent)
        self.session, self.controller, self.prefs, self.dialogs = session, controller, prefs, dialogs
        self.show_error, self.status = show_error, status
        self.heads_all_layers, self.shown_comparison = heads_all_layers, shown_comparison
        self.pending: st.SessionState | None = None  # opened: waiting for its image's result
        self._opening: st.SessionState | None = None  # being checked on the worker
        self._notes: list[str] = []
        controller.runner.done.connect(self._on_done)
        # a failure of the opening job reaches the user through the controller's one path (Controller.failed ->
        # the window's error dialog), never here as well: one failure, one dialog
        controller.failed.connect(self._on_run_failed)

    # ------------------------------------------------------------------ saving
    def current_state(self, *, compare: Any = None, hashes: bool = True) -> st.SessionState:
        """The window's state now (StateError when no image has been analysed)."""
        c = self.controller
        if compare is None:
            compare = self.shown_comparison()
        pipeline = c.pipeline
        spec = getattr(pipeline, "spec", None) if pipeline is not None else None
        return st.capture_state(self.session, c.ref, model_name=c.title(),
                                device=getattr(pipeline, "device", c.device),
                                precision=getattr(pipeline, "precision", c.precision),  # "auto" resolved
                                preprocess=getattr(spec, "preprocess", None),
                                heads_all_layers=self.heads_all_layers(), compare=compare, hashes=hashes)

    def why_not_reopenable(self) -> str | None:
        """Why a session saved now could not be opened again (None when it could)."""
        r = self.session.result
        if r is None:
            return "Open an image first."
        if not Path(r.source).is_file():
            return (f"The shown image ({r.source}) was pasted or dropped as pixels and has no file, so a session "
                    f"could not open it again. Save it as an image file and open that first.")
        if self.controller.ref == st.IN_MEMORY_MODEL:
            return ("The model was handed to vitviz by a script, not opened from a file or by name, so a session "
                    "could not open it again. Open the model from a file (Model menu) first.")
        return None

    def save(self, path: str) -> Path | None:
        """Write the session to ``path`` (``.vitviz.json`` added when the name has no ``.json``); asks before
        replacing a file; errors are shown. Returns the file written, or None."""
        why = self.why_not_reopenable()
        if why:
            self.show_error("Cannot save the session", why)
            return None
        if not str(path).lower().endswith(".json"):
            path = str(path) + st.SUFFIX
        try:
            state = self.current_state()
            out = write_asking(self.dialogs, path, lambda ow: st.save_state(state, path, overwrite=ow))
        except st.StateError as e:  # names the file and why (too many images ...)
            self.show_error("Could not save the session", str(e))
            return None
        except Exception as e:  # noqa: BLE001 - ExportError, OSError: shown, the app goes on
            self.show_error("Could not save the session", describe_error(e, str(path)))
            return None
        if out is not None:
            self.prefs.set_export_folder(str(Path(out).parent))
            self.status(f"Saved the session to {out}", 8000)
        return out  # type: ignore[return-value]

    def save_dialog(self) -> Path | None:
        why = self.why_not_reopenable()
        if why:
            self.show_error("Cannot save the session", why)
            return None
        r = self.session.result
        suggested = imaging.next_free_path(Path(self.prefs.export_folder()) / (Path(r.source).stem + st.SUFFIX))
        p = self.dialogs.save_session(str(suggested))
        return self.save(p) if p else None

    def metadata(self, figure_path: str | None = None, *, compare: Any = None) -> dict[str, str] | None:
        """The state for an exported figure's metadata (None when no image has been analysed)."""
        try:
            return st.figure_metadata(self.current_state(compare=compare), figure_path)
        except st.StateError:  # nothing shown yet, or a session too large to be read back: a figure without it
            return None

    # ------------------------------------------------------------------ opening
    def open_dialog(self) -> None:
        p = self.dialogs.open_session(self.prefs.last_folder())
        if p:
            self.open(p)

    def open(self, path: str) -> bool:
        """Open a session file or an exported figure; False (and an error dialog) when it cannot be, with the
        window unchanged. The model and image are opened in the background."""
        c = self.controller
        title = "Could not open the session"
        try:
            state = st.read_state(path)  # StateError is its only error: bounded, it names the file and the cause
            state = st.locate(state, current_model=c.ref if c.model is not None else None)
        except st.StateError as e:
            self.show_error(title, str(e))
            return False
        except Exception as e:  # noqa: BLE001 - never out of a Qt slot: one dialog, the window unchanged
            self.show_error(title, f"{path}: {type(e).__name__}: {e}")
            return False
        ref = state.model
        # the maps depend on the precision: the saved one where this device has it (then the model is opened
        # afresh at it, leaving the window's own untouched until everything succeeded)
        want = state.precision if state.precision in available_precisions(c.device) else None
        new_model = (ref != c.ref or c.pipeline is None
                     or (want is not None and want != getattr(c.pipeline, "precision", None)))
        if new_model and not confirm_download(self.dialogs, ref):
            self.status("Session not opened: its model was not downloaded", 8000)
            return False
        current = c.image_pipeline  # (the image tower's, when prompts are in use)
        device, precision = c.device, c.precision
        tower = c.towers.get(str(current.source)) if current is not None and not new_model else None
        prompts_now = bool(c.prompts)

        def work(job: Job):
            from vitviz.imaging import load_image

            note = None
            pipeline = current
            if new_model:
                from vitviz.pipeline import Pipeline

                pipeline = Pipeline.open(ref, device=device, precision=want or precision, progress=job.report,
                                         show_bar=False)
                note = "; ".join(filter(None, [pipeline.note, st.with_preprocess(pipeline.model, state)]))
            load_image(state.image.path)  # readable (the window reads it again to run it)
            base = pipeline
            try:  # the prompts encoded by the model's text tower
                pipeline = st.state_pipeline(state, base, progress=job.report, tower=tower)
                pipeline.precision_choice = base.precision_choice
            except Exception as e:  # noqa: BLE001 - no text tower, a tokenizer file missing: one line
                if job.cancelled:
                    raise
                raise ValueError(f"{path}: its prompts cannot be used: {str(e).strip().splitlines()[0]}") from None
            n = int(getattr(pipeline.model, "num_classes", 0) or 0)
            if state.target is not None and not 0 <= state.target < n:
                raise ValueError(f"its target class {state.target} ({state.target_label or 'unnamed'}) does not "
                                 f"exist in {getattr(pipeline.spec, 'name', 'the model')}, which has "
                                 + (f"{n} classes" if n else "no classifier"))
            try:  # a similarity target's reference read and run with the session's model
                target, target_note = st.state_target(state, pipeline)
            except ValueError as e:  # TargetError: names the reference and the cause
                raise ValueError(f"{path}: its target cannot be used: {e}") from None
            note = "; ".join(filter(None, [note, target_note]))
            other = new_model or bool(state.prompts) or prompts_now  # a pipeline to adopt (not the shown one)
            return pipeline if other else None, note, st.changed_images(state, [state.current]), target, base

        self._notes = []
        c.busy.emit(f"Opening the session {Path(path).name}…", False)
        c.runner.submit(KIND, work, subject=str(path), title=title)
        self._opening = state
        return True

    def _on_done(self, kind: str, payload: Any, job: Job) -> None:
        if kind != KIND or self.controller.closing:
            return
        state = self._opening
        pipeline, note, changed, target, base = payload
        c = self.controller
        notes = [note] if note else []
        if changed:
            notes.append(f"{Path(changed[0]).name} has changed since the session was saved: the maps may differ")
        if state.model.startswith("random:"):
            notes.append("its model has random weights, drawn anew: the maps differ from the saved ones")
        shown = pipeline if pipeline is not None else c.pipeline
        if (state.precision, state.device) != (shown.precision, shown.device):
            notes.append(f"saved on {state.device} ({state.precision}), shown on {shown.device} ({shown.precision}):"
                         f" the maps may differ slightly")
        self._notes = notes
        self.pending = state
        source = state.image.path
        if pipeline is not None:
            c.requested = source  # the window must not re-run its old image with the new model meanwhile
            c.device, c.precision = pipeline.device, pipeline.precision_choice  # as the controller does for a load
            c.adopt(pipeline, state.model, note, image=base)
        c.run(source, None, target=target, remember=False)

    def _on_run_failed(self, kind: str, title: str, message: str, detail: str, subject: str) -> None:
        if kind == "infer" and self.pending is not None and subject == self.pending.image.path:
            self.pending = None

    def before_result(self, result: Any) -> None:
        """Called by the window as a result arrives: the opened session's image takes the session's image list and
        options (clamped to the model by :meth:`Session.set_result`)."""
        state = self.pending
        if state is None:
            return
        if result.source != state.image.path:  # another image was asked for meanwhile: the session gave way
            self.pending = None
            return
        self.pending = None
        self.session.images = list(state.paths)
        self.session.options = state.options
        self.gridRestored.emit(state.heads_all_layers)
        name = Path(state.origin).name if state.origin else "session"
        if state.origin and not str(state.origin).lower().endswith(st.SUFFIX):  # say why a picture opened so
            name = f"the session that {name} carries (a figure vitviz exported; its image and view)"
        notes = "; ".join(self._notes)
        QTimer.singleShot(0, lambda: self._after(state, f"Opened {name}" + (f" ({notes})" if notes else "")))

    def _after(self, state: st.SessionState, message: str) -> None:
        if self.controller.closing:
            return
        self.status(message, 15000)
        if state.compare is not None:
            self.comparisonOpened.emit(state.compare)

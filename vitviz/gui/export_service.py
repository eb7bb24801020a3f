"""Exports for both windows: the view and the heads grid as PNG / SVG / PDF, layer animations (GIF / APNG / MP4), and
the Compare window's grid.

Figures come from :mod:`vitviz.render.figures` (it imports matplotlib on the first export, not at start-up). Every
write goes through :func:`vitviz.render.figures.save` / :func:`~vitviz.render.figures.save_animation` (atomic; an
existing file is replaced only when the user says so); every failure is shown in one error dialog naming the file and
the cause. With ``background=True`` (File > Export and the Compare window's Export) the drawing and writing run off the
GUI thread with a progress dialog and Cancel (:mod:`vitviz.gui.export_jobs`); the methods then return the
:class:`~vitviz.gui.export_jobs.ExportTask` at once. Without it (scripts, tests) they block and return the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QApplication, QWidget

from vitviz import imaging
from vitviz.document import panel
from vitviz.document.session import Session
from vitviz.gui.dialogs import Dialogs, qimage_from_rgb, write_asking
from vitviz.gui.export_jobs import ExportJobs, ExportTask, Progress
from vitviz.gui.settings import Prefs
from vitviz.gui.worker import describe_error
from vitviz.render import figures

FIGURE_FILTERS = {".png": "PNG image (*.png)", ".svg": "SVG vector figure (*.svg)", ".pdf": "PDF vector figure (*.pdf)"}
ANIMATION_FILTERS = {".gif": "Animated GIF (*.gif)", ".apng": "Animated PNG (*.apng)", ".mp4": "MP4 video (*.mp4)"}
FIGURE_SCALES = (("print", "Print: long side ≥ 2048 px"), ("native", "Native: the image's own pixels"),
                 ("2", "2× the image"), ("4", "4× the image"))
ANIMATION_SCALES = (("animation", "Screen: long side ≥ 1024 px"), ("native", "Native: the image's own pixels"),
                    ("print", "Print: long side ≥ 2048 px"))

Status = Callable[[str, int], None]  # a status bar's showMessage(text, milliseconds)


def size_note(path: Path) -> str:
    """What a written file measures: pixels (and frames or dpi) of a raster, kilobytes of a vector figure."""
    if path.suffix.lower() in (".png", ".gif", ".apng"):
        from PIL import Image  # (its plugins: with the first export, not at start-up)

        with Image.open(path) as im:
            frames = getattr(im, "n_frames", 1)
            dpi = im.info.get("dpi")
            text = f"{im.width}×{im.height} px"
            if frames > 1:
                text += f", {frames} frames"
            elif dpi:
                text += f", {float(dpi[0]):.0f} dpi"
            return text
    return f"{path.stat().st_size / 1024:.0f} kB"


class ExportService:
    """Writes figures of one document (``session``) for the main window and its Compare window.

    Args:
        parent: the widget an animation's progress dialog belongs to.
        session: the document whose view is exported.
        prefs: the remembered export folder, size and format.
        dialogs: where to ask for a file and before replacing one (:class:`~vitviz.gui.dialogs.Dialogs`).
        metadata: the text entries of an exported view or animation (None: only the figure's title and caption).
        show_error: the one place errors reach the user.
        status: the status bar's ``showMessage`` (a caller may pass its own window's for the "Exported" line).
    """

    def __init__(self, parent: QWidget, session: Session, prefs: Prefs, dialogs: Dialogs, *,
                 metadata: Callable[[], dict[str, str] | None], show_error: Callable[..., None], status: Status):
        self.parent = parent
        self.session = session
        self.prefs = prefs
        self.dialogs = dialogs
        self.metadata = metadata
        self.show_error = show_error
        self.status = status
        self.jobs = ExportJobs(parent)
        self.jobs.ended.connect(self._ended)
        self.task: ExportTask | None = None  # the last export started off the GUI thread
        self.task_status: Status | None = None  # where it says what it wrote

    # ------------------------------------------------------------------ parts
    def setting(self, key: str, default: str) -> str:
        """The remembered ``export_<key>`` (size, format), else ``default``."""
        return str(self.prefs.value(f"export_{key}", default) or default)

    def write(self, path: str, write: Callable[[bool], Path]) -> Path | None:
        """``write(overwrite)``; an existing file is replaced only when the user says so (None when not); errors
        shown."""
        try:
            return write_asking(self.dialogs, path, write)
        except InterruptedError:
            self.status("Export cancelled; nothing was written", 8000)
            return None
        except Exception as e:  # noqa: BLE001 - ExportError, OSError, ValueError: all shown, the app goes on
            self.show_error("Export failed", describe_error(e, str(path)))
            return None

    def _exported(self, out: Path | None, status: Status | None = None) -> Path | None:
        if out is not None:
            self.prefs.set_export_folder(str(Path(out).parent))
            (status or self.status)(f"Exported {out} ({size_note(out)})", 8000)
        return out

    def suggest(self, name: str) -> str:
        """A free file name ``name`` in the remembered export folder."""
        return str(imaging.next_free_path(Path(self.prefs.export_folder()) / name))

    # ------------------------------------------------------------------ figures
    def save_figure(self, spec: Any, path: str, *, scale: Any = None, metadata: dict[str, str] | None = None,
                    status: Status | None = None, background: bool = False) -> Path | ExportTask | None:
        """Write the :class:`vitviz.render.figures.FigureSpec` ``spec`` to ``path`` (PNG / SVG / PDF by extension;
        PNG at ``scale``, default the remembered one, ``"print"``). Asks before replacing a file; shows any error;
        says what was written on ``status`` (default: the main window's). Returns the file written, or None
        (``background``: the running task, or None)."""
        scale = self.setting("scale", "print") if scale is None else scale
        return self.run(path, "Export figure", background, status, lambda ow, progress: figures.save(
            spec, path, scale=scale, metadata=metadata, overwrite=ow, progress=progress))

    def run(self, path: str, title: str, background: bool, status: Status | None,
            write: Callable[[bool, Progress | None], Path], steps: int = 0) -> Path | ExportTask | None:
        """``write(overwrite, progress)`` here (the file, or None), or with ``background`` on the export thread with
        a progress dialog (the task, or None when the user would not replace the file)."""
        if not background:
            return self._exported(self.write(path, lambda ow: write(ow, None)), status)
        overwrite = Path(path).exists()
        if overwrite and not self.dialogs.confirm_overwrite(str(path)):
            return None
        self.task = self.jobs.start(Path(path), title, lambda progress: write(overwrite, progress), steps=steps)
        self.task_status = status
        return self.task

    def _ended(self, task: ExportTask) -> None:
        status = self.task_status if task is self.task else None
        if task.state == "done":
            self._exported(task.out, status)
        elif task.state == "cancelled":
            (status or self.status)("Export cancelled; nothing was written", 8000)
        else:
            self.show_error("Export failed", task.message)

    def export_view(self, path: str, *, heads: bool = False, all_layers: bool = False, scale: Any = None,
                    metadata: dict[str, str] | None = None, background: bool = False) -> Path | ExportTask | None:
        """Write the current view (``heads``: every head of the layer, or every layer x head with ``all_layers``)
        to ``path``: PNG, SVG or PDF by its extension, PNG at ``scale`` (default: the remembered one, ``"print"``).
        Asks before replacing a file; shows any error. Returns the file written, or None (``background``: the
        task)."""
        if not Path(path).suffix:  # a bare name is a PNG, as the file dialog's default type says
            path = str(path) + ".png"
        s = self.session
        scale = self.setting("scale", "print") if scale is None else scale
        # refused from the image's size before any map is drawn at its pixels
        if self.too_large(self.figure_scale(path, scale), heads=heads, all_layers=all_layers):
            return None
        spec = panel.heads_figure(s, all_layers=all_layers) if heads else panel.view_figure(s)
        if spec is None:
            self.show_error("Nothing to export", "Open an image first." if s.result is None
                            else f"{s.view.title} is not available: {s.unavailable_reason()}")
            return None
        meta = metadata if metadata is not None else self.metadata()
        return self.save_figure(spec, path, scale=scale, metadata=meta, background=background)

    def export_animation(self, path: str, *, scale: Any = None, fps: float = 2.0,
                         metadata: dict[str, str] | None = None, background: bool = False) -> Path | ExportTask | None:
        """Write the current view over every layer as GIF / APNG / MP4 (by ``path``'s extension), the layer drawn on
        each frame (``background``: off the GUI thread, a progress dialog counting frames, Cancel). Asks before
        replacing a file; shows any error."""
        scale = self.setting("animation_scale", "animation") if scale is None else scale
        if self.too_large(scale):
            return None
        try:
            specs = panel.layer_figures(self.session)
        except ValueError as e:
            self.show_error("Nothing to animate", str(e))
            return None
        meta = metadata if metadata is not None else self.metadata()
        return self.run(path, "Export animation", background, None, lambda ow, progress: figures.save_animation(
            specs, path, scale=scale, fps=fps, metadata=meta, overwrite=ow, progress=progress), steps=len(specs))

    def too_large(self, scale: Any, *, heads: bool = False, all_layers: bool = False) -> bool:
        """Whether the figure would be over the figure limit at ``scale``, from the image's size
        (:func:`vitviz.document.panel.figure_size_problem`); see :meth:`refused`."""
        return self.refused(panel.figure_size_problem(self.session, scale, heads=heads, all_layers=all_layers))

    def refused(self, problem: str | None) -> bool:
        """Show a figure's size ``problem`` in the error dialog (True), or nothing when it is None (False)."""
        if problem:
            self.show_error("Export refused", f"{problem}; choose a smaller size or reduce the image")
        return bool(problem)

    def figure_scale(self, path: str, scale: Any = None) -> Any:
        """The scale a figure file at ``path`` is laid out at (:func:`vitviz.render.figures.layout_scale`), ``scale``
        by default the remembered one."""
        return figures.layout_scale(Path(path).suffix, self.setting("scale", "print") if scale is None else scale)

    # ------------------------------------------------------------------ dialogs
    def export_dialog(self, *, heads: bool = False, animation: bool = False,
                      all_layers: bool = False) -> ExportTask | None:
        """Ask for a file (its type chooses the format) and a size, then export off the GUI thread (see
        :meth:`export_view`, :meth:`export_animation`); the running task, or None."""
        s = self.session
        if s.result is None:
            self.show_error("Nothing to export", "Open an image first.")
            return None
        if animation:
            filters, scales, key, default_fmt = ANIMATION_FILTERS, ANIMATION_SCALES, "animation_scale", ".gif"
            name = Path(s.export_name("_layers")).stem
            title = "Export layer animation"
        else:
            filters, scales, key, default_fmt = FIGURE_FILTERS, FIGURE_SCALES, "scale", ".png"
            name = Path(s.export_name("_heads" if heads else "")).stem
            title = "Export all heads" if heads else "Export view"
        fmt = self.setting("animation_format" if animation else "format", default_fmt)
        fmt = fmt if fmt in filters else default_fmt
        answer = self.dialogs.save_export(title, self.suggest(name + fmt), filters, scales,
                                          self.setting(key, scales[0][0]))
        if not answer:
            return None
        path, scale = answer
        self.prefs.set(f"export_{key}", scale)
        suffix = Path(path).suffix.lower()
        if suffix in filters:
            self.prefs.set("export_animation_format" if animation else "export_format", suffix)
        if animation:
            return self.export_animation(path, scale=scale, background=True)
        return self.export_view(path, heads=heads, all_layers=all_layers, scale=scale, background=True)

    def copy_view(self) -> None:
        """Edit > Copy: the view as the figure files draw it, onto the clipboard."""
        arr = panel.render_view(self.session)
        if arr is not None:
            QApplication.clipboard().setImage(qimage_from_rgb(arr))
            self.status(f"Copied the view ({arr.shape[1]}×{arr.shape[0]}) to the clipboard", 5000)

    def shutdown(self) -> None:
        """Cancel a running export and stop its thread (the window closes)."""
        self.jobs.shutdown()

    def ask_figure(self, title: str, name: str) -> tuple[str, str] | None:
        """Ask where to write a figure (suggested: ``name`` in the export folder) and at what size (the remembered
        one preselected, and remembered again); ``(path, scale)`` or None."""
        answer = self.dialogs.save_export(title, self.suggest(name), FIGURE_FILTERS, FIGURE_SCALES,
                                          self.setting("scale", "print"))
        if not answer:
            return None
        path, scale = answer
        self.prefs.set("export_scale", scale)
        return path, scale

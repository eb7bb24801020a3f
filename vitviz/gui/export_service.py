"""The window's exports: the view and the heads grid as PNG / SVG / PDF, and layer animations (GIF / APNG / MP4).

Figures come from :mod:`vitviz.render.figures` (matplotlib, imported on the first export, not at start-up). Every write goes
through :func:`vitviz.render.figures.save` / :func:`~vitviz.render.figures.save_animation` (atomic; an existing file is replaced
only when the user says so); every failure is shown in one error dialog naming the file and the cause.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitviz import imaging
from vitviz.gui.dialogs import write_asking
from vitviz.gui.worker import describe_error

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.gui.main_window import MainWindow

FIGURE_FILTERS = {".png": "PNG image (*.png)", ".svg": "SVG vector figure (*.svg)", ".pdf": "PDF vector figure (*.pdf)"}
ANIMATION_FILTERS = {".gif": "Animated GIF (*.gif)", ".apng": "Animated PNG (*.apng)", ".mp4": "MP4 video (*.mp4)"}
FIGURE_SCALES = (("print", "Print: long side ≥ 2048 px"), ("native", "Native: the image's own pixels"),
                 ("2", "2× the image"), ("4", "4× the image"))
ANIMATION_SCALES = (("animation", "Screen: long side ≥ 1024 px"), ("native", "Native: the image's own pixels"),
                    ("print", "Print: long side ≥ 2048 px"))


def _write_asking(win: MainWindow, path: str, write: Callable[[bool], Path]) -> Path | None:
    """``write(overwrite)``; an existing file is replaced only when the user says so (None when not); errors shown."""
    try:
        return write_asking(win.dialogs, path, write)
    except InterruptedError:
        win.statusBar().showMessage("Export cancelled; nothing was written", 8000)
        return None
    except Exception as e:  # noqa: BLE001 - ExportError, OSError, ValueError: all shown, the app goes on
        win.show_error("Export failed", describe_error(e, str(path)))
        return None


def _settings(win: MainWindow, key: str, default: str) -> str:
    return str(win.settings.value(f"export_{key}", default) or default)


def export_figure(win: MainWindow, path: str, *, heads: bool = False, scale: Any = None,
                  metadata: dict[str, str] | None = None) -> Path | None:
    """Write the current view (``heads``: every head of the layer, or every layer x head when the heads panel shows
    all layers) to ``path``: PNG, SVG or PDF by its extension, PNG at ``scale`` (default: the remembered one,
    ``"print"``). Asks before replacing a file; shows any error. Returns the file written, or None."""
    from vitviz.render import figures

    if not Path(path).suffix:  # a bare name is a PNG, as the file dialog's default type says
        path = str(path) + ".png"
    s = win.session
    spec = figures.heads_figure(s, all_layers=win.heads.all_layers) if heads else figures.view_figure(s)
    if spec is None:
        win.show_error("Nothing to export", "Open an image first." if s.result is None
                       else f"{s.view.title} is not available: {s.unavailable_reason()}")
        return None
    scale = _settings(win, "scale", "print") if scale is None else scale
    meta = metadata if metadata is not None else win.export_metadata()
    out = _write_asking(win, path, lambda ow: figures.save(spec, path, scale=scale, metadata=meta, overwrite=ow))
    if out is not None:
        win.prefs.set_export_folder(str(Path(out).parent))
        win.statusBar().showMessage(f"Exported {out} ({_size_note(out)})", 8000)
    return out


def _size_note(path: Path) -> str:
    if path.suffix.lower() in (".png", ".gif", ".apng"):
        from PIL import Image

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


def export_animation(win: MainWindow, path: str, *, scale: Any = None, fps: float = 2.0,
                     metadata: dict[str, str] | None = None) -> Path | None:
    """Write the current view over every layer as GIF / APNG / MP4 (by ``path``'s extension), the layer drawn on each
    frame, with a progress dialog that can cancel. Asks before replacing a file; shows any error."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication, QProgressDialog

    from vitviz.render import figures

    s = win.session
    try:
        specs = figures.layer_figures(s)
    except ValueError as e:
        win.show_error("Nothing to animate", str(e))
        return None
    scale = _settings(win, "animation_scale", "animation") if scale is None else scale
    meta = metadata if metadata is not None else win.export_metadata()
    dlg = QProgressDialog(f"Drawing {len(specs)} frames…", "Cancel", 0, len(specs), win)
    dlg.setWindowTitle("Export animation")
    dlg.setWindowModality(Qt.WindowModality.WindowModal)
    dlg.setMinimumDuration(300)

    def progress(done: int, total: int) -> bool:
        dlg.setValue(done)
        QApplication.processEvents()
        return not dlg.wasCanceled()

    try:
        out = _write_asking(win, path, lambda ow: figures.save_animation(specs, path, scale=scale, fps=fps,
                                                                         metadata=meta, overwrite=ow,
                                                                         progress=progress))
    finally:
        dlg.close()
        dlg.deleteLater()
    if out is not None:
        win.prefs.set_export_folder(str(Path(out).parent))
        win.statusBar().showMessage(f"Exported {out} ({_size_note(out)})", 8000)
    return out


def export_dialog(win: MainWindow, *, heads: bool = False, animation: bool = False) -> Path | None:
    """Ask for a file (its type chooses the format) and a size, then export (see :func:`export_figure`,
    :func:`export_animation`)."""
    s = win.session
    if s.result is None:
        win.show_error("Nothing to export", "Open an image first.")
        return None
    if animation:
        filters, scales, key, default_fmt = ANIMATION_FILTERS, ANIMATION_SCALES, "animation_scale", ".gif"
        name = Path(s.export_name("_layers")).stem
        title = "Export layer animation"
    else:
        filters, scales, key, default_fmt = FIGURE_FILTERS, FIGURE_SCALES, "scale", ".png"
        name = Path(s.export_name("_heads" if heads else "")).stem
        title = "Export all heads" if heads else "Export view"
    fmt = _settings(win, "animation_format" if animation else "format", default_fmt)
    fmt = fmt if fmt in filters else default_fmt
    suggested = str(imaging.next_free_path(Path(win.prefs.export_folder()) / (name + fmt)))
    scale = _settings(win, key, scales[0][0])
    ask = getattr(win.dialogs, "save_export", None)
    if ask is None:  # a dialogs replacement without it (older tests): the PNG question, remembered size
        p = win.dialogs.save_png(suggested)
        answer = None if not p else (p, scale)
    else:
        answer = ask(title, suggested, filters, scales, scale)
    if not answer:
        return None
    path, scale = answer
    win.settings.setValue(f"export_{key}", scale)
    suffix = Path(path).suffix.lower()
    if suffix in filters:
        win.settings.setValue("export_animation_format" if animation else "export_format", suffix)
    if animation:
        return export_animation(win, path, scale=scale)
    return export_figure(win, path, heads=heads, scale=scale)

"""The session's current view drawn on the main window's canvas, its words in the status bar, the window's title."""

from __future__ import annotations

from pathlib import Path

from vitviz.document.panel import panel_of
from vitviz.document.session import Session
from vitviz.gui.canvas import Canvas
from vitviz.gui.statusbar import StatusParts


def draw_view(session: Session, canvas: Canvas, status: StatusParts) -> None:
    """Draw what the panel of ``session`` shows (:func:`vitviz.document.panel.panel_of`: the Compare window and the
    figure files draw the same object) on ``canvas``; the artefact tokens and a view without a map in ``status``."""
    o = session.options
    canvas.set_colormap(o.cmap)
    canvas.set_opacity(o.opacity)
    if session.result is None:
        return
    p = panel_of(session)
    canvas.show_panel(p, o.cmap)
    status.show_artefacts(session)
    status.say_unavailable(session.view.title, p.unavailable)


def window_title(session: Session) -> str:
    """``photo.jpg (2/5) — <the view in words> — vitviz``; ``vitviz`` without a result."""
    r = session.result
    if r is None:
        return "vitviz"
    n = len(session.images)
    pos = f" ({session.index + 1}/{n})" if n > 1 and session.index >= 0 else ""
    return f"{Path(r.source).name}{pos} — {session.describe_view()} — vitviz"

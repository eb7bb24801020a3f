"""The main window's Compare window (File > Compare): made when first asked for, following the main window's view,
shown again with a comparison opened from a session, closed (its results freed) with the main window."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import SignalInstance
from PySide6.QtWidgets import QWidget

from vitviz.document.session import Session
from vitviz.gui.export_service import ExportService

if TYPE_CHECKING:
    from vitviz.gui.compare_window import CompareWindow


class CompareOpener:
    """Owns the main window's :class:`~vitviz.gui.compare_window.CompareWindow`.

    Args:
        parent: the main window (the Compare window's parent).
        session, controller, exports, show_error, metadata: what the Compare window works with.
        followed: the main window's ``viewRefreshed`` signal (the comparison redraws with it).
        set_query: the main window's query patch (a patch clicked in the comparison).
    """

    def __init__(self, parent: QWidget, *, session: Session, controller: Any, exports: ExportService,
                 show_error: Callable[..., None], metadata: Callable[..., Any], followed: SignalInstance,
                 set_query: Callable[[int], None]):
        self.parent = parent
        self.session, self.controller, self.exports = session, controller, exports
        self.show_error, self.metadata = show_error, metadata
        self.followed, self.set_query = followed, set_query
        self.window: CompareWindow | None = None

    def show(self, spec: Any = None) -> CompareWindow:
        """Show the Compare window, with ``spec`` (a :class:`vitviz.document.comparison.CompareSpec`) when given."""
        if self.window is None:
            from vitviz.gui.compare_window import CompareWindow  # (made when first asked for: not at start-up)

            cw = CompareWindow(self.parent, session=self.session, controller=self.controller, exports=self.exports,
                               show_error=self.show_error, metadata=self.metadata, spec=spec)
            self.followed.connect(cw.refresh)
            cw.querySelected.connect(self.set_query)  # a patch clicked there: the query patch here (and there)
            self.window = cw
        elif spec is not None:
            self.window.set_spec(spec)
        self.window.show()
        self.window.raise_()
        return self.window

    def shown_spec(self) -> Any:
        """The Compare window's spec while it is shown (a session saved now keeps it), else None."""
        cw = self.window
        return cw.spec if cw is not None and cw.isVisible() else None

    def close(self) -> None:
        if self.window is not None:
            self.window.close()  # it frees its results

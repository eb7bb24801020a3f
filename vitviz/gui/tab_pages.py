"""Tab pages of the plots panel: a page with a title row (:func:`titled_page`), and a page built the first time it is
shown or asked for (:class:`LazyPage`), so that the window's start-up builds only what is on screen.

The plots panel's Faithfulness and "Lens · knock-out" pages are run on request and hold a dozen plots, tables and
controls between them (about a third of the window's construction): :class:`LazyPage` stands in their tab until the
user opens it (its ``showEvent``) or code asks for :attr:`LazyPage.content`.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget


def titled_page(title: QLabel, body: QWidget, *extra: QWidget) -> QWidget:
    """A tab page: a title row (with ``extra`` widgets on its right), the body, nothing else."""
    page = QWidget()
    lay = QVBoxLayout(page)
    lay.setContentsMargins(2, 2, 2, 2)
    lay.setSpacing(2)
    top = QHBoxLayout()
    title.setWordWrap(True)
    top.addWidget(title, 1)
    for w in extra:
        top.addWidget(w, 0, Qt.AlignmentFlag.AlignTop)
    lay.addLayout(top)
    lay.addWidget(body, 1)
    return page


class LazyPage(QWidget):
    """A page whose content ``build()`` makes once: when the page is first shown or :attr:`content` is first read."""

    def __init__(self, build: Callable[[], QWidget], parent: QWidget | None = None):
        super().__init__(parent)
        self._build: Callable[[], QWidget] | None = build
        self._content: QWidget | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)

    @property
    def built(self) -> bool:
        return self._content is not None

    @property
    def content(self) -> QWidget:
        """The page's content, built now if it was not yet."""
        if self._content is None:
            build, self._build = self._build, None
            assert build is not None
            self._content = build()
            self.layout().addWidget(self._content)
            if self.isVisible():  # built in showEvent: Qt shows a visible widget's new children only when asked
                self._content.show()
        return self._content

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        _ = self.content
        super().showEvent(event)

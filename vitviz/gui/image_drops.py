"""Images that arrive by paste or drop: the files of the clipboard or of a drop open as images (or a session), their
pixels as an image of their own. A part of :class:`vitviz.gui.main_window.MainWindow` (which gives ``open_images``,
``run_image`` and ``show_error``), kept here by role."""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from vitviz import imaging
from vitviz.gui.dialogs import mime_content
from vitviz.gui.worker import describe_error


class ImageDrops:
    """Paste (Ctrl+V) and drag-and-drop of image files or pixels onto the window."""

    def paste_image(self) -> None:
        cb = QApplication.clipboard()
        if not self.open_mime(cb.mimeData(), "pasted image", cb.image()):
            self.show_error("Nothing to paste", "The clipboard holds no image and no image file.")

    def open_mime(self, md: Any, source: str, image: QImage | None = None) -> bool:
        """Open the files of a paste or drop, else its pixels; False when it holds neither."""
        files, rgb = mime_content(md, image)
        if files:
            self.open_images(files)
        elif rgb is not None:
            try:
                self.run_image(source, imaging.image_from_array(rgb).image)
            except Exception as e:  # noqa: BLE001 - shown, never only printed
                self.show_error(f"Could not open the {source}", describe_error(e, source))
        return bool(files) or rgb is not None

    def dragEnterEvent(self, event) -> None:
        md = event.mimeData()
        if md.hasUrls() and any(u.isLocalFile() for u in md.urls()) or md.hasImage():
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event) -> None:
        if self.open_mime(event.mimeData(), "dropped image"):
            event.acceptProposedAction()

"""Every dialog the window shows (tests replace the :class:`Dialogs` object), and QImage <-> numpy helpers."""

from __future__ import annotations

import os

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QInputDialog,
    QLabel,
    QMessageBox,
    QProgressDialog,
    QSpinBox,
    QWidget,
)

from vitviz.model.sources import catalog  # plain data: no torch at start-up

IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.bmp *.tif *.tiff *.webp *.gif);;All files (*)"
CHECKPOINT_FILTER = "Checkpoints (*.safetensors *.pth *.pt *.bin *.npz *.ckpt);;All files (*)"
SESSION_FILTER = "vitviz sessions (*.vitviz.json);;All files (*)"
VECTOR_FILTER = "Vectors (*.npy);;All files (*)"
OPEN_FILTER = ("vitviz sessions and figures (*.vitviz.json *.json *.png *.svg *.pdf *.gif *.apng *.mp4);;vitviz "
               "sessions (*.vitviz.json);;Figures exported by vitviz (*.png *.svg *.pdf *.gif *.apng *.mp4);;"
               "All files (*)")
MAX_MESSAGE_LINES = 12
MAX_MESSAGE_CHARS = 2000
MAX_DETAIL_CHARS = 200_000


def summarised(message: str, lines: int = MAX_MESSAGE_LINES, chars: int = MAX_MESSAGE_CHARS) -> tuple[str, str]:
    """A message a dialog can show: at most ``lines`` lines and about ``chars`` characters (the first ones, then how
    many more lines there are), and the whole message (its first :data:`MAX_DETAIL_CHARS` characters) for the
    dialog's details ("" when nothing was cut)."""
    parts = message.splitlines()
    if len(parts) <= lines and len(message) <= chars:
        return message, ""
    shown: list[str] = []
    used = 0
    for line in parts[:lines - 1]:
        if used + len(line) > chars:
            line = line[:max(0, chars - used)] + "…"
            shown.append(line)
            break
        shown.append(line)
        used += len(line) + 1
    hidden = len(parts) - len(shown)
    tail = f"… and {hidden:,} more line{'s' if hidden != 1 else ''} (Show Details…)" if hidden else \
        "… (the whole message: Show Details…)"
    whole = message if len(message) <= MAX_DETAIL_CHARS else message[:MAX_DETAIL_CHARS] + "\n…"
    return "\n".join(shown + [tail]), whole


class Dialogs:
    """Every dialog the window shows. Tests replace methods (or patch QMessageBox / QFileDialog)."""

    def __init__(self, parent: QWidget):
        self.parent = parent

    def error(self, title: str, message: str, detail: str = "") -> None:
        """A modal error box; a long message is cut to its first lines (:func:`summarised`), the whole of it in the
        box's details."""
        shown, whole = summarised(message)
        detail = "\n\n".join(filter(None, [whole, detail]))
        box = QMessageBox(QMessageBox.Icon.Critical, title, shown, QMessageBox.StandardButton.Ok, self.parent)
        if detail:
            box.setDetailedText(detail)
        box.exec()

    def info(self, title: str, html: str) -> None:
        box = QMessageBox(QMessageBox.Icon.NoIcon, title, html, QMessageBox.StandardButton.Ok, self.parent)
        box.setTextFormat(Qt.TextFormat.RichText)
        box.exec()

    def confirm(self, title: str, text: str) -> bool:
        r = QMessageBox.question(self.parent, title, text,
                                 QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                 QMessageBox.StandardButton.No)
        return r == QMessageBox.StandardButton.Yes

    def confirm_overwrite(self, path: str) -> bool:
        return self.confirm("Replace file?", f"{path} already exists.\n\nReplace it?")

    def open_images(self, folder: str) -> list[str]:
        files, _ = QFileDialog.getOpenFileNames(self.parent, "Open images", folder, IMAGE_FILTER)
        return list(files)

    def open_checkpoint_file(self, folder: str) -> str | None:
        f, _ = QFileDialog.getOpenFileName(self.parent, "Open checkpoint", folder, CHECKPOINT_FILTER)
        return f or None

    def open_checkpoint_folder(self, folder: str) -> str | None:
        d = QFileDialog.getExistingDirectory(self.parent, "Open checkpoint folder", folder)
        return d or None

    def ask_model_name(self) -> str | None:
        """A model name typed by the user (curated key, timm or Hugging Face id, torchvision name), or None."""
        text, ok = QInputDialog.getText(
            self.parent, "Open model by name",
            "A curated name (dino-s8), a timm name (timm/vit_small_patch14_reg4_dinov2.lvd142m),\n"
            "a Hugging Face id (facebook/dinov2-small) or a torchvision name (vit_b_16).\n"
            "It is downloaded once into the Hugging Face (or torch) cache.")
        return text.strip() if ok and text.strip() else None

    def open_reference_image(self, folder: str) -> str | None:
        """An image file whose embedding (or a patch of it) becomes the similarity target, or None."""
        f, _ = QFileDialog.getOpenFileName(self.parent, "Similar to image", folder, IMAGE_FILTER)
        return f or None

    def open_vector(self, folder: str) -> str | None:
        """A stored vector (``.npy``, one vector in the model's embedding space) for a similarity target, or None."""
        f, _ = QFileDialog.getOpenFileName(self.parent, "Similar to a vector", folder, VECTOR_FILTER)
        return f or None

    def ask_patch(self, name: str, grid: tuple[int, int] | None) -> tuple[int, int] | None:
        """The patch ``(row, col)`` of the reference image ``name`` whose token becomes the similarity target, or
        None. ``grid``: the patch grid the image will likely have (the shown image's), for the ranges offered."""
        gh, gw = grid or (1024, 1024)
        dlg = QDialog(self.parent)
        dlg.setWindowTitle("Similar to a patch")
        form = QFormLayout(dlg)
        form.addRow(QLabel(f"Which patch of {name}? (rows 0..{gh - 1}, columns 0..{gw - 1})"))
        row, col = QSpinBox(dlg), QSpinBox(dlg)
        row.setRange(0, max(0, gh - 1))
        col.setRange(0, max(0, gw - 1))
        row.setValue(gh // 2)
        col.setValue(gw // 2)
        form.addRow("Row", row)
        form.addRow("Column", col)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel,
                                   parent=dlg)
        buttons.accepted.connect(dlg.accept)
        buttons.rejected.connect(dlg.reject)
        form.addRow(buttons)
        if not dlg.exec():
            return None
        return int(row.value()), int(col.value())

    def save_session(self, suggested: str) -> str | None:
        """Where to save a session (``.vitviz.json``), or None."""
        f, _ = QFileDialog.getSaveFileName(self.parent, "Save session", suggested, SESSION_FILTER,
                                           options=QFileDialog.Option.DontConfirmOverwrite)
        return f or None

    def open_session(self, folder: str) -> str | None:
        """A session file or an exported figure to open, or None."""
        f, _ = QFileDialog.getOpenFileName(self.parent, "Open session", folder, OPEN_FILTER)
        return f or None

    def save_export(self, title: str, suggested: str, filters: dict[str, str],
                    scales: tuple[tuple[str, str], ...], scale: str) -> tuple[str, str] | None:
        """Ask where to export and at what size: a save dialog whose file types are ``filters`` (extension ->
        filter text; the chosen type adds its extension when the name has none of them) with a "Size" choice among
        ``scales`` ((value, text) pairs; ``scale`` preselected). Returns ``(path, scale value)`` or None."""
        dlg = QFileDialog(self.parent, title, suggested)
        dlg.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dlg.setOption(QFileDialog.Option.DontUseNativeDialog, True)  # a native dialog takes no extra widget
        dlg.setOption(QFileDialog.Option.DontConfirmOverwrite, True)  # the window asks, after the size is known
        names = list(filters.values())
        dlg.setNameFilters(names)
        ext = os.path.splitext(suggested)[1].lower()
        if ext in filters:
            dlg.selectNameFilter(filters[ext])
        combo = QComboBox(dlg)
        for value, text in scales:
            combo.addItem(text, value)
        combo.setCurrentIndex(max(0, combo.findData(scale)))
        combo.setToolTip("Pixels of a PNG, GIF, APNG or MP4 (SVG and PDF are vectors: text and colour bar stay "
                         "sharp, the image is embedded at its own resolution)")
        layout = dlg.layout()
        if layout is not None and hasattr(layout, "rowCount"):
            row = layout.rowCount()
            layout.addWidget(QLabel("Size:", dlg), row, 0)
            layout.addWidget(combo, row, 1)
        if not dlg.exec():
            return None
        files = dlg.selectedFiles()
        if not files:
            return None
        path = files[0]
        if os.path.splitext(path)[1].lower() not in filters:
            chosen = dlg.selectedNameFilter()
            ext = next((e for e, f in filters.items() if f == chosen), next(iter(filters)))
            path += ext
        return path, str(combo.currentData())


def write_asking(dialogs: Dialogs, path: str, write) -> object:
    """``write(overwrite)``: an existing file is replaced only when the user says so (None when not)."""
    try:
        return write(False)
    except FileExistsError:
        if not dialogs.confirm_overwrite(str(path)):
            return None
        return write(True)


def confirm_download(dialogs: Dialogs, ref: str) -> bool:
    """Ask before downloading a named model that is not cached (True for anything else)."""
    if ref.startswith("hub:"):
        repo = ref[4:]
        if catalog.hub_is_cached(repo):
            return True
        m = catalog.HUB_BY_REPO.get(repo)
        what = f"{m.title}: {m.what}\n\nDownload {m.size_mb:.0f} MB" if m is not None else f"Download {repo}"
        return dialogs.confirm("Download model?", f"{what} from\nhttps://huggingface.co/{repo}?\n\nIt is kept in "
                                                  f"{catalog.hf_cache_dir()} and opens offline afterwards.")
    if not ref.startswith("pretrained:"):
        return True
    from vitviz.model.sources.torch_hub import PRETRAINED, is_cached  # imports torch: only for a torchvision name

    name = ref.split(":", 1)[1]
    info = PRETRAINED.get(name)
    if info is None or is_cached(name):
        return True
    return dialogs.confirm("Download weights?", f"{name}: {getattr(info, 'description', '')}\n\nDownload "
                                                f"{getattr(info, 'size_mb', 0):.0f} MB from\n{info.url}?")


class DownloadDialog:
    """The cancellable progress dialog of a model download (a :class:`QProgressDialog`, created on first use).

    :meth:`update` shows it (the first call) and moves the bar; :meth:`close` hides it; Cancel calls ``on_cancel``.
    A model that is already cached never reports progress, so it never shows the dialog.
    """

    def __init__(self, parent: QWidget, on_cancel):
        self.parent = parent
        self.on_cancel = on_cancel
        self.dialog: QProgressDialog | None = None

    def _make(self) -> QProgressDialog:
        d = QProgressDialog(self.parent)
        d.setWindowTitle("Downloading model")
        # not modal: a modal QProgressDialog runs the event loop inside setValue (re-entrant progress slots)
        d.setWindowModality(Qt.WindowModality.NonModal)
        d.setAutoClose(False)
        d.setAutoReset(False)
        d.setMinimumDuration(0)
        d.setMinimumWidth(460)
        d.setRange(0, 1000)
        d.canceled.connect(self._cancelled)
        return d

    def _cancelled(self) -> None:
        self.close()
        self.on_cancel()

    def is_visible(self) -> bool:
        return self.dialog is not None and self.dialog.isVisible()

    def update(self, name: str, done: int, total: int) -> None:
        """``done`` of ``total`` bytes of ``name`` (total 0: unknown, a busy bar)."""
        if self.dialog is None:
            self.dialog = self._make()
        d = self.dialog
        if total > 0:
            d.setRange(0, 1000)
            d.setValue(min(1000, int(1000 * done / total)))
            amount = f"{done / 1e6:.1f} of {total / 1e6:.1f} MB"
        else:
            d.setRange(0, 0)
            amount = f"{done / 1e6:.1f} MB"
        d.setLabelText(f"Downloading {name}\n{amount}\n\ninto {catalog.hf_cache_dir()}")
        if not d.isVisible():
            d.show()

    def close(self) -> None:
        if self.dialog is not None and self.dialog.isVisible():
            self.dialog.blockSignals(True)  # (hiding a QProgressDialog may emit canceled)
            self.dialog.reset()
            self.dialog.hide()
            self.dialog.blockSignals(False)


def mime_content(md, image: QImage | None = None) -> tuple[list[str], np.ndarray | None]:
    """What a paste or drop holds: existing local files (from URLs or a path as text), and/or pixels."""
    if md is None:
        return [], None
    files = [u.toLocalFile() for u in md.urls() if u.isLocalFile()] if md.hasUrls() else []
    if not files and md.hasText() and os.path.isfile(md.text().strip()):
        files = [md.text().strip()]
    files = [f for f in files if os.path.isfile(f)]
    rgb = None
    if md.hasImage():
        img = image if image is not None and not image.isNull() else QImage(md.imageData())
        rgb = None if img.isNull() else rgb_from_qimage(img)
    return files, rgb


def qimage_from_rgb(rgb: np.ndarray) -> QImage:
    rgb = np.ascontiguousarray(rgb[..., :3], dtype=np.uint8)
    h, w = rgb.shape[:2]
    return QImage(rgb.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()


def rgb_from_qimage(img: QImage) -> np.ndarray:
    img = img.convertToFormat(QImage.Format.Format_RGBA8888)
    w, h = img.width(), img.height()
    ptr = img.constBits()
    arr = np.frombuffer(ptr, dtype=np.uint8, count=img.bytesPerLine() * h).reshape(h, img.bytesPerLine())
    return arr[:, : 4 * w].reshape(h, w, 4)[..., :3].copy()

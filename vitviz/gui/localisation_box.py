"""The Faithfulness tab's localisation part: does each map find the object?

Ground truth for the image on screen comes from a mask folder chosen here (a mask named like the image:
:class:`vitviz.evaluate.ground_truth.MaskFolder`) or from a file beside the image named like it with ``_mask``
(``cat.jpg`` -> ``cat_mask.png``). The object's outline, in the model's input crop, can be drawn over the map
(:attr:`LocalisationBox.outlineChanged`, which the window connects to its canvas), and once the faithfulness table is
measured, each view's localisation scores (:func:`vitviz.evaluate.localisation.localisation_scores`: pixel accuracy,
mIoU, mAP, pointing game, energy pointing game) are computed from the table's own maps and shown beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from vitviz.evaluate.ground_truth import MaskFolder, mask_beside, read_mask_file

COLUMNS = (("pixel_accuracy", "Acc", "Pixel accuracy: pixels where the map above its mean agrees with the mask"),
           ("miou", "mIoU", "Mean of the object's and the background's IoU at the map's mean"),
           ("map", "mAP", "Mean of the average precision of the map for the object and of 1 - map for the background"),
           ("pointing_game", "PG", "Pointing game: 1 when the map's maximum lies on the object"),
           ("energy_pointing_game", "EPG", "Energy pointing game: the share of the map's mass on the object"))


class LocalisationBox(QWidget):
    """Mask folder, outline toggle and the localisation table.

    Signals:
        outlineChanged(mask): the object's mask in the model's input crop (bool ``[crop_h, crop_w]``) to outline
            over the map, or None (no mask, or the toggle is off).
    """

    outlineChanged = Signal(object)

    def __init__(self, choose_folder: Callable[[], str | None] | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self._choose = choose_folder or (lambda: QFileDialog.getExistingDirectory(self, "Mask folder") or None)
        self.folder: Path | None = None
        self._key: tuple | None = None
        self._mask: Any = None  # int [crop_h, crop_w] (1 object, 0 background, -1 ignored) of the image on screen
        self.scores: dict[str, Any] = {}  # view key -> LocalisationScores of the shown table's maps
        self._last: tuple = (None, None, None)  # the latest update_for's arguments (a new folder looks again)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 4, 0, 0)
        lay.setSpacing(3)
        row = QHBoxLayout()
        self.folder_button = QPushButton("Mask folder…")
        self.folder_button.setToolTip("A folder of masks named like the images (0 = background, other values = "
                                      "object); without one, a file beside the image named like it with _mask")
        self.outline_check = QCheckBox("Outline the object")
        self.outline_check.setChecked(True)
        self.outline_check.setToolTip("Draw the ground-truth mask's outline over the map")
        row.addWidget(self.folder_button)
        row.addWidget(self.outline_check)
        row.addStretch(1)
        lay.addLayout(row)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        self.table = QTableWidget(0, 1 + len(COLUMNS))
        self.table.setHorizontalHeaderLabels(["Map"] + [c[1] for c in COLUMNS])
        for i, c in enumerate(COLUMNS, 1):
            self.table.horizontalHeaderItem(i).setToolTip(c[2] + " (higher is better)")
            self.table.horizontalHeader().setSectionResizeMode(i, QHeaderView.ResizeMode.ResizeToContents)
        # the names get what the numbers leave (a narrow dock elides them; the tooltip has the whole name)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().setMinimumSectionSize(28)
        self.table.verticalHeader().setVisible(False)
        self.table.setWordWrap(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setVisible(False)
        lay.addWidget(self.table)
        self.folder_button.clicked.connect(self.choose_folder)
        self.outline_check.toggled.connect(lambda _on: self._emit())

    def choose_folder(self) -> None:
        folder = self._choose()
        if folder:
            self.folder = Path(folder)
            self._key = None  # look again
            self.update_for(*self._last)

    def update_for(self, result: Any, table: Any, names: Callable[[str, str], str] | None = None) -> None:
        """The image on screen (``result``) and the faithfulness table shown for it (None when there is none or it
        is another image's); ``names(key, title)`` gives a row's name."""
        self._last = (result, table, names)
        source = None if result is None else str(result.source)
        found = None
        if source is not None:
            found = MaskFolder(self.folder).find(Path(source).stem) if self.folder is not None else None
            found = found or mask_beside(source)
        key = (source, None if found is None else str(found), id(table))
        if key == self._key:
            return
        self._key = key
        self._mask, self.scores = None, {}
        if source is None:
            self.status.setText("")
        elif found is None:
            where = f"in {self.folder} or " if self.folder is not None else ""
            self.status.setText(f"No mask for {Path(source).name} {where}beside it ({Path(source).stem}_mask.png): "
                                "choose a mask folder to see how well each map finds the object.")
        else:
            from vitviz.evaluate.localisation import localisation_scores, mask_in_crop  # torch: once there is a mask

            try:
                gt = read_mask_file(found, tuple(result.geometry.image_size))
                self._mask = mask_in_crop(gt.object_mask(tuple(result.geometry.image_size)), result.geometry)
            except ValueError as e:
                self.status.setText(str(e))
            else:
                self.status.setText(f"Ground truth: {found.name}" + ("" if table is not None else
                                    " · press Run for each map's localisation scores"))
                for v in table.views if table is not None else []:
                    if v.saliency is not None:
                        self.scores[v.key] = localisation_scores(v.saliency, self._mask)
        self._fill(table, names or (lambda k, t: t or k))
        self._emit()

    def _emit(self) -> None:
        on = self.outline_check.isChecked() and self._mask is not None
        self.outlineChanged.emit(self._mask == 1 if on else None)

    def _fill(self, table: Any, names: Callable[[str, str], str]) -> None:
        rows = [v for v in (table.views if table is not None else []) if v.key in self.scores]
        self.table.setRowCount(len(rows))
        for i, v in enumerate(rows):
            name = QTableWidgetItem(names(v.key, v.title))
            name.setToolTip(names(v.key, v.title))
            self.table.setItem(i, 0, name)
            s = self.scores[v.key]
            for j, (m, _, _) in enumerate(COLUMNS, 1):
                x = s.get(m)
                item = QTableWidgetItem("—" if math.isnan(x) else f"{x:.2f}")
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                item.setToolTip(s.reasons.get(m, f"{m} = {x:.4f}"))
                self.table.setItem(i, j, item)
        self.table.setVisible(bool(rows))
        if rows:
            self.table.resizeRowsToContents()
            h = sum(self.table.rowHeight(i) for i in range(len(rows)))
            self.table.setFixedHeight(self.table.horizontalHeader().sizeHint().height() + h
                                      + 2 * self.table.frameWidth() + 2)

    # for tests
    def cell_text(self, row: int, col: int) -> str:
        item = self.table.item(row, col)
        return "" if item is None else item.text()

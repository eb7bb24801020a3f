"""The Faithfulness tab's AUC table: a row per map (its deletion and insertion AUC, the best starred, grey when no
better than random, a tooltip with the margin in standard deviations) and a row for the random rankings; every row in
view (its height follows the rows)."""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

from vitviz.gui.faithfulness_style import RANDOM_COLOR, swatch, view_color, view_name

BEST = "★"


class AucTable(QTableWidget):
    """The table of a :class:`~vitviz.evaluate.FaithfulnessTable` (:meth:`fill`); :attr:`row_keys` names each row's
    view (None: a row without a map to show)."""

    def __init__(self, parent=None):
        super().__init__(0, 3, parent)
        self.row_keys: list[str | None] = []
        self.setHorizontalHeaderLabels(["Map", "Deletion\nAUC ↓", "Insertion\nAUC ↑"])
        hh = self.horizontalHeader()
        hh.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        hh.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        hh.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.horizontalHeaderItem(1).setToolTip("Area under the deletion curve: lower is better")
        self.horizontalHeaderItem(2).setToolTip("Area under the insertion curve: higher is better")
        self.verticalHeader().setVisible(False)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setWordWrap(False)

    def fit(self, rows: int) -> None:
        """The table as tall as its header and ``rows`` rows: every row in view, no scroll bar."""
        vh = self.verticalHeader()
        h = sum(vh.sectionSize(i) for i in range(self.rowCount())) if self.rowCount() else 0
        h += max(0, rows - self.rowCount()) * vh.defaultSectionSize()
        hh = self.horizontalHeader().sizeHint().height()
        self.setFixedHeight(hh + h + 2 * self.frameWidth() + 2)

    def fill(self, t) -> None:
        """The rows of the table ``t`` (:class:`~vitviz.evaluate.FaithfulnessTable`)."""
        best_del, best_ins = t.best()
        rows = list(t.views)
        self.blockSignals(True)
        self.clearContents()
        self.setRowCount(len(rows) + 1)
        self.row_keys = []
        bold = QFont(self.font())
        bold.setBold(True)
        rd, ri = t.random_deletion, t.random_insertion
        for i, v in enumerate(rows):
            name = QTableWidgetItem(view_name(v.key, v.title))
            name.setIcon(swatch(view_color(v.key, i)))
            name.setToolTip(f"{v.title}: click to show this map" if v.unavailable is None
                            else f"{v.title}: {v.unavailable}")
            self.setItem(i, 0, name)
            if v.unavailable is not None or v.deletion is None:
                for col in (1, 2):
                    item = QTableWidgetItem("—")
                    item.setToolTip(v.unavailable or "no map")
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                    self.setItem(i, col, item)
                self.row_keys.append(None)
                continue
            self.row_keys.append(v.key)
            for col, auc, best, rand, lower in ((1, v.deletion_auc, best_del, rd, True),
                                                (2, v.insertion_auc, best_ins, ri, False)):
                is_best = v.key == best
                item = QTableWidgetItem(f"{auc:.3f}" + (f" {BEST}" if is_best else ""))
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if is_best:
                    item.setFont(bold)
                gap = (rand.auc_mean - auc) if lower else (auc - rand.auc_mean)
                sds = gap / rand.auc_std if rand.auc_std > 0 else math.copysign(math.inf, gap) if gap else 0.0
                verdict = ("better than" if gap > 0 else "no better than")
                item.setToolTip(f"{'deletion' if lower else 'insertion'} AUC {auc:.4f}"
                                f"{' (best of the maps)' if is_best else ''}: {verdict} random rankings "
                                f"({rand.auc_mean:.4f} ± {rand.auc_std:.4f}; {sds:+.1f} sd)")
                if gap <= 0:
                    item.setForeground(QBrush(QColor(150, 150, 150)))
                item.setData(Qt.ItemDataRole.UserRole, is_best)
                self.setItem(i, col, item)
        n = len(rows)
        name = QTableWidgetItem(f"Random ({rd.seeds})")
        name.setIcon(swatch(RANDOM_COLOR, dashed=True))
        name.setToolTip(f"The same curves for {rd.seeds} random rankings of the patches (mean ± standard "
                        "deviation): the floor any map must beat")
        self.setItem(n, 0, name)
        for col, rb in ((1, rd), (2, ri)):
            item = QTableWidgetItem(f"{rb.auc_mean:.3f}\n± {rb.auc_std:.3f}")  # two lines: a narrow dock
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            item.setToolTip(f"mean ± standard deviation over {rb.seeds} random rankings")
            self.setItem(n, col, item)
        self.row_keys.append(None)
        self.resizeRowsToContents()
        self.fit(self.rowCount())
        self.blockSignals(False)

    def select_row_of(self, shows) -> None:
        """Select the first row whose view ``shows(key)`` says the canvas shows (none when ``shows`` is None)."""
        self.blockSignals(True)
        self.clearSelection()
        if shows is not None:
            for i, k in enumerate(self.row_keys):
                if k is not None and shows(k):
                    self.selectRow(i)
                    break
        self.blockSignals(False)

    def cell_text(self, row: int, col: int) -> str:
        item = self.item(row, col)
        return "" if item is None else item.text()

"""How the Faithfulness tab names and colours its maps: one name and one colour per view, shared by the AUC table
(:mod:`vitviz.gui.faithfulness_table`), the curves (:mod:`vitviz.gui.faithfulness_curves`) and the localisation box."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPen, QPixmap

from vitviz import views
from vitviz.views.presets import CLS_LAST, FAITHFULNESS_VIEWS

VIEWS = FAITHFULNESS_VIEWS  # = vitviz.evaluate.DEFAULT_VIEWS (importing vitviz.evaluate imports torch)
PRESET_NAMES = {CLS_LAST: "[CLS], last layer"}
"""Short names of the presets among :data:`VIEWS` (a view's is its short title)."""
VIEW_COLORS = dict(zip(VIEWS, [(255, 170, 60), (90, 170, 255), (110, 220, 120), (240, 100, 200), (255, 230, 90),
                               (120, 230, 230)]))
"""The colours of the default views, in :data:`VIEWS`' order; others take :data:`OTHER_COLORS`."""
OTHER_COLORS = [(250, 120, 110), (190, 150, 255), (200, 200, 120), (150, 200, 255)]
RANDOM_COLOR = (175, 175, 175)


def view_name(key: str, title: str = "") -> str:
    """A row's name in the plot's legend and the table: a default view's short title, else ``title``."""
    if key in PRESET_NAMES:
        return PRESET_NAMES[key]
    if key in VIEWS:
        v = views.get(key)
        return v.short_title or v.title
    return title or key


def view_color(key: str, index: int) -> tuple[int, int, int]:
    return VIEW_COLORS.get(key, OTHER_COLORS[index % len(OTHER_COLORS)])


def swatch(rgb: tuple[int, int, int], dashed: bool = False) -> QIcon:
    """A short line of a curve's colour (dashed: the random rankings') for a table row's name."""
    pm = QPixmap(14, 14)
    pm.fill(QColor(0, 0, 0, 0))
    p = QPainter(pm)
    pen = QPen(QColor(*rgb), 3)
    if dashed:
        pen.setStyle(Qt.PenStyle.DashLine)
    p.setPen(pen)
    p.drawLine(1, 7, 13, 7)
    p.end()
    return QIcon(pm)

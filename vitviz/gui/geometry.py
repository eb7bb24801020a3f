"""The window's size and its docks' sizes, fitted to the screen the window opens on.

Rules (issue 12, point 6):

* First open: 90 % of the screen's available area (``QScreen.availableGeometry``: without task bars and docks),
  capped at 1600 x 1000, centred on that screen.
* A remembered geometry is restored, then clamped so that the window lies inside the available area (a screen that
  got smaller, or a monitor that is gone, never leaves the window or its status bar off screen).
* The docks together take at most half of the window's width, so the canvas (the map and its colour bar) gets at
  least half; the controls dock scrolls vertically instead of forcing the window taller than a 800 px screen.

Everything here takes the available rectangle as an argument (tests pass a 1280 x 800 one on the offscreen
platform, whose only screen is 800 x 800).
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QByteArray, QPoint, QRect, QSize, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDockWidget, QFrame, QMainWindow, QScrollArea, QStyle, QWidget

Docks = Mapping[str, QDockWidget]  # the main window's docks by name: controls, predictions, heads, plots

FRACTION = 0.9
MAX_SIZE = QSize(1600, 1000)
LEFT_WIDTH = 290  # controls and predictions, as wide as the controls' content allows
RIGHT_WIDTH = 400  # heads and plots, at most
RIGHT_MIN = 220
CONTROLS_SHARE = 0.72  # of the left column's height (the rest: predictions)
HEADS_SHARE = 0.44  # of the right column's height (the rest: plots)


def available_geometry(win: QWidget) -> QRect:
    """The available area of the screen ``win`` is on (or opens on), else of the primary screen."""
    screen = win.screen() or QGuiApplication.primaryScreen()
    return screen.availableGeometry() if screen is not None else QRect(0, 0, 1280, 800)


def initial_size(available: QRect, fraction: float = FRACTION, cap: QSize = MAX_SIZE) -> QSize:
    """``fraction`` of the available area, at most ``cap``."""
    return QSize(min(cap.width(), int(available.width() * fraction)),
                 min(cap.height(), int(available.height() * fraction)))


def clamp_rect(rect: QRect, available: QRect) -> QRect:
    """``rect`` shrunk to fit in ``available`` and moved (the least) so that it lies inside it."""
    w, h = min(rect.width(), available.width()), min(rect.height(), available.height())
    x = min(max(rect.x(), available.left()), available.left() + available.width() - w)
    y = min(max(rect.y(), available.top()), available.top() + available.height() - h)
    return QRect(x, y, w, h)


def _frame_margins(win: QWidget) -> tuple[int, int, int, int]:
    """Left, top, right, bottom of the window frame (zero before the window manager has framed the window)."""
    f, g = win.frameGeometry(), win.geometry()
    return (max(0, g.left() - f.left()), max(0, g.top() - f.top()),
            max(0, f.right() - g.right()), max(0, f.bottom() - g.bottom()))


def clamp_window(win: QWidget, available: QRect) -> bool:
    """Move/shrink ``win`` (frame included, when known) inside ``available``; True when it changed."""
    if win.isMaximized() or win.isFullScreen():
        return False
    left, top, right, bottom = _frame_margins(win)
    inner = available.adjusted(left, top, -right, -bottom)
    g = win.geometry()
    c = clamp_rect(g, inner)
    if c == g:
        return False
    win.setGeometry(c)
    return True


def make_scrollable(docks: Docks, names: tuple[str, ...] = ("controls",)) -> None:
    """Put the named docks' panels in vertical scroll areas (once), so that a short screen scrolls them instead of
    pushing the window's minimum height past the screen. The panels stay the window's ``controls`` etc.; only the
    dock's direct child changes."""
    for name in names:
        dock = docks.get(name)
        if dock is None or isinstance(dock.widget(), QScrollArea):
            continue
        panel = dock.widget()
        area = QScrollArea()
        area.setObjectName(f"scroll_{name}")
        area.setFrameShape(QFrame.Shape.NoFrame)
        area.setWidgetResizable(True)
        area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        area.setWidget(panel)
        bar = area.verticalScrollBar().sizeHint().width()
        area.setMinimumWidth(panel.minimumSizeHint().width() + bar)
        dock.setWidget(area)


def dock_widths(width: int, left_min: int, separator: int = 6, reserve: int = 0) -> tuple[int, int]:
    """Widths of the left and right dock columns for a window ``width`` px wide: today's 290/400 on a wide
    window; on a narrow one the right column gives way first so that both columns take at most half (less
    ``reserve``: the canvas's colour bar, so that the canvas itself keeps half the width)."""
    budget = width // 2 - 2 * separator - reserve
    left = max(left_min, min(LEFT_WIDTH, budget // 2))
    right = max(RIGHT_MIN, min(RIGHT_WIDTH, budget - left))
    return left, right


def fit_docks(win: QMainWindow, docks: Docks, size: QSize | None = None, reserve: int = 0) -> None:
    """Size the dock columns of ``win`` for its size (or ``size``, before the window is shown); ``reserve``: px of
    the centre that are not the canvas (its colour bar), see :func:`dock_widths`."""
    d = docks
    size = size or win.size()
    sep = win.style().pixelMetric(QStyle.PixelMetric.PM_DockWidgetSeparatorExtent, None, win)
    left_min = max(d["controls"].minimumSizeHint().width(), d["predictions"].minimumSizeHint().width())
    left, right = dock_widths(size.width(), left_min, sep, reserve)
    column = max(200, size.height() - 120)  # without menu bar, tool bar and status bar
    win.resizeDocks([d["controls"], d["predictions"]],
                    [int(column * CONTROLS_SHARE), column - int(column * CONTROLS_SHARE)], Qt.Orientation.Vertical)
    win.resizeDocks([d["heads"], d["plots"]], [int(column * HEADS_SHARE), column - int(column * HEADS_SHARE)],
                    Qt.Orientation.Vertical)
    win.resizeDocks([d["controls"], d["heads"]], [left, right], Qt.Orientation.Horizontal)


def place_window(win: QMainWindow, docks: Docks, geometry: QByteArray | None = None,
                 state: QByteArray | None = None, *, available: QRect | None = None) -> None:
    """Restore (and clamp) or size the window for its screen, then restore or fit the docks.

    Args:
        win: the main window; ``docks``: its docks by name (:func:`vitviz.gui.menus.add_docks`).
        geometry, state: ``saveGeometry()`` / ``saveState()`` remembered from the last run, or None.
        available: the available screen area (default: that of the window's screen).
    """
    avail = available if available is not None else available_geometry(win)
    make_scrollable(docks)
    clamped = False
    if geometry is not None and win.restoreGeometry(geometry):
        clamped = clamp_window(win, avail)
    else:
        size = initial_size(avail)
        win.resize(size)
        win.move(avail.center() - QPoint(size.width() // 2, size.height() // 2))
    if state is None or not win.restoreState(state) or clamped:
        fit_docks(win, docks)


def fit_to(win: QMainWindow, docks: Docks, available: QRect) -> None:
    """Resize ``win`` to fill ``available`` (its frame included, when known) and fit its ``docks``."""
    left, top, right, bottom = _frame_margins(win)
    win.setGeometry(available.adjusted(left, top, -right, -bottom))
    fit_docks(win, docks)

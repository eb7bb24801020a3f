"""The heads dock: thumbnails of every head of the current layer, or the all-layers x all-heads grid.

All tiles on screen share one colour scale (the robust range of every tile shown), shown by a small colour bar under
them, so heads (and layers, in the grid) compare by eye: the :class:`~vitviz.document.panel.HeadsGrid` of
:func:`~vitviz.document.panel.heads_of`, which the heads figure draws too. Tiles are never smaller than
:data:`~vitviz.gui.mosaic.MIN_TILE` px: the grid scrolls instead, and keeps the current layer (outlined) in view.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QPoint, QTimer, Signal
from PySide6.QtWidgets import QDockWidget, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from vitviz.document.appearance import reads_pool_row
from vitviz.document.panel import HEADS_QUANTITY, heads_of
from vitviz.gui.mosaic import MIN_TILE, Mosaic, MosaicScroll, ScaleBar, colorize_shared, upscale


class HeadsPanel(QWidget):
    """Thumbnails of every head of the current layer, or the all-layers x all-heads grid.

    Signals:
        headSelected(layer, head)
    """

    headSelected = Signal(int, int)

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.setSpacing(2)
        top = QHBoxLayout()
        self.title = QLabel("Heads")
        self.title.setWordWrap(True)  # a long title must not widen the dock
        self.grid_toggle = QToolButton()
        self.grid_toggle.setText("All layers")
        self.grid_toggle.setCheckable(True)
        self.grid_toggle.setToolTip("Show every layer x every head (click a tile to jump there)")
        self.fit_toggle = QToolButton()
        self.fit_toggle.setText("Fit")
        self.fit_toggle.setCheckable(True)
        self.fit_toggle.setToolTip("Fit every tile in the panel (they may get small); off: tiles of at least "
                                   f"{MIN_TILE} px, scrolled")
        self.full_toggle = QToolButton()
        self.full_toggle.setText("Full")
        self.full_toggle.setCheckable(True)
        self.full_toggle.setToolTip("Every layer x every head over the whole window, tiles fitted (as BertViz's model "
                                    "view); again: back into the dock")
        top.addWidget(self.title, 1)
        top.addWidget(self.fit_toggle)
        top.addWidget(self.grid_toggle)
        top.addWidget(self.full_toggle)
        lay.addLayout(top)
        self.mosaic = Mosaic()
        self.mosaic.set_min_tile(MIN_TILE)
        self.scroll = MosaicScroll(self.mosaic)
        lay.addWidget(self.scroll, 1)
        self.scale_bar = ScaleBar()
        lay.addWidget(self.scale_bar)
        self.scale = None  # the colour scale every tile on screen shares
        self.mosaic.tileClicked.connect(self._on_tile)
        self.fit_toggle.toggled.connect(lambda on: self.mosaic.set_min_tile(0 if on else MIN_TILE))
        self.grid_toggle.toggled.connect(lambda _: self.refresh(self._session) if self._session else None)
        self.full_toggle.toggled.connect(self._full_window)
        self._session = None
        self._layer = 0
        self._key = None
        self._marked = None
        self.notes: list[str] = []  # the text on each tile, row-major (a head's prefix-token share)

    @property
    def all_layers(self) -> bool:
        return self.grid_toggle.isChecked()

    def _cols(self, n: int) -> int:
        return n if n <= 4 else max(1, int(math.ceil(math.sqrt(n))))

    def refresh(self, session, force: bool = False) -> None:
        self._session = session
        r = session.result
        if r is None:
            return
        o = session.options
        self._layer = max(0, min(session.view.attention_layer(o), r.num_layers - 1))
        q = session.thumb_query()
        key = (id(r), self.all_layers, reads_pool_row(r, session.view), self._layer if not self.all_layers else None, q,
               o.cmap, o.percentile, o.scale_excludes_artefacts)
        if key != self._key or force:
            self._key = key
            self._marked = None
            gh, gw = r.grid
            factor = max(1, math.ceil(MIN_TILE / max(gh, gw)))  # whole screen pixels per patch at the least size
            # the heads figure's grid: the robust percentile of the options, artefact patches left out of the levels
            g = heads_of(session, all_layers=self.all_layers)
            note = " (artefact tokens, grey, left out of it)" if g.excludes_artefacts else ""
            L, H = g.maps.shape[:2]
            self.scale = g.scale
            self.notes = g.prefix_notes(short=True)  # (tiles are small: "97% [CLS]")
            tiles = upscale(colorize_shared(g.tiles, self.scale, g.excluded), factor)
            if self.all_layers:
                self.mosaic.set_tiles(tiles, L, H, gap=max(2, (gh * factor) // 10),
                                      labels=g.prefix_notes(short=True))
                self.mosaic.set_axes([str(i) for i in range(L)], [str(h) for h in range(H)], "layer", "head")
                self.title.setText(f"All layers x heads · attention from {g.query}")
            else:
                cols = self._cols(H)
                self.mosaic.set_tiles(tiles, int(math.ceil(H / cols)), cols, gap=max(2, (gh * factor) // 10),
                                      labels=[f"h{h}" + (f" · {n}" if n else "")
                                              for h, n in enumerate(g.prefix_notes(short=True))])
                self.mosaic.set_axes(None, None)
                self.title.setText("Pooling head's heads · attention from its query (no [CLS] token)"
                                   if g.pool_row else f"Layer {g.layer} heads · attention from {g.query}")
            self.scale_bar.set_scale(self.scale, HEADS_QUANTITY, note)
        self._update_highlight(session)

    def _full_window(self, on: bool) -> None:
        """The all-layers grid over the whole window (the heads dock floated to the window's geometry, every tile
        fitted), or back into its dock."""
        dock = self.parentWidget()
        while dock is not None and not isinstance(dock, QDockWidget):
            dock = dock.parentWidget()
        if dock is None:
            return
        if on:
            self.grid_toggle.setChecked(True)
            self.fit_toggle.setChecked(True)
            area = self.window().geometry() if not dock.isFloating() else dock.geometry()
            dock.setFloating(True)
            dock.setGeometry(area)
        else:
            dock.setFloating(False)
            self.fit_toggle.setChecked(False)

    def _update_highlight(self, session) -> None:
        o = session.options
        if self.all_layers:
            self.mosaic.set_row_marker(self._layer)
            mark = (self._layer, o.head if isinstance(o.head, int) else None)
            if mark != self._marked:  # follow the current layer; leave the user's scrolling alone otherwise
                self._marked = mark
                QTimer.singleShot(0, lambda: self.scroll.ensure_tile_visible(*mark))
        else:
            self.mosaic.set_row_marker(None)
            self._marked = None
        if not isinstance(o.head, int) or "head" not in session.view.reads:
            self.mosaic.set_highlight(None)
            return
        if self.all_layers:
            self.mosaic.set_highlight(self._layer, o.head)
        else:
            self.mosaic.set_highlight(*divmod(o.head, self.mosaic.cols))

    def tile_center(self, layer: int, head: int) -> QPoint:
        """Position of a tile in this panel's coordinates (for tests)."""
        if self.all_layers:
            p = self.mosaic.tile_center(layer, head)
        else:
            p = self.mosaic.tile_center(*divmod(head, self.mosaic.cols))
        return self.mosaic.mapTo(self, p)

    def _on_tile(self, row: int, col: int) -> None:
        if self._session is None or self._session.result is None:
            return
        r = self._session.result
        if self.all_layers:
            layer, head = row, col
        else:
            layer, head = self._layer, row * self.mosaic.cols + col
        if 0 <= head < r.num_heads and 0 <= layer < r.num_layers:
            self.headSelected.emit(layer, head)

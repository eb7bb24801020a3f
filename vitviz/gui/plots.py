"""The plots tab: mean attention distance (:mod:`vitviz.gui.distance_plot`), position-embedding similarity,
patch-embedding filters, entropy with the logit lens and head knock-out (:mod:`vitviz.gui.mechanistic_panel`), and
faithfulness (:mod:`vitviz.gui.faithfulness`); the last two are built when first opened (:mod:`vitviz.gui.tab_pages`).

Every plot says what it shows: a title (these are statistics of *this image*, not the paper's dataset averages), axes
from 0 for non-negative quantities, a legend or a colour bar. The tile grids keep their tiles at least
:data:`~vitviz.gui.mosaic.MIN_TILE` px and scroll (the position-embedding grid can also be fitted to the panel).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QGraphicsItem,
    QLabel,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from vitviz.document.appearance import precision_text
from vitviz.gui.canvas import highlight_rect
from vitviz.gui.distance_plot import DistancePage
from vitviz.gui.mosaic import (
    BACKGROUND,
    MIN_TILE,
    Mosaic,
    MosaicScroll,
    ScaleBar,
    colorize_shared,
    shared_scale,
    upscale,
)
from vitviz.gui.tab_pages import LazyPage, titled_page

if TYPE_CHECKING:
    from vitviz.gui.faithfulness import FaithfulnessPanel
    from vitviz.gui.mechanistic_panel import MechanisticPanel

FILTER_COMPONENTS = 28
FILTER_TILE = 64  # px: room for the "PC12 3.4 %" label on each filter


POS_TITLES = {"table": "Position embeddings: cosine similarity of each patch with every other",
              "rope": "RoPE kernel (no position table): the similarity the rotation alone gives each pair of patches, "
                      "mean of heads"}

class PlotsPanel(QTabWidget):
    """Mean attention distance, position-embedding similarity, patch-embedding filters, attention entropy.

    The Faithfulness and "Lens · knock-out" pages are built when first shown or asked for (:attr:`faithfulness`,
    :attr:`mechanistic`), with the controller given to :meth:`attach` and the session last refreshed.

    Signals:
        layerHeadSelected(layer, head): a point of the distance plot, a cell of the entropy map or of the knock-out
            grid was clicked.
        patchSelected(index): a tile of the position-embedding grid was clicked.
        viewRequested(view, changes): the Faithfulness table asks for a view (:class:`FaithfulnessPanel`).
        outlineChanged(outline): the ground-truth outline of the Faithfulness tab's localisation box changed.
    """

    layerHeadSelected = Signal(int, int)
    patchSelected = Signal(int)
    viewRequested = Signal(str, dict)
    outlineChanged = Signal(object)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setDocumentMode(True)
        self.setUsesScrollButtons(True)  # tab names whole ("Distan..." reads as nothing); a narrow dock scrolls them
        self.setElideMode(Qt.TextElideMode.ElideNone)
        self.distance = DistancePage()  # mean attention distance (vitviz.gui.distance_plot)
        self.distance.layerHeadSelected.connect(self.layerHeadSelected)
        self.addTab(self.distance, "Distance")
        self.setTabToolTip(0, "Mean attention distance per layer and head for this image, in input pixels (the ViT "
                              "paper's Fig. 7 right averages over a dataset); click a point")
        # position embeddings
        self.pos_mosaic = Mosaic()
        self.pos_mosaic.set_min_tile(MIN_TILE)
        self.pos_mosaic.tileClicked.connect(self._on_pos_tile)
        self.pos_scroll = MosaicScroll(self.pos_mosaic)
        self.pos_bar = ScaleBar()
        self.pos_fit = QToolButton()
        self.pos_fit.setText("Fit")
        self.pos_fit.setCheckable(True)
        self.pos_fit.setToolTip("Fit the whole grid in the panel (tiles may get small); off: tiles of at least "
                                f"{MIN_TILE} px, scrolled")
        self.pos_fit.toggled.connect(lambda on: self.pos_mosaic.set_min_tile(0 if on else MIN_TILE))
        self.pos_title = QLabel(POS_TITLES["table"])
        pos_body = QWidget()
        pl = QVBoxLayout(pos_body)
        pl.setContentsMargins(0, 0, 0, 0)
        pl.setSpacing(2)
        pl.addWidget(self.pos_scroll, 1)
        pl.addWidget(self.pos_bar)
        self.addTab(titled_page(self.pos_title, pos_body, self.pos_fit), "Pos. embed")
        self.setTabToolTip(1, "Cosine similarity of position embeddings (Fig. 7 centre); click a tile to select the "
                              "patch")
        # filters
        self.filter_mosaic = Mosaic()
        self.filter_mosaic.set_min_tile(FILTER_TILE)
        self.filter_scroll = MosaicScroll(self.filter_mosaic)
        self.filter_title = QLabel("Patch-embedding filters: principal components")
        self.filter_variance: np.ndarray | None = None  # share of variance per component, once per model
        self._filter_md = None  # the ModelData the filter tiles are from
        self._filter_tiles: list[np.ndarray] = []
        self._filter_labels: list[str] = []
        self._filter_gap = 2
        self.filter_scroll.resized.connect(self._layout_filters)
        self.filter_page = titled_page(self.filter_title, self.filter_scroll)
        self.addTab(self.filter_page, "Filters")
        self.setTabToolTip(2, "Principal components of the patch-embedding filters (Fig. 7 left), with the share of "
                              "the filters' variance each explains")
        # entropy
        self.ent_widget = pg.PlotWidget(background=BACKGROUND, enableMenu=False)
        self.ent_plot = self.ent_widget.getPlotItem()
        self.ent_title = QLabel("Mean attention entropy per layer and head · this image")
        self.ent_plot.setMouseEnabled(False, False)
        self.ent_plot.hideButtons()
        self.ent_plot.invertY(True)
        self.ent_plot.setLabel("bottom", "head")
        self.ent_plot.setLabel("left", "layer")
        self.ent_item = pg.ImageItem(axisOrder="row-major")
        self.ent_item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.ent_plot.addItem(self.ent_item)
        self.ent_bar = pg.ColorBarItem(values=(0, 1), colorMap=pg.colormap.get("viridis"), interactive=False,
                                       width=12, label="entropy (nats)")
        self.ent_bar.setImageItem(self.ent_item, insert_in=self.ent_plot)
        self.ent_current = highlight_rect(2.0)
        self.ent_plot.addItem(self.ent_current)
        self.ent_widget.scene().sigMouseClicked.connect(self._on_entropy_click)
        # the heads tab: the entropy grid, and the logit lens and head knock-out (vitviz.gui.mechanistic_panel: run
        # on request, attached like faithfulness) as a second page (a sixth tab would widen the dock)
        self._controller = None  # given to the pages when they are built (attach)
        self._shown_session = None  # the session last refreshed, for a page built later
        self._mechanistic_page = LazyPage(self._make_mechanistic)
        self.heads_pages = QTabWidget()
        self.heads_pages.setDocumentMode(True)
        self.heads_pages.setTabPosition(QTabWidget.TabPosition.South)
        self.heads_pages.addTab(titled_page(self.ent_title, self.ent_widget), "Entropy")
        self.heads_pages.addTab(self._mechanistic_page, "Lens · knock-out")
        self.heads_pages.setTabToolTip(1, "Logit lens against depth and the knock-out of every head (press Run); "
                                          "click a cell of the grid to show that head's map")
        self.addTab(self.heads_pages, "Heads")
        self.setTabToolTip(3, "Mean attention entropy per layer and head for this image; the logit lens and the "
                              "knock-out of every head; click a cell")
        # faithfulness (vitviz.gui.faithfulness): run on request; the window attaches it to its controller
        self._faithfulness_page = LazyPage(self._make_faithfulness)
        self.addTab(self._faithfulness_page, "Faithfulness")
        self.setTabToolTip(4, "Deletion and insertion curves of the maps for this image and target: which map "
                              "reflects what the model uses (press Run)")
        self._result_id = None
        self._session = None
        self._shape = (0, 0)
        self._computed = ""  # " · computed in bf16": the precision of the result drawn
        self._pos_grid = (0, 0)
        self._pos_marked = None
        self.currentChanged.connect(lambda _i: self._fill_shown_filters())

    # ------------------------------------------------------------------ the pages built on first sight
    @property
    def faithfulness(self) -> FaithfulnessPanel:
        """The Faithfulness page (built now if it was not yet)."""
        return self._faithfulness_page.content  # type: ignore[return-value]

    @property
    def mechanistic(self) -> MechanisticPanel:
        """The logit lens and head knock-out page (built now if it was not yet)."""
        return self._mechanistic_page.content  # type: ignore[return-value]

    def show_page(self, content: QWidget) -> None:
        """Bring the tab holding ``content`` (a page, a page's content, or a widget in it) to the front, the Heads
        tab's own pages included."""
        for tabs in (self, self.heads_pages):
            for i in range(tabs.count()):
                page = tabs.widget(i)
                if page is content or page.isAncestorOf(content):
                    tabs.setCurrentIndex(i)

    def attach(self, controller) -> None:
        """Give ``controller`` to the run-on-request pages (now, or when they are built)."""
        self._controller = controller
        for page in self._lazy_pages():
            if page.built:
                page.content.attach(controller)  # type: ignore[attr-defined]

    def _lazy_pages(self) -> tuple[LazyPage, LazyPage]:
        return self._faithfulness_page, self._mechanistic_page

    def _make_faithfulness(self) -> FaithfulnessPanel:
        from vitviz.gui.faithfulness import FaithfulnessPanel  # (with the page: not at start-up)

        panel = FaithfulnessPanel()
        panel.viewRequested.connect(self.viewRequested)
        panel.localisation.outlineChanged.connect(self.outlineChanged)
        return self._ready(panel)

    def _make_mechanistic(self) -> MechanisticPanel:
        from vitviz.gui.mechanistic_panel import MechanisticPanel  # (with the page: not at start-up)

        panel = MechanisticPanel()
        panel.layerHeadSelected.connect(self.layerHeadSelected)
        return self._ready(panel)

    def _ready(self, panel):
        """A page just built: attached to the controller and showing the session, as if it had been from the start."""
        if self._controller is not None:
            panel.attach(self._controller)
        if self._shown_session is not None:
            panel.refresh(self._shown_session)
        return panel

    def refresh(self, session) -> None:
        r = session.result
        if r is None:
            return
        self._shown_session = session
        for page in self._lazy_pages():
            if page.built:
                page.content.refresh(session)  # type: ignore[attr-defined]
        o = session.options
        if id(r) != self._result_id:
            self._result_id = id(r)
            self._fill(session)
        layer, head = o.layer, o.head
        if isinstance(head, int) and 0 <= layer < r.num_layers and "head" in session.view.reads:
            d = session.mean_distances()
            self.distance.mark(layer, float(d[layer, head]))
            self.ent_current.setRect(QRectF(head, layer, 1, 1))
            self.ent_current.setVisible(True)
        else:
            self.distance.mark(None)
            self.ent_current.setVisible(False)
        if self._pos_grid != (0, 0):
            rc = divmod(o.query, self._pos_grid[1])
            self.pos_mosaic.set_highlight(*rc)
            if rc != self._pos_marked:  # follow the selected patch, but leave the user's scrolling alone otherwise
                self._pos_marked = rc
                QTimer.singleShot(0, lambda: self.pos_scroll.ensure_tile_visible(*rc))

    def _fill(self, session) -> None:
        r = session.result
        self._session = session
        self._computed = f" · computed in {precision_text(r)}"  # bf16 numbers differ in the second or third digit
        self.ent_title.setText(f"Mean attention entropy per layer and head · this image{self._computed}")
        L, H = r.num_layers, r.num_heads
        self._shape = (L, H)
        self.distance.fill(session.mean_distances(), self._computed)

        md = r.model_data  # the model's data: the position similarity, computed once per model and grid
        sim = None if md is None else md.pos_similarity()
        self.pos_title.setText(POS_TITLES.get(None if md is None else md.pos_similarity_kind, POS_TITLES["table"]))
        if sim is not None:
            gh, gw = sim.shape[:2]
            self._pos_grid = (gh, gw)
            self._pos_marked = None
            factor = max(1, math.ceil(MIN_TILE / max(gh, gw)))  # whole screen pixels per patch at the least size
            # cosine similarity: signed, -1..1 on every model, a diverging map with 0 in the middle
            sim = np.clip(sim, -1.0, 1.0)  # 1 + rounding on the diagonal is not a value beyond the scale
            scale = shared_scale(sim, "coolwarm", signed=True, fixed=(-1.0, 1.0))
            tiles = upscale(colorize_shared(sim.reshape(gh * gw, gh, gw), scale), factor)
            self.pos_mosaic.set_tiles(tiles, gh, gw, gap=max(1, factor // 2))
            self.pos_bar.set_scale(scale, "cosine similarity")
            step = max(1, gh // 7)
            self.pos_mosaic.set_axes([str(i) if i % step == 0 else "" for i in range(gh)],
                                     [str(j) if j % step == 0 else "" for j in range(gw)],
                                     "input patch row", "input patch column")
        else:
            self._pos_grid = (0, 0)
            self.pos_mosaic.item.clear()
            self.pos_bar.set_scale(None)

        self._fill_shown_filters()

        e = session.entropies()
        top = max(float(np.nanmax(e)), 1e-12) if e.size else 1.0  # entropy >= 0: the colour scale starts at 0
        self.ent_item.setImage(e, autoLevels=False, levels=(0.0, top))
        self.ent_bar.setLevels((0.0, top))
        self.ent_plot.setXRange(0, H, padding=0.02)
        self.ent_plot.setYRange(0, L, padding=0.02)
        self.ent_plot.getAxis("bottom").setTicks([[(h + 0.5, str(h)) for h in range(H)]])
        self.ent_plot.getAxis("left").setTicks([[(i + 0.5, str(i)) for i in range(L)]])

    def _fill_shown_filters(self) -> None:
        """The filters' tiles and variance shares, when their tab is shown: an eigendecomposition and an SVD of the
        filters (0.2 s each for ViT-B/16), once per model, that nothing else waits for."""
        if self.currentWidget() is self.filter_page and self._session is not None:
            self._fill_filters(self._session)

    def _fill_filters(self, session) -> None:
        r = session.result
        f = None if r is None or r.model_data is None else r.model_data.filters(FILTER_COMPONENTS)
        if f is None or f.shape[-1] not in (1, 3):
            self.filter_mosaic.item.clear()
            self.filter_title.setText("Patch-embedding filters: not available for this model")
            self._filter_md, self._filter_tiles = None, []
            return
        if r.model_data is self._filter_md:
            return
        self._filter_md = r.model_data
        self.filter_variance = None
        k, P = f.shape[0], f.shape[1]
        factor = max(1, math.ceil(FILTER_TILE / P))
        self._filter_gap = max(2, factor)
        self._filter_tiles = []
        for t in f:
            rgb = np.clip(np.asarray(t) * 255.0, 0, 255).astype(np.uint8)
            if rgb.shape[-1] == 1:
                rgb = np.repeat(rgb, 3, axis=-1)
            self._filter_tiles.append(upscale(rgb, factor))
        self._filter_labels = [f"PC{i + 1}" for i in range(k)]
        self.filter_title.setText(f"Patch-embedding filters: first {k} principal components")
        self._layout_filters(force=True)
        self._fill_filter_variance()

    def _layout_filters(self, force: bool = False) -> None:
        """As many columns of filters as fit the panel's width (tiles of at least ``FILTER_TILE`` px)."""
        k = len(self._filter_tiles)
        if k == 0:
            return
        room = self.filter_scroll.width() - self.filter_scroll.verticalScrollBar().sizeHint().width() - 12
        cols = max(1, min(k, room // (FILTER_TILE + 6))) if room > 0 else 4
        if cols != self.filter_mosaic.cols or force:
            self.filter_mosaic.set_tiles(self._filter_tiles, math.ceil(k / cols), cols, gap=self._filter_gap,
                                         labels=self._filter_labels)

    def _fill_filter_variance(self) -> None:
        """Label each component with its share of the variance: an SVD of the filters (up to ~0.2 s for ViT-B),
        done once per model and only when the tab is shown."""
        if self.currentWidget() is not self.filter_page or self._filter_md is None or self.filter_variance is not None:
            return
        w = getattr(self._filter_md, "patch_embed_weight", None)
        if w is None:
            return
        from vitviz.analysis import embedding_filter_variance  # (torch: not at start-up)

        ratio = embedding_filter_variance(w).cpu().numpy()
        self.filter_variance = ratio
        k = min(len(ratio), len(self._filter_tiles))
        self._filter_labels = [f"PC{i + 1} {100 * ratio[i]:.1f} %" for i in range(k)]
        self.filter_mosaic.set_labels(self._filter_labels)
        self.filter_title.setText(f"Patch-embedding filters: first {k} principal components, each with its share of "
                                  f"the filters' variance ({100 * ratio[:k].sum():.0f} % in all)")

    def _on_pos_tile(self, row: int, col: int) -> None:
        gh, gw = self._pos_grid
        if gw:
            self.patchSelected.emit(row * gw + col)

    def _on_entropy_click(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton:
            return
        p = self.ent_plot.getViewBox().mapSceneToView(ev.scenePos())
        L, H = self._shape
        layer, head = int(math.floor(p.y())), int(math.floor(p.x()))
        if 0 <= layer < L and 0 <= head < H:
            self.layerHeadSelected.emit(layer, head)

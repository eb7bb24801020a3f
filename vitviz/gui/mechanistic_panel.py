"""The Mechanistic tab of the plots panel: the logit lens against depth and the L x H head knock-out grid of the
image and target on screen (:mod:`vitviz.capture.mechanistic`), run when asked (Run) on the controller's worker
(job kind ``"mechanistic"``: a newer run supersedes an older one, failures go through the controller's one error
path). Clicking a cell of the grid shows that head's map on the canvas (``layerHeadSelected``, as the entropy grid).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtWidgets import QGraphicsItem, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from vitviz.gui.canvas import highlight_rect
from vitviz.gui.mosaic import BACKGROUND

KIND = "mechanistic"
LINE_COLOURS = ((80, 170, 255), (255, 150, 60), (120, 210, 120), (230, 90, 90))


class MechanisticPanel(QWidget):
    """Logit lens (the target's probability, or score, after every block, and the final top classes) and the head
    knock-out grid (the change of the target's score with each head's output zeroed).

    Signals:
        layerHeadSelected(layer, head): a cell of the knock-out grid was clicked.
    """

    layerHeadSelected = Signal(int, int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.controller = None
        self.session = None
        self.shown: tuple[Any, Any] | None = None  # (LensResult, KnockoutResult) on screen
        self.shown_for: Any = None  # the result they were computed for
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.setSpacing(3)
        row = QHBoxLayout()
        self.run_button = QPushButton("Run")
        self.run_button.setToolTip("Logit lens and head knock-out of the image and target on screen (one forward per "
                                   "layer and head, batched)")
        self.run_button.clicked.connect(self.run)
        self.status = QLabel("Logit lens and head knock-out: press Run")
        self.status.setWordWrap(True)
        row.addWidget(self.run_button)
        row.addWidget(self.status, 1)
        lay.addLayout(row)
        self.widget = pg.GraphicsLayoutWidget()
        self.widget.setBackground(BACKGROUND)
        self.lens_plot = self.widget.addPlot(row=0, col=0, enableMenu=False)
        self.lens_plot.setTitle("Logit lens", size="9pt")
        self.lens_plot.setLabel("bottom", "layer")
        self.lens_plot.setLabel("left", "probability")
        self.lens_plot.setMouseEnabled(False, False)
        self.lens_plot.hideButtons()
        self.lens_plot.showGrid(x=True, y=True, alpha=0.2)
        self.lens_legend = self.lens_plot.addLegend(offset=(5, 5), labelTextSize="8pt")
        self.ko_plot = self.widget.addPlot(row=1, col=0, enableMenu=False)
        self.ko_plot.setTitle("Head knock-out", size="9pt")
        self.ko_plot.setMouseEnabled(False, False)
        self.ko_plot.hideButtons()
        self.ko_plot.invertY(True)
        self.ko_plot.setLabel("bottom", "head")
        self.ko_plot.setLabel("left", "layer")
        self.ko_item = pg.ImageItem(axisOrder="row-major")
        self.ko_item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.ko_plot.addItem(self.ko_item)
        self.ko_bar = pg.ColorBarItem(values=(-1, 1), colorMap=pg.colormap.get("CET-D1"), interactive=False,
                                      width=12, label="Δ score")
        self.ko_bar.setImageItem(self.ko_item, insert_in=self.ko_plot)
        self.ko_current = highlight_rect(2.0)
        self.ko_current.setVisible(False)
        self.ko_plot.addItem(self.ko_current)
        self.widget.scene().sigMouseClicked.connect(self._on_click)
        lay.addWidget(self.widget, 1)

    # ------------------------------------------------------------------ wiring
    def attach(self, controller) -> None:
        self.controller = controller
        controller.runner.done.connect(self._on_done)
        controller.runner.failed.connect(self._on_failed)

    def refresh(self, session) -> None:
        """The image, target or options on screen changed: a drawn result of another image is marked stale."""
        self.session = session
        r = session.result
        if self.shown is not None and r is not self.shown_for:
            self.status.setText("These plots are of another image or target: press Run")
        o = session.options
        on = self.shown is not None and isinstance(o.head, int) and "head" in session.view.reads
        if on:
            self.ko_current.setRect(QRectF(o.head, max(0, o.layer), 1, 1))
        self.ko_current.setVisible(on)

    def why_not(self) -> str | None:
        """Why Run cannot start now (None: it can)."""
        c = self.controller
        r = None if self.session is None else self.session.result
        if c is None or c.pipeline is None:
            return "no model is loaded"
        if r is None:
            return "open an image first"
        if r.target is None and r.target_spec is None:
            return "the model has no classifier: choose a similarity target first"
        key, why = c.faithfulness.key(r, steps=1, baseline="mean", seeds=0)  # the result is the window model's
        return None if key is not None else why

    def run(self) -> None:
        why = self.why_not()
        if why:
            self.status.setText(f"Cannot run: {why}")
            return
        result, pipeline = self.session.result, self.controller.pipeline
        target = result.target_spec if result.target_spec is not None else int(result.target)

        def work(job):
            from PIL import Image

            from vitviz.capture.mechanistic import ResidualStream, head_knockout, logit_lens

            x = pipeline.prepare(Image.fromarray(result.rgb)).x[None]
            stream = ResidualStream(pipeline.model, x, target)
            lens = logit_lens(pipeline.model, x, stream=stream)
            return result, lens, head_knockout(pipeline.model, x, stream=stream)

        self.status.setText("Running the logit lens and the knock-out of every head…")
        self.controller.runner.submit(KIND, work, subject=result.source, title="Could not run the logit lens")

    def _on_done(self, kind: str, value: Any, _job: Any) -> None:
        if kind != KIND:
            return
        result, lens, ko = value
        self.shown, self.shown_for = (lens, ko), result
        self._draw(lens, ko)
        stale = self.session is not None and self.session.result is not result
        self.status.setText(f"Target: {lens.target_text}. Logit lens: the model's head read after each block. "
                            f"Knock-out: change of the target's score (clean {ko.clean:.3g}) with one head's output "
                            f"zeroed; click a cell for its map" + (" · of another image: press Run" if stale else ""))

    def _on_failed(self, kind: str, _title: str, message: str, _job: Any) -> None:
        if kind == KIND:
            self.status.setText(f"Failed: {message.splitlines()[0] if message else 'error'}")

    # ------------------------------------------------------------------ drawing
    def _draw(self, lens, ko) -> None:
        self.lens_plot.clear()
        self.lens_legend.clear()
        L = lens.num_layers
        xs = np.arange(L, dtype=float)
        if lens.probabilities is not None:
            t = int(lens.target.index) if hasattr(lens.target, "index") else None
            classes = lens.probabilities[-1].topk(min(3, lens.probabilities.shape[1])).indices.tolist()
            if t is not None and t not in classes:
                classes = [t] + classes[:2]
            for i, c in enumerate(classes):
                pen = pg.mkPen(LINE_COLOURS[i % len(LINE_COLOURS)], width=3 if c == t else 1.5)
                self.lens_plot.plot(xs, lens.probabilities[:, c].numpy(), pen=pen, symbol="o", symbolSize=5,
                                    symbolBrush=LINE_COLOURS[i % len(LINE_COLOURS)],
                                    name=lens.label(c) + (" (target)" if c == t else ""))
            self.lens_plot.setLabel("left", "probability")
            self.lens_plot.setYRange(0, 1, padding=0.02)
        else:
            self.lens_plot.plot(xs, lens.scores.numpy(), pen=pg.mkPen(LINE_COLOURS[0], width=3), symbol="o",
                                symbolSize=5, name=lens.target_text)
            self.lens_plot.setLabel("left", "target score")
        self.lens_plot.enableAutoRange(False)
        self.lens_plot.setXRange(-0.3, L - 0.7, padding=0)
        self.lens_plot.getAxis("bottom").setTicks([[(i, str(i)) for i in range(L)]])
        d = ko.delta.numpy()
        top = max(float(np.abs(d).max()), 1e-9)
        self.ko_item.setImage(d, autoLevels=False, levels=(-top, top))
        self.ko_bar.setLevels((-top, top))
        H = d.shape[1]
        self.ko_plot.setXRange(0, H, padding=0.02)
        self.ko_plot.setYRange(0, L, padding=0.02)
        self.ko_plot.getAxis("bottom").setTicks([[(h + 0.5, str(h)) for h in range(H)]])
        self.ko_plot.getAxis("left").setTicks([[(i + 0.5, str(i)) for i in range(L)]])

    def _on_click(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton or self.shown is None:
            return
        if not self.ko_plot.sceneBoundingRect().contains(ev.scenePos()):
            return
        p = self.ko_plot.getViewBox().mapSceneToView(ev.scenePos())
        L, H = self.shown[1].scores.shape
        layer, head = int(math.floor(p.y())), int(math.floor(p.x()))
        if 0 <= layer < L and 0 <= head < H:
            self.layerHeadSelected.emit(layer, head)

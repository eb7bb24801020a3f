"""The Compare window's Patching dock: activation patching (:func:`vitviz.capture.mechanistic.activation_patching`)
between the image the main window shows (clean) and another open image (corrupted), with the main window's model
and target, run when asked on the controller's worker (job kind ``"patching"``). It draws the recovered share per
layer ([CLS], all tokens, and the sum of the single-patch recoveries) and, for the chosen layer, the per-patch
recovery map over the corrupted image as the model saw it (its crop).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QSlider, QVBoxLayout, QWidget

from vitviz.gui.mosaic import BACKGROUND
from vitviz.imaging import load_image

KIND = "patching"


class PatchingPanel(QWidget):
    """Run patching from the shown image into the chosen one; draw the per-layer recovery and the layer's map."""

    def __init__(self, session, controller, parent: QWidget | None = None):
        super().__init__(parent)
        self.session, self.controller = session, controller
        self.shown: Any = None  # the PatchingResult on screen
        self.corrupt_rgb: np.ndarray | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        row = QHBoxLayout()
        row.addWidget(QLabel("Corrupted image"))
        self.corrupt_combo = QComboBox()
        self.corrupt_combo.setToolTip("The image whose run receives the shown (clean) image's block outputs")
        row.addWidget(self.corrupt_combo, 1)
        self.run_button = QPushButton("Run patching")
        self.run_button.clicked.connect(self.run)
        row.addWidget(self.run_button)
        lay.addLayout(row)
        self.status = QLabel("Activation patching: the shown image is the clean one; choose the corrupted image")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        self.widget = pg.GraphicsLayoutWidget()
        self.widget.setBackground(BACKGROUND)
        self.curve_plot = self.widget.addPlot(row=0, col=0, enableMenu=False)
        self.curve_plot.setTitle("Recovered share per layer", size="9pt")
        self.curve_plot.setLabel("bottom", "layer whose output is patched")
        self.curve_plot.setLabel("left", "recovered")
        self.curve_plot.setMouseEnabled(False, False)
        self.curve_plot.hideButtons()
        self.curve_plot.showGrid(x=True, y=True, alpha=0.2)
        self.legend = self.curve_plot.addLegend(offset=(5, 5), labelTextSize="8pt")
        self.map_plot = self.widget.addPlot(row=0, col=1, enableMenu=False)
        self.map_plot.setMouseEnabled(False, False)
        self.map_plot.hideButtons()
        self.map_plot.invertY(True)
        self.map_plot.setAspectLocked(True)
        self.map_plot.hideAxis("left")
        self.map_plot.hideAxis("bottom")
        self.photo_item = pg.ImageItem(axisOrder="row-major")
        self.map_item = pg.ImageItem(axisOrder="row-major")
        self.map_item.setOpacity(0.7)
        self.map_plot.addItem(self.photo_item)
        self.map_plot.addItem(self.map_item)
        self.map_bar = pg.ColorBarItem(values=(-1, 1), colorMap=pg.colormap.get("CET-D1"), interactive=False,
                                       width=12, label="recovered, one patch")
        self.map_bar.setImageItem(self.map_item, insert_in=self.map_plot)
        lay.addWidget(self.widget, 1)
        lrow = QHBoxLayout()
        self.layer_label = QLabel("layer")
        self.layer_slider = QSlider(Qt.Orientation.Horizontal)
        self.layer_slider.setEnabled(False)
        self.layer_slider.valueChanged.connect(self._draw_map)
        lrow.addWidget(self.layer_label)
        lrow.addWidget(self.layer_slider, 1)
        lay.addLayout(lrow)
        controller.runner.done.connect(self._on_done)
        controller.runner.failed.connect(self._on_failed)

    def refresh(self) -> None:
        """The open images changed: the choice of corrupted image lists the others."""
        r = self.session.result
        clean = None if r is None else r.source
        others = [p for p in self.session.images if p != clean]
        current = self.corrupt_combo.currentData()
        self.corrupt_combo.blockSignals(True)
        self.corrupt_combo.clear()
        for p in others:
            self.corrupt_combo.addItem(Path(p).name, p)
        if current in others:
            self.corrupt_combo.setCurrentIndex(others.index(current))
        self.corrupt_combo.blockSignals(False)
        self.run_button.setEnabled(bool(others) and self.controller.pipeline is not None)

    def run(self) -> None:
        r, pipeline = self.session.result, self.controller.pipeline
        corrupt = self.corrupt_combo.currentData()
        if r is None or pipeline is None or corrupt is None:
            self.status.setText("Open two images: the shown one is the clean image, the other the corrupted one")
            return
        if r.target is None and r.target_spec is None:
            self.status.setText("The model has no classifier: choose a similarity target first")
            return
        target = r.target_spec if r.target_spec is not None else int(r.target)
        clean_rgb = r.rgb

        def work(job):
            from PIL import Image

            from vitviz.capture.mechanistic import activation_patching

            prepared = pipeline.prepare(load_image(corrupt))
            x = pipeline.prepare(Image.fromarray(clean_rgb)).x[None]
            result = activation_patching(pipeline.model, x, prepared.x[None], target)
            y0, x0, y1, x1 = prepared.geometry.crop_in_image()
            crop = prepared.rgb[int(round(y0)):int(round(y1)), int(round(x0)):int(round(x1))]
            return result, np.ascontiguousarray(crop), Path(r.source).name, Path(corrupt).name

        self.status.setText(f"Patching {Path(r.source).name} into {Path(corrupt).name}…")
        self.controller.runner.submit(KIND, work, subject=corrupt, title="Could not run activation patching")

    def _on_done(self, kind: str, value: Any, _job: Any) -> None:
        if kind != KIND:
            return
        result, crop, clean, corrupt = value
        self.shown, self.corrupt_rgb = result, crop
        L = result.num_layers
        self.status.setText(f"{clean} (clean) into {corrupt} (corrupted); target {result.target_text}: score "
                            f"{result.clean:.3g} clean, {result.corrupt:.3g} corrupted; recovered = (patched − "
                            "corrupt) / (clean − corrupt)")
        self.curve_plot.clear()
        self.legend.clear()
        xs = np.arange(L, dtype=float)
        if result.cls is not None:
            self.curve_plot.plot(xs, result.cls.numpy(), pen=pg.mkPen((80, 170, 255), width=2), symbol="o",
                                 symbolSize=5, name="[CLS] patched")
        self.curve_plot.plot(xs, result.all.numpy(), pen=pg.mkPen((255, 150, 60), width=2), symbol="s",
                             symbolSize=5, name="all tokens")
        self.curve_plot.plot(xs, result.patches.sum(1).numpy(), pen=pg.mkPen((120, 210, 120), width=2),
                             symbol="t", symbolSize=6, name="sum of single patches")
        self.curve_plot.getAxis("bottom").setTicks([[(i, str(i)) for i in range(L)]])
        self.photo_item.setImage(crop)
        self.layer_slider.setRange(0, L - 1)
        self.layer_slider.setEnabled(True)
        if self.layer_slider.value() >= L:
            self.layer_slider.setValue(L - 1)
        self._draw_map(self.layer_slider.value())

    def _on_failed(self, kind: str, _title: str, message: str, _job: Any) -> None:
        if kind == KIND:
            self.status.setText(f"Failed: {message.splitlines()[0] if message else 'error'}")

    def _draw_map(self, layer: int) -> None:
        r = self.shown
        if r is None:
            return
        m = r.recovery_map(int(layer)).numpy()
        top = max(float(np.abs(m).max()), 1e-9)
        self.map_item.setImage(m, autoLevels=False, levels=(-top, top))
        self.map_bar.setLevels((-top, top))
        h, w = self.corrupt_rgb.shape[:2]
        self.map_item.setRect(QRectF(0, 0, w, h))
        self.map_plot.setTitle(f"Per-patch recovery, layer {int(layer)}", size="9pt")
        self.layer_label.setText(f"layer {int(layer)}")

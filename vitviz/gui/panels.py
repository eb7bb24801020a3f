"""Dock panels: controls and predictions (per-head thumbnails are in :mod:`vitviz.gui.heads`, the plots in
:mod:`vitviz.gui.plots`).

Panels never own state: they emit the user's intent as signals and are refreshed by the main window from the
:class:`~vitviz.document.session.Session` (under a signal blocker, so a refresh never echoes back as a user action).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QSizePolicy,
    QSlider,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from vitviz import views
from vitviz.gui.heads import HeadsPanel  # noqa: F401  (re-exported: it used to live here)
from vitviz.gui.prompt_box import PromptBox
from vitviz.gui.scale_panel import ScalePanel
from vitviz.gui.target_box import TargetBox
from vitviz.render import colormaps
from vitviz.resources import DEMO_CLASSES as CLASSES  # (not vitviz.demo: its dataset needs PIL)
from vitviz.views.options import HEAD_REDUCTIONS, option

PROMPT_ROWS = 20  # prompts listed in the predictions table (classes: the top 5)


# ====================================================================== controls
class ControlsPanel(QWidget):
    """View selector, layer slider, head selector, rollout options, display options."""

    viewChanged = Signal(str)
    layerChanged = Signal(int)
    headChanged = Signal(object)  # int or "mean"/"max"/"min"
    rolloutChanged = Signal(str, float)  # head fusion, discard ratio
    colormapChanged = Signal(str)
    opacityChanged = Signal(float)
    interpolationChanged = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.setSpacing(8)

        box = QGroupBox("View")
        vl = QVBoxLayout(box)
        vl.setSpacing(2)
        self.view_group = QButtonGroup(self)
        self.view_buttons: dict[str, QRadioButton] = {}
        self._view_keys: list[str] = []
        for i, v in enumerate(views.all_views()):  # the registry decides what is listed, in its order
            key = views.shortcut(v)
            b = QRadioButton(f"&{key}  {v.title}" if key and len(key) == 1 else v.title)
            b.setToolTip(f"{v.title} (key {key})" if key else v.title)
            self.view_group.addButton(b, i)
            self.view_buttons[v.key] = b
            self._view_keys.append(v.key)
            vl.addWidget(b)
        self.view_group.idClicked.connect(lambda i: self.viewChanged.emit(self._view_keys[i]))
        lay.addWidget(box)

        lh = QGroupBox("Layer and head")
        form = QFormLayout(lh)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        row = QHBoxLayout()
        self.layer_slider = QSlider(Qt.Orientation.Horizontal)
        self.layer_slider.setRange(0, 0)
        self.layer_slider.setPageStep(1)
        self.layer_slider.setTickPosition(QSlider.TickPosition.TicksBelow)
        self.layer_slider.setToolTip("Layer (Left/Right, Home/End)")
        self.layer_label = QLabel("–")
        self.layer_label.setMinimumWidth(52)
        self.layer_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        f = self.layer_label.font()
        f.setBold(True)
        self.layer_label.setFont(f)
        row.addWidget(self.layer_slider, 1)
        row.addWidget(self.layer_label)
        self.layer_row_label = QLabel("Layer")  # "Start layer" in the cumulative views
        form.addRow(self.layer_row_label, row)
        self.layer_slider.valueChanged.connect(self.layerChanged.emit)
        self.head_combo = QComboBox()
        self.head_combo.setToolTip("Head (Up/Down)")
        self.head_combo.currentIndexChanged.connect(self._on_head)
        form.addRow("Head", self.head_combo)
        self.mask_background = QCheckBox(option("mask_background").label)  # feature PCA only
        self.mask_background.setToolTip(option("mask_background").help)
        form.addRow(self.mask_background)
        self.pca_joint = QCheckBox(option("pca_joint").label)  # feature PCA only
        self.pca_joint.setToolTip(option("pca_joint").help)
        form.addRow(self.pca_joint)
        self.pca_colours_only = QCheckBox(option("pca_colours_only").label)  # feature PCA only
        self.pca_colours_only.setToolTip(option("pca_colours_only").help)
        form.addRow(self.pca_colours_only)
        self.legrad_pooling = QComboBox()  # LeGrad only; as narrow as its words (the dock must not widen)
        self.legrad_pooling.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.legrad_pooling.setMinimumContentsLength(8)
        for value, words in option("legrad_pooling").labelled():
            self.legrad_pooling.addItem(words, value)
        self.legrad_pooling.setToolTip(option("legrad_pooling").help)
        form.addRow(option("legrad_pooling").label, self.legrad_pooling)
        lay.addWidget(lh)

        ro = QGroupBox("Rollout")
        rf = QFormLayout(ro)
        self.fusion_combo = QComboBox()
        self.fusion_combo.addItems(list(option("head_fusion").choices))
        self.fusion_combo.setToolTip("How the heads of a layer are fused (attention rollout)")
        self.discard_spin = QDoubleSpinBox()
        self.discard_spin.setRange(*option("discard_ratio").range)
        self.discard_spin.setSingleStep(0.05)
        self.discard_spin.setDecimals(2)
        self.discard_spin.setToolTip("Fraction of the lowest patch attentions discarded per row")
        rf.addRow("Head fusion", self.fusion_combo)
        rf.addRow("Discard ratio", self.discard_spin)
        self.fusion_combo.currentIndexChanged.connect(self._on_rollout)
        self.discard_spin.valueChanged.connect(self._on_rollout)
        self.rollout_box = ro
        lay.addWidget(ro)

        disp = QGroupBox("Display")
        df = QFormLayout(disp)
        self.cmap_combo = QComboBox()
        self.cmap_combo.addItems(colormaps.colormap_names())
        self.cmap_combo.currentTextChanged.connect(self.colormapChanged.emit)
        self.opacity_slider = QSlider(Qt.Orientation.Horizontal)
        self.opacity_slider.setRange(0, 100)
        self.opacity_slider.valueChanged.connect(lambda v: self.opacityChanged.emit(v / 100.0))
        self.opacity_label = QLabel("60 %")
        self.opacity_label.setMinimumWidth(40)
        self.opacity_slider.valueChanged.connect(lambda v: self.opacity_label.setText(f"{v} %"))
        orow = QHBoxLayout()
        orow.addWidget(self.opacity_slider, 1)
        orow.addWidget(self.opacity_label)
        self.interp_combo = QComboBox()
        for key, text in option("interpolation").labelled():
            self.interp_combo.addItem(text, key)
        self.interp_combo.currentIndexChanged.connect(
            lambda i: self.interpolationChanged.emit(self.interp_combo.itemData(i)))
        df.addRow("Colormap", self.cmap_combo)
        df.addRow("Opacity", orow)
        df.addRow("Interpolation", self.interp_combo)
        self.export_colorbar = QCheckBox("Colour bar in exports")
        self.export_caption = QCheckBox("Caption in exports")
        self.export_colorbar.setChecked(True)
        self.export_caption.setChecked(True)
        df.addRow(self.export_colorbar)
        df.addRow(self.export_caption)
        lay.addWidget(disp)
        self.scale_panel = ScalePanel()
        lay.addWidget(self.scale_panel)
        lay.addStretch(1)

    def _on_head(self, i: int) -> None:
        data = self.head_combo.itemData(i)
        if data is not None:
            self.headChanged.emit(data)

    def _on_rollout(self, *_):
        self.rolloutChanged.emit(self.fusion_combo.currentText(), float(self.discard_spin.value()))

    def refresh(self, session) -> None:
        """Show the session's options (no signals are emitted)."""
        o = session.options
        r = session.result
        v = session.view
        widgets = (self.view_group, self.layer_slider, self.head_combo, self.fusion_combo, self.discard_spin,
                   self.cmap_combo, self.opacity_slider, self.interp_combo, self.mask_background, self.pca_joint,
                   self.pca_colours_only, self.legrad_pooling)
        for w in widgets:
            w.blockSignals(True)
        try:
            self.view_buttons[o.view].setChecked(True)
            # the slider drives the option the view reads as its layer: "layer", or "start_layer" (cumulative views)
            lo, hi = session.slider_range()
            value = session.slider_value()
            self.layer_row_label.setText(v.slider_label)
            self.layer_slider.setRange(lo, hi)
            self.layer_slider.setValue(value)
            if r is None:
                self.layer_label.setText("–")  # nothing analysed yet (e.g. while the model loads)
            elif v.slider is None:  # cumulative over every layer, or no layers at all (position embeddings)
                self.layer_label.setText("all" if v.uses_attention else "–")
            else:
                self.layer_label.setText("emb" if value < 0 else f"{value} / {hi}")
            self.layer_slider.setToolTip(f"{v.slider_label} (Left/Right, Home/End)" if v.slider else
                                         f"{v.title} uses every layer")
            nh = r.num_heads if r is not None else 0
            if self.head_combo.count() != nh + 3:
                self.head_combo.clear()
                for h in HEAD_REDUCTIONS:
                    self.head_combo.addItem(f"{h} of heads", h)
                for h in range(nh):
                    self.head_combo.addItem(f"head {h}", h)
            idx = self.head_combo.findData(o.head)
            if isinstance(o.head, int):
                idx = 3 + o.head
            self.head_combo.setCurrentIndex(max(idx, 0))
            self.fusion_combo.setCurrentText(o.head_fusion)
            self.discard_spin.setValue(o.discard_ratio)
            self.cmap_combo.setCurrentText(o.cmap)
            self.opacity_slider.setValue(int(round(o.opacity * 100)))
            self.opacity_label.setText(f"{int(round(o.opacity * 100))} %")
            self.interp_combo.setCurrentIndex(max(0, self.interp_combo.findData(o.interpolation)))
            reads = v.reads  # only the controls the view reads are enabled
            self.layer_slider.setEnabled(v.slider is not None and r is not None)
            self.head_combo.setEnabled("head" in reads)
            self.rollout_box.setEnabled(bool(reads & {"head_fusion", "discard_ratio"}))
            self.fusion_combo.setEnabled("head_fusion" in reads)
            self.discard_spin.setEnabled("discard_ratio" in reads)
            self.mask_background.setChecked(bool(o.mask_background))
            self.mask_background.setEnabled("mask_background" in reads)
            self.pca_joint.setChecked(bool(o.pca_joint))
            self.pca_joint.setEnabled("pca_joint" in reads)
            self.pca_colours_only.setChecked(bool(o.pca_colours_only))
            self.pca_colours_only.setEnabled(bool(v.rgb))
            self.legrad_pooling.setCurrentIndex(max(0, self.legrad_pooling.findData(o.legrad_pooling)))
            self.legrad_pooling.setEnabled("legrad_pooling" in reads)
        finally:
            for w in widgets:
                w.blockSignals(False)
        self.scale_panel.refresh(session)


# ====================================================================== predictions
class PredictionsPanel(QWidget):
    """Top-5 classes; clicking one makes it the target of the gradient views. Below them the target box
    (:class:`~vitviz.gui.target_box.TargetBox`, :attr:`box`): the target, any class by name, the similarity targets.
    Above them, when a photo is shown with the bundled shapes model, the first-run offer (:meth:`set_offer`): what that
    model knows, and one button per curated real model (with its download size, or "cached").

    Signals:
        targetChosen(class_index): a class clicked in the table or picked in the box's search.
        modelOffered(ref): a button of the offer was clicked (a ``hub:`` model reference).
    """

    targetChosen = Signal(int)
    modelOffered = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        self._build_offer(lay)
        # text prompts (CLIP / SigLIP): the classes become the prompts (vitviz.gui.prompt_box)
        self.prompt_box = PromptBox()
        lay.addWidget(self.prompt_box)
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["Class", "Probability"])
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Fixed)
        self.table.setColumnWidth(1, 120)
        self.table.setToolTip("Click a class to make it the target of the gradient views")
        self.table.cellClicked.connect(self._on_click)
        lay.addWidget(self.table, 1)
        # the target: its words and value, any class by name, the similarity targets (vitviz.gui.target_box)
        self.box = TargetBox()
        self.box.classChosen.connect(self.targetChosen.emit)
        lay.addWidget(self.box)
        lay.addStretch(0)  # takes the room of the table when it is hidden (a feature model): the box stays on top
        self.target_label, self.search = self.box.label, self.box.search
        self._classes: list[int] = []

    def _build_offer(self, lay: QVBoxLayout) -> None:
        self.offer_box = QFrame()
        self.offer_box.setObjectName("first_run_offer")
        self.offer_box.setStyleSheet("QFrame#first_run_offer { background: rgb(70, 56, 28); border: 1px solid "
                                     "rgb(200, 150, 60); border-radius: 3px; }")
        box = QVBoxLayout(self.offer_box)
        box.setContentsMargins(6, 4, 6, 6)
        box.setSpacing(4)
        self.offer_label = QLabel()
        self.offer_label.setWordWrap(True)
        self.offer_label.setTextFormat(Qt.TextFormat.RichText)
        box.addWidget(self.offer_label)
        self.offer_grid = QGridLayout()
        self.offer_grid.setSpacing(4)
        box.addLayout(self.offer_grid)
        self.offer_buttons: dict[str, QPushButton] = {}
        # never squeezed below its text (the table below gives way instead)
        self.offer_box.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        self.offer_box.setVisible(False)
        lay.addWidget(self.offer_box)

    def set_offer(self, offers, cached: set[str] | frozenset[str] = frozenset()) -> None:
        """Show the first-run offer for ``offers`` (:class:`vitviz.model.sources.catalog.HubModel`; ``cached``: their
        references that need no download), or hide it (None or empty)."""
        if not offers:
            self.offer_box.setVisible(False)
            return
        self.offer_label.setText(
            f"<b>The bundled demo model only knows {len(CLASSES)} synthetic shapes</b> ({', '.join(CLASSES)}): "
            "for a photo its predictions and maps mean nothing. Models trained on real images (downloaded once):")
        for b in self.offer_buttons.values():
            self.offer_grid.removeWidget(b)
            b.deleteLater()
        self.offer_buttons = {}
        kinds = {"imagenet": "ImageNet", "dino": "DINO", "language": "image-text"}
        for i, m in enumerate(offers):
            state = "cached" if m.ref in cached else f"{m.size_mb:.0f} MB"
            # two short lines, not one long one: the offer never widens the dock (the canvas keeps its width)
            b = QPushButton(f"{m.title}\n{kinds.get(m.group, m.group)} · {state}")
            b.setToolTip(f"{m.title}: {m.what}\nhttps://huggingface.co/{m.repo}\n"
                         + ("Cached: opens without a download" if m.ref in cached else
                            f"One click downloads {m.size_mb:.0f} MB (once) and opens it"))
            b.clicked.connect(lambda _=False, ref=m.ref: self.modelOffered.emit(ref))
            self.offer_grid.addWidget(b, i // 2, i % 2)
            self.offer_buttons[m.ref] = b
        self.offer_box.setVisible(True)

    def offer_shown(self) -> bool:
        return not self.offer_box.isHidden()

    def refresh(self, session, pending_target: Any = None) -> None:
        """Show the session's result: its top classes (none for a feature model) and its target
        (``pending_target``: a class index, or a target's words, being computed)."""
        r = session.result
        if r is None:
            return
        prompts = getattr(r, "head_kind", "") == "prompts"
        top = r.top_k(PROMPT_ROWS if prompts else 5)
        self._classes = [c for c, _, _ in top]
        self.table.setHorizontalHeaderLabels(["Prompt", f"p ({r.probability})"] if prompts else
                                             ["Class", "Probability"])
        self.table.setToolTip("Click a prompt to explain it (it stays the target for the next images)" if prompts
                              else "Click a class to make it the target of the gradient views")
        self.table.setVisible(r.num_classes != 0)  # a feature model: no classes (the box says what to choose)
        self.table.blockSignals(True)
        self.table.setRowCount(len(top))
        for i, (c, label, p) in enumerate(top):
            item = QTableWidgetItem(f"{label}" if r.labels else f"class {c}")
            item.setToolTip(f"prompt {c + 1}: {label}" if prompts else f"class index {c}")
            item.setData(Qt.ItemDataRole.UserRole, c)
            if c == r.target:
                f = item.font()
                f.setBold(True)
                item.setFont(f)
                item.setText(item.text() + "  ◀ target")
            self.table.setItem(i, 0, item)
            bar = QProgressBar()
            bar.setRange(0, 1000)
            bar.setValue(int(round(p * 1000)))
            bar.setFormat(f"{p * 100:.1f} %")
            bar.setTextVisible(True)
            self.table.setCellWidget(i, 1, bar)
        self.table.resizeRowsToContents()
        # the selection follows the target (no stale row from the previous image)
        self.table.clearSelection()
        shown = pending_target if isinstance(pending_target, int) else r.target
        if shown in self._classes:
            self.table.selectRow(self._classes.index(shown))
        self.table.blockSignals(False)
        pending = r.label(pending_target) if isinstance(pending_target, int) else pending_target
        self.box.refresh(session, pending)

    def row_center(self, row: int) -> QPoint:
        rect = self.table.visualItemRect(self.table.item(row, 0))
        return self.table.viewport().mapTo(self, rect.center())

    def _on_click(self, row: int, _col: int) -> None:
        if 0 <= row < len(self._classes):
            self.targetChosen.emit(self._classes[row])

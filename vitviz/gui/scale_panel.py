"""The colour-scale, artefact-token and mask controls (a part of the controls dock).

Like every panel it owns no state: it emits the user's intent and is refreshed from the session's options.
"""

from __future__ import annotations

import math

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from vitviz.views.options import option

SCALE_CHOICES = option("scale").labelled()  # (mode, words) from the option table


class ScalePanel(QWidget):
    """Colour scale (mode, percentile, log, fixed range), artefact tokens, and the top-mass mask.

    Signals:
        changed(dict): option changes for :meth:`vitviz.document.session.Session.set_options`.
    """

    changed = Signal(dict)

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(8)

        box = QGroupBox("Colour scale")
        f = QFormLayout(box)
        f.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.mode_combo = QComboBox()
        for key, text in SCALE_CHOICES:
            self.mode_combo.addItem(text, key)
        self.mode_combo.setToolTip("How the colours map to values. Robust clips the top (and, for signed maps, the "
                                   "bottom) of the values at a percentile; shared scales let layers or heads be "
                                   "compared by eye; signed quantities are always centred at 0.")
        self.mode_combo.activated.connect(lambda i: self._emit(scale=self.mode_combo.itemData(i)))
        f.addRow("Scale", self.mode_combo)
        self.percentile_spin = QDoubleSpinBox()
        self.percentile_spin.setRange(*option("percentile").range)
        self.percentile_spin.setDecimals(1)
        self.percentile_spin.setSingleStep(0.5)
        self.percentile_spin.setSuffix(" th")
        self.percentile_spin.setToolTip("Values above this percentile take the top colour (arrow on the colour bar)")
        self.percentile_spin.valueChanged.connect(lambda v: self._emit(percentile=float(v)))
        f.addRow("Percentile", self.percentile_spin)
        row = QHBoxLayout()
        self.fixed_lo = QLineEdit()
        self.fixed_hi = QLineEdit()
        for w, tip in ((self.fixed_lo, "Lowest value (bottom colour)"), (self.fixed_hi, "Highest value (top colour)")):
            w.setPlaceholderText("min" if w is self.fixed_lo else "max")
            w.setToolTip(tip)
            w.editingFinished.connect(self._on_fixed)
            row.addWidget(w)
        f.addRow("Range", row)
        self.log_check = QCheckBox("Log scale")
        self.log_check.toggled.connect(lambda b: self._emit(log_scale=bool(b)))
        f.addRow(self.log_check)
        lay.addWidget(box)

        art = QGroupBox("Artefact tokens")
        af = QVBoxLayout(art)
        self.exclude_check = QCheckBox("Leave them out of the colour scale")
        self.exclude_check.setToolTip("High-norm patch tokens (outlined in orange) do not set the colour range")
        self.exclude_check.toggled.connect(lambda b: self._emit(scale_excludes_artefacts=bool(b)))
        self.ignore_check = QCheckBox("Ignore them in attention (renormalise)")
        self.ignore_check.setToolTip("Remove their key columns from every layer's attention and renormalise the rows "
                                     "before [CLS] attention, rollout, gradient rollout and relevance")
        self.ignore_check.toggled.connect(lambda b: self._emit(ignore_artefacts=bool(b)))
        af.addWidget(self.exclude_check)
        af.addWidget(self.ignore_check)
        lay.addWidget(art)

        mb = QGroupBox("Mask")
        mf = QFormLayout(mb)
        mrow = QHBoxLayout()
        self.mask_check = QCheckBox("Keep the top")
        self.mask_spin = QDoubleSpinBox()
        self.mask_spin.setRange(1.0, 99.0)
        self.mask_spin.setDecimals(0)
        self.mask_spin.setSingleStep(5.0)
        self.mask_spin.setSuffix(" % of mass")
        self.mask_spin.setValue(60.0)
        self.mask_spin.setToolTip("The smallest set of patches holding this share of the map's total (DINO's "
                                  "visualisation: 60 %)")
        self.mask_check.toggled.connect(lambda _b: self._on_mask())
        self.mask_spin.valueChanged.connect(lambda _v: self._on_mask())
        mrow.addWidget(self.mask_check)
        mrow.addWidget(self.mask_spin, 1)
        mf.addRow(mrow)
        self.mask_style = QComboBox()
        for key, text in option("mask_style").labelled():
            self.mask_style.addItem(text, key)
        self.mask_style.activated.connect(lambda i: self._emit(mask_style=self.mask_style.itemData(i)))
        mf.addRow("Draw as", self.mask_style)
        lay.addWidget(mb)
        self._widgets = (self.mode_combo, self.percentile_spin, self.fixed_lo, self.fixed_hi, self.log_check,
                         self.exclude_check, self.ignore_check, self.mask_check, self.mask_spin, self.mask_style)
        self._refreshing = False

    # ------------------------------------------------------------------ intent
    def _emit(self, **changes) -> None:
        if not self._refreshing:
            self.changed.emit(changes)

    def _on_mask(self) -> None:
        self._emit(mask_keep=self.mask_spin.value() / 100.0 if self.mask_check.isChecked() else 0.0)

    def fixed_range(self) -> tuple[float, float] | None:
        """The typed range, or None while a field is empty or not a number."""
        try:
            lo, hi = float(self.fixed_lo.text()), float(self.fixed_hi.text())
        except ValueError:
            return None
        return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None

    def _on_fixed(self) -> None:
        rng = self.fixed_range()
        if rng is not None:
            self._emit(scale="fixed", fixed_range=rng)

    # ------------------------------------------------------------------ refresh
    def refresh(self, session) -> None:
        """Show the session's options (no signals are emitted)."""
        o, v = session.options, session.view
        self._refreshing = True
        for w in self._widgets:
            w.blockSignals(True)
        try:
            self.mode_combo.setCurrentIndex(max(0, self.mode_combo.findData(o.scale)))
            model = self.mode_combo.model()
            for i, (key, _text) in enumerate(SCALE_CHOICES):  # shared along an axis the view does not vary: off
                usable = (key != "layers" or v.slider is not None) and (key != "heads" or "head" in v.reads)
                model.item(i).setEnabled(usable)
            self.percentile_spin.setValue(o.percentile)
            self.percentile_spin.setEnabled(o.scale in ("robust", "layers", "heads"))
            fixed = o.scale == "fixed"
            if o.fixed_range is not None and not (self.fixed_lo.hasFocus() or self.fixed_hi.hasFocus()):
                self.fixed_lo.setText(f"{o.fixed_range[0]:g}")
                self.fixed_hi.setText(f"{o.fixed_range[1]:g}")
            elif o.fixed_range is None and not fixed:
                lv = session.levels() if session.result is not None else None
                if lv is not None:  # a starting point for typing: the current range
                    self.fixed_lo.setPlaceholderText(f"{lv.lo:.3g}")
                    self.fixed_hi.setPlaceholderText(f"{lv.hi:.3g}")
            self.log_check.setChecked(o.log_scale)
            self.log_check.setEnabled(not v.signed)
            self.exclude_check.setChecked(o.scale_excludes_artefacts)
            self.ignore_check.setChecked(o.ignore_artefacts)
            self.ignore_check.setEnabled(v.uses_attention)
            self.mask_check.setChecked(o.mask_keep > 0)
            if o.mask_keep > 0:
                self.mask_spin.setValue(round(o.mask_keep * 100))
            self.mask_style.setCurrentIndex(max(0, self.mask_style.findData(o.mask_style)))
            self.mask_style.setEnabled(o.mask_keep > 0)
        finally:
            for w in self._widgets:
                w.blockSignals(False)
            self._refreshing = False

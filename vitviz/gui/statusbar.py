"""The status bar's permanent parts: hover read-out, busy indicator with Cancel, and the model in use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QToolButton

from vitviz.devices import precision_label
from vitviz.document.appearance import artefact_text, register_share

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.document.session import Session

ARTEFACT_WIDTH = 330  # px: the artefact part, elided beyond (the whole text in its tooltip)


class StatusParts:
    """Adds the hover label, the busy label/bar, the Cancel button and the model label to ``bar``."""

    def __init__(self, bar: QStatusBar):
        self.bar = bar
        self.hover_label = QLabel("")
        self.hover_label.setMinimumWidth(200)
        bar.addWidget(self.hover_label, 1)
        # permanent parts: a passing message (hover, export) never hides them
        self.artefact_label = QLabel("")
        self.artefact_label.setMaximumWidth(ARTEFACT_WIDTH)
        bar.addPermanentWidget(self.artefact_label)
        self._artefact_text = ""
        self.busy_label = QLabel("")
        self.busy_bar = QProgressBar()
        self.busy_bar.setMaximumWidth(160)
        self.busy_bar.setMaximumHeight(14)
        self.busy_bar.setTextVisible(False)
        self.busy_bar.setRange(0, 0)
        self.cancel_button = QToolButton()
        self.cancel_button.setText("Cancel")
        for w in (self.busy_label, self.busy_bar, self.cancel_button):
            w.setVisible(False)
            bar.addPermanentWidget(w)
        self.model_label = QLabel("no model")
        self.model_label.setToolTip("Model · input size · device · precision")
        bar.addPermanentWidget(self.model_label)

    def set_busy(self, text: str, busy: bool, cancellable: bool, loading_model: bool) -> None:
        """Shown while any job runs (``busy``); Cancel only while a cancellable model load runs."""
        if text:
            self.busy_label.setText(text)
            self.busy_bar.setRange(0, 0)
        elif not busy:
            self.busy_label.setText("")
        show = bool(text) or busy
        self.busy_label.setVisible(show)
        self.busy_bar.setVisible(show)
        if cancellable:
            self.cancel_button.setVisible(True)
        elif not loading_model:
            self.cancel_button.setVisible(False)

    def set_artefacts(self, text: str) -> None:
        """Which patches are flagged as artefact tokens ("" hides the part)."""
        self._artefact_text = text
        flagged = bool(text) and not text.startswith("no artefact")
        # orange (the canvas's outline colour) only when patches are flagged: "none" is no warning
        self.artefact_label.setStyleSheet("color: rgb(255, 170, 80);" if flagged else "")
        shown = self.artefact_label.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, ARTEFACT_WIDTH - 4)
        self.artefact_label.setText(shown)
        self.artefact_label.setToolTip(f"{text}\nHigh-norm patch tokens (Darcet et al. 2023): outlined dashed in "
                                       "orange on the canvas, grey when left out of the colour scale" if text else "")
        self.artefact_label.setVisible(bool(text))

    def show_artefacts(self, session: Session) -> None:
        """The session's artefact tokens in words (:func:`vitviz.document.appearance.artefact_text`), with the
        registers' share of [CLS] attention at the attention layer that goes with the view's layer."""
        layer = session.view.attention_layer(session.options)
        share = register_share(session.result, session.cache, layer)
        self.set_artefacts(artefact_text(session.artefacts(), session.artefact_grid(), layer, share))

    def say_unavailable(self, title: str, why: str | None) -> None:
        """A passing line when the view ``title`` has no map (``why``), cleared once it has one again (e.g. a target
        was chosen)."""
        if why is not None:
            self.bar.showMessage(f"{title} is not available: {why}", 8000)
        elif " is not available: " in self.bar.currentMessage():
            self.bar.clearMessage()

    @property
    def artefact_text(self) -> str:
        """The artefact part's whole text (the label may show it elided)."""
        return self._artefact_text

    def set_progress(self, done: int, total: int) -> None:
        if total > 0:
            self.busy_bar.setRange(0, 1000)
            self.busy_bar.setValue(int(1000 * done / total))
            self.busy_label.setText(f"Downloading… {done / 1e6:.0f} / {total / 1e6:.0f} MB")
        else:
            self.busy_bar.setRange(0, 0)

    def set_model(self, model, title: str, device: str, precision: str) -> None:
        if model is None:
            self.model_label.setText("no model")
            return
        spec = getattr(model, "spec", None)
        size = getattr(spec, "input_size", None)
        cfg = getattr(model, "config", None)
        arch = f"L{cfg.depth} H{cfg.num_heads} P{cfg.patch_size}" if cfg is not None else ""
        size_text = f"{size[0]}×{size[1]}" if size else "?"
        budget = getattr(getattr(spec, "preprocess", None), "max_num_patches", 0)
        if budget:  # NaFlex: each image at its own size
            size_text = f"≤{budget} patches"
        self.model_label.setText(f"<b>{title}</b> · {size_text} · {arch} · {device} · "
                                 f"{precision_label(precision, device)}")
        self.model_label.setToolTip(spec.describe() if hasattr(spec, "describe") else title)

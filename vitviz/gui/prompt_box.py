"""The prompt box of the predictions panel: text prompts for CLIP and SigLIP image towers.

Several prompts separated by ``;`` (``a cat; a dog``) make the model a zero-shot classifier over them: one map per
prompt, the predictions table shows their probabilities (softmax for CLIP, sigmoid for SigLIP) and a prompt clicked
there is the gradient target. Enter applies what is typed; clearing the box (its clear button, or Enter on an empty
box) returns to the image tower. A model without a text tower shows the box greyed out, the reason as its
placeholder and tooltip.

The box never owns state: it emits what was typed; :mod:`vitviz.gui.prompting` makes the prompt pipeline on the
worker and :meth:`PromptBox.refresh` shows the prompts in use.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QLineEdit, QVBoxLayout, QWidget

PLACEHOLDER = "Text prompts: a cat; a dog  (Enter)"
TIP = ("Type one or more phrases separated by ';' and press Enter: the image tower becomes a zero-shot classifier "
       "over them (CLIP: softmax, SigLIP: sigmoid), each prompt gets its map (LeGrad by default); click a prompt in "
       "the table to explain it. Clear the box to return to the image tower.")


class PromptBox(QWidget):
    """A line for prompts and a line saying what they are.

    Signals:
        promptsEntered(text): Enter pressed (or the box cleared: ``""``) with text other than the prompts in use.
    """

    promptsEntered = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        self.edit = QLineEdit()
        self.edit.setObjectName("prompt_box")
        self.edit.setPlaceholderText(PLACEHOLDER)
        self.edit.setClearButtonEnabled(True)
        self.edit.setToolTip(TIP)
        self.edit.returnPressed.connect(self._apply)
        self.edit.textChanged.connect(self._on_text)
        lay.addWidget(self.edit)
        self.label = QLabel("")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setVisible(False)
        lay.addWidget(self.label)
        self._prompts: list[str] = []
        self.reason: str | None = None

    @property
    def prompts(self) -> list[str]:
        """The prompts in use (as the model has them), [] for none."""
        return list(self._prompts)

    def _apply(self) -> None:
        text = self.edit.text()
        if [p.strip() for p in text.split(";")] == self._prompts:
            return  # what is in use already
        if not text.strip() and not self._prompts:
            return
        self.promptsEntered.emit(text if text.strip() else "")

    def _on_text(self, text: str) -> None:
        if not text and self._prompts and not self.edit.hasFocus():  # the clear button (it takes no focus)
            self.promptsEntered.emit("")

    def set_reason(self, reason: str | None) -> None:
        """Grey the box out with ``reason`` (the model has no text tower), or offer it (None)."""
        self.reason = reason
        self.edit.setEnabled(reason is None)
        self.edit.setHidden(reason is not None)  # a model without a text tower: no greyed, truncated row taking room
        self.edit.setPlaceholderText(PLACEHOLDER if reason is None else f"No prompts: {reason}")
        self.edit.setToolTip(TIP if reason is None else f"Text prompts need a CLIP or SigLIP model with its text "
                                                          f"tower: {reason}")

    def refresh(self, prompts: Sequence[str], probability: str = "") -> None:
        """Show the prompts in use (``probability``: ``"softmax"`` or ``"sigmoid"``), without emitting."""
        self._prompts = [str(p) for p in prompts]
        text = "; ".join(self._prompts)
        if self.edit.text() != text:
            self.edit.blockSignals(True)
            self.edit.setText(text)
            self.edit.blockSignals(False)
        n = len(self._prompts)
        self.label.setVisible(n > 0)
        if n:
            how = {"softmax": "softmax over the prompts (CLIP)",
                   "sigmoid": "sigmoid of each prompt's logit (SigLIP)"}.get(probability, probability)
            self.label.setText(f"Zero-shot over {n} prompt{'s' if n > 1 else ''}: {how}")

"""The target box of the predictions panel: what the gradient views explain, and the ways to choose it.

It shows the target of the shown result (a class, "similar to image x.png" with its value, a function's name) and
offers: any class by name or index (a classifier), the top class, and the similarity targets, "Similar to image…"
(an open image or a file), "Similar to this patch of…" (the shown image's selected query patch, or a patch of another
open image or of a file: the row and column are asked) and "Similar to a vector (.npy)…". A feature model (DINO,
DINOv2, CLIP / SigLIP towers) has no classes: the class part is hidden and the box says that its gradient views need a
similarity target.

The box never owns state: it emits what the user chose; the window's target helper (:mod:`vitviz.gui.targeting`)
asks what else is needed and re-runs the image. :meth:`TargetBox.refresh` shows the session's result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCompleter, QLabel, QLineEdit, QMenu, QToolButton, QVBoxLayout, QWidget

MENU_IMAGES = 30
"""The open images listed by name in the similarity menus (the others: "Image file…")."""
SIMILARITY_BUTTON = "Similarity target"


class TargetBox(QWidget):
    """The target's words and value, the class search, and the similarity target menu.

    Signals:
        classChosen(index): a class typed or picked in the search.
        topChosen(): "Top class" (each image's most probable class).
        imageChosen(path): "Similar to image": an open image's path, or "" for a file (asked).
        patchChosen(path): "Similar to this patch of": the shown image (its query patch), another open image or ""
            (a file); the row and column of another image are asked.
        vectorChosen(): "Similar to a vector (.npy)…" (the file is asked).
    """

    classChosen = Signal(int)
    topChosen = Signal()
    imageChosen = Signal(str)
    patchChosen = Signal(str)
    vectorChosen = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(4)
        self.label = QLabel("Gradient target: –")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.label)
        # any class as the target: type part of its name (or its index) and pick it
        self.search = QLineEdit()
        self.search.setPlaceholderText("Target any class: type a name or index…")
        self.search.setClearButtonEnabled(True)
        self.search.setToolTip("Search all class names (e.g. 'tabby'); Enter or a pick makes it the gradient target")
        self._completer = QCompleter([], self)
        self._completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self._completer.setFilterMode(Qt.MatchFlag.MatchContains)
        self._completer.setMaxVisibleItems(12)
        self._completer.activated.connect(self._on_pick)
        self.search.setCompleter(self._completer)
        self.search.returnPressed.connect(lambda: self._on_pick(self.search.text()))
        lay.addWidget(self.search)
        self.similarity = QToolButton()
        self.similarity.setText(SIMILARITY_BUTTON + " ▾")
        self.similarity.setToolTip("Explain how close the image is to another image, to a patch of an image, or to "
                                   "a stored vector (cosine similarity of the pooled embeddings)")
        self.similarity.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.similarity.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.menu = QMenu(self.similarity)
        self.menu.aboutToShow.connect(self._fill_menu)
        self.similarity.setMenu(self.menu)
        lay.addWidget(self.similarity)
        self._entries: dict[str, int] = {}
        self._labels_key: object = None
        self._images: list[str] = []
        self._shown: str | None = None
        self._query: tuple[int, int] | None = None
        self._classifier = True

    # ------------------------------------------------------------------ classes
    def class_entries(self, result: Any) -> dict[str, int]:
        """``{"tabby, tabby cat (281)": 281, ...}``: every class the model has, as the search box lists them."""
        n = int(result.logits.shape[-1])
        return {f"{result.label(i)} ({i})": i for i in range(n)}

    def _on_pick(self, text: str) -> None:
        text = text.strip()
        if not text:
            return
        index = self._entries.get(text)
        if index is None and text.isdigit() and int(text) in self._entries.values():
            index = int(text)
        if index is None:  # a unique match of what was typed
            hits = [i for k, i in self._entries.items() if text.lower() in k.lower()]
            index = hits[0] if len(hits) == 1 else None
        if index is None:
            self.label.setText(f"No single class matches “{text}”: pick one from the list")
            return
        self.search.clear()
        self.classChosen.emit(index)

    # ------------------------------------------------------------------ the menu
    def _fill_menu(self) -> None:
        """The similarity menu, from the images open and the shown result at the last refresh."""
        m = self.menu
        m.clear()
        if self._classifier:
            m.addAction("Top class (each image's most probable)", self.topChosen.emit)
            m.addSeparator()
        images = m.addMenu("Similar to image")
        for path in self._images[:MENU_IMAGES]:
            a = images.addAction(_name(path), lambda p=path: self.imageChosen.emit(p))
            a.setToolTip(path)
        if len(self._images) > MENU_IMAGES:
            images.addAction(f"… {len(self._images) - MENU_IMAGES} more open: choose its file").setEnabled(False)
        images.addSeparator()
        images.addAction("Image file…", lambda: self.imageChosen.emit(""))
        patches = m.addMenu("Similar to this patch of")
        if self._shown is not None and self._query is not None:
            r, c = self._query
            patches.addAction(f"{_name(self._shown)}: the selected patch ({r}, {c})",
                              lambda: self.patchChosen.emit(self._shown or ""))
            patches.addSeparator()
        for path in [p for p in self._images if p != self._shown][:MENU_IMAGES]:
            patches.addAction(f"{_name(path)}…", lambda p=path: self.patchChosen.emit(p)).setToolTip(path)
        patches.addAction("Image file…", lambda: self.patchChosen.emit(""))
        m.addAction("Similar to a vector (.npy)…", self.vectorChosen.emit)

    # ------------------------------------------------------------------ showing the session
    def refresh(self, session: Any, pending: str | None = None) -> None:
        """Show the target of the session's result (``pending``: the words of a target being computed)."""
        r = session.result
        if r is None:
            return
        self._images = [str(p) for p in session.images]
        if r.source not in self._images:
            self._images.append(str(r.source))
        self._shown = str(r.source)
        self._query = divmod(int(session.options.query), r.grid[1])
        self._classifier = r.num_classes != 0
        key = (id(r.labels), int(r.logits.shape[-1]), self._classifier)
        if key != self._labels_key:  # a model with other classes
            self._labels_key = key
            self._entries = self.class_entries(r) if self._classifier else {}
            self._completer.model().setStringList(list(self._entries))
        self.search.setVisible(self._classifier)
        self.search.setPlaceholderText("Target any prompt: type part of it…" if getattr(r, "head_kind", "") ==
                                       "prompts" else "Target any class: type a name or index…")
        self.search.setEnabled(r.attention_grads is not None or r.target is not None)
        self.label.setText(target_text(r, pending))


def target_text(result: Any, pending: str | None = None) -> str:
    """The box's words for ``result``: the target, its value (a target that is not a class), or why there is none."""
    if pending is not None:
        return f"Computing gradients for {pending}…"
    spec = result.target_spec
    words = result.target_text()
    if result.target is not None:
        top = result.top_k(5)
        top1 = " (top prediction)" if top and result.target == top[0][0] else ""
        p = float(result.probabilities[result.target])
        outside = "" if result.target in [c for c, _, _ in top] else f", p = {p * 100:.2g} %, not in the top 5"
        return f"Gradient target: {words}{top1}{outside}"
    if spec is not None and words:
        score = result.target_score
        value = f" · value {score:.4g}" if score is not None else ""
        return f"Gradient target: {words}{value}"
    if result.num_classes == 0:
        return (f"Gradient target: none. This model has no classifier (a feature model): its gradient views need a "
                f"similarity target ({SIMILARITY_BUTTON} ▾)")
    return "Gradient target: – (model has no classifier)"


def _name(path: str) -> str:
    return Path(path).name or path

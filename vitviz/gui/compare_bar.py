"""The Compare window's bar: what the grid compares (the layout and its views, images, layers or classes), one colour
scale per view, and the Export button.

:class:`CompareBar` shows a :class:`~vitviz.document.comparison.CompareSpec` and emits the user's changes as a new one;
the window decides (:meth:`vitviz.gui.compare_window.CompareWindow.set_spec`) and shows it back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QMenu, QPushButton, QToolButton, QWidget

from vitviz import views
from vitviz.document import comparison as cmp
from vitviz.document.session import Session
from vitviz.views.presets import STANDARD_VIEWS as DEFAULT_VIEWS


def default_spec(s: Session) -> cmp.CompareSpec:
    """The first comparison: the main window's view beside three others, for up to four open images of ``s``."""
    keys = [v.key for v in views.all_views()]
    chosen = [s.options.view] + [k for k in DEFAULT_VIEWS if k != s.options.view]
    shown = s.result.source if s.result is not None else None
    images = [shown] if shown else []
    images += [p for p in s.images if p != shown][:3]
    return cmp.CompareSpec(layout="views", views=tuple(k for k in chosen if k in keys)[:4], images=tuple(images))


class CompareBar(QWidget):
    """The choices of a comparison of ``session`` (the main window's document), showing ``spec``.

    Signals:
        changed(spec): the user chose another comparison (a :class:`~vitviz.document.comparison.CompareSpec`).
    """

    changed = Signal(object)

    def __init__(self, session: Session, spec: cmp.CompareSpec, parent: QWidget | None = None):
        super().__init__(parent)
        self.session = session
        self.spec = spec
        bar = QHBoxLayout(self)
        bar.setContentsMargins(0, 0, 0, 0)  # (as the window's own layout: no margins, its spacing)
        bar.setSpacing(4)
        self.layout_combo = QComboBox()
        for key in cmp.LAYOUTS:
            self.layout_combo.addItem(cmp.LAYOUT_TITLES[key], key)
        self.layout_combo.setToolTip("What the grid compares")
        self.views_button = self._menu_button("Views", self._fill_views_menu)
        self.images_button = self._menu_button("Images", self._fill_images_menu)
        self.layers_button = self._menu_button("Layers", self._fill_layers_menu)
        self.classes_button = self._menu_button("Classes", self._fill_classes_menu)
        self.view_combo = QComboBox()
        self.view_combo.addItem("the main window's view", "")
        for v in views.all_views():
            self.view_combo.addItem(v.title, v.key)
        self.shared_check = QCheckBox("One colour scale per view")
        self.shared_check.setToolTip("Panels that show the same view share one colour scale (robust percentile of "
                                     "all their maps); off: each panel has its own")
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Export the grid as one figure (PNG, SVG or PDF) carrying the session")
        bar.addWidget(QLabel("Compare:"))
        for w in (self.layout_combo, self.views_button, self.images_button, self.view_combo, self.layers_button,
                  self.classes_button, self.shared_check):
            bar.addWidget(w)
        bar.addStretch(1)
        bar.addWidget(self.export_button)
        self.layout_combo.currentIndexChanged.connect(lambda _: self._set(layout=self.layout_combo.currentData()))
        self.view_combo.currentIndexChanged.connect(self._on_view_combo)
        self.shared_check.toggled.connect(lambda b: self._set(shared_scale=bool(b)))
        self.show_spec(spec)

    def _menu_button(self, text: str, fill) -> QToolButton:
        b = QToolButton()
        b.setText(text)
        b.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(b)
        menu.aboutToShow.connect(lambda m=menu: fill(m))
        b.setMenu(menu)
        return b

    def _check_action(self, menu: QMenu, text: str, checked: bool, toggled) -> QAction:
        a = menu.addAction(text)
        a.setCheckable(True)
        a.setChecked(checked)
        a.toggled.connect(toggled)
        return a

    def _fill_views_menu(self, menu: QMenu) -> None:
        menu.clear()
        for v in views.all_views():
            self._check_action(menu, v.title, v.key in self.spec.views,
                               lambda on, k=v.key: self._toggle("views", k, on))

    def _fill_images_menu(self, menu: QMenu) -> None:
        menu.clear()
        for p in self.session.images:
            a = self._check_action(menu, Path(p).name, p in self.spec.images,
                                   lambda on, p=p: self._toggle("images", p, on))
            a.setToolTip(p)

    def _fill_layers_menu(self, menu: QMenu) -> None:
        menu.clear()
        r = self.session.result
        if r is None:
            return
        v = self._layers_view()
        if v.slider is None:
            menu.addAction(f"{v.title} does not change with the layer").setEnabled(False)
            return
        lo, hi = v.slider_range(r)
        chosen = self.spec.layers or cmp.default_layers(v, r)
        for x in range(lo, hi + 1):
            text = v.slider_text(x)
            self._check_action(menu, text, x in chosen, lambda on, x=x, c=chosen: self._toggle("layers", x, on, c))

    def _fill_classes_menu(self, menu: QMenu) -> None:
        menu.clear()
        r = self.session.result
        if r is None or r.attention_grads is None:
            menu.addAction("this model has no classifier").setEnabled(False)
            return
        chosen = self.spec.classes or cmp.default_classes(r)
        offered = [i for i, _, _ in r.top_k(20 if getattr(r, "head_kind", "") == "prompts" else 10)]
        offered += [c for c in chosen if c not in offered]
        probs = r.probabilities
        for c in offered:
            self._check_action(menu, f"{r.label(c)} ({float(probs[c]):.1%})", c in chosen,
                               lambda on, c=c, ch=chosen: self._toggle("classes", c, on, ch))

    def _layers_view(self) -> views.View:
        return views.get(self.spec.views[0]) if self.spec.views and self.spec.layout != "views" \
            else self.session.view

    # ------------------------------------------------------------------ the user's choices
    def _set(self, **changes: Any) -> None:
        if self.spec.layout != changes.get("layout", self.spec.layout):
            # each layout reads views differently: keep the views only where they mean the same thing
            changes.setdefault("views", () if changes["layout"] != "views" else default_spec(self.session).views)
        self.changed.emit(cmp.CompareSpec(**{**self.spec.__dict__, **changes}))

    def _toggle(self, name: str, value: Any, on: bool, current: tuple | None = None) -> None:
        have = list(current if current is not None and not getattr(self.spec, name) else getattr(self.spec, name))
        if on and value not in have:
            have.append(value)
        elif not on and value in have:
            have.remove(value)
        if name == "layers":
            have.sort()
        self._set(**{name: tuple(have)})

    def _on_view_combo(self) -> None:
        key = self.view_combo.currentData()
        if self.spec.layout != "views":
            self._set(views=(key,) if key else ())

    def show_spec(self, spec: cmp.CompareSpec) -> None:
        """Show ``spec`` (no signal: the window already shows it)."""
        self.spec = s = spec
        for w in (self.layout_combo, self.view_combo, self.shared_check):
            w.blockSignals(True)
        self.layout_combo.setCurrentIndex(cmp.LAYOUTS.index(s.layout))
        self.shared_check.setChecked(s.shared_scale)
        key = s.views[0] if s.views and s.layout != "views" else ""
        self.view_combo.setCurrentIndex(max(0, self.view_combo.findData(key)))
        for w in (self.layout_combo, self.view_combo, self.shared_check):
            w.blockSignals(False)
        views_layout = s.layout == "views"
        self.views_button.setVisible(views_layout)
        self.images_button.setVisible(views_layout)
        self.view_combo.setVisible(not views_layout)
        self.layers_button.setVisible(s.layout == "layers")
        self.classes_button.setVisible(s.layout == "classes")
        r = self.session.result
        self.classes_button.setText("Prompts" if getattr(r, "head_kind", "") == "prompts" else "Classes")

"""The model bar: which model (bundled, named, recent checkpoints, open...), device and precision.

It only shows the controller's state and emits the user's choice; the window decides what to do with it.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QActionGroup
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QMenu, QWidget

from vitviz.devices import available_devices, available_precisions, device_description, precision_label
from vitviz.model.sources import catalog  # plain data: no torch at start-up


class ModelBar(QWidget):
    """Model, device and precision combos (plus the Model menu's Device and Precision sub-menus).

    Signals:
        modelChosen(ref): a model reference, or "open-file" / "open-folder".
        deviceChosen(device), precisionChosen(precision)
    """

    modelChosen = Signal(str)
    deviceChosen = Signal(str)
    precisionChosen = Signal(str)

    def __init__(self, device_menu: QMenu, precision_menu: QMenu, parent=None):
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.model_combo = QComboBox()
        self.model_combo.setMinimumContentsLength(26)
        self.model_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_combo.activated.connect(lambda i: self.modelChosen.emit(self.model_combo.itemData(i) or ""))
        self.device_combo = QComboBox()
        self.device_combo.activated.connect(lambda i: self.deviceChosen.emit(self.device_combo.itemData(i)))
        self.precision_combo = QComboBox()
        self.precision_combo.activated.connect(
            lambda i: self.precisionChosen.emit(self.precision_combo.itemData(i)))
        for text, w in ((" Model ", self.model_combo), ("  Device ", self.device_combo),
                        ("  Precision ", self.precision_combo)):
            lay.addWidget(QLabel(text))
            lay.addWidget(w)
        self.device_menu, self.precision_menu = device_menu, precision_menu
        # one group per menu for the window's life (a group made at each filling would outlive the actions that
        # clear() deletes: one more QObject per model change); the deleted actions leave their group by themselves
        self.device_group, self.precision_group = QActionGroup(device_menu), QActionGroup(precision_menu)

    def fill_models(self, current_ref: str, current_title: str, recent: list[str]) -> None:
        """The bundled model, the named pretrained weights (cached or not), recent checkpoints, Open..."""
        c = self.model_combo
        c.blockSignals(True)
        c.clear()
        c.addItem("Bundled demo model (shapes)", "demo")
        names = list(catalog.TORCHVISION_VITS)
        if names:
            c.insertSeparator(c.count())
        for name in names:
            mb = catalog.TORCHVISION_VITS[name][3]
            state = "cached" if catalog.cache_file(name).is_file() else f"download {mb:.0f} MB"
            c.addItem(f"torchvision {name} ({state})", f"pretrained:{name}")
            c.setItemData(c.count() - 1, catalog.description(name), Qt.ItemDataRole.ToolTipRole)
        if recent:
            c.insertSeparator(c.count())
            for ref in recent:
                c.addItem(f"{Path(ref[5:]).name}  ({ref[5:]})", ref)
        c.insertSeparator(c.count())
        c.addItem("Open checkpoint…", "open-file")
        c.addItem("Open checkpoint folder…", "open-folder")
        if current_ref and c.findData(current_ref) < 0:
            c.insertItem(0, current_title, current_ref)
        c.setCurrentIndex(max(c.findData(current_ref), 0))
        c.blockSignals(False)

    def fill_devices(self, device: str, precision: str) -> None:
        """Device and precision choices (combos and menus), with the current ones checked."""
        self.device_menu.clear()
        devices = available_devices(probe=False)  # the CPU only until torch is loaded with the first model
        if device not in devices:
            devices.append(device)
        self.device_combo.blockSignals(True)
        self.device_combo.clear()
        for d in devices:
            self.device_combo.addItem(d, d)
        self.device_combo.blockSignals(False)
        for d in devices:
            a = self.device_menu.addAction(device_description(d))
            a.setCheckable(True)
            a.setChecked(d == device)
            a.triggered.connect(lambda _=False, d=d: self.deviceChosen.emit(d))
            self.device_group.addAction(a)
        self.precision_menu.clear()
        self.precision_combo.blockSignals(True)
        self.precision_combo.clear()
        for p in available_precisions(device):
            a = self.precision_menu.addAction(precision_label(p, device))  # "auto (bf16)": what auto chose
            a.setCheckable(True)
            a.setChecked(p == precision)
            a.triggered.connect(lambda _=False, p=p: self.precisionChosen.emit(p))
            self.precision_group.addAction(a)
            self.precision_combo.addItem(p, p)  # short: the toolbar's width; the menu and status bar say more
            if p == "auto":
                self.precision_combo.setItemData(self.precision_combo.count() - 1,
                                                 f"{precision_label(p, device)}: bf16 where the hardware multiplies "
                                                 "bf16 natively, fp32 elsewhere", Qt.ItemDataRole.ToolTipRole)
        self.precision_combo.setCurrentIndex(max(0, self.precision_combo.findData(precision)))
        self.precision_combo.blockSignals(False)
        self.device_combo.blockSignals(True)
        self.device_combo.setCurrentIndex(max(0, self.device_combo.findData(device)))
        self.device_combo.blockSignals(False)

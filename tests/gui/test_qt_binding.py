"""The Qt binding must not leak references to None/True/False: PySide6 6.12.0 drops one per Qt call returning None,
and CPython < 3.12 aborts ("none_dealloc") once None's count reaches zero: the app died after minutes of use."""

import sys

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel


def test_qt_calls_keep_the_reference_counts_of_none_and_bools(qtbot):
    label = QLabel()
    qtbot.addWidget(label)
    obj = QObject()
    before = sys.getrefcount(None), sys.getrefcount(True), sys.getrefcount(False)
    for i in range(2000):
        obj.setObjectName("x")
        label.setText("y")
        label.setVisible(bool(i % 2))
    after = sys.getrefcount(None), sys.getrefcount(True), sys.getrefcount(False)
    assert all(abs(a - b) < 200 for a, b in zip(after, before)), (before, after)

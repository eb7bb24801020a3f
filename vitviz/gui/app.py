"""Entry point of the desktop app: ``run_gui(images, model=None, device=None)`` (called by ``vitviz``)."""

from __future__ import annotations

import signal
import sys
import traceback
from pathlib import Path

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QMessageBox

from vitviz.gui.main_window import MainWindow
from vitviz.gui.settings import APPLICATION, ORGANIZATION
from vitviz.model.sources.refs import parse_model_ref


def dark_palette() -> QPalette:
    p = QPalette()
    base, alt, text, mid = QColor(37, 37, 40), QColor(48, 48, 52), QColor(225, 225, 228), QColor(62, 62, 68)
    p.setColor(QPalette.ColorRole.Window, alt)
    p.setColor(QPalette.ColorRole.WindowText, text)
    p.setColor(QPalette.ColorRole.Base, base)
    p.setColor(QPalette.ColorRole.AlternateBase, alt)
    p.setColor(QPalette.ColorRole.ToolTipBase, QColor(20, 20, 22))
    p.setColor(QPalette.ColorRole.ToolTipText, text)
    p.setColor(QPalette.ColorRole.Text, text)
    p.setColor(QPalette.ColorRole.Button, mid)
    p.setColor(QPalette.ColorRole.ButtonText, text)
    p.setColor(QPalette.ColorRole.BrightText, QColor(255, 80, 80))
    p.setColor(QPalette.ColorRole.Highlight, QColor(0, 150, 190))
    p.setColor(QPalette.ColorRole.HighlightedText, QColor(255, 255, 255))
    p.setColor(QPalette.ColorRole.Link, QColor(80, 190, 230))
    p.setColor(QPalette.ColorRole.PlaceholderText, QColor(140, 140, 145))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(120, 120, 125))
    return p


def make_app(argv: list[str] | None = None) -> QApplication:
    """The QApplication (created once), with vitviz's names, Fusion style and a dark palette."""
    app = QApplication.instance()
    if app is None:
        app = QApplication(argv if argv is not None else [sys.argv[0]])
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName("vitviz")
    app.setStyle("Fusion")
    app.setPalette(dark_palette())
    return app  # type: ignore[return-value]


def install_excepthook() -> None:
    """Show any exception that escapes a Qt slot in a dialog as well as on stderr (a user may have no terminal)."""
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        previous(exc_type, exc, tb)
        if issubclass(exc_type, KeyboardInterrupt):
            return
        try:
            box = QMessageBox(QMessageBox.Icon.Critical, "Unexpected error", f"{exc_type.__name__}: {exc}")
            box.setDetailedText(text)
            box.exec()
        except Exception:  # noqa: BLE001
            pass

    sys.excepthook = hook


def run_gui(images: list[str], model: str | None = None, device: str | None = None,
            settings: QSettings | None = None, *, module=None, note: str | None = None,
            precision: str | None = None) -> int:
    """Open the main window with ``images`` (the bundled samples when empty) and run the event loop.

    Args:
        images: image files to open.
        model: checkpoint path or model name (:func:`vitviz.model.sources.refs.parse_model_ref`; default: the remembered
            model, else the bundled demo).
        device: torch device (default: the remembered one, else CPU).
        precision: auto, fp32, bf16 or fp16 (default: the remembered one, else auto).
        module: an already-built model to show instead (``vitviz --model file.py:Class``; see
            :func:`vitviz.pipeline.open_adapted`); ``note`` is shown in the status bar.

    Returns:
        The exit code of the event loop.
    """
    ref = parse_model_ref(model) if model is not None else None  # raises before any window opens
    app = make_app()
    install_excepthook()
    if module is not None:
        win = MainWindow(settings=settings, model=module, model_key="memory", device=device, precision=precision,
                         load_samples=not images)
    else:
        win = MainWindow(settings=settings, model_key=ref, device=device, precision=precision,
                         load_samples=not images)
    win.show()
    if note:
        win.statusBar().showMessage(note, 15000)
    if images:  # read once the window is on screen (the first paint does not wait for them)
        QTimer.singleShot(0, lambda: win.open_images([str(Path(p)) for p in images]))
    # Ctrl+C in the terminal closes the window cleanly (Python only sees signals while it runs: wake it up)
    signal.signal(signal.SIGINT, lambda *_: win.close())
    ticker = QTimer()
    ticker.timeout.connect(lambda: None)
    ticker.start(250)
    return int(app.exec())

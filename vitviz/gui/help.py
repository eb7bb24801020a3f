"""Help texts: the keyboard shortcuts (view keys from the registry) and About."""

from __future__ import annotations

import PySide6
from PySide6.QtCore import qVersion

from vitviz import __version__, views
from vitviz.devices import device_description


def shortcut_rows() -> list[tuple[str, str]]:
    """The keyboard shortcuts (the view keys come from the registry)."""
    keys = [k for k in (views.shortcut(v) for v in views.all_views()) if k]
    view_keys = f"{keys[0]} ... {keys[-1]}" if len(keys) > 1 else (keys[0] if keys else "")
    return [
        ("Left / Right", "previous / next layer"),
        ("Home / End", "first / last layer"),
        ("Up / Down", "previous / next head (mean, max, min, head 0 ...)"),
        (view_keys, "choose the view"),
        ("Click on the image", "select the query patch"),
        ("Mouse wheel / drag", "zoom / pan"),
        ("F / double-click", "fit the image to the window"),
        ("G", "heads panel: this layer / all layers"),
        ("PageUp / PageDown", "previous / next image"),
        ("Ctrl+O", "open images"),
        ("Ctrl+V", "paste an image"),
        ("Ctrl+E", "export the view as a figure (PNG at print size, SVG, PDF)"),
        ("Ctrl+Shift+E", "export all heads of this layer as one figure"),
        ("Ctrl+Alt+E", "export the view over every layer (GIF, APNG, MP4)"),
        ("Ctrl+C", "copy the view to the clipboard"),
        ("Ctrl+Z / Ctrl+Shift+Z", "undo / redo a change of view, layer, head, patch, display option or target"),
        ("F1", "this list"),
    ]


def shortcuts_html() -> str:
    rows = "".join(f"<tr><td style='padding-right:16px'><b>{k}</b></td><td>{v}</td></tr>" for k, v in shortcut_rows())
    return f"<table>{rows}</table>"


def about_html(model_title: str, device: str, precision: str) -> str:
    import pyqtgraph  # (not at start-up: the About box is the only reader of its version here)
    import torch  # loaded with the first model (the window shows before it)

    return (f"<h3>vitviz {__version__}</h3><p>See what a Vision Transformer looks at.</p>"
            f"<table><tr><td>torch</td><td>{torch.__version__}</td></tr>"
            f"<tr><td>Qt</td><td>{qVersion()} (PySide6 {PySide6.__version__})</td></tr>"
            f"<tr><td>pyqtgraph</td><td>{pyqtgraph.__version__}</td></tr>"
            f"<tr><td>device</td><td>{device_description(device)}, {precision}</td></tr>"
            f"<tr><td>model</td><td>{model_title}</td></tr></table>")

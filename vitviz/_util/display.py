"""Can a window open here? Asked before Qt is imported or a QApplication created: when Qt cannot start a platform
(no display, no platform plugin, a plugin's system library missing) it aborts the whole process, which in a Jupyter
kernel or a user's script loses their work. Standard library only (no Qt is imported or loaded here).

:func:`display_problem` returns why a window cannot open, in words, or None; the front ends say it in one line
(``vitviz`` exits 2, ``vitviz.show`` raises :class:`NoDisplay`) or choose another viewer.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import sys
from pathlib import Path

# the platforms that need no display server
HEADLESS = ("offscreen", "minimal", "vnc", "linuxfb", "eglfs", "minimalegl", "vkkhrdisplay")


class NoDisplay(RuntimeError):
    """No window can open in this process (the message says why and what still works)."""


def qt_plugins_folder() -> Path | None:
    """PySide6's ``Qt/plugins/platforms`` folder, found without importing PySide6 (None: PySide6 is not installed)."""
    try:
        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "Qt" / "plugins" / "platforms"


def _app_running() -> bool:
    """A QApplication already exists in this process (Qt started a platform: a window can open)."""
    widgets = sys.modules.get("PySide6.QtWidgets")
    app = getattr(widgets, "QApplication", None)
    try:
        return app is not None and app.instance() is not None
    except Exception:  # noqa: BLE001 - a half-imported Qt: not running
        return False


def display_problem(environ: dict[str, str] | None = None, platform: str | None = None) -> str | None:
    """Why a Qt window cannot open in this process (one phrase), or None when it can (or cannot be told without
    starting Qt: on macOS and Windows a session has a display).

    Checked: PySide6 installed; the platform Qt would pick (``QT_QPA_PLATFORM``, else Wayland or X11 on Linux and
    the BSDs) has its plugin; X11 and Wayland have a display to connect to (``DISPLAY`` / ``WAYLAND_DISPLAY``, the
    case of SSH sessions, containers and Jupyter kernels on servers); X11's plugin has its ``libxcb-cursor`` (Qt
    6.5+ aborts without it).
    """
    env = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if environ is None and _app_running():
        return None
    plugins = qt_plugins_folder()
    if plugins is None:
        return "PySide6 (Qt) is not installed"
    wanted = env.get("QT_QPA_PLATFORM", "").split(":", 1)[0].strip().lower()
    if wanted:
        if plugins.is_dir() and not any(plugins.glob(f"*q{wanted}.*")):
            known = sorted(p.name.split(".")[0].removeprefix("libq").removeprefix("q") for p in plugins.glob("*q*.*"))
            return (f"QT_QPA_PLATFORM={wanted[:40]} names no Qt platform plugin (installed: "
                    f"{', '.join(known) or 'none'})")
        if wanted in HEADLESS:
            return None
    if not (platform.startswith("linux") or "bsd" in platform):
        return None
    display, wayland = env.get("DISPLAY", "").strip(), env.get("WAYLAND_DISPLAY", "").strip()
    if wanted in ("", "xcb") and not display and not (wayland and wanted == ""):
        return ("no display (DISPLAY and WAYLAND_DISPLAY are not set: an SSH session without -X, a container, a "
                "server's Jupyter kernel)" if wanted == "" else "no X11 display (DISPLAY is not set)")
    if wanted.startswith("wayland") and not wayland:
        return "no Wayland display (WAYLAND_DISPLAY is not set)"
    if (wanted == "xcb" or (wanted == "" and not wayland)) and ctypes.util.find_library("xcb-cursor") is None:
        return ("Qt's X11 plugin needs the system library libxcb-cursor (install libxcb-cursor0, or xcb-cursor0: "
                "Qt 6.5+ cannot start without it)")
    return None

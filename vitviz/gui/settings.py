"""Everything the window remembers between runs, in one place (``QSettings``, or the INI file ``$VITVIZ_SETTINGS``).

Values read back are checked (a hand-edited or stale file never breaks the start): unknown views, colormaps or
devices fall back to the defaults. Which view options are remembered, under which key, and what is valid comes from
the option table (:mod:`vitviz.views.options`: the rows with a ``setting`` key).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QSettings

from vitviz import views
from vitviz.views.options import all_options, parse
from vitviz.views.presets import FIRST_VIEW  # noqa: F401 - the window reads it from here

ORGANIZATION = "vitviz"
APPLICATION = "vitviz"
MAX_RECENT = 10
MAX_RECENT_MODELS = 5


def default_settings() -> QSettings:
    """The user's settings (``QSettings("vitviz", "vitviz")``), or the INI file named by ``$VITVIZ_SETTINGS``."""
    path = os.environ.get("VITVIZ_SETTINGS")
    if path:
        return QSettings(path, QSettings.Format.IniFormat)
    return QSettings(ORGANIZATION, APPLICATION)


def _list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    return [str(x) for x in (value or [])]


class Prefs:
    """Typed access to the settings the window keeps."""

    def __init__(self, settings: QSettings | None = None):
        self.qsettings = settings if settings is not None else default_settings()

    def value(self, key: str, default: Any = None) -> Any:
        return self.qsettings.value(key, default)

    def set(self, key: str, value: Any) -> None:
        self.qsettings.setValue(key, value)

    # ------------------------------------------------------------------ window layout
    def geometry(self) -> QByteArray | None:
        g = self.qsettings.value("geometry")
        return g if isinstance(g, (QByteArray, bytes)) else None

    def window_state(self) -> QByteArray | None:
        s = self.qsettings.value("windowState")
        return s if isinstance(s, (QByteArray, bytes)) else None

    # ------------------------------------------------------------------ view options
    def view_options(self, first_view: str | None = None) -> dict[str, Any]:
        """The remembered options (the rows of the option table with a ``setting`` key), only those that are valid
        today (:func:`vitviz.views.options.parse`; a view must be registered); ``first_view``: the view when none
        is remembered (the app's first start: :data:`FIRST_VIEW`)."""
        opts: dict[str, Any] = {} if first_view is None or self.remembers("view") else {"view": first_view}
        for row in all_options():
            if row.setting is None or row.name in opts:
                continue
            try:
                value = parse(row.name, self.qsettings.value(row.setting, row.default))
                if row.kind == "view":
                    views.get(value)
            except (TypeError, ValueError):
                continue
            opts[row.name] = value
        return opts

    def remembers(self, name: str) -> bool:
        """Whether the option ``name`` was saved by an earlier session (its row's ``setting`` key is set)."""
        row = next((r for r in all_options() if r.name == name), None)
        return row is not None and row.setting is not None and self.qsettings.contains(row.setting)

    def save_view_options(self, options: Any) -> None:
        """Remember the options that have a ``setting`` key in the option table."""
        for row in all_options():
            if row.setting is not None:
                self.qsettings.setValue(row.setting, getattr(options, row.name))

    # ------------------------------------------------------------------ model
    def model_ref(self) -> str:
        return str(self.qsettings.value("model", "demo") or "demo")

    def device(self) -> str:
        return str(self.qsettings.value("device", "cpu"))

    def precision(self) -> str:
        return str(self.qsettings.value("precision", "auto"))  # bf16 where the hardware has it

    def save_model(self, ref: str, device: str, precision: str) -> None:
        s = self.qsettings
        s.setValue("device", device)
        s.setValue("precision", precision)
        if ref and ref != "memory" and not ref.startswith("random:"):
            s.setValue("model", ref)

    def photo_model(self) -> str:
        """The named model photos open with instead of the bundled shapes model ("" until one was used); see
        :func:`vitviz.model.sources.catalog.photo_default`."""
        ref = str(self.qsettings.value("photo_model", "") or "")
        return ref if ref.startswith(("hub:", "pretrained:")) else ""

    def set_photo_model(self, ref: str) -> None:
        """Remember ``ref`` (a ``hub:`` or ``pretrained:`` reference) as the model for photos."""
        if ref.startswith(("hub:", "pretrained:")):
            self.qsettings.setValue("photo_model", ref)

    def recent_models(self) -> list[str]:
        return [x for x in _list(self.qsettings.value("recent_models", [])) if x.startswith("file:")]

    def add_recent_model(self, ref: str) -> None:
        if ref.startswith("file:"):
            rec = [k for k in self.recent_models() if k != ref]
            self.qsettings.setValue("recent_models", ([ref] + rec)[:MAX_RECENT_MODELS])

    # ------------------------------------------------------------------ files and folders
    def last_folder(self) -> str:
        f = str(self.qsettings.value("last_folder", "") or "")
        return f if f and os.path.isdir(f) else str(Path.home())

    def remember_folder(self, path: str) -> None:
        folder = str(Path(path) if os.path.isdir(path) else Path(path).parent)
        self.qsettings.setValue("last_folder", folder)

    def export_folder(self) -> str:
        return str(self.qsettings.value("export_folder", "") or "") or self.last_folder()

    def set_export_folder(self, folder: str) -> None:
        self.qsettings.setValue("export_folder", folder)

    def recent_files(self) -> list[str]:
        return _list(self.qsettings.value("recent_files", []))

    def add_recent_file(self, path: str) -> None:
        rec = [p for p in self.recent_files() if p != path]
        self.qsettings.setValue("recent_files", ([path] + rec)[:MAX_RECENT])

    def clear_recent_files(self) -> None:
        self.qsettings.setValue("recent_files", [])

    def sync(self) -> None:
        self.qsettings.sync()

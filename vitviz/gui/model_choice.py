"""Which model the window runs: the user's choice (model bar, Model menu, checkpoint files, a typed name), asked
before a download and shown while it downloads, cancelled on request, and the switch to a model for photos.

:class:`ModelChoice` turns a choice into a :meth:`~vitviz.gui.controller.Controller.load` and keeps the model bar,
the Model menu's list and the download dialog in step with the controller's signals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from vitviz.gui.actions import WindowActions
from vitviz.gui.controller import Controller
from vitviz.gui.dialogs import Dialogs, DownloadDialog, confirm_download
from vitviz.gui.settings import Prefs
from vitviz.gui.toolbar import ModelBar
from vitviz.model.sources import catalog  # plain data: no torch at start-up
from vitviz.model.sources.refs import describe_ref, parse_model_ref


class ModelChoice(QObject):
    """The window's model choices (see the module docstring).

    Args:
        parent: the window (the download dialog's parent).
        controller, prefs, dialogs: the window's model and jobs, settings and dialogs.
        model_bar: the toolbar's model, device and precision combos.
        actions: the window's actions (the Model menu's list of named models).
        status: the status bar's ``showMessage``; ``show_error``: the one place errors reach the user.
        demo_chosen: the bundled shapes model was named by the caller: photos do not switch away from it.
    """

    def __init__(self, parent: QWidget, controller: Controller, prefs: Prefs, dialogs: Dialogs, *,
                 model_bar: ModelBar, actions: WindowActions, status: Callable[[str, int], None],
                 show_error: Callable[..., None], demo_chosen: bool = False):
        super().__init__(parent)
        self.controller, self.prefs, self.dialogs = controller, prefs, dialogs
        self.model_bar, self.actions = model_bar, actions
        self.status, self.show_error = status, show_error
        # the bundled model named by the caller or picked by the user: photos do not switch away from it
        self.demo_chosen = demo_chosen
        self.download_dialog = DownloadDialog(parent, self.cancel)
        model_bar.modelChosen.connect(self.choose)
        model_bar.deviceChosen.connect(controller.set_device)
        model_bar.precisionChosen.connect(controller.set_precision)
        controller.modelChanged.connect(self._on_model_changed)
        controller.failed.connect(self._on_failed)
        controller.busy.connect(self._on_busy)
        controller.progress.connect(self._on_progress)
        self.refresh_menu()

    # ------------------------------------------------------------------ choices
    def load(self, ref: str, *, initial: bool = False) -> None:
        """Load a model reference in the background (asks before a download unless named at start)."""
        if not initial and ref == "demo":
            self.demo_chosen = True
        if not initial and not confirm_download(self.dialogs, ref):
            self.fill_bar()
            if self.controller.model is None:  # first start without the remembered weights: use the demo model
                self.load("demo", initial=True)
            return
        self.controller.load(ref)
        self.fill_bar()

    def cancel(self) -> None:
        """Stop the model being loaded (the bundled model when none was in use yet)."""
        self.download_dialog.close()
        self.controller.cancel_load()
        self.fill_bar()
        self.status("Model loading cancelled", 4000)
        if self.controller.model is None:  # cancelled before any model was in use: the bundled one
            self.load("demo", initial=True)

    def choose(self, ref: str) -> None:
        """A model picked in the model bar or the Model menu ("open-file" / "open-folder": ask for a checkpoint)."""
        if ref in ("open-file", "open-folder"):
            self.open_checkpoint_dialog(ref == "open-folder")
        elif ref and ref != self.controller.ref:
            self.load(ref)

    def choose_photo_model(self, ref: str) -> None:
        """A button of the first-run offer: load ``ref`` (the button showed its size: no second question); once
        loaded it is remembered as the model for photos."""
        if ref != self.controller.ref and ref != self.controller.loading:
            self.load(ref, initial=True)

    def switch_for_photo(self, source: str) -> None:
        """A photo opened with the bundled shapes model switches to the model for photos when one is cached
        (:func:`vitviz.model.sources.catalog.photo_default`), unless the user chose the shapes model."""
        c = self.controller
        if (c.loading or c.ref) != "demo" or self.demo_chosen or not catalog.is_photo(source):
            return
        ref = catalog.photo_default(self.prefs.photo_model())
        if ref is not None:
            self.status(f"Photos open with {describe_ref(ref)} (the bundled model only knows 8 synthetic shapes); "
                        "the Model menu changes it", 10000)
            self.load(ref, initial=True)

    def open_checkpoint(self, path: str) -> None:
        self.prefs.remember_folder(path)
        self.load(f"file:{path}")

    def open_checkpoint_dialog(self, folder: bool = False) -> None:
        ask = self.dialogs.open_checkpoint_folder if folder else self.dialogs.open_checkpoint_file
        p = ask(self.prefs.last_folder())
        if p:
            self.open_checkpoint(p)
        else:
            self.fill_bar()

    def open_by_name(self) -> None:
        """Ask for a model name (any form :func:`vitviz.model.sources.refs.parse_model_ref` accepts) and load it."""
        text = self.dialogs.ask_model_name()
        if not text:
            return
        try:
            ref = parse_model_ref(text)
        except (ValueError, OSError) as e:  # ModelNameError (a ValueError): one short line naming what was typed
            self.show_error("Open model by name", str(e))  # and why it is no model; the window is unchanged
            return
        if ref != self.controller.ref:
            self.load(ref)

    # ------------------------------------------------------------------ what is shown
    def fill_bar(self) -> None:
        """The model bar names the model in use, or the one being loaded (never the previous one meanwhile)."""
        c = self.controller
        if c.loading:
            self.model_bar.fill_models(c.loading, f"{describe_ref(c.loading)} (loading…)", self.prefs.recent_models())
        else:
            self.model_bar.fill_models(c.ref, c.title(), self.prefs.recent_models())

    def refresh_menu(self) -> None:
        """The Model menu's sizes and cache marks, and a check at the model in use (or being loaded)."""
        self.actions.refresh_models(self.controller.loading or self.controller.ref)

    def _on_model_changed(self, _note: str) -> None:
        c = self.controller
        self.prefs.add_recent_model(c.ref)
        self.prefs.set_photo_model(c.ref)  # the last named model used is the one photos open with
        self.download_dialog.close()
        self.fill_bar()
        self.model_bar.fill_devices(c.device, c.precision)

    def _on_failed(self, kind: str, _title: str, _message: str, _detail: str, _subject: str) -> None:
        if kind == "model":
            self.download_dialog.close()
            self.fill_bar()
            self.model_bar.fill_devices(self.controller.device, self.controller.precision)

    def _on_busy(self, _text: str, _cancellable: bool) -> None:
        if not self.controller.loading:
            self.download_dialog.close()

    def _on_progress(self, done: int, total: int) -> None:
        loading = self.controller.loading
        if loading:
            self.download_dialog.update(describe_ref(loading), done, total)


def offer_photo_models(predictions: Any, result: Any, model_ref: str) -> None:
    """The first-run offer in the predictions panel: shown for a photo analysed by the bundled shapes model."""
    show = result is not None and model_ref == "demo" and catalog.is_photo(result.source)
    offers = catalog.photo_offers() if show else []
    predictions.set_offer(offers, {m.ref for m in offers if catalog.ref_is_cached(m.ref)})

"""Feature PCA's "Fit over all open images" in the window: the other open images' tokens read on the worker.

A joint fit needs the patch tokens of every open image (:mod:`vitviz.document.open_tokens`). Whenever the view is
redrawn, :class:`TokenReader` asks the session which images the fit still lacks and runs a few of them on the worker
(one forward pass without gradients per image, :data:`BATCH` at a time so that an image the user asks for waits at
most for one batch); as each batch arrives the tokens are added and the view redrawn, which asks for the next batch.
The tokens belong to the model that made them: another model forgets them. An image that cannot be read is left out
of the fit (and said in the status bar once).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject

from vitviz.document.open_tokens import OpenImageTokens
from vitviz.document.session import Session
from vitviz.gui.controller import Controller
from vitviz.gui.worker import Job

KIND = "tokens"  # the worker's job kind
BATCH = 4  # images per job


class TokenReader(QObject):
    """Reads the open images' tokens for the session's joint fits.

    Args:
        parent: the window (the Qt parent only).
        session, controller: the window's document (its :attr:`~vitviz.document.session.Session.joint` is set here)
            and its model and worker.
        redraw: redraws the view from the session (the window's ``refresh_view``).
        status: the status bar's ``showMessage``.
    """

    def __init__(self, parent: QObject, *, session: Session, controller: Controller, redraw: Callable[[], None],
                 status: Callable[[str, int], None]):
        super().__init__(parent)
        self.session, self.controller, self.redraw, self.status = session, controller, redraw, status
        self.tokens = session.joint = OpenImageTokens()
        self._asked: tuple[str, ...] = ()
        controller.modelChanged.connect(self._on_model_changed)
        controller.runner.done.connect(self._on_done)
        controller.runner.failed.connect(self._on_failed)

    def _on_model_changed(self, _note: str = "") -> None:
        self.tokens.adopt(self.controller.pipeline)
        if self._asked:
            self.controller.runner.cancel(KIND)
            self._asked = ()

    def follow(self) -> None:
        """After a redraw: read the next images the session's joint fit lacks (nothing when it lacks none)."""
        c = self.controller
        if c.closing or c.pipeline is None or self._asked or c.is_busy("model"):
            return
        self.tokens.adopt(c.pipeline)
        missing = self.session.joint_missing()[:BATCH]
        if missing:
            self._read(missing)

    def _read(self, sources: list[str]) -> None:
        c = self.controller
        pipeline = c.pipeline
        memory = {s: c.memory_images[s] for s in sources if s in c.memory_images}

        def work(job: Job):
            from vitviz.imaging import load_image

            images, names, failed = [], [], {}
            for s in sources:
                if job.cancelled:
                    return pipeline, {}, failed
                try:
                    images.append(memory[s] if s in memory else load_image(s).image)
                    names.append(s)
                except Exception as e:  # noqa: BLE001 - ImageError names the file and the cause
                    failed[s] = str(e).splitlines()[0] if str(e) else type(e).__name__
            out = {}
            if images:
                for res in pipeline.run_batch(images, sources=names, gradients=False):
                    out[res.source] = (res.tokens[:, res.num_prefix_tokens:].clone(), res.grid)
            return pipeline, out, failed

        self._asked = tuple(sources)
        n = len(sources)
        c.busy.emit(f"Reading {n} open image{'s' * (n > 1)} for the joint feature PCA…", False)
        c.runner.submit(KIND, work, subject=", ".join(Path(s).name for s in sources), title="Could not read the "
                        "open images")

    def _on_done(self, kind: str, payload: Any, job: Job) -> None:
        if kind != KIND or self.controller.closing:
            return
        self._asked = ()
        pipeline, out, failed = payload
        if pipeline is not self.controller.pipeline:
            return  # another model since: its tokens would not fit
        self.tokens.adopt(pipeline)
        for source, (tokens, grid) in out.items():
            self.tokens.add(source, tokens, grid=grid, num_prefix_tokens=0)
        if failed:
            self.tokens.failed.update(failed)
            first = next(iter(failed.items()))
            self.status(f"Left out of the joint feature PCA: {os.path.basename(first[0])} ({first[1]})"
                        + (f" and {len(failed) - 1} more" if len(failed) > 1 else ""), 10000)
        self.redraw()

    def _on_failed(self, kind: str, title: str, message: str, job: Job) -> None:
        if kind != KIND or self.controller.closing:
            return
        # the model failed on these images (memory ...): leave them out rather than asking again without end
        # (the message reaches the user through the controller's one path, as every job's failure)
        self.tokens.failed.update(self._asked)
        self._asked = ()
        self.redraw()

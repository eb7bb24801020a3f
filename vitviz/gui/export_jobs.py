"""Exports off the GUI thread: a figure or an animation drawn and written on a worker thread of its own, with a progress
dialog that can cancel.

A print-size figure takes seconds to draw (2-13 s for ViT-Ti's heads at print size); on the GUI thread the window froze
for that long. Here the drawing runs on a :class:`~vitviz.gui.worker.TaskRunner` made at the first export (no thread
at start-up), the window stays live, and Cancel stops the job at its next step. Every writer it runs
(:func:`vitviz.render.figures.save`, :func:`~vitviz.render.figures.save_animation`) asks its ``progress`` callback
before each step and before writing, and writes atomically: after a cancel the file is complete (the cancel came after
the last step) or absent, never half-written; :attr:`ExportTask.out` says which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QProgressDialog, QWidget

from vitviz.gui.worker import Job, TaskRunner, split_detail

Progress = Callable[[int, int], bool]  # progress(done, total) -> go on


@dataclass(eq=False)
class ExportTask:
    """One export in flight. ``state``: ``"running"``, then ``"done"`` (``out`` written in full), ``"failed"``
    (``message`` says why) or ``"cancelled"`` (nothing written)."""

    path: Path
    title: str
    job: Job | None = None
    out: Path | None = None
    state: str = "running"
    message: str = ""
    dialog: QProgressDialog | None = field(default=None, repr=False)

    @property
    def ended(self) -> bool:
        return self.state != "running"

    def cancel(self) -> None:
        """Ask the export to stop at its next step (what the dialog's Cancel does)."""
        if self.job is not None:
            self.job.cancel()


class ExportJobs(QObject):
    """Runs exports on a worker thread, one progress dialog each.

    Args:
        parent: the window the progress dialogs belong to (window-modal: the window stays drawn, not usable).

    Signals:
        ended(task): an :class:`ExportTask` finished, failed or was cancelled (on the GUI thread).
    """

    ended = Signal(object)

    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.parent_widget = parent
        self.runner: TaskRunner | None = None
        self.tasks: dict[str, ExportTask] = {}
        self.count = 0

    def start(self, path: Path, title: str, write: Callable[[Progress], Path], *, steps: int = 0) -> ExportTask:
        """Run ``write(progress)`` on the worker thread with a progress dialog titled ``title`` (``steps``: how many
        progress steps it reports, 0: a busy bar). Returns the task at once; :attr:`ended` follows."""
        if self.runner is None:
            self.runner = TaskRunner(self)
            self.runner.done.connect(self._on_done)
            self.runner.failed.connect(self._on_failed)
            self.runner.cancelled.connect(self._on_cancelled)
            self.runner.progress.connect(self._on_progress)
        self.count += 1
        kind = f"export-{self.count}"  # each export its own kind: a second one never supersedes the first
        task = ExportTask(path=path, title=title)

        def run(job: Job) -> Path:
            task.out = write(job.report)  # (kept before the worker looks at the cancel flag: written is written)
            return task.out

        task.dialog = self._dialog(task, steps)
        self.tasks[kind] = task
        task.job = self.runner.submit(kind, run, subject=str(path), title="Export failed")
        return task

    def _dialog(self, task: ExportTask, steps: int) -> QProgressDialog:
        dlg = QProgressDialog(f"Writing {task.path.name}…", "Cancel", 0, steps, self.parent_widget)
        dlg.setWindowTitle(task.title)
        dlg.setWindowModality(Qt.WindowModality.WindowModal)
        dlg.setAutoClose(False)
        dlg.setAutoReset(False)
        dlg.setMinimumDuration(300)  # a quick export never flashes a dialog
        dlg.setValue(0)
        dlg.canceled.connect(lambda: (task.cancel(), dlg.setLabelText("Cancelling…")))
        return dlg

    # ------------------------------------------------------------------ the runner's signals (GUI thread)
    def _end(self, kind: str, state: str, message: str = "") -> None:
        task = self.tasks.pop(kind, None)
        if task is None:
            return
        task.state, task.message = state, message
        if task.dialog is not None:
            task.dialog.canceled.disconnect()
            task.dialog.close()
            task.dialog.deleteLater()
            task.dialog = None
        self.ended.emit(task)

    def _on_done(self, kind: str, result: Any, job: Job) -> None:
        self._end(kind, "done")

    def _on_failed(self, kind: str, title: str, message: str, job: Job) -> None:
        self._end(kind, "failed", split_detail(message)[0])

    def _on_cancelled(self, kind: str, job: Job) -> None:
        task = self.tasks.get(kind)
        self._end(kind, "done" if task is not None and task.out is not None else "cancelled")

    def _on_progress(self, kind: str, done: int, total: int) -> None:
        task = self.tasks.get(kind)
        if task is not None and task.dialog is not None and task.dialog.maximum() > 0:
            task.dialog.setValue(done)

    def shutdown(self) -> None:
        """Cancel what runs and stop the thread (the window closes)."""
        for task in list(self.tasks.values()):
            task.cancel()
        if self.runner is not None:
            self.runner.shutdown()

"""Long work off the GUI thread: one worker thread (a daemon Python thread), numbered requests, the newest request of a
kind wins.

``TaskRunner.submit(kind, fn, subject=...)`` queues ``fn(job)`` on the worker thread. A job that is superseded (a newer
one of the same kind was submitted) is skipped if it has not started yet, asked to stop if it has (``job.cancelled``),
and its result, if any, is dropped on the GUI thread. Every exception is turned into one message naming the subject
(file) and the cause, and emitted through :attr:`TaskRunner.failed`: the one place errors are reported.
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, Qt, Signal, Slot


@dataclass(eq=False)
class Job:
    """One request. ``fn(job)`` runs on the worker thread; it may call :meth:`report` and check :attr:`cancelled`."""

    kind: str
    id: int
    fn: Callable[["Job"], Any] | None  # None once the worker took it
    subject: str = ""
    title: str = "Error"
    _cancel: threading.Event = field(default_factory=threading.Event)
    _runner: "TaskRunner | None" = None

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        self._cancel.set()

    def report(self, done: int, total: int) -> bool:
        """Progress from inside ``fn``; returns False when the job was cancelled (for download callbacks)."""
        if self._runner is not None and not self._runner._closed:
            self._runner._worker.progress.emit(self, int(done), int(total))
        return not self.cancelled


def describe_error(exc: BaseException, subject: str = "") -> str:
    """A message for a dialog: names the file (``subject``) and the cause, with a hint for common failures."""
    import torch

    msg = str(exc).strip() or type(exc).__name__
    if isinstance(exc, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in msg.lower():
        hint = ("The GPU ran out of memory. Choose a smaller model, a lower precision (bf16/fp16) or the CPU "
                "in the toolbar.")
        first = msg.splitlines()[0]
        return f"{subject}: {first}\n\n{hint}" if subject else f"{first}\n\n{hint}"
    if type(exc).__name__ == "TargetError":  # it names the target and the cause (a reference file, a function)
        return msg.splitlines()[0]
    if isinstance(exc, MemoryError):
        msg = "not enough memory"
    elif isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)) and getattr(exc, "filename", None):
        msg = f"{exc.strerror or type(exc).__name__}"
    elif type(exc).__name__ not in ("ImageError", "CheckpointError", "PretrainedError", "ExportError", "ValueError",
                                    "ModelNameError", "ForwardError"):  # (these name the model and the cause)
        msg = f"{type(exc).__name__}: {msg}"
    if subject and subject not in msg:
        return f"{subject}:\n{msg}"
    return msg


class _Worker(QObject):
    finished = Signal(object, object)  # job, result
    failed = Signal(object, str)  # job, message
    cancelled = Signal(object)
    progress = Signal(object, int, int)
    started = Signal(object)

    def __init__(self, latest: dict[str, int]):
        super().__init__()
        self._latest = latest

    @Slot(object)
    def run(self, job: Job) -> None:
        # the job lets go of its function once it has run (or was skipped): what the function captured (a model, a
        # result, an image) is not kept alive by the runner's record of the last job of its kind
        fn, job.fn = job.fn, None
        if job.cancelled or job.id != self._latest.get(job.kind, job.id):
            self.cancelled.emit(job)  # superseded before it started
            return
        self.started.emit(job)
        try:
            result = fn(job)
        except BaseException as e:  # noqa: BLE001 - every error goes to the one reporting place
            if job.cancelled:  # e.g. a download aborted by its progress callback
                self.cancelled.emit(job)
                return
            detail = traceback.format_exc()
            self.failed.emit(job, describe_error(e, job.subject) + _detail_marker(detail))
        else:
            if job.cancelled:
                self.cancelled.emit(job)
            else:
                self.finished.emit(job, result)


_DETAIL = "\n\x00DETAIL\x00"


def _detail_marker(detail: str) -> str:
    return _DETAIL + detail


def split_detail(message: str) -> tuple[str, str]:
    """``(message, traceback)`` from a :attr:`TaskRunner.failed` message."""
    if _DETAIL in message:
        a, b = message.split(_DETAIL, 1)
        return a, b
    return message, ""


class TaskRunner(QObject):
    """GUI-side owner of the worker thread.

    Signals (all on the GUI thread, stale jobs already filtered out):
        done(kind, result, job): the newest job of ``kind`` finished.
        failed(kind, title, message, job): the newest job of ``kind`` raised (message names file and cause).
        progress(kind, done, total): progress of the newest job of ``kind``.
        cancelled(kind, job): a job of ``kind`` stopped because it was cancelled or superseded (its result, if any,
            dropped).
        busyChanged(bool): whether any job is queued or running.
    """

    done = Signal(str, object, object)
    failed = Signal(str, str, str, object)
    progress = Signal(str, int, int)
    cancelled = Signal(str, object)
    busyChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._latest: dict[str, int] = {}
        self._jobs: dict[str, Job] = {}
        self._pending = 0
        self._next_id = 0
        self._closed = False
        # A daemon Python thread (not a QThread): a model call that outlives the window can never abort the
        # process at exit ("QThread destroyed while running"), and signals emitted from it are queued to the GUI.
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._open = threading.Event()  # cleared by hold(): jobs queue but none starts
        self._open.set()
        self._worker = _Worker(self._latest)
        self._worker.finished.connect(self._on_finished, Qt.ConnectionType.QueuedConnection)
        self._worker.failed.connect(self._on_failed, Qt.ConnectionType.QueuedConnection)
        self._worker.cancelled.connect(self._on_cancelled, Qt.ConnectionType.QueuedConnection)
        self._worker.progress.connect(self._on_progress, Qt.ConnectionType.QueuedConnection)
        self._thread = threading.Thread(target=self._loop, name="vitviz-worker", daemon=True)
        self._thread.start()
        app = QCoreApplication.instance()
        if app is not None:  # stop the thread when the application quits
            app.aboutToQuit.connect(self.shutdown)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            self._open.wait()
            if job is None:
                return
            self._worker.run(job)

    # ------------------------------------------------------------------ API
    def submit(self, kind: str, fn: Callable[[Job], Any], *, subject: str = "", title: str = "Error") -> Job:
        """Queue ``fn(job)``; any older job of the same kind is superseded."""
        if self._closed:
            raise RuntimeError("the task runner has been shut down")
        self._next_id += 1
        job = Job(kind=kind, id=self._next_id, fn=fn, subject=subject, title=title, _runner=self)
        old = self._jobs.get(kind)
        if old is not None:
            old.cancel()
        self._latest[kind] = job.id
        self._jobs[kind] = job
        self._pending += 1
        if self._pending == 1:
            self.busyChanged.emit(True)
        self._queue.put(job)
        return job

    def cancel(self, kind: str) -> None:
        """Ask the newest job of ``kind`` to stop; its result will be dropped."""
        job = self._jobs.get(kind)
        if job is not None:
            job.cancel()
            self._latest[kind] = -job.id  # nothing current for this kind any more

    def hold(self) -> None:
        """Queued jobs wait: none starts until :meth:`release` (a running one goes on; start-up: the first model load
        imports torch, which would compete with the window's first paint; see :mod:`vitviz.gui.startup`)."""
        self._open.clear()

    def release(self) -> None:
        """Let the worker start the queued jobs (again)."""
        self._open.set()

    @property
    def held(self) -> bool:
        """Whether :meth:`hold` keeps the queued jobs from starting."""
        return not self._open.is_set()

    def is_busy(self, kind: str | None = None) -> bool:
        if kind is None:
            return self._pending > 0
        job = self._jobs.get(kind)
        return job is not None and self._latest.get(kind) == job.id

    def shutdown(self, timeout_ms: int = 10000) -> bool:
        """Cancel everything and stop the thread (called when the window closes).

        Waits up to ``timeout_ms`` for a running model call to return; a call that takes longer is left to finish
        on its own (its result is dropped; the daemon thread never blocks the process from exiting).
        """
        if self._closed:
            return not self._thread.is_alive()
        self._closed = True
        for job in self._jobs.values():
            job.cancel()
        for k in list(self._latest):
            self._latest[k] = -1
        self._queue.put(None)
        self._open.set()
        self._thread.join(timeout_ms / 1000.0)
        return not self._thread.is_alive()

    # ------------------------------------------------------------------ slots (GUI thread)
    def _current(self, job: Job) -> bool:
        return not self._closed and self._latest.get(job.kind) == job.id

    def _finish(self, job: Job) -> None:
        self._pending = max(0, self._pending - 1)
        if self._jobs.get(job.kind) is job and self._latest.get(job.kind) == job.id:
            self._latest[job.kind] = -job.id
        if self._pending == 0 and not self._closed:
            self.busyChanged.emit(False)

    @Slot(object, object)
    def _on_finished(self, job: Job, result: Any) -> None:
        current = self._current(job)
        self._finish(job)
        if current:
            self.done.emit(job.kind, result, job)

    @Slot(object, str)
    def _on_failed(self, job: Job, message: str) -> None:
        current = self._current(job)
        self._finish(job)
        if current:
            self.failed.emit(job.kind, job.title, message, job)

    @Slot(object)
    def _on_cancelled(self, job: Job) -> None:
        self._finish(job)
        if not self._closed:
            self.cancelled.emit(job.kind, job)

    @Slot(object, int, int)
    def _on_progress(self, job: Job, done: int, total: int) -> None:
        if self._current(job):
            self.progress.emit(job.kind, done, total)

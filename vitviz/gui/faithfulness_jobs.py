"""The faithfulness tables of one window: measured on the controller's worker, kept per key, cancelled when the
window asks for something newer.

:class:`FaithfulnessJobs` belongs to a :class:`~vitviz.gui.controller.Controller` (``controller.faithfulness``): it
runs :func:`vitviz.evaluate.evaluate_views` on the controller's worker for the result on screen, keeps the newest
:data:`EVALUATIONS_KEPT` tables by key (image pixels, target, model, options, precision) and says what happened
through its signals. The Faithfulness tab (:mod:`vitviz.gui.faithfulness`) draws from them.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from vitviz.gui.worker import Job

EVALUATIONS_KEPT = 32  # faithfulness tables kept (a few KB each)
EVALUATION_BATCH = 32  # at most this many perturbed images per forward in the window


class FaithfulnessJobs(QObject):
    """The faithfulness jobs and tables of a controller.

    Signals:
        ready(key, table): a faithfulness table (:func:`vitviz.evaluate.evaluate_views`) is ready.
        progress(done, total): perturbed images evaluated so far by the running evaluation.
        stopped(key, why): the running evaluation was cancelled ("cancelled", or why it yielded to another
            request) or failed ("failed"; the message went out through the controller's ``failed`` with kind
            "evaluate").
    """

    ready = Signal(object, object)
    progress = Signal(int, int)
    stopped = Signal(object, str)

    def __init__(self, controller: Any):
        super().__init__(controller)
        self.controller = controller
        self.tables: OrderedDict[tuple, Any] = OrderedDict()
        self.measured_in: dict[tuple, str] = {}  # the precision each table was measured in ("fp32", "bf16")
        self.running: tuple | None = None  # the key being measured
        self.batch_size: int | None = None  # perturbed images per forward (None: see evaluate)
        controller.runner.done.connect(self._on_done)
        controller.runner.failed.connect(self._on_failed)
        controller.runner.progress.connect(self._on_progress)

    def key(self, result: Any, *, steps: int, baseline: str, seeds: int,
            precision: str = "fp32") -> tuple[tuple | None, str]:
        """``(key, "")`` naming the table of ``result`` (image pixels, target, model, options, the precision it is
        measured in: ``"fp32"`` or ``"window"``), or ``(None, why)`` when it cannot be evaluated with the current
        model (no classifier; a result of another model)."""
        c = self.controller
        if result is None:
            return None, "open an image first"
        if c.pipeline is None:
            return None, "no model is loaded"
        if c.runner.is_busy("model"):
            return None, "a model is being loaded or moved"
        made = c.maker_of(result)
        if made is None:
            return None, "this result was not made by the window's model"
        generation, digest = made
        if generation != c.generation:
            return None, "the model changed: the image is being analysed again"
        if result.target is None and result.target_spec is None:
            return None, ("the model has no classifier: there is no class probability for the deletion and "
                          "insertion curves to read (choose a similarity target: the curves then read the similarity)")
        # the class, or a similarity or callable target (the curves read its own score) by its key
        target = int(result.target) if result.target is not None else result.target_spec.key
        return (digest, result.source, target, c.generation, int(steps), str(baseline), int(seeds),
                self.precision_of(precision)), ""

    def precision_of(self, precision: str) -> str:
        """The precision a faithfulness table asked for in ``precision`` (``"fp32"``, or ``"window"``: the window's)
        is measured in: ``"fp32"``, ``"bf16"``, ``"fp16"``."""
        pipeline = self.controller.pipeline
        own = str(pipeline.precision) if pipeline is not None else "fp32"
        return "fp32" if precision == "fp32" else own

    def evaluate(self, result: Any, *, steps: int, baseline: str, seeds: int, precision: str = "fp32") -> tuple | None:
        """Measure the faithfulness of the maps of ``result`` (the one on screen) on the worker: deletion and
        insertion curves of :data:`vitviz.evaluate.DEFAULT_VIEWS` and ``seeds`` random rankings. A table already
        made for the same key is emitted at once (no job). Returns the key, or None when it cannot be evaluated
        (see :meth:`key`).

        ``precision="fp32"`` (the default) measures as ``vitviz evaluate`` does, so the numbers are its numbers: a
        window computing in bf16 or fp16 runs the image again in fp32 for the table (the model cast to float32 on
        the worker, its own weights restored bit for bit, then cast back); ``"window"``: in the window's precision,
        from the result on screen."""
        key, _why = self.key(result, steps=steps, baseline=baseline, seeds=seeds, precision=precision)
        if key is None:
            return None
        if key in self.tables:
            self.tables.move_to_end(key)
            self.ready.emit(key, self.tables[key])
            return key
        pipeline, batch = self.controller.pipeline, self.batch_size

        def work(job: Job):
            from vitviz.evaluate import auto_batch_size, evaluate_views

            size = batch
            if size is None:  # progress and cancel every few seconds, without giving up much speed
                size = min(auto_batch_size(pipeline.model, result.num_patches), EVALUATION_BATCH)
            run = dict(steps=steps, baseline=baseline, seeds=seeds, batch_size=size, progress=job.report,
                       cancel=lambda: job.cancelled)
            if key[-1] == str(pipeline.precision):
                return key, evaluate_views(pipeline, result, **run)
            from PIL import Image

            from vitviz.pipeline import Pipeline

            full = Pipeline(pipeline.model, device=pipeline.device, precision="fp32")  # (the model itself, cast up)
            try:
                target = result.target if result.target is not None else result.target_spec
                return key, evaluate_views(full, Image.fromarray(result.rgb), target=target, **run)
            finally:
                Pipeline(pipeline.model, device=pipeline.device, precision=pipeline.precision)  # cast back

        self.running = key
        self.measured_in[key] = key[-1]
        self.controller.runner.submit("evaluate", work, subject=Path(result.source).name,
                                      title="Could not measure the faithfulness of the maps")
        return key

    def cancel(self, why: str = "cancelled") -> None:
        """Stop the running evaluation (it stops before its next batch; its result is dropped)."""
        key, self.running = self.running, None
        self.controller.runner.cancel("evaluate")
        if key is not None:
            self.stopped.emit(key, why)

    def give_way(self, why: str) -> None:
        """The one worker thread serves the newest image or model request first: a running evaluation (seconds to
        tens of seconds) is cancelled rather than making the user wait for it."""
        if self.running is not None:
            self.cancel(why)

    def clear(self) -> None:
        """The window closes: the tables go."""
        self.tables.clear()
        self.running = None

    # ------------------------------------------------------------------ worker results
    def _on_done(self, kind: str, result: Any, _job: Job) -> None:
        if kind != "evaluate" or self.controller.closing:
            return
        key, table = result
        self.running = None
        self.tables[key] = table
        self.tables.move_to_end(key)
        while len(self.tables) > EVALUATIONS_KEPT:
            self.measured_in.pop(self.tables.popitem(last=False)[0], None)
        self.ready.emit(key, table)

    def _on_failed(self, kind: str, _title: str, _message: str, _job: Job) -> None:
        if kind != "evaluate" or self.controller.closing:
            return
        key, self.running = self.running, None
        self.stopped.emit(key, "failed")

    def _on_progress(self, kind: str, done: int, total: int) -> None:
        if kind == "evaluate":
            self.progress.emit(done, total)

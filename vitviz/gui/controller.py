"""The window's engine room: which model runs, on which device and precision, and the jobs that run it.

:class:`Controller` owns the model (through a :class:`~vitviz.pipeline.Pipeline`), the worker
(:class:`~vitviz.gui.worker.TaskRunner`: one thread, the newest request of a kind wins) and the requests in flight.
Widgets never touch these: they call the controller's methods and redraw from its signals. Its faithfulness tables
and their jobs are :attr:`Controller.faithfulness` (:class:`~vitviz.gui.faithfulness_jobs.FaithfulnessJobs`).
"""

from __future__ import annotations

import hashlib
import os
import weakref
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from PySide6.QtCore import QObject, QTimer, Signal

from vitviz import imaging
from vitviz.devices import available_devices, available_precisions, normalise_device, torch_loaded
from vitviz.document.target_choice import TargetChoice, as_choice
from vitviz.gui.faithfulness_jobs import FaithfulnessJobs
from vitviz.gui.worker import Job, TaskRunner, split_detail
from vitviz.model.sources.refs import describe_ref

TOWERS_KEPT = 2  # text towers kept for models used before (prompts typed again on them open none)


class Controller(QObject):
    """Model, device, precision and jobs of one window.

    Signals:
        modelChanged(note): a newly loaded (or moved) model is in use; ``note`` is a warning or "".
        resultReady(result, remember): the newest image request finished.
        failed(kind, title, message, detail, subject): a job failed ("model" or "infer"); the message names the file.
        busy(text, cancellable): what is running ("" when idle); cancellable for downloads.
        progress(done, total): download progress of the model being loaded.
        targetChanged(note): the standing target (:attr:`target_choice`) changed; ``note`` says why when it was
            dropped (its reference could not be read for another model) and is "" otherwise.

    The standing target: a target that is not a class (similar to an image, a patch, a vector; a function of the
    output) once chosen explains every image until another is chosen (:attr:`target_choice`). It is made on the worker
    (a reference image's embedding needs a forward pass) for each model, once: a model change makes it again from the
    choice. A class chosen for the shown image stays with that image; the next ones show their top class.
    """

    modelChanged = Signal(str)
    resultReady = Signal(object, bool)
    failed = Signal(str, str, str, str, str)
    busy = Signal(str, bool)
    progress = Signal(int, int)
    targetChanged = Signal(str)

    def __init__(self, parent: QObject | None = None, *, device: str = "cpu", precision: str = "auto"):
        super().__init__(parent)
        self.runner = TaskRunner(self)
        self.pipeline = None  # a vitviz.pipeline.Pipeline once a model is loaded (torch is imported then)
        self.image_pipeline = None  # the image tower's pipeline under prompts (the pipeline itself without any)
        self.towers: dict[str, Any] = {}  # model source -> its text tower, once opened (the newest TOWERS_KEPT)
        self.ref = ""
        self.loading: str | None = None  # the model reference being loaded (the toolbar names it meanwhile)
        device = normalise_device(device)
        # before torch is imported (start-up) a remembered GPU is kept as a wish and checked when the model loads
        known = available_devices(probe=False)
        self.device = device if device in known or (not torch_loaded() and _plausible(device)) else "cpu"
        # "auto" (the default) stays "auto": the pipeline resolves it (bf16 where the hardware has it)
        self.precision = precision if precision in available_precisions(self.device) else "auto"
        self.requested: str | None = None  # the image most recently asked for (PageDown counts from it)
        self.memory_images: dict[str, Any] = {}  # name -> PIL image, for images given in memory (vitviz.show)
        self.legrad_poolings: tuple[str, ...] = ("mean",)  # LeGrad's pooling the view shows (another one: a new pass)
        self._waiting: tuple[str, Any, Any, bool] | None = None  # an image waiting for a model
        self.target_choice: TargetChoice | None = None  # the standing target (None: each image's top class)
        self._target: tuple[int, Any] | None = None  # (generation, the standing target made for that model)
        self._closing = False
        # the pipeline that made each result (a result of another model is not evaluated with this one)
        self._generation = 0  # +1 whenever another pipeline (model, device or precision) is adopted
        self._made_by: dict[int, tuple[Any, int, str]] = {}  # id(result) -> (weakref, generation, pixel digest)
        self.faithfulness = FaithfulnessJobs(self)  # the faithfulness tables (its handlers run before ours)
        self.runner.done.connect(self._on_done)
        self.runner.failed.connect(self._on_failed)
        self.runner.progress.connect(self._on_progress)
        self.runner.busyChanged.connect(lambda b: None if b else self.busy.emit("", False))

    # ------------------------------------------------------------------ state
    @property
    def model(self):
        return None if self.pipeline is None else self.pipeline.model

    @property
    def closing(self) -> bool:
        """The window is closing: results and failures that still arrive are dropped."""
        return self._closing

    def is_busy(self, kind: str | None = None) -> bool:
        return self.runner.is_busy(kind)

    def title(self) -> str:
        spec = getattr(self.model, "spec", None)
        return getattr(spec, "name", None) or describe_ref(self.ref)

    # ------------------------------------------------------------------ models
    def adopt(self, model: Any, ref: str, note: str | None = None, image: Any = None) -> None:
        """Use ``model`` (already built) now; re-runs the waiting or current image. ``image``: for a prompt pipeline
        (:func:`vitviz.pipeline.prompt_pipeline`), the image tower's pipeline it was made from (what clearing the
        prompts returns to; default: the one in use)."""
        from vitviz.pipeline import Pipeline

        self.pipeline = model if isinstance(model, Pipeline) else Pipeline(model, device=self.device,
                                                                           precision=self.precision)
        if not prompts_of(self.pipeline):
            self.image_pipeline = self.pipeline
        elif image is not None or self.image_pipeline is None:
            self.image_pipeline = image if image is not None else self.pipeline
        self.ref = ref
        tower = attached_tower(self.pipeline) if prompts_of(self.pipeline) else None
        if tower is not None and self.pipeline.source is not None:  # the tower kept for the model's source
            self.towers.pop(self.pipeline.source, None)
            self.towers[self.pipeline.source] = tower
            while len(self.towers) > TOWERS_KEPT:
                self.towers.pop(next(iter(self.towers)))
        self._generation += 1
        self.modelChanged.emit(note or "")
        if self._waiting is not None:
            source, pil, target, remember = self._waiting
            self._waiting = None
            self.run(source, pil, target=target, remember=remember)

    def load(self, ref: str) -> None:
        """Build the model ``ref`` names on the worker (download, read, move to the device)."""
        device, precision = self.device, self.precision

        def work(job: Job):
            from vitviz.pipeline import Pipeline

            pipeline = Pipeline.open(ref, device=device, precision=precision, progress=job.report, show_bar=False)
            return ref, pipeline, pipeline.note

        self.loading = ref
        self.faithfulness.give_way("another model was asked for")
        self.busy.emit(f"Loading {describe_ref(ref)}…", ref.startswith(("pretrained:", "hub:")))  # downloads cancel
        self.runner.submit("model", work, subject=describe_ref(ref), title="Could not load the model")

    def cancel_load(self) -> None:
        self.loading = None
        self.runner.cancel("model")
        self.busy.emit("", False)
        self._run_waiting_with_current()

    def set_device(self, device: str) -> None:
        if device == self.device:
            return
        precision = self.precision if self.precision in available_precisions(device) else "auto"
        self._move(device, precision)

    def set_precision(self, precision: str) -> None:
        if precision != self.precision:
            self._move(self.device, precision)

    def _move(self, device: str, precision: str) -> None:
        if self.pipeline is None:
            self.device, self.precision = device, precision
            self.modelChanged.emit("")
            return
        model, ref, shown = self.pipeline.model, self.ref, self.pipeline
        image = self.image_pipeline if prompts_of(shown) else None  # under prompts: the image tower moves too
        old = (self.pipeline.device, self.pipeline.precision)  # what the model is in now ("auto" resolved)

        def work(job: Job):
            import torch

            from vitviz.pipeline import DTYPES, Pipeline, cast_model

            try:
                p = Pipeline(model, device=device, precision=precision)
                if device.startswith("cuda"):
                    torch.cuda.synchronize(device)
            except BaseException:
                cast_model(model, old[0], DTYPES[old[1]])
                raise
            if image is None:
                carry_prompts(shown, p)  # where the model came from (its text tower) stays with it
                return ref, p, None
            moved = Pipeline(image.model, device=device, precision=precision)  # (its weights moved with p's)
            carry_prompts(image, moved)
            carry_prompts(shown, p)
            if p.source is not None:
                moved.attach_text_tower(attached_tower(shown))
            return ref, p, None, moved

        self.faithfulness.give_way("the model is being moved")
        self.busy.emit(f"Moving the model to {device} ({precision})…", False)
        self.runner.submit("model", work, subject=f"{self.title()} on {device} ({precision})",
                           title="Could not change device or precision")

    # ------------------------------------------------------------------ prompts (CLIP / SigLIP)
    @property
    def prompts(self) -> list[str]:
        """The prompts the shown model classifies into (an image tower made a zero-shot classifier), or []."""
        return prompts_of(self.pipeline)

    def use_prompts(self, text: str) -> None:
        """Put the prompts of ``text`` (``"a cat; a dog"``; "": none) on the image tower, on the worker: the text
        tower opened from the model's source the first time (a download is cancellable; the tower is kept with the
        image tower's pipeline), the prompts encoded, the zero-shot pipeline adopted (the shown image re-runs). An
        error (an empty prompt, no text tower, a missing tokenizer file) is one message, the window unchanged."""
        image, ref = self.image_pipeline, self.ref
        if image is None:
            return
        if not str(text).strip():  # no prompts: back to the image tower (on the device the model is on now)
            if self.prompts:
                self._image_again(image)
            return
        here = (self.pipeline.device, self.pipeline.precision) if self.pipeline is not None else None
        stale = here is not None and here != (image.device, image.precision)
        tower = self.towers.get(image.source) if image.source is not None else None  # opened once per model

        def work(job: Job):
            from vitviz.pipeline import Pipeline, prompt_pipeline

            base = image
            if stale:  # moved with the prompts since: the image tower's pipeline where the weights are
                base = Pipeline(image.model, device=here[0], precision=here[1])
                carry_prompts(image, base)
            try:
                p = prompt_pipeline(base, text, progress=job.report, tower=tower)
            except Exception as e:  # noqa: BLE001 - one line: the prompt or the source, and the cause
                if job.cancelled:
                    raise
                raise ValueError((str(e).strip() or type(e).__name__).splitlines()[0]) from None
            p.precision_choice = base.precision_choice
            return ref, p, None, base

        source = str(getattr(image, "source", "") or "")
        self.faithfulness.give_way("prompts were typed")
        self.busy.emit("Encoding the prompts…", source.startswith(("pretrained:", "hub:")))  # a download cancels
        self.runner.submit("model", work, subject="", title="Could not use the prompts")

    def _image_again(self, image: Any) -> None:
        here = (self.pipeline.device, self.pipeline.precision)
        if here == (image.device, image.precision):
            self.adopt(image, self.ref)
            return

        def work(job: Job):
            from vitviz.pipeline import Pipeline

            p = Pipeline(image.model, device=here[0], precision=here[1])
            carry_prompts(image, p)
            return self.ref, p, None

        self.runner.submit("model", work, subject=self.title(), title="Could not clear the prompts")

    # ------------------------------------------------------------------ images
    def run(self, source: str, pil: Any = None, *, target: Any = None, remember: bool = True) -> None:
        """Analyse ``source`` (a path, read on the worker) or an in-memory PIL image with the current model.

        Args:
            target: None: the standing target (:attr:`target_choice`), else the image's top class; a class index or
                any target (:mod:`vitviz.capture.targets`): that one for this image; a :class:`TargetChoice`: made on
                the worker (a reference image read and run there), and, once the image ran with it, the standing
                target (a class or the top class: none). A target that cannot be made or used fails the run (one
                message; the shown result and the standing target stay).
        """
        self.requested = source
        if self.pipeline is None or self.runner.is_busy("model"):
            self._waiting = (source, pil, target, remember)
            return
        pipeline, generation = self.pipeline, self._generation
        pil = self.memory_images.get(source) if pil is None else pil
        made = None
        if target is not None:
            target, made = as_choice(target)  # (the choice, the target itself when one was given)
        standing = target is None and self.target_choice is not None
        choice = self.target_choice if standing else target
        if standing:
            made = self.standing_target()
        remade = standing and made is None  # the standing target is made for this model now
        reference = self._reference(choice) if choice is not None and made is None else None

        def work(job: Job):
            image = pil if pil is not None else imaging.load_image(source).image
            if job.cancelled:
                return None, remember, generation, "", None
            t, note = None, ""
            from vitviz.capture.targets import TargetError

            try:
                if choice is not None:
                    t = made if made is not None else choice.build(pipeline, reference=reference)
                res = pipeline.run(image, source=source, target=t, legrad=self.legrad_poolings)
            except TargetError as e:
                if not remade:  # chosen now, or made for this model already: the window stays as it was
                    raise
                # the standing target made again for another model does not fit it: dropped, the top class instead
                t, note = None, f"The target ({choice.describe()}) was dropped: {e}"
                res = pipeline.run(image, source=source, target=None, legrad=self.legrad_poolings)
            return res, remember, generation, pixel_digest(res.rgb), None if choice is None else (choice, t, note,
                                                                                                    standing)

        self.faithfulness.give_way("another image or target was asked for")
        self.busy.emit(f"Running {Path(source).name}" + (f" for {choice.describe()}…" if target is not None and
                                                          choice.kind != "top" else "…"), False)
        self.runner.submit("infer", work, subject=source, title="Could not use the target" if target is not None
                           and choice.kind != "top" else "Could not analyse the image")

    def rerun(self, result: Any, target: Any = None) -> None:
        """The shown image again (e.g. for another target; None: the standing target); in-memory images are re-run
        from their pixels."""
        pil = None
        if not os.path.isfile(result.source):
            pil = self.memory_images.get(result.source) or Image.fromarray(np.ascontiguousarray(result.rgb), "RGB")
        self.run(result.source, pil, target=target, remember=False)

    def set_standing_target(self, target: Any) -> None:
        """Make ``target`` (a :class:`TargetChoice`, a class index, any target, a function of the output; None or
        the top class: none) the standing target without running anything: it is made (when it is not a target
        already) as the next image runs. ``vitviz.show(..., target=...)``; a class chosen later in the window (for
        one image) ends it."""
        choice, made = as_choice(target) if target is not None else (None, None)
        if choice is not None and choice.kind == "top":
            choice, made = None, None
        self.target_choice = choice
        self._target = (self._generation, made) if made is not None else None
        self.targetChanged.emit("")

    def standing_target(self) -> Any:
        """The standing target made for the current model, or None (none, or not made for this model yet)."""
        t = self._target
        return t[1] if t is not None and t[0] == self._generation else None

    def _reference(self, choice: TargetChoice) -> Any:
        """What a similarity choice's reference image is at hand as: a result of the current model (none to run),
        an in-memory image's pixels, else None (the file is read on the worker)."""
        if choice.kind not in ("image", "patch"):
            return None
        for ref, generation, _digest in self._made_by.values():
            r = ref()
            if r is not None and generation == self._generation and r.source == choice.path:
                return r
        return self.memory_images.get(choice.path)

    def _run_waiting_with_current(self) -> None:
        if self._waiting is not None and self.pipeline is not None:
            source, pil, target, remember = self._waiting
            self._waiting = None
            self.run(source, pil, target=target, remember=remember)

    # ------------------------------------------------------------------ worker results
    def _on_done(self, kind: str, result: Any, job: Job) -> None:
        if self._closing:
            return
        if kind == "model":
            self.loading = None
            ref, pipeline, note = result[:3]
            self.device, self.precision = pipeline.device, pipeline.precision_choice
            self.busy.emit("", False)
            self.adopt(pipeline, ref, note, image=result[3] if len(result) > 3 else None)
        elif kind == "infer":
            res, remember, generation, digest, made = result
            self.requested = None
            if res is not None:
                self._remember_maker(res, generation, digest)
                if made is not None:
                    self._adopt_target(generation, *made)
                self.busy.emit("", False)
                self.resultReady.emit(res, remember)

    def _adopt_target(self, generation: int, choice: TargetChoice, target: Any, note: str, standing: bool) -> None:
        """A run with ``choice`` succeeded: it is the standing target now (a class or the top class: none)."""
        if note:  # the standing target could not be made for this model: dropped
            self.target_choice, self._target = None, None
            self.targetChanged.emit(note)
            return
        if standing:  # made for this model: kept for the next images
            self._target = (generation, target)
            return
        # a class chosen in the window is for this image only; a prompt (a class of the prompts) for the next too
        keep = choice.kind != "top" and (choice.kind != "class" or bool(self.prompts))
        changed = (choice if keep else None) != self.target_choice
        self.target_choice = choice if keep else None
        self._target = (generation, target) if keep else None
        if changed:
            self.targetChanged.emit("")

    def _on_failed(self, kind: str, title: str, message: str, job: Job) -> None:
        if self._closing:
            return
        self.busy.emit("", False)
        if kind == "model":
            self.loading = None
            if self.pipeline is None and job.subject != describe_ref("demo"):
                # the remembered / requested model failed at start: fall back to the bundled one
                QTimer.singleShot(0, lambda: self.load("demo"))
            else:
                self._run_waiting_with_current()
        elif kind == "infer":
            self.requested = None
        text, detail = split_detail(message)
        self.failed.emit(kind, title, text, detail, job.subject)

    def _on_progress(self, kind: str, done: int, total: int) -> None:
        if kind != "evaluate":  # (the faithfulness jobs report theirs)
            self.progress.emit(done, total)

    # ------------------------------------------------------------------ who made each result
    @property
    def generation(self) -> int:
        """The pipeline in use: +1 whenever another (model, device or precision) is adopted."""
        return self._generation

    def _remember_maker(self, result: Any, generation: int, digest: str) -> None:
        """Note which pipeline made ``result`` and the digest of its pixels (what an evaluation key is made of)."""
        for k in [k for k, (ref, _g, _d) in self._made_by.items() if ref() is None]:
            del self._made_by[k]
        self._made_by[id(result)] = (weakref.ref(result), generation, digest)

    def maker_of(self, result: Any) -> tuple[int, str] | None:
        """``(generation, pixel digest)`` of the pipeline that made ``result``, or None (not made in this window)."""
        made = self._made_by.get(id(result))
        if made is None or made[0]() is not result:
            return None
        return made[1], made[2]

    def shutdown(self) -> None:
        """The window closes: the worker stops (a running job is cancelled; see :meth:`TaskRunner.shutdown`) and
        what only the worker's jobs would use is let go: the model, an image waiting for it, the in-memory images,
        the faithfulness tables and the record of who made each result. (The shown result stays with the
        document.)"""
        self._closing = True
        self.runner.shutdown()
        self.pipeline = self.image_pipeline = None
        self.towers.clear()
        self._waiting = None
        self.memory_images.clear()
        self.target_choice, self._target = None, None
        self.faithfulness.clear()
        self._made_by.clear()


def prompts_of(pipeline: Any) -> list[str]:
    """The prompts a pipeline's model classifies into (:func:`vitviz.pipeline.prompt_pipeline`), or []."""
    spec = getattr(pipeline, "spec", None) if pipeline is not None else None
    if getattr(spec, "head_kind", "") != "prompts":
        return []
    return [str(s) for s in (spec.labels or ())]


def carry_prompts(old: Any, new: Any) -> None:
    """What a pipeline made again for the same model (another device or precision) keeps: the source its text tower
    comes from, the text tower once opened, SigLIP's neutral prompt."""
    new.source = old.source
    new.legrad_neutral = old.legrad_neutral
    tower = attached_tower(old)
    if tower is not None:
        new.attach_text_tower(tower)


def attached_tower(pipeline: Any) -> Any:
    """The text tower a pipeline holds without opening one (a prompt pipeline's; one attached to a model handed
    over in memory), or None."""
    if pipeline is None or (pipeline.source is not None and not prompts_of(pipeline)):
        return None  # (text_tower() would open it from the source)
    try:
        return pipeline.text_tower()
    except Exception:  # noqa: BLE001 - none attached
        return None


def pixel_digest(rgb: np.ndarray) -> str:
    """A digest of an image's pixels and shape (two results of the same picture share their faithfulness table)."""
    a = np.ascontiguousarray(rgb)
    return f"{hashlib.blake2b(a.data, digest_size=16).hexdigest()}{a.shape}"


def _plausible(device: str) -> bool:
    """A device name torch could have: cpu, cuda:N, mps."""
    return device in ("cpu", "mps") or (device.startswith("cuda:") and device[5:].isdigit())

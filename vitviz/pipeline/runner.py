"""One image through one model: image -> preprocess -> capture -> result. Shared by the window, the CLI and batch work.

No Qt here. A :class:`Pipeline` holds a model on its device and precision and the data that depends only on the
model (:class:`ModelData`: position embeddings at a grid, their similarity, the patch-embedding filters' principal
components), computed once per model and grid and reused for every image. :meth:`Pipeline.run` costs one forward
and, for a model with a classifier, one backward: without a target, the gradients are taken for the top class of
that same forward (``capture(..., target="top")``).

:meth:`Pipeline.open` is the one way to open a model by reference on a device: the reference parsed and opened
(:mod:`vitviz.model.sources`), a foreign module adapted (:func:`open_adapted`), then placed by one fallback policy
(:func:`placement`: a device this machine lacks -> the CPU; a precision the device lacks -> fp32; each with a note).
"""


from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vitviz.capture import capture
from vitviz.capture.foreign import AdaptedModel, is_vitviz_model
from vitviz.capture.model_head import is_feature_model
from vitviz.devices import (
    PRECISION_CHOICES,
    resolve_precision,
)
from vitviz.pipeline.image_result import InferenceResult, ModelData, PreparedImage
from vitviz.pipeline.model_opening import DTYPES, capturable, cast_model, open_adapted, placement


class Pipeline:
    """A model on a device and precision, ready to turn images into :class:`InferenceResult` s.

    Args:
        model: a :class:`vitviz.model.ViT` with ``spec`` set, or an :class:`vitviz.capture.foreign.AdaptedModel`
            (any other ViT module: open it with :meth:`open`, or adapt it with :func:`vitviz.capture.foreign.adapt`);
            moved to ``device`` / ``precision`` here.
        device: torch device string.
        precision: "fp32" | "bf16" | "fp16", or "auto": bf16 where the device multiplies bf16 natively, else fp32
            (:func:`vitviz.devices.resolve_precision`). ``precision`` is then the one chosen, ``precision_choice``
            what was asked for.

    The results keep every layer's attentions, tokens and attention gradients in the model's precision
    (:attr:`store_dtype`: bfloat16 under ``auto`` on a device that multiplies it natively, so the window's open
    images take half the memory of float32): the model computed them in that precision, so nothing is lost, and the
    analyses promote each slice they read to float32 exactly (:func:`vitviz.analysis.basics.compute_dtype`): the
    maps equal those of the same values stored in float32.

    Attributes:
        note: what the user should be told about how the model was opened (:meth:`open`: random weights, the CPU
            instead of a missing GPU ...), or None.
    """

    def __init__(self, model: torch.nn.Module, *, device: str = "cpu", precision: str = "fp32"):
        if precision not in PRECISION_CHOICES:
            raise ValueError(f"precision must be one of {', '.join(PRECISION_CHOICES)}, got {precision!r}")
        if not isinstance(model, AdaptedModel) and not is_vitviz_model(model):
            raise TypeError(f"a Pipeline needs a vitviz ViT or an AdaptedModel, got {type(model).__name__}: open it "
                            "with Pipeline.open(module) (or adapt it with vitviz.capture.foreign.adapt)")
        self.precision_choice = precision  # what was asked for ("auto" included)
        precision = resolve_precision(precision, device)
        self.model = model
        self.device = device
        self.precision = precision
        self.note: str | None = None
        self.source: str | None = None  # the reference the model was opened from (:meth:`open`), for its text tower
        self.legrad_neutral: Any = None  # SigLIP prompts: the neutral prompt's target (LeGrad's correction)
        self._text_tower: Any = None
        self._model_data: dict[tuple[int, int], ModelData] = {}
        self._lock = threading.Lock()
        model.eval()
        cast_model(model, device, DTYPES[precision])

    @classmethod
    def open(cls, source: str | os.PathLike[str] | torch.nn.Module, *, device: str = "cpu", precision: str = "fp32",
             progress: Any = None, show_bar: bool = True, **options: Any) -> "Pipeline":
        """The one way to open a model on a device: ``source`` opened and adapted (:func:`open_adapted`: a model
        reference, a checkpoint path, the user's ``file.py:ClassName`` or an ``nn.Module``), then placed by the one
        fallback policy (:func:`placement`: a missing device -> the CPU, a precision the device lacks -> fp32).

        Args:
            source, progress, show_bar, options: as :func:`open_adapted` (``options``: ``weights`` and ``init`` for
                the user's own module, ``adapt_options``, ``num_heads``, ``num_classes`` ... for checkpoint files).
            device, precision: where to run it (as :class:`Pipeline`), before the fallback.

        Returns:
            The pipeline; its :attr:`note` joins what the user should be told (the model's note, the fallback's).

        Raises:
            as :func:`open_adapted`; ValueError: an unknown precision.
        """
        if precision not in PRECISION_CHOICES:
            raise ValueError(f"precision must be one of {', '.join(PRECISION_CHOICES)}, got {precision!r}")
        model, note = open_adapted(source, progress=progress, show_bar=show_bar, **options)
        device, precision, moved = placement(device, precision)
        pipeline = cls(model, device=device, precision=precision)
        pipeline.note = "; ".join(n for n in (note, moved) if n) or None
        if not isinstance(source, torch.nn.Module):
            pipeline.source = os.fspath(source)
        return pipeline

    def text_tower(self, progress: Any = None) -> Any:
        """The text tower of the model's source (CLIP, SigLIP), opened on first use and kept
        (:func:`vitviz.model.text.open_text_tower`).

        Raises:
            TextTowerError: the source has none (why), or the model was not opened from a source.
        """
        with self._lock:
            if self._text_tower is None:
                from vitviz.model.text import TextTowerError, open_text_tower

                if self.source is None:
                    raise TextTowerError("this model was given in memory, not opened from a folder, file or name: "
                                         "pass its text tower (vitviz.model.text.open_text_tower)")
                self._text_tower = open_text_tower(self.source, device=self.device, progress=progress)
            return self._text_tower

    def attach_text_tower(self, tower: Any) -> None:
        """Use ``tower`` as this model's text tower (an in-memory model's, or one already opened)."""
        with self._lock:
            self._text_tower = tower

    @property
    def store_dtype(self) -> torch.dtype:
        """The dtype the results keep attentions, tokens and attention gradients in: the model's (logits, scores,
        LeGrad's and GradCAM's maps are float32 whatever the model's)."""
        return DTYPES[self.precision]

    @property
    def spec(self):
        return self.model.spec

    def model_data(self, grid: tuple[int, int]) -> ModelData:
        """The model-only data at ``grid``: computed on first use (by :meth:`run`, off the GUI thread), then shared."""
        grid = (int(grid[0]), int(grid[1]))
        with self._lock:
            if grid not in self._model_data:
                data = ModelData.of(self.model, grid)
                data.pos_similarity()  # what the plots show, ready before the first result reaches the window
                # (the filters' PCA, an eigh of C*P*P square, 0.2 s for ViT-B/16 and seconds on a loaded machine, is
                # left to the Filters tab, when it is first shown: the first overlay does not wait for it)
                self._model_data[grid] = data
            return self._model_data[grid]

    def prepare(self, image: Any) -> PreparedImage:
        """Preprocess one image with the model's spec (any thread: no model state is touched).

        Args:
            image: a PIL image (any mode; converted to RGB once) or a :class:`vitviz.imaging.LoadedImage`.
        """
        image = getattr(image, "image", image)  # LoadedImage -> PIL
        rgb_image = image if image.mode == "RGB" else image.convert("RGB")
        x, geometry = self.spec.preprocess.apply(rgb_image)
        return PreparedImage(x=x, geometry=geometry, rgb=np.ascontiguousarray(np.asarray(rgb_image, dtype=np.uint8)))

    def run(self, image: Any, *, source: str = "image", target: Any = None,
            legrad: Sequence[str] = ("mean",)) -> InferenceResult:
        """Preprocess one image with the model's spec, capture attention and gradients, return the result.

        Args:
            image: a PIL image (any mode; converted to RGB once) or a :class:`vitviz.imaging.LoadedImage`.
            source: a name for captions (the file path).
            target: what the gradient views explain (:func:`vitviz.capture.targets.as_target`: a class index, a
                similarity target, a function of the output), or None for the top prediction of the same pass.

        Returns:
            An :class:`InferenceResult` with tensors on the CPU, in :attr:`store_dtype` (logits float32).
        """
        return self.run_batch([image], sources=[source], target=target, legrad=legrad)[0]

    def run_batch(self, images: Sequence[Any], *, sources: Sequence[str] | None = None,
                  target: Any = None, gradients: bool = True, legrad: Sequence[str] = ("mean",),
                  gradcam: bool = True) -> list[InferenceResult]:
        """Several images at once: one forward and (with ``gradients``) one backward for the whole batch. :meth:`run` is
        this with one image, so a map is the same whichever way it was made (up to the float round-off of a larger
        matrix product).

        Args:
            images: PIL images, :class:`vitviz.imaging.LoadedImage` s or :class:`PreparedImage` s (from
                :meth:`prepare`, e.g. on a loader thread). Images whose inputs differ in size (a spec without a fixed
                crop) are captured in one pass per size.
            sources: a name per image (default ``"image"``).
            target: a class index or any target (:mod:`vitviz.capture.targets`) for every image, one class per image,
                or None for each image's top class of the same pass.
            gradients: take the attention gradients (the gradient views need them); False runs the forward only
                (``target`` is then ignored: the results have no target and no gradients).
            legrad, gradcam: the LeGrad poolings (``"mean"``, ``"model"``) and GradCAM maps taken with the gradients
                (a vitviz ViT only; LeGrad costs about one more backward per pooling, measured in bench/legrad.py;
                :mod:`vitviz.capture.gradient_maps`).

        Returns:
            One :class:`InferenceResult` per image, in order; each image's tensors are slices of the batch's
            (the batch's buffers live as long as any of its results).
        """
        prepared, sources, groups = self.batch_groups(images, sources=sources, target=target, gradients=gradients)
        caps: list[Any] = [None] * len(prepared)
        for idx, want in groups:
            x = torch.stack([prepared[i].x for i in idx]).to(device=self.device, dtype=DTYPES[self.precision])
            extra: dict[str, Any] = {}
            if is_vitviz_model(self.model) and want is not None:
                extra = {"legrad": tuple(legrad), "gradcam": gradcam}
                if self.legrad_neutral is not None and legrad:
                    extra["legrad_neutral"] = self.legrad_neutral
            with torch.inference_mode(False):
                cap = capture(self.model, x, target=want, store_dtype=self.store_dtype, **extra)
            for b, i in enumerate(idx):
                caps[i] = cap.image(b)
            del cap
        return [self.result(p, cap, source) for p, cap, source in zip(prepared, caps, sources)]

    def batch_groups(self, images: Sequence[Any], *, sources: Sequence[str] | None = None, target: Any = None,
                     gradients: bool = True) -> tuple[list[PreparedImage], list[str], list[tuple[list[int], Any]]]:
        """How :meth:`run_batch` (and the streamed route, :func:`vitviz.document.streamed.stream_images`) takes a
        batch: the images prepared, their names, and the images grouped by input size, each group with the target its
        capture takes (``"top"``: each image's top class; a list: one class per image; None: no gradients). The
        arguments are :meth:`run_batch`'s."""
        prepared = [im if isinstance(im, PreparedImage) else self.prepare(im) for im in images]
        n = len(prepared)
        sources = ["image"] * n if sources is None else [str(s) for s in sources]
        if len(sources) != n:
            raise ValueError(f"{len(sources)} sources for {n} images")
        num_classes = int(getattr(self.model, "num_classes", 0) or 0)
        per_image = (isinstance(target, (Sequence, np.ndarray)) and not isinstance(target, str)) or (
            isinstance(target, torch.Tensor) and target.ndim > 0)
        single = not per_image
        targets: list[Any] = [target] * n if single else list(target)
        if len(targets) != n:
            raise ValueError(f"{len(targets)} targets for {n} images")
        by_size: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(prepared):
            by_size.setdefault(tuple(p.x.shape), []).append(i)
        groups: list[tuple[list[int], Any]] = []
        for idx in by_size.values():
            t = [targets[i] for i in idx]
            # capture checks the targets' range; a model without a classifier has no gradients to take
            want: Any = None
            if gradients:
                if all(v is None for v in t):
                    want = "top"
                elif any(v is None for v in t):
                    raise ValueError("give a target for every image of the batch, or for none")
                elif single:
                    want = t[0]  # one target for all: a class, a similarity, a function
                else:
                    want = t if num_classes > 0 else None
            groups.append((idx, want))
        return prepared, sources, groups

    def result(self, prepared: PreparedImage, cap: Any, source: str = "image") -> InferenceResult:
        """The result of ``prepared`` from its capture ``cap`` (one image's: :meth:`run_batch`'s results, and a
        streamed pass's, whose every-layer tensors are shapes only)."""
        m = self.model
        return InferenceResult(
            source=source,
            rgb=prepared.rgb,
            geometry=prepared.geometry,
            capture=cap,
            model_data=self.model_data(cap.grid),
            model_name=getattr(self.spec, "name", "model"),
            device=self.device,
            precision=self.precision,
            labels=getattr(self.spec, "labels", None),
            num_registers=int(getattr(getattr(m, "config", None), "num_reg_tokens", 0) or 0),
            probability=getattr(self.spec, "probability", "softmax"),
            head_kind=getattr(self.spec, "head_kind", "classifier"),
            num_classes=(0 if is_feature_model(m) else int(getattr(m, "num_classes", 0) or 0))
            if hasattr(m, "num_classes") else None,
        )


def run_inference(model: torch.nn.Module, image: Any, *, source: str = "image", target: int | None = None,
                  device: str = "cpu", precision: str = "fp32") -> InferenceResult:
    """One-off :meth:`Pipeline.run` (the model, adapted when it is not a vitviz ViT, is moved to ``device`` /
    ``precision``)."""
    return Pipeline(capturable(model), device=device, precision=precision).run(image, source=source, target=target)

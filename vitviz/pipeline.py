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
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from vitviz import analysis as A
from vitviz._util.arrays import to_numpy
from vitviz.capture import ImageCapture, capture
from vitviz.capture.foreign import AdaptedModel, adapt, is_vitviz_model
from vitviz.capture.heads import LEGRAD_POOLINGS, is_feature_model
from vitviz.devices import (  # noqa: F401 - device_description re-exported
    PRECISION_CHOICES,
    available_devices,
    available_precisions,
    device_description,
    normalise_device,
    resolve_precision,
)
from vitviz.model.preprocess import CropGeometry
from vitviz.model.sources.refs import open_model, parse_model_ref
from vitviz.model.sources.user_module import load_user_module, parse_user_ref

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class ModelData:
    """What depends on the model (and the patch grid) only: computed once, shared by every image's result.

    Attributes:
        grid: the patch grid this data is for.
        pos_embed: ``[N_pos, D]`` float32 position embedding resampled to ``grid`` (prefix slots included when the
            model has them), or None.
        patch_embed_weight: ``[D, C, P, P]`` float32 patch-embedding filters, or None.
    """

    def __init__(self, grid: tuple[int, int], pos_embed: torch.Tensor | None,
                 patch_embed_weight: torch.Tensor | None):
        self.grid = (int(grid[0]), int(grid[1]))
        self.pos_embed = pos_embed
        self.patch_embed_weight = patch_embed_weight
        self._lock = threading.Lock()
        self._cache: dict[Any, Any] = {}

    def _get(self, key: Any, fn) -> Any:
        with self._lock:
            if key not in self._cache:
                self._cache[key] = fn()
            return self._cache[key]

    def pos_similarity(self) -> np.ndarray | None:
        """``[gh, gw, gh, gw]`` cosine similarity of the position embeddings, or None when the model has none."""
        pe = self.pos_embed
        if pe is None or pe.shape[0] < self.grid[0] * self.grid[1]:
            return None
        p = pe.shape[0] - self.grid[0] * self.grid[1]
        return self._get("possim", lambda: to_numpy(A.position_embedding_similarity(pe[None], grid=self.grid,
                                                                                     num_prefix_tokens=p)))

    def filters(self, k: int = 28) -> np.ndarray | None:
        """``[k, P, P, C]`` principal components of the patch-embedding filters, in [0, 1].

        Each component is scaled on its own, so the first k of a longer list are the same: one decomposition
        serves every ``k`` up to the most asked for.
        """
        w = self.patch_embed_weight
        if w is None:
            return None
        k = min(k, w.shape[0], w[0].numel())
        with self._lock:
            have = self._cache.get("filters")
            if have is None or have.shape[0] < k:
                have = self._cache["filters"] = to_numpy(A.embedding_filters(w, k=k))
        return have[:k]

    @classmethod
    def of(cls, model: torch.nn.Module, grid: tuple[int, int]) -> "ModelData":
        pos = getattr(model, "pos_embed", None)
        pos_embed = None
        if pos is not None:
            try:
                pos_embed = model.pos_embed_for(tuple(grid))[0].detach().float().cpu()
            except Exception:  # noqa: BLE001 - a model without resampling support still shows the other views
                pos_embed = pos[0].detach().float().cpu()
        pe = getattr(model, "patch_embed", None)
        weight = pe.proj.weight.detach().float().cpu() if pe is not None and hasattr(pe, "proj") else None
        return cls(grid, pos_embed, weight)


@dataclass
class PreparedImage:
    """One image ready for the model (:meth:`Pipeline.prepare`): the normalised input ``x [C, h, w]`` (float32),
    where its crop lies in the image, and the image's pixels uint8 ``[H, W, 3]``."""

    x: torch.Tensor
    geometry: CropGeometry
    rgb: np.ndarray


@dataclass
class InferenceResult:
    """One image through one model: everything the views need, on the CPU in float32.

    The per-image tensors are those of :meth:`vitviz.capture.Capture.image` (``capture``); the properties below
    read them from there.

    Attributes:
        source: the image file (or a name such as ``"pasted image"``).
        rgb: the full image, uint8 ``[H, W, 3]`` (EXIF rotation applied).
        geometry: where the model's input crop lies in the image.
        capture: attentions ``[L, H, N, N]``, tokens ``[L+1, N, D]``, attention gradients, logits ``[K]``, target.
        model_data: position embeddings and filters of the model (shared by every result of that model and grid).
        model_name, device, precision: for captions and the status bar.
        labels: class names (None when the model has none).
        num_registers: register tokens among the prefix tokens (Darcet et al. 2023), 0 for most models.
        num_classes: classes of the model's head (0: a feature model, whose output is not class scores; None:
            unknown).

    The maps and statistics are not part of the result: the views and the session compute them from these tensors
    with the :mod:`vitviz.analysis` functions when they are first shown, and cache them per result.
    """

    source: str
    rgb: np.ndarray
    geometry: CropGeometry
    capture: ImageCapture
    model_data: ModelData | None = None
    model_name: str = "model"
    device: str = "cpu"
    precision: str = "fp32"
    labels: tuple[str, ...] | None = None
    num_registers: int = 0  # register tokens (the last of the prefix tokens)
    num_classes: int | None = None  # classes of the model's head; 0: a feature model (logits are its features)

    # ------------------------------------------------------------------ the capture's fields
    @property
    def attentions(self) -> torch.Tensor:
        return self.capture.attentions

    @property
    def tokens(self) -> torch.Tensor:
        return self.capture.tokens

    @property
    def attention_grads(self) -> torch.Tensor | None:
        return self.capture.attention_grads

    @property
    def pool_attention(self) -> torch.Tensor | None:
        """``[H, N]``: the attention-pooling head's row over the tokens (SigLIP), the "[CLS] row" of a model
        without a class token; None for other models."""
        return getattr(self.capture, "pool_attention", None)

    @property
    def pool_attention_grad(self) -> torch.Tensor | None:
        return getattr(self.capture, "pool_attention_grad", None)

    @property
    def logits(self) -> torch.Tensor:
        return self.capture.logits

    @property
    def target(self) -> int | None:
        """The class whose logit the gradients explain, or None (no gradients, or a target that is not a class)."""
        return self.capture.target

    @property
    def target_spec(self) -> Any:
        """What the gradients explain (:mod:`vitviz.capture.targets`), or None when the result has no gradients."""
        return getattr(self.capture, "target_spec", None)

    @property
    def target_score(self) -> float | None:
        """The target's value for this image (a logit, a similarity ...), or None."""
        return getattr(self.capture, "score", None)

    def target_text(self) -> str | None:
        """The target in words: the class's label, "similar to image cat.jpg", the function's name; None without
        one."""
        spec = self.target_spec
        if spec is None:
            return None if self.target is None else self.label(self.target)
        if getattr(spec, "kind", "") == "class":
            return self.label(self.target) if self.target is not None else spec.describe(self.labels)
        return spec.describe(self.labels)

    @property
    def legrad(self) -> dict[str, torch.Tensor]:
        """LeGrad's per-layer maps ``[L, gh * gw]`` by pooling (empty without gradients)."""
        return getattr(self.capture, "legrad", None) or {}

    @property
    def gradcam(self) -> torch.Tensor | None:
        """GradCAM's per-layer maps ``[L, gh * gw]``, or None."""
        return getattr(self.capture, "gradcam", None)

    @property
    def grid(self) -> tuple[int, int]:
        return self.capture.grid

    @property
    def patch_size(self) -> int:
        return self.capture.patch_size

    @property
    def num_prefix_tokens(self) -> int:
        return self.capture.num_prefix_tokens

    @property
    def pos_embed(self) -> torch.Tensor | None:
        return None if self.model_data is None else self.model_data.pos_embed

    @property
    def patch_embed_weight(self) -> torch.Tensor | None:
        return None if self.model_data is None else self.model_data.patch_embed_weight

    # ------------------------------------------------------------------ derived
    @property
    def num_layers(self) -> int:
        return int(self.attentions.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.attentions.shape[1])

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def image_size(self) -> tuple[int, int]:
        return (int(self.rgb.shape[0]), int(self.rgb.shape[1]))

    @property
    def probabilities(self) -> torch.Tensor:
        return torch.softmax(self.logits.float(), dim=-1)

    def label(self, index: int) -> str:
        if self.labels is not None and 0 <= index < len(self.labels):
            return self.labels[index]
        return f"class {index}"

    def excluding(self, patches: Any) -> "InferenceResult":
        """This result with the given patch tokens ignored as attention keys: their columns removed from every
        layer's attention, rows renormalised, their gradient columns dropped
        (:func:`vitviz.analysis.exclude_tokens`); tokens, logits and the rest shared (the views compute their maps
        from the new attention).

        Args:
            patches: bool ``[gh * gw]`` over the patch tokens.
        """
        mask = torch.as_tensor(np.asarray(patches, dtype=bool).reshape(-1))
        attn, grads = A.exclude_tokens(self.attentions, mask, num_prefix_tokens=self.num_prefix_tokens,
                                       grads=self.attention_grads)
        return replace(self, capture=replace(self.capture, attentions=attn, attention_grads=grads))

    def top_k(self, k: int = 5) -> list[tuple[int, str, float]]:
        """``[(class index, label, probability)]`` for the k most probable classes; empty for a model without a
        classifier (DINO, DINOv2, CLIP / SigLIP towers: its output is features, not class scores)."""
        if self.num_classes == 0:
            return []
        p = self.probabilities
        k = min(k, p.numel())
        vals, idx = p.topk(k)
        return [(int(i), self.label(int(i)), float(v)) for v, i in zip(vals, idx)]


# model -> float32 copies of its floating parameters and buffers (CPU), kept while the model computes below float32
_full_precision: weakref.WeakKeyDictionary[torch.nn.Module, dict[str, torch.Tensor]] = weakref.WeakKeyDictionary()
_full_precision_lock = threading.Lock()


def cast_model(model: torch.nn.Module, device: Any, dtype: torch.dtype) -> torch.nn.Module:
    """Move ``model`` to ``device`` and cast its floating weights to ``dtype`` in place, reversibly.

    Casting a float32 model to bf16/fp16 rounds its weights; casting back would not undo that (a window switched
    bf16 -> fp32 would keep computing with rounded weights). So the first cast below float32 keeps a float32 copy of
    the floating parameters and buffers on the CPU (the weights' size once more, held here by model, for as long as
    the model lives), and a cast back to float32 restores them bit for bit and drops the copy.
    """
    with _full_precision_lock:
        saved = _full_precision.get(model)
        floating = {k: t for k, t in model.state_dict(keep_vars=True).items() if t.is_floating_point()}
        if dtype != torch.float32 and saved is None and floating and all(t.dtype == torch.float32
                                                                             for t in floating.values()):
            _full_precision[model] = {k: t.detach().to("cpu", copy=True) for k, t in floating.items()}
        model.to(device=device, dtype=dtype)
        if dtype == torch.float32 and saved is not None:
            with torch.no_grad():
                for k, t in model.state_dict(keep_vars=True).items():
                    if k in saved and tuple(t.shape) == tuple(saved[k].shape):
                        t.copy_(saved[k])
            del _full_precision[model]
    return model


def has_full_precision_copy(model: torch.nn.Module) -> bool:
    """Whether :func:`cast_model` keeps a float32 copy of ``model``'s weights (it computes below float32)."""
    with _full_precision_lock:
        return model in _full_precision


def placement(device: str, precision: str) -> tuple[str, str, str | None]:
    """Where a model is opened: the one fallback policy of :meth:`Pipeline.open`.

    ``device`` when this machine has it, else the CPU; ``precision`` when that device offers it
    (:func:`vitviz.devices.available_precisions`: fp16 is GPU-only), else fp32. Returns ``(device, precision,
    note)``; the note says what changed and why (None when nothing did).
    """
    notes = []
    device = normalise_device(device)
    if device not in available_devices():
        notes.append(f"device {device} is not available here: using the CPU")
        device = "cpu"
    if precision not in available_precisions(device):
        notes.append(f"precision {precision} is not available on {device}: using fp32")
        precision = "fp32"
    return device, precision, "; ".join(notes) or None


def capturable(model: torch.nn.Module, **adapt_options: Any) -> torch.nn.Module:
    """``model`` as the pipeline takes it: a vitviz ViT or an :class:`~vitviz.capture.foreign.AdaptedModel` as it
    is, any other module adapted (:class:`~vitviz.capture.foreign.AdaptedModel`, which finds its attention, input
    size and patch grid; ``adapt_options`` as there).

    Raises:
        CaptureError: nothing recognisable in the module (the message names what was looked for).
    """
    if adapt_options:
        return adapt(model, **adapt_options)
    if isinstance(model, AdaptedModel) or is_vitviz_model(model):
        return model
    return adapt(model)


def open_adapted(source: str | os.PathLike[str] | torch.nn.Module, *, progress: Any = None, show_bar: bool = True,
                 weights: str | os.PathLike[str] | None = None, init: Any = None,
                 adapt_options: dict[str, Any] | None = None, **load_kwargs: Any) -> tuple[torch.nn.Module, str | None]:
    """The model ``source`` names, ready to capture: ``(model, note)`` with a note for the user or None.

    Args:
        source: a model reference or what a user types for one (:func:`vitviz.model.sources.refs.parse_model_ref`:
            ``demo``, a checkpoint path, ``pretrained:NAME``, ``hub:OWNER/NAME``, ``random:NAME`` ...), the user's
            own ``path/to/file.py:ClassName`` (:func:`vitviz.model.sources.user_module.load_user_module`, with
            ``weights`` and ``init``), or an ``nn.Module``. A module that is not a vitviz ViT is adapted here
            (:func:`capturable`).
        progress, show_bar: for downloads (:func:`vitviz.model.sources.refs.open_model`).
        adapt_options: for :func:`vitviz.capture.foreign.adapt` (``preprocess``, ``labels``, ``name``, and for other
            modules ``input_size``, ``attention``, ``blocks`` ...).
        load_kwargs: ``num_heads``, ``num_classes``, ``img_size``, ``preprocess``, ``labels`` for checkpoint files.

    Raises:
        CheckpointError, PretrainedError, ValueError: the reference, file or weights (naming them and the cause);
        CaptureError: a module whose attention cannot be captured.
    """
    opts = dict(adapt_options or {})
    is_module = isinstance(source, torch.nn.Module)
    user = None if is_module else parse_user_ref(os.fspath(source))
    if (weights is not None or init is not None) and user is None:
        raise ValueError("weights and init go with the user's own model: path/to/file.py:ClassName")
    given = sorted(k for k, v in load_kwargs.items() if v is not None)
    if given and (is_module or user is not None):
        raise ValueError(f"options {given} apply to checkpoint files, not to a module")
    if is_module:
        return capturable(source, **opts), None
    if user is not None:
        loaded = load_user_module(os.fspath(source), weights=weights, init=init)
        name = opts.pop("name", None)
        if is_vitviz_model(loaded.module):
            return adapt(loaded.module, **opts), loaded.note
        return AdaptedModel(loaded.module, name=name or loaded.name, source_path=loaded.path, **opts), loaded.note
    model, note = open_model(parse_model_ref(source), progress=progress, show_bar=show_bar, **load_kwargs)
    return capturable(model, **opts), note


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
        return pipeline

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
                data.filters()
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

    def run(self, image: Any, *, source: str = "image", target: Any = None) -> InferenceResult:
        """Preprocess one image with the model's spec, capture attention and gradients, return the result.

        Args:
            image: a PIL image (any mode; converted to RGB once) or a :class:`vitviz.imaging.LoadedImage`.
            source: a name for captions (the file path).
            target: what the gradient views explain (:func:`vitviz.capture.targets.as_target`: a class index, a
                similarity target, a function of the output), or None for the top prediction of the same pass.

        Returns:
            An :class:`InferenceResult` with tensors on the CPU in float32.
        """
        return self.run_batch([image], sources=[source], target=target)[0]

    def run_batch(self, images: Sequence[Any], *, sources: Sequence[str] | None = None,
                  target: Any = None, gradients: bool = True, legrad: Sequence[str] = LEGRAD_POOLINGS,
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
            legrad, gradcam: the LeGrad poolings and GradCAM maps taken with the gradients (a vitviz ViT only; a few
                block-sized backward steps each; :mod:`vitviz.capture.gradient_maps`).

        Returns:
            One :class:`InferenceResult` per image, in order; each image's tensors are slices of the batch's
            (the batch's buffers live as long as any of its results).
        """
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
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(prepared):
            groups.setdefault(tuple(p.x.shape), []).append(i)
        caps: list[Any] = [None] * n
        for idx in groups.values():
            x = torch.stack([prepared[i].x for i in idx]).to(device=self.device, dtype=DTYPES[self.precision])
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
            extra: dict[str, Any] = {}
            if is_vitviz_model(self.model) and want is not None:
                extra = {"legrad": tuple(legrad), "gradcam": gradcam}
            with torch.inference_mode(False):
                cap = capture(self.model, x, target=want, store_dtype=torch.float32, **extra)
            for b, i in enumerate(idx):
                caps[i] = cap.image(b)
            del cap
        results = []
        registers = int(getattr(getattr(self.model, "config", None), "num_reg_tokens", 0) or 0)
        for p, cap, source in zip(prepared, caps, sources):
            results.append(InferenceResult(
                source=source,
                rgb=p.rgb,
                geometry=p.geometry,
                capture=cap,
                model_data=self.model_data(cap.grid),
                model_name=getattr(self.spec, "name", "model"),
                device=self.device,
                precision=self.precision,
                labels=getattr(self.spec, "labels", None),
                num_registers=registers,
                num_classes=(0 if is_feature_model(self.model) else int(getattr(self.model, "num_classes", 0) or 0))
                if hasattr(self.model, "num_classes") else None,
            ))
        return results


def run_inference(model: torch.nn.Module, image: Any, *, source: str = "image", target: int | None = None,
                  device: str = "cpu", precision: str = "fp32") -> InferenceResult:
    """One-off :meth:`Pipeline.run` (the model, adapted when it is not a vitviz ViT, is moved to ``device`` /
    ``precision``)."""
    return Pipeline(capturable(model), device=device, precision=precision).run(image, source=source, target=target)

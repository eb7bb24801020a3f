"""What a front end is handed in memory by ``vitviz.show`` (the window) and ``vitviz.notebook.Viewer`` (the notebook):
the images (paths, PIL images, arrays, tensors), the model as a :class:`~vitviz.pipeline.Pipeline` on its own device
and precision, a standing target and text prompts, each checked before anything is shown. No Qt; torch is imported
when a model is placed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vitviz import imaging
from vitviz.model.sources.refs import parse_model_ref

__all__ = ["as_images", "check_target", "memory_pipeline", "with_text"]


def as_images(images: Any) -> list[tuple[str, Any]]:
    """``[(name, PIL image or None for a file)]`` from paths, PIL images, uint8 arrays ``[H, W(, C)]`` or tensors
    ``[C, H, W]`` (floats in 0..1 or uint8)."""
    if images is None:
        return []
    if isinstance(images, (str, os.PathLike, Image.Image, np.ndarray)) or hasattr(images, "detach"):
        images = [images]
    out: list[tuple[str, Any]] = []
    for i, item in enumerate(images, start=1):
        if isinstance(item, (str, os.PathLike)):
            p = Path(item).expanduser()
            if not p.is_file():
                raise ValueError(f"{p}: no such image file")
            out.append((str(p), None))
            continue
        name = f"image {i}"
        if isinstance(item, Image.Image):
            fn = getattr(item, "filename", "")
            name = f"{Path(fn).name} ({i})" if fn else name
            out.append((name, imaging.to_rgb(item)))
            continue
        if hasattr(item, "detach"):  # a torch tensor [C, H, W] (or [H, W])
            t = item.detach().cpu()
            if t.ndim == 3 and t.shape[0] in (1, 3, 4):
                t = t.permute(1, 2, 0)
            arr = (t.double() if t.is_floating_point() else t).numpy()  # bfloat16 has no numpy dtype
            if arr.dtype != np.uint8:
                arr = np.clip(np.round(arr.astype(np.float64) * 255.0), 0, 255).astype(np.uint8)
            item = arr.squeeze(-1) if arr.ndim == 3 and arr.shape[-1] == 1 else arr
        if isinstance(item, np.ndarray):
            if item.dtype != np.uint8:
                raise ValueError(f"{name}: an image array must be uint8 [H, W] or [H, W, 3], got dtype {item.dtype}")
            out.append((name, imaging.image_from_array(item, name).image))
            continue
        raise ValueError(f"{name}: expected an image file path, a PIL image, a uint8 array or a tensor, got "
                         f"{type(item).__name__}")
    return out


def check_target(pipe: Any, target: Any, items: list[tuple[str, Any]]) -> Any:
    """``target`` as the window's standing target, checked before any window opens: a function of the output is
    called on the first image's output (one forward pass, with autograd on), so that one that raises, returns no
    tensor, no scalar or a value that does not depend on the output is one :class:`TargetError` naming it."""
    from vitviz.capture.targets import CallableTarget, TargetError, as_target, differentiable_scores
    from vitviz.document.target_choice import as_choice

    try:
        choice, made = as_choice(target)
    except ValueError as e:
        raise TargetError(f"vitviz.show(target=...): {e}") from None
    if choice.kind == "class":
        choice.build(pipe)  # a class the model has (TargetError naming the range), on a classifier
    if choice.kind == "text":
        return choice.build(pipe)  # the prompt encoded by the model's text tower (TargetError: none, why)
    t = made if made is not None else as_target(choice.fn) if choice.kind == "callable" else None
    if not isinstance(t, CallableTarget):
        return choice if made is None else made
    import torch

    name, pil = items[0] if items else (None, None)
    if pil is None:
        from vitviz.resources import sample_images

        pil = imaging.load_image(name if name is not None else sample_images()[0]).image
    x = pipe.prepare(pil).x[None].to(device=pipe.device, dtype=next(pipe.model.parameters()).dtype)
    with torch.enable_grad():
        out = pipe.model(x)
        out = out[0] if isinstance(out, (tuple, list)) else out
        differentiable_scores(t, out, None)  # TargetError: raises, not a scalar, not of the output
    return t


def with_text(pipe: Any, model: Any, text: Any, text_tower: Any) -> Any:
    """The pipeline over the prompts ``text`` (checked before any window opens): the text tower given, else the one
    of the model's source (a model opened from a folder, a file or by name).

    Raises:
        TargetError: no prompts, an empty one, no text tower (a module handed over without ``text_tower``, a model
            whose source has none), one line naming it.
    """
    from vitviz.capture.targets import TargetError
    from vitviz.pipeline import prompt_pipeline

    if text_tower is not None:
        pipe.attach_text_tower(text_tower)
    elif pipe.source is None:
        source = getattr(getattr(model, "spec", None), "source_path", None)
        if source is None:
            raise TargetError("vitviz.show(text=...): this model was handed over as a module, so vitviz does not know "
                              "its text tower: pass text_tower=vitviz.model.text.open_text_tower(SOURCE), or give the "
                              "model's folder, file or name instead of the module")
        pipe.source = str(source)
    prompts = list(text) if not isinstance(text, str) else text
    try:
        return prompt_pipeline(pipe, prompts)
    except TargetError as e:
        raise TargetError(f"vitviz.show(text=...): {e}") from None
    except Exception as e:  # noqa: BLE001 - no text tower (why), a tokenizer file missing, another model's tower
        raise TargetError(f"vitviz.show(text=...): {str(e).strip().splitlines()[0]}") from None


def memory_pipeline(model: Any, *, labels: Any = None, preprocess: Any = None,
                    **adapter_options: Any) -> tuple[Any, str | None]:
    """``(pipeline, source)``: ``model`` (a module, or a folder, file or name opened on the CPU) adapted and placed
    on its own device and in its own precision (the caller's model is not moved or cast); ``source`` the reference
    it was opened from (None for a module).

    Raises:
        CaptureError, ValueError: the model's attention cannot be captured, or bad labels / preprocess.
    """
    from vitviz.capture.foreign import adapt
    from vitviz.pipeline import DTYPES, Pipeline

    source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    if source is not None:  # a folder, a file or a name: opened here (its text tower comes from it)
        source = parse_model_ref(source)
        model = Pipeline.open(source, show_bar=False).model
    m = adapt(model, labels=labels, preprocess=preprocess, **adapter_options)
    first = next((p for p in m.parameters() if p.is_floating_point()), None)
    device = str(first.device) if first is not None else "cpu"
    precision = next((k for k, v in DTYPES.items() if first is not None and v == first.dtype), "fp32")
    pipe = Pipeline(m, device=device, precision=precision)
    pipe.source = source
    return pipe, source

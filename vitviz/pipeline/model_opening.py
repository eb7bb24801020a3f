"""How a model is opened and placed: :func:`open_adapted` (a reference, a checkpoint, the user's module or an
``nn.Module``, adapted when foreign), :func:`placement` (the one fallback policy: a missing device -> the CPU, a
precision the device lacks -> fp32), :func:`cast_model` (reversible casts below float32). No Qt.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import torch

from vitviz.capture.foreign import AdaptedModel, adapt, is_vitviz_model
from vitviz.devices import (
    available_devices,
    available_precisions,
    normalise_device,
)
from vitviz.model.sources.refs import open_model, parse_model_ref
from vitviz.model.sources.user_module import load_user_module, parse_user_ref

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


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

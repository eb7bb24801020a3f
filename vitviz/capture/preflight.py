"""What both capture paths (a vitviz ViT's hooks, any other module's recording) share before and around their
forward pass: one capture of a model at a time (:data:`CAPTURE_LOCK`), the model's device and dtype, the target
classes checked against the batch and the head, and the memory estimate that refuses a capture too big to fit.

This module never imports Qt.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from vitviz.capture.results import CaptureError
from vitviz.capture.target_guard import refuse_inside_target
from vitviz.capture.targets import ClassTarget, TargetError, as_target

# capture() switches the model's attention path and adds hooks for the duration of a forward pass: two captures of
# the same model at once (a GUI worker and another thread) would restore each other's flags mid-pass. Serialise them.
CAPTURE_LOCK = threading.RLock()


@contextmanager
def hold_capture() -> Iterator[None]:
    """:data:`CAPTURE_LOCK` for one capture, refused (:class:`~vitviz.capture.target_guard.TargetMisuse`) when asked
    from inside a target function: the outer capture's hooks would record the second pass over the first."""
    refuse_inside_target()
    with CAPTURE_LOCK:
        yield


@contextmanager
def explicit_attention(modules: Sequence[nn.Module]) -> Iterator[list[Any]]:
    """One capture's hold on a vitviz ViT's shared state: :data:`CAPTURE_LOCK` held and each attention module of
    ``modules`` on its explicit path (``fused = False``: its probabilities pass through ``attn_map``, where hooks see
    them). Yields the list the caller appends its hook handles to; on exit, also on an error, every handle is
    removed and every module's ``fused`` flag is restored. Refused from inside a target function
    (:func:`hold_capture`)."""
    with hold_capture():
        before = [m.fused for m in modules]
        handles: list[Any] = []
        try:
            for m in modules:
                m.fused = False
            yield handles
        finally:
            for h in handles:
                h.remove()
            for m, f in zip(modules, before):
                m.fused = f


def model_device_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    """The device and dtype of the model's first floating parameter (or buffer): where and how its input goes."""
    for p in model.parameters():
        if p.is_floating_point():
            return p.device, p.dtype
    for b in model.buffers():
        if b.is_floating_point():
            return b.device, b.dtype
    return torch.device("cpu"), torch.float32


def resolve_targets(target: Any, B: int, K: int) -> torch.Tensor:
    """``[B]`` int64 target classes from one index or one per image, checked against ``K`` classes (ValueError)."""
    if isinstance(target, (bool, np.bool_)):
        raise ValueError(f"target must be a class index or one index per image, got {target!r}")
    if isinstance(target, (int, np.integer)):
        t = torch.full((B,), int(target), dtype=torch.long)
    else:
        if isinstance(target, torch.Tensor):
            t = target.detach().to("cpu")
        elif isinstance(target, (Sequence, np.ndarray)):
            t = torch.as_tensor(np.asarray(target))
        else:
            raise ValueError(f"target must be an int or a sequence of ints, got {type(target).__name__}")
        if t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
            raise ValueError(f"target must hold integer class indices, got dtype {t.dtype}")
        t = t.reshape(-1).long() if t.ndim == 0 else t.long()
        if t.ndim != 1 or t.numel() not in (1, B):
            raise ValueError(f"target must be one class index or {B} (one per image), got shape {tuple(t.shape)}")
        t = t.expand(B).clone()
    if K <= 0:
        raise ValueError("the model has no classification head (num_classes=0): a target class is meaningless")
    bad = [int(v) for v in t if not 0 <= int(v) < K]
    if bad:
        raise ValueError(f"target class(es) {bad} out of range for a model with {K} classes (valid: 0..{K - 1})")
    return t


def resolve_target(target: Any, B: int, K: int, features: bool) -> tuple[Any, torch.Tensor | None, bool]:
    """What :func:`vitviz.capture.capture`'s ``target`` asks for: ``(target, classes, top)``.

    ``target`` is None (no gradients), ``"top"`` / ``ClassTarget(None)`` (each image's top class, ``top`` True:
    the classes are read from the pass), a class index / one per image / ``ClassTarget(i)`` (``classes [B]``
    checked against ``K``), a similarity or callable target, or a function of the output. The top class of a feature
    model (``features``: its output is an embedding) is no target: ``(None, None, False)``.

    Raises:
        ValueError (TargetError): a bad class or target, naming it.
    """
    if target is None:
        return None, None, False
    if isinstance(target, str) and target != "top":
        raise TargetError(f"target must be a class index, one index per image, 'top', a similarity target or a "
                          f"function of the output, got {target!r}")
    per_image = isinstance(target, (Sequence, np.ndarray, torch.Tensor)) and not isinstance(target, str)
    spec = ClassTarget(None) if per_image else as_target(target)
    if isinstance(spec, ClassTarget) and spec.index is None and not per_image:
        if features or K <= 0:
            return None, None, False  # no classifier: nothing to differentiate
        return spec, None, True
    if isinstance(spec, ClassTarget):
        if features and K > 0:
            raise TargetError(f"target {target!r}: this model's output is an embedding (a projection head), not class "
                              "scores; explain a similarity target instead")
        classes = resolve_targets(target if per_image else spec.index, B, K)
        if not per_image:
            return spec, classes, False
        first = int(classes[0])
        return (ClassTarget(first) if bool((classes == first).all()) else spec), classes, False
    return spec, None, False


# measured (bench/memory.py): a capture's peak is about this many attention stacks [L, B, H, N, N] on top of the
# weights: the stored stack, the live graph of every layer's attention and the gradients
_STACKS_WITH_GRADS, _STACKS_WITHOUT = 4.6, 1.1


def available_memory(device: torch.device | str = "cpu") -> int | None:
    """Bytes that can still be allocated on ``device`` (Linux: MemAvailable; CUDA: free device memory), or None
    when unknown."""
    device = torch.device(device)
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except Exception:  # noqa: BLE001 - no driver / device: unknown
            return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_capture_memory(L: int, B: int, H: int, N: int, *, grads: bool, device: torch.device | str = "cpu",
                         itemsize: int = 4, available: int | None = None) -> None:
    """Refuse, before allocating anything, a capture whose attention stacks would not fit in memory.

    Estimate: ``k * L * B * H * N**2 * itemsize`` with k = 4.6 with gradients, 1.1 without (measured peaks of
    ViT-H/14 at 518 px: 18.9 GiB and 6.4 GiB). ``available`` defaults to :func:`available_memory`.

    Raises:
        CaptureError: the estimate exceeds the available memory (the message gives both and what to change).
    """
    need = (_STACKS_WITH_GRADS if grads else _STACKS_WITHOUT) * L * B * H * N * N * itemsize
    free = available_memory(device) if available is None else available
    if free is not None and need > free:
        raise CaptureError(
            f"capturing {L} layers x {H} heads x {N}x{N} tokens for {B} image(s){' with gradients' if grads else ''} "
            f"needs about {need / 2**30:.1f} GiB, but only {free / 2**30:.1f} GiB is available on {device}; use a "
            f"smaller input size, fewer images at once{', no gradient target' if grads else ''}, or a machine with "
            f"more memory")

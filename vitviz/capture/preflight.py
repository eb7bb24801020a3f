"""What both capture paths (a vitviz ViT's hooks, any other module's recording) share before and around their
forward pass: one capture of a model at a time (:data:`CAPTURE_LOCK`), the model's device and dtype, the target
classes checked against the batch and the head, and the memory estimate that refuses a capture too big to fit.

This module never imports Qt.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from vitviz.capture.results import CaptureError

# capture() switches the model's attention path and adds hooks for the duration of a forward pass: two captures of
# the same model at once (a GUI worker and another thread) would restore each other's flags mid-pass. Serialise them.
CAPTURE_LOCK = threading.RLock()


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

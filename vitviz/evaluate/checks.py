"""Checks of the faithfulness functions' arguments (model, input, target, map, steps ...), each a ValueError naming
the argument and what is wrong, and what they read off the model (patch size, device and dtype)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from vitviz.capture.targets import CallableTarget, ClassTarget, SimilarityTarget
from vitviz.pipeline import DTYPES, Pipeline


def model_patch_size(model: nn.Module, patch_size: int | tuple[int, int] | None = None) -> tuple[int, int]:
    """The model's patch ``(height, width)``: ``patch_size`` when given, else ``model.patch_size``,
    ``model.patch_embed.patch_size`` or ``model.config.patch_size`` (an int or a pair)."""
    if patch_size is None:
        for owner, name in ((model, "patch_size"), (getattr(model, "patch_embed", None), "patch_size"),
                            (getattr(model, "config", None), "patch_size")):
            v = getattr(owner, name, None) if owner is not None else None
            if v is not None:
                patch_size = v
                break
        else:
            raise ValueError(f"cannot tell the patch size of {type(model).__name__} (no .patch_size, "
                             ".patch_embed.patch_size or .config.patch_size): pass patch_size=")
    ps = (patch_size, patch_size) if isinstance(patch_size, (int, np.integer)) else tuple(patch_size)
    if len(ps) != 2 or not all(isinstance(p, (int, np.integer)) and p > 0 for p in ps):
        raise ValueError(f"patch_size must be a positive int or a (height, width) pair, got {patch_size!r}")
    return (int(ps[0]), int(ps[1]))


def _num_classes(model: nn.Module) -> int | None:
    k = getattr(model, "num_classes", None)
    return int(k) if isinstance(k, (int, np.integer)) else None


def device_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    for t in list(model.parameters()) + list(model.buffers()):
        if t.is_floating_point():
            return t.device, t.dtype
    return torch.device("cpu"), torch.float32


def own_pipeline(model: nn.Module) -> Pipeline:
    """A :class:`~vitviz.pipeline.Pipeline` of ``model`` on its own device and in its own dtype
    (:func:`device_dtype`; a dtype that is no precision of vitviz's is run in fp32)."""
    device, dtype = device_dtype(model)
    precision = next((k for k, v in DTYPES.items() if v == dtype), "fp32")
    return Pipeline(model, device=str(device), precision=precision)


def check_choice(name: str, value: Any, valid: Sequence[str]) -> str:
    if value not in valid:
        raise ValueError(f"{name}={value!r}; valid: {', '.join(repr(v) for v in valid)}")
    return value


def check_steps(steps: Any) -> int:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    return int(steps)


def check_seeds(seeds: Any) -> int:
    if isinstance(seeds, bool) or not isinstance(seeds, (int, np.integer)) or seeds < 1:
        raise ValueError(f"seeds must be an integer >= 1, got {seeds!r}")
    return int(seeds)


def check_target(model: nn.Module, target: Any) -> int | SimilarityTarget | CallableTarget:
    """What the curves read: a class index (an int or a :class:`~vitviz.capture.targets.ClassTarget` with its index;
    the softmax probability), a :class:`~vitviz.capture.targets.SimilarityTarget` or a
    :class:`~vitviz.capture.targets.CallableTarget` (a plain function is one; the target's own score)."""
    if isinstance(target, ClassTarget):
        if target.index is None:
            raise ValueError("target: the top class is read from a capture; give the class index")
        target = int(target.index)
    elif isinstance(target, (SimilarityTarget, CallableTarget)):
        return target
    elif callable(target) and not isinstance(target, (torch.Tensor, np.ndarray, str)):
        return CallableTarget(target)
    if isinstance(target, (bool, np.bool_)) or not isinstance(target, (int, np.integer)):
        raise ValueError(f"target must be a class index (int), a similarity target or a function of the output, got "
                         f"{target!r}")
    k = _num_classes(model)
    if k is not None and not 0 <= int(target) < k:
        raise ValueError(f"target class {int(target)} out of range for a model with {k} classes (valid: 0..{k - 1})")
    if int(target) < 0:
        raise ValueError(f"target class {int(target)} is negative")
    return int(target)


def check_input(model: nn.Module, x: Any, patch: tuple[int, int]) -> tuple[torch.Tensor, tuple[int, int]]:
    """``x`` as ``[1, C, H, W]`` on the model's device and dtype, and its patch grid."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a preprocessed torch.Tensor [3, H, W] or [1, 3, H, W], got {type(x).__name__}")
    if x.ndim == 3:
        x = x[None]
    if x.ndim != 4 or x.shape[0] != 1:
        raise ValueError(f"x must be one preprocessed image [C, H, W] or [1, C, H, W], got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"x must be a float tensor in the model's normalised input space, got {x.dtype}")
    _, _, h, w = x.shape
    ph, pw = patch
    if h % ph or w % pw or h == 0 or w == 0:
        raise ValueError(f"input {h}x{w} is not a whole number of {ph}x{pw} patches")
    device, dtype = device_dtype(model)
    return x.detach().to(device=device, dtype=dtype), (h // ph, w // pw)


def check_saliency(saliency: Any, grid: tuple[int, int]) -> np.ndarray:
    """``saliency`` as float64 ``[gh * gw]`` (row-major), or a ValueError naming the expected shape."""
    if isinstance(saliency, torch.Tensor):
        s = saliency.detach().to("cpu", torch.float64).numpy()
    else:
        s = np.asarray(saliency, dtype=np.float64)
    if s.shape != tuple(grid):
        raise ValueError(f"saliency must be a map over the patch grid: expected shape {tuple(grid)}, got {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError(f"saliency has {int((~np.isfinite(s)).sum())} non-finite value(s) (NaN or inf)")
    return s.reshape(-1)


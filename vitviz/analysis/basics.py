"""Shared helpers of :mod:`vitviz.analysis`: input conversion, shape checks, head fusion. No Qt."""

from __future__ import annotations

import math
from typing import Any, Literal, Union

import numpy as np
import torch

from vitviz.analysis.choices import CLAMPS, FUSIONS

__all__ = ["CLAMPS", "FUSIONS", "Head", "HeadFusion"]

HeadFusion = Literal["mean", "max", "min"]
Head = Union[int, HeadFusion]


def check_choice(value: Any, valid: tuple[str, ...], name: str) -> None:
    """Raise ``ValueError("name=value; valid: ...")`` unless ``value`` is one of ``valid``."""
    if value not in valid:
        raise ValueError(f"{name}={value!r}; valid: " + ", ".join(repr(v) for v in valid))


def as_floating(x: Any, name: str) -> torch.Tensor:
    """``x`` (torch tensor or numpy array) as a floating tensor in its own precision: float16 / bfloat16 are kept
    (a stack stored in a model's reduced precision is then never copied whole: the analyses promote each slice they
    read to :func:`compute_dtype`); other dtypes -> float32."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(x))
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    x = x.detach()
    return x if x.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64) else x.float()


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the analyses compute ``x`` in: float64 for float64, float32 for everything else (float16 and
    bfloat16 are promoted, exactly, before any arithmetic)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def as_float(x: Any, name: str) -> torch.Tensor:
    """``x`` (torch tensor or numpy array) as a floating tensor: float16/bfloat16 -> float32, float64 kept."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(x))
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    x = x.detach()
    if x.dtype == torch.float64:
        return x
    return x.float()


def with_batch_dim(x: torch.Tensor, ndim: int, name: str, dims: str) -> tuple[torch.Tensor, bool]:
    """Return ``x`` with a leading batch dimension and whether it already had one.

    ``x`` must have ``ndim`` dimensions (one image, described by ``dims`` such as ``"L, H, N, N"``) or ``ndim + 1``.
    """
    if x.ndim == ndim:
        return x[None], False
    if x.ndim == ndim + 1:
        return x, True
    raise ValueError(f"{name} must be [{dims}] (one image) or [B, {dims}], got shape {tuple(x.shape)}")


def check_attn(attn: torch.Tensor, name: str = "attn") -> tuple[torch.Tensor, bool]:
    """Return ``attn`` as ``[B, L, H, N, N]`` and whether the input had the batch dimension."""
    attn, batched = with_batch_dim(attn, 4, name, "L, H, N, N")
    if attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"{name} must be square over tokens (..., N, N), got shape {tuple(attn.shape)}")
    return attn, batched


def resolve_grid(num_tokens: int, grid: tuple[int, int] | None, num_prefix_tokens: int) -> tuple[int, int]:
    """Check ``num_tokens == p + gh*gw``; infer a square grid when ``grid`` is None."""
    p = int(num_prefix_tokens)
    if p < 0:
        raise ValueError(f"num_prefix_tokens={p} must be >= 0")
    m = num_tokens - p
    if grid is None:
        side = int(round(math.sqrt(max(m, 0))))
        if m <= 0 or side * side != m:
            raise ValueError(
                f"cannot infer a square patch grid from {num_tokens} tokens with num_prefix_tokens={p}; "
                "pass grid=(gh, gw)"
            )
        return (side, side)
    gh, gw = int(grid[0]), int(grid[1])
    if gh <= 0 or gw <= 0 or gh * gw != m:
        raise ValueError(
            f"grid=({gh}, {gw}) has {gh * gw} patches but there are {num_tokens} tokens - {p} prefix = {m} patch tokens"
        )
    return (gh, gw)


def check_layer(layer: int, L: int, what: str = "layer") -> int:
    if not isinstance(layer, (int, np.integer)) or isinstance(layer, bool):
        raise TypeError(f"{what} must be an int, got {layer!r}")
    if not -L <= layer < L:
        raise IndexError(f"{what}={layer} out of range for {L} layers")
    return int(layer) % L


def fuse_heads(attn: torch.Tensor, head: Head, dim: int) -> torch.Tensor:
    """Select head ``head`` (int) or fuse all heads along ``dim`` with ``"mean" | "max" | "min"``."""
    if isinstance(head, str):
        if head == "mean":
            return attn.mean(dim)
        if head == "max":
            return attn.amax(dim)
        if head == "min":
            return attn.amin(dim)
        raise ValueError(f"head fusion {head!r}; valid: an int head index or one of {FUSIONS}")
    H = attn.shape[dim]
    if not isinstance(head, (int, np.integer)) or isinstance(head, bool):
        raise TypeError(f"head must be an int or one of {FUSIONS}, got {head!r}")
    if not -H <= head < H:
        raise IndexError(f"head={head} out of range for {H} heads")
    return attn.select(dim, int(head))


def discard_count(num_patch_keys: int, discard_ratio: float) -> int:
    """How many patch keys per row the discard zeroes: ``floor(discard_ratio * M)`` (round-off tolerant)."""
    if not 0.0 <= float(discard_ratio) <= 1.0:
        raise ValueError(f"discard_ratio={discard_ratio} must be in [0, 1]")
    return min(num_patch_keys, int(math.floor(float(discard_ratio) * num_patch_keys + 1e-9)))

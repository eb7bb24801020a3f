"""Rotary position embedding (RoPE) of vision transformers: the patch rows of the queries and keys are rotated, pair
by pair of channels, by angles that depend on the patch's position, after any q/k norm and before the scores. Prefix
tokens ([CLS], registers) are not rotated. Ported from timm's ``layers/pos_embed_sincos.py`` (Apache-2.0), whose
DINOv3 layout matches transformers' ``Dinov3ViTRopePositionEmbedding``.

Layouts (``ViTConfig.rope``):

* ``"axial"`` (EVA-02, Perception Encoder, timm's ``rope_reg*_gap`` ViTs; timm ``RotaryEmbeddingCat`` with
  ``in_pixels=False``): positions are patch indices ``0..s-1`` (+ ``rope_grid_offset``: 1 for PE), scaled to the
  pre-training grid (``rope_ref_grid``: ``p / s * ref``); ``head_dim / 4`` frequencies ``theta^(-k / (head_dim/4))``
  per axis (theta 10000); angles ``[axis0 bands, axis1 bands]`` laid out in interleaved pairs.
* ``"dinov3"``: patch centres ``(p + 0.5) / s`` mapped to ``(-1, 1)`` per axis; periods
  ``theta^(2k / (head_dim/2))`` (theta 100); angles ``2 pi c / period``; halves rotated (``rope_half``).
* ``"mixed"`` (timm's ``vit_*_rope_mixed_*``, Heo et al. 2024): learned frequencies per layer and head,
  ``rope.freqs [2, depth, heads, head_dim/2]``; angle ``x f_x + y f_y`` over patch indices; interleaved pairs.

``rope_grid_indexing="xy"`` puts the column (x) coordinate first (timm's flag). At another input size the positions
follow the grid exactly as the reference does (indices rescaled to the reference grid, or centres renormalised).

This module never imports Qt.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

RopeKind = Literal["none", "axial", "dinov3", "mixed"]
ROPE_KINDS: tuple[str, ...] = ("none", "axial", "dinov3", "mixed")
ROPE_INDEXINGS: tuple[str, ...] = ("ij", "xy")


def rope_coords(kind: str, grid: tuple[int, int], *, offset: float = 0.0, indexing: str = "ij",
                ref_grid: tuple[int, int] | None = None) -> torch.Tensor:
    """Patch coordinates ``[gh*gw, 2]`` (row-major patches; channels (row, column), or (column, row) for ``"xy"``),
    float32 on the CPU, as timm's ``_build_grid`` (``"index"`` for axial and mixed, ``"centered"`` for DINOv3)."""
    shape = list(grid)
    ref = list(ref_grid) if ref_grid is not None else None
    if indexing == "xy":
        shape = [shape[1], shape[0]]
        ref = [ref[1], ref[0]] if ref is not None else None
    cpu = "cpu"  # also inside `with torch.device("meta")`
    if kind == "dinov3":
        t = [(torch.arange(0.5, s, device=cpu, dtype=torch.float32) + offset) / float(s) for s in shape]
    else:
        t = [torch.arange(s, device=cpu, dtype=torch.int64).to(torch.float32) + offset for s in shape]
    if ref is not None and kind == "axial":
        t = [x / f * r for x, f, r in zip(t, shape, ref)]
    coords = torch.stack(torch.meshgrid(t, indexing=indexing), dim=-1)
    if kind == "dinov3":
        coords = 2.0 * coords - 1.0
    return coords.reshape(-1, 2)


def _layout(x: torch.Tensor, half: bool) -> torch.Tensor:
    """Per-frequency values ``[..., D/2]`` -> ``[..., D]``: ``[f0..fn, f0..fn]`` (halves) or ``[f0, f0, f1, f1 ...]``
    (interleaved pairs)."""
    return torch.cat([x, x], dim=-1) if half else x.repeat_interleave(2, -1)


def rope_angles(kind: str, grid: tuple[int, int], head_dim: int, *, theta: float, offset: float = 0.0,
                indexing: str = "ij", ref_grid: tuple[int, int] | None = None,
                freqs: torch.Tensor | None = None) -> torch.Tensor:
    """The rotation angle of every channel pair: ``[gh*gw, head_dim/2]``, or ``[depth, heads, gh*gw, head_dim/2]``
    for ``"mixed"`` (``freqs [2, depth, heads, head_dim/2]``)."""
    c = rope_coords(kind, grid, offset=offset, indexing=indexing, ref_grid=ref_grid)
    if kind == "axial":
        n = head_dim // 4
        bands = 1.0 / (theta ** (torch.arange(0, n, dtype=torch.int64).to(torch.float32) / n))
        return (c[:, :, None] * bands).flatten(1)
    if kind == "dinov3":
        n = head_dim // 4
        periods = theta ** (2.0 * torch.arange(n, dtype=torch.float32) / (head_dim // 2))
        return (2 * math.pi * c[:, :, None] / periods[None, None, :]).flatten(1)
    if kind == "mixed":
        if freqs is None:
            raise ValueError("rope='mixed' needs its learned frequencies")
        f = freqs.float()
        c = c.to(f.device)
        return c[:, 0, None] * f[0].unsqueeze(-2) + c[:, 1, None] * f[1].unsqueeze(-2)
    raise ValueError(f"rope={kind!r}; valid: {', '.join(ROPE_KINDS)}")


def rotate(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor, half: bool) -> torch.Tensor:
    """``x cos + rot(x) sin`` over the last axis (``rot``: ``[-x1, x0, -x3, x2 ...]`` for pairs, ``[-x_b, x_a]`` for
    halves), in ``x``'s dtype."""
    if half:
        a, b = x.chunk(2, dim=-1)
        turned = torch.cat([-b, a], dim=-1)
    else:
        turned = torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)
    return (x * cos + turned * sin).to(x.dtype)


def rotate_patches(q: torch.Tensor, k: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor,
                   half: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate the patch rows (the last ``sin.shape[-2]`` tokens) of ``q`` and ``k`` ``[B, H, N, hd]``; prefix rows
    pass unchanged."""
    n = sin.shape[-2]
    p = q.shape[-2] - n
    sin, cos = sin.to(q.device), cos.to(q.device)
    if p < 0:
        raise ValueError(f"the rotary embedding covers {n} patches but the sequence has {q.shape[-2]} tokens")
    q = torch.cat([q[..., :p, :], rotate(q[..., p:, :], sin, cos, half)], dim=-2)
    k = torch.cat([k[..., :p, :], rotate(k[..., p:, :], sin, cos, half)], dim=-2)
    return q, k


class RotaryEmbedding(nn.Module):
    """The model's RoPE: ``forward(grid)`` gives, per block, the ``(sin, cos)`` pair its attention rotates with
    (``[gh*gw, head_dim]``, or ``[heads, gh*gw, head_dim]`` for ``"mixed"``). Only ``"mixed"`` has weights
    (``freqs``, timm's name)."""

    def __init__(self, kind: str, head_dim: int, num_heads: int, depth: int, *, theta: float, offset: float = 0.0,
                 indexing: str = "ij", ref_grid: tuple[int, int] | None = None, half: bool = False):
        super().__init__()
        if kind not in ROPE_KINDS or kind == "none":
            raise ValueError(f"rope={kind!r}; valid: {', '.join(ROPE_KINDS[1:])}")
        if indexing not in ROPE_INDEXINGS:
            raise ValueError(f"rope_grid_indexing={indexing!r}; valid: 'ij', 'xy'")
        if head_dim % 4:
            raise ValueError(f"rotary position embedding needs a head width divisible by 4, got {head_dim}")
        self.kind, self.head_dim, self.depth = kind, head_dim, depth
        self.theta, self.offset, self.indexing, self.half = float(theta), float(offset), indexing, bool(half)
        self.ref_grid = tuple(ref_grid) if ref_grid is not None else None
        self.freqs = nn.Parameter(torch.zeros(2, depth, num_heads, head_dim // 2)) if kind == "mixed" else None

    def angles(self, grid: tuple[int, int]) -> torch.Tensor:
        """:func:`rope_angles` of this model at ``grid``."""
        return rope_angles(self.kind, tuple(grid), self.head_dim, theta=self.theta, offset=self.offset,
                           indexing=self.indexing, ref_grid=self.ref_grid, freqs=self.freqs)

    def forward(self, grid: tuple[int, int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        a = self.angles(grid)
        sin, cos = _layout(a.sin(), self.half), _layout(a.cos(), self.half)
        if self.kind == "mixed":
            return [(sin[i], cos[i]) for i in range(self.depth)]
        return [(sin, cos)] * self.depth

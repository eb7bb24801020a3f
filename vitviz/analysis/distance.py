"""Per-head statistics of attention: mean attention distance (ViT paper) and attention entropy. No Qt."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import torch

from vitviz.analysis.basics import as_floating, check_attn, compute_dtype, resolve_grid

__all__ = ["attention_entropy", "mean_attention_distance", "patch_distances"]


@lru_cache(maxsize=8)
def _patch_distances(gh: int, gw: int, patch_size: float, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The cached ``[gh*gw, gh*gw]`` distance matrix (computed in float64, then cast): callers must not modify it."""
    y, x = torch.meshgrid(torch.arange(gh, dtype=torch.float64), torch.arange(gw, dtype=torch.float64), indexing="ij")
    c = torch.stack([y.reshape(-1), x.reshape(-1)], dim=1)
    d = (c[:, None, :] - c[None, :, :]).pow(2).sum(-1).sqrt() * patch_size  # exact (cdist may use a matmul)
    return d.to(dtype)


def patch_distances(grid: tuple[int, int], patch_size: float) -> torch.Tensor:
    """Euclidean distance between patch centres in pixels: ``[gh*gw, gh*gw]`` float64 (row-major patches)."""
    return _patch_distances(int(grid[0]), int(grid[1]), float(patch_size)).clone()


def _distance_sums_(x: torch.Tensor, p: int, dist: torch.Tensor, buf: torch.Tensor, num: torch.Tensor,
                   den: torch.Tensor) -> None:
    """One layer of one image, ``x [H, N, N]`` (or of a batch, ``[B, H, N, N]``): ``num[..., h, i] = sum_j P_hij
    dist_ij`` and ``den[..., h, i] = sum_j P_hij`` over the patch block ``P = x[..., p:, p:]`` (``buf [..., H, M, M]``
    is scratch)."""
    P = x[..., p:, p:]
    torch.mul(P, dist, out=buf)
    torch.sum(buf, -1, out=num)
    torch.sum(P, -1, out=den)


def _distance_from_sums(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``[..., M]`` sums of :func:`_distance_sums_` -> ``[...]`` mean over the patch queries of ``num / den`` (a query
    with no patch mass contributes 0; a query whose attention is not finite makes the mean NaN, never a plausible
    0)."""
    tiny = torch.finfo(num.dtype).tiny
    kept = (den > 0) | den.isnan() | num.isnan()  # NaN > 0 is False: a NaN row must not pass as "no patch mass"
    return torch.where(kept, num / den.clamp_min(tiny), torch.zeros_like(num)).mean(-1)


def _entropy_sum_(x: torch.Tensor, buf: torch.Tensor, out: torch.Tensor) -> None:
    """One layer of one image, ``x [H, N, N]`` (or of a batch, ``[B, H, N, N]``): ``out[..., h] = sum_ij x_hij log2
    x_hij`` (0 log 0 = 0; ``buf`` of ``x``'s shape is scratch; ``out`` contiguous). log2 is the fastest log here; the
    clamp pass runs only when a zero (or invalid input) made a NaN."""
    N = x.shape[-1]
    flat = out.view(-1)
    torch.log2(x, out=buf).mul_(x)
    torch.sum(buf.view(-1, N * N), -1, out=flat)
    if flat.isnan().any():  # a * log2(max(a, tiny)) is exactly 0 at a == 0
        torch.clamp(x, min=torch.finfo(x.dtype).tiny, out=buf).log2_().mul_(x)
        torch.sum(buf.view(-1, N * N), -1, out=flat)


def _entropy_from_sums(sums: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Sums of :func:`_entropy_sum_` (in place) -> mean row entropy in nats (ln 2 rescales log2)."""
    return sums.mul_(-math.log(2.0) / num_keys)


def mean_attention_distance(
    attn: Any, *, grid: tuple[int, int] | None = None, patch_size: float, num_prefix_tokens: int = 1
) -> torch.Tensor:
    """Mean attention distance in pixels per layer and head (Dosovitskiy et al. 2020, Fig. 7 right / Fig. 11).

    ``P = attn[l, h, p:, p:]`` (patch queries x patch keys), ``P_ij <- P_ij / sum_j P_ij``;
    ``d[l, h] = (1 / M) sum_i sum_j P_ij * dist(i, j)`` with ``dist`` the Euclidean distance between patch centres
    (grid distance x ``patch_size``). Uniform attention on a 14x14 grid of 16 px patches gives 116.49 px.
    A query row with no patch mass contributes 0.

    Args:
        attn: ``[L, H, N, N]`` (or ``[B, L, H, N, N]``).
        grid: ``(gh, gw)``; None infers a square grid.
        patch_size: patch side in input pixels.
        num_prefix_tokens: p.

    Returns:
        ``[L, H]`` (or ``[B, L, H]``) float32 pixels.
    """
    a, batched = check_attn(as_floating(attn, "attn"))
    N = a.shape[-1]
    gh, gw = resolve_grid(N, grid, num_prefix_tokens)
    p = int(num_prefix_tokens)
    dt = compute_dtype(a)
    dist = _patch_distances(gh, gw, float(patch_size), dt).to(a.device)
    B, L, H = a.shape[:3]
    M = N - p
    num = torch.empty((B, L, H, M), dtype=dt, device=a.device)
    den = torch.empty_like(num)
    buf = torch.empty((H, M, M), dtype=dt, device=a.device)
    for b in range(B):  # one (image, layer) at a time: the [H, M, M] product stays in cache (and is promoted alone)
        for l in range(L):
            _distance_sums_(a[b, l].to(dt), p, dist, buf, num[b, l], den[b, l])
    out = _distance_from_sums(num, den)
    return out if batched else out[0]


def attention_entropy(attn: Any) -> torch.Tensor:
    """Mean entropy (nats) of each head's attention rows: ``e[l, h] = (1/N) sum_i -sum_j a_ij ln a_ij`` (0 ln 0 = 0).

    Low entropy = focused head; ``ln N`` = uniform attention. All query rows (prefix tokens included) are averaged.

    Args:
        attn: ``[L, H, N, N]`` (or ``[B, L, H, N, N]``).

    Returns:
        ``[L, H]`` (or ``[B, L, H]``) float32.
    """
    a, batched = check_attn(as_floating(attn, "attn"))
    B, L, H, N, _ = a.shape
    dt = compute_dtype(a)
    heads = torch.empty((B, L, H), dtype=dt, device=a.device)  # sum over rows and keys of a log2 a
    buf = torch.empty((H, N, N), dtype=dt, device=a.device)
    for b in range(B):  # one (image, layer) at a time: the [H, N, N] temporary stays in cache (and is promoted alone)
        for l in range(L):
            _entropy_sum_(a[b, l].to(dt), buf, heads[b, l])
    out = _entropy_from_sums(heads, N)
    return out if batched else out[0]

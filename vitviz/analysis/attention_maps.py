"""Raw attention maps and attention rollout (Abnar & Zuidema 2020), plain and gradient-weighted. No Qt.

Shapes: one image ``attn [L, H, N, N]`` (row = query, column = key); a leading batch dimension
``[B, L, H, N, N]`` is accepted everywhere and gives ``[B, ...]`` results equal to per-image calls (discard is applied
per image and per row). Tokens: ``p = num_prefix_tokens`` prefix tokens (CLS first), then ``gh * gw`` patches in
row-major order. Returned maps are ``[gh, gw]`` over the patch keys, raw (not normalised for display).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch

from vitviz.analysis.basics import (
    CLAMPS,
    FUSIONS,
    Head,
    HeadFusion,
    as_float,
    as_floating,
    check_attn,
    check_choice,
    check_layer,
    compute_dtype,
    discard_count,
    fuse_heads,
    resolve_grid,
)

GradClamp = Literal["after_mean", "before_mean"]

__all__ = [
    "attention_rollout", "cls_attention", "gradient_rollout", "query_attention", "rollout_transitions",
]


def query_attention(
    attn: Any, layer: int, head: Head, query: int, *, grid: tuple[int, int] | None = None, num_prefix_tokens: int = 1
) -> torch.Tensor:
    """One query row of one layer's attention over the patch keys.

    ``map[i, j] = fuse_h attn[layer, h, query, p + i * gw + j]`` where ``fuse_h`` picks head ``head`` or takes the
    mean / max / min over heads.

    Args:
        attn: ``[L, H, N, N]`` (or ``[B, L, H, N, N]``).
        layer: layer index (negative counts from the end).
        head: head index, or ``"mean" | "max" | "min"`` over heads.
        query: query token index, prefix tokens included (0 = CLS).
        grid: ``(gh, gw)``; None infers a square grid.
        num_prefix_tokens: p.

    Returns:
        ``[gh, gw]`` (or ``[B, gh, gw]``).
    """
    a, batched = check_attn(as_floating(attn, "attn"))
    B, L, H, N, _ = a.shape
    gh, gw = resolve_grid(N, grid, num_prefix_tokens)
    layer = check_layer(layer, L)
    q = check_layer(query, N, "query")
    row = a[:, layer, :, q, num_prefix_tokens:].to(compute_dtype(a))  # [B, H, M]: only this row is promoted
    out = fuse_heads(row, head, dim=1).reshape(B, gh, gw)
    return out if batched else out[0]


def cls_attention(
    attn: Any, layer: int, head: Head, *, grid: tuple[int, int] | None = None, num_prefix_tokens: int = 1
) -> torch.Tensor:
    """The [CLS] row of one layer's attention over the patch keys: :func:`query_attention` with ``query=0``.

    Raw attention as in Dosovitskiy et al. 2020 / Caron et al. 2021 (DINO) attention maps.

    Args:
        attn: ``[L, H, N, N]`` (or ``[B, L, H, N, N]``).
        layer, head, grid, num_prefix_tokens: as in :func:`query_attention`.

    Returns:
        ``[gh, gw]`` (or ``[B, gh, gw]``).
    """
    if num_prefix_tokens < 1:
        raise ValueError("cls_attention needs a [CLS] token (num_prefix_tokens >= 1); use query_attention instead")
    return query_attention(attn, layer, head, 0, grid=grid, num_prefix_tokens=num_prefix_tokens)


def _kth_smallest(x: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th smallest value (1-based) along the last dim, keepdim. numpy's introselect on CPU is ~3x faster than
    ``torch.kthvalue``/``topk`` for many short rows."""
    if x.device.type == "cpu":
        xn = x.contiguous().numpy()
        return torch.from_numpy(np.partition(xn, k - 1, axis=-1)[..., k - 1:k].copy())
    return x.kthvalue(k, dim=-1, keepdim=True).values


def _discard_(A: torch.Tensor, num_prefix_tokens: int, discard_ratio: float) -> torch.Tensor:
    """In place: zero the ``k = floor(ratio * M)`` smallest patch-key entries of every row of ``A [..., N, N]``.

    Exactly k per row; among equal values at the threshold the lowest key indices go first (a stable sort's order).
    """
    M = A.shape[-1] - num_prefix_tokens
    k = discard_count(M, discard_ratio)
    if k == 0:
        return A
    patch = A[..., num_prefix_tokens:]
    if k == M:
        patch.zero_()
        return A
    thr = _kth_smallest(patch, k)
    drop = patch <= thr
    count = drop.sum(-1, keepdim=True)
    if bool((count != k).any()):  # ties at the threshold: keep the later ones of the tied values
        lt = patch < thr
        eq = patch == thr
        need = k - lt.sum(-1, keepdim=True)
        drop = lt | (eq & (eq.cumsum(-1) <= need))
    patch.masked_fill_(drop, 0.0)
    return A


def fused_heads(a: torch.Tensor, head_fusion: HeadFusion) -> torch.Tensor:
    """``a [B, L, H, R, N]`` -> ``[B, L, R, N]``, heads fused, in :func:`compute_dtype`; a new tensor (the caller's
    is never modified). A float16 / bfloat16 stack is promoted one layer at a time."""
    check_choice(head_fusion, FUSIONS, "head_fusion")
    B, L, H, R, N = a.shape
    dt = compute_dtype(a)
    if a.dtype != dt:
        out = torch.empty((B, L, R, N), dtype=dt, device=a.device)
        for l in range(L):
            out[:, l] = fused_heads(a[:, l:l + 1].to(dt), head_fusion)[:, 0]
        return out
    if head_fusion == "mean" and a.is_contiguous():  # a GEMV over heads: one pass, faster than mean()
        w = torch.full((1, H), 1.0 / H, dtype=a.dtype, device=a.device)
        return torch.matmul(w, a.view(B * L, H, R * N)).view(B, L, R, N)
    return fuse_heads(a, head_fusion, dim=2)


def transitions_from_fused(A: torch.Tensor, num_prefix_tokens: int, discard_ratio: float) -> torch.Tensor:
    """``A [..., R, N]`` (fresh tensor, modified in place) -> ``(discard(A) + I)`` with rows normalised to 1.

    ``R`` is ``N``, or 1 for the [CLS] row alone (its diagonal entry is then column 0).
    """
    _discard_(A, num_prefix_tokens, discard_ratio)
    A.diagonal(dim1=-2, dim2=-1).add_(1.0)
    A.div_(A.sum(-1, keepdim=True))
    return A


def rollout_transitions(
    attn: Any, *, num_prefix_tokens: int = 1, head_fusion: HeadFusion = "mean", discard_ratio: float = 0.0
) -> torch.Tensor:
    """The per-layer matrices ``A_hat_l`` that attention rollout multiplies.

    ``A_l = fuse_h attn[l, h]``; the ``floor(discard_ratio * M)`` smallest *patch-key* entries of each query row are
    set to 0 (prefix-key columns are never discarded); ``A_hat_l = (A_l + I) / rowsum(A_l + I)`` (every row sums to 1).

    The discard works row by row over patch keys. Gildenblat's vit-explain (the script most papers cite) discards
    instead over the whole fused ``N x N`` matrix at once (the lowest ``discard_ratio`` of all ``N^2`` entries, only
    the [CLS]->[CLS] entry protected), so a query row can lose all or none of its keys, and [CLS] columns are not kept;
    its ``(A + I) / 2`` then ``a / a.sum(dim=-1)`` (no ``keepdim``) divides columns rather than rows. With
    ``discard_ratio=0`` and mean fusion the two differ only by that normalisation.

    Args:
        attn: ``[L, H, N, N]`` (or ``[B, L, H, N, N]``).
        num_prefix_tokens: p (columns ``< p`` are never discarded).
        head_fusion: ``"mean" | "max" | "min"`` over heads.
        discard_ratio: in [0, 1].

    Returns:
        ``[L, N, N]`` (or ``[B, L, N, N]``) float32 (float64 for float64 input).
    """
    a, batched = check_attn(as_floating(attn, "attn"))
    A = transitions_from_fused(fused_heads(a, head_fusion), num_prefix_tokens, discard_ratio)
    return A if batched else A[0]


def cls_row_of_product(T: torch.Tensor, last_row: torch.Tensor, *, residual: bool) -> torch.Tensor:
    """Row 0 of ``T_{L-1} ... T_0`` (``residual=False``) or of ``(I + T_{L-1}) ... (I + T_0)``.

    Computed as a row vector times matrices, last layer first, in float64: ``O(L N^2)`` instead of ``O(L N^3)``.
    The vector starts as the one-hot [CLS] row, so of the last layer only row 0 matters: callers compute just
    ``last_row = T_{L-1}[0]`` ``[B, N]`` (1/N of that layer's work) and pass the layers before it as
    ``T [B, L-1, N, N]``. Returns ``[B, N]`` float64.
    """
    v = last_row.to(torch.float64, copy=True)[:, None]  # e_0 T_{L-1}, or e_0 (I + T_{L-1})
    if residual:
        v[:, 0, 0] += 1.0
    for l in range(T.shape[1] - 1, -1, -1):
        step = torch.bmm(v, T[:, l].double())
        v = v + step if residual else step
    return v[:, 0]


def pool_row_of_product(T: torch.Tensor, row: torch.Tensor, *, residual: bool) -> torch.Tensor:
    """``row T_{L-1} ... T_s`` (``residual=False``) or ``row (I + T_{L-1}) ... (I + T_s)``, float64 ``[B, N]``.

    ``row [B, N]``: the (fused) attention of a pooling head's query over the last layer's output tokens (SigLIP's
    "MAP" head). The query is not one of the tokens, so no identity is added for it: the pooled output reads the
    tokens only through this row, which takes the place of the [CLS] row of the last layer.
    """
    v = row.to(torch.float64, copy=True)[:, None]
    for l in range(T.shape[1] - 1, -1, -1):
        step = torch.bmm(v, T[:, l].double())
        v = v + step if residual else step
    return v[:, 0]


def check_query_row(a: torch.Tensor, query_row: Any, batched: bool, what: str = "query_row") -> torch.Tensor:
    """``query_row`` ``[H, N]`` (or ``[B, H, N]``) as ``[B, H, N]`` in ``a``'s :func:`compute_dtype`, matching
    ``a [B, L, H, N, N]``."""
    r = as_float(query_row, what)
    if not batched and r.ndim == 2:
        r = r[None]
    B, L, H, N, _ = a.shape
    if tuple(r.shape) != (B, H, N):
        raise ValueError(f"{what} must have shape {(H, N) if not batched else (B, H, N)} (heads x tokens of the "
                         f"attention), got {tuple(r.shape)}")
    return r.to(compute_dtype(a))


def cls_row(A: torch.Tensor, last: torch.Tensor, num_prefix_tokens: int, discard_ratio: float, *,
             residual: bool = False) -> torch.Tensor:
    """Row 0 of the rollout (``residual=False``) or relevance (``residual=True``) product from fused layers.

    ``A [B, n, N, N]``: fused attention of layers ``start .. L-2`` (a fresh tensor: rollout modifies it in place);
    ``last [B, N]``: the fused [CLS] row of layer ``L-1``. Rollout: :func:`transitions_from_fused` per layer.
    Relevance: ``(I + A)`` per layer. Returns ``[B, N]`` float64.
    """
    if residual:
        return cls_row_of_product(A, last, residual=True)
    T = transitions_from_fused(A, num_prefix_tokens, discard_ratio)
    last = transitions_from_fused(last[:, None].clone(), num_prefix_tokens, discard_ratio)[:, 0]
    return cls_row_of_product(T, last, residual=False)


def attention_rollout(
    attn: Any,
    *,
    grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 1,
    head_fusion: HeadFusion = "mean",
    discard_ratio: float = 0.0,
    start_layer: int = 0,
    query_row: Any = None,
) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers").

    ``R = A_hat_{L-1} A_hat_{L-2} ... A_hat_{start}`` with ``A_hat`` from :func:`rollout_transitions` (heads fused,
    optional per-row discard of the weakest patch keys, residual identity added, rows normalised); returns
    ``R[0, p:]``, how much each input patch flows into the output [CLS] token.

    Args:
        attn: ``[L, H, N, N]`` (or ``[B, L, H, N, N]``).
        grid: ``(gh, gw)``; None infers a square grid.
        num_prefix_tokens: p (>= 1: row 0 must be the [CLS] token).
        head_fusion: ``"mean" | "max" | "min"``.
        discard_ratio: fraction of each row's patch keys zeroed, in [0, 1].
        start_layer: first layer in the product.
        query_row: ``[H, N]`` (or ``[B, H, N]``) the attention of a pooling head over the last layer's tokens
            (``Capture.pool_attention``) for a model that pools with one (SigLIP): the product then runs over every
            layer from ``start_layer`` and starts from this row (heads fused, no identity: the pooling query is not
            a token) instead of the [CLS] row; no [CLS] token is needed.

    Returns:
        ``[gh, gw]`` (or ``[B, gh, gw]``) float32 (float64 for float64 input).
    """
    a, batched = check_attn(as_floating(attn, "attn"))
    B, L, H, N, _ = a.shape
    if query_row is None and num_prefix_tokens < 1:
        raise ValueError("attention_rollout needs a [CLS] token (num_prefix_tokens >= 1) or a pooling head's "
                         "query_row")
    gh, gw = resolve_grid(N, grid, num_prefix_tokens)
    s = check_layer(start_layer, L, "start_layer")
    check_choice(head_fusion, FUSIONS, "head_fusion")
    if query_row is not None:
        r = fused_heads(check_query_row(a, query_row, batched)[:, None, :, None].contiguous(), head_fusion)[:, 0, 0]
        row = pool_row_of_product(transitions_from_fused(fused_heads(a[:, s:], head_fusion), num_prefix_tokens,
                                                           discard_ratio), r, residual=False)
        out = row[:, num_prefix_tokens:].reshape(B, gh, gw).to(compute_dtype(a))
        return out if batched else out[0]
    A = fused_heads(a[:, s:-1], head_fusion)
    # only the [CLS] row of the last layer (made contiguous: the same GEMV over heads as the other layers)
    last = fused_heads(a[:, -1:, :, :1].contiguous(), head_fusion)[:, 0, 0]
    row = cls_row(A, last, num_prefix_tokens, discard_ratio)
    out = row[:, num_prefix_tokens:].reshape(B, gh, gw).to(compute_dtype(a))
    return out if batched else out[0]


def grad_weighted(a: torch.Tensor, g: torch.Tensor, clamp: GradClamp) -> torch.Tensor:
    """``[B, L, H, R, N]`` x2 -> ``[B, L, R, N]``: mean_h(A*G) clamped at 0 after or before the mean, in ``a``'s
    :func:`compute_dtype`.

    One (image, layer) at a time so that the ``[H, R, N]`` product stays in cache (and a float16 / bfloat16 stack is
    promoted one layer at a time); the mean over heads is a GEMV with weights 1/H (faster than a sum and a division).
    """
    check_choice(clamp, CLAMPS, "clamp")
    B, L, H, R, N = a.shape
    dt = compute_dtype(a)
    same = a.dtype == g.dtype == dt
    out = torch.empty((B, L, R, N), dtype=dt, device=a.device)
    buf = torch.empty((H, R, N), dtype=dt, device=a.device)
    w = torch.full((1, H), 1.0 / H, dtype=dt, device=a.device)
    for b in range(B):
        for l in range(L):
            if same:
                torch.mul(a[b, l], g[b, l], out=buf)
            else:  # both promoted exactly, then the same float product
                buf.copy_(a[b, l]).mul_(g[b, l])
            if clamp == "before_mean":
                buf.clamp_(min=0)
            torch.mm(w, buf.view(H, R * N), out=out[b, l].view(1, R * N))
    if clamp == "after_mean":
        out.clamp_(min=0)
    return out


def check_grads(a: torch.Tensor, grads: Any, batched: bool) -> torch.Tensor:
    """``grads`` with ``a``'s shape ``[B, L, H, N, N]``; float16 / bfloat16 kept (promoted where they are read), else
    in ``a``'s :func:`compute_dtype`."""
    g = as_floating(grads, "grads")
    if not batched and g.ndim == 4:
        g = g[None]
    if tuple(g.shape) != tuple(a.shape):
        raise ValueError(f"grads must have the shape of attn {tuple(a.shape)}, got {tuple(g.shape)}")
    if g.dtype in (torch.float32, torch.float64) and g.dtype != compute_dtype(a):
        g = g.to(compute_dtype(a))
    return g


def gradient_rollout(
    attn: Any,
    grads: Any,
    *,
    grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 1,
    discard_ratio: float = 0.0,
    clamp: GradClamp = "after_mean",
    start_layer: int = 0,
    query_row: Any = None,
    query_grads: Any = None,
) -> torch.Tensor:
    """Gradient-weighted attention rollout (the class-specific rollout of Gildenblat's vit-explain, with Chefer et
    al. 2021's head averaging available).

    ``A_l = max(mean_h(A_lh * G_lh), 0)`` (``clamp="after_mean"``, vit-explain) or ``mean_h(max(A_lh * G_lh, 0))``
    (``clamp="before_mean"``, Chefer et al.), where ``G = d logit_target / d A``; then as :func:`attention_rollout`:
    per-row discard of patch keys, ``A_hat = (A + I)`` row-normalised, ``R = A_hat_{L-1} ... A_hat_{start}``,
    return ``R[0, p:]``.

    ``G_l`` is the gradient of the target logit with respect to layer ``l``'s post-softmax attention, taken layer by
    layer in one backward pass. vit-explain's published ``grad_rollout`` differs: its module backward hook records
    the gradients in the order backward visits the layers (last first) and ``zip`` pairs them with the attentions in
    forward order, so layer ``l``'s attention is weighted by layer ``L-1-l``'s gradient; the gradient it records is
    taken before the softmax; and it shares rollout's whole-matrix discard and missing ``keepdim`` (see
    :func:`rollout_transitions`). Its maps are therefore not this function's, and not a fault of either's inputs.

    Args:
        attn: ``[L, H, N, N]`` (or ``[B, L, H, N, N]``).
        grads: same shape as ``attn`` (``Capture.attention_grads``).
        grid, num_prefix_tokens, discard_ratio, start_layer: as in :func:`attention_rollout`.
        clamp: ``"after_mean" | "before_mean"``.
        query_row, query_grads: a pooling head's attention ``[H, N]`` and its gradient (``Capture.pool_attention``
            and ``pool_attention_grads``): the product starts from their weighted row instead of the [CLS] row (see
            :func:`attention_rollout`).

    Returns:
        ``[gh, gw]`` (or ``[B, gh, gw]``) float32 (float64 for float64 input).
    """
    a, batched = check_attn(as_floating(attn, "attn"))
    if query_row is None and num_prefix_tokens < 1:
        raise ValueError("gradient_rollout needs a [CLS] token (num_prefix_tokens >= 1) or a pooling head's "
                         "query_row")
    g = check_grads(a, grads, batched)
    B, L, H, N, _ = a.shape
    gh, gw = resolve_grid(N, grid, num_prefix_tokens)
    s = check_layer(start_layer, L, "start_layer")
    check_choice(clamp, CLAMPS, "clamp")
    if query_row is not None:
        if query_grads is None:
            raise ValueError("gradient_rollout with a query_row needs its query_grads")
        r = check_query_row(a, query_row, batched)[:, None, :, None]
        rg = check_query_row(a, query_grads, batched, "query_grads")[:, None, :, None]
        v = grad_weighted(r.contiguous(), rg.contiguous(), clamp)[:, 0, 0]
        T = transitions_from_fused(grad_weighted(a[:, s:], g[:, s:], clamp), num_prefix_tokens, discard_ratio)
        row = pool_row_of_product(T, v, residual=False)
        out = row[:, num_prefix_tokens:].reshape(B, gh, gw).to(compute_dtype(a))
        return out if batched else out[0]
    A = grad_weighted(a[:, s:-1], g[:, s:-1], clamp)
    last = grad_weighted(a[:, -1:, :, :1], g[:, -1:, :, :1], clamp)[:, 0, 0]  # only its [CLS] row is needed
    row = cls_row(A, last, num_prefix_tokens, discard_ratio)
    out = row[:, num_prefix_tokens:].reshape(B, gh, gw).to(compute_dtype(a))
    return out if batched else out[0]

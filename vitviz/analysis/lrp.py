"""Gradient-weighted relevance propagation through attention (Chefer, Gur & Wolf 2021). No Qt."""

from __future__ import annotations

from typing import Any

import torch

from vitviz.analysis.attention_maps import check_grads, check_query_row, cls_row, grad_weighted, pool_row_of_product
from vitviz.analysis.basics import as_floating, check_attn, check_layer, compute_dtype, resolve_grid

__all__ = ["relevance"]


def relevance(
    attn: Any,
    grads: Any,
    *,
    grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 1,
    start_layer: int = 0,
    query_row: Any = None,
    query_grads: Any = None,
) -> torch.Tensor:
    """Chefer et al. 2021, "Generic Attention-model Explainability for Interpreting Bi-Modal and Encoder-Decoder
    Transformers" (ICCV), self-attention rule.

    ``R = I``; for ``l = start .. L-1``: ``Abar_l = mean_h(max(G_lh * A_lh, 0))``, ``R = R + Abar_l R``.
    Returns ``R[0, p:]``, the relevance of each patch for the [CLS] token (and so for the target class whose
    logit ``G = d logit / d A`` was taken of).

    Args:
        attn: ``[L, H, N, N]`` (or ``[B, L, H, N, N]``).
        grads: same shape as ``attn``.
        grid: ``(gh, gw)``; None infers a square grid.
        num_prefix_tokens: p (>= 1).
        start_layer: first layer included.
        query_row, query_grads: a pooling head's attention ``[H, N]`` and its gradient (SigLIP's "MAP" head,
            ``Capture.pool_attention`` / ``pool_attention_grads``): the relevance of the pooled output,
            ``Abar_pool (I + Abar_{L-1}) ... (I + Abar_s)`` with ``Abar_pool = mean_h(max(G * A, 0))`` of that row (no
            identity for the pooling query, which is not a token); no [CLS] token is needed.

    Returns:
        ``[gh, gw]`` (or ``[B, gh, gw]``) float32 (float64 for float64 input).
    """
    a, batched = check_attn(as_floating(attn, "attn"))
    if query_row is None and num_prefix_tokens < 1:
        raise ValueError("relevance needs a [CLS] token (num_prefix_tokens >= 1) or a pooling head's query_row")
    g = check_grads(a, grads, batched)
    B, L, H, N, _ = a.shape
    gh, gw = resolve_grid(N, grid, num_prefix_tokens)
    s = check_layer(start_layer, L, "start_layer")
    if query_row is not None:
        if query_grads is None:
            raise ValueError("relevance with a query_row needs its query_grads")
        r = check_query_row(a, query_row, batched)[:, None, :, None]
        rg = check_query_row(a, query_grads, batched, "query_grads")[:, None, :, None]
        v = grad_weighted(r.contiguous(), rg.contiguous(), "before_mean")[:, 0, 0]
        row = pool_row_of_product(grad_weighted(a[:, s:], g[:, s:], "before_mean"), v, residual=True)
        out = row[:, num_prefix_tokens:].reshape(B, gh, gw).to(compute_dtype(a))
        return out if batched else out[0]
    Abar = grad_weighted(a[:, s:-1], g[:, s:-1], "before_mean")
    last = grad_weighted(a[:, -1:, :, :1], g[:, -1:, :, :1], "before_mean")[:, 0, 0]  # its [CLS] row only
    # row 0 of (I + Abar_{L-1}) ... (I + Abar_s), which is R after the loop above
    row = cls_row(Abar, last, num_prefix_tokens, 0.0, residual=True)
    out = row[:, num_prefix_tokens:].reshape(B, gh, gw).to(compute_dtype(a))
    return out if batched else out[0]

"""Gradient-weighted relevance propagation through attention (Chefer, Gur & Wolf 2021). No Qt."""

from __future__ import annotations

from typing import Any

import torch

from vitviz.analysis._common import as_float, check_attn, check_layer, resolve_grid
from vitviz.analysis.rollout import _cls_row, _grad_weighted, check_grads

__all__ = ["relevance"]


def relevance(
    attn: Any,
    grads: Any,
    *,
    grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 1,
    start_layer: int = 0,
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

    Returns:
        ``[gh, gw]`` (or ``[B, gh, gw]``) float32 (float64 for float64 input).
    """
    if num_prefix_tokens < 1:
        raise ValueError("relevance needs a [CLS] token (num_prefix_tokens >= 1)")
    a, batched = check_attn(as_float(attn, "attn"))
    g = check_grads(a, grads, batched)
    B, L, H, N, _ = a.shape
    gh, gw = resolve_grid(N, grid, num_prefix_tokens)
    s = check_layer(start_layer, L, "start_layer")
    Abar = _grad_weighted(a[:, s:-1], g[:, s:-1], "before_mean")
    last = _grad_weighted(a[:, -1:, :, :1], g[:, -1:, :, :1], "before_mean")[:, 0, 0]  # its [CLS] row only
    # row 0 of (I + Abar_{L-1}) ... (I + Abar_s), which is R after the loop above
    row = _cls_row(Abar, last, num_prefix_tokens, 0.0, residual=True)
    out = row[:, num_prefix_tokens:].reshape(B, gh, gw).to(a.dtype)
    return out if batched else out[0]

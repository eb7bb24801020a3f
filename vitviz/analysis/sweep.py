"""Every whole-attention analysis of one image (or a batch) in a single sweep over the layers. No Qt.

:func:`attention_rollout`, :func:`gradient_rollout`, :func:`relevance`, :func:`mean_attention_distance` and
:func:`attention_entropy` each read all of ``attn [L, H, N, N]`` (and the first three also ``grads``): for ViT-B/16
at 224 px that is 22 MB per tensor, more than the CPU caches hold, so run one after the other they stream the
attention from memory five times and the gradients twice. :func:`analyse_image` visits one layer at a time instead
(a ``[H, N, N]`` slice, 1.9 MB, stays in cache) and computes all five from it, with the same formulas and the same
arithmetic as the individual functions (results equal to float32 round-off; the tests check it).

The app calls it once per captured image (in the background worker), so every view and plot of that image is ready
when the user switches to it. :func:`analyse_batch` does the same for a batch as a capture stores it
(``[L, B, H, N, N]``): each layer's ``[B, H, N, N]`` slab is one operation per step instead of one per image, which
matters most on a busy machine, where each small multi-threaded operation waits for its threads (16 ViT-B/16 images:
about 16x fewer operations). :func:`analyse_image` is a batch of one, so a map is the same whichever way it was made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from vitviz.analysis.attention_maps import GradClamp, check_grads, cls_row, fused_heads
from vitviz.analysis.basics import (
    CLAMPS,
    FUSIONS,
    HeadFusion,
    as_float,
    check_attn,
    check_choice,
    check_layer,
    resolve_grid,
)
from vitviz.analysis.distance import (
    cached_patch_distances,
    distance_from_sums,
    distance_sums_,
    entropy_from_sums,
    entropy_sum_,
)

__all__ = ["ImageAnalyses", "analyse_batch", "analyse_image"]


@dataclass(frozen=True)
class ImageAnalyses:
    """The whole-attention analyses of one image (see :func:`analyse_image`).

    Attributes:
        rollout: ``[gh, gw]``, as :func:`~vitviz.analysis.attention_rollout`.
        gradient_rollout: ``[gh, gw]``, as :func:`~vitviz.analysis.gradient_rollout` (None without grads).
        relevance: ``[gh, gw]``, as :func:`~vitviz.analysis.relevance` (None without grads).
        mean_attention_distance: ``[L, H]`` pixels, as :func:`~vitviz.analysis.mean_attention_distance`.
        attention_entropy: ``[L, H]`` nats, as :func:`~vitviz.analysis.attention_entropy`.
    """

    rollout: torch.Tensor
    gradient_rollout: torch.Tensor | None
    relevance: torch.Tensor | None
    mean_attention_distance: torch.Tensor
    attention_entropy: torch.Tensor


def analyse_image(
    attn: Any,
    grads: Any = None,
    *,
    grid: tuple[int, int] | None = None,
    patch_size: float,
    num_prefix_tokens: int = 1,
    head_fusion: HeadFusion = "mean",
    discard_ratio: float = 0.0,
    clamp: GradClamp = "after_mean",
    start_layer: int = 0,
) -> ImageAnalyses:
    """Attention rollout, gradient rollout, relevance, mean attention distance and attention entropy of one image.

    Equal to ``attention_rollout(attn, head_fusion=..., discard_ratio=..., start_layer=...)``,
    ``gradient_rollout(attn, grads, discard_ratio=..., clamp=..., start_layer=...)``,
    ``relevance(attn, grads, start_layer=...)``, ``mean_attention_distance(attn, patch_size=...)`` and
    ``attention_entropy(attn)`` (formulas and papers in their docstrings), computed in one pass over the layers that
    reads each layer's attention from memory once and its gradients once.

    Args:
        attn: ``[L, H, N, N]`` of one image (a batch dimension is not accepted: call once per image).
        grads: same shape (``Capture.attention_grads`` of the image), or None to skip the two gradient maps.
        grid: ``(gh, gw)``; None infers a square grid.
        patch_size: patch side in input pixels (for the distances).
        num_prefix_tokens: p (>= 1: row 0 must be the [CLS] token).
        head_fusion, discard_ratio: of the attention rollout (the gradient rollout uses ``discard_ratio`` too).
        clamp: of the gradient rollout.
        start_layer: first layer of the three products (distance and entropy cover every layer).

    Returns:
        :class:`ImageAnalyses`, float32 (float64 for float64 input).
    """
    a = as_float(attn, "attn")
    if a.ndim != 4:
        raise ValueError(f"attn must be one image's [L, H, N, N], got shape {tuple(a.shape)}")
    a = check_attn(a)[0][0]
    g = None if grads is None else check_grads(a[None], grads, False)[0][:, None]
    return analyse_batch(a[:, None], g, grid=grid, patch_size=patch_size, num_prefix_tokens=num_prefix_tokens,
                         head_fusion=head_fusion, discard_ratio=discard_ratio, clamp=clamp, start_layer=start_layer)[0]


def analyse_batch(
    attn: Any,
    grads: Any = None,
    *,
    grid: tuple[int, int] | None = None,
    patch_size: float,
    num_prefix_tokens: int = 1,
    head_fusion: HeadFusion = "mean",
    discard_ratio: float = 0.0,
    clamp: GradClamp = "after_mean",
    start_layer: int = 0,
    max_chunk_bytes: int = 2**26,
) -> list[ImageAnalyses]:
    """:func:`analyse_image` of every image of a batch, each layer of all images at once.

    Args:
        attn: ``[L, B, H, N, N]``, the layout of :attr:`vitviz.capture.Capture.attentions` (no copy is made when it is
            contiguous).
        grads: the same shape (``Capture.attention_grads``), or None.
        max_chunk_bytes: the sweep's buffers (about ``(H + 3 (L - 1)) N^2`` floats per image) are kept under this
            many bytes by sweeping the images in chunks.
        grid, patch_size, num_prefix_tokens, head_fusion, discard_ratio, clamp, start_layer: as
            :func:`analyse_image`.

    Returns:
        One :class:`ImageAnalyses` per image, in order.
    """
    if num_prefix_tokens < 1:
        raise ValueError("analyse_image needs a [CLS] token (num_prefix_tokens >= 1)")
    check_choice(head_fusion, FUSIONS, "head_fusion")
    check_choice(clamp, CLAMPS, "clamp")
    a = as_float(attn, "attn")
    if a.ndim != 5 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"attn must be a batch [L, B, H, N, N], got shape {tuple(a.shape)}")
    g = None if grads is None else as_float(grads, "grads")
    if g is not None:
        if tuple(g.shape) != tuple(a.shape):
            raise ValueError(f"grads must have the shape of attn {tuple(a.shape)}, got {tuple(g.shape)}")
        g = g.to(a.dtype)
    L, B, H, N, _ = a.shape
    p = int(num_prefix_tokens)
    gh, gw = resolve_grid(N, grid, p)
    s = check_layer(start_layer, L, "start_layer")
    dt, dev = a.dtype, a.device
    dist = cached_patch_distances(gh, gw, float(patch_size), dt).to(dev)
    per_image = (2 * H + 3 * max(L - 1 - s, 0) + 2) * N * N * a.element_size()
    chunk = max(1, min(B, int(max_chunk_bytes) // max(per_image, 1)))
    out: list[ImageAnalyses] = []
    for b0 in range(0, B, chunk):
        ab = a[:, b0:b0 + chunk]
        gb = None if g is None else g[:, b0:b0 + chunk]
        ent, mad, roll, grad, pos = _layers(ab, gb, p, dist, head_fusion, clamp, s)

        def to_maps(rows: torch.Tensor) -> torch.Tensor:
            return rows[:, p:].reshape(-1, gh, gw).to(dt)

        # the same transitions and products as attention_rollout / gradient_rollout / relevance
        rollout = to_maps(cls_row(*roll, p, discard_ratio))
        grad_rollout = relevance = None
        if gb is not None:
            relevance = to_maps(cls_row(*pos, p, 0.0, residual=True))  # first: the next line may modify pos
            grad_rollout = to_maps(cls_row(*(grad if clamp == "after_mean" else pos), p, discard_ratio))
        for i in range(ab.shape[1]):
            out.append(ImageAnalyses(
                rollout=rollout[i],
                gradient_rollout=None if grad_rollout is None else grad_rollout[i],
                relevance=None if relevance is None else relevance[i],
                mean_attention_distance=mad[i].contiguous(),
                attention_entropy=ent[i].contiguous(),
            ))
    return out


Layers = tuple[torch.Tensor, torch.Tensor]  # ([B, n, N, N] layers start .. L-2, [B, N] the [CLS] row of layer L-1)


def _layers(a: torch.Tensor, g: torch.Tensor | None, p: int, dist: torch.Tensor, head_fusion: HeadFusion,
            clamp: GradClamp, s: int) -> tuple[torch.Tensor, torch.Tensor, Layers, Layers | None, Layers | None]:
    """The per-layer loop of :func:`analyse_batch` over ``a``, ``g`` ``[L, B, H, N, N]``: entropy ``[L, B, H]``,
    distance ``[L, B, H]``, and the fused layers of the three products: attention (rollout),
    ``max(mean_h(A G), 0)`` (gradient rollout with ``clamp="after_mean"``, else None) and ``mean_h(max(A G, 0))``
    (relevance, and the gradient rollout with ``clamp="before_mean"``); the last two are None without ``g``."""
    L, B, H, N, _ = a.shape
    M = N - p
    dt, dev = a.dtype, a.device
    w = torch.full((1, H), 1.0 / H, dtype=dt, device=dev)  # the mean over heads as a GEMV
    ent = torch.empty((L, B, H), dtype=dt, device=dev)  # sum of a log2 a per head
    num = torch.empty((L, B, H, M), dtype=dt, device=dev)  # distance-weighted patch attention per query
    den = torch.empty((L, B, H, M), dtype=dt, device=dev)  # patch attention per query
    buf = torch.empty((B, H, N, N), dtype=dt, device=dev)
    pbuf = torch.empty((B, H, M, M), dtype=dt, device=dev)
    # heads fused per layer (of the last layer only the [CLS] row, since the products start from e_0)
    n = L - 1 - s

    def layers() -> Layers:
        return torch.empty((B, n, N, N), dtype=dt, device=dev), torch.empty((B, N), dtype=dt, device=dev)

    def head_mean(x: torch.Tensor, out: torch.Tensor) -> None:
        """``out[b] = mean_h x[b, h]`` for ``x [B, H, R, N]`` (a GEMV per image)."""
        R = x.shape[2]
        if B == 1:
            torch.mm(w, x.view(H, R * N), out=out.view(1, R * N))
        else:
            out.copy_(torch.matmul(w, x.view(B, H, R * N)).view(out.shape))

    roll = layers()
    ag = layers() if g is not None and clamp == "after_mean" else None
    pos = layers() if g is not None else None

    for l in range(L):
        x = a[l]  # [B, H, N, N]
        entropy_sum_(x, buf, ent[l])
        distance_sums_(x, p, dist, pbuf, num[l], den[l])
        if l < s:
            continue
        last = l == L - 1
        R = 1 if last else N
        rows = x[:, :, :1] if last else x
        fused = fused_heads(rows[:, None].contiguous(), head_fusion)[:, 0]  # [B, R, N]
        if last:
            roll[1].copy_(fused[:, 0])
        else:
            roll[0][:, l - s] = fused
        if g is None:
            continue
        # A * G once, the head mean (clamped after it), then A * G clamped in place and the head mean again
        prod = buf.view(-1)[: B * H * R * N].view(B, H, R, N)
        torch.mul(x[:, :, :R], g[l][:, :, :R], out=prod)
        if ag is not None:
            out_ag = ag[1] if last else ag[0][:, l - s]
            head_mean(prod, out_ag)
            out_ag.clamp_(min=0)
        prod.clamp_(min=0)
        head_mean(prod, pos[1] if last else pos[0][:, l - s])
    return (entropy_from_sums(ent, N).transpose(0, 1), distance_from_sums(num, den).transpose(0, 1), roll, ag,
            pos)

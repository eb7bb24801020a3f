"""Principal components of the patch tokens shown as colours: the DINO / DINOv2 papers' and demos' "feature PCA".

The patch tokens of a layer (prefix tokens dropped) are centred and decomposed by an exact SVD (float64; at ViT sizes
``[N, D]`` with N, D of a few hundred to a few thousand it takes milliseconds). The first three components' projections
become R, G and B, each min-max scaled to [0, 1] over the tokens the components were fitted on (the image's own, or
several images' stacked so that colours are comparable across them).

Sign of a component: an SVD component is defined up to its sign; every component here is turned so that its loading
of largest magnitude (the entry of the component vector with the largest ``|value|``, the first such on a tie) is
positive. The same tokens always give the same colours.

Background mask (as DINOv2's demo): the first component is scaled to [0, 1] over the fitted tokens; the side of it that
is foreground is chosen so that the patches on the image's border lie on average lower (a photo's border is mostly
background): when the border's mean exceeds the mean over all patches, the scaled component is flipped (``1 - t``).
Patches with ``t >= threshold`` are foreground; the others are background, drawn transparent (RGB 0, ``foreground``
False). As in the demo, the three colour components are then fitted again on the foreground patches alone (when there
are at least two), so that the colours spread over the object rather than over object vs background.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["PatchPCA", "feature_pca"]


@dataclass(frozen=True)
class PatchPCA:
    """What :func:`feature_pca` returns (float32 tensors on the CPU).

    Attributes:
        rgb: ``[gh, gw, 3]`` in [0, 1]: components 1-3 as R, G, B (0 on the background when masked).
        foreground: bool ``[gh, gw]``: the patches kept by the background mask (all True without it).
        scores: ``[gh, gw, k]``: the raw projections of the image's patch tokens on the components (sign fixed).
        components: ``[k, D]``: the unit principal axes (rows), signs fixed.
        explained_variance: ``[k]``: variance along each axis (``S^2 / (M - 1)`` over the M fitted tokens).
        explained_ratio: ``[k]``: its share of the total variance.
        mean: ``[D]``: the mean of the fitted tokens (subtracted before projecting).
    """

    rgb: torch.Tensor
    foreground: torch.Tensor
    scores: torch.Tensor
    components: torch.Tensor
    explained_variance: torch.Tensor
    explained_ratio: torch.Tensor
    mean: torch.Tensor


def _fit(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean, components ``[k, D]`` (signs fixed), variance ``[k]`` and variance ratio ``[k]`` of rows ``x [M, D]``."""
    mean = x.mean(0)
    xc = x - mean
    _, s, vh = torch.linalg.svd(xc, full_matrices=False)
    k = min(k, vh.shape[0])
    comps = vh[:k]
    big = comps.abs().argmax(dim=1)
    signs = torch.sign(comps.gather(1, big[:, None])).squeeze(1)
    signs[signs == 0] = 1
    comps = comps * signs[:, None]
    var = s**2 / max(x.shape[0] - 1, 1)
    total = var.sum()
    ratio = var[:k] / total if total > 0 else torch.zeros_like(var[:k])
    return mean, comps, var[:k], ratio


def _minmax(proj: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``proj`` scaled per column by the min-max of ``ref`` (same columns), clipped to [0, 1]; a constant column: 0."""
    lo, hi = ref.min(0).values, ref.max(0).values
    span = hi - lo
    t = (proj - lo) / torch.where(span > 0, span, torch.ones_like(span))
    return torch.where(span > 0, t, torch.zeros_like(t)).clamp(0.0, 1.0)


def _border(grid: tuple[int, int]) -> torch.Tensor:
    gh, gw = grid
    b = torch.zeros(gh, gw, dtype=torch.bool)
    b[0, :] = b[-1, :] = b[:, 0] = b[:, -1] = True
    return b.reshape(-1)


def feature_pca(tokens: torch.Tensor, *, grid: tuple[int, int], num_prefix_tokens: int, components: int = 3,
                fit_tokens: torch.Tensor | None = None, mask_background: bool = False,
                threshold: float = 0.5) -> PatchPCA:
    """The principal components of one image's patch tokens at one layer, as colours (see the module's notes).

    Args:
        tokens: ``[N, D]`` the tokens of one image after one layer (``result.tokens[layer + 1]``), prefix first.
        grid: ``(gh, gw)`` with ``gh * gw == N - num_prefix_tokens``.
        num_prefix_tokens: [CLS] and register tokens, dropped.
        components: how many components (the first three are the colours; fewer than three leave B (and G) 0).
        fit_tokens: ``[M, D]`` patch tokens (no prefix) to fit the components and the min-max on, e.g. the patch
            tokens of several images stacked (include this image's for its colours to lie in [0, 1]); None: this
            image's patch tokens.
        mask_background: threshold the first component (scaled to [0, 1], oriented so that the border is low) at
            ``threshold``; patches below it are background (RGB 0, ``foreground`` False) and the colour components
            are fitted again on the foreground patches.
        threshold: in [0, 1], on the scaled first component.

    Raises:
        ValueError: shapes that do not fit, fewer than two tokens to fit on, or ``components < 1``.
    """
    if tokens.ndim != 2:
        raise ValueError(f"feature_pca takes one image's tokens [N, D], got shape {tuple(tokens.shape)}")
    gh, gw = grid
    p = int(num_prefix_tokens)
    if tokens.shape[0] - p != gh * gw:
        raise ValueError(f"{tokens.shape[0]} tokens minus {p} prefix tokens do not fill a {gh}x{gw} grid")
    if components < 1:
        raise ValueError(f"components must be at least 1, got {components}")
    x = tokens[p:].detach().to("cpu", torch.float64)
    fit = x if fit_tokens is None else fit_tokens.detach().to("cpu", torch.float64)
    if fit.ndim != 2 or fit.shape[1] != x.shape[1]:
        raise ValueError(f"fit_tokens must be [M, {x.shape[1]}], got shape {tuple(fit.shape)}")
    if fit.shape[0] < 2:
        raise ValueError("feature_pca needs at least two tokens to fit the components on")
    mean, comps, var, ratio = _fit(fit, components)
    scores = (x - mean) @ comps.T
    fit_scores = (fit - mean) @ comps.T
    colour = _minmax(scores[:, :3], fit_scores[:, :3])
    fg = torch.ones(gh * gw, dtype=torch.bool)
    if mask_background:
        t = colour[:, 0]
        border = _border(grid)
        if t[border].mean() > t.mean():
            t = 1.0 - t
        fg = t >= threshold
        if int(fg.sum()) >= 2:  # DINOv2's demo: the colours from a PCA of the foreground patches alone
            fmean, fcomps, _, _ = _fit(x[fg], 3)
            fproj = (x - fmean) @ fcomps.T
            colour = torch.zeros_like(colour)
            colour[:, :fcomps.shape[0]] = _minmax(fproj, fproj[fg])
        colour = colour * fg[:, None]
    rgb = torch.zeros(gh * gw, 3, dtype=torch.float64)
    rgb[:, :colour.shape[1]] = colour
    f32 = torch.float32
    return PatchPCA(rgb=rgb.reshape(gh, gw, 3).to(f32), foreground=fg.reshape(gh, gw),
                    scores=scores.reshape(gh, gw, -1).to(f32), components=comps.to(f32),
                    explained_variance=var.to(f32), explained_ratio=ratio.to(f32), mean=mean.to(f32))

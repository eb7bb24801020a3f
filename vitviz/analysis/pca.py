"""Principal components of patch tokens shown as colours: the DINO / DINOv2 papers' and demos' "feature PCA".

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
are at least two), so that the colours spread over the object rather than over object vs background. In a joint fit
over several images (``fit_grids`` given) the border is that of every fitted image and the second fit is over the
foreground patches of every fitted image, so the colours of the foreground stay comparable across the images too.

A fit (:func:`fit_feature_pca`, a :class:`PCAFit`) does not depend on which image is then coloured with it
(:func:`project_feature_pca`): a joint fit is made once for a set of images and layer and serves each of them;
:func:`feature_pca` is the two in one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["PCAFit", "PatchPCA", "feature_pca", "fit_feature_pca", "project_feature_pca", "whitened_pca"]


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


@dataclass(frozen=True)
class PCAFit:
    """The components fitted on some patch tokens (:func:`fit_feature_pca`; float64 tensors on the CPU), ready to
    colour any image's patch tokens of the same layer and model (:func:`project_feature_pca`).

    Attributes:
        mean, components, explained_variance, explained_ratio: as :class:`PatchPCA`'s (``components [k, D]``).
        low, high: ``[min(k, 3)]`` the range of the colour components over the fitted tokens (their min-max).
        tokens: how many tokens were fitted on.
        threshold: the background mask's threshold (None: no mask).
        flip: the scaled first component is flipped (``1 - t``) so that the border is low.
        fg_mean, fg_components, fg_low, fg_high: the second fit, on the fitted foreground patches (None without a
            mask or with fewer than two foreground patches).
    """

    mean: torch.Tensor
    components: torch.Tensor
    explained_variance: torch.Tensor
    explained_ratio: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor
    tokens: int
    threshold: float | None = None
    flip: bool = False
    fg_mean: torch.Tensor | None = None
    fg_components: torch.Tensor | None = None
    fg_low: torch.Tensor | None = None
    fg_high: torch.Tensor | None = None


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


def _scaled(proj: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """``proj`` scaled per column from ``[lo, hi]`` to [0, 1], clipped; a constant column (``hi == lo``): 0."""
    span = hi - lo
    t = (proj - lo) / torch.where(span > 0, span, torch.ones_like(span))
    return torch.where(span > 0, t, torch.zeros_like(t)).clamp(0.0, 1.0)


def _border(grid: tuple[int, int]) -> torch.Tensor:
    gh, gw = grid
    b = torch.zeros(gh, gw, dtype=torch.bool)
    b[0, :] = b[-1, :] = b[:, 0] = b[:, -1] = True
    return b.reshape(-1)


def fit_feature_pca(fit_tokens: torch.Tensor, *, grids: Sequence[tuple[int, int]] | None = None,
                    components: int = 3, mask_background: bool = False, threshold: float = 0.5) -> PCAFit:
    """The components of patch tokens ``fit_tokens [M, D]`` (no prefix tokens): one image's, or several images'
    stacked (see the module's notes).

    Args:
        grids: the patch grid of each image stacked in ``fit_tokens``, in order (their sizes sum to M): their border
            patches orient the background mask (needed with ``mask_background``).
        components, mask_background, threshold: as :func:`feature_pca`.

    Raises:
        ValueError: not ``[M, D]``, fewer than two tokens, ``components < 1``, grids that do not add up to M, the
            mask without grids.
    """
    fit = fit_tokens.detach().to("cpu", torch.float64)
    if fit.ndim != 2:
        raise ValueError(f"fit_tokens must be [M, D], got shape {tuple(fit.shape)}")
    if fit.shape[0] < 2:
        raise ValueError("feature_pca needs at least two tokens to fit the components on")
    if components < 1:
        raise ValueError(f"components must be at least 1, got {components}")
    if mask_background and not (isinstance(threshold, (int, float)) and 0.0 <= float(threshold) <= 1.0):
        raise ValueError(f"threshold must be a number in [0, 1] (on the scaled first component), got "
                         f"{str(threshold)[:40]}")
    if not bool(torch.isfinite(fit).all()):
        bad = int((~torch.isfinite(fit)).any(dim=1).sum())
        raise ValueError(f"{bad} of the {fit.shape[0]} tokens hold NaN or infinite values (the model's output at "
                         "this layer is not finite): no principal components")
    if grids is not None and sum(int(g[0]) * int(g[1]) for g in grids) != fit.shape[0]:
        raise ValueError(f"the grids {[tuple(g) for g in grids]} do not add up to the {fit.shape[0]} tokens fitted on")
    if mask_background and grids is None:
        raise ValueError("the background mask needs the grids of the fitted tokens (their borders orient it)")
    mean, comps, var, ratio = _fit(fit, components)
    fit_scores = (fit - mean) @ comps.T
    lo, hi = fit_scores[:, :3].min(0).values, fit_scores[:, :3].max(0).values
    if not mask_background:
        return PCAFit(mean, comps, var, ratio, lo, hi, int(fit.shape[0]))
    assert grids is not None
    t = _scaled(fit_scores[:, :3], lo, hi)[:, 0]
    border = torch.cat([_border((int(g[0]), int(g[1]))) for g in grids])
    flip = bool(t[border].mean() > t.mean())
    fg = (1.0 - t if flip else t) >= threshold
    second: tuple = (None, None, None, None)
    if int(fg.sum()) >= 2:  # DINOv2's demo: the colours from a PCA of the foreground patches alone
        fmean, fcomps, _, _ = _fit(fit[fg], 3)
        fproj = (fit[fg] - fmean) @ fcomps.T
        second = (fmean, fcomps, fproj.min(0).values, fproj.max(0).values)
    return PCAFit(mean, comps, var, ratio, lo, hi, int(fit.shape[0]), float(threshold), flip, *second)


def project_feature_pca(fit: PCAFit, tokens: torch.Tensor, *, grid: tuple[int, int],
                        num_prefix_tokens: int) -> PatchPCA:
    """One image's tokens ``[N, D]`` (prefix first) coloured by ``fit`` (its components, colour ranges and mask).

    Raises:
        ValueError: tokens that do not fill the grid, or of another width than the fitted ones.
    """
    if tokens.ndim != 2:
        raise ValueError(f"feature_pca takes one image's tokens [N, D], got shape {tuple(tokens.shape)}")
    gh, gw = grid
    p = int(num_prefix_tokens)
    if tokens.shape[0] - p != gh * gw:
        raise ValueError(f"{tokens.shape[0]} tokens minus {p} prefix tokens do not fill a {gh}x{gw} grid")
    x = tokens[p:].detach().to("cpu", torch.float64)
    if x.shape[1] != fit.mean.shape[0]:
        raise ValueError(f"the tokens have {x.shape[1]} channels but the components were fitted on "
                         f"{fit.mean.shape[0]}")
    scores = (x - fit.mean) @ fit.components.T
    colour = _scaled(scores[:, :3], fit.low, fit.high)
    fg = torch.ones(gh * gw, dtype=torch.bool)
    if fit.threshold is not None:
        t = colour[:, 0]
        fg = (1.0 - t if fit.flip else t) >= fit.threshold
        if fit.fg_mean is not None and fit.fg_components is not None:
            fproj = (x - fit.fg_mean) @ fit.fg_components.T
            colour = torch.zeros_like(colour)
            colour[:, :fit.fg_components.shape[0]] = _scaled(fproj, fit.fg_low, fit.fg_high)
        colour = colour * fg[:, None]
    rgb = torch.zeros(gh * gw, 3, dtype=torch.float64)
    rgb[:, :colour.shape[1]] = colour
    f32 = torch.float32
    return PatchPCA(rgb=rgb.reshape(gh, gw, 3).to(f32), foreground=fg.reshape(gh, gw),
                    scores=scores.reshape(gh, gw, -1).to(f32), components=fit.components.to(f32),
                    explained_variance=fit.explained_variance.to(f32), explained_ratio=fit.explained_ratio.to(f32),
                    mean=fit.mean.to(f32))


def feature_pca(tokens: torch.Tensor, *, grid: tuple[int, int], num_prefix_tokens: int, components: int = 3,
                fit_tokens: torch.Tensor | None = None, fit_grids: Sequence[tuple[int, int]] | None = None,
                mask_background: bool = False, threshold: float = 0.5) -> PatchPCA:
    """The principal components of one image's patch tokens at one layer, as colours (see the module's notes):
    :func:`fit_feature_pca` then :func:`project_feature_pca`.

    Args:
        tokens: ``[N, D]`` the tokens of one image after one layer (``result.tokens[layer + 1]``), prefix first.
        grid: ``(gh, gw)`` with ``gh * gw == N - num_prefix_tokens``.
        num_prefix_tokens: [CLS] and register tokens, dropped.
        components: how many components (the first three are the colours; fewer than three leave B (and G) 0).
        fit_tokens: ``[M, D]`` patch tokens (no prefix) to fit the components and the min-max on, e.g. the patch
            tokens of several images stacked (include this image's for its colours to lie in [0, 1]); None: this
            image's patch tokens.
        fit_grids: the grid of each image stacked in ``fit_tokens`` (with ``mask_background``: the borders that
            orient the mask, and the foreground the colours are fitted again on, are those of every fitted image).
        mask_background: threshold the first component (scaled to [0, 1], oriented so that the border is low) at
            ``threshold``; patches below it are background (RGB 0, ``foreground`` False) and the colour components
            are fitted again on the foreground patches.
        threshold: in [0, 1], on the scaled first component.

    Raises:
        ValueError: shapes that do not fit, fewer than two tokens to fit on, ``components < 1``, a joint fit with the
            mask but without ``fit_grids``.
    """
    if tokens.ndim != 2:
        raise ValueError(f"feature_pca takes one image's tokens [N, D], got shape {tuple(tokens.shape)}")
    p = int(num_prefix_tokens)
    if tokens.shape[0] - p != grid[0] * grid[1]:
        raise ValueError(f"{tokens.shape[0]} tokens minus {p} prefix tokens do not fill a {grid[0]}x{grid[1]} grid")
    if fit_tokens is None:
        fit_tokens, fit_grids = tokens[p:], [tuple(grid)]
    elif fit_tokens.ndim != 2 or fit_tokens.shape[1] != tokens.shape[1]:
        raise ValueError(f"fit_tokens must be [M, {tokens.shape[1]}], got shape {tuple(fit_tokens.shape)}")
    fit = fit_feature_pca(fit_tokens, grids=fit_grids, components=components, mask_background=mask_background,
                          threshold=threshold)
    return project_feature_pca(fit, tokens, grid=grid, num_prefix_tokens=p)


def whitened_pca(tokens: torch.Tensor, *, grid: tuple[int, int], num_prefix_tokens: int,
                 foreground: torch.Tensor | None = None) -> PatchPCA:
    """DINOv3's feature PCA as its authors draw it (the DINOv3 repository's PCA notebook): a whitened PCA of three
    components fitted on the foreground patch tokens (``sklearn.decomposition.PCA(n_components=3, whiten=True)``:
    ``(x - mean) @ V^T / sqrt(variance)``, the variance ``S^2 / (M - 1)`` over the M fitted tokens), every patch
    projected, colours ``sigmoid(2 * projection)``, the background black.

    The notebook's foreground comes from a classifier trained on labelled masks; here it is ``foreground`` (vitviz's
    mask of the first component, :func:`feature_pca`), or every patch. Signs follow this module's rule (the largest
    loading of each component positive), not scikit-learn's: a flipped component swaps a colour for its complement.

    Args:
        tokens: ``[N, D]`` one image's tokens (prefix first).
        grid, num_prefix_tokens: as :func:`feature_pca`.
        foreground: bool ``[gh, gw]`` (or ``[gh * gw]``): the patches fitted on and coloured; None: all. Fewer than
            two foreground patches: every patch is fitted on.

    Returns:
        A :class:`PatchPCA`: ``rgb`` the colours, ``scores`` the whitened projections.
    """
    gh, gw = grid
    p = int(num_prefix_tokens)
    if tokens.ndim != 2 or tokens.shape[0] - p != gh * gw:
        raise ValueError(f"tokens of shape {tuple(tokens.shape)} minus {p} prefix tokens do not fill a {gh}x{gw} grid")
    x = tokens[p:].detach().to("cpu", torch.float64)
    fg = torch.ones(gh * gw, dtype=torch.bool) if foreground is None else foreground.reshape(-1).to(torch.bool)
    fit = x[fg] if int(fg.sum()) >= 2 else x
    if fit.shape[0] < 2:
        raise ValueError("the whitened PCA needs at least two tokens to fit the components on")
    mean, comps, var, ratio = _fit(fit, 3)
    scores = (x - mean) @ comps.T / torch.sqrt(torch.where(var > 0, var, torch.ones_like(var)))
    colour = torch.sigmoid(2.0 * scores) * fg[:, None]
    rgb = torch.zeros(gh * gw, 3, dtype=torch.float64)
    rgb[:, :colour.shape[1]] = colour
    f32 = torch.float32
    return PatchPCA(rgb=rgb.reshape(gh, gw, 3).to(f32), foreground=fg.reshape(gh, gw),
                    scores=scores.reshape(gh, gw, -1).to(f32), components=comps.to(f32),
                    explained_variance=var.to(f32), explained_ratio=ratio.to(f32), mean=mean.to(f32))

"""From patch-grid maps to pixels: upsampling over the model's input, and back onto the original photo. No Qt."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Literal

import torch
import torch.nn.functional as F

from vitviz.analysis.basics import as_float
from vitviz.model.preprocess import CropGeometry

UpsampleMode = Literal["nearest", "bilinear"]

__all__ = ["map_to_image", "upsample"]


def _check_map(m: Any) -> tuple[torch.Tensor, bool]:
    t = as_float(m, "map")
    if t.ndim == 2:
        return t[None], False
    if t.ndim == 3:
        return t, True
    raise ValueError(f"map must be [gh, gw] or [B, gh, gw], got shape {tuple(t.shape)}")


def _size(size: int | tuple[int, int]) -> tuple[int, int]:
    h, w = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    if h <= 0 or w <= 0:
        raise ValueError(f"size must be positive, got {size!r}")
    return h, w


def upsample(map: Any, size: int | tuple[int, int], mode: UpsampleMode = "nearest") -> torch.Tensor:
    """Resize a patch map to ``size`` pixels, cell centres aligned with pixel centres.

    ``"nearest"``: pixel ``(y, x)`` takes cell ``(floor((y + 0.5) gh / H), floor((x + 0.5) gw / W))`` (torch's
    ``nearest-exact``; for integer factors every cell becomes a solid block). ``"bilinear"``: torch bilinear with
    ``align_corners=False`` (edges replicated).

    Args:
        map: ``[gh, gw]`` (or ``[B, gh, gw]``).
        size: ``H`` or ``(H, W)``.
        mode: ``"nearest" | "bilinear"``.

    Returns:
        ``[H, W]`` (or ``[B, H, W]``) float32 (float64 kept).
    """
    m, batched = _check_map(map)
    h, w = _size(size)
    if mode == "nearest":
        out = F.interpolate(m[:, None], size=(h, w), mode="nearest-exact")
    elif mode == "bilinear":
        out = F.interpolate(m[:, None], size=(h, w), mode="bilinear", align_corners=False)
    else:
        raise ValueError(f"mode={mode!r}; valid: 'nearest', 'bilinear'")
    out = out[:, 0]
    return out if batched else out[0]


@lru_cache(maxsize=32)
def _axis_weights(
    n_img: int, n_resized: int, crop_start: int, crop_len: int, cells: int, mode: str
) -> tuple[torch.Tensor, slice]:
    """Interpolation matrix ``[n_inside, cells]`` for one axis, over the original pixels whose centre is inside the
    crop, and the slice of those pixels (a contiguous run: centres increase with the index). Cached: do not modify.
    """
    # centre of original pixel i, in crop pixels (crop edges at 0 and crop_len)
    c = (torch.arange(n_img, dtype=torch.float64) + 0.5) * (n_resized / n_img) - crop_start
    ins = ((c >= 0) & (c < crop_len)).nonzero()[:, 0]
    inside = slice(int(ins[0]), int(ins[-1]) + 1) if len(ins) else slice(0, 0)
    g = c[inside] * (cells / crop_len)  # cell coordinate: cell j spans [j, j + 1)
    W = torch.zeros(len(g), cells, dtype=torch.float64)
    rows = torch.arange(len(g))
    if mode == "nearest":
        idx = g.floor().long().clamp(0, cells - 1)
        W[rows, idx] = 1.0
    else:
        t = g - 0.5
        i0 = t.floor()
        w1 = t - i0
        i0 = i0.long()
        W.index_put_((rows, i0.clamp(0, cells - 1)), 1.0 - w1, accumulate=True)
        W.index_put_((rows, (i0 + 1).clamp(0, cells - 1)), w1, accumulate=True)
    return W, inside


def map_to_image(map: Any, geometry: CropGeometry, *, mode: UpsampleMode = "bilinear") -> torch.Tensor:
    """Put a map over the model's input crop back onto the original image's pixel grid.

    The preprocessing resized the ``(H_img, W_img)`` image to ``geometry.resized_size`` and cropped
    ``geometry.crop_box``; the ``[gh, gw]`` map covers that crop (``geometry.crop_in_image()`` in image pixels).
    Original pixel centre ``y + 0.5`` lies at crop coordinate ``u = (y + 0.5) * rh / H_img - top``, i.e. at cell
    coordinate ``u * gh / crop_h``; the value there is the nearest cell or the bilinear interpolation between cell
    centres (edges replicated), exactly as :func:`upsample` does over the crop. The interpolation is separable, so it
    is computed as ``Wy @ map @ Wx^T``. Pixels whose centre is outside the crop are NaN.

    Args:
        map: ``[gh, gw]`` (or ``[B, gh, gw]``) over the model input (e.g. a rollout map).
        geometry: from ``Preprocess.geometry((H_img, W_img))`` / ``Preprocess.apply``.
        mode: ``"nearest" | "bilinear"``.

    Returns:
        ``[H_img, W_img]`` (or ``[B, H_img, W_img]``) float32 (float64 kept), NaN outside the crop.
    """
    if mode not in ("nearest", "bilinear"):
        raise ValueError(f"mode={mode!r}; valid: 'nearest', 'bilinear'")
    if not isinstance(geometry, CropGeometry):
        raise TypeError(f"geometry must be a vitviz.model.preprocess.CropGeometry, got {type(geometry).__name__}")
    m, batched = _check_map(map)
    B, gh, gw = m.shape
    H, W = geometry.image_size
    rh, rw = geometry.resized_size
    top, left, ch, cw = geometry.crop_box
    if min(H, W, rh, rw, ch, cw) <= 0:
        raise ValueError(f"degenerate crop geometry {geometry}")
    Wy, rows = _axis_weights(H, rh, top, ch, gh, mode)
    Wx, cols = _axis_weights(W, rw, left, cw, gw, mode)
    out = torch.full((B, H, W), math.nan, dtype=m.dtype)
    out[:, rows, cols] = Wy @ m.double() @ Wx.T  # computed in float64 over the crop only
    return out if batched else out[0]

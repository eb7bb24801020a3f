"""Colormaps and overlays: the lookup tables of every colormap vitviz offers, values through a colormap, a map
blended over a photo. No Qt; numpy only.

Every array here is ``numpy`` in row-major (height, width[, channels]) order; RGB(A) arrays are ``uint8``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["COLORMAPS", "DEFAULT_COLORMAP", "NEUTRAL_RGB", "apply_colormap", "colormap_names", "get_colormap",
           "head_colours", "normalize", "overlay", "value_range"]


def _hex(colors: Sequence[str]) -> np.ndarray:
    return np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in colors], dtype=np.float64)


def _lut_from_anchors(anchors: np.ndarray) -> np.ndarray:
    xs = np.linspace(0.0, 1.0, len(anchors))
    t = np.linspace(0.0, 1.0, 256)
    rgb = np.stack([np.interp(t, xs, anchors[:, c]) for c in range(3)], axis=1)
    lut = np.empty((256, 4), dtype=np.uint8)
    lut[:, :3] = np.clip(np.round(rgb), 0, 255)
    lut[:, 3] = 255
    return lut


def _lut_from_fn(fn) -> np.ndarray:
    t = np.linspace(0.0, 1.0, 256)
    rgb = np.clip(np.stack(fn(t), axis=1), 0.0, 1.0) * 255.0
    lut = np.empty((256, 4), dtype=np.uint8)
    lut[:, :3] = np.round(rgb)
    lut[:, 3] = 255
    return lut


def _turbo(t):
    r = 0.13572138 + t * (4.61539260 + t * (-42.66032258 + t * (132.13108234 + t * (-152.94239396 + t * 59.28637943))))
    g = 0.09140261 + t * (2.19418839 + t * (4.84296658 + t * (-14.18503333 + t * (4.27729857 + t * 2.82956604))))
    b = 0.10667330 + t * (12.64194608 + t * (-60.58204836 + t * (110.36276771 + t * (-89.90310912 + t * 27.34824973))))
    return r, g, b


def _jet(t):
    r = np.clip(1.5 - np.abs(4 * t - 3), 0, 1)
    g = np.clip(1.5 - np.abs(4 * t - 2), 0, 1)
    b = np.clip(1.5 - np.abs(4 * t - 1), 0, 1)
    return r, g, b


COLORMAPS: dict[str, np.ndarray] = {
    "viridis": _lut_from_anchors(_hex(["#440154", "#482878", "#3E4989", "#31688E", "#26828E", "#1F9E89", "#35B779",
                                       "#6DCD59", "#B4DE2C", "#FDE725"])),
    "magma": _lut_from_anchors(_hex(["#000004", "#180F3E", "#451077", "#721F81", "#9F2F7F", "#CD4071", "#F1605D",
                                     "#FD9567", "#FEC98D", "#FCFDBF"])),
    "inferno": _lut_from_anchors(_hex(["#000004", "#1B0C42", "#4B0C6B", "#781C6D", "#A52C60", "#CF4446", "#ED6925",
                                       "#FB9A06", "#F7D03C", "#FCFFA4"])),
    "plasma": _lut_from_anchors(_hex(["#0D0887", "#47039F", "#7301A8", "#9C179E", "#BD3786", "#D8576B", "#ED7953",
                                      "#FA9E3B", "#FDC926", "#F0F921"])),
    "turbo": _lut_from_fn(_turbo),
    "jet": _lut_from_fn(_jet),
    "hot": _lut_from_fn(lambda t: (np.clip(3 * t, 0, 1), np.clip(3 * t - 1, 0, 1), np.clip(3 * t - 2, 0, 1))),
    "gray": _lut_from_fn(lambda t: (t, t, t)),
    "coolwarm": _lut_from_anchors(np.array([[59, 76, 192], [98, 130, 234], [141, 176, 254], [184, 208, 249],
                                            [221, 221, 221], [245, 196, 173], [244, 154, 123], [222, 96, 77],
                                            [180, 4, 38]], dtype=np.float64)),
}
DEFAULT_COLORMAP = "inferno"
NEUTRAL_RGB = (150, 150, 150)
"""The colour of a token left out of the colour scale (an artefact token): a mid grey outside every sequential and
diverging colormap of :data:`COLORMAPS` (drawn at the map's opacity), named in the legend. Never a scale colour:
an excluded token is not a value at the top (or bottom) of the scale."""


def colormap_names() -> list[str]:
    return list(COLORMAPS)


def get_colormap(name: str) -> np.ndarray:
    """The ``[256, 4] uint8`` lookup table of ``name``."""
    try:
        return COLORMAPS[name]
    except KeyError:
        raise ValueError(f"unknown colormap {name!r}; available: {', '.join(COLORMAPS)}") from None


def value_range(values: np.ndarray, vmin: float | None = None, vmax: float | None = None) -> tuple[float, float]:
    """``(vmin, vmax)``: the given limits, else the finite min/max of ``values`` (a flat map gives a 1-wide range)."""
    v = np.asarray(values, dtype=np.float64)
    finite = v[np.isfinite(v)]
    lo = float(finite.min()) if vmin is None and finite.size else (0.0 if vmin is None else float(vmin))
    hi = float(finite.max()) if vmax is None and finite.size else (1.0 if vmax is None else float(vmax))
    if not hi > lo:
        hi = lo + 1.0 if hi == lo else lo
    return lo, hi


def normalize(values: np.ndarray, vmin: float | None = None, vmax: float | None = None) -> np.ndarray:
    """Scale to [0, 1] by ``value_range``; NaN stays NaN."""
    lo, hi = value_range(values, vmin, vmax)
    with np.errstate(invalid="ignore"):
        return np.clip((np.asarray(values, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0)


def apply_colormap(values: np.ndarray, name: str = DEFAULT_COLORMAP, vmin: float | None = None,
                   vmax: float | None = None) -> np.ndarray:
    """Map ``values [H, W]`` through a colormap: ``uint8 RGBA [H, W, 4]``; NaN becomes fully transparent."""
    lut = get_colormap(name)
    n = normalize(values, vmin, vmax)
    nan = ~np.isfinite(n)
    idx = np.round(np.nan_to_num(n, nan=0.0) * 255).astype(np.intp)
    out = lut[idx]
    if nan.any():
        out = out.copy()
        out[nan, 3] = 0
    return out


def overlay(rgb: np.ndarray, values: np.ndarray, *, cmap: str = DEFAULT_COLORMAP, opacity: float = 0.6,
            vmin: float | None = None, vmax: float | None = None) -> np.ndarray:
    """Blend a colour-mapped map over an image.

    Args:
        rgb: ``uint8 [H, W, 3]`` image.
        values: ``[H, W]`` map at the image's resolution (NaN: not covered, the image shows through).
        opacity: 0 (image only) .. 1 (map only).

    Returns:
        ``uint8 [H, W, 3]``.
    """
    rgb = np.asarray(rgb)
    values = np.asarray(values)
    if rgb.shape[:2] != values.shape:
        raise ValueError(f"image is {rgb.shape[:2]} but the map is {values.shape}")
    colored = apply_colormap(values, cmap, vmin, vmax)
    alpha = (colored[..., 3:4].astype(np.float32) / 255.0) * float(np.clip(opacity, 0.0, 1.0))
    out = rgb[..., :3].astype(np.float32) * (1 - alpha) + colored[..., :3].astype(np.float32) * alpha
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
TAB20 = ("#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896", "#9467bd", "#c5b0d5",
         "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d", "#17becf", "#9edae5")


def head_colours(num_heads: int) -> list[tuple[int, int, int]]:
    """One colour per head, ``(r, g, b)`` in 0..255, the same in the window's plots and ``vitviz stats``' figure:
    matplotlib's tab10 (up to 10 heads), tab20 (up to 20), an evenly spaced hue wheel beyond."""
    import colorsys

    n = int(num_heads)
    if n <= 20:
        table = TAB10 if n <= 10 else TAB20
        return [tuple(int(table[i][k:k + 2], 16) for k in (1, 3, 5)) for i in range(n)]  # type: ignore[misc]
    return [tuple(int(round(255 * c)) for c in colorsys.hsv_to_rgb(i / n, 1.0, 1.0)) for i in range(n)]  # type: ignore

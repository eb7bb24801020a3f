"""Drawing a figure: a panel's picture (photo, map, "dim" mask) at ``k`` times its pixels, the matplotlib figure of a
:class:`~vitviz.render.figures.specification.FigureSpec` (panels, outlines, mask contours, badges, labels, colour
bars, title and caption where :func:`~vitviz.render.figures.layout.lay_out` puts them), and that figure in pixels.

matplotlib is imported when the first figure is drawn, never at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from vitviz.render import colormaps
from vitviz.render.figures.layout import Layout, lay_out
from vitviz.render.figures.sizes import ScaleOption, scale_factor
from vitviz.render.figures.specification import FigureSpec, Panel
from vitviz.render.figures.text import TEXT_PT, TICK_PT, TITLE_PT, text_width_pt
from vitviz.render.scales import ColourScale

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

MARKER_COLOUR = (0 / 255, 230 / 255, 1.0)  # the window's query-patch outline
ARTEFACT_COLOUR = (1.0, 150 / 255, 40 / 255)  # the window's artefact-token outline
VEIL_ALPHA = 170 / 255  # the window's "dim" mask


def composite(panel: Panel, k: int = 1) -> np.ndarray:
    """The panel's picture at ``k`` times its image's pixels: ``uint8 [k H, k W, 3]`` (photo upsampled with Lanczos,
    map cells kept sharp, coloured in the panel's scale; the "dim" mask darkens what lies outside it)."""
    photo = np.ascontiguousarray(np.asarray(panel.photo)[..., :3], dtype=np.uint8)
    if not panel.photo_shown:  # the picture alone, on black
        photo = np.zeros_like(photo)
    h, w = photo.shape[:2]
    if k > 1:
        photo = np.asarray(Image.fromarray(photo, "RGB").resize((w * k, h * k), Image.Resampling.LANCZOS))
    out = photo
    if panel.values is not None and panel.scale is not None:
        t = panel.scale.normalise(panel.values).astype(np.float32)
        t = _repeat(t, k)
        out = colormaps.overlay(photo, t, cmap=panel.scale.cmap, opacity=panel.opacity, vmin=0.0, vmax=1.0)
        if panel.neutral:  # left out of the scale: the neutral colour at the map's opacity, never a scale colour
            cells = np.zeros(panel.grid, dtype=bool)
            cells[tuple(np.asarray(panel.neutral).T)] = True
            inside = _repeat(_cells_on_image(cells, panel.crop, (h, w)), k)
            a = float(np.clip(panel.opacity, 0.0, 1.0))
            grey = np.asarray(colormaps.NEUTRAL_RGB, dtype=np.float32)
            out = out.copy()
            out[inside] = np.round(photo[inside].astype(np.float32) * (1 - a) + grey * a).astype(np.uint8)
    if panel.rgb is not None:
        out = _rgb_over(out, panel, (h, w), k)
    if panel.mask is not None and panel.mask_style == "dim":
        outside = _repeat(_mask_outside(panel, (h, w)), k)
        out = out.copy()
        out[outside] = np.round(out[outside].astype(np.float32) * (1 - VEIL_ALPHA)).astype(np.uint8)
    return out


def _repeat(a: np.ndarray, k: int) -> np.ndarray:
    return a if k == 1 else np.repeat(np.repeat(a, k, axis=0), k, axis=1)


def _rgb_over(photo: np.ndarray, panel: Panel, size: tuple[int, int], k: int) -> np.ndarray:
    """``panel.rgb`` (RGBA over the crop, one cell per patch) blended over ``photo`` at alpha times the opacity."""
    rgba = np.asarray(panel.rgb, dtype=np.float32)
    gh, gw = rgba.shape[:2]
    x0, y0, cw, ch = panel.crop
    h, w = size
    rows = np.floor((np.arange(h) + 0.5 - y0) / (ch / gh)).astype(int)
    cols = np.floor((np.arange(w) + 0.5 - x0) / (cw / gw)).astype(int)
    vr, vc = (rows >= 0) & (rows < gh), (cols >= 0) & (cols < gw)
    px = rgba[np.clip(rows, 0, gh - 1)][:, np.clip(cols, 0, gw - 1)]
    a = px[..., 3] * (vr[:, None] & vc[None, :]) * float(panel.opacity)
    a, px = _repeat(a, k), _repeat(px, k)
    out = photo.astype(np.float32) * (1 - a[..., None]) + px[..., :3] * 255.0 * a[..., None]
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def _mask_outside(panel: Panel, size: tuple[int, int]) -> np.ndarray:
    """bool ``[H, W]``: image pixels inside the mask's area whose patch is not in the mask."""
    mask = np.asarray(panel.mask, dtype=bool)
    return _cells_on_image(np.ones_like(mask), panel.crop, size) & ~_cells_on_image(mask, panel.crop, size)


def _cells_on_image(cells: np.ndarray, crop: tuple, size: tuple[int, int]) -> np.ndarray:
    """bool ``[H, W]``: image pixels whose patch (of the bool ``[gh, gw]`` grid over ``crop``) is set."""
    gh, gw = cells.shape
    x0, y0, mw, mh = crop
    h, w = size
    rows = np.floor((np.arange(h) + 0.5 - y0) / (mh / gh)).astype(int)
    cols = np.floor((np.arange(w) + 0.5 - x0) / (mw / gw)).astype(int)
    vr, vc = (rows >= 0) & (rows < gh), (cols >= 0) & (cols < gw)
    return vr[:, None] & vc[None, :] & cells[np.clip(rows, 0, gh - 1)][:, np.clip(cols, 0, gw - 1)]


def _mask_segments(panel: Panel) -> list[list[tuple[float, float]]]:
    """The mask's boundary along patch edges, as line segments in image pixels."""
    mask = np.asarray(panel.mask, dtype=bool)
    gh, gw = mask.shape
    x0, y0, mw, mh = panel.crop
    sx, sy = mw / gw, mh / gh
    pad = np.pad(mask, 1)
    segs = []
    for r, c in zip(*np.nonzero(mask)):
        xa, xb, ya, yb = x0 + c * sx, x0 + (c + 1) * sx, y0 + r * sy, y0 + (r + 1) * sy
        if not pad[r, c + 1]:
            segs.append([(xa, ya), (xb, ya)])
        if not pad[r + 2, c + 1]:
            segs.append([(xa, yb), (xb, yb)])
        if not pad[r + 1, c]:
            segs.append([(xa, ya), (xa, yb)])
        if not pad[r + 1, c + 2]:
            segs.append([(xb, ya), (xb, yb)])
    return segs


def _colormap(scale: ColourScale):
    from matplotlib.colors import ListedColormap

    lut = colormaps.get_colormap(scale.cmap)[:, :3].astype(np.float64) / 255.0
    cmap = ListedColormap(lut, name=scale.cmap)
    return cmap.with_extremes(under=lut[0], over=lut[-1])


def _spaced(ticks: list[tuple[float, str]], scale: ColourScale, width_pt: float,
            size: float) -> list[tuple[float, str]]:
    """The most of ``ticks`` whose labels, centred on a bar ``width_pt`` long, keep a gap of a quarter of their size
    between them: every tick, else every k-th from any start (or the first and the last), the smallest k first."""
    x = scale.normalise(np.asarray([v for v, _ in ticks], dtype=np.float64)) * width_pt
    w = [text_width_pt(t, size) for _, t in ticks]
    n = len(ticks)
    candidates = [list(range(s, n, k)) for k in range(1, n + 1) for s in range(k)] + [[0, n - 1]]
    best = [0]
    for idx in candidates:
        if len(idx) > len(best) and all(x[b] - x[a] >= (w[a] + w[b]) / 2 + size / 4
                                        for a, b in pairwise(idx)):
            best = idx
    return [ticks[i] for i in best] if ticks else ticks


def _colorbar(fig, cax, scale: ColourScale, label: str, orientation: str, nticks: int) -> Any:
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import LogNorm, Normalize

    norm = LogNorm(scale.lo, scale.hi) if scale.log else Normalize(scale.lo, scale.hi)
    extend = {(False, False): "neither", (True, False): "min", (False, True): "max",
              (True, True): "both"}[(scale.clipped_low, scale.clipped_high)]
    cb = fig.colorbar(ScalarMappable(norm=norm, cmap=_colormap(scale)), cax=cax, orientation=orientation,
                      extend=extend, extendfrac=0.04)
    cb.solids.set_rasterized(False)  # vector colour bar in SVG / PDF (matplotlib rasterises long ones)
    cb.solids.set_edgecolor("face")  # no hairlines between the colour steps
    ticks = scale.ticks(nticks)
    if orientation == "horizontal":  # labels side by side under a small bar: every k-th one, so none overlap
        ticks = _spaced(ticks, scale, cax.get_position().width * fig.get_figwidth() * 72, TICK_PT - 0.5)
    cb.set_ticks([v for v, _ in ticks], labels=[t for _, t in ticks])
    cb.ax.minorticks_off()
    cb.ax.tick_params(labelsize=TICK_PT if orientation == "vertical" else TICK_PT - 0.5, length=3, width=0.6,
                      pad=2)
    cb.outline.set_linewidth(0.6)
    if label:
        cb.set_label(label, fontsize=TEXT_PT if orientation == "vertical" else TICK_PT, parse_math=False,
                     labelpad=3 if orientation == "vertical" else 1)
    return cb


def build(spec: FigureSpec, *, k: int | None = None, image_k: int | None = None, vector: bool = False,
          reserve: tuple[int, int] = (0, 0), layout: Layout | None = None) -> Figure:
    """The matplotlib :class:`~matplotlib.figure.Figure` of ``spec`` (no pyplot, no global state).

    Args:
        k: the layout's factor (default: ``"print"``); ``image_k``: the factor the panels' pixels are drawn at
            (default ``k``; 1 for the vector formats: the image's own resolution, scaled by the format).
        vector: drawn for SVG / PDF (the images are embedded as they are, never resampled).
        reserve: at least this many (title, caption) lines of space.
        layout: the figure's :func:`~vitviz.render.figures.layout.lay_out` when the caller has it (then ``k`` and
            ``reserve`` are its own).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    L = lay_out(spec, k, reserve) if layout is None else layout
    k = L.k
    image_k = k if image_k is None else image_k
    W, H = L.width, L.height
    fig = Figure(figsize=(W / L.dpi, H / L.dpi), dpi=L.dpi, facecolor="white")
    FigureCanvasAgg(fig)

    def rect(x: float, y_top: float, w: float, h: float) -> list[float]:
        return [x / W, 1 - (y_top + h) / H, w / W, h / H]

    u = L.px_per_pt
    line_t, line_c = round(TITLE_PT * 1.3 * u), round(TEXT_PT * 1.3 * u)
    for i, line in enumerate(L.title_lines):
        fig.text(0.5, 1 - (L.title_top + i * line_t) / H, line, ha="center", va="top", fontsize=TITLE_PT,
                 parse_math=False, gid=f"title-{i}")
    for i, line in enumerate(L.caption_lines):
        fig.text(round(6 * u) / W, 1 - (L.caption_top + i * line_c) / H, line, ha="left", va="top",
                 fontsize=TEXT_PT, parse_math=False, color="0.15", gid=f"caption-{i}")
    for i, (panel, (x, y, w, h)) in enumerate(zip(spec.panels, L.cells)):
        ih, iw = panel.size
        ax = fig.add_axes(rect(x, y, w, h))
        ax.set_axis_off()
        ax.imshow(composite(panel, image_k), interpolation="none" if vector or (w, h) == (iw * k, ih * k)
                  else "antialiased", extent=(0, iw, ih, 0), aspect="auto", resample=False)
        ax.set_xlim(0, iw)
        ax.set_ylim(ih, 0)
        if panel.marker is not None:
            mx, my, mw, mh = panel.marker
            ax.add_patch(Rectangle((mx, my), mw, mh, fill=False, edgecolor=MARKER_COLOUR, linewidth=1.2))
        for ox, oy, ow, oh in (panel.patch_rect(row, col) for row, col in panel.outlined):
            ax.add_patch(Rectangle((ox, oy), ow, oh, fill=False, edgecolor=ARTEFACT_COLOUR, linewidth=0.9,
                                   linestyle=(0, (2.5, 1.5))))
        if panel.mask is not None and panel.mask_style == "contour":
            ax.add_collection(LineCollection(_mask_segments(panel), colors="white", linewidths=1.0,
                                             capstyle="projecting"))
        if panel.badge:
            ax.text(0.02, 0.98, panel.badge, transform=ax.transAxes, ha="left", va="top", fontsize=TEXT_PT + 1,
                    parse_math=False, gid=f"badge-{i}",
                    bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})
        r, c = divmod(i, spec.ncols)
        label = panel.label or (spec.col_labels[c] if spec.col_labels is not None and r == 0 else None)
        if label:
            fig.text((x + w / 2) / W, 1 - (y - round(2 * u)) / H, label, ha="center", va="bottom",
                     fontsize=TEXT_PT, parse_math=False, gid=f"label-{i}")
        if spec.row_labels is not None and c == 0:
            fig.text((x - round(4 * u)) / W, 1 - (y + h / 2) / H, spec.row_labels[r], ha="right", va="center",
                     fontsize=TEXT_PT, parse_math=False, gid=f"row-{r}")
        if L.small_bars and panel.scale is not None and panel.own_colorbar:
            _colorbar(fig, fig.add_axes(rect(*L.small_bars[i])), panel.scale,
                      spec.colorbar_label if panel.colorbar_label is None else panel.colorbar_label, "horizontal", 3)
    if L.bar is not None:
        _colorbar(fig, fig.add_axes(rect(*L.bar)), spec.scale, spec.colorbar_label, "vertical", 5)
    return fig


@dataclass(frozen=True)
class Rendered:
    """A figure drawn to pixels: ``pixels`` ``uint8 [H, W, 3]`` at ``dpi`` (``k`` image pixels -> panel pixels)."""

    pixels: np.ndarray
    dpi: float
    k: int


def render(spec: FigureSpec, scale: ScaleOption = "print", *, reserve: tuple[int, int] = (0, 0)) -> Rendered:
    """Draw ``spec`` at ``scale`` (see :func:`~vitviz.render.figures.sizes.scale_factor`) to an RGB array."""
    k = scale_factor(spec, scale)
    with matplotlib_style():
        L = lay_out(spec, k, reserve)
        fig = build(spec, layout=L)
        fig.canvas.draw()
        rgba = np.asarray(fig.canvas.buffer_rgba())
    return Rendered(pixels=np.ascontiguousarray(rgba[..., :3]), dpi=L.dpi, k=k)


def matplotlib_style():
    """The matplotlib settings every figure is measured and drawn under (a context manager): text as text in SVG
    and PDF, DejaVu Sans, reproducible SVG ids, every image its own, paths not simplified."""
    import matplotlib

    return matplotlib.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42, "font.family": "DejaVu Sans",
                           "svg.hashsalt": "vitviz", "image.composite_image": False,
                           "path.simplify": False})

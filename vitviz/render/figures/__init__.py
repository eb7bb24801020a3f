"""Figures for papers: the current view, the heads grid and layer animations as PNG, SVG, PDF, GIF, APNG and MP4.

No Qt. Drawn with matplotlib (imported when a figure is made, never at start-up): the field's standard figure library,
whose SVG and PDF keep text as text (``svg.fonttype = "none"``, TrueType fonts in PDFs) and whose colour bars are
vector paths, so one layout serves the raster and the vector formats.

A figure is a :class:`FigureSpec`: a grid of :class:`Panel` s (a photo, a map on it with its colour scale, optional
label, query-patch marker, top-mass mask and a badge such as the layer number), a title, a caption, row and column
labels and one colour bar for a shared scale (or a small one under each panel). :func:`view_figure`,
:func:`heads_figure` and :func:`layer_figures` build the specs of a :class:`vitviz.document.session.Session`'s current view, its
heads and its layers in the colours of the window (the same :class:`~vitviz.render.scales.ColourScale`, ticks, quantity and
unit). :func:`render` draws a spec to pixels, :func:`save` writes PNG / SVG / PDF, :func:`save_animation` GIF / APNG /
MP4, always atomically and never over an existing file unless asked.

Sizes. The panels are drawn at an integer multiple ``k`` of the image's own pixels (``scale``): ``"print"`` (the
default) takes the smallest ``k`` that makes the panel area's long side at least :data:`PRINT_LONG_SIDE` px,
``"native"`` is ``k = 1``, an integer is ``k`` itself. Text is set in points for a figure of a fixed physical size
(a single view's image is :data:`SINGLE_INCHES` on its long side, a grid's panel area :data:`GRID_INCHES`), so the
caption reads the same at every scale: the PNG's DPI (written in its ``pHYs`` chunk) is what changes. SVG and PDF use
the ``"print"`` layout and embed each panel at the image's own resolution.

Metadata: every writer takes ``metadata: dict[str, str] | None``; see :func:`save`.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vitviz import imaging
from vitviz._util.files import folder_problem
from vitviz.imaging import ExportError
from vitviz.render.scales import ColourScale, scale_for

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from vitviz.document.session import Session

__all__ = ["ANIMATION_FORMATS", "FIGURE_FORMATS", "FigureSpec", "Panel", "ScaleOption", "encode", "encode_animation",
           "grid_shape", "heads_figure", "layer_figures", "mp4_problem", "parse_scale", "read_metadata", "render", "save", "save_animation",
           "scale_factor", "view_figure"]

ScaleOption = str | int
"""``"print"``, ``"native"`` or an integer factor (1 .. :data:`MAX_FACTOR`)."""
PRINT_LONG_SIDE = 2048
"""``scale="print"``: the panel area's long side is at least this many pixels."""
ANIMATION_LONG_SIDE = 1024
"""``scale="animation"`` (the default of :func:`save_animation`): frames' panel long side at least this."""
MAX_FACTOR = 16
MAX_FIGURE_PIXELS = 120_000_000
SINGLE_INCHES = 2.6
GRID_INCHES = 6.0
MIN_DPI = 150.0
TITLE_PT, TEXT_PT, TICK_PT = 9.0, 8.0, 7.5
FIGURE_FORMATS = (".png", ".svg", ".pdf")
ANIMATION_FORMATS = (".gif", ".apng", ".mp4")
MARKER_COLOUR = (0 / 255, 230 / 255, 1.0)  # the window's query-patch outline
ARTEFACT_COLOUR = (1.0, 150 / 255, 40 / 255)  # the window's artefact-token outline
MAX_BAR_INCHES = 3.2  # a shared colour bar no longer than this (a tall grid keeps a readable bar)
VEIL_ALPHA = 170 / 255  # the window's "dim" mask
SVG_NS = "urn:vitviz:metadata"
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]{0,78}$")


# ----------------------------------------------------------------------------------------------- the specification
@dataclass(frozen=True)
class Panel:
    """One picture of a figure.

    Attributes:
        photo: ``uint8 [H, W, 3]`` the image.
        values: ``[H, W]`` the map on the image's pixels (raw values, NaN where it does not reach); None: photo only.
        scale: the colour scale of ``values`` (its colormap, range, log).
        opacity: of the map over the photo (0 .. 1).
        label: written above the panel (e.g. ``"head 3"``).
        marker: ``(x0, y0, w, h)`` in image pixels: a rectangle outlined (the selected query patch).
        mask: bool ``[gh, gw]`` over ``mask_rect`` (the model's crop ``(x0, y0, w, h)`` in image pixels): the
            top-mass mask, drawn as its outline (``mask_style="contour"``) or by darkening the rest (``"dim"``).
        badge: text in a box in the panel's top-left corner (the layer of an animation frame).
        outlined: ``(x0, y0, w, h)`` rectangles in image pixels outlined dashed (the artefact tokens, as the window
            outlines them).
        colorbar_label: the quantity and unit of this panel's own colour bar (a figure without a shared scale
            whose panels show different quantities, e.g. a comparison of views); None: the figure's.
        own_colorbar: draw this panel's own colour bar (a figure without a shared scale); False, e.g., for all but
            the last panel of a column that shares one scale (the room stays, so rows keep one height).
    """

    photo: np.ndarray
    values: np.ndarray | None = None
    scale: ColourScale | None = None
    opacity: float = 0.6
    label: str | None = None
    marker: tuple[float, float, float, float] | None = None
    mask: np.ndarray | None = None
    mask_rect: tuple[float, float, float, float] | None = None
    mask_style: str = "contour"
    badge: str | None = None
    outlined: tuple[tuple[float, float, float, float], ...] = ()
    colorbar_label: str | None = None
    own_colorbar: bool = True

    def __post_init__(self) -> None:
        p = np.asarray(self.photo)
        if p.ndim != 3 or p.shape[2] < 3 or p.shape[0] < 1 or p.shape[1] < 1:
            raise ValueError(f"a panel's photo must be [H, W, 3], got shape {p.shape}")
        if self.values is not None:
            if np.shape(self.values) != p.shape[:2]:
                raise ValueError(f"a panel's map is {np.shape(self.values)} but its photo is {p.shape[:2]}")
            if self.scale is None:
                raise ValueError("a panel with a map needs its colour scale")
        if self.mask is not None and self.mask_rect is None:
            raise ValueError("a panel's mask needs mask_rect (the area its grid covers)")
        if self.mask_style not in ("contour", "dim"):
            raise ValueError(f"mask_style must be 'contour' or 'dim', got {self.mask_style!r}")

    @property
    def size(self) -> tuple[int, int]:
        """``(H, W)`` of the photo."""
        return tuple(np.shape(self.photo)[:2])  # type: ignore[return-value]


@dataclass(frozen=True)
class FigureSpec:
    """A figure: panels in a ``nrows x ncols`` grid (row-major), text and colour bar(s).

    Attributes:
        panels: the pictures, row-major; at most ``nrows * ncols`` (the figures vitviz builds fill every cell).
        ncols: columns of the grid (rows follow).
        title: above everything (wrapped to the figure's width).
        caption: below everything (wrapped), e.g. model, image and colour scale.
        row_labels, col_labels: left of each row / above each column.
        colorbar: draw the colour bar(s).
        colorbar_label: the quantity and unit (``"relevance (a.u.)"``).
        scale: the colour scale every panel shares: one bar at the right. None: each panel's own scale, a small bar
            under each panel.
    """

    panels: tuple[Panel, ...]
    ncols: int = 1
    title: str | None = None
    caption: str | None = None
    row_labels: tuple[str, ...] | None = None
    col_labels: tuple[str, ...] | None = None
    colorbar: bool = True
    colorbar_label: str = ""
    scale: ColourScale | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "panels", tuple(self.panels))
        if not self.panels:
            raise ValueError("a figure needs at least one panel")
        if not isinstance(self.ncols, int) or self.ncols < 1:
            raise ValueError(f"ncols must be a positive integer, got {self.ncols!r}")
        object.__setattr__(self, "ncols", min(self.ncols, len(self.panels)))
        if self.row_labels is not None and len(self.row_labels) != self.nrows:
            raise ValueError(f"{len(self.row_labels)} row labels for {self.nrows} rows")
        if self.col_labels is not None and len(self.col_labels) != self.ncols:
            raise ValueError(f"{len(self.col_labels)} column labels for {self.ncols} columns")

    @property
    def nrows(self) -> int:
        return -(-len(self.panels) // self.ncols)

    @property
    def cell(self) -> tuple[int, int]:
        """``(h, w)`` of a grid cell in image pixels: the largest photo's."""
        return (max(p.size[0] for p in self.panels), max(p.size[1] for p in self.panels))

    def texts(self) -> dict[str, str]:
        """The figure's words for metadata: Title and Description (the caption)."""
        out = {}
        if self.title:
            out["Title"] = self.title
        if self.caption:
            out["Description"] = self.caption
        return out


def grid_shape(n: int, cell: tuple[int, int] = (1, 1), aspect: float = 1.8) -> tuple[int, int]:
    """``(rows, cols)`` with ``rows * cols == n`` exactly (no empty cell) whose grid of ``cell = (h, w)`` tiles is
    closest to ``aspect`` (width / height, in log ratio; ties: fewer rows). A prime ``n`` gets one row."""
    if n < 1:
        raise ValueError(f"a grid needs at least one tile, got {n}")
    h, w = cell
    best = None
    for rows in range(1, n + 1):
        if n % rows:
            continue
        cols = n // rows
        err = abs(math.log((cols * w) / (rows * h) / aspect))
        if best is None or err < best[0] - 1e-9:
            best = (err, rows, cols)
    return best[1], best[2]


# ----------------------------------------------------------------------------------------------- scale option
def parse_scale(text: ScaleOption) -> ScaleOption:
    """``"print"``, ``"native"``, ``"animation"`` or an integer factor from what a user typed (``"2"``, ``"2x"``,
    ``"x4"``, ``4``); ValueError naming the valid choices otherwise."""
    if isinstance(text, bool):
        raise ValueError(f"scale must be 'print', 'native' or a factor 1..{MAX_FACTOR}, got {text!r}")
    if isinstance(text, (int, np.integer)):
        k = int(text)
    else:
        t = str(text).strip().lower()
        if t in ("print", "native", "animation"):
            return t
        m = re.fullmatch(r"x?\s*(\d+)\s*x?", t)
        if not m:
            raise ValueError(f"scale must be 'print', 'native' or a factor 1..{MAX_FACTOR} (e.g. 2x), got {text!r}")
        k = int(m.group(1))
    if not 1 <= k <= MAX_FACTOR:
        raise ValueError(f"a scale factor must be 1..{MAX_FACTOR}, got {k}")
    return k


def scale_factor(spec: FigureSpec, scale: ScaleOption = "print") -> int:
    """The integer ``k`` the panels are drawn at (image pixels -> figure pixels) for ``scale``."""
    s = parse_scale(scale)
    if isinstance(s, int):
        return s
    if s == "native":
        return 1
    target = PRINT_LONG_SIDE if s == "print" else ANIMATION_LONG_SIDE
    h, w = spec.cell
    long = max(spec.ncols * w, spec.nrows * h)
    return max(1, math.ceil(target / long))


# ----------------------------------------------------------------------------------------------- text
def _mpl():
    import matplotlib

    return matplotlib


def _text_width_pt(s: str, size: float) -> float:
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    w, _, _ = text_to_path.get_text_width_height_descent(s, FontProperties(size=size), ismath=False)
    return float(w) * 1.02  # hinting at small pixel sizes draws a little wider


def wrap_text(text: str, size: float, width_pt: float) -> list[str]:
    """Lines of ``text`` no wider than ``width_pt`` at ``size`` pt (a single word wider than that stays whole),
    filled word by word; a line is broken after a ``" · "`` separator (which stays at its end, even a little over
    the width) rather than inside a part when it is then still at least 60% full. ``" ".join(lines) == text`` for a
    single-spaced text."""
    out: list[str] = []
    for para in text.splitlines() or [""]:
        line: list[str] = []
        for word in para.split(" "):
            line.append(word)
            while len(line) > 1 and _text_width_pt(" ".join(line), size) > width_pt:
                cut = len(line) - 1  # before the word that overflows
                for k in range(cut, 0, -1):
                    if line[k - 1] == "·" and _text_width_pt(" ".join(line[:k]), size) >= 0.6 * width_pt:
                        cut = k
                        break
                if line[cut] == "·":  # never start a line with the separator: it ends this one (a little over)
                    cut += 1
                out.append(" ".join(line[:cut]))
                line = line[cut:]
                if not line:
                    break
        if line or not out:
            out.append(" ".join(line))
    return out


# ----------------------------------------------------------------------------------------------- layout
@dataclass
class _Layout:
    k: int  # panel pixels per image pixel
    dpi: float
    width: int
    height: int
    cells: list[tuple[int, int, int, int]]  # (x, y_top, w, h) px of each panel's image
    title_lines: list[str]
    caption_lines: list[str]
    title_top: int
    caption_top: int
    label_h: list[int]
    row_label_w: int
    bar: tuple[int, int, int, int] | None  # shared colour bar (x, y_top, w, h)
    small_bars: list[tuple[int, int, int, int]]  # under each panel
    px_per_pt: float


def _layout(spec: FigureSpec, k: int, reserve: tuple[int, int] = (0, 0)) -> _Layout:
    """Where everything goes at factor ``k``; ``reserve``: at least that many title and caption lines (frames of an
    animation keep their panels in place)."""
    h, w = spec.cell
    nr, nc = spec.nrows, spec.ncols
    long_px = k * max(nc * w, nr * h)
    design = SINGLE_INCHES if len(spec.panels) == 1 else GRID_INCHES
    design = min(design, long_px / MIN_DPI)
    dpi = long_px / design
    u = dpi / 72.0

    def px(pt: float) -> int:
        return int(round(pt * u))

    gap = px(4) if len(spec.panels) > 1 else 0
    bare = not (spec.title or spec.caption or spec.row_labels or spec.col_labels or spec.colorbar
                or any(p.label for p in spec.panels))
    margin = 0 if bare else px(6)  # a bare picture is exactly its panels
    # a label strip above a row when it has panel labels (or, first row only, column labels)
    label_px = px(TEXT_PT * 1.5)
    label_h = [label_px if (r == 0 and spec.col_labels is not None)
               or any(p.label for p in spec.panels[r * nc:(r + 1) * nc]) else 0 for r in range(nr)]
    row_w = 0
    if spec.row_labels:
        row_w = px(max(_text_width_pt(t, TEXT_PT) for t in spec.row_labels) + 5)
    scaled = [p for p in spec.panels if p.scale is not None]
    shared_bar = spec.colorbar and spec.scale is not None and scaled
    small = spec.colorbar and spec.scale is None and scaled
    bar_w = 0
    if shared_bar:
        tick_w = max(_text_width_pt(t, TICK_PT) for _, t in spec.scale.ticks(5))
        bar_w = px(10 + 9 + 3 + 2 + tick_w + 5 + TEXT_PT * 1.3)
    small_h = px(4 + 6 + 3 + TICK_PT * 1.3 + TEXT_PT * 1.4) if small else 0
    cw, ch = k * w, k * h
    grid_w = row_w + nc * cw + (nc - 1) * gap
    width = 2 * margin + grid_w + bar_w
    avail_pt = (width - 2 * margin) / u
    title_lines = wrap_text(spec.title, TITLE_PT, avail_pt) if spec.title else []
    caption_lines = wrap_text(spec.caption, TEXT_PT, avail_pt) if spec.caption else []
    n_title, n_cap = max(len(title_lines), reserve[0]), max(len(caption_lines), reserve[1])
    title_h = px(TITLE_PT * 1.3) * n_title + (px(5) if n_title else 0)
    cap_h = px(TEXT_PT * 1.3) * n_cap + (px(5) if n_cap else 0)
    row_top = [0] * nr
    for r in range(1, nr):
        row_top[r] = row_top[r - 1] + label_h[r - 1] + ch + small_h + gap
    grid_h = row_top[-1] + label_h[-1] + ch + small_h
    height = 2 * margin + title_h + grid_h + cap_h
    if width * height > MAX_FIGURE_PIXELS:
        raise ValueError(f"the figure would be {width}x{height} pixels (over {MAX_FIGURE_PIXELS // 10**6} megapixels); "
                         f"choose a smaller scale")
    top = margin + title_h
    cells, smalls = [], []
    for i in range(len(spec.panels)):
        r, c = divmod(i, nc)
        x = margin + row_w + c * (cw + gap)
        y = top + row_top[r] + label_h[r]
        ph, pw = spec.panels[i].size
        fw, fh = cw, ch
        if (ph, pw) != (h, w):  # smaller photo: fitted into the cell, aspect kept, centred
            f = min(cw / pw, ch / ph)
            fw, fh = max(1, int(round(pw * f))), max(1, int(round(ph * f)))
        cells.append((x + (cw - fw) // 2, y + (ch - fh) // 2, fw, fh))
        if small:
            smalls.append((x + cw // 8, y + ch + px(4), cw - cw // 4, px(6)))
    bar = None
    if shared_bar:
        bar_h = min(grid_h - label_h[0], int(round(MAX_BAR_INCHES * dpi)))
        bar = (margin + grid_w + px(10), top + label_h[0], px(9), bar_h)
    return _Layout(k=k, dpi=dpi, width=width, height=height, cells=cells, title_lines=title_lines,
                   caption_lines=caption_lines, title_top=margin, caption_top=top + grid_h + px(5),
                   label_h=label_h, row_label_w=row_w, bar=bar, small_bars=smalls, px_per_pt=u)


# ----------------------------------------------------------------------------------------------- drawing
def composite(panel: Panel, k: int = 1) -> np.ndarray:
    """The panel's picture at ``k`` times its image's pixels: ``uint8 [k H, k W, 3]`` (photo upsampled with Lanczos,
    map cells kept sharp, coloured in the panel's scale; the "dim" mask darkens what lies outside it)."""
    from PIL import Image

    photo = np.ascontiguousarray(np.asarray(panel.photo)[..., :3], dtype=np.uint8)
    h, w = photo.shape[:2]
    if k > 1:
        photo = np.asarray(Image.fromarray(photo, "RGB").resize((w * k, h * k), Image.Resampling.LANCZOS))
    out = photo
    if panel.values is not None and panel.scale is not None:
        t = panel.scale.normalise(panel.values).astype(np.float32)
        t = _repeat(t, k)
        out = imaging.overlay(photo, t, cmap=panel.scale.cmap, opacity=panel.opacity, vmin=0.0, vmax=1.0)
    if panel.mask is not None and panel.mask_style == "dim":
        outside = _repeat(_mask_outside(panel, (h, w)), k)
        out = out.copy()
        out[outside] = np.round(out[outside].astype(np.float32) * (1 - VEIL_ALPHA)).astype(np.uint8)
    return out


def _repeat(a: np.ndarray, k: int) -> np.ndarray:
    return a if k == 1 else np.repeat(np.repeat(a, k, axis=0), k, axis=1)


def _mask_outside(panel: Panel, size: tuple[int, int]) -> np.ndarray:
    """bool ``[H, W]``: image pixels inside the mask's area whose patch is not in the mask."""
    mask = np.asarray(panel.mask, dtype=bool)
    gh, gw = mask.shape
    x0, y0, mw, mh = panel.mask_rect
    h, w = size
    rows = np.floor((np.arange(h) + 0.5 - y0) / (mh / gh)).astype(int)
    cols = np.floor((np.arange(w) + 0.5 - x0) / (mw / gw)).astype(int)
    vr, vc = (rows >= 0) & (rows < gh), (cols >= 0) & (cols < gw)
    inside = mask[np.clip(rows, 0, gh - 1)][:, np.clip(cols, 0, gw - 1)]
    return vr[:, None] & vc[None, :] & ~inside


def _mask_segments(panel: Panel) -> list[list[tuple[float, float]]]:
    """The mask's boundary along patch edges, as line segments in image pixels."""
    mask = np.asarray(panel.mask, dtype=bool)
    gh, gw = mask.shape
    x0, y0, mw, mh = panel.mask_rect
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

    lut = imaging.get_colormap(scale.cmap)[:, :3].astype(np.float64) / 255.0
    cmap = ListedColormap(lut, name=scale.cmap)
    return cmap.with_extremes(under=lut[0], over=lut[-1])


def _spaced(ticks: list[tuple[float, str]], scale: ColourScale, width_pt: float,
            size: float) -> list[tuple[float, str]]:
    """The most of ``ticks`` whose labels, centred on a bar ``width_pt`` long, keep a gap of a quarter of their size
    between them: every tick, else every k-th from any start (or the first and the last), the smallest k first."""
    from itertools import pairwise

    x = scale.normalise(np.asarray([v for v, _ in ticks], dtype=np.float64)) * width_pt
    w = [_text_width_pt(t, size) for _, t in ticks]
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
          reserve: tuple[int, int] = (0, 0)) -> Figure:
    """The matplotlib :class:`~matplotlib.figure.Figure` of ``spec`` (no pyplot, no global state).

    Args:
        k: the layout's factor (default: ``"print"``); ``image_k``: the factor the panels' pixels are drawn at
            (default ``k``; 1 for the vector formats: the image's own resolution, scaled by the format).
        vector: drawn for SVG / PDF (the images are embedded as they are, never resampled).
        reserve: at least this many (title, caption) lines of space.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    k = scale_factor(spec, "print") if k is None else k
    image_k = k if image_k is None else image_k
    L = _layout(spec, k, reserve)
    W, H = L.width, L.height
    fig = Figure(figsize=(W / L.dpi, H / L.dpi), dpi=L.dpi, facecolor="white")
    FigureCanvasAgg(fig)
    fig._vitviz_layout = L  # for tests and callers: where everything is, in pixels

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
        for ox, oy, ow, oh in panel.outlined:
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


def figure_texts(fig: Figure) -> list[str]:
    """Every text drawn on ``fig`` (title and caption lines, labels, badges, colour-bar ticks and labels)."""
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text() and t.get_visible()]


# ----------------------------------------------------------------------------------------------- raster / vector
@dataclass(frozen=True)
class Rendered:
    """A figure drawn to pixels: ``pixels`` ``uint8 [H, W, 3]`` at ``dpi`` (``k`` image pixels -> panel pixels)."""

    pixels: np.ndarray
    dpi: float
    k: int


def render(spec: FigureSpec, scale: ScaleOption = "print", *, reserve: tuple[int, int] = (0, 0)) -> Rendered:
    """Draw ``spec`` at ``scale`` (see :func:`scale_factor`) to an RGB array."""
    k = scale_factor(spec, scale)
    with _rc():
        fig = build(spec, k=k, reserve=reserve)
        fig.canvas.draw()
        rgba = np.asarray(fig.canvas.buffer_rgba())
    return Rendered(pixels=np.ascontiguousarray(rgba[..., :3]), dpi=fig._vitviz_layout.dpi, k=k)


def _rc():
    mpl = _mpl()
    return mpl.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42, "font.family": "DejaVu Sans",
                           "svg.hashsalt": "vitviz", "image.composite_image": False,
                           "path.simplify": False})


def _check_metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(f"metadata key {key!r} must start with a letter and hold at most 79 letters, digits "
                             f"or . _ : - (PNG, SVG and PDF all accept such keys)")
        if not isinstance(value, str):
            raise ValueError(f"metadata value of {key!r} must be a string, got {type(value).__name__}")
        out[key] = value
    return out


def _software() -> str:
    import vitviz

    return f"vitviz {vitviz.__version__}"


def _encode(spec: FigureSpec, fmt: str, scale: ScaleOption, metadata: dict[str, str]) -> tuple[bytes, str]:
    """The file's bytes and a note on its size (``"2255×1697 px, 600 dpi"`` / ``"vector, 3.4×2.5 in"``)."""
    info = {**spec.texts(), **metadata}
    if fmt == ".png":
        from PIL import Image
        from PIL.PngImagePlugin import PngInfo

        r = render(spec, scale)
        png = PngInfo()
        png.add_text("Software", _software())
        for key, value in info.items():
            png.add_text(key, value, zip=len(value) > 1024)
        buf = io.BytesIO()
        Image.fromarray(r.pixels, "RGB").save(buf, format="PNG", pnginfo=png, dpi=(r.dpi, r.dpi), optimize=False)
        return buf.getvalue(), f"{r.pixels.shape[1]}×{r.pixels.shape[0]} px, {r.dpi:.0f} dpi"
    k = scale_factor(spec, "print")
    buf = io.BytesIO()
    with _rc():
        fig = build(spec, k=k, image_k=1, vector=True)
        L = fig._vitviz_layout
        size = f"vector, {L.width / L.dpi:.2f}×{L.height / L.dpi:.2f} in"
        if fmt == ".svg":
            meta = {"Creator": _software(), "Date": None}
            if spec.title:
                meta["Title"] = spec.title
            if spec.caption:
                meta["Description"] = spec.caption
            fig.savefig(buf, format="svg", metadata=meta)
            return _svg_with_metadata(buf.getvalue(), info), size
        meta = {"Creator": _software(), "Producer": f"{_software()} (matplotlib)", "CreationDate": None}
        if spec.title:
            meta["Title"] = spec.title
        if spec.caption:
            meta["Subject"] = spec.caption
        for key, value in info.items():
            if key not in ("Title", "Description"):
                meta[key] = value
        with warnings.catch_warnings():  # custom keys are valid PDF; matplotlib warns about any it does not know
            warnings.filterwarnings("ignore", message="Unknown infodict keyword")
            fig.savefig(buf, format="pdf", metadata=meta)
        return buf.getvalue(), size


def _svg_with_metadata(svg: bytes, info: dict[str, str]) -> bytes:
    """The SVG with a ``<metadata id="vitviz">`` element holding every entry (``<vitviz:entry key=..>value``)."""
    from xml.sax.saxutils import escape, quoteattr

    entries = "".join(f"<vitviz:entry key={quoteattr(k)}>{escape(v)}</vitviz:entry>" for k, v in info.items())
    block = f'<metadata id="vitviz"><vitviz:data xmlns:vitviz="{SVG_NS}">{entries}</vitviz:data></metadata>'
    text = svg.decode("utf-8")
    m = re.search(r"<svg\b[^>]*>", text)
    if m is None:  # pragma: no cover - matplotlib always writes one
        raise ValueError("matplotlib wrote an SVG without an <svg> element")
    return (text[:m.end()] + "\n " + block + text[m.end():]).encode("utf-8")


def _target(path: str | os.PathLike, formats: Sequence[str], what: str) -> tuple[Path, str]:
    p = Path(path)
    fmt = p.suffix.lower()
    if fmt not in formats:
        raise ExportError(p, f"unknown {what} format {p.suffix or '(no extension)'!r}; use "
                             + ", ".join(formats))
    folder = p.parent if str(p.parent) else Path(".")
    problem = folder_problem(folder)
    if problem:
        raise ExportError(p, problem)
    if p.is_dir():
        raise ExportError(p, "a folder of that name exists")
    return p, fmt


def save(spec: FigureSpec, path: str | os.PathLike, *, scale: ScaleOption = "print",
         metadata: dict[str, str] | None = None, overwrite: bool = False) -> Path:
    """Write ``spec`` as PNG, SVG or PDF (by ``path``'s extension), atomically.

    PNG: drawn at ``scale`` with its DPI. SVG / PDF: the ``"print"`` layout, text as text, vector colour bar, each
    panel embedded at its image's own resolution (``scale`` is not used).

    Args:
        metadata: extra entries, ``{key: value}`` strings (keys: a letter, then up to 78 letters, digits or
            ``. _ : -``). Written as PNG text chunks (compressed above 1 kB; non-Latin-1 text as UTF-8 iTXt), in the
            SVG's ``<metadata id="vitviz">`` (``<vitviz:entry key="...">``) and as custom keys of the PDF's document
            information (beside Title, Subject = the caption, Creator). The title and caption are always written
            (``Title``, ``Description``). :func:`read_metadata` reads them back from all three. For example the
            session's state: ``save(spec, "fig.pdf", metadata={"vitviz.document.session": json.dumps(state)})``.
        overwrite: replace an existing file (else :class:`FileExistsError`; nothing is written).

    Raises:
        ExportError: unknown extension, missing or read-only folder, disk full ... (names the file and the cause);
            the existing file, if any, is left as it was.
        FileExistsError: the file exists and ``overwrite`` is False.
        ValueError: a bad metadata key or value, or a scale too large.
    """
    target, fmt = _target(path, FIGURE_FORMATS, "figure")
    meta = _check_metadata(metadata)
    if not overwrite and target.exists():
        raise FileExistsError(f"{target} already exists")
    data, _ = _encode(spec, fmt, scale, meta)
    return imaging.write_atomic(target, lambda fh: fh.write(data), overwrite=overwrite, suffix=fmt + ".tmp")


def encode(spec: FigureSpec, fmt: str, *, scale: ScaleOption = "print",
           metadata: dict[str, str] | None = None) -> tuple[bytes, str]:
    """The bytes :func:`save` would write for format ``fmt`` (``".png"``, ``".svg"``, ``".pdf"``) and a note on the
    size (pixels and DPI, or inches)."""
    if fmt not in FIGURE_FORMATS:
        raise ValueError(f"unknown figure format {fmt!r}; use {', '.join(FIGURE_FORMATS)}")
    return _encode(spec, fmt, scale, _check_metadata(metadata))


# ----------------------------------------------------------------------------------------------- metadata back
def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The text entries of a figure vitviz wrote: PNG / APNG text chunks, the SVG's vitviz metadata, the PDF's
    document information (its custom keys and Title, Subject, Creator), a GIF's or MP4's comment (JSON).

    Raises:
        ValueError: naming the file, when it cannot be read or is not one of these formats.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ValueError(f"{p}: cannot read ({e.strerror or e})") from None
    if data.startswith(b"\x89PNG"):
        from PIL import Image

        with Image.open(io.BytesIO(data)) as im:
            im.load()
            return {str(k): str(v) for k, v in getattr(im, "text", {}).items()}
    if data.startswith(b"%PDF"):
        return _pdf_info(data, p)
    if data.startswith(b"GIF8"):
        from PIL import Image

        with Image.open(io.BytesIO(data)) as im:
            comment = im.info.get("comment", b"")
        return _json_comment(comment, p)
    if data[4:8] == b"ftyp":
        return _mp4_comment(data, p)
    head = data[:4096].lstrip()
    if head.startswith((b"<?xml", b"<svg")):
        import xml.etree.ElementTree as ET

        try:
            root = ET.fromstring(data)
        except ET.ParseError as e:
            raise ValueError(f"{p}: not a valid SVG ({e})") from None
        return {e.get("key", ""): e.text or "" for e in root.iter(f"{{{SVG_NS}}}entry")}
    raise ValueError(f"{p}: not a PNG, SVG, PDF, GIF or MP4 file")


def _json_comment(comment: bytes | str, p: Path) -> dict[str, str]:
    if not comment:
        return {}
    text = comment.decode("utf-8", "replace") if isinstance(comment, bytes) else comment
    try:
        obj = json.loads(text)
    except ValueError:
        return {"Comment": text}
    return {str(k): str(v) for k, v in obj.items()} if isinstance(obj, dict) else {"Comment": text}


def _mp4_comment(data: bytes, p: Path) -> dict[str, str]:
    # ffmpeg writes the comment as an iTunes-style "\xa9cmt" atom holding a "data" atom: size, type, locale, text
    i = data.find(b"\xa9cmt")
    if i < 0:
        return {}
    j = data.find(b"data", i)
    size = int.from_bytes(data[j - 4:j], "big")
    return _json_comment(data[j + 12:j - 4 + size], p)


_PDF_ESC = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"f": b"\f", b"(": b"(", b")": b")", b"\\": b"\\"}


def _pdf_string(raw: bytes) -> str:
    """A PDF literal ``(...)`` (escapes, octal codes) or hex ``<...>`` string; UTF-16BE with a BOM, else Latin-1."""
    if raw.startswith(b"<"):
        b = bytes.fromhex(raw[1:-1].decode("ascii"))
    else:
        out, i, s = bytearray(), 0, raw[1:-1]
        while i < len(s):
            ch = s[i:i + 1]
            if ch != b"\\":
                out += ch
                i += 1
                continue
            nxt = s[i + 1:i + 2]
            if nxt in _PDF_ESC:
                out += _PDF_ESC[nxt]
                i += 2
            elif nxt.isdigit():
                m = re.match(rb"[0-7]{1,3}", s[i + 1:])
                out.append(int(m.group(), 8) & 0xFF)
                i += 1 + len(m.group())
            elif nxt in (b"\n", b"\r"):
                i += 2
            else:
                out += nxt
                i += 2
        b = bytes(out)
    if b.startswith(b"\xfe\xff"):
        return b[2:].decode("utf-16-be")
    return b.decode("latin-1")


def _pdf_info(data: bytes, p: Path) -> dict[str, str]:
    m = list(re.finditer(rb"/Info\s+(\d+)\s+0\s+R", data))
    if not m:
        return {}
    num = m[-1].group(1)
    o = re.search(rb"(?<![0-9])" + num + rb"\s+0\s+obj\s*<<(.*?)>>\s*endobj", data, re.DOTALL)
    if o is None:
        raise ValueError(f"{p}: its document information cannot be found")
    body, out = o.group(1), {}
    for km in re.finditer(rb"/([^\s/<>()\[\]{}%]+)\s*(\((?:\\.|[^\\)])*\)|<[0-9A-Fa-f\s]*>)", body, re.DOTALL):
        key = re.sub(rb"#([0-9A-Fa-f]{2})", lambda h: bytes([int(h.group(1), 16)]), km.group(1)).decode("latin-1")
        out[key] = _pdf_string(km.group(2))
    return out


def pdf_pages(data: bytes) -> list[tuple[float, float, float, float]]:
    """The MediaBox ``(x0, y0, x1, y1)`` in points of every page object of a PDF (for checks)."""
    boxes = []
    for m in re.finditer(rb"/Type\s*/Page\b(?!s)(.*?)(?:endobj)", data, re.DOTALL):
        b = re.search(rb"/MediaBox\s*\[\s*([-\d.\s]+)\]", m.group(0))
        if b:
            boxes.append(tuple(float(x) for x in b.group(1).split()))
    return boxes


# ----------------------------------------------------------------------------------------------- animation
def mp4_problem() -> str | None:
    """Why MP4 cannot be written here (None when it can): it needs an ffmpeg encoder, from ``imageio-ffmpeg``."""
    try:
        import imageio_ffmpeg
    except ImportError:
        return "MP4 needs an ffmpeg encoder: pip install imageio-ffmpeg (GIF and APNG work without it)"
    try:
        imageio_ffmpeg.get_ffmpeg_exe()
    except Exception as e:  # noqa: BLE001 - RuntimeError when its binary is missing
        return f"MP4 needs an ffmpeg encoder, and imageio-ffmpeg has none here ({e})"
    return None


def render_frames(specs: Sequence[FigureSpec], scale: ScaleOption = "animation",
                  progress: Callable[[int, int], bool] | None = None) -> list[np.ndarray]:
    """Every spec drawn at the same factor (that of the first), padded with white to one size: ``uint8 [H, W, 3]``
    each. ``progress(done, total)`` returning False cancels (:class:`InterruptedError`)."""
    if not specs:
        raise ValueError("an animation needs at least one frame")
    k = scale_factor(specs[0], scale)
    with _rc():
        layouts = [_layout(s, k) for s in specs]
    reserve = (max(len(L.title_lines) for L in layouts), max(len(L.caption_lines) for L in layouts))
    frames = []
    for i, s in enumerate(specs):
        frames.append(render(s, k, reserve=reserve).pixels)
        if progress is not None and progress(i + 1, len(specs)) is False:
            raise InterruptedError("cancelled")
    H = max(f.shape[0] for f in frames)
    W = max(f.shape[1] for f in frames)
    out = []
    for f in frames:
        if f.shape[:2] != (H, W):
            g = np.full((H, W, 3), 255, np.uint8)
            g[:f.shape[0], :f.shape[1]] = f
            f = g
        out.append(f)
    return out


def save_animation(specs: Sequence[FigureSpec], path: str | os.PathLike, *, scale: ScaleOption = "animation",
                   fps: float = 2.0, metadata: dict[str, str] | None = None, overwrite: bool = False,
                   progress: Callable[[int, int], bool] | None = None) -> Path:
    """Write the frames ``specs`` (e.g. :func:`layer_figures`) as an animated GIF, APNG (``.apng``) or MP4, by
    ``path``'s extension, atomically; loops forever (GIF, APNG).

    Args:
        scale: as :func:`scale_factor`; default ``"animation"`` (long side of the panels at least
            :data:`ANIMATION_LONG_SIDE` px).
        fps: frames per second.
        metadata: as :func:`save`: PNG text chunks in an APNG; one JSON comment in a GIF or MP4 (read back by
            :func:`read_metadata`).
        progress: ``progress(done, total)`` after each frame; returning False cancels.

    Raises:
        ExportError: unknown extension, MP4 without an encoder (:func:`mp4_problem`), folder missing or not writable
            (names the file and the cause).
        FileExistsError, ValueError: as :func:`save`.
    """
    target, fmt = _target(path, ANIMATION_FORMATS, "animation")
    meta = _check_metadata(metadata)
    if not fps > 0:
        raise ValueError(f"fps must be positive, got {fps}")
    if fmt == ".mp4":
        problem = mp4_problem()
        if problem:
            raise ExportError(target, problem)
    if not overwrite and target.exists():
        raise FileExistsError(f"{target} already exists")
    data = _animation_bytes(specs, fmt, scale, fps, meta, progress)
    return imaging.write_atomic(target, lambda fh: fh.write(data), overwrite=overwrite, suffix=fmt + ".tmp")


def encode_animation(specs: Sequence[FigureSpec], fmt: str, *, scale: ScaleOption = "animation", fps: float = 2.0,
                     metadata: dict[str, str] | None = None,
                     progress: Callable[[int, int], bool] | None = None) -> bytes:
    """The bytes :func:`save_animation` would write for ``fmt`` (``".gif"``, ``".apng"``, ``".mp4"``).

    Raises:
        ValueError: unknown format, MP4 without an encoder (:func:`mp4_problem`), bad fps or metadata.
    """
    if fmt not in ANIMATION_FORMATS:
        raise ValueError(f"unknown animation format {fmt!r}; use {', '.join(ANIMATION_FORMATS)}")
    if not fps > 0:
        raise ValueError(f"fps must be positive, got {fps}")
    if fmt == ".mp4" and mp4_problem():
        raise ValueError(mp4_problem())
    return _animation_bytes(specs, fmt, scale, fps, _check_metadata(metadata), progress)


def _animation_bytes(specs: Sequence[FigureSpec], fmt: str, scale: ScaleOption, fps: float, meta: dict[str, str],
                     progress: Callable[[int, int], bool] | None) -> bytes:
    frames = render_frames(specs, scale, progress)
    info = {**specs[0].texts(), **meta}
    duration = int(round(1000.0 / fps))
    if fmt == ".mp4":
        return _mp4_bytes(frames, fps, info)
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    ims = [Image.fromarray(f, "RGB") for f in frames]
    buf = io.BytesIO()
    if fmt == ".gif":
        ims = _gif_frames(ims)
        ims[0].save(buf, format="GIF", save_all=True, append_images=ims[1:], duration=duration, loop=0,
                    comment=json.dumps(info, ensure_ascii=False).encode("utf-8"), optimize=False, disposal=1)
    else:
        png = PngInfo()
        png.add_text("Software", _software())
        for key, value in info.items():
            png.add_text(key, value, zip=len(value) > 1024)
        ims[0].save(buf, format="PNG", save_all=True, append_images=ims[1:], duration=duration, loop=0,
                    pnginfo=png, default_image=False, disposal=0, blend=0)
    return buf.getvalue()


def _gif_frames(ims: list) -> list:
    """The frames in 256 colours of one palette (chosen from all frames) with Floyd-Steinberg dithering: smooth
    colour bars and photos, and no palette flicker between frames."""
    from PIL import Image

    thumbs = [im.resize((max(1, im.width // 4), max(1, im.height // 4)), Image.Resampling.BOX) for im in ims]
    sheet = Image.new("RGB", (max(t.width for t in thumbs), sum(t.height for t in thumbs)), "white")
    y = 0
    for t in thumbs:
        sheet.paste(t, (0, y))
        y += t.height
    palette = sheet.quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    return [im.quantize(palette=palette, dither=Image.Dither.FLOYDSTEINBERG) for im in ims]


def _mp4_bytes(frames: list[np.ndarray], fps: float, info: dict[str, str]) -> bytes:
    import imageio_ffmpeg

    H, W = frames[0].shape[:2]
    H2, W2 = H + H % 2, W + W % 2  # yuv420p needs even sides
    with tempfile.TemporaryDirectory(prefix="vitviz-mp4-") as tmp:
        out = os.path.join(tmp, "a.mp4")
        comment = json.dumps(info, ensure_ascii=False)
        writer = imageio_ffmpeg.write_frames(out, (W2, H2), fps=fps, codec="libx264", pix_fmt_in="rgb24",
                                             pix_fmt_out="yuv420p", macro_block_size=1, quality=8,
                                             ffmpeg_log_level="error",
                                             output_params=["-metadata", f"comment={comment}",
                                                            "-movflags", "+faststart"])
        writer.send(None)
        for f in frames:
            if (H2, W2) != (H, W):
                g = np.full((H2, W2, 3), 255, np.uint8)
                g[:H, :W] = f
                f = g
            writer.send(np.ascontiguousarray(f))
        writer.close()
        return Path(out).read_bytes()


# ----------------------------------------------------------------------------------------------- from a session
def _view_panel(s: Session, scale: ColourScale | None, badge: str | None = None) -> Panel:
    r, o = s.result, s.options
    values = s.image_map()
    mask = s.mask()
    y0, x0, y1, x1 = s.crop_rect_yx()
    gw = r.grid[1]
    return Panel(photo=r.rgb, values=values, scale=scale if values is not None else None, opacity=o.opacity,
                 marker=s.patch_rect(o.query) if s.shows_query() else None, mask=mask,
                 mask_rect=(x0, y0, x1 - x0, y1 - y0) if mask is not None else None, mask_style=o.mask_style,
                 badge=badge, outlined=tuple(s.patch_rect(i * gw + j) for i, j in s.artefact_patches()))


def _caption(s: Session, extra: str = "") -> str:
    r = s.result
    parts = [r.model_name, Path(r.source).name or str(r.source)]
    if extra:
        parts.append(extra)
    return " · ".join(parts)


def view_figure(session: Session, *, badge: str | None = None) -> FigureSpec | None:
    """The session's current view as a figure: the map on the photo in the window's colours, the query-patch box
    and the mask where the window draws them, the title the canvas shows (view, target, layer, heads, mask) and
    the colour bar with the view's quantity, unit and ticks; the caption names the model, the image and the colour
    scale. The options' ``caption`` and ``colorbar`` switch those off. None without a result or map."""
    r, o = session.result, session.options
    if r is None or session.current_map() is None:
        return None
    scale = session.levels()
    words = session.scale_text()
    if session.artefact_patches():  # outlined as in the window
        words = words.replace("artefact tokens excluded", "artefact tokens (dashed) excluded") \
            if "artefact tokens excluded" in words else words + ", artefact tokens dashed"
    caption = _caption(session, f"colour: {words}")
    return FigureSpec(panels=(_view_panel(session, scale, badge),), ncols=1,
                      title=session.title() if o.caption else None, caption=caption if o.caption else None,
                      colorbar=o.colorbar, colorbar_label=session.quantity_text(), scale=scale)


def heads_figure(session: Session, *, all_layers: bool = False) -> FigureSpec | None:
    """Every head of the current attention layer (``all_layers``: every layer x every head, with row and column
    labels) on one colour scale, as the heads panel shows them (robust percentile of all tiles, artefact patches
    left out of the levels when the options say so); a grid with no empty cell, a title naming what is shown, the
    layer, the model and the image, and one colour bar. None without a result."""
    r, o = session.result, session.options
    if r is None:
        return None
    q = session.thumb_query()
    qtext = "[CLS]" if q == 0 and r.num_prefix_tokens > 0 else \
        "patch ({}, {})".format(*divmod(q - r.num_prefix_tokens, r.grid[1]))
    layer = max(0, min(session.attention_layer(), r.num_layers - 1))
    maps = session.all_head_maps() if all_layers else session.head_maps(layer)[None]
    L, H = maps.shape[:2]
    grid = session.artefact_grid() if o.scale_excludes_artefacts else None
    exclude = grid if grid is not None and grid.any() else None
    flat = maps.reshape(L * H, *r.grid)
    ex = None if exclude is None else np.broadcast_to(exclude, flat.shape)
    scale = scale_for(flat, mode="shared", shared=flat, percentile=o.percentile, exclude=ex, cmap=o.cmap)
    scale = replace(scale, mode="shared")
    img = [session.image_map(m) for m in flat]
    what = f"Attention from {qtext}"
    note = ", artefact tokens left out of the scale" if exclude is not None else ""
    scale_words = f"colour: shared across {'every layer and head' if all_layers else 'heads'} " \
                  f"({o.percentile:g}th percentile){note}"
    if all_layers:
        panels = tuple(Panel(photo=r.rgb, values=v, scale=scale, opacity=o.opacity) for v in img)
        title = f"{what} · every layer × every head"
        return FigureSpec(panels=panels, ncols=H, title=title, caption=_caption(session, scale_words),
                          row_labels=tuple(f"layer {i}" for i in range(L)),
                          col_labels=tuple(f"head {h}" for h in range(H)), colorbar=True,
                          colorbar_label="attention weight", scale=scale)
    _, cols = grid_shape(H, r.image_size)
    panels = tuple(Panel(photo=r.rgb, values=v, scale=scale, opacity=o.opacity, label=f"head {h}")
                   for h, v in enumerate(img))
    title = f"{what} · layer {layer} · {H} heads"
    return FigureSpec(panels=panels, ncols=cols, title=title, caption=_caption(session, scale_words), colorbar=True,
                      colorbar_label="attention weight", scale=scale)


def layer_figures(session: Session) -> list[FigureSpec]:
    """One figure per layer of the current view (its layer slider: the layer, or the start layer of a cumulative
    view), every frame on one colour scale shared across the layers (a typed fixed range is kept), the layer drawn
    in a badge on the image and named in the title.

    Raises:
        ValueError: no result, or the view does not depend on the layer (its message says which view).
    """
    import copy

    r, v, o = session.result, session.view, session.options
    if r is None:
        raise ValueError("nothing to animate: no image has been analysed yet")
    if v.slider is None:
        raise ValueError(f"{v.title} does not change with the layer: choose a view with a layer slider")
    lo, hi = session.slider_range()
    s = copy.copy(session)  # shares the result and the map cache; only the options differ
    out = []
    for i in range(lo, hi + 1):
        s.options = replace(o, scale=o.scale if o.scale == "fixed" else "layers", **{v.slider: i})
        badge = v.layer_text(i) if v.slider == "layer" else f"start layer {i}"
        spec = view_figure(s, badge=badge)
        if spec is None:
            raise ValueError(f"{v.title} is not available: {session.unavailable_reason()}")
        out.append(spec)
    return out

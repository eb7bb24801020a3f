"""What a figure is: a grid of :class:`Panel` s with text and colour bar(s) (:class:`FigureSpec`). No matplotlib."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vitviz.render.scales import ColourScale

Rect = tuple[float, float, float, float]
"""``(x0, y0, width, height)`` in image pixels."""
MASK_STYLES: tuple[str, ...] = ("contour", "dim")
"""How a top-mass mask is drawn: its outline, or the rest darkened."""


@dataclass(frozen=True)
class Panel:
    """One picture: what the window's canvas, a panel of the Compare window and a panel of a figure show.

    :func:`vitviz.document.panel.panel_of` assembles it from a session; the screens draw ``grid_values`` stretched
    over ``crop``, a figure draws ``values`` on the photo's pixels, and both the same scale, marker, mask and outlines.

    Attributes:
        photo: ``uint8 [H, W, 3]`` the image.
        values: ``[H, W]`` the map on the image's pixels (raw values, NaN where it does not reach): what a figure
            draws; None: photo only.
        scale: the colour scale of the map (its colormap, range, log).
        opacity: of the map over the photo (0 .. 1).
        label: written above the panel (e.g. ``"head 3"``).
        marker: ``(x0, y0, w, h)`` in image pixels: a rectangle outlined (the selected query patch).
        mask: bool ``[gh, gw]`` over ``crop``: the top-mass mask, drawn as its outline (``mask_style="contour"``) or
            by darkening the rest (``"dim"``).
        badge: text in a box in the panel's top-left corner (the layer of an animation frame).
        outlined: ``(row, col)`` patches of the ``grid`` over ``crop`` outlined dashed (the artefact tokens, as the
            window outlines them).
        neutral: ``(row, col)`` patches of the ``grid`` over ``crop`` left out of the colour scale (the artefact
            tokens the scale excludes): drawn in :data:`~vitviz.render.colormaps.NEUTRAL_RGB` at ``opacity``, never
            in a colour of the scale.
        colorbar_label: the quantity and unit of this panel's own colour bar (a figure without a shared scale
            whose panels show different quantities, e.g. a comparison of views); None: the figure's.
        own_colorbar: draw this panel's own colour bar (a figure without a shared scale); False, e.g., for all but
            the last panel of a column that shares one scale (the room stays, so rows keep one height).
        crop: ``(x0, y0, w, h)`` in image pixels: the model's crop, the area the patch grid covers (the mask's, the
            outlined patches' and ``grid_values``').
        grid: ``(gh, gw)`` of the patch grid over ``crop``.
        grid_values: the map as a screen draws it, stretched over ``crop``: ``[gh, gw]`` or its smooth upsampling
            (raw values); None: no map.
        title: what the panel shows, in words (the canvas's title, a compare panel's tooltip, a view's figure).
        caption: the model, the image and the colour scale in words (a view's figure).
        scale_text: the colour scale's rule in words (the canvas's colour-bar tooltip).
        unavailable: why the panel has no map (None: it has one).
        rgb: float ``[gh, gw, 4]`` RGBA in [0, 1] over ``crop``: a picture in colours of its own (feature PCA),
            drawn in place of a map (no colormap, no colour bar; alpha times ``opacity`` over the photo).
        photo_shown: False: the photo is not drawn (black in its place): ``rgb`` alone, as the DINO figures.
    """

    photo: np.ndarray
    values: np.ndarray | None = None
    scale: ColourScale | None = None
    opacity: float = 0.6
    label: str | None = None
    marker: Rect | None = None
    mask: np.ndarray | None = None
    mask_style: str = "contour"
    badge: str | None = None
    outlined: tuple[tuple[int, int], ...] = ()
    neutral: tuple[tuple[int, int], ...] = ()
    colorbar_label: str | None = None
    own_colorbar: bool = True
    crop: Rect | None = None
    grid: tuple[int, int] | None = None
    grid_values: np.ndarray | None = None
    title: str | None = None
    caption: str | None = None
    scale_text: str = ""
    unavailable: str | None = None
    rgb: np.ndarray | None = None
    photo_shown: bool = True

    def __post_init__(self) -> None:
        p = np.asarray(self.photo)
        if p.ndim != 3 or p.shape[2] < 3 or p.shape[0] < 1 or p.shape[1] < 1:
            raise ValueError(f"a panel's photo must be [H, W, 3], got shape {p.shape}")
        if self.values is not None and np.shape(self.values) != p.shape[:2]:
            raise ValueError(f"a panel's map is {np.shape(self.values)} but its photo is {p.shape[:2]}")
        if (self.values is not None or self.grid_values is not None) and self.scale is None:
            raise ValueError("a panel with a map needs its colour scale")
        if (self.mask is not None or self.grid_values is not None) and self.crop is None:
            raise ValueError("a panel's mask or grid map needs crop (the area its grid covers)")
        if self.rgb is not None and (np.ndim(self.rgb) != 3 or np.shape(self.rgb)[2] != 4 or self.crop is None):
            raise ValueError(f"a panel's rgb must be RGBA [gh, gw, 4] with its crop, got shape {np.shape(self.rgb)}")
        if (self.outlined or self.neutral) and (self.crop is None or self.grid is None):
            raise ValueError("a panel's outlined patches need crop and grid (the patch grid they lie on)")
        if self.mask_style not in MASK_STYLES:
            raise ValueError(f"mask_style must be 'contour' or 'dim', got {self.mask_style!r}")

    @property
    def size(self) -> tuple[int, int]:
        """``(H, W)`` of the photo."""
        return tuple(np.shape(self.photo)[:2])  # type: ignore[return-value]

    def patch_rect(self, row: int, col: int) -> Rect:
        """Patch ``(row, col)`` of ``grid`` as ``(x0, y0, w, h)`` in image pixels."""
        x0, y0, w, h = self.crop
        gh, gw = self.grid
        sx, sy = w / gw, h / gh
        return (x0 + col * sx, y0 + row * sy, sx, sy)


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

"""How large a figure is drawn: the ``scale`` option (``"print"``, ``"native"``, ``"animation"`` or a factor) and the
integer factor ``k`` (image pixels -> figure pixels) it gives for a figure."""

from __future__ import annotations

import math
import re

import numpy as np

from vitviz.render.figures.specification import FigureSpec

ScaleOption = str | int
"""``"print"``, ``"native"`` or an integer factor (1 .. :data:`MAX_FACTOR`)."""
PRINT_LONG_SIDE = 2048
"""``scale="print"``: the panel area's long side is at least this many pixels."""
ANIMATION_LONG_SIDE = 1024
"""``scale="animation"`` (the default of :func:`~vitviz.render.figures.save_animation`): frames' panel long side at
least this."""
MAX_FACTOR = 16


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


def layout_scale(fmt: str, scale: ScaleOption) -> ScaleOption:
    """The scale a figure file of format ``fmt`` (its extension: ``".png"``, ``".svg"``, ``".pdf"``) is laid out at:
    a PNG at ``scale``, an SVG or a PDF at ``"print"`` (their panels are embedded at the images' own resolution)."""
    return scale if fmt.lower() == ".png" else "print"


def scale_factor(spec: FigureSpec, scale: ScaleOption = "print") -> int:
    """The integer ``k`` the panels are drawn at (image pixels -> figure pixels) for ``scale``."""
    return grid_factor(spec.cell, spec.nrows, spec.ncols, scale)


def grid_factor(cell: tuple[int, int], nrows: int, ncols: int, scale: ScaleOption = "print") -> int:
    """:func:`scale_factor` of a grid of ``nrows x ncols`` cells of ``cell = (h, w)`` image pixels, from the sizes
    alone (no panel needed)."""
    s = parse_scale(scale)
    if isinstance(s, int):
        return s
    if s == "native":
        return 1
    target = PRINT_LONG_SIDE if s == "print" else ANIMATION_LONG_SIDE
    h, w = cell
    long = max(ncols * w, nrows * h)
    return max(1, math.ceil(target / long))

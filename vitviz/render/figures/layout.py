"""Where everything of a figure goes: panel cells, title, caption, labels and colour bars, in pixels at a factor ``k``
for a figure of a fixed physical size (text in points reads the same at every scale)."""

from __future__ import annotations

from dataclasses import dataclass

from vitviz.render.figures.sizes import ScaleOption, grid_factor, scale_factor
from vitviz.render.figures.specification import FigureSpec
from vitviz.render.figures.text import TEXT_PT, TICK_PT, TITLE_PT, text_width_pt, wrap_text

MAX_FIGURE_PIXELS = 120_000_000
"""The largest figure drawn (width x height in pixels, all formats: SVG and PDF are laid out at ``"print"``)."""
SINGLE_INCHES = 2.6
GRID_INCHES = 6.0
MIN_DPI = 150.0
MAX_BAR_INCHES = 3.2  # a shared colour bar no longer than this (a tall grid keeps a readable bar)


@dataclass
class Layout:
    """Where everything of a figure goes, in pixels (y from the top)."""

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


def size_problem(cell: tuple[int, int], scale: ScaleOption, *, panels: int = 1, ncols: int = 1) -> str | None:
    """Why a figure of ``panels`` images of ``cell = (h, w)`` pixels in ``ncols`` columns cannot be drawn at
    ``scale``, known from the sizes alone, before an image is decoded or a map computed: its panels alone are over
    :data:`MAX_FIGURE_PIXELS`. None when they fit (the title, caption, labels and colour bar add a little, which
    :func:`lay_out` checks when the figure is drawn)."""
    ncols = max(1, min(ncols, panels))
    nrows = -(-panels // ncols)
    h, w = cell
    k = grid_factor(cell, nrows, ncols, scale)
    width, height = k * ncols * w, k * nrows * h
    if width * height <= MAX_FIGURE_PIXELS:
        return None
    at = "at the image's own pixels" if k == 1 else f"at {k}x the image's pixels"
    return (f"the figure would be at least {width} x {height} = {width * height / 1e6:.1f} Mpx ({at}), over the "
            f"{MAX_FIGURE_PIXELS // 10**6} Mpx limit of a figure")


def lay_out(spec: FigureSpec, k: int | None = None, reserve: tuple[int, int] = (0, 0)) -> Layout:
    """Where everything goes at factor ``k``; ``reserve``: at least that many title and caption lines (frames of an
    animation keep their panels in place). ``k`` None: that of ``scale="print"`` (:func:`scale_factor`)."""
    k = scale_factor(spec, "print") if k is None else k
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
        row_w = px(max(text_width_pt(t, TEXT_PT) for t in spec.row_labels) + 5)
    scaled = [p for p in spec.panels if p.scale is not None]
    shared_bar = spec.colorbar and spec.scale is not None and scaled
    small = spec.colorbar and spec.scale is None and scaled
    bar_w = 0
    if shared_bar:
        tick_w = max(text_width_pt(t, TICK_PT) for _, t in spec.scale.ticks(5))
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
    return Layout(k=k, dpi=dpi, width=width, height=height, cells=cells, title_lines=title_lines,
                   caption_lines=caption_lines, title_top=margin, caption_top=top + grid_h + px(5),
                   label_h=label_h, row_label_w=row_w, bar=bar, small_bars=smalls, px_per_pt=u)

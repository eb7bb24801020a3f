"""Figures for papers: a grid of panels as PNG, SVG, PDF, GIF, APNG and MP4.

No Qt. Drawn with matplotlib (imported when a figure is made, never at start-up): the field's standard figure library,
whose SVG and PDF keep text as text (``svg.fonttype = "none"``, TrueType fonts in PDFs) and whose colour bars are
vector paths, so one layout serves the raster and the vector formats.

A figure is a :class:`FigureSpec`: a grid of :class:`Panel` s (a photo, a map on it with its colour scale, optional
label, query-patch marker, top-mass mask, outlined patches and a badge such as the layer number), a title, a caption,
row and column labels and one colour bar for a shared scale (or a small one under each panel).
:mod:`vitviz.document.panel` builds the specs of a session's current view, its heads and its layers in the colours of
the window (the same :class:`~vitviz.render.scales.ColourScale`, ticks, quantity and unit). :func:`render` draws a spec
to pixels, :func:`save` writes PNG / SVG / PDF, :func:`save_animation` GIF / APNG / MP4, always atomically and never
over an existing file unless asked.

Sizes. The panels are drawn at an integer multiple ``k`` of the image's own pixels (``scale``): ``"print"`` (the
default) takes the smallest ``k`` that makes the panel area's long side at least :data:`PRINT_LONG_SIDE` px,
``"native"`` is ``k = 1``, an integer is ``k`` itself. Text is set in points for a figure of a fixed physical size
(a single view's image is :data:`SINGLE_INCHES` on its long side, a grid's panel area :data:`GRID_INCHES`), so the
caption reads the same at every scale: the PNG's DPI (written in its ``pHYs`` chunk) is what changes. SVG and PDF use
the ``"print"`` layout and embed each panel at the image's own resolution.

Metadata: every writer takes ``metadata: dict[str, str] | None``; see :func:`save`.

The parts: :mod:`~vitviz.render.figures.specification` (what a figure is), :mod:`~vitviz.render.figures.sizes` (the
scale option), :mod:`~vitviz.render.figures.text`, :mod:`~vitviz.render.figures.layout`,
:mod:`~vitviz.render.figures.drawing` (matplotlib figure, pixels), :mod:`~vitviz.render.figures.encoding` (PNG, SVG,
PDF files), :mod:`~vitviz.render.figures.metadata` (written and read back; the bounded reader of each format in
:mod:`~vitviz.render.figures.embedded_text`), :mod:`~vitviz.render.figures.animation`.
"""

from vitviz._util.lazy import lazy_names

# imported on first use: the window and the option table read the specification (numpy only) at start-up; drawing
# (matplotlib), the encoders (PIL) and the metadata readers (xml, email) load with the first figure
_LAZY = {
    "ANIMATION_FORMATS": "animation", "encode_animation": "animation", "mp4_problem": "animation",
    "render_frames": "animation", "save_animation": "animation",
    "Rendered": "drawing", "build": "drawing", "composite": "drawing", "matplotlib_style": "drawing",
    "render": "drawing",
    "FIGURE_FORMATS": "encoding", "encode": "encoding", "save": "encoding",
    "GRID_INCHES": "layout", "Layout": "layout", "MAX_FIGURE_PIXELS": "layout", "MIN_DPI": "layout",
    "SINGLE_INCHES": "layout", "lay_out": "layout", "size_problem": "layout",
    "MetadataError": "metadata", "pdf_pages": "metadata", "read_metadata": "metadata",
    "ANIMATION_LONG_SIDE": "sizes", "MAX_FACTOR": "sizes", "PRINT_LONG_SIDE": "sizes", "ScaleOption": "sizes",
    "grid_factor": "sizes", "layout_scale": "sizes", "parse_scale": "sizes", "scale_factor": "sizes",
    "FigureSpec": "specification", "MASK_STYLES": "specification", "Panel": "specification", "Rect": "specification",
    "grid_shape": "specification",
    "text_width_pt": "text", "wrap_text": "text",
}

__all__ = ["ANIMATION_FORMATS", "ANIMATION_LONG_SIDE", "FIGURE_FORMATS", "GRID_INCHES", "MASK_STYLES", "MAX_FACTOR",
           "MAX_FIGURE_PIXELS", "MIN_DPI", "PRINT_LONG_SIDE", "SINGLE_INCHES", "FigureSpec", "Layout", "MetadataError",
           "Panel", "Rect", "Rendered", "ScaleOption", "build", "composite", "encode", "encode_animation",
           "grid_factor", "grid_shape", "lay_out", "layout_scale", "matplotlib_style", "mp4_problem", "parse_scale",
           "pdf_pages", "read_metadata", "render", "render_frames", "save", "save_animation", "scale_factor",
           "size_problem", "text_width_pt", "wrap_text"]

__getattr__, __dir__ = lazy_names("vitviz.render.figures", _LAZY, globals())

"""Figure files: a :class:`~vitviz.render.figures.specification.FigureSpec` as PNG (drawn at a scale, its DPI
written), SVG or PDF (text as text, vector colour bars, each panel at its image's own resolution), with metadata,
written atomically and never over an existing file unless asked."""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from PIL import Image
from PIL.PngImagePlugin import PngInfo

from vitviz._util.files import folder_problem
from vitviz.imaging import ExportError, write_atomic
from vitviz.render.figures.drawing import build, matplotlib_style, render
from vitviz.render.figures.layout import lay_out
from vitviz.render.figures.metadata import check_metadata, software, svg_with_metadata
from vitviz.render.figures.sizes import ScaleOption, layout_scale, scale_factor
from vitviz.render.figures.specification import FigureSpec

FIGURE_FORMATS = (".png", ".svg", ".pdf")


def _encode(spec: FigureSpec, fmt: str, scale: ScaleOption, metadata: dict[str, str]) -> tuple[bytes, str]:
    """The file's bytes and a note on its size (``"2255×1697 px, 600 dpi"`` / ``"vector, 3.4×2.5 in"``)."""
    info = {**spec.texts(), **metadata}
    scale = layout_scale(fmt, scale)
    if fmt == ".png":
        r = render(spec, scale)
        png = PngInfo()
        png.add_text("Software", software())
        for key, value in info.items():
            png.add_text(key, value, zip=len(value) > 1024)
        buf = io.BytesIO()
        Image.fromarray(r.pixels, "RGB").save(buf, format="PNG", pnginfo=png, dpi=(r.dpi, r.dpi), optimize=False)
        return buf.getvalue(), f"{r.pixels.shape[1]}×{r.pixels.shape[0]} px, {r.dpi:.0f} dpi"
    buf = io.BytesIO()
    with matplotlib_style():
        L = lay_out(spec, scale_factor(spec, scale))
        fig = build(spec, layout=L, image_k=1, vector=True)
        size = f"vector, {L.width / L.dpi:.2f}×{L.height / L.dpi:.2f} in"
        if fmt == ".svg":
            meta = {"Creator": software(), "Date": None}
            if spec.title:
                meta["Title"] = spec.title
            if spec.caption:
                meta["Description"] = spec.caption
            fig.savefig(buf, format="svg", metadata=meta)
            return svg_with_metadata(buf.getvalue(), info), size
        meta = {"Creator": software(), "Producer": f"{software()} (matplotlib)", "CreationDate": None}
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


def check_target(path: str | os.PathLike, formats: Sequence[str], what: str) -> tuple[Path, str]:
    """``(path, its format)`` when a ``what`` (``"figure"``, ``"animation"``) can be written there: a known
    extension, a writable folder, not a folder itself; else :class:`~vitviz.imaging.ExportError` naming the cause."""
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
         metadata: dict[str, str] | None = None, overwrite: bool = False,
         progress: Callable[[int, int], bool] | None = None) -> Path:
    """Write ``spec`` as PNG, SVG or PDF (by ``path``'s extension), atomically.

    PNG: drawn at ``scale`` with its DPI. SVG / PDF: the ``"print"`` layout, text as text, vector colour bar, each
    panel embedded at its image's own resolution (``scale`` is not used).

    Args:
        metadata: extra entries, ``{key: value}`` strings (keys: a letter, then up to 78 letters, digits or
            ``. _ : -``). Written as PNG text chunks (compressed above 1 kB; non-Latin-1 text as UTF-8 iTXt), in the
            SVG's ``<metadata id="vitviz">`` (``<vitviz:entry key="...">``) and as custom keys of the PDF's document
            information (beside Title, Subject = the caption, Creator). The title and caption are always written
            (``Title``, ``Description``). :func:`~vitviz.render.figures.metadata.read_metadata` reads them back
            from all three. For example the session's state:
            ``save(spec, "fig.pdf", metadata={"vitviz.session": json.dumps(state)})``.
        overwrite: replace an existing file (else :class:`FileExistsError`; nothing is written).
        progress: ``progress(done, 1)`` before drawing (0) and after it (1), before the file is written; returning
            False cancels (:class:`InterruptedError`, nothing written), as :func:`save_animation`'s does.

    Raises:
        ExportError: unknown extension, missing or read-only folder, disk full ... (names the file and the cause);
            the existing file, if any, is left as it was.
        FileExistsError: the file exists and ``overwrite`` is False.
        ValueError: a bad metadata key or value, or a scale too large.
    """
    target, fmt = check_target(path, FIGURE_FORMATS, "figure")
    meta = check_metadata(metadata)
    if not overwrite and target.exists():
        raise FileExistsError(f"{target} already exists")
    if progress is not None and progress(0, 1) is False:
        raise InterruptedError("cancelled")
    data, _ = _encode(spec, fmt, scale, meta)
    if progress is not None and progress(1, 1) is False:  # the last moment to stop: the write below is atomic
        raise InterruptedError("cancelled")
    return write_atomic(target, lambda fh: fh.write(data), overwrite=overwrite, suffix=fmt + ".tmp")


def encode(spec: FigureSpec, fmt: str, *, scale: ScaleOption = "print",
           metadata: dict[str, str] | None = None) -> tuple[bytes, str]:
    """The bytes :func:`save` would write for format ``fmt`` (``".png"``, ``".svg"``, ``".pdf"``) and a note on the
    size (pixels and DPI, or inches)."""
    if fmt not in FIGURE_FORMATS:
        raise ValueError(f"unknown figure format {fmt!r}; use {', '.join(FIGURE_FORMATS)}")
    return _encode(spec, fmt, scale, check_metadata(metadata))

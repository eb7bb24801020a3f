"""Animations: figures as the frames of an animated GIF, APNG or MP4 (every frame at one factor and one size), with
metadata, written atomically. MP4 needs ``imageio-ffmpeg``."""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from vitviz.imaging import ExportError, write_atomic
from vitviz.render.figures.drawing import matplotlib_style, render
from vitviz.render.figures.encoding import check_target
from vitviz.render.figures.layout import lay_out
from vitviz.render.figures.metadata import check_metadata, software
from vitviz.render.figures.sizes import ScaleOption, scale_factor
from vitviz.render.figures.specification import FigureSpec

ANIMATION_FORMATS = (".gif", ".apng", ".mp4")


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
    with matplotlib_style():
        layouts = [lay_out(s, k) for s in specs]
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
    """Write the frames ``specs`` (e.g. :func:`vitviz.document.panel.layer_figures`) as an animated GIF, APNG
    (``.apng``) or MP4, by ``path``'s extension, atomically; loops forever (GIF, APNG).

    Args:
        scale: as :func:`~vitviz.render.figures.sizes.scale_factor`; default ``"animation"`` (long side of the
            panels at least :data:`~vitviz.render.figures.sizes.ANIMATION_LONG_SIDE` px).
        fps: frames per second.
        metadata: as :func:`~vitviz.render.figures.encoding.save`: PNG text chunks in an APNG; one JSON comment in a
            GIF or MP4 (read back by :func:`~vitviz.render.figures.metadata.read_metadata`).
        progress: ``progress(done, total)`` after each frame; returning False cancels.

    Raises:
        ExportError: unknown extension, MP4 without an encoder (:func:`mp4_problem`), folder missing or not writable
            (names the file and the cause).
        FileExistsError, ValueError: as :func:`~vitviz.render.figures.encoding.save`.
    """
    target, fmt = check_target(path, ANIMATION_FORMATS, "animation")
    meta = check_metadata(metadata)
    if not fps > 0:
        raise ValueError(f"fps must be positive, got {fps}")
    if fmt == ".mp4":
        problem = mp4_problem()
        if problem:
            raise ExportError(target, problem)
    if not overwrite and target.exists():
        raise FileExistsError(f"{target} already exists")
    data = _animation_bytes(specs, fmt, scale, fps, meta, progress)
    return write_atomic(target, lambda fh: fh.write(data), overwrite=overwrite, suffix=fmt + ".tmp")


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
    return _animation_bytes(specs, fmt, scale, fps, check_metadata(metadata), progress)


def _animation_bytes(specs: Sequence[FigureSpec], fmt: str, scale: ScaleOption, fps: float, meta: dict[str, str],
                     progress: Callable[[int, int], bool] | None) -> bytes:
    frames = render_frames(specs, scale, progress)
    info = {**specs[0].texts(), **meta}
    duration = int(round(1000.0 / fps))
    if fmt == ".mp4":
        return _mp4_bytes(frames, fps, info)
    ims = [Image.fromarray(f, "RGB") for f in frames]
    buf = io.BytesIO()
    if fmt == ".gif":
        ims = _gif_frames(ims)
        ims[0].save(buf, format="GIF", save_all=True, append_images=ims[1:], duration=duration, loop=0,
                    comment=json.dumps(info, ensure_ascii=False).encode("utf-8"), optimize=False, disposal=1)
    else:
        png = PngInfo()
        png.add_text("Software", software())
        for key, value in info.items():
            png.add_text(key, value, zip=len(value) > 1024)
        ims[0].save(buf, format="PNG", save_all=True, append_images=ims[1:], duration=duration, loop=0,
                    pnginfo=png, default_image=False, disposal=0, blend=0)
    return buf.getvalue()


def _gif_frames(ims: list) -> list:
    """The frames in 256 colours of one palette (chosen from all frames) with Floyd-Steinberg dithering: smooth
    colour bars and photos, and no palette flicker between frames."""
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

"""Images in and out: loading and validating user images, colormaps, overlays, exports. No Qt.

Every array here is ``numpy`` in row-major (height, width[, channels]) order; RGB(A) arrays are ``uint8``.
"""

from __future__ import annotations

import io
import os
import re
import select
import stat
import struct
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont, ImageOps, UnidentifiedImageError

from vitviz._util.files import default_file_mode, describe_os_error, folder_problem

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".gif")
MAX_SIDE = 20000
MAX_PIXELS = MAX_SIDE * MAX_SIDE
"""The largest image :func:`load_image` opens (decompression bombs are refused from the file's header)."""
MAX_ASPECT_RATIO = 64
"""The most elongated image vitviz opens (long side / short side): a thinner strip has no room for a model's
centre crop (a 1x50000 PNG would be stretched to 256 x 12.8 million pixels)."""
MAX_STREAM_BYTES = 512 * 2**20
"""The most :func:`load_image` reads from a pipe (``/dev/stdin``, ``<(command)``, a FIFO)."""
STREAM_TIMEOUT = 10.0
"""Seconds :func:`load_image` waits for data from a pipe before giving up (nobody writing to a FIFO)."""

_PIL_LIMIT_LOCK = threading.Lock()


class ImageError(ValueError):
    """An image could not be read; the message names the file and the problem."""

    def __init__(self, path: str | os.PathLike | None, problem: str):
        self.path = None if path is None else str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)


class ExportError(OSError):
    """An export could not be written; the message names the file and the cause."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"cannot write {self.path}: {problem}")


@dataclass(frozen=True)
class LoadedImage:
    """A user image ready for display and the model.

    Attributes:
        image: PIL image in mode RGB, EXIF orientation applied.
        path: where it came from (None for pasted images).
        original_mode: the PIL mode of the file ("RGB", "L", "P", "RGBA", "I;16", "CMYK" ...).
        frames: number of frames in the file (only the first is used).
    """

    image: Image.Image
    path: Path | None
    original_mode: str
    frames: int = 1

    @property
    def size(self) -> tuple[int, int]:
        """``(height, width)``."""
        return (self.image.height, self.image.width)

    @property
    def name(self) -> str:
        return self.path.name if self.path else "pasted image"

    def rgb(self) -> np.ndarray:
        """``uint8 [H, W, 3]``."""
        return np.asarray(self.image, dtype=np.uint8)


def to_rgb(img: Image.Image) -> Image.Image:
    """Convert any PIL mode to 8-bit RGB correctly.

    16-bit and 32-bit integer images are scaled by their bit depth (not clipped); float images by their range;
    transparency is composited over white; palette, grayscale, bilevel, CMYK and YCbCr go through PIL's conversions.
    """
    mode = img.mode
    if mode == "RGB":
        return img
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        arr = np.asarray(img).astype(np.float64)
        if mode.startswith("I;16"):
            arr = arr / 257.0
        elif mode == "I":
            hi = float(arr.max()) if arr.size else 0.0
            lo = float(arr.min()) if arr.size else 0.0
            if lo >= 0 and hi <= 255:
                pass
            elif lo >= 0 and hi <= 65535:
                arr = arr / 257.0
            else:
                arr = (arr - lo) / max(hi - lo, 1e-12) * 255.0
        else:  # float
            finite = arr[np.isfinite(arr)]
            lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
            if lo >= 0 and hi <= 1.0:
                arr = arr * 255.0
            else:
                arr = (arr - lo) / max(hi - lo, 1e-12) * 255.0
            arr = np.nan_to_num(arr, nan=0.0)
        gray = np.clip(np.round(arr), 0, 255).astype(np.uint8)
        return Image.fromarray(np.stack([gray] * 3, axis=-1), "RGB")
    if mode == "P":
        img = img.convert("RGBA") if "transparency" in img.info else img.convert("RGB")
        mode = img.mode
        if mode == "RGB":
            return img
    if mode == "PA":
        img = img.convert("RGBA")
        mode = "RGBA"
    if mode in ("RGBA", "LA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def _too_large(size: str) -> str:
    return f"image is too large ({size}; vitviz opens images up to {MAX_SIDE}x{MAX_SIDE} = " \
           f"{MAX_PIXELS / 1e6:.0f} megapixels)"


def _open_with_project_limit(src) -> Image.Image:
    """``Image.open`` with PIL's decompression-bomb limit at :data:`MAX_PIXELS` (not PIL's own 89.5 Mpx), so that
    the one documented limit applies; both PIL signals (warning above the limit, error above twice) are errors.

    PIL reads its limit from a module global at open time: it is swapped under a lock, for the open only (the
    header; decoding happens after, outside the lock)."""
    with _PIL_LIMIT_LOCK:
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = MAX_PIXELS
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                return Image.open(src)
        finally:
            Image.MAX_IMAGE_PIXELS = saved


def _read_stream(p: Path, kind: str) -> bytes:
    """All bytes of a pipe (FIFO, ``/dev/stdin``, ``<(command)``), at most :data:`MAX_STREAM_BYTES`.

    Opened non-blocking (opening a FIFO for reading blocks until a writer appears); waits at most
    :data:`STREAM_TIMEOUT` seconds for each piece of data, so a pipe nobody writes to is an error, not a hang.
    """
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except PermissionError:
        raise ImageError(p, "permission denied") from None
    except OSError as e:
        raise ImageError(p, f"cannot read {kind} ({e.strerror or e})") from None
    chunks: list[bytes] = []
    total = 0
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while True:
            if not poller.poll(STREAM_TIMEOUT * 1000):
                raise ImageError(p, f"nothing arrived from this {kind} for {STREAM_TIMEOUT:g} s "
                                    f"(no program is writing to it?)")
            try:
                data = os.read(fd, 1 << 20)
            except BlockingIOError:
                continue
            except OSError as e:
                raise ImageError(p, f"cannot read {kind} ({e.strerror or e})") from None
            if not data:
                break
            total += len(data)
            if total > MAX_STREAM_BYTES:
                raise ImageError(p, f"more than {MAX_STREAM_BYTES // 2**20} MB arrived from this {kind}; "
                                    f"save the image to a file and open that")
            chunks.append(data)
    finally:
        os.close(fd)
    if not total:
        raise ImageError(p, f"{kind} delivered no data (0 bytes)")
    return b"".join(chunks)


def check_shape(width: int, height: int, path: str | os.PathLike | None = None) -> None:
    """Refuse an image with no pixels or more elongated than :data:`MAX_ASPECT_RATIO`:1 (:class:`ImageError`)."""
    if width < 1 or height < 1:
        raise ImageError(path, f"image has no pixels ({width}x{height})")
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise ImageError(path, f"image is {width}x{height} pixels; vitviz handles aspect ratios up to "
                               f"{MAX_ASPECT_RATIO}:1 (crop the image first)")


def load_image(path: str | os.PathLike) -> LoadedImage:
    """Read an image file (PNG, JPEG, BMP, TIFF, WebP, GIF first frame) as RGB with EXIF rotation applied.

    This is the one image reader of vitviz (the window and ``vitviz predict`` both use it). Limits, each refused
    with an :class:`ImageError`: at most :data:`MAX_PIXELS` pixels (20000x20000; the file's header is checked
    before any decoding), aspect ratio at most :data:`MAX_ASPECT_RATIO`:1. Pipes (``/dev/stdin``, ``<(command)``,
    FIFOs) are read into memory, at most :data:`MAX_STREAM_BYTES`; devices, sockets and folders are refused.

    Raises:
        ImageError: naming the file and what is wrong (missing, a folder, a device, empty, not an image, truncated,
            too large, too elongated).
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise ImageError(p, "file does not exist") from None
    except PermissionError:
        raise ImageError(p, "permission denied") from None
    except OSError as e:  # ENOTDIR (a parent is a file), ELOOP, ENAMETOOLONG ...
        raise ImageError(p, f"cannot read file ({e.strerror or e})") from None
    mode = st.st_mode
    src: Path | io.BytesIO = p
    if stat.S_ISDIR(mode):
        raise ImageError(p, "is a folder, not an image file")
    if stat.S_ISFIFO(mode):
        src = io.BytesIO(_read_stream(p, "pipe"))
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise ImageError(p, "is a device, not an image file")
    elif stat.S_ISSOCK(mode):
        raise ImageError(p, "is a socket, not an image file")
    elif not stat.S_ISREG(mode):
        raise ImageError(p, "is not a regular file")
    elif st.st_size == 0:
        raise ImageError(p, "file is empty (0 bytes)")
    try:
        with _open_with_project_limit(src) as im:
            if im.width * im.height > MAX_PIXELS:
                raise ImageError(p, _too_large(f"{im.width}x{im.height} pixels"))
            check_shape(im.width, im.height, p)
            frames = getattr(im, "n_frames", 1)
            if frames > 1:
                im.seek(0)
            original_mode = im.mode
            im.load()
            # in place: no copy of the pixels unless the EXIF orientation asks for one (a copy of a 20000x20000
            # image is 1.6 GB)
            ImageOps.exif_transpose(im, in_place=True)
            rgb = to_rgb(im)
            rgb.load()
    except ImageError:
        raise
    except UnidentifiedImageError:
        raise ImageError(p, "not an image file, or a format vitviz cannot read "
                            f"(supported: {', '.join(s.lstrip('.').upper() for s in IMAGE_SUFFIXES)})") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        m = re.search(r"\((\d+) pixels\)", str(e))
        raise ImageError(p, _too_large(f"{int(m.group(1)):,} pixels" if m else "over the limit")) from None
    except PermissionError:
        raise ImageError(p, "permission denied") from None
    except MemoryError:
        raise ImageError(p, "not enough memory to decode this image") from None
    except (OSError, SyntaxError, ValueError, EOFError, struct.error, IndexError, KeyError, TypeError) as e:
        # PIL's plugins report malformed files with many exception types
        msg = str(e) or type(e).__name__
        if "truncated" in msg.lower() or isinstance(e, EOFError):
            msg = f"file is truncated or corrupt ({msg})"
        else:
            msg = f"cannot decode image ({msg})"
        raise ImageError(p, msg) from None
    return LoadedImage(image=rgb, path=p, original_mode=original_mode, frames=frames)


def image_from_array(arr: np.ndarray, name: str | None = None) -> LoadedImage:
    """Wrap an in-memory ``uint8 [H, W, 3|4]`` or ``[H, W]`` array (e.g. a pasted image) as a LoadedImage."""
    arr = np.asarray(arr)
    if arr.ndim not in (2, 3) or arr.size == 0:
        raise ImageError(name, f"expected an image array [H, W] or [H, W, C], got shape {arr.shape}")
    img = Image.fromarray(arr.astype(np.uint8))
    return LoadedImage(image=to_rgb(img), path=Path(name) if name else None, original_mode=img.mode)


# ----------------------------------------------------------------------------------------------- colormaps
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


def _font(size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1
        return ImageFont.load_default()


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def render_export(rgb: np.ndarray, values: np.ndarray | None, *, cmap: str = DEFAULT_COLORMAP, opacity: float = 0.6,
                  colorbar: bool = False, caption: str | None = None, vmin: float | None = None,
                  vmax: float | None = None) -> np.ndarray:
    """The picture an export writes: the overlay at the image's own resolution, plus an optional colour bar strip at
    the right and a caption strip at the bottom. ``values=None`` exports the plain image.

    Returns:
        ``uint8 [H', W', 3]`` with ``H' >= H`` and ``W' >= W`` (equal when neither extra is asked for).
    """
    base = overlay(rgb, values, cmap=cmap, opacity=opacity, vmin=vmin, vmax=vmax) if values is not None \
        else np.asarray(rgb)[..., :3].astype(np.uint8)
    h, w = base.shape[:2]
    fsize = int(np.clip(min(h, w) / 28, 10, 28))
    font = _font(fsize)
    if colorbar and values is not None:
        lo, hi = value_range(values, vmin, vmax)
        bar_w = max(12, w // 40)
        pad = max(6, fsize // 2)
        label_w = int(fsize * 0.62 * max(len(_fmt(lo)), len(_fmt(hi)))) + pad
        strip = Image.new("RGB", (bar_w + 2 * pad + label_w, h), (255, 255, 255))
        top, bottom = pad + fsize // 2, h - pad - fsize // 2
        bh = max(1, bottom - top)
        grad = get_colormap(cmap)[np.round(np.linspace(255, 0, bh)).astype(int), :3]
        bar = np.repeat(grad[:, None, :], bar_w, axis=1)
        strip.paste(Image.fromarray(bar.astype(np.uint8), "RGB"), (pad, top))
        d = ImageDraw.Draw(strip)
        d.rectangle([pad - 1, top - 1, pad + bar_w, top + bh], outline=(0, 0, 0))
        d.text((pad + bar_w + pad // 2, top - fsize // 2), _fmt(hi), fill=(0, 0, 0), font=font)
        d.text((pad + bar_w + pad // 2, top + bh - fsize // 2 - 2), _fmt(lo), fill=(0, 0, 0), font=font)
        base = np.concatenate([base, np.asarray(strip)], axis=1)
    if caption:
        W = base.shape[1]
        line_h = int(fsize * 1.5)
        lines = _wrap(caption, font, W - 2 * fsize)
        strip = Image.new("RGB", (W, line_h * len(lines) + fsize // 2), (255, 255, 255))
        d = ImageDraw.Draw(strip)
        for i, line in enumerate(lines):
            d.text((fsize // 2, fsize // 4 + i * line_h), line, fill=(0, 0, 0), font=font)
        base = np.concatenate([base, np.asarray(strip)], axis=0)
    return np.ascontiguousarray(base)


def _wrap(text: str, font: ImageFont.ImageFont, width: int) -> list[str]:
    out: list[str] = []
    for para in text.splitlines() or [""]:
        words, line = para.split(" "), ""
        for word in words:
            trial = f"{line} {word}".strip()
            if line and font.getlength(trial) > width:
                out.append(line)
                line = word
            else:
                line = trial
        out.append(line)
    return out


def tile_grid(images: Sequence[np.ndarray], ncols: int, pad: int = 4, labels: Sequence[str] | None = None,
              background: tuple[int, int, int] = (255, 255, 255)) -> np.ndarray:
    """Lay equal-sized ``uint8 [h, w, 3]`` tiles out in a grid with ``pad`` pixels between them; optional labels
    are drawn in a strip above each tile. Returns ``uint8 [H, W, 3]``."""
    if not images:
        raise ValueError("tile_grid needs at least one image")
    h, w = images[0].shape[:2]
    for i, im in enumerate(images):
        if im.shape[:2] != (h, w):
            raise ValueError(f"tile {i} is {im.shape[:2]}, expected {(h, w)}")
    ncols = max(1, min(ncols, len(images)))
    nrows = (len(images) + ncols - 1) // ncols
    fsize = int(np.clip(w / 10, 10, 24))
    label_h = int(fsize * 1.4) if labels else 0
    H = nrows * (h + label_h) + (nrows + 1) * pad
    W = ncols * w + (ncols + 1) * pad
    canvas = Image.new("RGB", (W, H), background)
    draw = ImageDraw.Draw(canvas)
    font = _font(fsize)
    for i, im in enumerate(images):
        r, c = divmod(i, ncols)
        x = pad + c * (w + pad)
        y = pad + r * (h + label_h + pad)
        if labels:
            draw.text((x + 2, y + 1), str(labels[i]), fill=(0, 0, 0), font=font)
        canvas.paste(Image.fromarray(np.asarray(im)[..., :3].astype(np.uint8), "RGB"), (x, y + label_h))
    return np.asarray(canvas)


# ----------------------------------------------------------------------------------------------- writing
def write_png(path: str | os.PathLike, rgb: np.ndarray, *, overwrite: bool = False) -> Path:
    """Write ``uint8 [H, W, 3|4]`` as PNG atomically: a temporary file in the same folder, then a rename.

    Without ``overwrite`` an existing file is never replaced, not even by a race: the final step is a hard link,
    which fails when the name exists.

    Raises:
        FileExistsError: the target exists and ``overwrite`` is False.
        ExportError: the folder is missing or not writable, the disk is full, ... (names the path and the cause).
    """
    target = Path(path)
    if target.suffix.lower() != ".png":
        target = target.with_name(target.name + ".png")
    folder = target.parent if str(target.parent) else Path(".")
    arr = np.asarray(rgb)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise ValueError(f"expected a uint8 [H, W, 3|4] array, got {arr.dtype} {arr.shape}")
    problem = folder_problem(folder)
    if problem:
        raise ExportError(target, problem)
    if target.is_dir():
        raise ExportError(target, "a folder of that name exists")
    if not overwrite and target.exists():
        raise FileExistsError(f"{target} already exists")
    image = Image.fromarray(arr, "RGBA" if arr.shape[2] == 4 else "RGB")
    return write_atomic(target, lambda fh: image.save(fh, format="PNG"), overwrite=overwrite, suffix=".png.tmp")


def write_atomic(target: Path, write: Callable[[BinaryIO], None], *, overwrite: bool, suffix: str = ".tmp",
                 exists_message: str | None = None) -> Path:
    """Write a file atomically: ``write(fh)`` fills a temporary file in the target's folder, which is synced and then
    hard-linked to ``target`` (fails when the name exists, even in a race) or, with ``overwrite``, renamed over it.
    The temporary file never stays behind. The caller checks the folder first (:func:`vitviz._util.files.folder_problem`).

    Raises:
        FileExistsError: the target exists and ``overwrite`` is False (``exists_message``, default
            "TARGET already exists").
        ExportError: the folder is not writable, the disk is full, ... (names the path and the cause).
    """
    folder = target.parent if str(target.parent) else Path(".")
    exists = exists_message or f"{target} already exists"
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=suffix, dir=folder)
    except OSError as e:
        raise ExportError(target, f"folder {folder} is not writable ({describe_os_error(e)})") from e
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, default_file_mode())
        if overwrite:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise FileExistsError(exists) from None
            except OSError:  # file systems without hard links: check-then-rename
                if target.exists():
                    raise FileExistsError(exists) from None
                os.replace(tmp, target)
    except FileExistsError:
        raise
    except OSError as e:  # disk full (ENOSPC), file too large (EFBIG), I/O error ... while writing or renaming
        raise ExportError(target, describe_os_error(e)) from e
    finally:
        try:
            tmp.unlink()
        except OSError:  # gone (renamed) or best effort: the temp file is hidden (dot-named)
            pass
    return target


def next_free_path(path: str | os.PathLike) -> Path:
    """``name.png`` if free, else ``name-2.png``, ``name-3.png`` ... (for suggesting export names)."""
    p = Path(path)
    if not p.exists():
        return p
    i = 2
    while True:
        cand = p.with_name(f"{p.stem}-{i}{p.suffix}")
        if not cand.exists():
            return cand
        i += 1

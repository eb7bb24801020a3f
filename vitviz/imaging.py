"""Images in and out: loading and validating user images, writing PNGs and other files atomically. No Qt.

Colormaps and overlays live in :mod:`vitviz.render.colormaps`.

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
from typing import BinaryIO, Callable

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vitviz._util.files import default_file_mode, describe_os_error, folder_problem, process_alive
from vitviz._util.memory import Reservations, free_memory

# the resampling filters a model's preprocessing may name (timm's and torchvision's names), as PIL knows them
RESAMPLING: dict[str, Image.Resampling] = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".gif")
MAX_SIDE = 20000
MAX_PIXELS = MAX_SIDE * MAX_SIDE
"""The largest image :func:`load_image` opens (decompression bombs are refused from the file's header)."""
MAX_ASPECT_RATIO = 64
"""The most elongated image vitviz opens (long side / short side): a thinner strip has no room for a model's
centre crop (a 1x50000 PNG would be stretched to 256 x 12.8 million pixels)."""
BYTES_PER_PIXEL = 7
"""What opening an image costs per pixel, for :func:`load_image`'s memory check: PIL decodes an RGB image into 4
bytes per pixel, and the pipeline keeps a 3-byte copy (a 20000x20000 PNG: 2.6 GiB)."""
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


def _memory_problem(width: int, height: int, need: int, free: int) -> str:
    return (f"opening this {width}x{height} image needs about {need / 2**30:.1f} GiB, but only "
            f"{free / 2**30:.1f} GiB is free (memory, or this process's limit); reduce the image first")


IMAGES_IN_FLIGHT = Reservations()
"""The memory of the images :func:`load_image` is decoding right now, in every thread."""


def memory_reserved() -> int:
    """Bytes reserved by the images :func:`load_image` is decoding right now, in every thread."""
    return IMAGES_IN_FLIGHT.reserved


def _reservation(path: Path, width: int, height: int):
    """Hold ``width x height x`` :data:`BYTES_PER_PIXEL` of memory while an image is decoded
    (:data:`IMAGES_IN_FLIGHT`): images opened at the same time (the loader threads of ``vitviz export``, the
    window's) do not each pass the memory check alone and together exceed the memory. One that fits alone but not
    beside those being decoded waits until one of them ends; one that would not fit even with their memory back is
    refused at once (:class:`ImageError`)."""
    need = width * height * BYTES_PER_PIXEL
    return IMAGES_IN_FLIGHT.hold(need, lambda: free_memory(),  # (this module's name, looked up at each call)
                                 lambda free: ImageError(path, _memory_problem(width, height, need, free)))


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


def header_problem(head: bytes) -> str | None:
    """What is wrong with an image header that PIL refuses without saying why: a PNG whose IHDR declares a width or
    a height of 0 (None when the first bytes show nothing of the kind)."""
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR" and len(head) >= 24:
        width, height = struct.unpack(">II", head[16:24])
        zero = [f"a {what} of 0" for what, n in (("width", width), ("height", height)) if n == 0]
        if zero:
            return f"the PNG header declares {' and '.join(zero)}"
    return None


def _first_bytes(src: Path | io.BytesIO, n: int) -> bytes:
    try:
        if isinstance(src, io.BytesIO):
            return src.getvalue()[:n]
        with open(src, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def load_image(path: str | os.PathLike, *, check: Callable[[int, int], str | None] | None = None) -> LoadedImage:
    """Read an image file (PNG, JPEG, BMP, TIFF, WebP, GIF first frame) as RGB with EXIF rotation applied.

    This is the one image reader of vitviz (the window and ``vitviz predict`` both use it). Limits, each refused
    with an :class:`ImageError`: at most :data:`MAX_PIXELS` pixels (20000x20000; the file's header is checked
    before any decoding), aspect ratio at most :data:`MAX_ASPECT_RATIO`:1, and no more pixels than the free memory
    holds (:data:`BYTES_PER_PIXEL` each, against :func:`free_memory` less what the images being decoded in other
    threads hold, also from the header; waits for those when it fits alone but not beside them). Pipes (``/dev/stdin``,
    ``<(command)``, FIFOs) are read into memory, at most :data:`MAX_STREAM_BYTES`; devices, sockets and folders are
    refused. ``check(width, height)``: the caller's own limit on the header's size (the file's stored width and
    height, before EXIF rotation), asked before any decoding; a problem it returns refuses the image.

    Raises:
        ImageError: naming the file and what is wrong (missing, a folder, a device, empty, not an image, truncated,
            too large, too elongated, more than the free memory holds).
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
            problem = check(im.width, im.height) if check is not None else None
            if problem:
                raise ImageError(p, problem)
            # the memory, from the header before any pixel is decoded, and held while decoding
            with _reservation(p, im.width, im.height):
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
        raise ImageError(p, header_problem(_first_bytes(src, 33)) or
                         "not an image file, or a format vitviz cannot read "
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


def remove_dead_temporaries(target: Path, suffix: str = ".tmp") -> list[Path]:
    """Remove the temporary files of :func:`write_atomic` for ``target`` (``.<stem>.<pid>-<random><suffix>``) that a
    process killed while writing left behind: only those whose process is gone (a live writer's file is kept).
    Lists the folder once: for the few outputs of a command (stats, evaluate, merge), not an export's thousands.
    Returns what was removed."""
    folder = target.parent if str(target.parent) else Path(".")
    pattern = re.compile(rf"\.{re.escape(target.stem)}\.(\d+)-[^/]*{re.escape(suffix)}")
    removed = []
    try:
        names = [e.name for e in os.scandir(folder)]
    except OSError:
        return removed
    for name in names:
        m = pattern.fullmatch(name)
        if not m or int(m[1]) == os.getpid() or process_alive(int(m[1])):
            continue
        try:
            (folder / name).unlink()
            removed.append(folder / name)
        except OSError:
            pass
    return removed


def write_atomic(target: Path, write: Callable[[BinaryIO], None], *, overwrite: bool, suffix: str = ".tmp",
                 exists_message: str | None = None) -> Path:
    """Write a file atomically: ``write(fh)`` fills a temporary file in the target's folder, which is synced and then
    hard-linked to ``target`` (fails when the name exists, even in a race) or, with ``overwrite``, renamed over it.
    The temporary file never stays behind. The caller checks the folder first
    (:func:`vitviz._util.files.folder_problem`).

    Raises:
        FileExistsError: the target exists and ``overwrite`` is False (``exists_message``, default
            "TARGET already exists").
        ExportError: the folder is not writable, the disk is full, ... (names the path and the cause).
    """
    folder = target.parent if str(target.parent) else Path(".")
    exists = exists_message or f"{target} already exists"
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.stem}.{os.getpid()}-", suffix=suffix, dir=folder)
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

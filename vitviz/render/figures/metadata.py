"""The text entries a figure file carries: checked before writing, put into an SVG, and read back from every format
vitviz writes (PNG / APNG text chunks, the SVG's vitviz metadata, the PDF's document information, a GIF's or MP4's
JSON comment)."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import BinaryIO
from xml.sax.saxutils import escape, quoteattr

from vitviz import __version__
from vitviz._util.json_scan import FLAT_STRING_OBJECT, without_strings
from vitviz.render.figures.embedded_text import (
    PNG_SIGNATURE,
    Damaged,
    gif_comment,
    mp4_comment,
    pdf_info,
    png_text,
    svg_block,
)

SVG_NS = "urn:vitviz:metadata"
SVG_START, SVG_END = b'<metadata id="vitviz">', b"</metadata>"
MAX_TEXT_BYTES = 16 << 20
"""The most bytes of text :func:`read_metadata` reads by default."""
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]{0,78}$")


def check_metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    """``metadata`` checked (keys a figure file of every format accepts, string values); ValueError naming the bad
    entry."""
    out: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(f"metadata key {key!r} must start with a letter and hold at most 79 letters, digits "
                             f"or . _ : - (PNG, SVG and PDF all accept such keys)")
        if not isinstance(value, str):
            raise ValueError(f"metadata value of {key!r} must be a string, got {type(value).__name__}")
        out[key] = value
    return out


def software() -> str:
    """The ``Software`` / ``Creator`` entry: vitviz and its version."""
    return f"vitviz {__version__}"


def svg_with_metadata(svg: bytes, info: dict[str, str]) -> bytes:
    """The SVG with a ``<metadata id="vitviz">`` element holding every entry (``<vitviz:entry key=..>value``)."""
    entries = "".join(f"<vitviz:entry key={quoteattr(k)}>{escape(v)}</vitviz:entry>" for k, v in info.items())
    block = f'{SVG_START.decode()}<vitviz:data xmlns:vitviz="{SVG_NS}">{entries}</vitviz:data>{SVG_END.decode()}'
    text = svg.decode("utf-8")
    m = re.search(r"<svg\b[^>]*>", text)
    if m is None:  # pragma: no cover - matplotlib always writes one
        raise ValueError("matplotlib wrote an SVG without an <svg> element")
    return (text[:m.end()] + "\n " + block + text[m.end():]).encode("utf-8")


class MetadataError(ValueError):
    """A figure's metadata cannot be read; the message names the file and the cause (``path``, ``problem``)."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(f"{self.path}: {problem}")


def read_metadata(path: str | os.PathLike, *, max_bytes: int = MAX_TEXT_BYTES) -> dict[str, str]:
    """The text entries of a figure vitviz wrote: PNG / APNG text chunks, the SVG's vitviz metadata, the PDF's
    document information (its custom keys and Title, Subject, Creator), a GIF's or MP4's comment (JSON).

    Only the metadata is read, within bounds (:mod:`~vitviz.render.figures.embedded_text`): pixels are never decoded,
    a file is never read whole, every scan is linear.

    Args:
        max_bytes: the most bytes of text read (the entries besides it, such as the title, may take 1 MB more).

    Raises:
        MetadataError: naming the file and the cause: it cannot be read, is not one of these formats, is cut short
            or damaged, or its text is over ``max_bytes`` (stored or inflated).
    """
    p = Path(path)
    try:
        st = os.stat(p)
        if stat.S_ISDIR(st.st_mode):
            raise Damaged("is a folder, not a figure")
        if not stat.S_ISREG(st.st_mode):
            raise Damaged("is not a regular file")
        with open(p, "rb") as fh:
            return _read(fh, st.st_size, max_bytes + (1 << 20))
    except Damaged as e:
        raise MetadataError(p, str(e)) from None
    except FileNotFoundError:
        raise MetadataError(p, "file does not exist") from None
    except OSError as e:
        raise MetadataError(p, f"cannot read ({e.strerror or e})") from None
    except MemoryError:
        raise MetadataError(p, "not enough memory to read its metadata") from None


def _read(fh: BinaryIO, size: int, budget: int) -> dict[str, str]:
    head = fh.read(4096)
    fh.seek(0)
    if head.startswith(PNG_SIGNATURE):
        return png_text(fh, size, budget)
    if head.startswith(b"%PDF"):
        return pdf_info(fh, size, budget)
    if head.startswith(b"GIF8"):
        return _json_comment(gif_comment(fh, size, budget))
    if head[4:8] == b"ftyp":
        return _json_comment(mp4_comment(fh, size, budget))
    if is_svg(head):
        root = svg_block(fh, size, budget, SVG_START, SVG_END)
        if root is None:
            return {}
        return {e.get("key", ""): e.text or "" for e in root.iter(f"{{{SVG_NS}}}entry")}
    if not head:
        raise Damaged("the file is empty (0 bytes)")
    raise Damaged("not a PNG, SVG, PDF, GIF or MP4 file")


def is_svg(head: bytes) -> bool:
    """Whether a file's first bytes are those of an SVG (an XML declaration or an ``<svg`` element first)."""
    return head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith((b"<?xml", b"<svg"))


def _json_comment(comment: bytes) -> dict[str, str]:
    """A GIF's or MP4's comment: a JSON object of strings (checked for that shape before parsing, so a hostile one
    builds nothing), else the whole text under ``Comment``."""
    if not comment:
        return {}
    text = comment.decode("utf-8", "replace")
    if FLAT_STRING_OBJECT.fullmatch(without_strings(text)):
        try:
            return {str(k): str(v) for k, v in json.loads(text).items()}
        except (ValueError, RecursionError):
            pass
    return {"Comment": text}


def pdf_pages(data: bytes) -> list[tuple[float, float, float, float]]:
    """The MediaBox ``(x0, y0, x1, y1)`` in points of every page object of a PDF (for checks)."""
    boxes = []
    for m in re.finditer(rb"/Type\s*/Page\b(?!s)(.*?)(?:endobj)", data, re.DOTALL):
        b = re.search(rb"/MediaBox\s*\[\s*([-\d.\s]+)\]", m.group(0))
        if b:
            boxes.append(tuple(float(x) for x in b.group(1).split()))
    return boxes

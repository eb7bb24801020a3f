"""The text entries a figure file carries: checked before writing, put into an SVG, and read back from every format
vitviz writes (PNG / APNG text chunks, the SVG's vitviz metadata, the PDF's document information, a GIF's or MP4's
JSON comment)."""

from __future__ import annotations

import io
import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from PIL import Image

from vitviz import __version__

SVG_NS = "urn:vitviz:metadata"
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
    block = f'<metadata id="vitviz"><vitviz:data xmlns:vitviz="{SVG_NS}">{entries}</vitviz:data></metadata>'
    text = svg.decode("utf-8")
    m = re.search(r"<svg\b[^>]*>", text)
    if m is None:  # pragma: no cover - matplotlib always writes one
        raise ValueError("matplotlib wrote an SVG without an <svg> element")
    return (text[:m.end()] + "\n " + block + text[m.end():]).encode("utf-8")


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
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            return {str(k): str(v) for k, v in getattr(im, "text", {}).items()}
    if data.startswith(b"%PDF"):
        return _pdf_info(data, p)
    if data.startswith(b"GIF8"):
        with Image.open(io.BytesIO(data)) as im:
            comment = im.info.get("comment", b"")
        return _json_comment(comment, p)
    if data[4:8] == b"ftyp":
        return _mp4_comment(data, p)
    head = data[:4096].lstrip()
    if head.startswith((b"<?xml", b"<svg")):
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

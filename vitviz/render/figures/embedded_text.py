"""The text a figure file carries, read within bounds of time and memory, one reader per format, each reading only
what it needs: a PNG's chunks are walked up to IEND (text chunks read, capped before and after inflating; pixels
never decoded), a PDF's document information is found from its trailer in a window at the end of the file, an SVG's
vitviz block in a window at its start, a GIF's comment before its first frame, an MP4's comment in its ``moov`` box.
Every scan is linear; a damaged or hostile file is a :class:`Damaged` saying what is wrong (the caller names the
file). ``budget``: the most bytes of text the caller accepts.
"""

from __future__ import annotations

import os
import re
import struct
import xml.etree.ElementTree as ET
import zlib
from typing import BinaryIO

__all__ = ["PNG_SIGNATURE", "Damaged", "gif_comment", "mp4_comment", "pdf_info", "png_text", "svg_block"]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PNG_CHUNKS = 1_000_000  # a 1 GB PNG written by libpng (8 KB IDAT chunks) has about 130,000
MAX_GIF_BLOCKS = 100_000  # data sub-blocks before the first frame (a 10 MB comment takes 41,000)
MAX_BOXES = 100_000  # MP4 boxes walked on one level
MAX_PDF_ENTRIES = 10_000  # entries of a dictionary, elements of an array
MAX_PDF_NESTING = 32
MAX_PDF_PARENS = 100_000  # unescaped parentheses in one string (matplotlib escapes them all)
MAX_PDF_ESCAPES = 1_000_000  # escapes other than matplotlib's in one string (octal codes, line continuations)
PDF_FIRST_WINDOW = 1 << 20
SVG_HEAD = 1 << 16  # where an SVG's vitviz metadata starts (matplotlib's header and the <svg> tag come first)


class Damaged(ValueError):
    """What is wrong with a figure file (the caller adds its name)."""


def _exactly(fh: BinaryIO, n: int, what: str) -> bytes:
    data = fh.read(n)
    if len(data) < n:
        raise Damaged(f"the file is cut short (it ends inside {what})")
    return data


def _tail(fh: BinaryIO, size: int, n: int) -> bytes:
    fh.seek(max(0, size - n))
    return fh.read(n)


def _name(kind: bytes) -> str:
    return kind.decode("ascii") if kind.isalpha() else kind.hex()


# ------------------------------------------------------------------------------------------------------------ PNG
def png_text(fh: BinaryIO, size: int, budget: int) -> dict[str, str]:
    """The entries of a PNG's (or APNG's) tEXt, zTXt and iTXt chunks; every chunk up to IEND is walked (skipped by
    seeking unless it is text), so a cut-short file is reported."""
    if fh.read(8) != PNG_SIGNATURE:
        raise Damaged("not a PNG file")
    out: dict[str, str] = {}
    left = budget  # bytes of text all entries together may still take (stored or inflated)
    pos = 8
    for n in range(MAX_PNG_CHUNKS):
        head = fh.read(8)
        if len(head) < 8:
            raise Damaged("the PNG is cut short (it ends before its IEND chunk)")
        length, kind = struct.unpack(">I4s", head)
        if n == 0 and kind != b"IHDR":
            raise Damaged(f"not a valid PNG (its first chunk is {_name(kind)}, not IHDR)")
        if length > 0x7FFFFFFF:
            raise Damaged(f"corrupt PNG: a {_name(kind)} chunk declares {length:,} bytes")
        end = pos + 12 + length
        if end > size:
            raise Damaged(f"the PNG is cut short (its {_name(kind)} chunk at byte {pos:,} needs {length:,} bytes; "
                          f"the file ends {max(0, size - pos - 8):,} bytes after its start)")
        if kind == b"IEND":
            return out
        if kind in (b"tEXt", b"zTXt", b"iTXt"):
            if length > left:
                raise Damaged(f"its {_name(kind)} text chunk holds {length:,} bytes; a figure's text entries hold at "
                              f"most {budget:,} bytes")
            data = fh.read(length)
            crc = fh.read(4)
            if zlib.crc32(kind + data) != int.from_bytes(crc, "big"):
                raise Damaged(f"corrupt PNG: the checksum of a {_name(kind)} chunk does not match its data")
            key, value, took = _png_entry(kind, data, left, budget)
            out[key] = value
            left -= took
        else:
            fh.seek(length + 4, os.SEEK_CUR)
        pos = end
    raise Damaged(f"the PNG has over {MAX_PNG_CHUNKS:,} chunks")


def _png_entry(kind: bytes, data: bytes, left: int, budget: int) -> tuple[str, str, int]:
    name = _name(kind)
    raw_key, sep, rest = data.partition(b"\0")
    if not sep or not 1 <= len(raw_key) <= 79:
        raise Damaged(f"corrupt PNG: a {name} chunk has no keyword")
    key = raw_key.decode("latin-1")
    if kind == b"tEXt":
        return key, rest.decode("latin-1"), len(rest)
    if kind == b"zTXt":
        if rest[:1] != b"\0":
            raise Damaged(f"corrupt PNG: the {name} chunk {key!r} names an unknown compression method")
        raw = _inflate(rest[1:], left, budget, name, key)
        return key, raw.decode("latin-1"), len(raw)
    if len(rest) < 2:
        raise Damaged(f"corrupt PNG: the {name} chunk {key!r} is cut short")
    compressed, method = rest[0], rest[1]
    _language, sep1, rest = rest[2:].partition(b"\0")
    _translated, sep2, raw = rest.partition(b"\0")
    if not (sep1 and sep2):
        raise Damaged(f"corrupt PNG: the {name} chunk {key!r} is cut short")
    if compressed:
        if method != 0:
            raise Damaged(f"corrupt PNG: the {name} chunk {key!r} names an unknown compression method")
        raw = _inflate(raw, left, budget, name, key)
    try:
        return key, raw.decode("utf-8"), len(raw)
    except UnicodeDecodeError as e:
        raise Damaged(f"corrupt PNG: the {name} chunk {key!r} is not UTF-8 text (byte {e.start:,})") from None


def _inflate(data: bytes, left: int, budget: int, name: str, key: str) -> bytes:
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, left + 1)
    except zlib.error as e:
        raise Damaged(f"corrupt PNG: the compressed {name} chunk {key!r} cannot be inflated ({e})") from None
    if len(out) > left:
        raise Damaged(f"its compressed {name} chunk {key!r} inflates to over {left:,} bytes (a decompression bomb?); "
                      f"a figure's text entries hold at most {budget:,} bytes")
    if not d.eof:
        raise Damaged(f"corrupt PNG: the compressed {name} chunk {key!r} is cut short")
    return out


# ------------------------------------------------------------------------------------------------------------ PDF
_INFO_REF = re.compile(rb"/Info[\0\t\n\f\r ]*(\d{1,10})[\0\t\n\f\r ]+(\d{1,5})[\0\t\n\f\r ]+R")
_WS = re.compile(rb"(?:[\0\t\n\f\r ]++|%[^\r\n]*+)*+")
_DELIM = rb"\0\t\n\f\r ()<>\[\]{}/%"
_NAME = re.compile(rb"/([^" + _DELIM + rb"]{0,255})")
_TOKEN = re.compile(rb"[^" + _DELIM + rb"]++")
_REF = re.compile(rb"\d{1,10}[\0\t\n\f\r ]++\d{1,5}[\0\t\n\f\r ]++R(?![^" + _DELIM + rb"])")
_HEX = re.compile(rb"<([0-9A-Fa-f\0\t\n\f\r ]*+)>")
_LITERAL_RUN = re.compile(rb"(?:[^\\()]++|\\.)++", re.DOTALL)
_ESCAPE = re.compile(rb"\\([0-7]{1,3}|\r\n|[\r\n]|.)", re.DOTALL)
_SIMPLE_ESCAPES = ((b"\\(", b"("), (b"\\)", b")"), (b"\\n", b"\n"), (b"\\r", b"\r"), (b"\\t", b"\t"),
                   (b"\\b", b"\b"), (b"\\f", b"\f"))
_ESCAPED = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"f": b"\f", b"\r\n": b"", b"\r": b"", b"\n": b""}


def pdf_info(fh: BinaryIO, size: int, budget: int) -> dict[str, str]:
    """The string entries of a PDF's document information (the trailer's ``/Info`` dictionary).

    matplotlib writes that dictionary last, just before the cross-reference table: it is looked for in a window at
    the end of the file that grows (1 MB, then four times as much) up to what a text of ``budget`` bytes can take
    written as a PDF string (UTF-16 with escapes: four bytes a byte)."""
    if b"%%EOF" not in _tail(fh, size, 1024):
        raise Damaged("the PDF is cut short (it does not end with %%EOF)")
    limit = min(size, 4 * budget + 8 * PDF_FIRST_WINDOW)
    n = min(size, PDF_FIRST_WINDOW)
    window = _tail(fh, size, n)
    ref = _last(_INFO_REF.finditer(window))
    if ref is None:
        return {}
    num, gen = int(ref.group(1)), int(ref.group(2))
    at_end = n - ref.start()  # where the trailer's reference lies, counted from the end of the file
    header = re.compile(rb"%d[\0\t\n\f\r ]++%d[\0\t\n\f\r ]++obj(?![^%s])" % (num, gen, _DELIM))  # a literal first
    while True:
        stop = len(window) - at_end
        found = _last(m for m in header.finditer(window, 0, stop)  # at the start of a line
                      if window[m.start() - 1:m.start()] in (b"\r", b"\n") or (m.start() == 0 and n == size))
        if found is not None:
            entries, _ = _pdf_dict(window, found.end(), stop, 0)
            return {k: v for k, v in entries.items() if isinstance(v, str)}
        if n >= limit:
            where = f" in its last {limit:,} bytes" if limit < size else ""
            raise Damaged(f"its document information (object {num}) cannot be found{where}")
        n = min(limit, 4 * n)
        window = _tail(fh, size, n)


def _last(matches) -> re.Match | None:
    m = None
    for m in matches:  # noqa: B007 - the last one is wanted
        pass
    return m


def _skip(data: bytes, i: int, end: int) -> int:
    return _WS.match(data, i, end).end()


def _pdf_dict(data: bytes, i: int, end: int, depth: int) -> tuple[dict[str, object], int]:
    i = _skip(data, i, end)
    if not data.startswith(b"<<", i, end):
        if i >= end:
            raise Damaged("the PDF's document information is cut short (an unclosed object)")
        raise Damaged("the PDF's document information is not a dictionary")
    i += 2
    out: dict[str, object] = {}
    for _ in range(MAX_PDF_ENTRIES):
        i = _skip(data, i, end)
        if i >= end:
            raise Damaged("the PDF's document information is cut short (an unclosed object)")
        if data.startswith(b">>", i, end):
            return out, i + 2
        m = _NAME.match(data, i, end)
        if m is None or (m.end() < end and data[m.end():m.end() + 1] not in b"\0\t\n\f\r ()<>[]{}/%"):
            raise Damaged(_no_key(data, i, end))
        key = re.sub(rb"#([0-9A-Fa-f]{2})", lambda h: bytes([int(h.group(1), 16)]), m.group(1)).decode("latin-1")
        value, i = _pdf_value(data, _skip(data, m.end(), end), end, depth)
        out[key] = value
    raise Damaged(f"the PDF's document information has over {MAX_PDF_ENTRIES:,} entries")


_OBJ_START = re.compile(rb"(\d{1,10})[\0\t\n\f\r ]++\d{1,5}[\0\t\n\f\r ]++obj\b|(endobj|stream|xref|trailer)\b")


def _no_key(data: bytes, i: int, end: int) -> str:
    m = _OBJ_START.match(data, i, end)
    if m is not None and m.group(1):
        return f"the PDF's document information is not closed (object {int(m.group(1))} begins inside it)"
    if m is not None:
        return f"the PDF's document information is not closed (no >> before its {m.group(2).decode()})"
    found = data[i:min(end, i + 24)].decode("latin-1")
    return f"the PDF's document information is malformed (found {found!r} where a key should be)"


def _pdf_value(data: bytes, i: int, end: int, depth: int) -> tuple[object, int]:
    """The value at ``i`` (a str for a string, None for anything else) and where it ends."""
    if i >= end:
        raise Damaged("the PDF's document information is cut short (an unclosed object)")
    if depth > MAX_PDF_NESTING:
        raise Damaged("the PDF's document information nests too deeply")
    c = data[i:i + 1]
    if c == b"(":
        j = _literal_end(data, i, end)
        return _pdf_text(_unescape(data[i + 1:j - 1])), j
    if data.startswith(b"<<", i, end):
        return None, _pdf_dict(data, i, end, depth + 1)[1]
    if c == b"<":
        m = _HEX.match(data, i, end)
        if m is None:
            raise Damaged("the PDF's document information holds a malformed or unclosed hex string")
        digits = re.sub(rb"[\0\t\n\f\r ]", b"", m.group(1))
        return _pdf_text(bytes.fromhex((digits + b"0" * (len(digits) % 2)).decode("ascii"))), m.end()
    if c == b"[":
        i += 1
        for _ in range(MAX_PDF_ENTRIES):
            i = _skip(data, i, end)
            if data.startswith(b"]", i, end):
                return None, i + 1
            _, i = _pdf_value(data, i, end, depth + 1)
        raise Damaged(f"the PDF's document information holds an array of over {MAX_PDF_ENTRIES:,} elements")
    if c == b"/":
        m = _NAME.match(data, i, end)
        return None, m.end()
    m = _REF.match(data, i, end) or _TOKEN.match(data, i, end)
    if m is None:
        raise Damaged(f"the PDF's document information is malformed (unexpected {c!r})")
    return None, m.end()


def _literal_end(data: bytes, i: int, end: int) -> int:
    """Where the literal string starting at ``data[i] == "("`` ends (after its closing parenthesis)."""
    depth, j = 0, i
    for _ in range(MAX_PDF_PARENS):
        c = data[j:j + 1] if j < end else b""
        if c == b"(":
            depth, j = depth + 1, j + 1
        elif c == b")":
            depth, j = depth - 1, j + 1
            if depth == 0:
                return j
        else:
            m = _LITERAL_RUN.match(data, j, end)
            if m is None:  # the end of the window, or a lone backslash there
                raise Damaged("the PDF's document information is cut short (an unclosed string)")
            j = m.end()
    raise Damaged(f"the PDF's document information holds a string with over {MAX_PDF_PARENS:,} parentheses")


def _unescape(s: bytes) -> bytes:
    """A literal string's bytes: matplotlib's escapes (backslash, parentheses, newline, return) by plain replacing,
    at C speed; other escapes (octal codes, line continuations) one by one, at most :data:`MAX_PDF_ESCAPES`."""
    if b"\\" not in s:
        return s
    for _ in range(8):
        mark = os.urandom(8)
        if mark not in s:
            t = s.replace(b"\\\\", mark)
            for a, b in _SIMPLE_ESCAPES:
                t = t.replace(a, b)
            if b"\\" not in t:
                return t.replace(mark, b"\\")
            break
    if s.count(b"\\") > MAX_PDF_ESCAPES:
        raise Damaged(f"the PDF's document information holds a string with over {MAX_PDF_ESCAPES:,} escapes")

    def one(m: re.Match) -> bytes:
        g = m.group(1)
        if g[0] in b"01234567":
            return bytes([int(g, 8) & 0xFF])
        return _ESCAPED.get(g, g)

    return _ESCAPE.sub(one, s)


def _pdf_text(b: bytes) -> str:
    try:
        if b.startswith(b"\xfe\xff"):
            return b[2:].decode("utf-16-be")
        if b.startswith(b"\xef\xbb\xbf"):
            return b[3:].decode("utf-8")
    except UnicodeDecodeError:
        raise Damaged("the PDF's document information holds a string that is not valid UTF-16 or UTF-8") from None
    return b.decode("latin-1")


# ------------------------------------------------------------------------------------------------------------ SVG
def svg_block(fh: BinaryIO, size: int, budget: int, start_tag: bytes, end_tag: bytes) -> ET.Element | None:
    """The element from ``start_tag`` to ``end_tag``, parsed alone (no DOCTYPE, so no entities can expand); None
    when the file has none. vitviz writes it right after the ``<svg>`` tag: the start is looked for in the first
    :data:`SVG_HEAD` bytes, the end in a window that grows up to what ``budget`` bytes of escaped text can take
    (five bytes a byte)."""
    if b"</svg>" not in _tail(fh, size, 1024):
        raise Damaged("the SVG is cut short (it does not end with </svg>)")
    fh.seek(0)
    head = fh.read(min(size, 1 << 20))
    start = head.find(start_tag, 0, SVG_HEAD)
    if start < 0:
        return None
    limit = min(size, 5 * budget + (1 << 20))
    stop = head.find(end_tag, start)
    while stop < 0 and len(head) < limit:
        searched = len(head) - len(end_tag)
        head += fh.read(min(limit - len(head), len(head)))
        stop = head.find(end_tag, searched)
    if stop < 0:
        raise Damaged(f"its vitviz metadata does not end within its first {len(head):,} bytes")
    try:
        return ET.fromstring(head[start:stop + len(end_tag)])
    except ET.ParseError as e:
        raise Damaged(f"its vitviz metadata is not valid XML ({e})") from None


# ------------------------------------------------------------------------------------------------------------ GIF
def gif_comment(fh: BinaryIO, size: int, budget: int) -> bytes:
    """The first comment extension before the GIF's first frame (where Pillow writes it), b"" when there is none."""
    if _tail(fh, size, 1) != b";":
        raise Damaged("the GIF is cut short (it does not end with its trailer)")
    fh.seek(0)
    head = _exactly(fh, 13, "its header")
    if head[:6] not in (b"GIF87a", b"GIF89a"):
        raise Damaged("not a GIF file")
    if head[10] & 0x80:
        fh.seek(3 << ((head[10] & 7) + 1), os.SEEK_CUR)
    walked, blocks = 0, 0
    while True:
        b = fh.read(1)
        if b in (b"\x2c", b"\x3b"):  # the first frame, or the end
            return b""
        if b != b"\x21":
            raise Damaged("the GIF is cut short" if not b else f"corrupt GIF: an unknown block 0x{b[0]:02x}")
        label = _exactly(fh, 1, "an extension")[0]
        data = bytearray() if label == 0xFE else None
        while True:
            n = _exactly(fh, 1, "an extension")[0]
            if n == 0:
                break
            walked, blocks = walked + n, blocks + 1
            if walked > budget or blocks > MAX_GIF_BLOCKS:
                raise Damaged(f"its extensions before the first frame hold over {min(walked, budget):,} bytes in "
                              f"{blocks:,} blocks; a figure's comment holds at most {budget:,} bytes")
            if data is not None:
                data += _exactly(fh, n, "a comment")
            else:
                fh.seek(n, os.SEEK_CUR)
        if data is not None:
            return bytes(data)


# ------------------------------------------------------------------------------------------------------------ MP4
def _boxes(buf: bytes, start: int, end: int):
    i = start
    for _ in range(MAX_BOXES):
        if i + 8 > end:
            return
        n, kind = struct.unpack_from(">I4s", buf, i)
        hdr = 8
        if n == 1 and i + 16 <= end:
            n, hdr = struct.unpack_from(">Q", buf, i + 8)[0], 16
        elif n == 0:
            n = end - i
        if n < hdr or i + n > end:
            raise Damaged(f"corrupt MP4: its {_name(kind)} box overruns the box holding it")
        yield kind, i + hdr, i + n
        i += n
    raise Damaged(f"corrupt MP4: over {MAX_BOXES:,} boxes in one box")


def mp4_comment(fh: BinaryIO, size: int, budget: int) -> bytes:
    """The comment ffmpeg writes (``moov/udta/meta/ilst/©cmt/data``), b"" when there is none; the top-level boxes
    are walked by seeking, only ``moov`` is read (at most ``budget`` and 16 MB besides)."""
    pos, moov = 0, None
    for _ in range(MAX_BOXES):
        if pos >= size:
            break
        fh.seek(pos)
        head = fh.read(16)
        if len(head) < 8:
            raise Damaged("the MP4 is cut short (inside a box header)")
        n, kind = struct.unpack_from(">I4s", head)
        hdr = 8
        if n == 1:
            if len(head) < 16:
                raise Damaged("the MP4 is cut short (inside a box header)")
            n, hdr = struct.unpack_from(">Q", head, 8)[0], 16
        elif n == 0:
            n = size - pos
        if n < hdr:
            raise Damaged(f"corrupt MP4: its {_name(kind)} box declares {n} bytes")
        if pos + n > size:
            raise Damaged(f"the MP4 is cut short (its {_name(kind)} box needs {pos + n - size:,} bytes more than the "
                          f"file holds)")
        if kind == b"moov":
            if n - hdr > budget + (16 << 20):
                raise Damaged(f"its moov box holds {n - hdr:,} bytes (at most {budget + (16 << 20):,} are read)")
            fh.seek(pos + hdr)
            moov = _exactly(fh, n - hdr, "its moov box")
        pos += n
    else:
        raise Damaged(f"corrupt MP4: over {MAX_BOXES:,} top-level boxes")
    if moov is None:
        return b""
    path = (b"udta", b"meta", b"ilst", b"\xa9cmt", b"data")
    start, end = 0, len(moov)
    for step in path:
        for kind, a, b in _boxes(moov, start, end):
            if kind == step:
                start, end = (a + 4 if kind == b"meta" else a), b  # meta is a full box: version and flags first
                break
        else:
            return b""
    return moov[start + 8:end]  # a data box: its type and locale, then the text

"""The corpus of bad session files and figures carrying state (File > Open session, :mod:`vitviz.document.state`),
and of the small classes of images and checkpoints that came with them (a PNG header declaring a width of 0, a torch
checkpoint named ``.safetensors``): through the library and, for a representative subset, through the window.

Figures: PNG text chunks that are decompression bombs (zTXt, iTXt) or larger than a session can be, 30000x30000
declared pixels, PNGs cut short anywhere (in the header, in a text chunk, before IEND), wrong checksums, corrupt
compressed text; PDFs with unclosed objects and strings, cut short, without their document information, nested too
deeply; SVGs cut short, with unclosed or hostile (entity) metadata; GIFs cut short or with a comment larger than a
session can be; MP4s whose boxes overrun. Session files: empty, a BOM, not UTF-8, UTF-16, numbers of thousands of
digits (integers and floats, in any field), deep nesting, millions of lists or values, wrong types, duplicate keys,
NaN, 10,000 missing images, more images than a session holds, over the size limit, a folder and a FIFO by a session's
name, and the largest session vitviz writes (10,000 images), which it must read.

The expectation of each refused case is exact: one error of the project's type (StateError for sessions and figures:
the one error path of reading them; ImageError; CheckpointError) whose message is ``"<the file>: <cause>"`` with
the case's words, on one line (the missing-images listing: at most SHOWN_PROBLEMS + 2 lines), never Python's own
advice; within :data:`TIMEOUT_S` seconds (each case runs in a thread: no hang) and with a traced memory peak
(tracemalloc: Python's allocations, where every byte these readers keep lives) under :data:`MEMORY_BOUND`. The
unusual but valid cases load. Through the window's Open session: exactly one error dialog, titled "Could not open the
session", naming the file and the cause, and the window as it was (image, result, options, model).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tracemalloc
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from bad_input_builders import Case, chunk, encode, logits_of, png_header, tiny_vit
from bounded_runs import bounded
from PIL import Image
from repo_paths import REPO

from vitviz.document import state as st
from vitviz.imaging import ImageError, load_image
from vitviz.model import CheckpointError, load_checkpoint, save_checkpoint
from vitviz.render import figures

TIMEOUT_S = 60.0  # a bound against a hang, not a speed: generous for a busy machine (speed is measured in bench/)
MEMORY_BOUND = 64 << 20
"""The traced memory peak of any one case (inputs of up to 20 MB; a session is at most 9.8 MiB, and the largest one
vitviz writes is among the cases)."""
ERRORS = {"session": st.StateError, "image": ImageError, "checkpoint": CheckpointError}
PNG_IEND = chunk(b"IEND", b"")


# -------------------------------------------------------------------------------------------------------- builders
def _photo(path: Path) -> str:
    rng = np.random.default_rng(3)
    Image.fromarray((rng.random((40, 56, 3)) * 255).astype(np.uint8)).save(path)
    return str(path)


def _doc(images: list[str], model: str = "demo", **fields) -> dict:
    return {"format": "vitviz-session", "version": 1, "written_by": "vitviz corpus", "model": {"ref": model},
            "images": [{"path": p} for p in images], "current": 0, "target": None,
            "options": {"view": "cls", "layer": 1, "opacity": 0.5}, **fields}


def _spec():
    return figures.FigureSpec(panels=(figures.Panel(photo=np.full((12, 16, 3), 90, np.uint8)),), title="corpus")


def _png_with(chunks: bytes, *, iend: bool = True) -> bytes:
    base = encode(Image.new("RGB", (4, 4), (20, 40, 60)), "PNG")
    return base[:-12] + chunks + (PNG_IEND if iend else b"")


def _ztxt(key: bytes, raw_stream: bytes) -> bytes:
    return chunk(b"zTXt", key + b"\0\0" + raw_stream)


def _itxt(key: bytes, text: bytes, compressed: bool) -> bytes:
    return chunk(b"iTXt", key + b"\0" + bytes([int(compressed), 0]) + b"\0\0" + text)


def _bomb_stream(n: int) -> bytes:
    """zlib data inflating to ``n`` spaces, made a megabyte at a time."""
    c = zlib.compressobj(9)
    block = b" " * (1 << 20)
    return b"".join([c.compress(block) for _ in range(n >> 20)] + [c.flush()])


def _pdf(objects: bytes, trailer: bytes, eof: bool = True) -> bytes:
    return b"%PDF-1.4\n" + objects + b"xref\n0 1\n0000000000 65535 f \ntrailer\n" + trailer + b"\nstartxref\n9\n" + \
        (b"%%EOF\n" if eof else b"")


def _gif_with_comment(n: int) -> bytes:
    """A GIF whose comment before its first frame holds ``n`` bytes (255-byte blocks)."""
    base = encode(Image.new("P", (4, 4)), "GIF")
    blocks = b"".join(b"\xff" + b"c" * 255 for _ in range(n // 255))
    i = base.index(b"\x2c")  # the first image descriptor
    return base[:i] + b"\x21\xfe" + blocks + b"\x00" + base[i:]


def _box(kind: bytes, payload: bytes, size: int | None = None) -> bytes:
    return struct.pack(">I", 8 + len(payload) if size is None else size) + kind + payload


def build(root: Path) -> tuple[list[Case], dict]:
    """Every case, written into ``root``; and what the window cases need (the checkpoint, a good session)."""
    root.mkdir(exist_ok=True)
    img = _photo(root / "photo.png")
    torch.manual_seed(0)
    model = tiny_vit(2)
    ckpt = save_checkpoint(model, root / "tiny.safetensors")
    ref = f"file:{ckpt}"
    good = _doc([img], model=ref)
    good_text = json.dumps(good)
    cases: list[Case] = []

    def add(name: str, data: bytes | None, needle: str, kind: str = "session", ok: bool = False) -> Path:
        p = root / name
        if data is not None:
            p.write_bytes(data)
        cases.append(Case(kind=kind, name=name, path=p, ok=ok, needle=needle))
        return p

    # ---- PNG figures
    bomb = _bomb_stream(64 << 20)
    add("png_ztxt_bomb.png", _png_with(_ztxt(b"vitviz.session", bomb)),
        "its compressed zTXt chunk 'vitviz.session' inflates to over")
    add("png_itxt_bomb.png", _png_with(_itxt(b"vitviz.session", bomb, True)),
        "its compressed iTXt chunk 'vitviz.session' inflates to over")
    add("png_many_small_bombs.png", _png_with(b"".join(_ztxt(b"k%d" % i, _bomb_stream(4 << 20)) for i in range(4))),
        "inflates to over")
    add("png_text_over_limit.png", _png_with(chunk(b"tEXt", b"vitviz.session\0" + b"x" * (12 << 20))),
        "its tEXt text chunk holds 12,582,927 bytes; a figure's text entries hold at most")
    add("png_text_declares_2gb.png", _png_with(struct.pack(">I", 0x7FFFFFFF) + b"tEXt" + b"k\0v"),
        "the PNG is cut short (its tEXt chunk")
    add("png_chunk_length_over_2gb.png", _png_with(struct.pack(">I", 0xFFFFFFF0) + b"tEXt" + b"k\0v"),
        "corrupt PNG: a tEXt chunk declares 4,294,967,280 bytes")
    add("png_30000x30000_no_session.png", png_header(30000, 30000) + PNG_IEND, "this figure carries no vitviz session")
    missing = str(root / "gone" / "photo.png")
    add("png_30000x30000_with_session.png",
        png_header(30000, 30000) + chunk(b"tEXt", b"vitviz.session\0" + json.dumps(_doc([missing])).encode())
        + PNG_IEND, f"cannot be opened: the image {missing} does not exist")
    add("png_bomb_header_without_iend.png", png_header(100000, 100000),
        "the PNG is cut short (it ends before its IEND chunk)")
    fig = figures.save(_spec(), root / "exported.png", scale="native", metadata={st.METADATA_KEY: good_text})
    data = fig.read_bytes()
    add("png_truncated_half.png", data[:len(data) // 2], "the PNG is cut short")
    text_at = data.index(b"vitviz.session")
    add("png_truncated_in_text.png", data[:text_at + 20], "the PNG is cut short (its ")
    add("png_without_iend.png", data[:-12], "the PNG is cut short (it ends before its IEND chunk)")
    add("png_signature_only.png", data[:8], "the PNG is cut short (it ends before its IEND chunk)")
    add("png_first_chunk_not_ihdr.png", data[:8] + chunk(b"tEXt", b"k\0v") + data[8:],
        "not a valid PNG (its first chunk is tEXt, not IHDR)")
    bad_crc = bytearray(_png_with(chunk(b"tEXt", b"vitviz.session\0" + good_text.encode())))
    bad_crc[-13] ^= 0xFF
    add("png_text_bad_crc.png", bytes(bad_crc), "corrupt PNG: the checksum of a tEXt chunk does not match its data")
    add("png_ztxt_garbage.png", _png_with(_ztxt(b"vitviz.session", b"\x00garbage" * 10)),
        "corrupt PNG: the compressed zTXt chunk 'vitviz.session' cannot be inflated")
    add("png_ztxt_unfinished.png", _png_with(_ztxt(b"vitviz.session", zlib.compress(good_text.encode())[:-20])),
        "corrupt PNG: the compressed zTXt chunk 'vitviz.session' is cut short")
    add("png_itxt_not_utf8.png", _png_with(_itxt(b"vitviz.session", b"{\xff\xfe}", False)),
        "corrupt PNG: the iTXt chunk 'vitviz.session' is not UTF-8 text (byte 1)")
    add("png_session_not_json.png", _png_with(chunk(b"tEXt", b"vitviz.session\0this is not json")),
        "not a session file: not valid JSON")
    long_doc = good_text.replace('"layer": 1', '"layer": ' + "7" * 5000)
    add("png_session_number_too_long.png", _png_with(chunk(b"tEXt", b"vitviz.session\0" + long_doc.encode())),
        "options.layer: number too long (5,000 characters")
    plain = root / "plain.png"
    Image.new("RGB", (8, 8)).save(plain)
    add("plain.png", None, "this figure carries no vitviz session")

    # ---- PDF figures
    unclosed = b"".join(b"%d 0 obj\n<< /Title (x) /Next %d 0 R\n" % (i, i + 1) for i in range(1, 200_000))
    add("pdf_unclosed_objects.pdf", _pdf(unclosed, b"<< /Size 9 /Info 1 0 R >>"),
        "the PDF's document information is not closed (object 2 begins inside it)")
    add("pdf_one_object_opened_again_and_again.pdf",
        _pdf(b"1 0 obj\n<< /Title (x)\n" * 100_000, b"<< /Info 1 0 R >>"),
        "the PDF's document information is not closed (no >> before its xref)")
    add("pdf_unclosed_objects_no_eof.pdf", b"%PDF-1.4\n" + unclosed,
        "the PDF is cut short (it does not end with %%EOF)")
    add("pdf_last_object_unclosed.pdf", _pdf(b"1 0 obj\n<< /Title (x) /Author (y)\nendobj\n", b"<< /Info 1 0 R >>"),
        "the PDF's document information is not closed (no >> before its endobj)")
    add("pdf_info_malformed.pdf", _pdf(b"1 0 obj\n<< /Title (x) 12 >>\nendobj\n", b"<< /Info 1 0 R >>"),
        "the PDF's document information is malformed (found '12 >>\\nendobj\\nxref\\n0 1\\n00' where a key should be)")
    add("pdf_unclosed_string.pdf", _pdf(b"1 0 obj\n<< /vitviz.session (" + b"{" * 200_000 + b"\n",
                                        b"<< /Info 1 0 R >>"),
        "the PDF's document information is cut short (an unclosed string)")
    add("pdf_info_object_missing.pdf", _pdf(b"1 0 obj\n<< /Type /Catalog >>\nendobj\n", b"<< /Info 99 0 R >>"),
        "its document information (object 99) cannot be found")
    add("pdf_info_not_a_dictionary.pdf", _pdf(b"1 0 obj\n42\nendobj\n", b"<< /Info 1 0 R >>"),
        "the PDF's document information is not a dictionary")
    add("pdf_info_nested_too_deeply.pdf", _pdf(b"1 0 obj\n<< /A " + b"[" * 100 + b"]" * 100 + b" >>\nendobj\n",
                                               b"<< /Info 1 0 R >>"),
        "the PDF's document information nests too deeply")
    add("pdf_without_info.pdf", _pdf(b"1 0 obj\n<< /Type /Catalog >>\nendobj\n", b"<< /Root 1 0 R >>"),
        "this figure carries no vitviz session")
    pdf = figures.save(_spec(), root / "exported.pdf", metadata={st.METADATA_KEY: good_text}).read_bytes()
    add("pdf_truncated_half.pdf", pdf[:len(pdf) // 2], "the PDF is cut short (it does not end with %%EOF)")
    add("pdf_session_with_huge_number.pdf",
        _pdf(b"1 0 obj\n<< /vitviz.session (" + long_doc.encode() + b") >>\nendobj\n", b"<< /Info 1 0 R >>"),
        "options.layer: number too long (5,000 characters")

    # ---- SVG figures
    svg = figures.save(_spec(), root / "exported.svg", metadata={st.METADATA_KEY: good_text}).read_bytes()
    add("svg_truncated_half.svg", svg[:len(svg) // 2], "the SVG is cut short (it does not end with </svg>)")
    start = svg.index(b'<metadata id="vitviz">')
    add("svg_metadata_unclosed.svg", svg[:start + 40] + b"\n" + b" " * 2000 + b"</svg>\n",
        "its vitviz metadata does not end within its first")
    lol = b'<?xml version="1.0"?>\n<!DOCTYPE svg [<!ENTITY a "aaaaaaaaaa">' + b"".join(
        b'<!ENTITY %s "%s">' % (bytes([98 + i]), (b"&" + bytes([97 + i]) + b";") * 10) for i in range(9)) + b"]>\n"
    add("svg_entity_bomb.svg", lol + b'<svg xmlns="http://www.w3.org/2000/svg"><metadata id="vitviz"><x>&j;</x>'
                                     b"</metadata></svg>\n", "its vitviz metadata is not valid XML (undefined entity")
    add("svg_metadata_not_xml.svg", svg[:start] + b'<metadata id="vitviz"><a><b></a></metadata>' + svg[start:],
        "its vitviz metadata is not valid XML (mismatched tag")

    # ---- GIF and MP4 figures
    gif = figures.save_animation([_spec(), _spec()], root / "exported.gif", scale="native",
                                 metadata={st.METADATA_KEY: good_text}).read_bytes()
    add("gif_truncated_half.gif", gif[:len(gif) // 2], "the GIF is cut short (it does not end with its trailer)")
    add("gif_comment_over_limit.gif", _gif_with_comment(12 << 20),
        "its extensions before the first frame hold over")
    add("gif_without_comment.gif", encode(Image.new("P", (4, 4)), "GIF"), "this figure carries no vitviz session")
    ftyp = _box(b"ftyp", b"isom\0\0\2\0isomiso2mp41")
    add("mp4_truncated.mp4", ftyp + _box(b"mdat", b"\0" * 100, size=1 << 30),
        "the MP4 is cut short (its mdat box needs")
    add("mp4_box_overrun.mp4", ftyp + _box(b"moov", _box(b"udta", b"\0" * 8, size=4096)),
        "corrupt MP4: its udta box overruns the box holding it")
    comment = json.dumps({st.METADATA_KEY: long_doc}).encode()
    ilst = _box(b"ilst", _box(b"\xa9cmt", _box(b"data", b"\0\0\0\1\0\0\0\0" + comment)))
    add("mp4_session_with_huge_number.mp4", ftyp + _box(b"moov", _box(b"udta", _box(b"meta", b"\0" * 4 + ilst))),
        "options.layer: number too long (5,000 characters")

    # ---- session files
    add("empty.vitviz.json", b"", "not a session file: not valid JSON (line 1, column 1")
    add("bom.vitviz.json", b"\xef\xbb\xbf" + good_text.encode(), "", ok=True)
    add("not_utf8.vitviz.json", good_text.encode().replace(b"cls", b"cl\xe9"), "not a session file: not UTF-8 text")
    add("utf16.vitviz.json", good_text.encode("utf-16"), "not a session file: UTF-16 text (a session file is UTF-8)")
    add("binary.vitviz.json", bytes(range(256)) * 4, "not a session file: not UTF-8 text (byte 128)")
    add("huge_integer.vitviz.json", long_doc.encode(),
        "options.layer: number too long (5,000 characters; a session's numbers have at most 40)")
    add("huge_float.vitviz.json", good_text.replace('"opacity": 0.5', '"opacity": 0.' + "5" * 5000).encode(),
        "options.opacity: number too long (5,002 characters")
    add("huge_exponent.vitviz.json", good_text.replace('"opacity": 0.5', '"opacity": 1e' + "9" * 300).encode(),
        "options.opacity: number too long (302 characters")
    add("huge_number_in_a_list.vitviz.json",
        json.dumps(_doc([img], compare={"layout": "views", "layers": [1, 2]})).replace("[1, 2]", "[1, " + "2" * 999
                                                                                        + "]").encode(),
        "compare.layers[1]: number too long (999 characters")
    add("huge_number_alone.vitviz.json", b"9" * 100_000, "the file: number too long (100,000 characters")
    add("deep_lists.vitviz.json", b"[" * 100_000 + b"]" * 100_000, "not a valid session: nested too deeply")
    add("deep_objects.vitviz.json", b'{"a":' * 40 + b"1" + b"}" * 40, "not a valid session: nested too deeply")
    add("million_lists.vitviz.json", b'{"x": [' + b"[]," * 3_000_000 + b"[]]}",
        "not a valid session: it holds 3,000,003 lists and objects (a session holds at most 11,000")
    add("million_values.vitviz.json", b'{"x": [' + b"0," * 4_000_000 + b"0]}",
        "not a valid session: it holds 4,000,001 values (a session holds at most 50,000)")
    add("wrong_type.vitviz.json", good_text.replace('"layer": 1', '"layer": "two"').encode(),
        "not a valid session: options.layer must be an integer, not a string")
    add("images_an_object.vitviz.json", json.dumps({**good, "images": {"path": img}}).encode(),
        "not a valid session: images must be a list, not an object")
    add("duplicate_keys.vitviz.json", b'{"format": "vitviz-session", "format": "x"}',
        "not a valid session: the key 'format' appears twice in one object")
    add("nan.vitviz.json", good_text.replace('"opacity": 0.5', '"opacity": NaN').encode(),
        "not a valid session: NaN is not a number a session can hold")
    many = [str(root / "gone" / f"image_{i:05d}.png") for i in range(10_000)]
    add("missing_10000_images.vitviz.json", json.dumps(_doc(many)).encode(),
        f"cannot be opened:\n- the image {many[0]} does not exist")
    add("too_many_images.vitviz.json", json.dumps(_doc(many + [img])).encode(),
        "not a valid session: images has 10001 entries (at most 10000)")
    with open(root / "over_the_limit.vitviz.json", "wb") as fh:
        fh.truncate(st.MAX_BYTES + 1)
    add("over_the_limit.vitviz.json", None, "is 9.8 MiB; a session file is at most 9.8 MiB")
    (root / "folder.vitviz.json").mkdir()
    add("folder.vitviz.json", None, "is a folder, not a session file")
    os.mkfifo(root / "fifo.vitviz.json")
    add("fifo.vitviz.json", None, "is not a regular file")
    add("missing.vitviz.json", None, "file does not exist")
    refs = [st.ImageRef(path=str(root / "far" / f"{'long-folder-name-' * 6}{i:05d}.png"), sha256="ab" * 32)
            for i in range(st.MAX_IMAGES)]
    (root / "far").mkdir()
    for r in refs:  # the images exist (empty files: only found, never read)
        Path(r.path).touch()
    largest = st.SessionState(model=ref, images=tuple(refs), current=0, options=st.from_dict(good).options)
    st.save_state(largest, root / "largest_vitviz_writes.vitviz.json")
    add("largest_vitviz_writes.vitviz.json", None, "", ok=True)
    # 10,000 entries of about 990 bytes (path, relative path, digest): a file just under the byte limit
    deep = root / "near" / ("d" * 200) / ("e" * ((990 - 121 - len(str(root))) // 2 - 218))
    deep.mkdir(parents=True)
    refs = [st.ImageRef(path=str(deep / f"f_{i:05d}.png"), sha256="cd" * 32) for i in range(st.MAX_IMAGES)]
    for r in refs:
        Path(r.path).touch()
    at_limit = st.save_state(replace(largest, images=tuple(refs)), root / "at_the_byte_limit.vitviz.json")
    assert st.MAX_BYTES - (1 << 20) < at_limit.stat().st_size <= st.MAX_BYTES, at_limit.stat().st_size
    add("at_the_byte_limit.vitviz.json", None, "", ok=True)

    # ---- images and checkpoints (the class-8 files)
    add("zero_width.png", png_header(0, 480) + PNG_IEND, "the PNG header declares a width of 0", kind="image")
    add("zero_height.png", png_header(640, 0) + PNG_IEND, "the PNG header declares a height of 0", kind="image")
    torch.save(model.state_dict(), root / "torch_zip.safetensors")
    add("torch_zip.safetensors", None, "", kind="checkpoint", ok=True)
    torch.save(model.state_dict(), root / "torch_legacy.safetensors", _use_new_zipfile_serialization=False)
    add("torch_legacy.safetensors", None, "", kind="checkpoint", ok=True)
    zip_bytes = (root / "torch_zip.safetensors").read_bytes()
    add("torch_zip_truncated.safetensors", zip_bytes[:len(zip_bytes) // 2],
        "truncated or corrupt file", kind="checkpoint")
    assert len({c.name for c in cases}) == len(cases)
    return cases, {"ckpt": ckpt, "image": img, "model": model, "good": good}


# -------------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("state_files"))


def _attempt(case: Case, extra: dict):
    if case.kind == "session":
        return st.locate(st.read_state(case.path))
    if case.kind == "image":
        return load_image(case.path)
    return load_checkpoint(case.path, num_heads=2)


def traced(fn, timeout: float = TIMEOUT_S) -> tuple[dict, float, int]:
    """``fn()`` in a thread (:func:`bounded_runs.bounded`): what it returned or raised, the seconds it took and its
    traced memory peak (bytes)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        out = bounded(fn, timeout)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return out, out["seconds"], peak


def check_refusal(case: Case, msg: str) -> None:
    """``"<the file>: <cause>"`` with the case's words, on one line (a listing of missing images: a few lines)."""
    assert msg.startswith(f"{case.path}: "), (case.name, msg[:300])
    assert case.needle in msg, (case.name, case.needle, msg[:600])
    most = st.SHOWN_PROBLEMS + 2 if "cannot be opened:\n" in msg else 1
    assert len(msg.splitlines()) <= most and len(msg) < 2000, (case.name, len(msg), msg[:600])
    assert "set_int_max_str_digits" not in msg and "Traceback" not in msg, (case.name, msg[:600])


# ----------------------------------------------------------------------------------------------------- the library
def test_the_corpus_is_large_and_mixed(built):
    cases, _ = built
    kinds = {k: sum(c.kind == k for c in cases) for k in ERRORS}
    assert len(cases) >= 60 and kinds["session"] >= 55, kinds
    names = " ".join(c.name for c in cases)
    for word in ("bomb", "30000x30000", "truncated", "unclosed", "huge", "deep", "wrong_type", "missing_10000",
                 "not_utf8", "bom", "empty", ".png", ".pdf", ".svg", ".gif", ".mp4"):
        assert word in names, word


def test_every_case_through_the_library_bounded_in_time_and_memory(built):
    cases, extra = built
    report = []
    for case in cases:
        out, seconds, peak = traced(lambda c=case: _attempt(c, extra))
        report.append((case.name, seconds, peak))
        assert peak < MEMORY_BOUND, f"{case.name}: traced memory peak {peak / 2**20:.0f} MiB"
        if case.ok:
            assert "error" not in out, f"{case.name}: {out.get('error')!r}"
            continue
        e = out.get("error")
        assert e is not None, f"{case.name}: accepted"
        assert type(e) is ERRORS[case.kind], f"{case.name}: {type(e).__name__}: {e}"
        check_refusal(case, str(e))
    slowest = sorted(report, key=lambda r: -r[1])[:3]
    heaviest = sorted(report, key=lambda r: -r[2])[:3]
    print(f"\n{len(report)} cases; slowest " + ", ".join(f"{n} {s:.2f} s" for n, s, _ in slowest)
          + "; largest peaks " + ", ".join(f"{n} {p / 2**20:.1f} MiB" for n, _, p in heaviest))


def test_the_valid_ones_load_what_they_hold(built):
    cases, extra = built
    by_name = {c.name: c for c in cases}
    state = st.read_state(by_name["bom.vitviz.json"].path)
    assert state.paths == [extra["image"]] and state.options.layer == 1
    largest = st.read_state(by_name["largest_vitviz_writes.vitviz.json"].path)
    assert len(largest.images) == st.MAX_IMAGES and largest.images[-1].sha256 == "ab" * 32
    assert by_name["largest_vitviz_writes.vitviz.json"].path.stat().st_size > 1 << 20  # over the old 1 MB limit
    for name in ("torch_zip.safetensors", "torch_legacy.safetensors"):  # the content decides, not the name
        m = load_checkpoint(by_name[name].path, num_heads=2)
        torch.testing.assert_close(logits_of(m), logits_of(extra["model"]))


def test_a_session_with_huge_declared_pixels_is_read_without_decoding_them(built):
    cases, _ = built
    case = next(c for c in cases if c.name == "png_30000x30000_with_session.png")
    state = st.read_state(case.path)  # 30000x30000 pixels declared: only the chunks are walked
    assert state.images[0].path.endswith("photo.png")


# ------------------------------------------------------------------------------------------------------ the window
WINDOW_CASES = ("png_ztxt_bomb.png", "png_30000x30000_no_session.png", "png_truncated_half.png",
                "png_text_bad_crc.png", "pdf_unclosed_objects.pdf", "pdf_truncated_half.pdf",
                "svg_truncated_half.svg", "gif_truncated_half.gif", "mp4_truncated.mp4", "empty.vitviz.json",
                "not_utf8.vitviz.json", "huge_integer.vitviz.json", "deep_lists.vitviz.json",
                "million_lists.vitviz.json", "wrong_type.vitviz.json", "missing_10000_images.vitviz.json",
                "fifo.vitviz.json", "folder.vitviz.json")


@pytest.fixture
def win(qtbot, built, tmp_path, monkeypatch):
    pytest.importorskip("pytestqt")
    sys.path.insert(0, str(REPO / "tests" / "gui"))
    from gui_helpers import Recorder
    from PySide6.QtCore import QSettings

    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow

    _, extra = built
    monkeypatch.setenv("VITVIZ_SETTINGS", str(tmp_path / "default-settings.ini"))
    make_app()
    w = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat), model=extra["model"],
                   model_key=f"file:{extra['ckpt']}", dialogs=Recorder())
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        w.open_images([extra["image"]])
    w.set_view("rollout")
    yield w
    w.close()


def _screen(w) -> tuple:
    s = w.session
    return (s.result, s.result.source, list(s.images), s.options, w.model, w.model_key, s.current_map().copy())


def _unchanged(w, before: tuple) -> None:
    now = _screen(w)
    assert now[:6] == before[:6]
    np.testing.assert_array_equal(now[6], before[6])


def test_a_subset_through_the_window_one_dialog_each_and_the_window_unchanged(qtbot, win, built):
    cases, _ = built
    by_name = {c.name: c for c in cases}
    before = _screen(win)
    for name in WINDOW_CASES:
        case = by_name[name]
        win.dialogs.errors.clear()
        assert not win.open_session(str(case.path)), name  # refused before anything starts
        qtbot.wait(20)  # anything queued would arrive now
        assert len(win.dialogs.errors) == 1, (name, win.dialogs.errors)
        title, text = win.dialogs.errors[0]
        assert title == "Could not open the session", (name, title)
        check_refusal(case, text)
        _unchanged(win, before)
        assert not win.runner.is_busy()


def test_a_failure_on_the_worker_shows_one_dialog(qtbot, win, built, tmp_path):
    """The file is fine; its target is not a class of the model (found on the worker): one dialog, not two."""
    _, extra = built
    before = _screen(win)
    doc = {**extra["good"], "target": 42}
    path = tmp_path / "target.vitviz.json"
    path.write_text(json.dumps(doc))
    win.dialogs.errors.clear()
    with qtbot.waitSignal(win.errorShown, timeout=30000):
        assert win.open_session(str(path))
    qtbot.waitUntil(lambda: not win.runner.is_busy(), timeout=30000)
    qtbot.wait(300)  # a second dialog would come now
    assert len(win.dialogs.errors) == 1, win.dialogs.errors
    title, text = win.dialogs.errors[0]
    assert title == "Could not open the session" and str(path) in text and "target class 42" in text
    _unchanged(win, before)


def test_the_missing_images_dialog_is_a_summary(qtbot, win, built):
    cases, _ = built
    case = next(c for c in cases if c.name == "missing_10000_images.vitviz.json")
    win.dialogs.errors.clear()
    assert not win.open_session(str(case.path))
    (_title, text), = win.dialogs.errors
    lines = text.splitlines()
    assert len(lines) == st.SHOWN_PROBLEMS + 2 and lines[-1] == "- and 9,995 more images cannot be found"
    assert len(text) < 1000

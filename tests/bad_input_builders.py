"""The corpus of bad and unusual inputs: its case type (:class:`Case`, one input and what must happen to it) and the
builders shared by the corpus (tests/corpus/) and the unit tests of single behaviours (test_bad_images.py,
model/test_bad_checkpoints.py): images (PNG headers declaring any size, encodings, a corpus of odd files), pipes
fed by a thread, tiny checkpoints (native files with edited settings, hand-written Hugging Face folders, raw
safetensors bytes) and the tables of malformed headers and settings with the words their errors must contain.
"""

from __future__ import annotations

import errno
import io
import json
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

from vitviz.demo import sample_images
from vitviz.model import ViT, save_checkpoint
from vitviz.model.checkpoints import read_raw
from vitviz.model.spec import ModelSpec


@dataclass(frozen=True)
class Case:
    """One input of the corpus.

    Attributes:
        kind: ``"image"``, ``"checkpoint"`` (a file or a Hugging Face folder) or ``"export"`` (a PNG target).
        name: a unique id for messages.
        path: the input.
        ok: True when the input is unusual but valid (it must load), False when it must be refused.
        needle: words the refusal must contain after the file name (the cause).
        feed: for a FIFO: the bytes a writer thread feeds it once a reader opens it (None: nobody writes).
        batch: whether it runs in the command line's batched call (False: a FIFO nobody writes to, which costs its
            own call the full stream timeout).
    """

    kind: str
    name: str
    path: Path
    ok: bool
    needle: str = ""
    feed: bytes | None = None
    batch: bool = True



# ----------------------------------------------------------------------------------------------------------- images
def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_header(width: int, height: int, *, bit_depth: int = 8, color_type: int = 2, idat: bytes = b"") -> bytes:
    """A PNG that declares ``width x height`` but carries (almost) no pixel data: a decompression-bomb header."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat or zlib.compress(b"\0" * 64))


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def feed_fifo(path: Path, data: bytes, delay: float = 0.0, timeout: float | None = None) -> threading.Thread:
    """A thread that writes ``data`` into the FIFO ``path`` once a reader has opened it (after ``delay`` seconds).

    The writer never blocks for good: it looks for a reader (a non-blocking open) until one comes, or for at most
    ``timeout`` seconds when given (None: for as long as the process lives, in a daemon thread, so that a busy machine
    that reaches the FIFO late still finds its writer), and stops quietly when the reader goes away mid-write.
    """
    def write():
        if delay:
            threading.Event().wait(delay)
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.005
        while True:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while nobody reads
                break
            except OSError as e:
                if e.errno != errno.ENXIO or (deadline is not None and time.monotonic() > deadline):
                    return
                threading.Event().wait(pause)
                pause = min(pause * 2, 0.1)
        os.set_blocking(fd, True)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError:  # EPIPE: the reader stopped reading (a size cap, an error)
            pass
        finally:
            os.close(fd)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


def image_corpus(root: Path) -> dict[str, Path | tuple[Path, bytes]]:
    """name -> path (or (fifo path, bytes to feed it)). At least 30 bad or unusual inputs."""
    rng = np.random.default_rng(7)
    photo = Image.open(sample_images()[1]).convert("RGB")
    png = encode(photo, "PNG")
    jpg = encode(photo, "JPEG", quality=90)
    files: dict[str, bytes] = {
        "ok.png": png,
        "truncated.png": png[: len(png) // 2],
        "truncated.jpg": jpg[: len(jpg) // 3],
        "zero_bytes.png": b"",
        "text_file.png": b"this is a text file, not a picture\n" * 10,
        "random_bytes.png": rng.integers(0, 256, 700, dtype=np.uint8).tobytes(),
        "png_signature_only.png": png[:8],
        "png_bad_crc.png": png[:33] + bytes([png[33] ^ 0xFF]) + png[34:],
        "jpeg_soi_only.jpg": b"\xff\xd8\xff",
        "gray16.png": encode(Image.fromarray(np.asarray(photo.convert("L")).astype(np.uint16) * 257), "PNG"),
        "float.tif": encode(Image.fromarray(np.asarray(photo.convert("L"), np.float32) / 255.0, "F"), "TIFF"),
        "int32.tif": encode(Image.fromarray(np.asarray(photo.convert("L")).astype(np.int32) * 1000, "I"), "TIFF"),
        "palette_transparent.png": encode(photo.convert("P"), "PNG", transparency=0),
        "cmyk.jpg": encode(photo.convert("CMYK"), "JPEG"),
        "la.png": encode(photo.convert("LA"), "PNG"),
        "rgba.png": encode(photo.convert("RGBA"), "PNG"),
        "bilevel.png": encode(photo.convert("1"), "PNG"),
        "one_pixel.png": encode(Image.new("RGB", (1, 1), (9, 9, 9)), "PNG"),
        "bomb_header.png": png_header(100000, 100000),
        "bomb_header_bilevel.png": png_header(60000, 60000, bit_depth=1, color_type=0),
        "zero_width_header.png": png_header(0, 10),
        "strip_1x50000.png": encode(Image.new("L", (1, 50000), 77), "PNG"),
        "strip_50000x1.png": encode(Image.new("L", (50000, 1), 77), "PNG"),
        "animated.gif": encode(photo, "GIF", save_all=True, append_images=[photo.rotate(90)]),
        "gif_header_only.gif": b"GIF89a\x10\x00\x10\x00\x00\x00\x00",
        "bmp_huge_header.bmp": b"BM" + struct.pack("<IHHI", 70, 0, 0, 54) +
                               struct.pack("<IiiHHIIiiII", 40, 90000, 90000, 1, 24, 0, 0, 0, 0, 0, 0) + b"\0" * 16,
        "drawing.svg": b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="5"/></svg>',
        "photo.heic": png,  # a PNG with the wrong name: the content decides
        "webp.webp": encode(photo, "WEBP", lossless=True),
        "no_suffix": png,
    }
    exif_img = photo.copy()
    exif = exif_img.getexif()
    exif[0x0112] = 6
    files["exif_rotated.jpg"] = encode(exif_img, "JPEG", exif=exif)
    out: dict[str, Path | tuple[Path, bytes]] = {}
    for name, data in files.items():
        (root / name).write_bytes(data)
        out[name] = root / name
    (root / "folder.png").mkdir()
    out["folder.png"] = root / "folder.png"
    out["missing.png"] = root / "missing.png"
    (root / "devnull.png").symlink_to(os.devnull)
    out["devnull.png"] = root / "devnull.png"
    (root / "loop.png").symlink_to(root / "loop.png")
    out["loop.png"] = root / "loop.png"
    (root / "dangling.png").symlink_to(root / "nowhere.png")
    out["dangling.png"] = root / "dangling.png"
    (root / "not_a_dir").write_bytes(b"x")
    out["under_a_file.png"] = root / "not_a_dir" / "x.png"
    unreadable = root / "unreadable.png"
    unreadable.write_bytes(png)
    unreadable.chmod(0)  # refused for a normal user; root reads it anyway (then it is simply a valid image)
    out["unreadable.png"] = unreadable
    fifo = root / "fifo.png"
    os.mkfifo(fifo)
    out["fifo.png"] = (fifo, png)
    return out


# ------------------------------------------------------------------------------------------------------ checkpoints
def tiny_vit(depth: int = 1, **kw) -> ViT:
    torch.manual_seed(0)
    m = ViT(img_size=16, patch_size=8, embed_dim=8, depth=depth, num_heads=2, num_classes=3, **kw).eval()
    m.spec = ModelSpec(config=m.config, labels=("ant", "bee", "cat"), name="tiny")
    return m


def logits_of(m: ViT) -> torch.Tensor:
    with torch.no_grad():
        return m(torch.linspace(-1, 1, 2 * 3 * 16 * 16).reshape(2, 3, 16, 16))


F32x2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


def st_bytes(header, data: bytes = b"\0" * 8, length: int | None = None) -> bytes:
    hb = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(hb) if length is None else length) + hb + data


HEADER_CASES = {
    "offsets-three": ({"w": {**F32x2, "data_offsets": [0, 4, 8]}}, b"\0" * 8, "data_offsets"),
    "offsets-one": ({"w": {**F32x2, "data_offsets": [8]}}, b"\0" * 8, "data_offsets"),
    "offsets-strings": ({"w": {**F32x2, "data_offsets": ["0", "8"]}}, b"\0" * 8, "data_offsets"),
    "offsets-null": ({"w": {**F32x2, "data_offsets": None}}, b"\0" * 8, "data_offsets"),
    "offsets-missing": ({"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8, "data_offsets"),
    "offsets-reversed": ({"w": {**F32x2, "data_offsets": [8, 0]}}, b"\0" * 8, "data_offsets"),
    "offsets-negative": ({"w": {**F32x2, "data_offsets": [-8, 0]}}, b"\0" * 8, "data_offsets"),
    "offsets-floats": ({"w": {**F32x2, "data_offsets": [0.0, 8.0]}}, b"\0" * 8, "data_offsets"),
    "offsets-bools": ({"w": {**F32x2, "data_offsets": [False, True]}}, b"\0" * 8, "data_offsets"),
    "offsets-past-end": ({"w": {**F32x2, "data_offsets": [0, 8]}}, b"\0" * 4, "truncated"),
    "offsets-far-past-end": ({"w": {"dtype": "F32", "shape": [2**40], "data_offsets": [0, 2**42]}}, b"", "truncated"),
    "dtype-unknown": ({"w": {**F32x2, "dtype": "F33"}}, b"\0" * 8, "unknown dtype"),
    "dtype-number": ({"w": {**F32x2, "dtype": 32}}, b"\0" * 8, "unknown dtype"),
    "dtype-missing": ({"w": {"shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "unknown dtype"),
    "shape-string": ({"w": {**F32x2, "shape": "2"}}, b"\0" * 8, "shape"),
    "shape-negative": ({"w": {**F32x2, "shape": [-2]}}, b"\0" * 8, "shape"),
    "shape-vs-size": ({"w": {**F32x2, "shape": [3]}}, b"\0" * 8, "needs 12 bytes"),
    "entry-list": ({"w": [0, 8]}, b"\0" * 8, "expected an object"),
    "overlap": ({"a": F32x2, "b": F32x2}, b"\0" * 8, "overlaps"),
    "gap": ({"a": F32x2, "b": {**F32x2, "data_offsets": [12, 20]}}, b"\0" * 20, "gap"),
    "trailing-data": ({"a": F32x2}, b"\0" * 12, "holds 12"),
    "metadata-numbers": ({"__metadata__": {"x": 1}, "a": F32x2}, b"\0" * 8, "__metadata__"),
    "metadata-list": ({"__metadata__": ["x"], "a": F32x2}, b"\0" * 8, "__metadata__"),
    "json-list": ([F32x2], b"\0" * 8, "JSON list"),
    "json-string": (b'"w"', b"", "JSON string"),
    "not-json": (b"{this is not json}", b"\0" * 8, "not JSON"),
    "not-utf8": (b"{\xff\xfe}", b"", "not JSON"),
}


def native_starting_with(folder: Path, prefix: bytes, depth: int, name: str = "x80.safetensors"):
    """A native checkpoint (tensors and metadata as save_checkpoint writes them) whose first bytes are ``prefix``,
    reached by padding an extra metadata entry."""
    m = tiny_vit(depth)
    src = save_checkpoint(m, folder / f"src-{name}")
    meta = read_raw(src).metadata
    tensors = {k: v.contiguous() for k, v in m.state_dict().items()}
    path = folder / name
    save_file(tensors, str(path), metadata={**meta, "pad": ""})
    base = int.from_bytes(path.read_bytes()[:8], "little")  # header length without padding (a multiple of 8)
    # the header length is the first 8 bytes (little-endian): aim the padding at the wanted low bytes (a header
    # grows with the settings saved, so counting up from 0 may never reach them)
    want = int.from_bytes(prefix[:2].ljust(2, b"\0"), "little")
    start = (want - base) % (1 << (8 * min(len(prefix), 2))) if len(prefix) <= 2 else 0
    for k in list(range(max(0, start - 8), start + 16)) + list(range(4096)):
        save_file(tensors, str(path), metadata={**meta, "pad": " " * k})
        if path.read_bytes().startswith(prefix):
            return m, path
    raise AssertionError(f"no padding gives {prefix!r}")


def native_with_spec(folder: Path, edit, name: str = "edited.safetensors") -> tuple:
    """A tiny native checkpoint whose spec JSON is ``edit(spec_dict)`` (or the string it returns)."""
    m = tiny_vit()
    src = save_checkpoint(m, folder / f"src-{name}")
    meta = read_raw(src).metadata
    spec = json.loads(meta["vitviz_spec"])
    out = edit(spec)
    text = out if isinstance(out, str) else json.dumps(spec if out is None else out)
    p = folder / name
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(p), metadata={**meta, "vitviz_spec": text})
    return m, p


def set_field(path: str, value):
    def edit(spec):
        d = spec
        *parents, last = path.split(".")
        for k in parents:
            d = d[k]
        d[last] = value
    return edit


SPEC_CASES = [
    ("config.depth", "4", "integer >= 0", "the string '4'"),
    ("config.embed_dim", True, "integer >= 1", "true"),
    ("config.embed_dim", 0, "integer >= 1", "the integer 0"),
    ("config.patch_size", -8, "integer >= 1", "the integer -8"),
    ("config.num_heads", 2.0, "integer >= 1", "the number 2.0"),
    ("config.num_classes", None, "integer >= 0", "null"),
    ("config.img_size", "16", "positive integer", "the string '16'"),
    ("config.img_size", [16], "[height, width]", "a list [16]"),
    ("config.img_size", [16, 0], "[height, width]", "a list [16, 0]"),
    ("config.mlp_ratio", "4", "positive number", "the string '4'"),
    ("config.qkv_bias", "yes", "true or false", "the string 'yes'"),
    ("config.class_token", 1, "true or false", "the integer 1"),
    ("config.pos_embed", "rope", "'learned', 'sincos'", "the string 'rope'"),
    ("config.global_pool", 1, "'token', 'avg'", "the integer 1"),
    ("config.layer_norm_eps", -1e-6, "positive number", "-1e-06"),
    ("config.drop_rate", 1.5, "[0, 1)", "1.5"),
    ("config.init_values", "small", "a number", "the string 'small'"),
    ("config.fc_norm", "no", "true or false", "the string 'no'"),
    ("preprocess.crop", "thirty-two", "[height, width]", "the string 'thirty-two'"),
    ("preprocess.resize", -1, "positive integer", "the integer -1"),
    ("preprocess.interpolation", "cubic", "'bicubic'", "the string 'cubic'"),
    ("preprocess.mean", ["a", "b", "c"], "list of numbers", "a list"),
    ("preprocess.std", [0.5, 0, 0.5], "list of positive numbers", "a list"),
    ("labels", "ant bee cat", "list of strings", "the string"),
    ("labels", [1, 2, 3], "list of strings", "a list [1, 2, 3]"),
    ("name", 5, "a string", "the integer 5"),
]


def hf_dir(folder: Path, config_edit=None, preprocessor=None, name: str = "hf"):
    """A Hugging Face ViTForImageClassification folder (old key names) written by hand from a tiny vitviz ViT."""
    m = tiny_vit(layer_norm_eps=1e-12)
    s = m.state_dict()
    hf = {"vit.embeddings.patch_embeddings.projection.weight": s["patch_embed.proj.weight"],
          "vit.embeddings.patch_embeddings.projection.bias": s["patch_embed.proj.bias"],
          "vit.embeddings.cls_token": s["cls_token"], "vit.embeddings.position_embeddings": s["pos_embed"],
          "vit.layernorm.weight": s["norm.weight"], "vit.layernorm.bias": s["norm.bias"],
          "classifier.weight": s["head.weight"], "classifier.bias": s["head.bias"]}
    b, L = "blocks.0.", "vit.encoder.layer.0."
    for kind in ("weight", "bias"):
        q, k, v = s[b + f"attn.qkv.{kind}"].chunk(3)
        hf.update({L + f"attention.attention.query.{kind}": q, L + f"attention.attention.key.{kind}": k,
                   L + f"attention.attention.value.{kind}": v,
                   L + f"attention.output.dense.{kind}": s[b + f"attn.proj.{kind}"],
                   L + f"layernorm_before.{kind}": s[b + f"norm1.{kind}"],
                   L + f"layernorm_after.{kind}": s[b + f"norm2.{kind}"],
                   L + f"intermediate.dense.{kind}": s[b + f"mlp.fc1.{kind}"],
                   L + f"output.dense.{kind}": s[b + f"mlp.fc2.{kind}"]})
    d = folder / name
    d.mkdir()
    save_file({k: v.contiguous() for k, v in hf.items()}, str(d / "model.safetensors"))
    cfg = {"model_type": "vit", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
           "intermediate_size": 32, "hidden_act": "gelu", "image_size": 16, "patch_size": 8, "num_channels": 3,
           "layer_norm_eps": 1e-12, "id2label": {"0": "ant", "1": "bee", "2": "cat"}}
    if config_edit is not None:
        cfg = config_edit(cfg) or cfg
    (d / "config.json").write_text(json.dumps(cfg))
    if preprocessor is not None:
        (d / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    return m, d


def cfg_edit(key, value):
    def edit(cfg):
        cfg[key] = value
    return edit


HF_CONFIG_CASES = [
    ("num_attention_heads", "two", "integer >= 1", "the string 'two'"),
    ("num_attention_heads", 0, "integer >= 1", "the integer 0"),
    ("num_attention_heads", True, "integer >= 1", "true"),
    ("layer_norm_eps", "small", "positive number", "the string 'small'"),
    ("hidden_act", 3, "a string", "the integer 3"),
    ("hidden_size", "8", "integer >= 1", "the string '8'"),
    ("num_hidden_layers", -1, "integer >= 0", "the integer -1"),
    ("image_size", "sixteen", "positive integer", "the string 'sixteen'"),
    ("id2label", ["ant", "bee", "cat"], "an object", "a list"),
    ("id2label", {"0": 1, "1": 2, "2": 3}, "class names", "the integer 1"),
]

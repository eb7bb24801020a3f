"""The corpus of bad and unusual files (images, checkpoints, export targets) via the library, the CLI and the window.

The corpus (built once per session in a temporary folder, about 190 inputs) holds images (truncated, corrupt, empty,
HTML named .png, decompression-bomb headers, 1x50000 strips, 16-bit, float TIFF, CMYK, palette with transparency,
animated GIF, EXIF-rotated, WebP, BMP, ICO, odd file names), checkpoints (pickles that carry code, random bytes,
malformed safetensors headers, saved settings of the wrong type or declaring huge sizes, torch zips with wrong keys
or no tensors, TorchScript, empty files, folders named .safetensors), Hugging Face folders and their config files
(config.json a list, not JSON, a folder; missing weights; wrong types; declared sizes the weights disagree with),
export targets (an existing file, a parent that is a file, a missing or read-only folder, a folder in the way) and
special files (FIFOs with and without a writer, devices, sockets, symlink loops, dangling links).

Every input is either *refused* or *unusual but valid*:

* library: a refusal is an error of the project's types (``ImageError``, ``CheckpointError``, ``ExportError``) or
  ``FileNotFoundError`` / ``FileExistsError`` / ``ValueError``, whose message names the file and then the cause;
  a valid input loads (a finite tensor of the model's input size, a model that runs, a PNG written);
* command line (``python -m vitviz predict`` for images, ``vitviz info`` for checkpoints and folders): every input
  goes through a real process. ``predict`` and ``info`` take many files and report each bad one on its own line, so
  the corpus runs in a few batched calls (run concurrently): each refused input gives exactly one stderr line that
  starts with ``vitviz COMMAND: error: <its path>``, in the order given, and no traceback; valid inputs give output
  and no stderr line. Separate single-input calls check the exit status of one bad input of each kind (2, one line)
  and that a batch of only valid inputs exits 0. Export targets have no command-line entry point (no sub-command
  writes files), so they go through the library and the window only;
* window (images, checkpoints, and export targets): one ``MainWindow`` with recorded dialogs opens every image and
  loads every checkpoint; a refusal shows one error dialog naming the file, and the window keeps its image, result
  and model, and goes on working.

Plus corrupt window settings (a config file of the window's own), which must not stop the window from starting.
"""

from __future__ import annotations

import errno
import io
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
import warnings
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from bad_input_builders import (
    HEADER_CASES,
    HF_CONFIG_CASES,
    SPEC_CASES,
    Case,
    cfg_edit,
    encode,
    feed_fifo,
    hf_dir,
    image_corpus,
    native_starting_with,
    native_with_spec,
    png_header,
    set_field,
    st_bytes,
    tiny_vit,
)
from PIL import Image
from repo_paths import REPO

from vitviz import imaging
from vitviz.demo import default_model_path, load_demo_model, sample_images
from vitviz.imaging import ExportError, ImageError, load_image, write_png
from vitviz.model import CheckpointError, ViT, load_checkpoint, save_checkpoint

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
CLI_TIMEOUT = 120


# ------------------------------------------------------------------------------------------------------- the corpus
_IMAGE_EXPECT: dict[str, tuple[bool, str]] = {  # image_corpus name -> (valid?, cause)
    "ok.png": (True, ""), "truncated.png": (False, "truncated"), "truncated.jpg": (False, "truncated"),
    "zero_bytes.png": (False, "empty"), "text_file.png": (False, "not an image file"),
    "random_bytes.png": (False, "not an image file"), "png_signature_only.png": (False, "not an image file"),
    "png_bad_crc.png": (False, "cannot decode"), "jpeg_soi_only.jpg": (False, "not an image file"),
    "gray16.png": (True, ""), "float.tif": (True, ""), "int32.tif": (True, ""), "palette_transparent.png": (True, ""),
    "cmyk.jpg": (True, ""), "la.png": (True, ""), "rgba.png": (True, ""), "bilevel.png": (True, ""),
    "one_pixel.png": (True, ""), "bomb_header.png": (False, "too large"),
    "bomb_header_bilevel.png": (False, "too large"),
    "zero_width_header.png": (False, "the PNG header declares a width of 0"), "strip_1x50000.png": (False, "64:1"),
    "strip_50000x1.png": (False, "64:1"), "animated.gif": (True, ""), "gif_header_only.gif": (False, "not an image"),
    "bmp_huge_header.bmp": (False, "too large"), "drawing.svg": (False, "not an image file"), "photo.heic": (True, ""),
    "webp.webp": (True, ""), "no_suffix": (True, ""), "exif_rotated.jpg": (True, ""),
    "folder.png": (False, "folder"), "missing.png": (False, "does not exist"), "devnull.png": (False, "device"),
    "loop.png": (False, "cannot read"), "dangling.png": (False, "does not exist"),
    "under_a_file.png": (False, "cannot read"), "fifo.png": (True, ""),
}


def _images(root: Path) -> list[Case]:
    base = image_corpus(root)
    cases = []
    for name, item in base.items():
        if name == "unreadable.png":  # refused for a normal user, an ordinary image for root
            cases.append(Case("image", name, item, ok=IS_ROOT, needle="permission denied"))
            continue
        ok, needle = _IMAGE_EXPECT[name]
        path, feed = item if isinstance(item, tuple) else (item, None)
        cases.append(Case("image", name, path, ok, needle, feed))
    photo = Image.open(sample_images()[2]).convert("RGB")
    png = encode(photo, "PNG")
    rng = np.random.default_rng(11)
    ico = io.BytesIO()
    photo.resize((64, 64)).save(ico, "ICO")
    tiff = io.BytesIO()
    photo.save(tiff, "TIFF", save_all=True, append_images=[photo.rotate(180)])
    ztxt = zlib_bomb_text_chunk()
    more: dict[str, tuple[bytes, bool, str]] = {
        "html_renamed.png": (b"<!DOCTYPE html><html><head><title>404 Not Found</title></head>"
                             b"<body>gone</body></html>\n",
                             False, "not an image file"),
        "plain.bmp": (encode(photo, "BMP"), True, ""),
        "progressive.jpg": (encode(photo, "JPEG", progressive=True, quality=80), True, ""),
        "multipage.tif": (tiff.getvalue(), True, ""),
        "icon.ico": (ico.getvalue(), True, ""),
        "gray_palette.gif": (encode(photo.convert("L"), "GIF"), True, ""),
        "aspect_64_to_1.png": (encode(Image.new("RGB", (640, 10), (9, 99, 199)), "PNG"), True, ""),
        "aspect_65_to_1.png": (encode(Image.new("RGB", (650, 10), (9, 99, 199)), "PNG"), False, "64:1"),
        "just_over_limit.png": (png_header(20001, 20000), False, "20000x20000"),
        "ztxt_bomb.png": (png[:33] + ztxt + png[33:], False, "cannot decode"),
        "random_bytes.jpg": (rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(), False, "not an image file"),
        "png_named.jpg": (png, True, ""),
        "name with spaces & ünïcödé.png": (png, True, ""),
        "-looks-like-an-option.png": (png, True, ""),
        "line\nbreak.png": (png[: len(png) // 3], False, "truncated"),
    }
    for name, (data, ok, needle) in more.items():
        (root / name).write_bytes(data)
        cases.append(Case("image", name, root / name, ok, needle))
    sock = root / "socket.png"
    _bind_socket(sock)
    cases.append(Case("image", "socket.png", sock, False, "socket"))
    (root / "zero").symlink_to("/dev/zero")
    cases.append(Case("image", "dev_zero", root / "zero", False, "device"))
    for name, feed, ok, needle, batch in (("fifo_empty.png", b"", False, "no data", True),
                                          ("fifo_garbage.png", b"\x00garbage" * 100, False, "not an image file", True),
                                          ("fifo_jpeg.jpg", encode(photo, "JPEG"), True, "", True),
                                          ("fifo_no_writer.png", None, False, "nothing arrived", False)):
        os.mkfifo(root / name)
        cases.append(Case("image", name, root / name, ok, needle, feed, batch))
    return cases


def zlib_bomb_text_chunk() -> bytes:
    """A zTXt chunk of 100 kB that inflates to 200 MB of text (PIL's text-chunk limit refuses it)."""
    import struct
    import zlib

    data = b"Comment\0\0" + zlib.compress(b"\0" * (200 * 2**20), 9)
    return struct.pack(">I", len(data)) + b"zTXt" + data + struct.pack(">I", zlib.crc32(b"zTXt" + data) & 0xFFFFFFFF)


_SOCKETS: list[socket.socket] = []


def _bind_socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    _SOCKETS.append(s)  # kept open for the session


class _CodeCarrier:
    """Unpickling this runs a shell command (writes a marker file): what a malicious checkpoint does."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _timm_state(embed_dim: int = 64) -> tuple[ViT, dict[str, torch.Tensor]]:
    """A timm-layout state dict (no settings of its own: heads inferred as embed_dim / 64)."""
    torch.manual_seed(1)
    m = ViT(img_size=32, patch_size=16, embed_dim=embed_dim, depth=1, num_heads=embed_dim // 64, num_classes=4).eval()
    return m, {k: v.clone() for k, v in m.state_dict().items()}


def _checkpoints(root: Path) -> list[Case]:
    d = root / "checkpoints"
    d.mkdir()
    cases: list[Case] = []

    def add(name: str, path: Path, ok: bool = False, needle: str = "", feed: bytes | None = None) -> None:
        cases.append(Case("checkpoint", name, path, ok, needle, feed))

    def write(name: str, data: bytes) -> Path:
        (d / name).write_bytes(data)
        return d / name

    marker = root / "PICKLE-RAN-CODE"
    # -- not what the name says; pickles that carry code
    good = save_checkpoint(tiny_vit(), d / "good.safetensors")
    add("good.safetensors", good, ok=True)
    add("native_named.pth", write("native_named.pth", good.read_bytes()), ok=True)
    add("native_no_suffix", write("native_no_suffix", good.read_bytes()), ok=True)
    add("native_first_byte_0x80", native_starting_with(d, b"\x80", 1, "first_byte_0x80.safetensors")[1], ok=True)
    _, timm = _timm_state()
    torch.save(timm, d / "timm.pth")
    add("timm.pth", d / "timm.pth", ok=True)
    torch.save(timm, d / "timm_legacy.pth", _use_new_zipfile_serialization=False)
    add("timm_legacy.pth", d / "timm_legacy.pth", ok=True)
    torch.save({"model": {f"module.{k}": v for k, v in timm.items()}, "epoch": 3}, d / "wrapped_ddp.pth")
    add("wrapped_ddp.pth", d / "wrapped_ddp.pth", ok=True)
    add("hf_ok", hf_dir(d, name="hf_ok", preprocessor={"do_resize": True, "size": 16, "image_mean": 0.5,
                                                          "image_std": 0.5})[1], ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save({"w": torch.zeros(2), "x": _CodeCarrier(marker)}, d / "code.pth")
        torch.save({"w": torch.zeros(2), "x": _CodeCarrier(marker)}, d / "code_legacy.pth",
                   _use_new_zipfile_serialization=False)
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(d / "torchscript.pt"))
    add("code.pth", d / "code.pth", needle="refused: unpickling this file would import and call Python code")
    add("code_legacy.pth", d / "code_legacy.pth", needle="refused: unpickling")
    add("code_plain_pickle.bin", write("code_plain_pickle.bin", pickle.dumps(_CodeCarrier(marker), protocol=2)),
        needle="refused: unpickling")
    add("plain_pickle.pth", write("plain_pickle.pth", pickle.dumps({"a": 1}, protocol=5)), needle="plain Python pickle")
    add("torchscript.pt", d / "torchscript.pt", needle="TorchScript")
    np.savez(d / "objects.npz", a=np.array([{"x": 1}], dtype=object))
    add("objects.npz", d / "objects.npz", needle="pickled objects")
    np.savez(d / "unrelated.npz", a=np.zeros(3))
    add("unrelated.npz", d / "unrelated.npz", needle="unknown checkpoint format")
    torch.save({"conv1.weight": torch.zeros(4, 3, 3, 3), "fc.weight": torch.zeros(10, 4)}, d / "resnet_keys.pth")
    add("resnet_keys.pth", d / "resnet_keys.pth", needle="unknown checkpoint format")
    torch.save({k: v for k, v in timm.items() if not k.startswith("blocks.0.attn.")}, d / "timm_missing_attn.pth")
    add("timm_missing_attn.pth", d / "timm_missing_attn.pth", needle="")
    torch.save({**timm, "blocks.0.attn.qkv.weight": torch.zeros(5, 5)}, d / "timm_wrong_shape.pth")
    add("timm_wrong_shape.pth", d / "timm_wrong_shape.pth", needle="")
    torch.save([torch.zeros(2)], d / "list.pth")
    add("list.pth", d / "list.pth", needle="holds a list")
    torch.save(torch.zeros(2), d / "tensor.pth")
    add("tensor.pth", d / "tensor.pth", needle="holds a Tensor")
    torch.save({"state_dict": {"lr": 0.1}}, d / "no_tensors.pth")
    add("no_tensors.pth", d / "no_tensors.pth", needle="no tensors")
    zipped = (d / "timm.pth").read_bytes()
    add("torch_zip_truncated.pth", write("torch_zip_truncated.pth", zipped[: len(zipped) // 2]), needle="truncated")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("readme.txt", "hello")
    add("other_zip.pth", write("other_zip.pth", buf.getvalue()), needle="zip archive holding")
    rng = np.random.default_rng(5)
    for name in ("random.pth", "random.safetensors", "random_no_suffix", "random.npz"):
        add(name, write(name, rng.integers(0, 256, 3000, dtype=np.uint8).tobytes()), needle="not a checkpoint")
    for name in ("empty.safetensors", "empty.pth"):
        add(name, write(name, b""), needle="empty")
    add("text.pth", write("text.pth", b"these are my notes, not a model\n" * 20), needle="not a checkpoint")
    add("html.safetensors", write("html.safetensors", b"<!DOCTYPE html><html><body>404</body></html>"),
        needle="not a checkpoint")
    add("json.safetensors", write("json.safetensors", b'{"weights": [1, 2, 3]}'), needle="not a checkpoint")
    add("image.pth", write("image.pth", encode(Image.new("RGB", (8, 8)), "PNG")), needle="not a checkpoint")
    # -- malformed safetensors containers
    for case, (header, data, needle) in sorted(HEADER_CASES.items()):
        add(f"header-{case}", write(f"header-{case}.safetensors", st_bytes(header, data)), needle=needle)
    for length, needle in ((10**6, "truncated"), (2**63 + 5, "truncated"), (0, "implausible")):
        add(f"header-length-{length}", write(f"header-length-{length}.safetensors",
                                             st_bytes({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
                                                      length=length)), needle=needle)
    add("cut_in_header", write("cut_in_header.safetensors", good.read_bytes()[:100]), needle="truncated")
    add("cut_in_data", write("cut_in_data.safetensors", good.read_bytes()[:-50]), needle="truncated")
    # -- saved settings of the wrong type, or declaring sizes the tensors do not have
    for i, (fld, value, _expected, _found) in enumerate(SPEC_CASES):
        _, p = native_with_spec(d, set_field(fld, value), name=f"spec-{i:02d}-{fld}.safetensors")
        add(f"spec {fld}={value!r}", p, needle=f"setting {fld!r} should be")
    for fld, value, needle in (("config.embed_dim", 131072, "embed_dim=131072"), ("config.depth", 4096, "depth=4096"),
                               ("config.num_classes", 10**7, "num_classes=10000000"),
                               ("config.img_size", [65536, 65536], "img_size=[65536, 65536]")):
        _, p = native_with_spec(d, set_field(fld, value), name=f"declared-{fld}.safetensors")
        add(f"declared {fld}={value!r}", p, needle=f"the saved settings declare {needle}")
    _, p = native_with_spec(d, lambda s: "{not json", name="spec-not-json.safetensors")
    add("spec-not-json", p, needle="not JSON")
    # -- Hugging Face folders and their config files
    for i, (key, value, _expected, _found) in enumerate(HF_CONFIG_CASES):
        add(f"hf config {key}={value!r}", hf_dir(d, cfg_edit(key, value), name=f"hf-config-{i:02d}")[1],
            needle=repr(key))
    for key, value, needle in (("hidden_size", 131072, "hidden_size=131072"),
                               ("num_hidden_layers", 1000, "num_hidden_layers=1000"),
                               ("image_size", 4096, "image_size=4096")):
        add(f"hf declared {key}={value}", hf_dir(d, cfg_edit(key, value), name=f"hf-declared-{key}")[1], needle=needle)
    add("hf config.json a list", hf_dir(d, lambda cfg: [cfg], name="hf-config-list")[1], needle="holds a JSON list")
    for i, (pp, needle) in enumerate(((["size", 16], "holds a JSON list"),
                                      ({"do_center_crop": True, "crop_size": "thirty-two"}, "'crop_size'"),
                                      ({"size": -1}, "'size'"), ({"image_mean": "grey"}, "'image_mean'"),
                                      ({"image_mean": [0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}, "image_mean has 2"))):
        add(f"hf preprocessor {pp!r}", hf_dir(d, preprocessor=pp, name=f"hf-pp-{i}")[1], needle=needle)
    h = hf_dir(d, name="hf-config-not-json")[1]
    (h / "config.json").write_text("{'hidden_size': 8,}")
    add("hf config.json not JSON", h, needle="cannot read config.json")
    h = hf_dir(d, name="hf-config-empty")[1]
    (h / "config.json").write_bytes(b"")
    add("hf config.json empty", h, needle="cannot read config.json")
    h = hf_dir(d, name="hf-config-folder")[1]
    (h / "config.json").unlink()
    (h / "config.json").mkdir()
    add("hf config.json a folder", h, needle="is a folder")
    h = hf_dir(d, name="hf-weights-folder")[1]
    (h / "model.safetensors").unlink()
    (h / "model.safetensors").mkdir()
    add("hf model.safetensors a folder", h, needle="is a folder")
    h = hf_dir(d, name="hf-no-weights")[1]
    (h / "model.safetensors").unlink()
    add("hf missing weights", h, needle="holds no model.safetensors")
    h = hf_dir(d, name="hf-sharded")[1]
    (h / "model.safetensors").rename(h / "model-00001-of-00002.safetensors")
    add("hf sharded", h, needle="sharded")
    (d / "folder.safetensors").mkdir()
    add("folder named .safetensors", d / "folder.safetensors", needle="the folder is empty")
    # -- special files and paths
    add("missing.safetensors", d / "missing.safetensors", needle="no such file")
    os.mkfifo(d / "fifo.safetensors")
    add("fifo.safetensors", d / "fifo.safetensors", needle="a pipe", feed=good.read_bytes())
    (d / "devnull.pth").symlink_to(os.devnull)
    add("devnull.pth", d / "devnull.pth", needle="a device")
    _bind_socket(d / "socket.pth")
    add("socket.pth", d / "socket.pth", needle="a socket")
    (d / "loop.pth").symlink_to(d / "loop.pth")
    add("loop.pth", d / "loop.pth", needle="")
    (d / "afile").write_bytes(b"x")
    add("under_a_file.pth", d / "afile" / "m.pth", needle="")
    return cases


def _exports(root: Path) -> list[Case]:
    d = root / "exports"
    d.mkdir()
    (d / "existing.png").write_bytes(b"an earlier export")
    (d / "notes.txt").write_text("a file, not a folder")
    (d / "a_folder.png").mkdir()
    (d / "readonly").mkdir()
    os.mkfifo(d / "fifo_target.png")
    return [
        Case("export", "fresh target", d / "fresh.png", ok=True),
        Case("export", "name without .png", d / "no_suffix", ok=True),
        Case("export", "existing file", d / "existing.png", ok=False, needle="already exists"),
        Case("export", "existing FIFO", d / "fifo_target.png", ok=False, needle="already exists"),
        Case("export", "parent is a file", d / "notes.txt" / "view.png", ok=False, needle="is a file, not a folder"),
        Case("export", "deeper under a file", d / "notes.txt" / "a" / "b" / "view.png", ok=False,
             needle="is a file, not a folder"),
        Case("export", "missing folder", d / "missing" / "view.png", ok=False, needle="does not exist"),
        Case("export", "a folder in the way", d / "a_folder.png", ok=False, needle="a folder of that name exists"),
        Case("export", "read-only folder", d / "readonly" / "view.png", ok=False, needle="is not writable"),
    ]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> list[Case]:
    root = tmp_path_factory.mktemp("bad_inputs")
    images = root / "images"
    images.mkdir()
    cases = _images(images) + _checkpoints(root) + _exports(root)
    assert len({c.name for c in cases}) == len(cases)
    yield cases
    for s in _SOCKETS:
        s.close()


def _of(corpus: list[Case], kind: str) -> list[Case]:
    return [c for c in corpus if c.kind == kind]


def test_the_corpus_is_large_and_mixed(corpus):
    kinds = {k: len(_of(corpus, k)) for k in ("image", "checkpoint", "export")}
    assert len(corpus) >= 60 and min(kinds.values()) >= 9, kinds
    assert sum(c.ok for c in corpus) >= 20 and sum(not c.ok for c in corpus) >= 60
    assert sum(c.feed is not None or c.path.is_fifo() for c in corpus if c.path.exists()) >= 5


# ------------------------------------------------------------------------------------------------------ the library
def _feed(case: Case) -> threading.Thread | None:
    return feed_fifo(case.path, case.feed) if case.feed is not None else None  # a writer until a reader comes


def _check_refusal(case: Case, msg: str, where: str) -> None:
    """The message names the file, then the cause (and the case's needle)."""
    p = str(case.path)
    assert p in msg, f"{where}: {case.name}: the message does not name the file: {msg!r}"
    assert len(msg.replace(p, "").strip(" :")) > 5, f"{where}: {case.name}: no cause besides the file name: {msg!r}"
    assert case.needle in msg, f"{where}: {case.name}: {case.needle!r} not in {msg!r}"


@pytest.fixture(scope="module")
def demo_model():
    return load_demo_model().eval()


def test_images_through_the_library(corpus, demo_model, monkeypatch):
    monkeypatch.setattr(imaging, "STREAM_TIMEOUT", 0.5)  # the FIFO nobody writes to: refused, quickly
    pre = demo_model.spec.preprocess
    for case in _of(corpus, "image"):
        writer = _feed(case)
        try:
            x = pre(load_image(case.path).image)
        except (ImageError, FileNotFoundError, ValueError) as e:
            assert not case.ok, f"{case.name}: a valid image was refused: {e}"
            _check_refusal(case, str(e), "library")
        else:
            assert case.ok, f"{case.name}: loaded, but should be refused ({case.needle})"
            assert x.shape == (3, *pre.crop) and torch.isfinite(x).all(), case.name
        finally:
            if writer is not None:
                writer.join(20)


def test_checkpoints_through_the_library(corpus):
    marker = corpus[0].path.parents[1] / "PICKLE-RAN-CODE"
    x = torch.zeros(1, 3, 32, 32)
    for case in _of(corpus, "checkpoint"):
        writer = _feed(case)
        try:
            model = load_checkpoint(case.path)
        except (CheckpointError, FileNotFoundError, ValueError) as e:
            assert not case.ok, f"{case.name}: a valid checkpoint was refused: {e}"
            _check_refusal(case, str(e), "library")
        else:
            assert case.ok, f"{case.name}: loaded, but should be refused ({case.needle})"
            size = model.config.img_size
            with torch.no_grad():
                out = model(torch.nn.functional.interpolate(x, size=size))
            assert out.shape == (1, model.config.num_classes) and torch.isfinite(out).all(), case.name
        finally:
            if writer is not None:
                writer.join(0.1)  # the reader refuses a FIFO without opening it: the writer gives up by itself
    assert not marker.exists(), "a pickle ran code"


def _refuse_writes_in(folder: Path, monkeypatch) -> None:
    """Make ``folder`` read-only: chmod for a normal user; root writes anyway, so the refusal is simulated where
    the temporary file is created (the same place a read-only folder or file system refuses)."""
    if not IS_ROOT:
        folder.chmod(0o555)
        return
    real = imaging.tempfile.mkstemp

    def mkstemp(*a, dir=None, **k):
        if dir is not None and Path(dir) == folder:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real(*a, dir=dir, **k)

    monkeypatch.setattr(imaging.tempfile, "mkstemp", mkstemp)


def test_export_targets_through_the_library(corpus, monkeypatch):
    rgb = np.full((6, 8, 3), 77, np.uint8)
    for case in _of(corpus, "export"):
        if case.name == "read-only folder":
            _refuse_writes_in(case.path.parent, monkeypatch)
        before = case.path.read_bytes() if case.path.is_file() else None
        try:
            out = write_png(case.path, rgb)
        except (ExportError, FileExistsError, ValueError) as e:
            assert not case.ok, f"{case.name}: {e}"
            _check_refusal(case, str(e), "library")
            if before is not None:
                assert case.path.read_bytes() == before, f"{case.name}: an existing file was overwritten"
        else:
            assert case.ok, f"{case.name}: written, but should be refused"
            np.testing.assert_array_equal(np.asarray(Image.open(out)), rgb)
            out.unlink()
        leftovers = [p.name for p in case.path.parent.glob(".*.tmp")] if case.path.parent.is_dir() else []
        assert not leftovers, f"{case.name}: temporary files left: {leftovers}"
    # saving a checkpoint onto the same targets
    m = tiny_vit()
    for case in _of(corpus, "export"):  # (save_checkpoint makes missing folders)
        if case.name in ("existing file", "parent is a file", "deeper under a file", "a folder in the way"):
            with pytest.raises((CheckpointError, FileExistsError)) as ei:
                save_checkpoint(m, case.path)
            assert str(case.path) in str(ei.value), (case.name, str(ei.value))


# -------------------------------------------------------------------------------------------------- the command line
def _cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"  # three processes share two cores
    return env


@dataclass
class _Run:
    argv: list[str]
    cases: list[Case]
    code: int = -1
    out: str = ""
    err: str = ""
    seconds: float = 0.0


def _run_cli(run: _Run) -> _Run:
    writers = [w for w in (_feed(c) for c in run.cases) if w is not None]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "vitviz", *run.argv], cwd=REPO, env=_cli_env(), capture_output=True,
                       text=True, timeout=CLI_TIMEOUT, check=False)
    run.seconds = time.perf_counter() - t0
    for w in writers:
        w.join(0.5)
    run.code, run.out, run.err = r.returncode, r.stdout, r.stderr
    return run


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def _check_batch(run: _Run, command: str) -> None:
    """Each refused input: one stderr line ``vitviz COMMAND: error: <path>...`` in argument order; valid inputs
    none. The status is 2 when anything was refused, else 0."""
    assert "Traceback" not in run.err, run.err[-3000:]
    lines = run.err.splitlines()
    bad = [c for c in run.cases if not c.ok]
    assert run.code == (2 if bad else 0), (run.code, run.err[-2000:])
    got = [line for line in lines if line.strip()]
    if command == "predict" and any(c.ok for c in run.cases):  # the first line before the first prediction: what
        head = next(i for i, line in enumerate(got) if ": error: " not in line)  # runs where, in what precision
        assert got.pop(head).startswith("vitviz predict: "), got
    assert len(got) == len(bad), (f"{len(got)} error lines for {len(bad)} refused inputs:\n" + "\n".join(got))
    for case, line in zip(bad, got, strict=True):
        head = f"vitviz {command}: error: {_one_line(str(case.path))}"
        assert line.startswith(head) and line[len(head):len(head) + 1] in (":", "/", " "), (case.name, line)
        assert _one_line(case.needle) in line, (case.name, case.needle, line)


def _check_predict_output(run: _Run) -> None:
    """Valid images print their path and the top classes, in argument order."""
    heads = [line for line in run.out.splitlines() if line and not line.startswith(" ")]
    assert heads == [str(c.path) for c in run.cases if c.ok], heads


def _check_info_output(run: _Run) -> None:
    shown = [line for line in run.out.splitlines() if line.startswith("format:")]
    assert len(shown) == sum(c.ok for c in run.cases), run.out


def test_every_input_through_the_command_line(corpus):
    """All images through ``vitviz predict`` and all checkpoints and folders through ``vitviz info``, each batch in
    one real process; valid-only batches (exit 0) and single bad inputs (exit 2, one line) in a few more, three
    processes at a time (each pays about 2 s of imports and 1.5 s for the first model on these machines)."""
    model = str(default_model_path())
    images = [c for c in _of(corpus, "image") if c.batch]
    ckpts = _of(corpus, "checkpoint")
    valid_images = [c for c in images if c.ok and c.feed is None]
    valid_ckpts = [c for c in ckpts if c.ok]

    def predict(cases: list[Case]) -> _Run:
        return _Run(["predict", model, "--top", "1", "--", *[str(c.path) for c in cases]], cases)

    def info(cases: list[Case]) -> _Run:
        return _Run(["info", "--", *[str(c.path) for c in cases]], cases)

    runs = {"single FIFO without a writer": predict([c for c in _of(corpus, "image") if not c.batch]),
            "images": predict(images), "checkpoints": info(ckpts),
            "valid images": predict(valid_images), "valid checkpoints": info(valid_ckpts),
            "single bad image": predict([next(c for c in images if c.name == "bomb_header.png")]),
            "single bad checkpoint": info([next(c for c in ckpts if c.name == "code.pth")])}
    assert len(runs["single FIFO without a writer"].cases) == 1
    t0 = time.perf_counter()
    with ThreadPoolExecutor(3) as pool:  # the FIFO's call first: it mostly waits
        done = dict(zip(runs, pool.map(_run_cli, runs.values()), strict=True))
    wall = time.perf_counter() - t0
    for run in done.values():
        _check_batch(run, run.argv[0])
        if run.argv[0] == "predict":
            _check_predict_output(run)
        else:
            _check_info_output(run)
    assert done["valid images"].code == 0 and done["valid checkpoints"].code == 0
    covered = {c.name for run in done.values() for c in run.cases}
    assert covered == {c.name for c in corpus if c.kind != "export"}
    print(f"\n{len(done)} CLI processes for {len(covered)} inputs in {wall:.1f} s: "
          + ", ".join(f"{k} {r.seconds:.1f} s" for k, r in done.items()))


# ------------------------------------------------------------------------------------------------------- the window
@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    pytest.importorskip("pytestqt")
    sys.path.insert(0, str(REPO / "tests" / "gui"))
    from gui_helpers import Recorder
    from PySide6.QtCore import QSettings

    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow

    monkeypatch.setenv("VITVIZ_SETTINGS", str(tmp_path / "default-settings.ini"))
    make_app()
    torch.manual_seed(0)
    w = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat), model=tiny_vit(2),
                   dialogs=Recorder())
    qtbot.addWidget(w)
    w.resize(1200, 800)
    w.show()
    qtbot.waitExposed(w)
    events: list[str] = []
    w.resultShown.connect(lambda: events.append("result"))
    w.errorShown.connect(lambda title, message: events.append("error"))
    w.modelChanged.connect(lambda: events.append("model"))
    w.test_events = events
    yield w
    w.close()


def _settle(qtbot, w, action: Callable[[], None], until: Callable[[list[str]], bool], what: str) -> list[str]:
    """Run ``action`` and wait until the window's events satisfy ``until`` and no work is left."""
    w.test_events.clear()
    action()
    try:
        qtbot.waitUntil(lambda: until(w.test_events), timeout=30000)
        qtbot.waitUntil(lambda: not w.runner.is_busy(), timeout=30000)
    except Exception as e:  # noqa: BLE001 - pytest-qt's timeout, with the input named
        raise AssertionError(f"{what}: the window did not finish (events {w.test_events})") from e
    return list(w.test_events)


def _error_shown(w, case: Case, errors_before: int) -> None:
    errors = w.dialogs.errors
    assert len(errors) == errors_before + 1, (case.name, errors[errors_before:])
    _title, message = errors[-1]
    _check_refusal(case, message, "window")


def test_images_through_the_window(qtbot, window, corpus, monkeypatch):
    monkeypatch.setattr(imaging, "STREAM_TIMEOUT", 0.5)
    w = window
    first = next(c for c in corpus if c.name == "ok.png")
    _settle(qtbot, w, lambda: w.open_images([str(first.path)]), lambda ev: "result" in ev, first.name)
    for case in _of(corpus, "image"):
        result, images, model, title = w.session.result, list(w.session.images), w.model, w.windowTitle()
        n_err = len(w.dialogs.errors)
        writer = _feed(case)
        _settle(qtbot, w, lambda p=str(case.path): w.open_images([p]), lambda ev: "result" in ev or "error" in ev,
                case.name)
        if writer is not None:
            writer.join(5)
        if case.ok:
            assert len(w.dialogs.errors) == n_err, (case.name, w.dialogs.errors[n_err:])
            assert w.session.result is not result and w.session.result.source == str(case.path), case.name
        else:
            _error_shown(w, case, n_err)
            assert w.session.result is result and w.model is model, case.name
            assert w.session.images == images and w.windowTitle() == title, case.name
    assert len(w.dialogs.errors) == sum(not c.ok for c in _of(corpus, "image"))
    # still working: the first image again
    _settle(qtbot, w, lambda: w.open_images([str(first.path)]), lambda ev: "result" in ev, first.name)
    assert w.session.result.source == str(first.path)


def test_checkpoints_through_the_window(qtbot, window, corpus):
    w = window
    first = next(c for c in corpus if c.name == "ok.png")
    _settle(qtbot, w, lambda: w.open_images([str(first.path)]), lambda ev: "result" in ev, first.name)
    for case in _of(corpus, "checkpoint"):
        model, key, result = w.model, w.model_key, w.session.result
        n_err = len(w.dialogs.errors)
        writer = _feed(case)
        _settle(qtbot, w, lambda p=str(case.path): w.open_checkpoint(p), lambda ev: "model" in ev or "error" in ev,
                case.name)
        if writer is not None:
            writer.join(0.1)
        if case.ok:
            assert len(w.dialogs.errors) == n_err, (case.name, w.dialogs.errors[n_err:])
            assert w.model is not model and w.model_key == f"file:{case.path}", case.name
            qtbot.waitUntil(lambda r=result: w.session.result is not r, timeout=30000)  # re-run with the new model
        else:
            _error_shown(w, case, n_err)
            assert w.model is model and w.model_key == key and w.session.result is result, case.name
    assert len(w.dialogs.errors) == sum(not c.ok for c in _of(corpus, "checkpoint"))
    assert w.session.result is not None and not w.runner.is_busy()


def test_export_targets_through_the_window(qtbot, window, corpus, monkeypatch):
    w = window
    first = next(c for c in corpus if c.name == "ok.png")
    _settle(qtbot, w, lambda: w.open_images([str(first.path)]), lambda ev: "result" in ev, first.name)
    for case in _of(corpus, "export"):
        if case.name == "read-only folder":
            _refuse_writes_in(case.path.parent, monkeypatch)
        before = case.path.read_bytes() if case.path.is_file() else None
        n_err, n_confirm = len(w.dialogs.errors), len(w.dialogs.confirms)
        out = w.export_view(str(case.path))
        if case.ok:
            assert out is not None and out.is_file() and len(w.dialogs.errors) == n_err, case.name
            out.unlink()
        elif case.needle == "already exists":  # the window asks first; the recorder says no: nothing is written
            assert out is None and len(w.dialogs.confirms) == n_confirm + 1, case.name
            assert len(w.dialogs.errors) == n_err, case.name
        else:
            assert out is None, case.name
            _error_shown(w, case, n_err)
        if before is not None:
            assert case.path.read_bytes() == before, case.name


@pytest.mark.parametrize("content", [
    b"\x00\xff\xfe garbage \x89PNG\r\n" * 50,
    b"[General]\nmodel=file:/nonexistent/model.safetensors\nopacity=very\nview=nonsense\ncolormap=42\n"
    b"recent_files=@Invalid()\ngeometry=@ByteArray(garbage)\ndevice=quantum\nprecision=fp7\n",
], ids=["binary-garbage", "wrong-values"])
def test_corrupt_window_settings_do_not_stop_the_window(qtbot, tmp_path, content, monkeypatch):
    """The window's own config file, hand-edited or damaged: the window starts, with the demo model if the
    remembered one cannot be loaded (said in a dialog naming it)."""
    pytest.importorskip("pytestqt")
    sys.path.insert(0, str(REPO / "tests" / "gui"))
    from gui_helpers import Recorder
    from PySide6.QtCore import QSettings

    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow

    ini = tmp_path / "settings.ini"
    ini.write_bytes(content)
    monkeypatch.setenv("VITVIZ_SETTINGS", str(ini))
    make_app()
    rec = Recorder()
    w = MainWindow(settings=QSettings(str(ini), QSettings.Format.IniFormat), dialogs=rec)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.model is not None and not w.runner.is_busy(), timeout=60000)
    remembered_missing = b"/nonexistent/" in content
    assert len(rec.errors) == int(remembered_missing), rec.errors
    if remembered_missing:
        assert "/nonexistent/model.safetensors: no such file" in rec.errors[0][1], rec.errors
    assert w.model_key == "demo" and w.device == "cpu" and w.precision == "auto"  # the default
    img = Path(tmp_path / "x.png")
    Image.fromarray(np.full((40, 50, 3), 128, np.uint8)).save(img)
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        w.open_images([str(img)])
    w.close()


# -------------------------------------------------------------------------------------------- what stays one line
def test_a_message_with_line_breaks_stays_one_line():
    """A file name with a line break, and libraries' multi-line messages: the CLI's error is still one line."""
    from vitviz.cli.shared import one_line as cli_one_line

    assert cli_one_line("a\nb.png: bad\r\n  more\n") == "a b.png: bad more"

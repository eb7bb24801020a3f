"""Bad and unusual image inputs, one behaviour at a time: memory bounded by the crop, one reader with one pixel limit
for the window and ``vitviz predict``, pipes and special files, export failures. (The corpus of odd files goes through
the library, the command line and the window in test_bad_inputs.py.)

Every error is an ``ImageError`` / ``ExportError`` (or ``FileExistsError``) whose message names the file and the
cause; the command line exits 2 with exactly one line on stderr, never a traceback.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from bad_input_builders import feed_fifo as _feed_fifo
from bad_input_builders import png_header as _png_header
from PIL import Image

import vitviz.model.preprocess as preprocess_mod
from vitviz import imaging
from vitviz.cli import main
from vitviz.demo import default_model_path, load_demo_model, sample_images
from vitviz.imaging import (
    MAX_ASPECT_RATIO,
    ExportError,
    ImageError,
    load_image,
    write_png,
)
from vitviz.model.preprocess import Preprocess

_GUARD_PIXELS = 64 * 2**20


@pytest.fixture(autouse=True)
def _no_giant_resize(monkeypatch):
    """Fail (instead of swapping the machine to death) when anything asks PIL for a resize of more than 64 Mpx."""
    real = Image.Image.resize
    sizes: list[tuple[int, int]] = []

    def guarded(self, size, *a, **k):
        sizes.append(tuple(size))
        if size[0] * size[1] > _GUARD_PIXELS:
            raise AssertionError(f"a resize to {size[0]}x{size[1]} pixels was requested")
        return real(self, size, *a, **k)

    monkeypatch.setattr(Image.Image, "resize", guarded)
    return sizes


@pytest.fixture(scope="module")
def demo_model():
    return load_demo_model().eval()


# ------------------------------------------------------------------------------------------------ helpers
def _whole_image_reference(pre: Preprocess, image: Image.Image) -> torch.Tensor:
    """The preprocessing as it was before the crop-first path: resize the whole image, pad if needed, then crop."""
    image = image.convert("RGB")
    geo = pre.geometry((image.height, image.width))
    rh, rw = geo.resized_size
    if (rh, rw) != (image.height, image.width):
        image = image.resize((rw, rh), preprocess_mod._PIL_RESAMPLE[pre.interpolation])
    top, left, ch, cw = geo.crop_box
    if top < 0 or left < 0 or top + ch > rh or left + cw > rw:
        canvas = Image.new(image.mode, (max(cw, rw), max(ch, rh)))
        canvas.paste(image, (max(0, -left), max(0, -top)))
        image = canvas
        top, left = max(0, top), max(0, left)
    arr = np.asarray(image.crop((left, top, left + cw, top + ch)), dtype=np.float32) / 255.0
    t = torch.from_numpy(arr.copy()).permute(2, 0, 1)
    return (t - torch.tensor(pre.mean)[:, None, None]) / torch.tensor(pre.std)[:, None, None]


def _natural_images() -> list[Image.Image]:
    """The bundled samples and a smooth photo-like field, at a few sizes and aspect ratios."""
    rng = np.random.default_rng(0)
    smooth = Image.fromarray(np.clip(128 + 60 * rng.normal(size=(30, 40, 3)), 0, 255).astype(np.uint8))
    bases = [Image.open(p).convert("RGB") for p in sample_images()[:3]] + [smooth.resize((400, 300), Image.BICUBIC)]
    out = []
    for im in bases:
        for w, h in ((333, 250), (97, 211), (640, 480), (1200, 150), (60, 1400), (113, 112)):
            out.append(im.resize((w, h), Image.BICUBIC))
    return out


_PREPROCESSES = [Preprocess(), Preprocess.for_crop(112), Preprocess(interpolation="bilinear"),
                 Preprocess(resize=518, crop=(518, 518), interpolation="lanczos"),
                 Preprocess(resize=64, crop=(96, 80), interpolation="nearest"),
                 Preprocess(resize=(100, 300), crop=(224, 224))]


# ------------------------------------------------------------------------------- a. memory bounded by the crop
def test_preprocess_never_resizes_beyond_the_crop(_no_giant_resize):
    # 64x4096 (the largest aspect ratio accepted): the whole resized image would be 16384x256 = 4.2 Mpx for a
    # 224x224 crop; the crop-first path never asks for much more than the crop itself
    img = Image.new("RGB", (4096, 64), (200, 30, 30))
    x, geo = Preprocess(resize=256, crop=(224, 224)).apply(img)
    assert x.shape == (3, 224, 224)
    assert geo.resized_size == (256, 16384)
    biggest = max(w * h for w, h in _no_giant_resize)
    assert biggest <= 224 * 224, _no_giant_resize


@pytest.mark.parametrize("size", [(50000, 1), (1, 50000), (6500, 100)])
def test_too_elongated_images_are_refused(tmp_path, size):
    img = Image.new("L", size, 128)
    with pytest.raises(ImageError, match=f"{MAX_ASPECT_RATIO}:1"):
        Preprocess(resize=256, crop=(224, 224)).apply(img)
    p = tmp_path / f"strip_{size[0]}x{size[1]}.png"
    img.save(p)
    assert p.stat().st_size < 2000  # a few hundred bytes ...
    with pytest.raises(ImageError) as ei:  # ... that used to ask for a 256 x 12.8M resize (about 10 GB)
        load_image(p)
    assert str(p) in str(ei.value) and f"{MAX_ASPECT_RATIO}:1" in str(ei.value)


def test_ordinary_images_are_bit_identical_to_the_whole_image_resize():
    for pre in _PREPROCESSES:
        for im in _natural_images():
            if max(im.size) > 4 * min(im.size):  # photos and panoramas up to 4:1
                continue
            x, geo = pre.apply(im)
            assert geo == pre.geometry((im.height, im.width))
            ref = _whole_image_reference(pre, im)
            assert torch.equal(x, ref) or (x - ref).abs().max() == 0, (pre, im.size)


def test_crop_first_path_matches_the_whole_image_resize(monkeypatch):
    monkeypatch.setattr(preprocess_mod, "_WHOLE_RESIZE_BUDGET", 0)  # always crop first
    worst = {"aspect kept": 0.0, "explicit (h, w)": 0.0}
    for pre in _PREPROCESSES:
        for im in _natural_images():
            x, geo = pre.apply(im)
            assert geo == pre.geometry((im.height, im.width))
            ref = _whole_image_reference(pre, im)
            std = torch.tensor(pre.std)[:, None, None]
            diff = ((x - ref) * std).abs()  # in [0, 1] pixel units
            if pre.interpolation == "nearest":  # a different source pixel only where a sample point is a tie
                assert (diff > 1e-6).float().mean() < 0.02, (pre, im.size)
                continue
            key = "explicit (h, w)" if isinstance(pre.resize, tuple) else "aspect kept"
            worst[key] = max(worst[key], float(diff.max()) * 255)
    # the same filter windows; what differs is where PIL rounds to 8 bits between its two passes (and, when one
    # axis grows while the other shrinks, which pass it does first)
    assert worst["aspect kept"] <= 3 + 1e-3, worst
    assert worst["explicit (h, w)"] <= 10 + 1e-3, worst


def test_crop_geometry_maps_the_original_onto_the_input_on_the_crop_first_path():
    # 40x2000 (aspect 50): resized 256x12800, far beyond the whole-resize budget; a red dot in the original's
    # centre must land where CropGeometry says (the overlay mapping relies on it)
    arr = np.zeros((40, 2000, 3), np.uint8)
    arr[18:22, 996:1004] = (255, 0, 0)
    pre = Preprocess(resize=256, crop=(224, 224), interpolation="bilinear", mean=(0, 0, 0), std=(1, 1, 1))
    x, geo = pre.apply(Image.fromarray(arr))
    y_in, x_in = geo.image_to_input(20.0, 1000.0)
    ys, xs = np.nonzero(x[0].numpy() > 0.5)
    assert ys.size and xs.size
    yy, xx = ys.mean() + 0.5, xs.mean() + 0.5  # the dot's centre, in input pixel coordinates
    assert abs(yy - y_in) <= 2 and abs(xx - x_in) <= 2, ((yy, xx), (y_in, x_in))
    y0, x0, y1, x1 = geo.crop_in_image()
    assert x0 < 1000 < x1 and y0 < 20 < y1


# ------------------------------------------------------------------ b. one reader, one pixel limit, same numbers
def test_pixel_limit_is_the_documented_one_not_pils(tmp_path):
    # 10000x9000 = 90 Mpx: above PIL's own 89.5 Mpx bomb warning, below vitviz's 20000x20000. The file is
    # truncated, so the honest error is about the data, not about the size
    p = tmp_path / "big_but_allowed.png"
    p.write_bytes(_png_header(10000, 9000, bit_depth=1, color_type=0))
    with pytest.raises(ImageError) as ei:
        load_image(p)
    msg = str(ei.value)
    assert str(p) in msg and "too large" not in msg, msg
    # far above the limit: one clear message with the limit, and PIL's own setting is left as it was
    before = Image.MAX_IMAGE_PIXELS
    for w, h in ((100000, 100000), (25000, 20000)):
        q = tmp_path / f"bomb_{w}x{h}.png"
        q.write_bytes(_png_header(w, h))
        with pytest.raises(ImageError) as ei:
            load_image(q)
        msg = str(ei.value)
        assert str(q) in msg and "too large" in msg and "20000x20000" in msg, msg
    assert Image.MAX_IMAGE_PIXELS == before


def _library_probs(model, path) -> torch.Tensor:
    x = model.spec.preprocess(load_image(path).image)[None]
    with torch.inference_mode():
        return model(x)[0].float().softmax(-1)


def _cli_probs(capsys, path) -> dict[int, float]:
    assert main(["predict", str(default_model_path()), str(path), "--top", "3"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == str(path)
    return {int(line.split()[0]): float(line.split()[1]) for line in out[1:]}


@pytest.mark.parametrize("kind", ["16bit", "rgba", "float_tiff"])
def test_predict_reads_images_like_the_window(tmp_path, capsys, demo_model, kind):
    rgb = np.asarray(Image.open(sample_images()[3]).convert("RGB"))  # a star on a plain background
    if kind == "16bit":  # used to be clipped to white by convert("RGB")
        p = tmp_path / "star16.png"
        Image.fromarray((rgb.mean(-1) * 257).astype(np.uint16)).save(p)
    elif kind == "rgba":  # transparent background used to become black, not the white the window shows
        alpha = np.where(np.abs(rgb.astype(int) - rgb[0, 0].astype(int)).sum(-1) > 60, 255, 0).astype(np.uint8)
        p = tmp_path / "star_rgba.png"
        Image.fromarray(np.dstack([rgb, alpha]), "RGBA").save(p)
    else:  # float TIFF in [0, 1] used to be black
        p = tmp_path / "star_float.tif"
        Image.fromarray((rgb.mean(-1) / 255.0).astype(np.float32), "F").save(p)
    cli = _cli_probs(capsys, p)
    lib = _library_probs(demo_model, p)
    for i, prob in cli.items():
        assert abs(prob - float(lib[i])) < 2e-3, (kind, i, prob, float(lib[i]))
    assert max(cli, key=cli.get) == int(lib.argmax())


def test_predict_decompression_bomb_is_one_line(tmp_path, capsys):
    p = tmp_path / "bomb.png"
    p.write_bytes(_png_header(100000, 100000))
    assert main(["predict", str(default_model_path()), str(p)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert str(p) in err and "too large" in err


# ------------------------------------------------------------------------------- c. pipes and special files
def test_fifo_with_a_writer_is_read(tmp_path):
    data = Path(sample_images()[0]).read_bytes()
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    t = _feed_fifo(fifo, data, delay=0.2)  # the writer shows up after the reader is waiting
    li = load_image(fifo)
    t.join(5)
    np.testing.assert_array_equal(li.rgb(), load_image(sample_images()[0]).rgb())


def test_fifo_without_a_writer_does_not_hang(tmp_path, monkeypatch):
    monkeypatch.setattr(imaging, "STREAM_TIMEOUT", 0.3)
    fifo = tmp_path / "silent.png"
    os.mkfifo(fifo)
    with pytest.raises(ImageError) as ei:
        load_image(fifo)
    assert str(fifo) in str(ei.value) and "nothing arrived" in str(ei.value)


def test_pipe_size_cap_and_empty_pipe(tmp_path, monkeypatch):
    monkeypatch.setattr(imaging, "MAX_STREAM_BYTES", 1000)
    fifo = tmp_path / "big.png"
    os.mkfifo(fifo)
    t = _feed_fifo(fifo, b"\0" * 5000)
    with pytest.raises(ImageError, match="more than"):
        load_image(fifo)
    t.join(5)
    t = _feed_fifo(fifo, b"")
    with pytest.raises(ImageError, match="no data"):
        load_image(fifo)
    t.join(5)


def test_process_substitution_like_a_file(tmp_path):
    """``vitviz predict MODEL <(cat x.png)``: a /dev/fd/N pipe, read by the one reader."""
    src = sample_images()[0]
    script = ("import subprocess, sys\n"
              "cat = subprocess.Popen(['cat', sys.argv[1]], stdout=subprocess.PIPE)\n"
              "fd = cat.stdout.fileno()\n"
              "r = subprocess.run([sys.executable, '-m', 'vitviz', 'predict', sys.argv[2], f'/dev/fd/{fd}',"
              " '--top', '1'], pass_fds=(fd,), capture_output=True, text=True)\n"
              "print(r.returncode); print(r.stdout); print(r.stderr, file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", script, str(src), str(default_model_path())], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.stdout.splitlines()[0] == "0", r.stdout + r.stderr
    assert "circle" in r.stdout and "Traceback" not in r.stderr


@pytest.mark.parametrize("kind", ["dir", "device", "parent_is_file", "symlink_loop", "dangling"])
def test_special_paths_are_clear_errors(tmp_path, kind):
    if kind == "dir":
        p = tmp_path / "folder.png"
        p.mkdir()
        expect = "folder"
    elif kind == "device":
        p = tmp_path / "null.png"
        p.symlink_to(os.devnull)
        expect = "device"
    elif kind == "parent_is_file":
        (tmp_path / "afile").write_text("x")
        p = tmp_path / "afile" / "x.png"
        expect = "cannot read"
    elif kind == "symlink_loop":
        p = tmp_path / "loop.png"
        p.symlink_to(p)
        expect = "cannot read"
    else:
        p = tmp_path / "dangling.png"
        p.symlink_to(tmp_path / "nowhere.png")
        expect = "does not exist"
    with pytest.raises(ImageError) as ei:
        load_image(p)
    assert str(p) in str(ei.value) and expect in str(ei.value), str(ei.value)


def test_permission_denied_names_the_file(tmp_path, monkeypatch):
    # running as root, chmod 000 does not stop a read: simulate the refusal where the file is opened
    p = tmp_path / "secret.png"
    Image.new("RGB", (4, 4)).save(p)

    def deny(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(p))

    monkeypatch.setattr(imaging.Image, "open", deny)
    with pytest.raises(ImageError) as ei:
        load_image(p)
    assert str(p) in str(ei.value) and "permission denied" in str(ei.value)


# ------------------------------------------------------------------------------------------ d. export writes
def test_export_parent_is_a_file(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("not a folder")
    for target in (f / "view.png", f / "deeper" / "view.png"):
        with pytest.raises(ExportError) as ei:
            write_png(target, np.zeros((2, 2, 3), np.uint8))
        msg = str(ei.value)
        assert f"{f} is a file, not a folder" in msg and str(target) in msg, msg
    with pytest.raises(ExportError, match="does not exist"):
        write_png(tmp_path / "missing" / "view.png", np.zeros((2, 2, 3), np.uint8))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("code, cause", [(errno.ENOSPC, "disk is full"), (errno.EFBIG, "too large")])
@pytest.mark.parametrize("overwrite", [False, True])
def test_export_disk_full_names_path_and_cause_and_leaves_nothing(tmp_path, monkeypatch, code, cause, overwrite):
    target = tmp_path / "view.png"
    if overwrite:
        write_png(target, np.zeros((2, 2, 3), np.uint8))
    before = target.read_bytes() if overwrite else None

    def full_disk(self, fp, *a, **k):
        fp.write(b"\x89PNG partial")  # a partial file is on disk when the device fills up
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(Image.Image, "save", full_disk)
    with pytest.raises(ExportError) as ei:
        write_png(target, np.zeros((8, 8, 3), np.uint8), overwrite=overwrite)
    msg = str(ei.value)
    assert str(target) in msg and cause in msg and os.strerror(code) in msg, msg
    assert sorted(p.name for p in tmp_path.iterdir()) == (["view.png"] if overwrite else [])  # no temp file
    if overwrite:
        assert target.read_bytes() == before  # the old export is untouched


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS])
def test_export_read_only_folder_names_the_folder(tmp_path, monkeypatch, code):
    folder = tmp_path / "ro"
    folder.mkdir()

    def refuse(*a, **k):
        raise (PermissionError if code == errno.EACCES else OSError)(code, os.strerror(code))

    monkeypatch.setattr(imaging.tempfile, "mkstemp", refuse)
    with pytest.raises(ExportError) as ei:
        write_png(folder / "view.png", np.zeros((2, 2, 3), np.uint8))
    msg = str(ei.value)
    assert f"folder {folder} is not writable" in msg and os.strerror(code) in msg, msg
    assert list(folder.iterdir()) == []


def test_load_image_makes_no_copy_of_an_image_that_needs_no_rotation(tmp_path, monkeypatch):
    """EXIF rotation is applied in place: an unrotated image is decoded once, not decoded and copied (a 20000x20000
    image peaked at 3.0 GiB instead of 1.5)."""
    plain = tmp_path / "plain.png"
    Image.new("RGB", (300, 200), (1, 2, 3)).save(plain)
    copies: list[tuple[int, int]] = []
    real = Image.Image.copy

    def counting_copy(self):
        copies.append(self.size)
        return real(self)

    monkeypatch.setattr(Image.Image, "copy", counting_copy)
    li = load_image(plain)
    assert copies == [] and li.size == (200, 300) and li.rgb()[0, 0].tolist() == [1, 2, 3]

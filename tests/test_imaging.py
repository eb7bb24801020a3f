"""Image loading (modes, EXIF, corrupt files), colormaps and overlays (vitviz.render.colormaps) and safe PNG writing."""

import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitviz import imaging
from vitviz.imaging import ExportError, ImageError, load_image, write_png
from vitviz.render import colormaps


def _save(img: Image.Image, path: Path, **kw) -> Path:
    img.save(path, **kw)
    return path


def test_rgb_png_roundtrip(tmp_path):
    arr = np.random.default_rng(0).integers(0, 256, (30, 50, 3), dtype=np.uint8)
    p = _save(Image.fromarray(arr), tmp_path / "a.png")
    li = load_image(p)
    assert li.size == (30, 50) and li.original_mode == "RGB"
    np.testing.assert_array_equal(li.rgb(), arr)


def test_grayscale_and_bilevel(tmp_path):
    g = np.arange(256, dtype=np.uint8).reshape(16, 16)
    li = load_image(_save(Image.fromarray(g, "L"), tmp_path / "g.png"))
    np.testing.assert_array_equal(li.rgb()[..., 0], g)
    np.testing.assert_array_equal(li.rgb()[..., 2], g)
    b = Image.fromarray((g > 127).astype(np.uint8) * 255).convert("1")
    li = load_image(_save(b, tmp_path / "b.png"))
    assert set(np.unique(li.rgb())) <= {0, 255}


def test_16bit_scaled_not_clipped(tmp_path):
    a16 = (np.linspace(0, 65535, 64 * 8).reshape(8, 64)).astype(np.uint16)
    p = _save(Image.fromarray(a16), tmp_path / "d.png")
    li = load_image(p)
    rgb = li.rgb()
    assert rgb[..., 0].max() == 255 and rgb[..., 0].min() == 0
    # scaled by the bit depth: a clip to 255 would make nearly everything white
    np.testing.assert_allclose(rgb[..., 0].astype(float), np.round(a16 / 257.0), atol=1)
    t = _save(Image.fromarray(a16), tmp_path / "d.tif")
    np.testing.assert_allclose(load_image(t).rgb().astype(int), rgb.astype(int), atol=1)


def test_palette_and_rgba_composited_on_white(tmp_path):
    rgba = np.zeros((10, 10, 4), np.uint8)
    rgba[..., 0] = 255
    rgba[:5, :, 3] = 255  # top half opaque red, bottom transparent
    li = load_image(_save(Image.fromarray(rgba, "RGBA"), tmp_path / "t.png"))
    np.testing.assert_array_equal(li.rgb()[0, 0], [255, 0, 0])
    np.testing.assert_array_equal(li.rgb()[9, 9], [255, 255, 255])
    pal = Image.fromarray(np.array([[0, 1], [1, 0]], np.uint8), "P")
    pal.putpalette([0, 0, 255, 0, 255, 0] + [0] * 762)
    li = load_image(_save(pal, tmp_path / "p.png"))
    np.testing.assert_array_equal(li.rgb()[0, 0], [0, 0, 255])
    np.testing.assert_array_equal(li.rgb()[0, 1], [0, 255, 0])


def test_cmyk_jpeg(tmp_path):
    cmyk = Image.new("CMYK", (20, 10), (0, 255, 255, 0))  # pure red in CMYK
    li = load_image(_save(cmyk, tmp_path / "c.jpg", quality=95))
    assert li.original_mode == "CMYK"
    r, g, b = li.rgb()[5, 10].astype(int)
    assert r > 200 and g < 60 and b < 60


def test_exif_rotation_honoured(tmp_path):
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:, :20] = (255, 0, 0)  # left half red
    img = Image.fromarray(arr)
    exif = img.getexif()
    exif[0x0112] = 6  # rotate 90 CW on display
    p = tmp_path / "r.jpg"
    img.save(p, exif=exif, quality=95)
    li = load_image(p)
    assert li.size == (40, 20)
    # after a 90 degree clockwise rotation the red (left) half is on top
    assert li.rgb()[5, 10, 0] > 200 and li.rgb()[35, 10, 0] < 60


def test_gif_first_frame_and_webp(tmp_path):
    f0 = Image.new("RGB", (8, 8), (255, 0, 0))
    f1 = Image.new("RGB", (8, 8), (0, 0, 255))
    p = tmp_path / "anim.gif"
    f0.save(p, save_all=True, append_images=[f1])
    li = load_image(p)
    assert li.frames == 2
    assert li.rgb()[0, 0, 0] > 200 and li.rgb()[0, 0, 2] < 60
    w = _save(Image.new("RGB", (9, 7), (0, 128, 0)), tmp_path / "x.webp", lossless=True)
    assert load_image(w).size == (7, 9)


@pytest.mark.parametrize("case", ["missing", "dir", "empty", "garbage", "truncated"])
def test_bad_images_name_file_and_problem(tmp_path, case):
    p = tmp_path / f"{case}.png"
    if case == "dir":
        p.mkdir()
    elif case == "empty":
        p.write_bytes(b"")
    elif case == "garbage":
        p.write_bytes(os.urandom(500))
    elif case == "truncated":
        buf = io.BytesIO()
        Image.fromarray(np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(buf, "PNG")
        p.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(ImageError) as ei:
        load_image(p)
    msg = str(ei.value)
    assert str(p) in msg
    expected = {"missing": "does not exist", "dir": "folder", "empty": "empty", "garbage": "not an image",
                "truncated": "truncated"}[case]
    assert expected in msg


@pytest.mark.parametrize("width,height,cause", [(0, 48, "a width of 0"), (48, 0, "a height of 0"),
                                                (0, 0, "a width of 0 and a height of 0")])
def test_a_png_header_declaring_no_pixels_is_named_for_that(tmp_path, width, height, cause):
    """PIL refuses such a PNG as "not an image"; the cause is the header's size."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    p = tmp_path / "empty-header.png"
    p.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                  + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))
    with pytest.raises(ImageError) as ei:
        load_image(p)
    assert str(ei.value) == f"{p}: the PNG header declares {cause}"


def test_colormaps_and_overlay():
    for name in colormaps.colormap_names():
        lut = colormaps.get_colormap(name)
        assert lut.shape == (256, 4) and lut.dtype == np.uint8
    gray = colormaps.get_colormap("gray")
    assert (np.diff(gray[:, 0].astype(int)) >= 0).all() and gray[0, 0] == 0 and gray[-1, 0] == 255
    np.testing.assert_array_equal(colormaps.get_colormap("viridis")[0, :3], [0x44, 0x01, 0x54])
    np.testing.assert_array_equal(colormaps.get_colormap("viridis")[-1, :3], [0xFD, 0xE7, 0x25])
    vals = np.array([[0.0, 1.0], [np.nan, 0.5]])
    rgba = colormaps.apply_colormap(vals, "gray")
    assert rgba[1, 0, 3] == 0 and rgba[0, 0, 3] == 255
    assert rgba[0, 0, 0] == 0 and rgba[0, 1, 0] == 255 and abs(int(rgba[1, 1, 0]) - 128) <= 1
    img = np.full((2, 2, 3), 100, np.uint8)
    np.testing.assert_array_equal(colormaps.overlay(img, vals, cmap="gray", opacity=0.0), img)
    full = colormaps.overlay(img, vals, cmap="gray", opacity=1.0)
    assert full[0, 1, 0] == 255 and full[0, 0, 0] == 0
    np.testing.assert_array_equal(full[1, 0], [100, 100, 100])  # NaN: image shows through
    with pytest.raises(ValueError, match="unknown colormap"):
        colormaps.get_colormap("nope")


def test_write_png_atomic_and_never_overwrites(tmp_path):
    a = np.zeros((5, 6, 3), np.uint8)
    out = write_png(tmp_path / "view.png", a)
    assert out.exists()
    before = out.read_bytes()
    with pytest.raises(FileExistsError):
        write_png(out, np.full((5, 6, 3), 255, np.uint8))
    assert out.read_bytes() == before
    write_png(out, np.full((5, 6, 3), 255, np.uint8), overwrite=True)
    assert np.asarray(Image.open(out)).min() == 255
    assert sorted(p.name for p in tmp_path.iterdir()) == ["view.png"]  # no temp files left
    assert imaging.next_free_path(out).name == "view-2.png"


def test_write_png_unwritable_folder(tmp_path, monkeypatch):
    with pytest.raises(ExportError, match="does not exist"):
        write_png(tmp_path / "nope" / "x.png", np.zeros((2, 2, 3), np.uint8))

    def deny(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(imaging.tempfile, "mkstemp", deny)
    with pytest.raises(ExportError) as ei:
        write_png(tmp_path / "x.png", np.zeros((2, 2, 3), np.uint8))
    assert str(tmp_path / "x.png") in str(ei.value) and "not writable" in str(ei.value)
    assert not (tmp_path / "x.png").exists()


def test_written_files_get_the_users_normal_permissions(tmp_path):
    import stat

    from vitviz.model import ViT, save_checkpoint

    old = os.umask(0o022)
    try:
        png = write_png(tmp_path / "v.png", np.zeros((2, 2, 3), np.uint8))
        ckpt = save_checkpoint(ViT(img_size=16, patch_size=8, embed_dim=8, depth=1, num_heads=2, num_classes=2),
                               tmp_path / "m.safetensors")
    finally:
        os.umask(old)
    for p in (png, ckpt):
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p  # not mkstemp's 0600


# ----------------------------------------------------------------------------------------------- memory of images
# opened at the same time (the loader threads of vitviz export, the window's)
_BOUND_S = 60  # a bound against a hang, never a speed


def _photo(path: Path, side: int) -> Path:
    Image.new("RGB", (side, side), (90, 140, 200)).save(path)
    return path


class _HeldDecoding:
    """PIL's decoding of ``held`` waits for :attr:`release`; every other image's decoding records whether ``held`` had
    been released when it started and sets :attr:`other`, as does a thread starting to wait for the images being
    decoded (the reservations' condition); :func:`vitviz.imaging.free_memory` is always ``free`` bytes."""

    def __init__(self, monkeypatch, held: Path, free: int):
        import threading

        from PIL import ImageFile

        self.started, self.release, self.other = threading.Event(), threading.Event(), threading.Event()
        self.released_before: dict[str, bool] = {}
        real = ImageFile.ImageFile.load
        other = self.other

        def load(im, *a, **k):
            if im.filename == str(held):
                self.started.set()
                assert self.release.wait(_BOUND_S)
            else:
                self.released_before.setdefault(Path(im.filename).name, self.release.is_set())  # (its first load)
                other.set()
            return real(im, *a, **k)

        class Watched(threading.Condition):
            def wait(self, timeout=None):
                other.set()  # (the lock is held until the wait below lets go of it)
                return super().wait(timeout)

        monkeypatch.setattr(ImageFile.ImageFile, "load", load)
        monkeypatch.setattr(imaging, "free_memory", lambda: free)
        monkeypatch.setattr(imaging.IMAGES_IN_FLIGHT, "condition", Watched())


def test_an_image_that_fits_alone_waits_while_another_is_decoded(tmp_path, monkeypatch):
    """10 MiB free: a 1000x1000 image (7 MB) and an 800x800 one (4.5 MB) each pass the memory check alone, not both
    at once. The second waits until the first is decoded (it was decoded beside it, each check passing alone), then
    opens; nothing stays reserved. No timing: the first is held until the second either decodes or waits, and the
    first's release needs the lock the second only lets go of while it waits."""
    import threading

    first, second = _photo(tmp_path / "first.png", 1000), _photo(tmp_path / "second.png", 800)
    held = _HeldDecoding(monkeypatch, first, free=10 * 2**20)
    results: dict[str, object] = {}

    def load(path, key):
        try:
            results[key] = load_image(path)
        except Exception as e:  # noqa: BLE001 - asserted below
            results[key] = e

    a = threading.Thread(target=load, args=(first, "first"), name="first")
    a.start()
    assert held.started.wait(_BOUND_S)
    assert imaging.memory_reserved() == 1000 * 1000 * imaging.BYTES_PER_PIXEL
    b = threading.Thread(target=load, args=(second, "second"), name="second")
    b.start()
    assert held.other.wait(_BOUND_S)
    held.release.set()
    a.join(_BOUND_S)
    b.join(_BOUND_S)
    assert not a.is_alive() and not b.is_alive()
    assert results["first"].size == (1000, 1000) and results["second"].size == (800, 800), results
    assert held.released_before == {"second.png": True}  # not decoded while the first was
    assert imaging.memory_reserved() == 0


def test_an_image_that_would_not_fit_even_with_the_others_memory_back_is_refused_at_once(tmp_path, monkeypatch):
    import threading

    first, big = _photo(tmp_path / "first.png", 1000), _photo(tmp_path / "big.png", 1800)  # 7 MB, 22.7 MB
    held = _HeldDecoding(monkeypatch, first, free=10 * 2**20)
    a = threading.Thread(target=load_image, args=(first,), name="first")
    a.start()
    try:
        assert held.started.wait(_BOUND_S)
        with pytest.raises(ImageError) as ei:  # this thread: refused while the first is still being decoded
            load_image(big)
        assert str(ei.value) == (f"{big}: opening this 1800x1800 image needs about 0.0 GiB, but only 0.0 GiB is free "
                                 "(memory, or this process's limit); reduce the image first")
    finally:
        held.release.set()
        a.join(_BOUND_S)
    assert held.released_before == {} and imaging.memory_reserved() == 0


@pytest.mark.parametrize("failure", [OSError("broken data stream"), MemoryError(), KeyboardInterrupt()])
def test_the_reservation_ends_with_the_decoding_however_it_ends(tmp_path, monkeypatch, failure):
    from PIL import ImageFile

    photo = _photo(tmp_path / "photo.png", 300)
    real = ImageFile.ImageFile.load
    monkeypatch.setattr(imaging, "free_memory", lambda: 2**30)
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda im, *a, **k: (_ for _ in ()).throw(failure))
    with pytest.raises((ImageError, KeyboardInterrupt)):
        load_image(photo)
    assert imaging.memory_reserved() == 0
    monkeypatch.setattr(ImageFile.ImageFile, "load", real)
    assert load_image(photo).size == (300, 300) and imaging.memory_reserved() == 0

"""``vitviz export`` and the figure limit: an image whose PNG figure (or animation frame) would be over
``MAX_FIGURE_PIXELS`` is refused from its header, before it is decoded or run through the model, reported like any
other bad image (one line naming it, its manifest record an error), and the other images are exported; its maps as
``.npy`` (at the patch grid's size) are not refused.
"""

from __future__ import annotations

import pytest
from bad_input_builders import png_header
from PIL import Image, ImageFile

from vitviz import imaging
from vitviz.batch.export_options import ExportOptions
from vitviz.batch.export_plan import figure_check
from vitviz.batch.manifest import read_manifest
from vitviz.cli import main
from vitviz.demo import generate
from vitviz.pipeline import Pipeline
from vitviz.render.figures import layout


@pytest.fixture
def watched(monkeypatch):
    """Which files PIL decoded and which images reached the model's preprocessing (``Pipeline.prepare``)."""
    seen: dict[str, list[str]] = {"decoded": [], "prepared": []}
    real_load, real_prepare = ImageFile.ImageFile.load, Pipeline.prepare

    def load(self, *a, **k):
        seen["decoded"].append(str(getattr(self, "filename", "")))
        return real_load(self, *a, **k)

    def prepare(self, image, *a, **k):
        seen["prepared"].append(str(image.path))
        return real_prepare(self, image, *a, **k)

    monkeypatch.setattr(ImageFile.ImageFile, "load", load)
    monkeypatch.setattr(Pipeline, "prepare", prepare)
    monkeypatch.setattr(imaging, "free_memory", lambda: 64 * 2**30)  # the memory check never speaks first
    return seen


def _small_images(folder, n=2):
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        p = folder / f"small{i}.png"
        Image.fromarray(generate(i, stream="test", size=(112, 112)).image).save(p)
        paths.append(p)
    return paths


def _export(folder, out, *extra):
    return main(["export", "--model", "demo", str(folder), "--out", str(out), "--views", "cls", "--precision",
                 "fp32", "--quiet", *extra])


def test_a_declared_12000x11000_png_is_refused_from_its_header(tmp_path, capsys, watched):
    """12000x11000 at its own pixels is a 132 Mpx figure: was decoded and run, then refused when the PNG was drawn
    (a real photo of that size: 2.5 min and 6.4 GB for nothing)."""
    folder = tmp_path / "images"
    small = _small_images(folder)
    big = folder / "big.png"
    big.write_bytes(png_header(12000, 11000))
    out = tmp_path / "out"
    assert _export(folder, out, "--format", "png", "--scale", "native") == 64 + 1
    recs = {r["source"]: r for r in read_manifest(out / "manifest.jsonl")}
    r = recs[str(big)]
    assert r["status"] == "error" and r["files"] == []
    assert r["error"] == (f"{big}: the figure would be at least 12000 x 11000 = 132.0 Mpx (at the image's own "
                          "pixels), over the 120 Mpx limit of a figure; reduce the image, or export its maps only "
                          "(--format npy)")
    assert all(recs[str(p)]["status"] == "ok" and recs[str(p)]["files"] for p in small)
    assert str(big) not in watched["decoded"] and str(big) not in watched["prepared"]
    assert sorted(watched["prepared"]) == [str(p) for p in small] and str(small[0]) in watched["decoded"]
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if "error:" in line] == [f"vitviz export: error: {r['error']}"]


@pytest.mark.parametrize("extra, refused", [
    (("--format", "png"), True),
    (("--format", "both"), True),
    (("--format", "npy", "--animate", "gif"), True),
    (("--format", "npy"), False),
])
def test_only_outputs_at_the_image_size_refuse_it(tmp_path, monkeypatch, watched, extra, refused):
    """With the limit lowered to 150 x 150 px, a real 200x200 image: its PNG figure and its animation frames are at
    its own pixels (refused before decoding), its .npy maps at the patch grid's (exported)."""
    monkeypatch.setattr(layout, "MAX_FIGURE_PIXELS", 150 * 150)
    folder = tmp_path / "images"
    folder.mkdir()
    photo = folder / "photo.png"
    Image.fromarray(generate(7, stream="test", size=(200, 200)).image).save(photo)
    out = tmp_path / "out"
    status = _export(folder, out, "--scale", "native", *extra)
    (r,) = read_manifest(out / "manifest.jsonl")
    if refused:
        assert status == 64 + 1 and r["status"] == "error"
        assert r["error"].startswith(f"{photo}: the figure would be at least 200 x 200 = 0.0 Mpx")
        assert str(photo) not in watched["decoded"] and watched["prepared"] == []
    else:
        assert status == 0 and r["status"] == "ok" and r["files"][0].endswith(".npy")
        assert watched["prepared"] == [str(photo)]


def test_the_check_follows_the_scale():
    """A factor multiplies the figure: a 1000x1000 image at 16x is 256 Mpx; the advice then names --scale."""
    check = figure_check(ExportOptions(scale="16"))
    assert check(1000, 1000) == ("the figure would be at least 16000 x 16000 = 256.0 Mpx (at 16x the image's "
                                 "pixels), over the 120 Mpx limit of a figure; choose a smaller --scale, reduce the "
                                 "image, or export its maps only (--format npy)")
    assert check(600, 600) is None  # 9600 x 9600 = 92 Mpx
    assert figure_check(ExportOptions(format="npy")) is None
    assert figure_check(ExportOptions(scale="print"))(11000, 10000) is None  # print: k = 1 above 2048 px

"""Figures for papers (vitviz.render.figures, vitviz.document.panel): sizes at each scale, text as text with its
spaces, SVG / PDF structure, the heads grid, layer animations, metadata round trips and refused targets. No Qt."""

import base64
import io
import json
import math
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from repo_paths import SHARED_WEIGHTS

from vitviz import imaging
from vitviz.document import appearance
from vitviz.document import panel as P
from vitviz.document.session import Session
from vitviz.imaging import ExportError
from vitviz.pipeline import run_inference
from vitviz.render import colormaps
from vitviz.render import figures as F
from vitviz.render.scales import scale_for

H, W = 70, 110
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def session(tiny_model):
    rng = np.random.default_rng(0)
    img = Image.fromarray((rng.random((H, W, 3)) * 255).astype(np.uint8))
    s = Session()
    s.set_result(run_inference(tiny_model, img, source="/some/where/my cat.png"))
    return s


def _texts_by_gid(fig, prefix):
    """The lines drawn with gid ``prefix-N``, in order."""
    from matplotlib.text import Text

    found = [(t.get_gid(), t.get_text()) for t in fig.findobj(Text) if (t.get_gid() or "").startswith(prefix)]
    return [text for _, text in sorted(found, key=lambda g: int(g[0].rsplit("-", 1)[1]))]


def _colorbar_axes(fig):
    return [ax for ax in fig.axes if hasattr(ax, "_colorbar")]


# ----------------------------------------------------------------------------------------------- sizes
def test_bare_native_figure_is_the_overlay_at_the_image_size(session):
    session.set_options(view="relevance", caption=False, colorbar=False)
    spec = P.view_figure(session)
    px = F.render(spec, "native").pixels
    assert px.shape == (H, W, 3)
    scale = session.levels()
    ref = colormaps.overlay(session.result.rgb, scale.normalise(session.image_map()), cmap=scale.cmap,
                          opacity=session.options.opacity, vmin=0.0, vmax=1.0)
    np.testing.assert_array_equal(px, ref)
    assert P.render_view(session).shape == (H, W, 3)  # the session's picture is the same figure


@pytest.mark.parametrize("scale, k", [("native", 1), (2, 2), ("3x", 3), ("print", math.ceil(2048 / W))])
def test_export_sizes_at_each_scale(session, tmp_path, scale, k):
    session.set_options(view="relevance")
    spec = P.view_figure(session)
    assert F.scale_factor(spec, scale) == k
    r = F.render(spec, scale)
    L = F.lay_out(spec, k)
    x, y, w, h = L.cells[0]
    assert (w, h) == (k * W, k * H)  # the panel is exactly k image pixels per pixel
    assert r.pixels.shape == (L.height, L.width, 3)
    assert L.width > w and L.height > h  # room for the title, the colour bar and the caption
    if scale == "print":
        assert max(w, h) >= 2048 and max(w, h) - 2048 < W  # the smallest factor that reaches 2048 px
    if k == 1:  # at the image's own size the panel holds the composite, pixel for pixel
        np.testing.assert_array_equal(r.pixels[y:y + h, x:x + w], F.composite(spec.panels[0], 1))
    out = F.save(spec, tmp_path / "v.png", scale=scale)
    with Image.open(out) as im:
        assert im.size == (L.width, L.height)
        assert im.info["dpi"][0] == pytest.approx(r.dpi, rel=0.01)  # pHYs: pixels per metre, rounded
    assert L.dpi >= F.MIN_DPI - 1e-9  # text in points stays at least this many pixels per inch


def test_the_physical_size_does_not_depend_on_the_scale(session):
    session.set_options(view="cls")
    spec = P.view_figure(session)
    inches = []
    for k in (4, 8, 16):  # (k = 1, 2 would fall under MIN_DPI: a smaller figure, text as readable)
        L = F.lay_out(spec, k)
        inches.append((L.width / L.dpi, L.height / L.dpi))
    np.testing.assert_allclose(inches, [inches[0]] * 3, rtol=0.03)


def test_parse_scale_and_refusals(session):
    assert F.parse_scale("Print") == "print" and F.parse_scale("2x") == 2 and F.parse_scale(4) == 4
    for bad in ("huge", "0", 17, True, "-2"):
        with pytest.raises(ValueError, match="scale|factor"):
            F.parse_scale(bad)
    spec = P.view_figure(session)
    with pytest.raises(ValueError, match="megapixels"):
        F.render(F.FigureSpec(panels=(F.Panel(photo=np.zeros((8000, 8000, 3), np.uint8)),)), 16)
    assert spec is not None


def test_size_problem_from_the_sizes_is_the_bare_figure_lay_out_refuses(monkeypatch):
    """:func:`size_problem` (no pixels needed) gives the panels' area at the scale's factor: a bare one-panel figure
    (no text, no bar) is exactly that, so both refuse the same figures; a grid adds only the gaps between panels."""
    from vitviz.render.figures import layout

    photo = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (70, 110, 3))  # the sizes only: no memory
    for panels, ncols, scale in ((1, 1, "native"), (1, 1, 3), (1, 1, "print"), (6, 3, "print"), (4, 4, 2)):
        monkeypatch.undo()
        spec = F.FigureSpec(panels=(F.Panel(photo=photo),) * panels, ncols=ncols, colorbar=False)
        k = F.scale_factor(spec, scale)
        w, h = k * 110 * ncols, k * 70 * spec.nrows
        L = F.lay_out(spec, k)
        if panels == 1:
            assert (L.width, L.height) == (w, h)
        else:
            assert L.width > w and L.height >= h
        monkeypatch.setattr(layout, "MAX_FIGURE_PIXELS", w * h)
        assert F.size_problem((70, 110), scale, panels=panels, ncols=ncols) is None
        monkeypatch.setattr(layout, "MAX_FIGURE_PIXELS", w * h - 1)
        problem = F.size_problem((70, 110), scale, panels=panels, ncols=ncols)
        assert problem.startswith(f"the figure would be at least {w} x {h} = "), problem
        with pytest.raises(ValueError, match="megapixels"):
            F.lay_out(spec, k)
    monkeypatch.undo()
    assert F.size_problem((11000, 12000), "native") == ("the figure would be at least 12000 x 11000 = 132.0 Mpx (at "
                                                        "the image's own pixels), over the 120 Mpx limit of a figure")
    assert F.size_problem((11000, 12000), "print") is not None and F.size_problem((10000, 11000), "print") is None


# ----------------------------------------------------------------------------------------------- text
def test_title_caption_and_colour_bar_say_what_the_window_says(session):
    session.set_options(view="relevance")
    spec = P.view_figure(session)
    fig = F.build(spec, k=2)
    title, caption = appearance.title(session.describe_view(), session.options), _texts_by_gid(fig, "caption")
    assert "Relevance (Chefer et al.)" in title
    # wrapped lines, joined with one space, give the strings back exactly: no collapsed or doubled spaces
    assert " ".join(_texts_by_gid(fig, "title")) == title == spec.title
    assert " ".join(caption) == spec.caption
    assert spec.caption.startswith(f"{session.result.model_name} · my cat.png · colour: ")
    assert appearance.scale_text(session.options, bool(session.artefact_grid().any())).split(",")[0] in spec.caption
    cb, = _colorbar_axes(fig)
    assert cb.get_ylabel() == appearance.quantity_text(session.view) == "relevance (a.u.)"
    ticks = session.levels().ticks(5)
    assert [t.get_text() for t in cb.get_yticklabels()] == [label for _, label in ticks]
    np.testing.assert_allclose(cb.get_yticks(), [v for v, _ in ticks])
    assert len(ticks) >= 3
    lo, hi = session.levels().lo, session.levels().hi
    assert cb.get_ylim() == pytest.approx((lo, hi))


def test_wrapping_keeps_every_character(session):
    text = "Relevance (Chefer et al.) · Egyptian cat · start layer 0 · mean of heads · a_very_long_file_name.png"
    for width in (40, 90, 150, 400, 2000):
        lines = F.wrap_text(text, 8.0, width)
        assert " ".join(lines) == text
        assert not any(ln.startswith("·") for ln in lines)
        assert all(F.text_width_pt(ln.removesuffix(" ·"), 8.0) <= width for ln in lines if " " in ln)
    assert len(F.wrap_text(text, 8.0, 2000)) == 1


def test_log_and_diverging_scales_reach_the_colour_bar(session):
    session.set_options(view="rollout", log_scale=True)
    fig = F.build(P.view_figure(session), k=1)
    cb, = _colorbar_axes(fig)
    scale = session.levels()
    assert scale.log and cb.get_yscale() == "log"
    assert [t.get_text() for t in cb.get_yticklabels()] == [label for _, label in scale.ticks(5)]
    session.set_options(view="token_sim", log_scale=False, layer=1)
    spec = P.view_figure(session)
    assert spec.scale.diverging and spec.scale.lo == -spec.scale.hi and spec.scale.cmap == "coolwarm"
    fig = F.build(spec, k=1)
    cb, = _colorbar_axes(fig)
    assert "0" in [t.get_text() for t in cb.get_yticklabels()]


def test_text_with_dollar_signs_is_not_maths(tmp_path):
    spec = F.FigureSpec(panels=(F.Panel(photo=np.zeros((200, 300, 3), np.uint8)),), title="cost $5 and $x^2$",
                        caption="file a$b.png")
    fig = F.build(spec, k=1)
    assert _texts_by_gid(fig, "title") == ["cost $5 and $x^2$"]
    F.save(spec, tmp_path / "d.svg")
    assert "cost $5 and $x^2$" in (tmp_path / "d.svg").read_text()


# ----------------------------------------------------------------------------------------------- vector formats
def test_svg_has_text_elements_a_vector_colour_bar_and_the_image_at_full_resolution(session, tmp_path):
    session.set_options(view="relevance")
    spec = P.view_figure(session)
    out = F.save(spec, tmp_path / "fig.svg")
    root = ET.parse(out).getroot()
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    assert spec.title.split(" · ")[0] in " ".join(texts)
    fig = F.build(spec)
    assert " ".join(t for t in texts if t in _texts_by_gid(fig, "title")) == spec.title
    assert " ".join(t for t in texts if t in _texts_by_gid(fig, "caption")) == spec.caption
    assert appearance.quantity_text(session.view) in texts
    images = list(root.iter(f"{SVG}image"))
    assert len(images) == 1  # the map; the colour bar is drawn with paths, not an image
    href = images[0].get("{http://www.w3.org/1999/xlink}href")
    png = Image.open(io.BytesIO(base64.b64decode(href.split(",", 1)[1])))
    assert png.size == (W, H)  # embedded at the image's own resolution
    np.testing.assert_array_equal(np.asarray(png.convert("RGB")), F.composite(spec.panels[0], 1))
    assert len(list(root.iter(f"{SVG}path"))) > 256  # 256 colour steps of the bar, the outline, ticks


def test_pdf_has_one_page_of_the_figures_aspect(session, tmp_path):
    session.set_options(view="cls", layer=2)
    spec = P.view_figure(session)
    out = F.save(spec, tmp_path / "fig.pdf")
    data = out.read_bytes()
    assert data.startswith(b"%PDF") and data.rstrip().endswith(b"%%EOF")
    boxes = F.pdf_pages(data)
    assert len(boxes) == 1 and re.findall(rb"/Count\s+(\d+)", data) == [b"1"]
    x0, y0, x1, y1 = boxes[0]
    L = F.lay_out(spec)
    assert (x1 - x0) / (y1 - y0) == pytest.approx(L.width / L.height, rel=1e-3)
    assert (x1 - x0) == pytest.approx(L.width / L.dpi * 72, rel=1e-3)  # points: the print layout's size
    assert len(re.findall(rb"/Subtype\s*/Image", data)) == 1  # the map only; the colour bar is vector
    assert b"/FontFile2" in data  # TrueType embedded: text stays text


def test_pdf_text_is_extractable(session, tmp_path):
    pdftotext = "/usr/bin/pdftotext"
    if not os.path.exists(pdftotext):
        pytest.skip("poppler's pdftotext is not installed (an extra check; the PDF structure is tested above)")
    session.set_options(view="relevance")
    spec = P.view_figure(session)
    out = F.save(spec, tmp_path / "fig.pdf")
    text = subprocess.run([pdftotext, "-raw", str(out), "-"], capture_output=True, text=True, check=True).stdout
    assert spec.title.split(" · mean")[0] in text and "tiny test ViT · my cat.png" in text
    assert "relevance" in text and "(a.u.)" in text  # the colour bar's label (rotated: one word a line)


# ----------------------------------------------------------------------------------------------- heads grid
@pytest.mark.parametrize("n, cell, expect", [(3, (300, 451), (1, 3)), (12, (300, 451), (3, 4)), (6, (1, 1), (2, 3)),
                                             (16, (1, 1), (4, 4)), (7, (1, 1), (1, 7)), (1, (5, 5), (1, 1))])
def test_grid_shape_has_no_empty_cell(n, cell, expect):
    assert F.grid_shape(n, cell) == expect
    for m in range(1, 30):
        r, c = F.grid_shape(m, cell)
        assert r * c == m


def test_heads_grid_has_a_title_one_shared_scale_its_bar_and_no_empty_cell(session, tmp_path):
    session.set_options(view="cls", layer=1)
    spec = P.heads_figure(session)
    r = session.result
    assert len(spec.panels) == r.num_heads == spec.nrows * spec.ncols
    assert [p.label for p in spec.panels] == [f"head {h}" for h in range(r.num_heads)]
    assert "layer 1" in spec.title and "[CLS]" in spec.title
    assert r.model_name in spec.caption and "my cat.png" in spec.caption
    assert all(p.scale == spec.scale for p in spec.panels)
    maps = session.head_maps(1)
    ref = scale_for(maps, mode="shared", shared=maps, percentile=session.options.percentile, cmap="inferno")
    assert (spec.scale.lo, spec.scale.hi) == pytest.approx((ref.lo, ref.hi))
    fig = F.build(spec, k=1)
    cb, = _colorbar_axes(fig)
    assert cb.get_ylabel() == "attention weight"
    L = F.lay_out(spec, 1)
    assert len(L.cells) == r.num_heads and len({(x, y) for x, y, _, _ in L.cells}) == r.num_heads
    out = F.save(spec, tmp_path / "heads.png")
    with Image.open(out) as im:
        assert max(im.size) >= 2048
    # the all-layers grid: rows are layers, columns heads
    spec = P.heads_figure(session, all_layers=True)
    assert (spec.nrows, spec.ncols) == (r.num_layers, r.num_heads)
    assert spec.row_labels == tuple(f"layer {i}" for i in range(r.num_layers))
    assert spec.col_labels == tuple(f"head {h}" for h in range(r.num_heads))
    assert P.render_heads(session).shape[0] > 2 * H


# ----------------------------------------------------------------------------------------------- animation
def test_layer_figures_one_per_layer_each_labelled_on_one_scale(session):
    session.set_options(view="cls", head=2)
    specs = P.layer_figures(session)
    L = session.result.num_layers
    assert len(specs) == L
    assert [s.panels[0].badge for s in specs] == [f"layer {i}" for i in range(L)]
    for i, s in enumerate(specs):
        fig = F.build(s, k=1)
        assert _texts_by_gid(fig, "badge") == [f"layer {i}"]
        assert f"layer {i}" in s.title
    assert len({(s.scale.lo, s.scale.hi) for s in specs}) == 1  # shared across layers
    assert session.options.layer == 0 and session.options.scale == "robust"  # the session is left as it was
    maps = [s.panels[0].values for s in specs]
    assert not np.allclose(maps[0], maps[-1], equal_nan=True)
    # token views start at the embeddings; cumulative views step their start layer
    session.set_options(view="token_norm")
    badges = [s.panels[0].badge for s in P.layer_figures(session)]
    assert badges == [session.view.layer_text(i) for i in range(-1, L)] and "embeddings" in badges[0]
    session.set_options(view="rollout")
    assert P.layer_figures(session)[1].panels[0].badge == "start layer 1"
    session.set_options(view="grad_rollout")
    with pytest.raises(ValueError, match="does not change with the layer"):
        P.layer_figures(session)


@pytest.mark.parametrize("ext", [".gif", ".apng", ".mp4"])
def test_animation_has_a_frame_per_layer(session, tmp_path, ext):
    session.set_options(view="cls")
    specs = P.layer_figures(session)
    seen = []
    out = F.save_animation(specs, tmp_path / f"a{ext}", scale="native", fps=4,
                           metadata={"vitviz.session": '{"layer": "all"}'},
                           progress=lambda d, t: seen.append((d, t)) or True)
    n = len(specs)
    assert seen == [(i + 1, n) for i in range(n)]
    if ext == ".mp4":
        import imageio_ffmpeg

        frames, _ = imageio_ffmpeg.count_frames_and_secs(str(out))
        assert frames == n
    else:
        with Image.open(out) as im:
            assert im.n_frames == n and im.info.get("loop") == 0
            pix = []
            for i in range(n):
                im.seek(i)
                pix.append(np.asarray(im.convert("RGB")).astype(int))
        assert all(p.shape == pix[0].shape for p in pix)
        assert all(np.abs(a - b).mean() > 0.5 for a, b in zip(pix, pix[1:]))  # every frame shows its own layer
    assert F.read_metadata(out)["vitviz.session"] == '{"layer": "all"}'


def test_animation_cancel_and_mp4_without_encoder(session, tmp_path, monkeypatch):
    session.set_options(view="cls")
    specs = P.layer_figures(session)
    with pytest.raises(InterruptedError):
        F.save_animation(specs, tmp_path / "c.gif", scale="native", progress=lambda d, t: d < 2)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # as if it were not installed
    assert "pip install imageio-ffmpeg" in F.mp4_problem()
    with pytest.raises(ExportError, match="imageio-ffmpeg"):
        F.save_animation(specs, tmp_path / "v.mp4", scale="native")
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------------- metadata
STATE = json.dumps({"model": "file:/m (1).safetensors", "image": "/ü/ç \\ chat.png", "layer": 3, "note": "x" * 3000},
                   ensure_ascii=False)


@pytest.mark.parametrize("ext", [".png", ".svg", ".pdf"])
def test_metadata_round_trip(session, tmp_path, ext):
    spec = P.view_figure(session)
    out = F.save(spec, tmp_path / f"m{ext}", metadata={"vitviz.session": STATE, "Author": "A. Researcher"})
    meta = F.read_metadata(out)
    assert meta["vitviz.session"] == STATE and meta["Author"] == "A. Researcher"
    assert meta["Title"] == spec.title
    if ext == ".png":  # independently, as Pillow reads text chunks
        with Image.open(out) as im:
            im.load()
            assert im.text["vitviz.session"] == STATE and im.text["Software"].startswith("vitviz")
    if ext == ".pdf":
        assert meta["Subject"] == spec.caption


def test_metadata_is_read_without_decoding_pixels(session, tmp_path, monkeypatch):
    """Only the metadata is read: PIL is never asked (no pixels decoded, no decompression-bomb check of a declared
    size), for every format vitviz writes."""
    spec = P.view_figure(session)
    outs = [F.save(spec, tmp_path / f"m{ext}", scale="native", metadata={"vitviz.session": STATE})
            for ext in (".png", ".svg", ".pdf")]
    outs += [F.save_animation([spec, spec], tmp_path / f"a{ext}", scale="native", metadata={"vitviz.session": STATE})
             for ext in (".gif", ".apng")]

    def refuse(*a, **k):
        raise AssertionError("PIL opened a figure")

    monkeypatch.setattr(Image, "open", refuse)
    for out in outs:
        assert F.read_metadata(out)["vitviz.session"] == STATE, out.name


def _png(*chunks: bytes) -> bytes:
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = chunk(b"IHDR", struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + ihdr + b"".join(chunk(k, d) for k, d in chunks) + chunk(b"IEND", b"")


def test_png_text_is_capped_stored_and_inflated(tmp_path):
    import zlib

    p = tmp_path / "bomb.png"
    bomb = zlib.compress(b" " * (8 << 20), 9)  # 8 MB of spaces in about 8 KB
    p.write_bytes(_png((b"IDAT", b""), (b"zTXt", b"vitviz.session\0\0" + bomb)))
    with pytest.raises(F.MetadataError) as e:
        F.read_metadata(p, max_bytes=1 << 20)
    assert str(e.value) == (f"{p}: its compressed zTXt chunk 'vitviz.session' inflates to over 2,097,152 bytes (a "
                            f"decompression bomb?); a figure's text entries hold at most 2,097,152 bytes")
    assert F.read_metadata(p, max_bytes=16 << 20)["vitviz.session"] == " " * (8 << 20)  # within the cap: read
    p.write_bytes(_png((b"tEXt", b"k\0" + b"x" * (3 << 20))))
    with pytest.raises(F.MetadataError, match="its tEXt text chunk holds 3,145,730 bytes"):
        F.read_metadata(p, max_bytes=1 << 20)


def test_a_cut_short_or_damaged_figure_names_the_file_and_the_cause(session, tmp_path):
    spec = P.view_figure(session)
    for ext, cause in ((".png", "the PNG is cut short"), (".pdf", "the PDF is cut short (it does not end with %%EOF)"),
                       (".svg", "the SVG is cut short (it does not end with </svg>)")):
        data = F.save(spec, tmp_path / f"whole{ext}", scale="native", metadata={"vitviz.session": STATE}).read_bytes()
        cut = tmp_path / f"cut{ext}"
        cut.write_bytes(data[:len(data) * 2 // 3])
        with pytest.raises(F.MetadataError) as e:
            F.read_metadata(cut)
        assert str(e.value).startswith(f"{cut}: {cause}")
    with pytest.raises(F.MetadataError, match="not a PNG, SVG, PDF, GIF or MP4 file"):
        F.read_metadata(Path(__file__))
    with pytest.raises(F.MetadataError, match="file does not exist"):
        F.read_metadata(tmp_path / "nothing.png")


def test_pdf_document_information_as_other_writers_write_it(tmp_path):
    """Strings with balanced parentheses, octal codes, line continuations, hex strings and UTF-16; references,
    numbers, names, arrays and nested dictionaries skipped; the trailer's /Info found from the end."""
    info = (b"<< /Title (a \\(b\\) (c) d\\101\\\ne) /Subject <FEFF00e9 0041> /Count 3 /Ref 4 0 R /Trapped /False "
            b"/Arr [1 (x) [2] << /K (v) >>] /D << /In (side) >> /vitviz.session (\\376\\377\\000{) >>")
    p = tmp_path / "other.pdf"
    p.write_bytes(b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog >>\nendobj\n7 0 obj\n" + info + b"\nendobj\nxref\n"
                  b"0 1\n0000000000 65535 f \ntrailer\n<< /Root 1 0 R /Info 7 0 R >>\nstartxref\n0\n%%EOF\n")
    meta = F.read_metadata(p)
    assert meta == {"Title": "a (b) (c) dAe", "Subject": "\u00e9A", "vitviz.session": "{"}


def test_an_unclosed_pdf_object_is_refused_without_scanning_the_file_again_and_again(tmp_path):
    p = tmp_path / "unclosed.pdf"
    objects = b"".join(b"%d 0 obj\n<< /Title (t%d)\n" % (i, i) for i in range(1, 300_000))
    p.write_bytes(b"%PDF-1.4\n" + objects + b"trailer\n<< /Info 1 0 R >>\n%%EOF\n")
    with pytest.raises(F.MetadataError) as e:
        F.read_metadata(p)
    assert str(e.value) == f"{p}: the PDF's document information is not closed (object 2 begins inside it)"


def test_bad_metadata_is_refused_before_writing(session, tmp_path):
    spec = P.view_figure(session)
    for bad in ({"": "x"}, {"has space": "x"}, {"k": 3}, {"x" * 80: "v"}):
        with pytest.raises(ValueError, match="metadata"):
            F.save(spec, tmp_path / "b.png", metadata=bad)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------------- targets
def test_refused_targets_leave_everything_as_it_was(session, tmp_path, monkeypatch):
    spec = P.view_figure(session)
    folder = tmp_path / "ro"
    folder.mkdir()
    existing = folder / "fig.png"
    existing.write_bytes(b"precious")
    with pytest.raises(FileExistsError):
        F.save(spec, existing)
    real = imaging.tempfile.mkstemp

    def mkstemp(*a, dir=None, **k):  # a read-only folder (root writes anyway, so refuse where it would)
        if dir is not None and Path(dir) == folder:
            raise PermissionError(13, "Permission denied")
        return real(*a, dir=dir, **k)

    monkeypatch.setattr(imaging.tempfile, "mkstemp", mkstemp)
    for name in ("fig.png", "new.svg", "new.pdf"):
        with pytest.raises(ExportError, match="not writable") as e:
            F.save(spec, folder / name, overwrite=True)
        assert str(folder / name) in str(e.value)
    with pytest.raises(ExportError, match="not writable"):
        F.save_animation(P.layer_figures(session), folder / "a.gif", scale="native", overwrite=True)
    assert existing.read_bytes() == b"precious" and sorted(p.name for p in folder.iterdir()) == ["fig.png"]
    with pytest.raises(ExportError, match="does not exist"):
        F.save(spec, tmp_path / "missing" / "f.png")
    with pytest.raises(ExportError, match="unknown figure format '.jpg'"):
        F.save(spec, tmp_path / "f.jpg")
    with pytest.raises(ExportError, match="unknown animation format"):
        F.save_animation(P.layer_figures(session), tmp_path / "f.avi")


def test_matplotlib_stays_out_of_start_up():
    code = ("import sys, vitviz.document.session, vitviz.render.figures, vitviz.gui.main_window; "
            "print('matplotlib' in sys.modules)")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.real_weights
def test_the_cat_relevance_figure_with_real_weights(tmp_path):
    weights = SHARED_WEIGHTS
    path = weights / "vit_tiny_patch16_224_augreg_in21k_ft_in1k.safetensors"
    if not path.exists():
        pytest.skip("no ../shared/weights")
    skimage = pytest.importorskip("skimage.data")
    import vitviz

    img = tmp_path / "cat.png"
    Image.fromarray(skimage.chelsea()).save(img)
    s = Session()
    s.set_result(run_inference(vitviz.load_checkpoint(path), imaging.load_image(img).image, source=str(img)))
    s.set_options(view="relevance")
    spec = P.view_figure(s)
    assert "Egyptian cat" in spec.title and "cat.png" in spec.caption
    out = F.save(spec, tmp_path / "relevance.png")
    with Image.open(out) as im:
        x, y, w, h = F.lay_out(spec).cells[0]
        assert (w, h) == (451 * 5, 300 * 5) and im.width > w and im.info["dpi"][0] > 600


def test_vitviz_export_animate_writes_one_animation_per_layered_view(tmp_path, capsys):
    from vitviz.batch.manifest import read_manifest
    from vitviz.cli import main

    folder = tmp_path / "in"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for name in ("a.png", "b.png"):
        Image.fromarray((rng.random((40, 60, 3)) * 255).astype(np.uint8)).save(folder / name)
    out = tmp_path / "out"
    status = main(["export", "--model", "demo", str(folder), "--out", str(out), "--views", "cls,grad_rollout,rollout",
                   "--heads", "mean,1", "--animate", "gif", "--fps", "4", "--quiet", "--precision", "fp32"])
    assert status == 0, capsys.readouterr().err
    for rec in read_manifest(out / "manifest.jsonl"):
        anims = [m for m in rec["maps"] if "animation" in m]
        # cls: one per head asked; rollout: its start layer; grad_rollout has no layer: none
        assert sorted(m["animation"].split("_", 1)[1] for m in anims) == \
            ["cls_h1_layers.gif", "cls_mean_layers.gif", "rollout_layers.gif"]
        for m in anims:
            with Image.open(out / m["animation"]) as im:
                assert im.n_frames == m["frames"] > 1 and im.info["duration"] == 250
            assert m["animation"] in rec["files"]
    # flags checked before any work: a view without layers only, an fps out of range
    assert main(["export", "--model", "demo", str(folder), "--out", str(tmp_path / "o2"), "--views", "grad_rollout",
                 "--animate", "gif"]) == 2
    assert "changes with the layer" in capsys.readouterr().err
    assert main(["export", "--model", "demo", str(folder), "--out", str(tmp_path / "o3"), "--animate", "gif",
                 "--fps", "0"]) == 2
    assert "--fps" in capsys.readouterr().err

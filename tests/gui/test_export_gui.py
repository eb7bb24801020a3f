"""The window's exports: File > Export view / heads / layer animation, their file types and sizes, the save dialog's
size choice, metadata, and errors (offscreen)."""

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from gui_helpers import Recorder, open_and_wait
from PIL import Image
from PySide6.QtWidgets import QPushButton

from vitviz import imaging
from vitviz.document import appearance
from vitviz.document import panel as P
from vitviz.render import figures as F
from vitviz.render.figures import layout as figure_layout


class ExportRecorder(Recorder):
    """A Recorder that answers the export dialog (path and size) and remembers what it was offered."""

    def __init__(self, answer=None):
        super().__init__()
        self.answer = answer
        self.asked = []

    def save_export(self, title, suggested, filters, scales, scale):
        self.asked.append((title, suggested, tuple(filters), tuple(v for v, _ in scales), scale))
        return self.answer


def test_export_view_defaults_to_print_size_and_writes_each_format(qtbot, window, image_path, tmp_path):
    w = window
    w.dialogs = w.dialogs_recorder
    open_and_wait(qtbot, w, image_path)
    w.set_view("relevance")
    png = w.export_view(str(tmp_path / "v.png"))
    with Image.open(png) as im:
        x, y, cw, ch = F.lay_out(P.view_figure(w.session)).cells[0]
        assert max(cw, ch) >= 2048 and im.width > cw and im.height > ch
        assert im.info["dpi"][0] > 300
    assert "Exported" in w.statusBar().currentMessage() and "dpi" in w.statusBar().currentMessage()
    svg = w.export_view(str(tmp_path / "v.svg"))
    pdf = w.export_view(str(tmp_path / "v.pdf"))
    assert appearance.title(w.session.describe_view(), w.session.options) in " ".join(_svg_texts(svg))
    assert len(F.pdf_pages(pdf.read_bytes())) == 1
    assert w.dialogs.errors == []
    # a type vitviz does not write: one clear error, nothing written
    assert w.export_view(str(tmp_path / "v.jpg")) is None
    (title, msg), = w.dialogs.errors
    assert "Export failed" in title and "v.jpg" in msg and ".svg" in msg
    assert not (tmp_path / "v.jpg").exists()


def wait_export(qtbot, w):
    """Wait for the export File > Export started off the GUI thread to end; it must have written its file."""
    task = w.exports.task
    assert task is not None
    qtbot.waitUntil(lambda: task.ended, timeout=120000)
    assert task.state == "done", task.message
    return task


def _svg_texts(path):
    import xml.etree.ElementTree as ET

    return ["".join(t.itertext()) for t in ET.parse(path).getroot().iter("{http://www.w3.org/2000/svg}text")]


def test_the_export_dialog_offers_types_and_sizes_and_remembers_them(qtbot, window, image_path, tmp_path):
    w = window
    open_and_wait(qtbot, w, image_path)
    out = tmp_path / "chosen.png"
    w.dialogs = ExportRecorder(answer=(str(out), "2"))
    w.acts.export.trigger()
    wait_export(qtbot, w)
    (title, suggested, filters, scales, scale), = w.dialogs.asked
    assert filters == (".png", ".svg", ".pdf") and scales[:2] == ("print", "native") and scale == "print"
    assert suggested.endswith(".png") and Path(suggested).stem == Path(w.session.export_name()).stem
    with Image.open(out) as im:
        L = F.lay_out(P.view_figure(w.session), 2)
        assert im.size == (L.width, L.height)
    assert w.settings.value("export_scale") == "2"
    # the next time the dialog starts from the remembered size and type
    w.dialogs = ExportRecorder(answer=None)
    w.acts.export.trigger()
    assert w.dialogs.asked[0][4] == "2"
    assert w.dialogs.errors == []


def test_heads_export_follows_the_heads_panel(qtbot, window, image_path, tmp_path):
    w = window
    w.dialogs = w.dialogs_recorder
    open_and_wait(qtbot, w, image_path)
    r = w.session.result
    w.set_layer(1)
    one = w.export_heads(str(tmp_path / "heads.png"), scale="native")
    w.heads.grid_toggle.setChecked(True)
    every = w.export_heads(str(tmp_path / "every.png"), scale="native")
    with Image.open(one) as a, Image.open(every) as b:
        assert b.height > a.height  # every layer's row
        meta_one, meta_all = a.text, b.text
    assert "layer 1" in meta_one["Title"] and f"{r.num_heads} heads" in meta_one["Title"]
    assert "every layer" in meta_all["Title"] and "photo.png" in meta_all["Description"]
    assert w.dialogs.errors == []


def test_layer_animation_from_the_window(qtbot, window, image_path, tmp_path):
    w = window
    open_and_wait(qtbot, w, image_path)
    w.set_view("cls")
    out = tmp_path / "layers.gif"
    w.dialogs = ExportRecorder(answer=(str(out), "native"))
    assert "animation" in " ".join(a.text().lower() for a in w.menuBar().actions()[0].menu().actions())
    w.acts.export_animation.trigger()
    wait_export(qtbot, w)
    with Image.open(out) as im:
        assert im.n_frames == w.session.result.num_layers
    assert w.dialogs.asked[0][2] == (".gif", ".apng", ".mp4")
    # a view that does not change with the layer: a clear message, nothing written
    w.set_view("grad_rollout")
    assert w.export_animation(str(tmp_path / "no.gif")) is None
    (title, msg), = w.dialogs.errors
    assert "Nothing to animate" in title and "layer" in msg
    assert not (tmp_path / "no.gif").exists()


def test_export_metadata_hook_reaches_every_format(qtbot, window, image_path, tmp_path, monkeypatch):
    w = window
    w.dialogs = w.dialogs_recorder
    open_and_wait(qtbot, w, image_path)
    state = json.dumps({"view": w.session.options.view, "image": str(image_path)})
    monkeypatch.setattr(w, "export_metadata", lambda: {"vitviz.session": state})
    for name in ("m.png", "m.svg", "m.pdf"):
        assert F.read_metadata(w.export_view(str(tmp_path / name), scale="native"))["vitviz.session"] == state
    assert F.read_metadata(w.export_animation(str(tmp_path / "m.apng"), scale="native"))["vitviz.session"] == state


def test_read_only_folder_shows_an_error_and_keeps_the_file(qtbot, window, image_path, tmp_path, monkeypatch):
    w = window
    w.dialogs = w.dialogs_recorder
    open_and_wait(qtbot, w, image_path)
    folder = tmp_path / "ro"
    folder.mkdir()
    old = folder / "view.png"
    old.write_bytes(b"an earlier figure")
    real = imaging.tempfile.mkstemp

    def mkstemp(*a, dir=None, **k):  # root writes into read-only folders: refuse where the OS would
        if dir is not None and Path(dir) == folder:
            raise PermissionError(13, "Permission denied")
        return real(*a, dir=dir, **k)

    monkeypatch.setattr(imaging.tempfile, "mkstemp", mkstemp)
    w.dialogs.confirm_answer = True  # "replace it?" yes: the write itself is refused
    assert w.export_view(str(old), scale="native") is None
    (title, msg), = w.dialogs.errors
    assert "Export failed" in title and str(old) in msg and "not writable" in msg
    assert old.read_bytes() == b"an earlier figure" and [p.name for p in folder.iterdir()] == ["view.png"]
    assert w.session.result is not None and np.isfinite(w.session.current_map()).all()


def test_file_export_draws_off_the_gui_thread_with_a_progress_dialog(qtbot, window, image_path, tmp_path, monkeypatch):
    w = window
    open_and_wait(qtbot, w, image_path)
    out = tmp_path / "print.png"
    w.dialogs = ExportRecorder(answer=(str(out), "print"))
    threads, dialogs = [], []
    real = F.save

    def save(*a, **k):
        threads.append(threading.current_thread())
        return real(*a, **k)

    monkeypatch.setattr(F, "save", save)
    w.acts.export.trigger()
    task = w.exports.task
    dialogs.append(task.dialog)  # the progress dialog with its Cancel button exists while the export runs
    assert dialogs[0] is not None and dialogs[0].labelText().startswith("Writing print.png")
    wait_export(qtbot, w)
    assert threads and threads[0] is not threading.main_thread()
    with Image.open(out) as im:
        im.load()  # complete: decodes to the end
        assert max(im.size) >= 2048
    assert task.dialog is None and task.out == out and "Exported" in w.statusBar().currentMessage()


def test_cancelling_an_export_leaves_no_file_nor_a_partial_one(qtbot, window, image_path, tmp_path, monkeypatch):
    """The cancel arrives while the export is under way (the worker held at its start by the test, not by timing):
    the writer stops at its next step, nothing is written, no temporary file stays behind, the status says so."""
    w = window
    w.dialogs = w.dialogs_recorder
    open_and_wait(qtbot, w, image_path)
    started, go = threading.Event(), threading.Event()
    real = F.save

    def held_save(*a, **k):
        started.set()
        go.wait(60)
        return real(*a, **k)

    monkeypatch.setattr(F, "save", held_save)
    out = tmp_path / "cancelled" / "view.png"
    out.parent.mkdir()
    task = w.exports.export_view(str(out), scale="print", background=True)
    qtbot.waitUntil(started.is_set, timeout=60000)
    task.dialog.findChild(QPushButton).click()  # the dialog's Cancel button
    go.set()
    qtbot.waitUntil(lambda: task.ended, timeout=120000)
    assert task.state == "cancelled" and task.out is None
    assert list(out.parent.iterdir()) == []
    assert "cancelled" in w.statusBar().currentMessage() and w.dialogs.errors == []


def test_the_figure_writer_stops_before_writing_when_cancelled_after_drawing(tmp_path, qtbot, window, image_path):
    """The steps of :func:`figures.save` driven by hand: a cancel reported after the drawing writes nothing; the same
    export not cancelled writes a complete file."""
    open_and_wait(qtbot, window, image_path)
    spec = P.view_figure(window.session)
    calls = []

    def cancel_after_drawing(done, total):
        calls.append(done)
        return done < 1

    with pytest.raises(InterruptedError):
        F.save(spec, tmp_path / "a.png", scale="native", progress=cancel_after_drawing)
    assert calls == [0, 1] and list(tmp_path.glob("a*")) == [] and list(tmp_path.glob(".a*")) == []
    out = F.save(spec, tmp_path / "a.png", scale="native", progress=lambda d, t: True)
    with Image.open(out) as im:
        im.load()


def test_a_figure_over_the_limit_is_refused_before_any_map_is_drawn(qtbot, window, image_path, tmp_path,
                                                                    monkeypatch):
    """With the figure limit below the 110x70 image's own pixels, every File > Export of it (view as PNG and SVG,
    heads, layer animation) is one error naming the image and the limit, said before a map is drawn at the image's
    pixels (the figure builders are never called), and nothing is written."""
    w = window
    w.dialogs = w.dialogs_recorder
    open_and_wait(qtbot, w, image_path)
    monkeypatch.setattr(figure_layout, "MAX_FIGURE_PIXELS", 110 * 70 - 1)

    def never(*a, **k):
        raise AssertionError("a figure was built for an image whose figure is over the limit")

    for name in ("view_figure", "heads_figure", "layer_figures"):
        monkeypatch.setattr(P, name, never)
    assert w.export_view(str(tmp_path / "v.png"), scale="native") is None
    assert w.export_view(str(tmp_path / "v.svg")) is None  # laid out at print size: 19x the image
    assert w.export_heads(str(tmp_path / "h.png"), scale="native") is None
    assert w.export_animation(str(tmp_path / "a.gif"), scale="native") is None
    errors = w.dialogs.errors
    assert [title for title, _ in errors] == ["Export refused"] * 4
    native = f"{image_path}: the figure would be at least 110 x 70 = 0.0 Mpx (at the image's own pixels), over the "
    assert errors[0][1].startswith(native) and errors[0][1].endswith("; choose a smaller size or reduce the image")
    assert "(at 19x the image's pixels)" in errors[1][1]
    assert errors[3][1].startswith(native)
    assert list(tmp_path.glob("[vha].*")) == []

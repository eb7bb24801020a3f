"""File > Save / Open session in the window: the same screen comes back (identical maps), from a session file and
from an exported PNG; another model is opened when the session names one; bad files leave the window unchanged."""

import json

import numpy as np
from gui_helpers import open_and_wait

from vitviz.document import state as st
from vitviz.render import figures


def _snapshot(w):
    s = w.session
    return {"options": s.options, "source": s.result.source, "target": s.result.target, "images": list(s.images),
            "map": s.current_map().copy(), "image_map": s.image_map().copy(), "model": w.model, "key": w.model_key,
            "heads_all": w.heads.all_layers}


def _same(w, snap):
    now = _snapshot(w)
    assert now["options"] == snap["options"]
    assert (now["source"], now["target"], now["images"]) == (snap["source"], snap["target"], snap["images"])
    assert now["heads_all"] == snap["heads_all"]
    np.testing.assert_array_equal(now["map"], snap["map"])
    np.testing.assert_array_equal(now["image_map"], snap["image_map"])


def _scramble(qtbot, w, files):
    """Change everything the session holds."""
    open_and_wait(qtbot, w, files["images"][1])
    w.set_view("rollout")
    w.set_layer(0)
    w.controls.cmap_combo.setCurrentText("magma")
    w.heads.grid_toggle.setChecked(False)


def _set_up_view(qtbot, w, files):
    open_and_wait(qtbot, w, files["images"][0])
    r = w.session.result
    target = (r.target + 2) % 5
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        w.set_target(target)
    w.set_view("relevance")
    w.set_layer(1)
    w.set_query(6)
    w.session.set_options(mask_keep=0.5, mask_style="dim", percentile=97.0, opacity=0.4)
    w.controls.cmap_combo.setCurrentText("viridis")
    w.heads.grid_toggle.setChecked(True)
    w.refresh_view()
    assert w.session.result.target == target
    return _snapshot(w)


def test_save_then_open_restores_the_same_screen(qtbot, win, files):
    snap = _set_up_view(qtbot, win, files)
    path = win.save_session(str(files["folder"] / "mine"))
    assert path == files["folder"] / "mine.vitviz.json" and win.dialogs.errors == []
    _scramble(qtbot, win, files)
    with qtbot.waitSignal(win.resultShown, timeout=30000):
        assert win.open_session(str(path))
    _same(win, snap)
    assert win.model is snap["model"]  # the same model: not reopened
    assert win.controls.cmap_combo.currentText() == "viridis"
    qtbot.waitUntil(lambda: "Opened mine.vitviz.json" in win.statusBar().currentMessage(), timeout=30000)
    assert win.dialogs.errors == []


def test_an_exported_png_reopens_the_view_that_made_it(qtbot, win, files):
    snap = _set_up_view(qtbot, win, files)
    out = win.export_view(str(files["folder"] / "figure.png"), scale="native")
    assert out is not None
    assert st.METADATA_KEY in figures.read_metadata(out)
    _scramble(qtbot, win, files)
    with qtbot.waitSignal(win.resultShown, timeout=30000):
        assert win.open_session(str(out))
    _same(win, snap)


def test_an_exported_png_given_as_an_image_opens_its_session_and_says_so(qtbot, win, files):
    """'vitviz figure.png' (or a drop): a figure vitviz exported carries its session and opens it (issue 37)."""
    snap = _set_up_view(qtbot, win, files)
    out = win.export_view(str(files["folder"] / "figure2.png"), scale="native")
    _scramble(qtbot, win, files)
    with qtbot.waitSignal(win.resultShown, timeout=30000):
        win.open_images([str(out)])  # as from the command line
    _same(win, snap)
    assert str(out) not in win.session.images  # not opened as a photo
    qtbot.waitUntil(lambda: "figure2.png carries (a figure vitviz exported" in win.statusBar().currentMessage())


def test_a_session_file_among_opened_files_opens_as_a_session(qtbot, win, files):
    snap = _set_up_view(qtbot, win, files)
    path = win.save_session(str(files["folder"] / "drop.vitviz.json"))
    _scramble(qtbot, win, files)
    with qtbot.waitSignal(win.resultShown, timeout=30000):
        win.open_images([str(path)])  # as from the command line ('vitviz drop.vitviz.json') or a drop
    _same(win, snap)


def test_a_session_with_another_model_opens_that_model(qtbot, win, files, tiny_model, tmp_path):
    from vitviz.model import create_model, save_checkpoint

    other = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                         num_classes=5)
    other.spec = other.spec.replace(name="other tiny ViT")
    ck2 = save_checkpoint(other, tmp_path / "other.safetensors")
    open_and_wait(qtbot, win, files["images"][0])
    win.set_view("cls")
    win.set_layer(1)
    doc = st.to_dict(win.sessions.current_state())
    doc["model"] = {"ref": f"file:{ck2}"}
    path = tmp_path / "other.vitviz.json"
    path.write_text(json.dumps(doc))
    with qtbot.waitSignal(win.resultShown, timeout=60000):
        assert win.open_session(str(path))
    assert win.model_key == f"file:{ck2}" and win.model.spec.name == "other tiny ViT"
    assert win.session.result.num_layers == 2 and win.session.options.layer == 1
    # the same map as the session reopened headlessly
    s2, _ = st.reproduce(st.read_state(path))
    np.testing.assert_allclose(win.session.current_map(), s2.current_map(), rtol=1e-6, atol=1e-8)


def _bad_variants(good: dict, files) -> list[tuple[str, dict | bytes, str]]:
    out = []
    d = json.loads(json.dumps(good))
    d["images"][0]["path"] = str(files["folder"] / "missing.png")
    d["images"][0].pop("relative", None)
    out.append(("missing image", d, "does not exist"))
    d = json.loads(json.dumps(good))
    d["model"] = {"ref": "pretrained:no_such_weights"}
    out.append(("unknown model", d, "unknown model"))
    d = json.loads(json.dumps(good))
    d["model"] = {"ref": f"file:{files['folder'] / 'gone.safetensors'}"}
    out.append(("missing checkpoint", d, "gone.safetensors does not exist"))
    d = json.loads(json.dumps(good))
    d["options"]["layer"] = "two"
    out.append(("wrong type", d, "options.layer must be an integer"))
    out.append(("not json", b"\x00\x01binary", "not valid JSON"))
    return out


def test_bad_session_files_leave_the_window_unchanged(qtbot, win, files):
    snap = _set_up_view(qtbot, win, files)
    good = st.to_dict(win.sessions.current_state())
    for name, content, message in _bad_variants(good, files):
        path = files["folder"] / f"{name.replace(' ', '_')}.vitviz.json"
        path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
        win.dialogs.errors.clear()
        assert not win.open_session(str(path)), name
        assert len(win.dialogs.errors) == 1, name
        title, text = win.dialogs.errors[0]
        assert title == "Could not open the session" and str(path) in text and message in text, (name, text)
        _same(win, snap)
        assert win.model is snap["model"] and win.model_key == snap["key"]


def test_a_target_the_model_lacks_is_refused_on_the_worker_and_nothing_changes(qtbot, win, files):
    snap = _set_up_view(qtbot, win, files)
    doc = st.to_dict(win.sessions.current_state())
    doc["target"] = 42
    path = files["folder"] / "target.vitviz.json"
    path.write_text(json.dumps(doc))
    win.dialogs.errors.clear()
    with qtbot.waitSignal(win.errorShown, timeout=30000) as blocker:
        assert win.open_session(str(path))  # the file is fine; the model is checked in the background
    title, text = blocker.args
    assert title == "Could not open the session" and "target class 42" in text and "5 classes" in text
    qtbot.waitUntil(lambda: not win.controller.is_busy(), timeout=30000)
    qtbot.wait(200)
    assert win.dialogs.errors == [(title, text)]  # one failure, one dialog (not the job's and the window's both)
    _same(win, snap)


def test_saving_more_images_than_a_session_holds_is_refused_with_one_dialog(qtbot, win, files, monkeypatch):
    open_and_wait(qtbot, win, files["images"][0])
    monkeypatch.setattr(win.session, "images", [files["images"][0]] + [f"/nowhere/{i}.png" for i in range(10_000)])
    win.dialogs.errors.clear()
    assert win.save_session(str(files["folder"] / "big")) is None
    (title, text), = win.dialogs.errors
    assert title == "Could not save the session"
    assert text == (f"{files['folder'] / 'big.vitviz.json'}: cannot be saved: the session holds 10,001 images; a "
                    f"session holds at most 10,000 (close some images first)")
    assert not (files["folder"] / "big.vitviz.json").exists()


def test_a_long_error_message_is_summarised_in_its_dialog():
    from vitviz.gui.dialogs import MAX_DETAIL_CHARS, MAX_MESSAGE_LINES, summarised

    message = "x.vitviz.json: cannot be opened:\n" + "\n".join(f"- the image /p/{i}.png does not exist"
                                                                for i in range(10_000))
    shown, whole = summarised(message)
    lines = shown.splitlines()
    assert len(lines) == MAX_MESSAGE_LINES and lines[:3] == message.splitlines()[:3]
    assert lines[-1] == "… and 9,990 more lines (Show Details…)"
    assert whole == message[:MAX_DETAIL_CHARS] + "\n…"  # the details: the message, within a bound
    assert summarised("short: fine") == ("short: fine", "")
    shown, whole = summarised("y" * 50_000)
    assert len(shown) < 2100 and whole == "y" * 50_000


def test_saving_refuses_what_could_not_be_reopened(qtbot, window, image_path, tmp_path):
    window.dialogs = window.dialogs_recorder
    open_and_wait(qtbot, window, image_path)  # the window's model was handed over in memory
    assert window.save_session(str(tmp_path / "s.vitviz.json")) is None
    assert "handed to vitviz by a script" in window.dialogs.errors[-1][1]
    assert not (tmp_path / "s.vitviz.json").exists()
    # its exported figures still carry the state, and say why they cannot be reopened
    out = window.export_view(str(tmp_path / "fig.png"), scale="native")
    window.dialogs.errors.clear()
    assert not window.open_session(str(out))
    assert "handed to vitviz by a script" in window.dialogs.errors[-1][1]


def test_a_session_opens_at_its_saved_precision(qtbot, win, files, tiny_model):
    """A session saved at fp32 (here headlessly, as 'vitviz' scripts would) shows the same maps in a window that
    runs at another precision: the model is opened afresh at the saved one."""
    from vitviz.document.session import Session
    from vitviz.imaging import load_image
    from vitviz.model import load_checkpoint
    from vitviz.pipeline import Pipeline

    open_and_wait(qtbot, win, files["images"][1])
    win.set_precision("bf16")
    qtbot.waitUntil(lambda: win.controller.pipeline.precision == "bf16" and not win.controller.is_busy(),
                    timeout=30000)
    a = files["images"][0]
    s = Session()
    s.add_images([a])
    s.set_result(Pipeline(load_checkpoint(files["ckpt"]), precision="fp32").run(load_image(a), source=a, target=3))
    s.set_options(view="relevance", start_layer=1)
    path = st.save_state(st.capture_state(s, f"file:{files['ckpt']}", precision="fp32"), files["folder"] / "p.json")
    with qtbot.waitSignal(win.resultShown, timeout=60000):
        assert win.open_session(str(path))
    assert win.controller.pipeline.precision == "fp32" and win.precision == "fp32"
    np.testing.assert_array_equal(win.session.current_map(), s.current_map())
    assert win.session.result.target == 3

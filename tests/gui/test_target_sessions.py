"""Targets in the window's sessions: a similarity target saved with the session and made again on opening (the same
maps), a function saved by its name and reopened as the top class with a note, and a saved target that cannot be made
(one message, the window unchanged)."""

import json

import numpy as np
from gui_helpers import open_and_wait

from vitviz.document.target_choice import TargetChoice


def _choose(qtbot, w, choice):
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        assert w.targets.choose(choice)
    return w.session.result


def test_a_similarity_target_is_saved_and_made_again(qtbot, win, files):
    a, b = files["images"]
    open_and_wait(qtbot, win, a)
    r = _choose(qtbot, win, TargetChoice("patch", path=b, patch=(1, 2)))
    win.set_view("legrad")
    want_map, want_spec = win.session.current_map().copy(), r.target_spec
    path = win.save_session(str(files["folder"] / "sim"))
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["version"] == 2 and doc["target"]["kind"] == "patch" and doc["target"]["patch"] == [1, 2]
    _choose(qtbot, win, TargetChoice("top"))  # something else shown meanwhile
    assert win.controller.target_choice is None
    with qtbot.waitSignal(win.resultShown, timeout=30000):
        assert win.open_session(str(path))
    r2 = win.session.result
    assert r2.target_spec == want_spec and r2.target_spec.name == "patch (1, 2) of im1.png"
    assert win.controller.target_choice == TargetChoice("patch", path=b, patch=(1, 2))  # it stands again
    np.testing.assert_allclose(win.session.current_map(), want_map, rtol=1e-4, atol=1e-6)
    assert "similar to patch (1, 2) of im1.png" in win.canvas.title.text() and win.dialogs.errors == []


def score(out):
    return out[2] - out[0]


def test_a_function_reopens_as_the_top_class_with_a_note(qtbot, win, files):
    a, _ = files["images"]
    open_and_wait(qtbot, win, a)
    r = _choose(qtbot, win, score)
    assert r.target_spec.fn is score and "score(output)" in win.predictions.box.label.text()
    path = win.save_session(str(files["folder"] / "fn"))
    assert json.loads(path.read_text(encoding="utf-8"))["target"] == {"kind": "callable", "name": "score"}
    with qtbot.waitSignal(win.resultShown, timeout=30000):
        assert win.open_session(str(path))
    r2 = win.session.result
    assert r2.target == r2.top_k(1)[0][0] and win.controller.target_choice is None
    qtbot.waitUntil(lambda: "the function score, was saved by its name only" in win.statusBar().currentMessage(),
                    timeout=30000)
    assert win.dialogs.errors == []


def test_a_saved_target_that_cannot_be_made_leaves_the_window_unchanged(qtbot, win, files):
    a, b = files["images"]
    open_and_wait(qtbot, win, a)
    _choose(qtbot, win, TargetChoice("image", path=b))
    path = win.save_session(str(files["folder"] / "bad"))
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["target"] = {"kind": "patch", "path": b, "patch": [40, 0]}  # outside the 4x4 grid
    path.write_text(json.dumps(doc), encoding="utf-8")
    shown, options = win.session.result, win.session.options
    with qtbot.waitSignal(win.errorShown, timeout=30000) as sig:
        win.open_session(str(path))
    title, message = sig.args
    assert title == "Could not open the session"
    assert str(path) in message and "patch (40, 0) is outside the 4x4 patch grid of im1.png" in message
    qtbot.wait(50)
    assert win.session.result is shown and win.session.options == options and len(win.dialogs.errors) == 1

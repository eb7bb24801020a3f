"""The corpus of bad prompts (issue 24): what the window's prompt box, a session file's ``prompts`` and
``vitviz.show(..., text=...)`` may be handed.

* session files whose ``prompts`` are wrong (not a list, empty, a number, an empty or blank prompt, one with ';' or
  outer spaces, a target index beyond the prompts, a target object beside prompts): one
  :class:`~vitviz.document.state.StateError` ``"<the file>: not a valid session: <cause>"`` naming the field, within
  :data:`TIMEOUT_S` seconds;
* the prompt box on a tiny random open_clip CLIP folder: bad prompts typed (empty ones, ';' alone, a trailing ';'):
  exactly one error dialog titled "Could not use the prompts", one line, the window as it was (the same result
  object, pipeline, options, title; the box showing the prompts in use);
* ``vitviz.show(text=...)``: a module without a text tower, empty prompts, a model whose source has no text tower:
  one :class:`~vitviz.capture.targets.TargetError` line starting ``vitviz.show(text=...)``, before any window opens.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import text_builders as tb
from bounded_runs import bounded
from PIL import Image
from repo_paths import REPO

from vitviz.document import state as st

TIMEOUT_S = 60.0  # a bound against a hang, not a speed: generous for a busy machine (speed is measured in bench/)


def _photo(path, seed=0):
    Image.fromarray((np.random.default_rng(seed).random((40, 48, 3)) * 255).astype(np.uint8)).save(path)
    return str(path)




SESSION_PROMPTS = [
    ("prompts_a_string", "a cat; a dog", 0, "prompts must be a list, not a string"),
    ("prompts_empty_list", [], None, "prompts is empty: leave it out for a session without prompts"),
    ("prompt_a_number", ["a cat", 3], 0, "prompts[1] must be a string, not an integer"),
    ("prompt_empty", ["a cat", ""], 0, "prompts[1] is empty"),
    ("prompt_blank", ["   "], None, "prompts[0] is '   ': a prompt is a phrase without ';' or outer spaces"),
    ("prompt_with_a_semicolon", ["a cat; a dog"], None, "prompts[0] is 'a cat; a dog': a prompt is a phrase"),
    ("prompt_outer_spaces", [" a cat"], None, "prompts[0] is ' a cat': a prompt is a phrase"),
    ("target_beyond_the_prompts", ["a cat", "a dog"], 2, "target is 2 but there are 2 prompts (it indexes them)"),
    ("target_object_beside_prompts", ["a cat"], {"kind": "text", "name": "a cat"},
     "target: with prompts the target is a prompt's index (or null), not an object"),
    ("prompts_an_object", {"a": 1}, 0, "prompts must be a list, not an object"),
]


@pytest.mark.parametrize("name, prompts, target, needle", SESSION_PROMPTS, ids=[c[0] for c in SESSION_PROMPTS])
def test_a_session_with_bad_prompts_is_refused_naming_them(tmp_path, name, prompts, target, needle):
    image = _photo(tmp_path / "photo.png")
    path = tmp_path / f"{name}.vitviz.json"
    doc = {"format": "vitviz-session", "version": 2, "written_by": "vitviz corpus", "model": {"ref": "demo"},
           "images": [{"path": image}], "current": 0, "target": target, "options": {"view": "legrad"},
           "prompts": prompts}
    path.write_text(json.dumps(doc), encoding="utf-8")
    out = bounded(lambda: st.locate(st.read_state(path)), TIMEOUT_S, name="corpus-prompts")
    e = out.get("error")
    assert isinstance(e, st.StateError), (name, out)
    msg = str(e)
    assert msg.startswith(f"{path}: not a valid session: ") and needle in msg and "\n" not in msg, (name, msg)


@pytest.fixture
def settings(tmp_path, monkeypatch):
    from PySide6.QtCore import QSettings

    monkeypatch.setenv("VITVIZ_SETTINGS", str(tmp_path / "default-settings.ini"))
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory):
    pytest.importorskip("open_clip")
    cfg = tb.open_clip_cfg(True)
    cfg["vision_cfg"].update(width=128, head_width=64)
    return tb.write_open_clip_folder(tmp_path_factory.mktemp("clip") / "oc", tb.open_clip_model(cfg), cfg)


BOX_PROMPTS = [(";", "the prompt is empty: type a phrase (several separated by ';')"),
               (" ;  ; ", "the prompt is empty"),
               ("a cat;;a dog", "prompt 2 of 3 is empty (two ';' in a row, or one at the end)"),
               ("a cat;", "prompt 2 of 2 is empty"),
               ("; a cat", "prompt 1 of 2 is empty")]


def test_bad_prompts_typed_in_the_box_leave_the_window_as_it_was(qtbot, settings, clip_folder, tmp_path):
    sys.path.insert(0, str(REPO / "tests" / "gui"))
    from gui_helpers import Recorder

    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow
    from vitviz.pipeline import Pipeline

    make_app()
    w = MainWindow(settings=settings, model=Pipeline.open(f"file:{clip_folder}"), model_key=f"file:{clip_folder}")
    w.dialogs = rec = Recorder()
    qtbot.addWidget(w)
    w.show()
    image = _photo(tmp_path / "photo.png")
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        w.open_images([image])
    edit = w.predictions.prompt_box.edit
    with qtbot.waitSignal(w.resultShown, timeout=60000):
        edit.setText("a cat; a dog")
        edit.returnPressed.emit()
    for text, needle in BOX_PROMPTS:
        r, pipeline, options, title = w.session.result, w.controller.pipeline, w.session.options, w.windowTitle()
        n = len(rec.errors)
        with qtbot.waitSignal(w.errorShown, timeout=int(TIMEOUT_S * 1000)):
            edit.setText(text)
            edit.returnPressed.emit()
        qtbot.wait(50)
        assert len(rec.errors) == n + 1, text
        t, message = rec.errors[-1]
        assert t == "Could not use the prompts" and needle in message and "\n" not in message, (text, message)
        assert w.session.result is r and w.controller.pipeline is pipeline and w.session.options == options
        assert w.windowTitle() == title and edit.text() == "a cat; a dog"
    w.close()


def test_show_with_bad_text_is_one_line_before_any_window(settings, clip_folder, tiny_model, tmp_path):
    import vitviz
    from vitviz.capture.targets import TargetError
    from vitviz.model import save_checkpoint
    from vitviz.pipeline import Pipeline

    image = _photo(tmp_path / "photo.png")
    module = Pipeline.open(f"file:{clip_folder}").model
    module.spec = module.spec.replace(source_path=None)
    ckpt = save_checkpoint(tiny_model, tmp_path / "tiny.safetensors")
    cases = [(module, ["a cat"], "this model was handed over as a module"),
             (clip_folder, [], "the prompt is empty"),
             (clip_folder, "a cat;", "prompt 2 of 2 is empty"),
             (clip_folder, ["a cat", "  "], "prompt 2 of 2 is empty"),
             (str(ckpt), ["a cat"], "tiny.safetensors")]
    for model, text, needle in cases:
        with pytest.raises(TargetError) as e:
            vitviz.show(model, [image], text=text, block=False, settings=settings)
        msg = str(e.value)
        assert msg.startswith("vitviz.show(text=...): ") and needle in msg and "\n" not in msg, (text, msg)

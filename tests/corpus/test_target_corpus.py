"""The corpus of bad targets (issue 23): what the window's target box, a session file's ``target`` and
``vitviz.show(target=...)`` may be handed.

Three surfaces:

* targets made and used (:meth:`vitviz.document.target_choice.TargetChoice.build`, then the capture): an unknown
  class, a class of a feature model, reference images that are missing, unreadable, a folder; a patch outside the
  grid; stored vectors that are missing, not .npy, pickled objects, 2-D, zero, of the wrong length, NaN; functions
  that raise, return a Python number, a vector, an integer tensor or a value that does not depend on the output.
  Each is one :class:`~vitviz.capture.targets.TargetError` on one line naming the target (the file, the function)
  and the cause, within :data:`TIMEOUT_S` seconds;
* session files whose ``target`` is wrong (a wrong type, an unknown kind, a missing path or patch, a patch that is not
  two indices, a vector that is not .npy, a function with a path, unknown keys) or names a reference that is not
  there: one :class:`~vitviz.document.state.StateError` ``"<the file>: <cause>"`` naming the field, nothing opened;
* the window: a representative subset chosen in the target box: exactly one error dialog, titled "Could not use the
  target", the same line, and the window as it was (the same result object, options, title, standing target).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from bounded_runs import bounded
from PIL import Image
from repo_paths import REPO

from vitviz.capture.targets import TargetError
from vitviz.document import state as st
from vitviz.document.target_choice import TargetChoice, as_choice
from vitviz.imaging import load_image

TIMEOUT_S = 60.0  # a bound against a hang, not a speed: generous for a busy machine (speed is measured in bench/)


@dataclass(frozen=True)
class TargetCase:
    """One bad target: ``target`` (a TargetChoice or what a caller passes) for the ``model`` ("classifier" or
    "features"), refused with ``needle`` in its one line."""

    name: str
    target: Any
    needle: str
    model: str = "features"


def _photo(path: Path, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    Image.fromarray((rng.random((40, 48, 3)) * 255).astype(np.uint8)).save(path)
    return str(path)


def raises(out):
    raise KeyError("score")


def number(out):
    return 3.5


def vector(out):
    return out[:4]


def integer(out):
    return out.argmax()


def constant(out):
    return torch.tensor(0.5)


def build(root: Path) -> list[TargetCase]:
    root.mkdir(exist_ok=True)
    ref = _photo(root / "ref.png", 1)
    (root / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    (root / "a_folder.png").mkdir()
    np.save(root / "short.npy", np.ones(5, np.float32))
    np.save(root / "matrix.npy", np.ones((3, 32), np.float32))
    np.save(root / "zero.npy", np.zeros(32, np.float32))
    np.save(root / "nan.npy", np.full(32, np.nan, np.float32))
    np.save(root / "objects.npy", np.array([{"a": 1}], dtype=object))
    np.save(root / "words.npy", np.array(["a", "b"]))
    (root / "cut.npy").write_bytes(b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', ")
    (root / "text.npy").write_text("1, 2, 3", encoding="utf-8")
    cases = [
        TargetCase("class_of_a_feature_model", TargetChoice("class", index=0), "class 0: this model has no classifier"),
        TargetCase("class_out_of_range", TargetChoice("class", index=5),
                   "target class 5 out of range for a model with 5 classes (valid: 0..4)", "classifier"),
        TargetCase("reference_missing", TargetChoice("image", path=str(root / "nope.png")),
                   f"reference image {root / 'nope.png'}: no such file"),
        TargetCase("reference_unreadable", TargetChoice("image", path=str(root / "broken.png")),
                   f"reference image: {root / 'broken.png'}"),
        TargetCase("reference_a_folder", TargetChoice("image", path=str(root / "a_folder.png")),
                   f"reference image {root / 'a_folder.png'}: is a folder, not an image file"),
        TargetCase("patch_row_outside", TargetChoice("patch", path=ref, patch=(4, 0)),
                   "patch (4, 0) is outside the 4x4 patch grid of ref.png (rows 0..3, columns 0..3)"),
        TargetCase("patch_column_outside", TargetChoice("patch", path=ref, patch=(0, 99)),
                   "patch (0, 99) is outside the 4x4 patch grid of ref.png", "classifier"),
        TargetCase("patch_of_a_missing_file", TargetChoice("patch", path=str(root / "nope.png"), patch=(1, 1)),
                   "no such file"),
        TargetCase("vector_missing", TargetChoice("vector", path=str(root / "gone.npy")),
                   f"reference vector {root / 'gone.npy'}: no such file"),
        TargetCase("vector_wrong_length", TargetChoice("vector", path=str(root / "short.npy")),
                   "the reference vector has 5 values but the model's pooled embedding has 32"),
        TargetCase("vector_wrong_length_classifier", TargetChoice("vector", path=str(root / "short.npy")),
                   "the reference vector has 5 values but the model's pooled embedding has 32", "classifier"),
        TargetCase("vector_a_matrix", TargetChoice("vector", path=str(root / "matrix.npy")),
                   "the reference must be one vector, got shape (3, 32)"),
        TargetCase("vector_zero", TargetChoice("vector", path=str(root / "zero.npy")), "is zero (no direction)"),
        TargetCase("vector_nan", TargetChoice("vector", path=str(root / "nan.npy")), "NaN or infinite values"),
        TargetCase("vector_pickled_objects", TargetChoice("vector", path=str(root / "objects.npy")),
                   "not a plain .npy array"),
        TargetCase("vector_of_words", TargetChoice("vector", path=str(root / "words.npy")), "not numbers"),
        TargetCase("vector_cut_short", TargetChoice("vector", path=str(root / "cut.npy")), "reference vector"),
        TargetCase("vector_text_file", TargetChoice("vector", path=str(root / "text.npy")),
                   "not a plain .npy array"),
        TargetCase("function_raises", raises, "target function raises raised KeyError: 'score'"),
        TargetCase("function_raises_classifier", raises, "target function raises raised KeyError", "classifier"),
        TargetCase("function_returns_a_number", number, "target function number returned a float, not a tensor"),
        TargetCase("function_returns_a_vector", vector, "target function vector returned shape (4,), not a scalar"),
        TargetCase("function_returns_an_integer", integer,
                   "target function integer returned dtype torch.int64, not a floating scalar", "classifier"),
        TargetCase("function_of_nothing", constant, "its value does not depend on the model's output"),
        TargetCase("function_saved_by_name", TargetChoice("callable", name="score"), "a function cannot be saved"),
        TargetCase("pasted_reference_gone", TargetChoice("image", path="pasted image"), "it was not a file"),
        TargetCase("prompt_without_a_text_tower", TargetChoice("text", name="a cat"),
                   "Text target: the model was not opened from a folder or file, so its text tower is unknown"),
        TargetCase("prompt_empty", TargetChoice("text", name="  "), "the prompt is empty"),
    ]
    assert len({c.name for c in cases}) == len(cases)
    return cases


# -------------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def models():
    from vitviz.model import create_model
    from vitviz.pipeline import Pipeline

    out = {}
    for kind, classes in (("classifier", 5), ("features", 0)):
        torch.manual_seed(0)
        m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4,
                         num_classes=classes)
        out[kind] = Pipeline(m.eval())
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("targets")
    return root, build(root)




def _use(pipeline, target, image):
    """What the window does with a target: make it (a reference read and run), then run the image with it."""
    choice, made = as_choice(target)
    t = made if made is not None else choice.build(pipeline)
    return pipeline.run(image, source="photo.png", target=t)


# ----------------------------------------------------------------------------------------------------- the library
def test_the_corpus_covers_every_kind(corpus):
    _, cases = corpus
    names = " ".join(c.name for c in cases)
    assert len(cases) >= 25
    for word in ("class", "reference", "patch", "vector", "function", "classifier"):
        assert word in names, word


def test_every_bad_target_is_one_line_naming_it(corpus, models):
    root, cases = corpus
    image = load_image(_photo(root / "photo.png", 2))
    for case in cases:
        out = bounded(lambda c=case: _use(models[c.model], c.target, image), TIMEOUT_S, name="corpus-target")
        e = out.get("error")
        assert e is not None, f"{case.name}: accepted"
        assert isinstance(e, TargetError), f"{case.name}: {type(e).__name__}: {e}"
        msg = str(e)
        assert case.needle in msg, (case.name, case.needle, msg)
        assert "\n" not in msg and len(msg) < 400 and "Traceback" not in msg, (case.name, msg)


# ------------------------------------------------------------------------------------------------- session files
def _doc(image: str, target: Any) -> dict:
    return {"format": "vitviz-session", "version": 2, "written_by": "vitviz corpus", "model": {"ref": "demo"},
            "images": [{"path": image}], "current": 0, "target": target, "options": {"view": "relevance"}}


SESSION_TARGETS = [
    ("target_a_string", "cat", "target must be a class index, null or an object naming a similarity target, not a "
                               "string"),
    ("target_a_float", 2.5, "target must be a class index, null or an object naming a similarity target, not a number"),
    ("target_true", True, "not true/false"),
    ("target_negative", -1, "target is -1; it must lie in 0 .. 1000000"),
    ("target_a_list", [1, 2], "not a list"),
    ("kind_missing", {"path": "x.png"}, "target lacks 'kind'"),
    ("kind_unknown", {"kind": "prompt", "name": "a cat"},
     "target.kind is 'prompt'; valid: image, patch, vector, text, callable, named"),
    ("prompt_empty", {"kind": "text"}, "target.name is empty"),
    ("prompt_with_a_path", {"kind": "text", "name": "a cat", "path": "/x.png"},
     "target: a prompt has a name, not a path or a patch"),
    ("kind_a_number", {"kind": 3}, "target.kind must be a string, not an integer"),
    ("path_missing", {"kind": "image"}, "target lacks 'path' (the reference image)"),
    ("vector_path_missing", {"kind": "vector"}, "target lacks 'path' (the vector)"),
    ("path_empty", {"kind": "image", "path": ""}, "target.path is empty"),
    ("path_a_number", {"kind": "image", "path": 7}, "target.path must be a string, not an integer"),
    ("patch_missing", {"kind": "patch", "path": "/x.png"}, "target lacks 'patch'"),
    ("patch_one_index", {"kind": "patch", "path": "/x.png", "patch": [1]}, "target.patch must be [row, col]"),
    ("patch_three_indices", {"kind": "patch", "path": "/x.png", "patch": [1, 2, 3]}, "target.patch has 3 entries"),
    ("patch_negative", {"kind": "patch", "path": "/x.png", "patch": [-1, 2]}, "target.patch[0] is -1"),
    ("patch_words", {"kind": "patch", "path": "/x.png", "patch": ["a", 2]}, "target.patch[0] must be an integer"),
    ("patch_of_an_image_target", {"kind": "image", "path": "/x.png", "patch": [1, 1]},
     "target: a image target has no patch"),
    ("vector_not_npy", {"kind": "vector", "path": "/x/ref.png"}, "a stored vector is an .npy file"),
    ("function_with_a_path", {"kind": "callable", "name": "f", "path": "/x.py"},
     "target: a function has a name, not a path or a patch"),
    ("function_name_a_number", {"kind": "callable", "name": 5}, "target.name must be a string, not an integer"),
    ("unknown_key", {"kind": "image", "path": "/x.png", "colour": "red"}, "target has unknown key 'colour'"),
    ("relative_a_number", {"kind": "image", "path": "/x.png", "relative": 3},
     "target.relative must be a string, not an integer"),
]


@pytest.mark.parametrize("name, target, needle", SESSION_TARGETS, ids=[c[0] for c in SESSION_TARGETS])
def test_a_session_with_a_bad_target_field_is_refused_naming_it(tmp_path, name, target, needle):
    image = _photo(tmp_path / "photo.png")
    path = tmp_path / f"{name}.vitviz.json"
    path.write_text(json.dumps(_doc(image, target)), encoding="utf-8")
    out = bounded(lambda: st.locate(st.read_state(path)), TIMEOUT_S, name="corpus-target")
    e = out.get("error")
    assert isinstance(e, st.StateError), (name, e)
    msg = str(e)
    assert msg.startswith(f"{path}: not a valid session: ") and needle in msg and "\n" not in msg, (name, msg)


@pytest.mark.parametrize("what", ["image", "patch", "vector", "folder"])
def test_a_session_whose_target_reference_is_gone_is_refused_naming_it(tmp_path, what):
    image = _photo(tmp_path / "photo.png")
    folder = tmp_path / "refs.npy"
    folder.mkdir()
    target = {"image": {"kind": "image", "path": str(tmp_path / "gone.png"), "relative": "gone.png"},
              "patch": {"kind": "patch", "path": str(tmp_path / "gone.png"), "patch": [1, 1]},
              "vector": {"kind": "vector", "path": str(tmp_path / "gone.npy")},
              "folder": {"kind": "vector", "path": str(folder)}}[what]
    path = tmp_path / "s.vitviz.json"
    path.write_text(json.dumps(_doc(image, target)), encoding="utf-8")
    with pytest.raises(st.StateError) as e:
        st.locate(st.read_state(path))
    words = {"image": f"its target's reference image {tmp_path / 'gone.png'} does not exist (nor "
                      f"{tmp_path / 'gone.png'})",
             "patch": f"its target's reference image {tmp_path / 'gone.png'} does not exist",
             "vector": f"its target's vector {tmp_path / 'gone.npy'} does not exist",
             "folder": f"its target's vector {folder} is not a regular file"}[what]
    assert str(e.value) == f"{path}: cannot be opened: {words}"


# ------------------------------------------------------------------------------------------------------ the window
WINDOW_CASES = ("class_of_a_feature_model", "reference_missing", "reference_unreadable", "patch_row_outside",
                "vector_wrong_length", "vector_a_matrix", "function_raises", "function_returns_a_vector",
                "function_of_nothing")


@pytest.fixture
def feature_window(qtbot, models, settings, tmp_path, monkeypatch):
    pytest.importorskip("pytestqt")
    sys.path.insert(0, str(REPO / "tests" / "gui"))
    from gui_helpers import Recorder

    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow

    monkeypatch.setenv("VITVIZ_SETTINGS", str(tmp_path / "default-settings.ini"))
    make_app()
    w = MainWindow(settings=settings, model=models["features"])
    w.dialogs = Recorder()
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.close()


@pytest.fixture
def settings(tmp_path):
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


def test_bad_targets_chosen_in_the_window_leave_it_as_it_was(qtbot, corpus, feature_window):
    root, cases = corpus
    w = feature_window
    photo = _photo(root / "shown.png", 3)
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        w.open_images([photo])
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        w.targets.choose(TargetChoice("image", path=str(root / "ref.png")))
    w.set_view("legrad")
    good, options, title = w.session.result, w.session.options, w.canvas.title.text()
    standing = w.controller.target_choice
    by_name = {c.name: c for c in cases}
    for name in WINDOW_CASES:
        case = by_name[name]
        w.dialogs.errors.clear()
        with qtbot.waitSignal(w.errorShown, timeout=30000) as sig:
            w.targets.choose(case.target)
        dialog_title, message = sig.args
        assert dialog_title == "Could not use the target", name
        assert case.needle in message and "\n" not in message, (name, message)
        qtbot.wait(30)
        assert w.dialogs.errors == [(dialog_title, message)], name
        assert w.session.result is good and w.session.options == options, name
        assert w.canvas.title.text() == title and w.controller.target_choice == standing, name

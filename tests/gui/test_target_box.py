"""The target in the window (issue 23): the target box's choices on a classifier and on a feature model, similarity
targets chosen in the window (an open image, a file, the shown image's query patch, another image's patch, a stored
vector), the standing target across images, and bad targets that leave the window as it was."""

import numpy as np
import pytest
import torch
from gui_helpers import Recorder, make_image, open_and_wait, shown_window

from vitviz import views
from vitviz.capture.targets import SimilarityTarget
from vitviz.document.target_choice import TargetChoice

GRADIENT_VIEWS = [v.key for v in views.all_views() if v.needs_grads]


@pytest.fixture
def feature_model():
    """A DINO-style feature model: the tiny ViT without a classifier (num_classes=0: its output is the embedding)."""
    from vitviz.model import create_model

    torch.manual_seed(0)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4,
                     num_classes=0)
    m.spec = m.spec.replace(name="tiny feature ViT")
    with torch.no_grad():
        for b in m.blocks:
            b.attn.qkv.weight.mul_(25.0)
    return m.eval()


@pytest.fixture
def feature_window(qtbot, feature_model, settings):
    w = shown_window(qtbot, settings, feature_model, dialogs=Recorder())
    yield w
    w.close()


@pytest.fixture
def two_images(tmp_path):
    a, b = tmp_path / "a.png", tmp_path / "x.png"
    make_image(a, 60, 40, seed=1)
    make_image(b, 50, 70, seed=2)
    return a, b


def _choose(qtbot, w, fn, *args, **kw):
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        assert fn(*args, **kw)
    return w.session.result


def _menu_texts(menu):
    menu.aboutToShow.emit()
    out = []
    for a in menu.actions():
        out.append(a.text())
        if a.menu() is not None:
            out.extend("  " + b.text() for b in a.menu().actions())
    return out


def test_a_feature_model_has_no_class_part_and_says_it_needs_a_similarity_target(qtbot, feature_window, two_images):
    w = feature_window
    r = open_and_wait(qtbot, w, two_images[0])
    assert r.num_classes == 0 and r.target_spec is None and r.attention_grads is None
    box = w.predictions.box
    assert box.search.isHidden() and w.predictions.table.isHidden()
    assert "feature model" in box.label.text() and "similarity target" in box.label.text()
    texts = _menu_texts(box.menu)
    assert not any("Top class" in t for t in texts)
    assert {"Similar to image", "Similar to this patch of", "Similar to a vector (.npy)…"} <= set(texts)
    gh, gw = r.grid  # the query starts at the grid's centre
    assert f"  a.png: the selected patch ({gh // 2}, {gw // 2})" in texts and "  Image file…" in texts
    for key in GRADIENT_VIEWS:  # off, with the reason
        w.set_view(key)
        assert w.session.current_map() is None, key
        assert "similarity target" in w.session.unavailable_reason(), key


def test_the_box_on_a_classifier_offers_the_classes_and_the_similarity_targets(qtbot, window, image_path):
    r = open_and_wait(qtbot, window, image_path)
    box = window.predictions.box
    assert box.search.isVisible() and window.predictions.table.isVisible()
    assert len(box._entries) == r.logits.shape[-1]
    texts = _menu_texts(box.menu)
    assert texts[0].startswith("Top class") and "Similar to image" in texts and "  photo.png" in texts
    assert "Similar to a vector (.npy)…" in texts


def test_every_gradient_view_is_on_with_a_similarity_target_and_it_stands_for_the_next_images(
        qtbot, feature_window, two_images):
    w = feature_window
    a, b = two_images
    w.session.add_images([str(b)])
    open_and_wait(qtbot, w, a)
    r = _choose(qtbot, w, w.predictions.box.imageChosen.emit, str(b))  # the box's menu: an open image
    assert isinstance(r.target_spec, SimilarityTarget) and r.target_spec.name == "image x.png"
    assert r.source == str(a) and r.attention_grads is not None
    assert "similar to image x.png" in w.predictions.box.label.text() and "value" in w.predictions.box.label.text()
    assert f"{r.target_score:.4g}" in w.predictions.box.label.text()
    for key in GRADIENT_VIEWS:
        w.set_view(key)
        m = w.session.current_map()
        assert m is not None and np.isfinite(m).all(), key
        assert "similar to image x.png" in w.canvas.title.text(), key
        assert "similar to image x.png" in w.windowTitle(), key
        assert "similar-to-image-x-png" in w.session.export_name(), key
    # the target explains every image shown next (PageDown): x.png compared with itself
    w.step_image(1)
    qtbot.waitUntil(lambda: w.session.result.source == str(b), timeout=30000)
    r2 = w.session.result
    assert r2.target_spec == r.target_spec and r2.target_score == pytest.approx(1.0, abs=1e-5)


def test_similar_to_the_shown_images_query_patch_another_patch_a_file_and_a_vector(qtbot, feature_window,
                                                                                    two_images, tmp_path):
    from vitviz.pipeline import reference_target, vector_target

    w = feature_window
    a, b = two_images
    open_and_wait(qtbot, w, a)
    w.set_query(5)  # row 1, col 1 of the 4x4 grid
    shown = w.session.result
    r = _choose(qtbot, w, w.targets.similar_to_patch, str(a))
    want = reference_target(w.controller.pipeline, shown, patch=(1, 1))
    assert r.target_spec.name == "patch (1, 1) of a.png"
    torch.testing.assert_close(r.target_spec.vector, want.vector)
    # another image's patch: its row and column asked
    w.dialogs.ask_patch = lambda name, grid: (2, 3)
    r = _choose(qtbot, w, w.targets.similar_to_patch, str(b))
    assert r.target_spec.name == "patch (2, 3) of x.png" and dict(r.target_spec.origin)["patch"] == [2, 3]
    # a file, asked for
    w.dialogs.open_reference_image = lambda folder: str(b)
    r = _choose(qtbot, w, w.targets.similar_to_image)
    assert r.target_spec.name == "image x.png"
    # a stored vector
    v = tmp_path / "ref.npy"
    np.save(v, want.vector.numpy())
    w.dialogs.open_vector = lambda folder: str(v)
    r = _choose(qtbot, w, w.targets.similar_to_vector)
    w.set_view("legrad")
    assert r.target_spec == vector_target(v) and "similar to vector ref.npy" in w.session.describe_view()


def test_a_classifier_explains_a_similarity_target_and_a_class_ends_it(qtbot, window, two_images):
    a, b = two_images
    open_and_wait(qtbot, window, a)
    r = _choose(qtbot, window, window.targets.similar_to_image, str(b))
    assert r.target is None and r.target_spec.name == "image x.png"
    assert window.controller.target_choice == TargetChoice("image", path=str(b))
    window.set_view("relevance")
    assert "similar to image x.png" in window.canvas.title.text()
    with qtbot.waitSignal(window.resultShown, timeout=30000):
        window.set_target(2)  # a class clicked: that class, for this image; no standing target any more
    assert window.session.result.target == 2 and window.controller.target_choice is None


def boom(out):
    raise ValueError("boom")


def whole(out):
    return out * 2


@pytest.mark.parametrize("case", ["missing file", "unreadable image", "patch outside", "vector length",
                                  "class of a feature model", "function raises", "function not scalar"])
def test_a_bad_target_leaves_the_window_as_it_was(qtbot, feature_window, two_images, tmp_path, case):
    w = feature_window
    a, b = two_images
    open_and_wait(qtbot, w, a)
    good = _choose(qtbot, w, w.targets.similar_to_image, str(b))
    w.set_view("relevance")
    w.set_layer(1)
    options, title, label = w.session.options, w.canvas.title.text(), w.predictions.box.label.text()
    choice = w.controller.target_choice
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    np.save(tmp_path / "short.npy", np.ones(3))
    expected = {"missing file": (TargetChoice("image", path=str(tmp_path / "nope.png")), "nope.png: no such file"),
                "unreadable image": (TargetChoice("image", path=str(bad)), "bad.png"),
                "patch outside": (TargetChoice("patch", path=str(b), patch=(9, 0)), "patch (9, 0) is outside the 4x4"),
                "vector length": (TargetChoice("vector", path=str(tmp_path / "short.npy")),
                                  "the reference vector has 3 values but the model's pooled embedding has 32"),
                "class of a feature model": (TargetChoice("class", index=1), "this model has no classifier"),
                "function raises": (boom, "target function boom raised ValueError: boom"),
                "function not scalar": (whole, "target function whole returned shape (32,), not a scalar")}[case]
    with qtbot.waitSignal(w.errorShown, timeout=30000) as sig:
        w.targets.choose(expected[0])
    title_shown, message = sig.args
    assert title_shown == "Could not use the target" and expected[1] in message and "\n" not in message
    assert w.dialogs.errors == [(title_shown, message)]  # one message
    qtbot.wait(50)
    assert w.session.result is good and w.session.options == options
    assert w.canvas.title.text() == title and w.predictions.box.label.text() == label
    assert w.controller.target_choice == choice


def test_a_target_the_next_model_cannot_make_is_dropped_with_a_note(qtbot, feature_window, two_images, tmp_path):
    from vitviz.model import create_model

    w = feature_window
    a, _ = two_images
    open_and_wait(qtbot, w, a)
    v = tmp_path / "v.npy"
    np.save(v, np.ones(32))
    _choose(qtbot, w, w.targets.similar_to_vector, str(v))
    wider = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=4,
                         num_classes=0)
    notes = []
    w.controller.targetChanged.connect(notes.append)
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        w.controller.adopt(wider.eval(), "memory")  # the shown image runs again with the new model
    assert w.session.result.target_spec is None and w.controller.target_choice is None
    assert notes and "was dropped" in notes[-1] and "48" in notes[-1] and not w.dialogs.errors


def test_a_choice_cancelled_in_its_dialog_runs_nothing(qtbot, feature_window, two_images):
    w = feature_window
    a, b = two_images
    shown = open_and_wait(qtbot, w, a)
    assert not w.targets.similar_to_image() and not w.targets.similar_to_vector()  # no file chosen
    assert not w.targets.similar_to_patch(str(b))  # no row and column given
    assert not w.controller.is_busy("infer") and w.session.result is shown and not w.dialogs.errors

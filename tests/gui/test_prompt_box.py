"""Text prompts in the window (issue 24): the prompt box on tiny random open_clip CLIP and HF SigLIP folders: the
predictions table shows the prompts' zero-shot probabilities (the pipeline's), LeGrad is shown, a prompt clicked is
the target, a model without a text tower greys the box out with the reason, clearing returns to the image tower,
sessions keep the prompts, and ``vitviz.show(..., text=[...])``."""

import json

import numpy as np
import pytest
import text_builders as tb
import torch
from gui_helpers import Recorder, make_image, open_and_wait, shown_window

from vitviz.pipeline import Pipeline, prompt_pipeline


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory):
    pytest.importorskip("open_clip")
    cfg = tb.open_clip_cfg(True)
    cfg["vision_cfg"].update(width=128, head_width=64)  # two heads of 64: a folder that opens by its reference alone
    return tb.write_open_clip_folder(tmp_path_factory.mktemp("clip") / "oc", tb.open_clip_model(cfg), cfg)


@pytest.fixture(scope="module")
def siglip_folder(tmp_path_factory):
    from transformers import SiglipTokenizer

    root = tmp_path_factory.mktemp("siglip")
    sp = tb.sentencepiece_model(root / "sp")
    return tb.write_hf_siglip_folder(root / "siglip", tb.hf_siglip_model(len(SiglipTokenizer(str(sp)))), sp)


def _window(qtbot, settings, folder):
    """A window on the model of ``folder`` (opened as the window opens a model), its dialogs recorded."""
    return shown_window(qtbot, settings, Pipeline.open(f"file:{folder}"), model_key=f"file:{folder}",
                        dialogs=Recorder())


@pytest.fixture
def clip_window(qtbot, settings, clip_folder):
    w = _window(qtbot, settings, clip_folder)
    yield w
    w.close()


@pytest.fixture
def image(tmp_path):
    p = tmp_path / "photo.png"
    make_image(p, 48, 40, seed=3)
    return p


def type_prompts(qtbot, w, text, *, timeout=60000):
    """Type ``text`` into the prompt box and press Enter; the shown image's new result."""
    edit = w.predictions.prompt_box.edit
    with qtbot.waitSignal(w.resultShown, timeout=timeout):
        edit.setText(text)
        edit.returnPressed.emit()
    return w.session.result


def _table(w):
    t = w.predictions.table
    return [(t.item(i, 0).data(256), t.cellWidget(i, 1).value() / 1000) for i in range(t.rowCount())]


def test_typed_prompts_show_their_probabilities_and_legrad(qtbot, clip_window, clip_folder, image):
    w = clip_window
    r0 = open_and_wait(qtbot, w, image)
    assert r0.num_classes == 0 and w.predictions.prompt_box.edit.isEnabled()
    r = type_prompts(qtbot, w, "a cat; a red car ;a dog")
    assert r.head_kind == "prompts" and list(r.labels) == ["a cat", "a red car", "a dog"]
    # the pipeline's own probabilities (prompt_pipeline on the same folder)
    ref = prompt_pipeline(Pipeline.open(f"file:{clip_folder}"), "a cat; a red car; a dog").run(
        __import__("PIL.Image").Image.open(image).convert("RGB"))
    torch.testing.assert_close(r.probabilities, ref.probabilities, rtol=1e-5, atol=1e-6)
    rows = _table(w)
    assert len(rows) == 3 and {c for c, _ in rows} == {0, 1, 2}
    for c, p in rows:
        assert abs(p - float(ref.probabilities[c])) < 1e-3
    assert w.predictions.table.horizontalHeaderItem(0).text() == "Prompt"
    assert "softmax" in w.predictions.table.horizontalHeaderItem(1).text()
    assert "softmax" in w.predictions.prompt_box.label.text()
    # LeGrad is the view for a prompt; the title, caption and file name name it
    assert w.session.options.view == "legrad"
    top = r.labels[r.target]
    assert top in w.windowTitle() and top in w.session.caption()
    assert "-".join(top.split()) in w.session.export_name()
    # relevance on CLIP prompts: the last layer, as Chefer's notebook, and the caption says so
    assert w.session.options.start_layer == r.num_layers - 1
    w.set_view("relevance")
    assert "Chefer's CLIP notebook" in w.session.caption()


def test_choosing_a_prompt_retargets_and_it_stays_for_the_next_image(qtbot, clip_window, image, tmp_path):
    w = clip_window
    open_and_wait(qtbot, w, image)
    r = type_prompts(qtbot, w, "a cat; a dog")
    other = 1 - r.target
    row = [c for c, _ in _table(w)].index(other)
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        w.predictions.table.cellClicked.emit(row, 0)
    r2 = w.session.result
    assert r2.target == other and r2.label(other) in w.session.caption()
    assert w.predictions.table.item(row, 0).text().endswith("◀ target")
    assert not torch.equal(r2.attention_grads, r.attention_grads)
    second = tmp_path / "second.png"
    make_image(second, 40, 40, seed=9)
    r3 = open_and_wait(qtbot, w, second)
    assert r3.target == other  # the chosen prompt explains the next image too


def test_clearing_the_box_returns_to_the_image_tower(qtbot, clip_window, image):
    w = clip_window
    open_and_wait(qtbot, w, image)
    view = w.session.options.view
    type_prompts(qtbot, w, "a cat; a dog")
    assert w.controller.prompts == ["a cat", "a dog"]
    r = type_prompts(qtbot, w, "")
    assert r.head_kind != "prompts" and r.num_classes == 0 and w.controller.prompts == []
    assert w.session.options.view == view
    assert not w.predictions.prompt_box.label.isVisible()


@pytest.mark.parametrize("text, words", [(";", "the prompt is empty"), ("a cat;;a dog", "prompt 2 of 3 is empty"),
                                         ("a cat;", "prompt 2 of 2 is empty")])
def test_a_bad_prompt_is_one_message_and_the_window_stays(qtbot, clip_window, image, text, words):
    w = clip_window
    open_and_wait(qtbot, w, image)
    r = type_prompts(qtbot, w, "a cat; a dog")
    pipeline, options = w.controller.pipeline, w.session.options
    with qtbot.waitSignal(w.errorShown, timeout=30000) as sig:
        w.predictions.prompt_box.edit.setText(text)
        w.predictions.prompt_box.edit.returnPressed.emit()
    title, message = sig.args
    assert title == "Could not use the prompts" and words in message and "\n" not in message
    assert w.session.result is r and w.controller.pipeline is pipeline and w.session.options == options
    assert w.predictions.prompt_box.edit.text() == "a cat; a dog"


def test_a_model_without_a_text_tower_greys_the_box_with_the_reason(qtbot, window, image):
    w = window
    w.dialogs = Recorder()
    open_and_wait(qtbot, w, image)
    box = w.predictions.prompt_box
    assert not box.edit.isEnabled() and box.reason
    assert box.reason in box.edit.placeholderText() and box.reason in box.edit.toolTip()
    before = w.session.result
    assert not w.prompts.enter("a cat")
    assert w.dialogs.errors and w.dialogs.errors[-1][0] == "Could not use the prompts"
    assert w.session.result is before and w.controller.prompts == []


def test_a_missing_tokenizer_file_is_one_message(qtbot, settings, siglip_folder, tmp_path, image):
    import shutil

    broken = tmp_path / "no_tokenizer"
    shutil.copytree(siglip_folder, broken)
    (broken / "spiece.model").unlink()
    w = _window(qtbot, settings, broken)
    try:
        r = open_and_wait(qtbot, w, image)
        if w.predictions.prompt_box.reason is None:  # known only when the tower is opened
            with qtbot.waitSignal(w.errorShown, timeout=30000) as sig:
                w.prompts.enter("a cat")
            message = sig.args[1]
        else:
            message = w.predictions.prompt_box.reason
        assert "no_tokenizer" in message and "\n" not in message
        assert w.session.result is r and w.controller.prompts == []
    finally:
        w.close()


def test_siglip_prompts_are_sigmoid_probabilities(qtbot, settings, siglip_folder, image):
    w = _window(qtbot, settings, siglip_folder)
    try:
        open_and_wait(qtbot, w, image)
        r = type_prompts(qtbot, w, "a cat; two dogs")
        assert r.probability == "sigmoid" and "sigmoid" in w.predictions.table.horizontalHeaderItem(1).text()
        torch.testing.assert_close(r.probabilities, torch.sigmoid(r.logits))
        assert w.session.options.view == "legrad" and w.session.options.start_layer == 0  # (CLIP only)
        assert {"mean", "mean|neutral"} <= set(r.legrad)
        assert np.isfinite(w.session.current_map()).all()
    finally:
        w.close()


def test_a_session_keeps_the_prompts_and_the_chosen_one(qtbot, clip_window, image, tmp_path, settings, clip_folder):
    w = clip_window
    open_and_wait(qtbot, w, image)
    r = type_prompts(qtbot, w, "a cat; a dog; a car")
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        w.set_target(2)
    path = w.save_session(str(tmp_path / "s.vitviz.json"))
    d = json.loads(path.read_text())
    assert d["prompts"] == ["a cat", "a dog", "a car"] and d["target"] == 2 and d["target_label"] == "a car"
    w2 = _window(qtbot, settings, clip_folder)
    try:
        with qtbot.waitSignal(w2.resultShown, timeout=60000):
            assert w2.open_session(str(path))
        r2 = w2.session.result
        assert list(r2.labels) == ["a cat", "a dog", "a car"] and r2.target == 2
        torch.testing.assert_close(r2.logits, w.session.result.logits, rtol=1e-5, atol=1e-5)
        assert w2.predictions.prompt_box.edit.text() == "a cat; a dog; a car"
        assert w2.controller.prompts == ["a cat", "a dog", "a car"]
        assert r is not None
    finally:
        w2.close()


def test_the_compare_window_lays_the_prompts_out_side_by_side(qtbot, clip_window, image):
    from vitviz.document import comparison as cmp

    w = clip_window
    open_and_wait(qtbot, w, image)
    r = type_prompts(qtbot, w, "a cat; a dog; a red car")
    spec = cmp.CompareSpec(layout="classes", views=("legrad",))
    cw = w.show_compare(spec)
    qtbot.addWidget(cw)
    qtbot.waitUntil(lambda: cw.comparison is not None and len(cw.panels) == len(cw.comparison.cells)
                    and len(cw.comparison.cells) == 3, timeout=60000)
    c = cw.comparison
    assert [cell.label.split(" (")[0] for cell in c.cells] == [f"“{r.label(i)}”" for i, _, _ in r.top_k(3)]
    assert "per prompt" in c.title and cw.bar.classes_button.text() == "Prompts"
    maps = [cell.map for cell in c.cells]
    assert not np.allclose(maps[0], maps[1])  # each prompt its own map
    cw.close()


def _errors(monkeypatch):
    from vitviz.gui import dialogs

    seen = []
    monkeypatch.setattr(dialogs.Dialogs, "error", lambda self, title, message, detail="": seen.append((title, message)))
    return seen


def test_show_with_text_opens_the_prompts(qtbot, settings, clip_folder, image, monkeypatch):
    import vitviz

    errors = _errors(monkeypatch)
    w = vitviz.show(clip_folder, [image], text=["a cat", "a dog"], block=False, settings=settings)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: errors or w.session.result is not None, timeout=60000)
    assert not errors
    r = w.session.result
    assert list(r.labels) == ["a cat", "a dog"] and r.head_kind == "prompts"
    assert w.predictions.prompt_box.edit.text() == "a cat; a dog" and w.controller.prompts == ["a cat", "a dog"]
    # the prompt box works on it: other prompts, then back to the image tower
    assert type_prompts(qtbot, w, "a car; a tree; a dog").labels == ("a car", "a tree", "a dog")
    assert type_prompts(qtbot, w, "").num_classes == 0
    w.close()


def test_show_with_text_on_a_module_needs_its_text_tower(qtbot, settings, clip_folder, image, monkeypatch):
    import vitviz
    from vitviz.capture.targets import TargetError
    from vitviz.model.text import open_text_tower

    errors = _errors(monkeypatch)
    module = Pipeline.open(f"file:{clip_folder}").model
    module.spec = module.spec.replace(source_path=None)  # handed over in memory: no source to read a tower from
    with pytest.raises(TargetError, match=r"vitviz.show\(text=...\): .*text_tower="):
        vitviz.show(module, [image], text=["a cat"], block=False, settings=settings)
    with pytest.raises(TargetError, match="prompt 2 of 2 is empty"):
        vitviz.show(module, [image], text=["a cat", " "], text_tower=open_text_tower(clip_folder), block=False,
                    settings=settings)
    w = vitviz.show(module, [image], text="a cat; a dog", text_tower=open_text_tower(clip_folder), block=False,
                    settings=settings)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: errors or w.session.result is not None, timeout=60000)
    assert not errors and w.session.result.labels == ("a cat", "a dog")
    assert w.predictions.prompt_box.edit.isEnabled()
    w.close()


def test_prompts_survive_a_change_of_precision_and_clear_after_it(qtbot, clip_window, image):
    from vitviz.devices import available_precisions

    w = clip_window
    other = next((p for p in available_precisions("cpu") if p not in ("auto", "fp32")), None)
    if other is None:
        pytest.skip("the CPU offers no second precision here")
    open_and_wait(qtbot, w, image)
    type_prompts(qtbot, w, "a cat; a dog")
    with qtbot.waitSignal(w.resultShown, timeout=60000):
        w.set_precision(other)
    r = w.session.result
    assert r.labels == ("a cat", "a dog") and w.controller.pipeline.precision == other
    assert w.controller.pipeline.source == w.controller.image_pipeline.source is not None
    assert w.controller.image_pipeline.precision == other
    assert type_prompts(qtbot, w, "a car; a cat").labels == ("a car", "a cat")
    cleared = type_prompts(qtbot, w, "")
    assert cleared.num_classes == 0 and w.controller.pipeline.precision == other


def test_prompts_work_when_typed_after_a_change_of_precision(qtbot, clip_window, image):
    """The pipeline made again on the new precision keeps where the model came from (its text tower's source): the
    prompt box does not say the model was handed over in memory (issue 37)."""
    from vitviz.devices import available_precisions
    from vitviz.gui.prompting import IN_MEMORY, text_reason

    w = clip_window
    other = next((p for p in available_precisions("cpu") if p not in ("auto", "fp32")), None)
    if other is None:
        pytest.skip("the CPU offers no second precision here")
    open_and_wait(qtbot, w, image)
    source = w.controller.pipeline.source
    with qtbot.waitSignal(w.resultShown, timeout=60000):
        w.set_precision(other)  # before any prompt was typed
    assert w.controller.pipeline.precision == other and w.controller.pipeline.source == source is not None
    assert text_reason(w.controller.pipeline, {}) != IN_MEMORY
    assert type_prompts(qtbot, w, "a cat; a dog").labels == ("a cat", "a dog")

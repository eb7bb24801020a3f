"""The Model menu's curated list (sizes, cached marks), the cancellable download dialog, and the first-run offer
(a photo opened with the bundled shapes model), with the Hugging Face Hub faked on 127.0.0.1 (tests/fake_hub.py)."""

from __future__ import annotations

import hashlib

import pytest
from fake_hub import big_file, timm_repo
from gui_helpers import Recorder, open_and_wait
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

from vitviz.model.sources import catalog

DEIT = catalog.HUB_BY_KEY["deit-s"]
DINO = catalog.HUB_BY_KEY["dino-s8"]


def _sample():
    from vitviz.demo import sample_images

    return sample_images()[0]


def _cache_tiny(fake_hub, m):
    """Serve a tiny timm model under the curated repository of ``m`` and download it (the cache now holds it)."""
    from vitviz.model.sources.hub import load_hub

    fake_hub.add(m.repo, timm_repo(num_classes=1000, img_size=32)[0])
    load_hub(m.repo, show_bar=False)
    assert catalog.hub_is_cached(m.repo)


@pytest.fixture
def demo_window(qtbot, settings, fake_hub):
    """A window that starts on the bundled shapes model (as a first run does), the Hub faked."""
    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow

    make_app()
    windows = []

    def make(**kw):
        w = MainWindow(settings=settings, dialogs=Recorder(), **kw)
        qtbot.addWidget(w)
        w.resize(1400, 900)
        w.show()
        qtbot.waitExposed(w)
        qtbot.waitUntil(lambda: w.model is not None and not w.runner.is_busy(), timeout=30000)
        windows.append(w)
        return w

    yield make
    for w in windows:
        w.close()


# ------------------------------------------------------------------------------------------------------ the menu
def test_model_menu_lists_the_curated_models_with_sizes_and_cached_marks(demo_window, fake_hub):
    _cache_tiny(fake_hub, DINO)
    w = demo_window()
    w.models.refresh_menu()  # (what opening the menu does)
    texts = {ref: a.text() for ref, a in w.acts.models.items()}
    for m in catalog.HUB_MODELS:
        title, state = texts[m.ref].split("\t")
        assert title == m.title
        assert state == ("cached" if m is DINO else f"{m.size_mb:.0f} MB"), (m.key, state)
        assert m.repo in w.acts.models[m.ref].toolTip()
    for name in catalog.TORCHVISION_VITS:
        assert texts[f"pretrained:{name}"].startswith(name + "\t")
    assert w.acts.models["demo"].isChecked()
    model_menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Model")
    in_menu = [a for a in model_menu.actions()]
    assert all(w.acts.models[m.ref] in in_menu for m in catalog.HUB_MODELS)
    headers = [a.text() for a in in_menu if not a.isEnabled()]
    assert list(catalog.HUB_GROUPS.values()) == headers


def test_choosing_a_model_asks_with_its_size_and_the_dialog_cancels_cleanly(demo_window, fake_hub, tmp_path, qtbot):
    files, _ = timm_repo(num_classes=1000, img_size=32)
    big = big_file(4 << 20)
    fake_hub.add(DEIT.repo, {**files, "model.safetensors": big})
    fake_hub.delay = 0.02  # ~1.3 s for the whole file: the dialog is up long enough to be cancelled
    w = demo_window()
    w.dialogs.confirm_answer = True
    model = w.model
    w.acts.models[DEIT.ref].trigger()
    assert w.dialogs.confirms and "88 MB" in w.dialogs.confirms[0] and DEIT.repo in w.dialogs.confirms[0]
    qtbot.waitUntil(lambda: w.models.download_dialog.is_visible(), timeout=10000)
    d = w.models.download_dialog.dialog
    assert "DeiT-S/16" in d.labelText() and "MB" in d.labelText()
    qtbot.waitUntil(lambda: 0 < d.value() < 1000, timeout=10000)
    qtbot.mouseClick(d.findChild(QPushButton), Qt.MouseButton.LeftButton)  # the dialog's Cancel button
    qtbot.waitUntil(lambda: not w.runner.is_busy(), timeout=20000)
    assert not w.models.download_dialog.is_visible()
    assert w.model is model and w.model_key == "demo" and w.controller.loading is None
    assert w.dialogs.errors == []  # a cancel is not an error
    cache = tmp_path / "hf-cache"
    qtbot.waitUntil(lambda: not [p for p in cache.rglob("*") if p.name.endswith(".incomplete")], timeout=10000)
    blobs = {p.name for p in cache.rglob("blobs/*")}
    assert hashlib.sha256(big).hexdigest() not in blobs
    assert not catalog.hub_is_cached(DEIT.repo)


def test_a_download_in_the_window_ends_in_the_new_model(demo_window, fake_hub, qtbot, image_path):
    fake_hub.add(DINO.repo, timm_repo(num_classes=0, img_size=32)[0])
    w = demo_window()
    w.dialogs.confirm_answer = True
    progress = []
    w.controller.progress.connect(lambda d, t: progress.append((d, t)))
    with qtbot.waitSignal(w.modelChanged, timeout=30000):
        w.acts.models[DINO.ref].trigger()
    assert w.model_key == DINO.ref and w.controller.title() == "DINO ViT-S/8"
    assert progress and progress[-1][0] == progress[-1][1] > 0
    assert not w.models.download_dialog.is_visible()
    w.models.refresh_menu()
    assert w.acts.models[DINO.ref].text().endswith("\tcached") and w.acts.models[DINO.ref].isChecked()
    assert w.prefs.photo_model() == DINO.ref


def test_offline_and_not_cached_is_one_clear_error(demo_window, fake_hub, qtbot, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    w = demo_window()
    w.dialogs.confirm_answer = True
    w.acts.models[DEIT.ref].trigger()
    qtbot.waitUntil(lambda: bool(w.dialogs.errors), timeout=20000)
    title, message = w.dialogs.errors[0]
    assert "DeiT-S/16" in message and str(tmp_path / "hf-cache") in message and "offline" in message
    assert w.model_key == "demo" and fake_hub.requests == []


# ------------------------------------------------------------------------------------------------- the first run
def test_offer_is_shown_for_a_photo_with_the_demo_model_not_for_a_sample(demo_window, qtbot, image_path):
    w = demo_window()
    open_and_wait(qtbot, w, _sample())
    assert not w.predictions.offer_shown()
    open_and_wait(qtbot, w, image_path)
    p = w.predictions
    assert p.offer_shown()
    assert "8 synthetic shapes" in p.offer_label.text() and "circle" in p.offer_label.text()
    offered = catalog.photo_offers()
    assert {m.group for m in offered} == {"imagenet", "dino"}
    assert list(p.offer_buttons) == [m.ref for m in offered]
    for m in offered:
        b = p.offer_buttons[m.ref]
        assert m.title in b.text() and f"{m.size_mb:.0f} MB" in b.text() and b.isVisible()
    open_and_wait(qtbot, w, _sample())  # back to a shape: the offer goes away
    assert not p.offer_shown()


def test_one_click_downloads_and_the_choice_becomes_the_default_for_photos(demo_window, fake_hub, qtbot, settings,
                                                                         image_path):
    fake_hub.add(DEIT.repo, timm_repo(num_classes=1000, img_size=32)[0])
    w = demo_window()
    open_and_wait(qtbot, w, image_path)
    assert w.predictions.offer_shown()
    with qtbot.waitSignal(w.resultShown, timeout=30000):  # the photo again, with the new model
        qtbot.mouseClick(w.predictions.offer_buttons[DEIT.ref], Qt.MouseButton.LeftButton)
    assert w.dialogs.confirms == []  # one click: the button showed the size
    assert w.model_key == DEIT.ref and not w.predictions.offer_shown()
    assert w.session.result.logits.shape[-1] == 1000
    assert w.prefs.photo_model() == DEIT.ref
    w.close()
    # next run, on the shapes model again: a photo opens with the remembered model, without any download
    settings.setValue("model", "demo")
    n = len(fake_hub.requests)
    w2 = demo_window()
    assert w2.model_key == "demo"
    open_and_wait(qtbot, w2, _sample())
    assert w2.model_key == "demo"  # the samples stay with the shapes model
    with qtbot.waitSignal(w2.modelChanged, timeout=30000):
        w2.open_images([str(image_path)])
    qtbot.waitUntil(lambda: w2.session.result is not None and w2.session.result.source == str(image_path),
                    timeout=30000)
    assert w2.model_key == DEIT.ref and not w2.predictions.offer_shown()
    assert len(fake_hub.requests) == n


def test_a_cached_model_is_the_photo_default_even_before_a_choice(demo_window, fake_hub, qtbot, image_path):
    _cache_tiny(fake_hub, DINO)  # e.g. downloaded with 'vitviz --model dino-s8'
    w = demo_window()
    assert w.prefs.photo_model() == ""
    with qtbot.waitSignal(w.modelChanged, timeout=30000):
        w.open_images([str(image_path)])
    qtbot.waitUntil(lambda: w.session.result is not None, timeout=30000)
    assert w.model_key == DINO.ref and w.prefs.photo_model() == DINO.ref


def test_the_shapes_model_chosen_by_the_user_stays(demo_window, fake_hub, qtbot, image_path):
    _cache_tiny(fake_hub, DINO)
    w = demo_window(model_key="demo")  # named on the command line: 'vitviz --model demo'
    open_and_wait(qtbot, w, image_path)
    assert w.model_key == "demo"
    p = w.predictions
    assert p.offer_shown() and p.offer_buttons[DINO.ref].text().endswith("cached")


def test_open_model_by_name_takes_every_form_and_names_bad_ones(demo_window, fake_hub, qtbot):
    fake_hub.add("facebook/dino-vits8-tiny", timm_repo(num_classes=0, img_size=32)[0])
    w = demo_window()
    w.dialogs.confirm_answer = True
    w.dialogs.ask_model_name = lambda: "no such thing"
    w.models.open_by_name()
    assert w.dialogs.errors == [("Open model by name", "no such thing: no such file, and not a known model name "
                                                       "('vitviz models' lists the names)")]
    assert w.model_key == "demo" and not w.runner.is_busy()
    w.dialogs.ask_model_name = lambda: "dino-s9"  # close to a curated name: said, nothing loaded
    w.models.open_by_name()
    assert w.dialogs.errors[1] == ("Open model by name", "dino-s9: no such file, and not a known model name; did you "
                                                         "mean dino-s8? ('vitviz models' lists the names)")
    assert w.model_key == "demo" and not w.runner.is_busy() and not w.dialogs.confirms
    w.dialogs.ask_model_name = lambda: "facebook/dino-vits8-tiny"
    with qtbot.waitSignal(w.modelChanged, timeout=30000):
        w.models.open_by_name()
    assert w.model_key == "hub:facebook/dino-vits8-tiny"
    assert w.dialogs.confirms and "facebook/dino-vits8-tiny" in w.dialogs.confirms[-1]
    w.dialogs.ask_model_name = lambda: None  # the dialog cancelled: nothing happens
    w.models.open_by_name()
    assert w.model_key == "hub:facebook/dino-vits8-tiny" and len(w.dialogs.errors) == 2

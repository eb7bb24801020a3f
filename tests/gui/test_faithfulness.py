"""The plots panel's Faithfulness tab (vitviz.gui.faithfulness) on the bundled demo model: run, table, best marks,
cancel, kept tables, stale marking, row clicks, errors, models without a classifier (offscreen, few steps)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from gui_helpers import Recorder, make_image, open_and_wait

STEPS, SEEDS = 4, 2
VIEW_ROWS = ["cls_last", "rollout", "grad_rollout", "relevance", "legrad", "gradcam"]
N = len(VIEW_ROWS)  # the map rows; the random rankings' row is the last (index N)


@pytest.fixture
def demo_window(qtbot, settings):
    from vitviz.demo import load_demo_model
    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow

    make_app()
    rec = Recorder()
    w = MainWindow(settings=settings, model=load_demo_model(), model_key="demo", dialogs=rec)
    w.recorder = rec
    qtbot.addWidget(w)
    w.resize(1400, 900)
    w.show()
    qtbot.waitExposed(w)
    tab = w.plots.faithfulness
    w.plots.show_page(tab)
    tab.steps_spin.setValue(STEPS)
    tab.seeds = SEEDS
    yield w
    w.close()


@pytest.fixture
def samples():
    from vitviz.demo import sample_images

    s = sample_images()
    assert len(s) >= 2, "the demo's sample images are missing"
    return s


def _run(qtbot, w, timeout=60000):
    from PySide6.QtCore import Qt

    tab = w.plots.faithfulness
    assert tab.run_button.isEnabled()
    with qtbot.waitSignal(w.controller.faithfulness.ready, timeout=timeout):
        qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    return tab.shown


def _in_window_precision(tab):
    """The tab measures the result on screen (its maps are the window's): the library's numbers on that result."""
    tab.precision_combo.setCurrentIndex(tab.precision_combo.findData("window"))


def _num(text: str) -> float:
    return float(text.replace("★", "").split("±")[0].strip())


def _click_row(qtbot, tab, row):
    from PySide6.QtCore import Qt

    rect = tab.table.visualItemRect(tab.table.item(row, 0))
    qtbot.mouseClick(tab.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def _submissions(monkeypatch, w):
    """Count the evaluation jobs handed to the worker."""
    runner = w.controller.runner
    calls = []
    real = runner.submit

    def submit(kind, fn, **kw):
        if kind == "evaluate":
            calls.append(kw.get("subject"))
        return real(kind, fn, **kw)

    monkeypatch.setattr(runner, "submit", submit)
    return calls


def test_tab_is_registered_and_waits_for_run(qtbot, demo_window, samples):
    w = demo_window
    tab = w.plots.faithfulness
    w.plots.show_page(tab)
    assert w.plots.tabText(w.plots.currentIndex()) == "Faithfulness"
    open_and_wait(qtbot, w, samples[0])
    # it does not run by itself: nothing kept, nothing running, Run offered
    assert tab.shown is None and w.controller.faithfulness.running is None and not w.controller.faithfulness.tables
    assert tab.run_button.isEnabled() and "press Run" in tab.status.text()
    assert not tab.progress.isVisible() and not tab.cancel_button.isVisible()
    assert tab.plot_widget.del_plot.getAxis("bottom").labelText == "fraction of patches removed"
    assert tab.plot_widget.ins_plot.getAxis("bottom").labelText == "fraction of patches revealed"
    assert "target class" in tab.plot_widget.del_plot.getAxis("left").labelText


def test_run_fills_the_table_with_the_numbers_of_evaluate_views(qtbot, demo_window, samples):
    from vitviz.evaluate import evaluate_views

    w = demo_window
    tab = w.plots.faithfulness
    open_and_wait(qtbot, w, samples[0])
    _in_window_precision(tab)
    t = _run(qtbot, w)
    assert tab.shown_key == tab.current_key and tab.table.isEnabled()
    assert not tab.progress.isVisible() and not tab.cancel_button.isVisible()
    # a row per map and the random rankings' row, each with both columns
    assert tab.table.rowCount() == N + 1
    assert [v.key for v in t.views] == VIEW_ROWS
    assert tab.cell_text(N, 0).startswith("Random")
    # the numbers are those of the library run on the same result (an independent call)
    ref = evaluate_views(w.controller.pipeline, w.session.result, steps=STEPS, baseline="mean", seeds=SEEDS)
    for row, v in enumerate(ref.views):
        assert _num(tab.cell_text(row, 1)) == pytest.approx(v.deletion_auc, abs=6e-4)
        assert _num(tab.cell_text(row, 2)) == pytest.approx(v.insertion_auc, abs=6e-4)
    rd, ri = ref.random_deletion, ref.random_insertion
    assert tab.cell_text(N, 1) == f"{rd.auc_mean:.3f}\n± {rd.auc_std:.3f}"
    assert tab.cell_text(N, 2) == f"{ri.auc_mean:.3f}\n± {ri.auc_std:.3f}"
    # best per column marked where the numbers say so: the lowest deletion AUC, the highest insertion AUC
    dels = [t.views[i].deletion_auc for i in range(N)]
    inss = [t.views[i].insertion_auc for i in range(N)]
    for col, best_row in ((1, int(np.argmin(dels))), (2, int(np.argmax(inss)))):
        for row in range(N + 1):
            item = tab.table.item(row, col)
            marked = "★" in item.text()
            assert marked == (row == best_row), (col, row, item.text())
            assert item.font().bold() == (row == best_row)
    # the curves: one line per map in each plot, and the random mean, with a legend entry each
    names = [label.text for _sample, label in tab.plot_widget.legend.items]
    assert len(names) == N + 1 and any("random" in n for n in names)
    assert {"LeGrad", "GradCAM"} <= set(names)
    for plot, attr in ((tab.plot_widget.del_plot, "deletion"), (tab.plot_widget.ins_plot, "insertion")):
        ys = [item.getData()[1] for item in plot.listDataItems()]
        for v in t.views:
            curve = getattr(v, attr)
            assert any(len(y) == STEPS + 1 and np.allclose(y, curve.scores) for y in ys), (attr, v.key)
        rb = getattr(t, f"random_{attr}")
        assert any(np.allclose(y, rb.scores.mean(0)) for y in ys if len(y) == STEPS + 1)


def test_cancel_stops_the_job_and_leaves_a_clean_tab(qtbot, demo_window, samples, monkeypatch):
    from PySide6.QtCore import Qt

    from vitviz.gui.faithfulness import forwards_estimate
    from vitviz.gui.worker import Job

    w = demo_window
    tab = w.plots.faithfulness
    open_and_wait(qtbot, w, samples[0])
    w.controller.faithfulness.batch_size = 2  # many batches: the job is cancelled between two of them
    tab.steps_spin.setValue(12)
    images = []
    hook = w.model.register_forward_hook(lambda _m, args, _out: images.append(int(args[0].shape[0])))
    released = threading.Event()
    report = Job.report

    def held_report(job, done, total):  # on the worker: after each progress report it waits for the test's Cancel,
        told = report(job, done, total)  # so what ran before the cancel does not depend on the machine's load
        released.wait(120)
        return told and not job.cancelled

    monkeypatch.setattr(Job, "report", held_report)
    try:
        with qtbot.waitSignal(w.controller.faithfulness.progress, timeout=30000):
            qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
        assert tab.progress.isVisible() and tab.cancel_button.isVisible() and not tab.run_button.isEnabled()
        qtbot.mouseClick(tab.cancel_button, Qt.MouseButton.LeftButton)
        released.set()  # the worker goes on only now, however busy the machine: what it ran is fixed by the gate
        # at once: no progress, no Cancel, Run offered again, and said so
        assert not tab.progress.isVisible() and not tab.cancel_button.isVisible()
        assert tab.run_button.isEnabled() and "Cancelled" in tab.status.text()
        qtbot.waitUntil(lambda: not w.controller.runner.is_busy(), timeout=30000)
    finally:
        released.set()
        hook.remove()
    total = forwards_estimate(12, N, SEEDS)
    assert 0 < sum(images) < total / 2  # stopped early, not run to the end in the background
    assert tab.shown is None and not w.controller.faithfulness.tables and w.controller.faithfulness.running is None
    qtbot.wait(50)  # nothing arrives later
    assert tab.shown is None and tab.table.rowCount() == 0
    # and the next Run works
    w.controller.faithfulness.batch_size = None
    assert _run(qtbot, w) is not None and tab.table.rowCount() == N + 1 and "Cancelled" not in tab.status.text()


def test_a_kept_table_is_shown_again_without_a_new_job(qtbot, demo_window, samples, monkeypatch):
    w = demo_window
    tab = w.plots.faithfulness
    jobs = _submissions(monkeypatch, w)
    open_and_wait(qtbot, w, samples[0])
    first = _run(qtbot, w)
    assert len(jobs) == 1
    open_and_wait(qtbot, w, samples[1])
    # another image: the table shown is stale (dimmed, said), Run offered
    assert tab.shown is first and tab.shown_key != tab.current_key
    assert not tab.table.isEnabled() and tab.run_button.isEnabled()
    assert "image" in tab.status.text() and "press Run" in tab.status.text()
    # back to the first image: its table at once, no job
    open_and_wait(qtbot, w, samples[0])
    assert tab.shown is first and tab.shown_key == tab.current_key and tab.table.isEnabled()
    assert len(jobs) == 1 and w.controller.faithfulness.running is None
    # Run on a kept table does not run either
    tab.run()
    assert len(jobs) == 1 and tab.shown is first


def test_stale_after_an_option_or_target_change(qtbot, demo_window, samples):
    w = demo_window
    tab = w.plots.faithfulness
    r = open_and_wait(qtbot, w, samples[0])
    t = _run(qtbot, w)
    key = tab.shown_key
    tab.steps_spin.setValue(STEPS + 2)
    assert tab.shown_key != tab.current_key and not tab.table.isEnabled() and tab.run_button.isEnabled()
    assert "steps and baseline" in tab.status.text()
    tab.steps_spin.setValue(STEPS)  # back: the same table, current again
    assert tab.shown_key == tab.current_key == key and tab.table.isEnabled()
    tab.baseline_combo.setCurrentIndex(tab.baseline_combo.findData("blur"))
    assert tab.shown_key != tab.current_key and "steps and baseline" in tab.status.text()
    tab.baseline_combo.setCurrentIndex(tab.baseline_combo.findData("mean"))
    assert tab.shown_key == tab.current_key
    # another target class: re-run by the window, then the table is stale
    other = int(np.argsort(r.probabilities.numpy())[-2])
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        w.set_target(other)
    assert w.session.result.target == other
    assert tab.shown is t and tab.shown_key != tab.current_key and "target" in tab.status.text()
    assert not tab.table.isEnabled()
    t2 = _run(qtbot, w)
    assert t2.target == other and tab.table.isEnabled()


def test_row_click_shows_the_map_of_that_row(qtbot, demo_window, samples):
    w = demo_window
    tab = w.plots.faithfulness
    open_and_wait(qtbot, w, samples[0])
    # the user's own rollout settings differ from those the table's maps are computed with
    w._set(view="rollout", head_fusion="max", discard_ratio=0.5, start_layer=1, ignore_artefacts=True)
    _in_window_precision(tab)
    t = _run(qtbot, w)
    L = w.session.result.num_layers
    rows = {v.key: i for i, v in enumerate(t.views)}
    _click_row(qtbot, tab, rows["rollout"])
    o = w.session.options
    assert (o.view, o.head_fusion, o.discard_ratio, o.start_layer, o.ignore_artefacts) == ("rollout", "mean", 0.0,
                                                                                          0, False)
    np.testing.assert_allclose(w.session.current_map(), t.views[rows["rollout"]].saliency, rtol=1e-5, atol=1e-7)
    assert tab.table.selectionModel().isRowSelected(rows["rollout"])
    _click_row(qtbot, tab, rows["cls_last"])
    o = w.session.options
    assert (o.view, o.layer, o.head) == ("cls", L - 1, "mean")
    np.testing.assert_allclose(w.session.current_map(), t.views[rows["cls_last"]].saliency, rtol=1e-5, atol=1e-7)
    for key in ("grad_rollout", "legrad", "gradcam", "relevance"):
        _click_row(qtbot, tab, rows[key])
        assert w.session.options.view == key
        np.testing.assert_allclose(w.session.current_map(), t.views[rows[key]].saliency, rtol=1e-5, atol=1e-7)
    # the random row has no map: nothing changes
    _click_row(qtbot, tab, N)
    assert w.session.options.view == "relevance"
    assert w.recorder.errors == []


def test_errors_are_shown_not_raised(qtbot, demo_window, samples, monkeypatch):
    import vitviz.evaluate as E

    w = demo_window
    tab = w.plots.faithfulness
    open_and_wait(qtbot, w, samples[0])

    def broken(*_a, **_k):
        raise ValueError("the perturbed batch could not be built")

    monkeypatch.setattr(E, "evaluate_views", broken)
    with qtbot.waitSignal(w.errorShown, timeout=30000):
        tab.run()
    (title, message), = w.recorder.errors
    assert "faithfulness" in title and "could not be built" in message and samples[0].name in message
    assert "Could not measure" in tab.status.text() and "could not be built" in tab.status.text()
    assert tab.run_button.isEnabled() and not tab.progress.isVisible() and tab.shown is None
    assert w.controller.faithfulness.running is None and not w.controller.faithfulness.tables
    # the window carries on: the next run (the library back) fills the table
    monkeypatch.undo()
    assert _run(qtbot, w) is not None and "Could not" not in tab.status.text()


def test_a_new_image_cancels_a_running_evaluation(qtbot, demo_window, samples):
    from PySide6.QtCore import Qt

    w = demo_window
    tab = w.plots.faithfulness
    open_and_wait(qtbot, w, samples[0])
    w.controller.faithfulness.batch_size = 2
    tab.steps_spin.setValue(12)
    with qtbot.waitSignal(w.controller.faithfulness.progress, timeout=30000):
        qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    r = open_and_wait(qtbot, w, samples[1])  # served without waiting for the whole table
    assert r.source == str(samples[1])
    assert w.controller.faithfulness.running is None and not tab.progress.isVisible()
    assert "another image" in tab.status.text() and tab.run_button.isEnabled()
    qtbot.waitUntil(lambda: not w.controller.runner.is_busy(), timeout=30000)
    assert not w.controller.faithfulness.tables


def test_a_model_without_a_classifier_says_why(qtbot, settings, tmp_path):
    from vitviz.gui.main_window import MainWindow
    from vitviz.model import create_model

    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                     num_classes=0).eval()
    rec = Recorder()
    w = MainWindow(settings=settings, model=m, dialogs=rec)
    qtbot.addWidget(w)
    w.show()
    path = tmp_path / "p.png"
    make_image(path)
    open_and_wait(qtbot, w, path)
    tab = w.plots.faithfulness
    w.plots.show_page(tab)
    assert not tab.run_button.isEnabled()
    assert "no classifier" in tab.status.text()
    tab.run()  # refused quietly, no job
    assert w.controller.faithfulness.running is None and rec.errors == []
    w.close()


def test_a_feature_model_with_a_similarity_target_is_measured(qtbot, settings, tmp_path):
    """A feature model's curves follow the similarity to the reference: the tab measures them, says so on its axis
    and in its status line, and the table's numbers are evaluate_views' on the same result."""
    from vitviz.document.target_choice import TargetChoice
    from vitviz.evaluate import evaluate_views
    from vitviz.gui.main_window import MainWindow
    from vitviz.model import create_model

    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                     num_classes=0).eval()
    w = MainWindow(settings=settings, model=m, dialogs=Recorder())
    qtbot.addWidget(w)
    w.show()
    path, ref = tmp_path / "p.png", tmp_path / "ref.png"
    make_image(path)
    make_image(ref, seed=5)
    open_and_wait(qtbot, w, path)
    tab = w.plots.faithfulness
    w.plots.show_page(tab)
    tab.steps_spin.setValue(STEPS)
    tab.seeds = SEEDS
    _in_window_precision(tab)
    with qtbot.waitSignal(w.resultShown, timeout=30000):
        w.set_target(TargetChoice("image", path=str(ref)))
    assert w.session.result.target_text() == "similar to image ref.png"
    t = _run(qtbot, w)
    assert t.target is None and t.measure == "similarity" and [v.key for v in t.views] == VIEW_ROWS
    assert all(v.deletion is not None for v in t.views)  # every gradient view explains the similarity
    assert tab.plot_widget.del_plot.getAxis("left").labelText == "similarity"
    assert "similar to image ref.png (similarity" in tab.status.text()
    ref_table = evaluate_views(w.controller.pipeline, w.session.result, steps=STEPS, baseline="mean", seeds=SEEDS)
    for row, v in enumerate(ref_table.views):
        assert _num(tab.cell_text(row, 1)) == pytest.approx(v.deletion_auc, abs=6e-4)
    w.close()


def test_the_tab_measures_the_default_views():
    from vitviz.evaluate import DEFAULT_VIEWS
    from vitviz.gui.faithfulness import VIEWS

    assert VIEWS == DEFAULT_VIEWS == tuple(VIEW_ROWS)


def test_forwards_estimate_counts_the_distinct_images(tiny_model):
    """The count the tab announces is the number of distinct perturbed images the library evaluates."""
    from PIL import Image

    from vitviz.evaluate import evaluate_views
    from vitviz.gui.faithfulness import forwards_estimate

    rng = np.random.default_rng(0)
    img = Image.fromarray((rng.random((40, 40, 3)) * 255).astype(np.uint8))
    for steps, seeds in ((3, 2), (5, 1)):
        seen: list[int] = []
        evaluate_views(tiny_model, img, steps=steps, seeds=seeds, progress=lambda _d, t, seen=seen: seen.append(t))
        assert seen and forwards_estimate(steps, N, seeds) / 2 < seen[-1] <= forwards_estimate(steps, N, seeds)


def test_no_measurement_while_a_model_loads(qtbot, demo_window, samples, monkeypatch):
    w = demo_window
    tab = w.plots.faithfulness
    jobs = _submissions(monkeypatch, w)
    open_and_wait(qtbot, w, samples[0])
    with qtbot.waitSignal(w.resultShown, timeout=60000):  # the new model, then the image again with it
        w.controller.load("demo")
        tab.run()  # refused: the result on screen is about to belong to another model
        assert jobs == [] and w.controller.faithfulness.running is None
        assert "being loaded" in tab.status.text() and not tab.run_button.isEnabled()
    assert tab.run_button.isEnabled()
    assert _run(qtbot, w) is not None and jobs == [samples[0].name]


@pytest.mark.parametrize("size", [(1280, 800), (1600, 1000)])
def test_the_tab_fits_its_dock(qtbot, demo_window, samples, size):
    """Every row of the table in view, nothing wider than the dock (running and done), plots inside their view."""
    from PySide6.QtCore import QRect, Qt

    from vitviz.gui import geometry

    w = demo_window
    tab = w.plots.faithfulness
    open_and_wait(qtbot, w, samples[0])
    geometry.fit_to(w, w.docks, QRect(0, 0, *size))  # the window and its docks as on a screen of that size
    qtbot.wait(50)
    w.layout().activate()
    qtbot.wait(50)
    w.controller.faithfulness.batch_size = 2
    tab.steps_spin.setValue(12)
    with qtbot.waitSignal(w.controller.faithfulness.progress, timeout=30000):
        qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    qtbot.wait(20)
    body, view = tab.scroll.widget(), tab.scroll.viewport()
    assert body.width() <= view.width() and tab.cancel_button.geometry().right() <= body.width()  # running
    assert tab.progress.width() >= 40
    tab.cancel()
    qtbot.waitUntil(lambda: not w.controller.runner.is_busy(), timeout=30000)
    w.controller.faithfulness.batch_size = None
    tab.steps_spin.setValue(STEPS)
    _run(qtbot, w)
    qtbot.wait(20)
    assert body.width() <= view.width()
    rows = sum(tab.table.rowHeight(i) for i in range(tab.table.rowCount()))
    assert tab.table.viewport().height() >= rows and not tab.table.verticalScrollBar().isVisible()
    assert tab.table.horizontalHeader().length() <= tab.table.viewport().width()
    ci = tab.plot_widget.ci
    assert ci.geometry().width() <= tab.plot_widget.viewport().width() + 1  # the legend does not widen the plots
    assert tab.plot_widget.height() >= tab.plot_widget.minimumHeight()


def test_ground_truth_mask_outline_and_localisation_scores(qtbot, demo_window, tmp_path):
    """A file named like the image with _mask: its outline over the map (toggle) and, after Run, each map's
    localisation scores beside the table, equal to the library's on the table's own maps; a mask folder chosen in
    the tab takes over, and a mask of the wrong size is one line naming it."""
    from PIL import Image

    from vitviz.demo.samples import make_sample
    from vitviz.evaluate.localisation import localisation_scores, mask_in_crop

    w = demo_window
    box = w.plots.faithfulness.localisation
    s = make_sample(2)
    Image.fromarray(s.image).save(tmp_path / "star.png")
    mask = ((s.mask >= 0.5) * 255).astype(np.uint8)
    Image.fromarray(mask).save(tmp_path / "star_mask.png")
    r = open_and_wait(qtbot, w, tmp_path / "star.png")
    assert "star_mask.png" in box.status.text() and w.canvas.truth_outline.isVisible()
    box.outline_check.setChecked(False)
    assert not w.canvas.truth_outline.isVisible()
    box.outline_check.setChecked(True)
    assert w.canvas.truth_outline.isVisible() and not box.table.isVisible()
    table = _run(qtbot, w)
    assert box.table.isVisible() and box.table.rowCount() == N
    crop = mask_in_crop((mask > 0).astype(np.int64), r.geometry)
    for i, v in enumerate(table.views):
        want = localisation_scores(v.saliency, crop)
        assert box.cell_text(i, 2) == f"{want.values['miou']:.2f}"
        assert box.cell_text(i, 5) == f"{want.values['energy_pointing_game']:.2f}"
    # a mask folder: its mask (here of the wrong size) replaces the one beside the image
    (tmp_path / "masks").mkdir()
    Image.fromarray(np.zeros((10, 10), np.uint8)).save(tmp_path / "masks" / "star.png")
    box._choose = lambda: str(tmp_path / "masks")
    box.choose_folder()
    h, wd = r.geometry.image_size
    assert box.status.text() == (f"{tmp_path / 'masks' / 'star.png'}: the mask is 10x10 pixels but its image "
                                 f"{wd}x{h}")
    assert not w.canvas.truth_outline.isVisible() and not box.table.isVisible()


def test_the_tab_measures_in_fp32_by_default_with_the_numbers_of_vitviz_evaluate(qtbot, demo_window, samples):
    """The window computes in bf16 where the CPU offers it; the tab's default, fp32 (as vitviz evaluate), gives the
    numbers of the library run as ``vitviz evaluate`` runs it: a model of its own in fp32 on the image file. The
    window's model is back in its own precision afterwards; "the window's precision" measures the result on screen."""
    import torch

    from vitviz.demo import load_demo_model
    from vitviz.devices import available_precisions
    from vitviz.evaluate import evaluate_views
    from vitviz.pipeline import Pipeline

    w = demo_window
    if "bf16" in available_precisions("cpu"):
        w.set_precision("bf16")
    open_and_wait(qtbot, w, samples[0])
    own = w.controller.pipeline.precision
    tab = w.plots.faithfulness
    assert tab.precision == "fp32" and "vitviz evaluate" in tab.precision_combo.currentText()
    t = _run(qtbot, w)
    assert "computed in fp32" in tab.status.text()
    ref = evaluate_views(Pipeline(load_demo_model(), precision="fp32"), str(samples[0]),
                         target=w.session.result.target, steps=STEPS, baseline="mean", seeds=SEEDS)
    assert t.probability == pytest.approx(ref.probability, abs=1e-5)
    for row, v in enumerate(ref.views):
        assert _num(tab.cell_text(row, 1)) == pytest.approx(v.deletion_auc, abs=6e-4)
        assert _num(tab.cell_text(row, 2)) == pytest.approx(v.insertion_auc, abs=6e-4)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[own]
    assert next(w.controller.pipeline.model.parameters()).dtype == dtype  # cast back to the window's precision
    # the window's precision: the result on screen, as the library measures it
    _in_window_precision(tab)
    t2 = _run(qtbot, w)
    assert f"computed in {own}" in tab.status.text()
    mine = evaluate_views(w.controller.pipeline, w.session.result, steps=STEPS, baseline="mean", seeds=SEEDS)
    for row, v in enumerate(mine.views):
        assert t2.views[row].deletion_auc == pytest.approx(v.deletion_auc, abs=6e-4)

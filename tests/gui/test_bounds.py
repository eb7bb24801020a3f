"""Load over time (issue 26): every cache of the window stays at its bound when driven past it, results of images no
longer shown are freed, the window's Qt objects do not grow with browsing, and no worker thread outlives its window
(closed with a comparison and a faithfulness table in flight). Tiny models; no timing thresholds."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
import shiboken6
from gui_helpers import Recorder, leftover_threads, make_image, open_and_wait
from PySide6.QtCore import QAbstractAnimation, QCoreApplication, QEvent, QObject
from PySide6.QtWidgets import QGraphicsView

from vitviz.document import comparison as cmp
from vitviz.document.session import MAP_CACHE_SIZE
from vitviz.gui.compare_window import KEEP_RESULTS
from vitviz.gui.faithfulness_jobs import EVALUATIONS_KEPT

TIMEOUT = 30000


@pytest.fixture
def images(tmp_path):
    """Twenty small images of a few sizes."""
    paths = []
    for i in range(20):
        p = tmp_path / f"im{i:02d}.png"
        make_image(p, h=40 + 3 * (i % 5), w=50 + 4 * (i % 7), seed=i)
        paths.append(str(p))
    return paths


def _idle(qtbot, w):
    c = w.controller
    qtbot.waitUntil(lambda: not c.is_busy() and c.requested is None, timeout=TIMEOUT)


def _compare(qtbot, w, spec):
    w.dialogs = w.dialogs_recorder
    cw = w.show_compare(spec)
    qtbot.waitUntil(lambda: cw.comparison is not None and cw.comparison.spec == spec
                    and len(cw.panels) == len(cw.comparison.cells), timeout=TIMEOUT)
    _idle(qtbot, w)
    return cw


# ------------------------------------------------------------------------------------------------ each cache
def test_the_session_map_cache_stays_at_its_bound_and_empties_for_each_result(qtbot, window, images):
    """Session.cache (maps, colour scales, masks of the shown result): an LRU of MAP_CACHE_SIZE entries."""
    open_and_wait(qtbot, window, images[0])
    s = window.session
    for i in range(MAP_CACHE_SIZE + 40):  # each opacity is another key of the colour scale
        s.set_options(opacity=i / (MAP_CACHE_SIZE + 40))
        assert s.levels() is not None
    assert len(s.cache) == MAP_CACHE_SIZE, "the session's map cache grew past its bound"
    newest = ("levels", s.options)
    assert newest in s.cache, "the map cache dropped its newest entry instead of its oldest"
    open_and_wait(qtbot, window, images[1])  # a new result: only what its first drawing needed
    assert len(s.cache) < 50, "the map cache kept the last image's maps"


def test_the_faithfulness_tables_kept_stay_at_their_bound(qtbot, window, images):
    """FaithfulnessJobs.tables (the faithfulness tables kept per image, target, model and options): the newest
    EVALUATIONS_KEPT."""
    c = window.controller
    r = open_and_wait(qtbot, window, images[0])
    keys = []
    for steps in range(1, EVALUATIONS_KEPT + 4):  # another number of steps: another table
        with qtbot.waitSignal(c.faithfulness.ready, timeout=TIMEOUT):
            keys.append(c.faithfulness.evaluate(r, steps=steps, baseline="mean", seeds=1))
    assert None not in keys and len(set(keys)) == len(keys)
    assert len(c.faithfulness.tables) == EVALUATIONS_KEPT, "the faithfulness tables grew past their bound"
    assert list(c.faithfulness.tables) == keys[-EVALUATIONS_KEPT:], "not the newest tables were kept"


def test_the_compare_windows_results_and_map_caches_stay_at_their_bound(qtbot, window, images):
    """CompareWindow.results (other images analysed for the grid): the newest KEEP_RESULTS; its map caches
    (CompareWindow._pool) only of results kept or drawn, while the main window browses with the grid open."""
    open_and_wait(qtbot, window, images[0])
    window.session.add_images(images)
    cw = None
    for i in range(0, len(images) - 2, 3):  # three other images at a time: past the bound after five grids
        cw = _compare(qtbot, window, cmp.CompareSpec(layout="views", views=("cls",),
                                                     images=tuple(images[i + 1:i + 4])))
        assert len(cw.results) <= KEEP_RESULTS, "the Compare window kept more results than its bound"
    assert len(cw.results) == KEEP_RESULTS
    # browse with the grid open (layers of the shown image): each image's map cache is let go after it
    cw = _compare(qtbot, window, cmp.CompareSpec(layout="layers", views=("cls",)))
    for p in images[:KEEP_RESULTS + 4]:
        open_and_wait(qtbot, window, p)
        _idle(qtbot, window)
        drawn = {id(c.session.result) for c in cw.comparison.cells}
        kept = {id(x) for x in cw.results.values()}
        assert set(cw._pool) <= drawn | kept, "the Compare window's map caches kept results it no longer shows"
        assert len(cw._pool) <= KEEP_RESULTS + 1, "the Compare window's map caches grew past their bound"


def test_a_grid_that_needs_more_results_than_are_kept_is_drawn_once(qtbot, window, images, monkeypatch):
    """A grid of more images than KEEP_RESULTS keeps every result it needs (dropping one would only make it ask for
    it again, without end), and the bound holds again for the next grid."""
    open_and_wait(qtbot, window, images[0])
    rows = tuple(images[:KEEP_RESULTS + 3])
    runs = []
    runner = window.controller.runner
    real = runner.submit
    monkeypatch.setattr(runner, "submit", lambda kind, fn, **kw: (runs.append(kind), real(kind, fn, **kw))[1])
    cw = _compare(qtbot, window, cmp.CompareSpec(layout="views", views=("cls",), images=rows))
    assert len(cw.results) == len(rows) - 1 and runs.count("compare") == 1, "the grid's runs were asked again"
    cw = _compare(qtbot, window, cmp.CompareSpec(layout="views", views=("cls",), images=(images[0], images[-1])))
    assert len(cw.results) == KEEP_RESULTS, "the bound did not hold again after the large grid"


def test_the_record_of_result_makers_holds_only_live_results(qtbot, window, images):
    """Controller._made_by (which model made each result, for the faithfulness keys): at most the shown result and
    the one before it, however many images were shown."""
    for p in images:
        open_and_wait(qtbot, window, p)
    assert len(window.controller._made_by) <= 2, "the record of result makers grew with every image"


def test_finished_jobs_let_go_of_what_they_captured(qtbot, window, images):
    """TaskRunner keeps the last job of each kind; once a job ran, it no longer holds its function (which captured a
    model, a result or an image)."""
    r = open_and_wait(qtbot, window, images[0])
    with qtbot.waitSignal(window.controller.faithfulness.ready, timeout=TIMEOUT):
        window.controller.faithfulness.evaluate(r, steps=2, baseline="mean", seeds=1)
    _compare(qtbot, window, cmp.CompareSpec(layout="views", views=("cls",), images=tuple(images[:2])))
    jobs = window.runner._jobs
    assert {"infer", "evaluate", "compare"} <= set(jobs)
    assert all(job.fn is None for job in jobs.values()), "a finished job still holds what its function captured"


def test_results_of_images_no_longer_shown_are_freed(qtbot, window, images):
    """Every result made for an image that was shown, measured (a faithfulness table) and compared (with other
    images, whose results the Compare window made) is freed once other images are shown and the Compare window is
    closed: only the shown result is left."""
    seen = []  # weak references to every result made in this test
    window.controller.resultReady.connect(lambda r, _remember: seen.append(weakref.ref(r)))
    first = open_and_wait(qtbot, window, images[0])
    with qtbot.waitSignal(window.controller.faithfulness.ready, timeout=TIMEOUT):
        window.controller.faithfulness.evaluate(first, steps=2, baseline="mean", seeds=1)
    cw = _compare(qtbot, window, cmp.CompareSpec(layout="views", views=("cls",), images=tuple(images[:3])))
    seen += [weakref.ref(r) for r in cw.results.values()]
    cw = _compare(qtbot, window, cmp.CompareSpec(layout="layers", views=("cls",)))
    del first
    for p in images[3:6]:  # browsing with the grid open
        open_and_wait(qtbot, window, p)
    _idle(qtbot, window)
    cw.close()
    window.session.forget_image(images[0])  # closing an image
    gc.collect()
    alive = [r() for r in seen if r() is not None]
    assert len(seen) == 6 and alive == [window.session.result], "results of images no longer shown are alive"


def _qt_objects(window) -> tuple[int, int]:
    """The window's QObjects and the items of its graphics scenes (canvas, heads mosaic, plots)."""
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    # (the style's animations, e.g. of the busy bar, come and go with the widgets' state: not counted)
    objects = [o for o in window.findChildren(QObject) if not isinstance(o, QAbstractAnimation)]
    items = sum(len(v.scene().items()) for v in window.findChildren(QGraphicsView) if v.scene() is not None)
    return len(objects), items


def test_browsing_does_not_grow_the_windows_qt_objects(qtbot, window, images):
    """The same Qt objects after a second pass over the images as after the first: nothing is created per image and
    never deleted."""
    window.session.add_images(images[:6])
    for p in images[:6]:
        open_and_wait(qtbot, window, p)
    first = _qt_objects(window)
    for p in images[:6] * 2:
        open_and_wait(qtbot, window, p)
    assert _qt_objects(window) == first, "the window's Qt objects grew with browsing (made per image, never deleted)"


def test_model_and_precision_changes_do_not_grow_the_windows_qt_objects(qtbot, window, images, tiny_model,
                                                                         tmp_path):
    """Loading a model and changing the precision refill the model bar and the Device and Precision menus: the same
    Qt objects after a second round as after the first (the menus' action groups were made anew at each filling)."""
    from vitviz.model import save_checkpoint

    ckpt = str(save_checkpoint(tiny_model, tmp_path / "tiny.safetensors"))
    open_and_wait(qtbot, window, images[0])

    def round_trip():
        for ref in (ckpt, "memory-again"):
            with qtbot.waitSignal(window.modelChanged, timeout=TIMEOUT):
                if ref == ckpt:
                    window.load_model(ckpt)
                else:
                    window.controller.adopt(tiny_model, "memory")
            _idle(qtbot, window)
        for precision in ("bf16", "fp32", "auto"):
            with qtbot.waitSignal(window.modelChanged, timeout=TIMEOUT):
                window.set_precision(precision)
            _idle(qtbot, window)

    round_trip()
    first = _qt_objects(window)
    round_trip()
    assert _qt_objects(window) == first, "the window's Qt objects grew with model and precision changes"


def test_tables_and_comparisons_do_not_grow_the_windows_qt_objects(qtbot, window, images):
    """Faithfulness tables shown and Compare windows (images, layers, classes) opened and closed: the same Qt objects
    after a second round as after the first."""
    c = window.controller
    window.plots.show_page(window.plots.faithfulness)

    def round_trip(k):
        for p in images[:3]:
            r = open_and_wait(qtbot, window, p)
            with qtbot.waitSignal(c.faithfulness.ready, timeout=TIMEOUT):
                c.faithfulness.evaluate(r, steps=2 + k, baseline="mean", seeds=1)
            for spec in (cmp.CompareSpec(layout="views", views=("cls", "rollout"), images=tuple(images[k:k + 3])),
                         cmp.CompareSpec(layout="layers", views=("cls",)),
                         cmp.CompareSpec(layout="classes", views=("grad_rollout",), classes=(0, 1, 2))):
                cw = _compare(qtbot, window, spec)
            cw.close()

    round_trip(0)
    first = _qt_objects(window)
    round_trip(1)
    assert _qt_objects(window) == first, "the window's Qt objects grew with tables and comparisons"


# ------------------------------------------------------------------------------------------------ closing
def test_closing_the_compare_window_frees_its_results_and_panels(qtbot, window, images):
    open_and_wait(qtbot, window, images[0])
    cw = _compare(qtbot, window, cmp.CompareSpec(layout="views", views=("cls", "rollout"), images=tuple(images[:3])))
    panels = list(cw.panels)
    held = [weakref.ref(r) for r in cw.results.values()]
    assert panels and held
    cw.close()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()
    assert cw.results == {} and cw._pool == {} and cw.comparison is None and cw.panels == []
    assert not any(shiboken6.isValid(p) for p in panels), "the closed Compare window's panels were not deleted"
    assert all(r() is None for r in held), "the closed Compare window's results are still alive"
    # opened again: the same comparison, analysed again
    cw = _compare(qtbot, window, cw.spec)
    assert len(cw.results) == 2 and len(cw.panels) == 6


def test_no_worker_thread_outlives_its_window_closed_with_work_in_flight(qtbot, tiny_model, settings, images):
    """A window closed while a faithfulness table is being measured and a comparison waits for the worker: the
    worker thread ends, nothing of vitviz's keeps running, and the window lets go of its model, its tables and the
    Compare window's results."""
    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow

    make_app()
    before = set(threading.enumerate())
    w = MainWindow(settings=settings, model=tiny_model, dialogs=Recorder())
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    worker = w.runner._thread
    assert worker.is_alive() and worker.name.startswith("vitviz-")
    r = open_and_wait(qtbot, w, images[0])
    c = w.controller
    c.faithfulness.batch_size = 1  # many small batches: the table is still being measured when the window closes
    with qtbot.waitSignal(c.faithfulness.progress, timeout=TIMEOUT):
        assert c.faithfulness.evaluate(r, steps=150, baseline="mean", seeds=5) is not None
    cw = w.show_compare(cmp.CompareSpec(layout="views", views=("cls",), images=tuple(images[:4])))
    assert c.faithfulness.running is not None and cw._asked, "the table and the comparison should both be in flight"
    w.close()
    assert not worker.is_alive(), "the worker thread outlived its window"
    assert leftover_threads(before) == [], "a vitviz thread outlived its window"
    assert not cw.isVisible() and cw.results == {} and cw._pool == {}
    assert c.pipeline is None and c.faithfulness.tables == {} and c._made_by == {}, "the closed window kept its model"

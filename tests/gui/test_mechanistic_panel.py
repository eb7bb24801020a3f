"""The plots panel's "Lens / heads" tab (vitviz.gui.mechanistic_panel) on the bundled demo model: Run draws the logit
lens and the knock-out grid of the image and target on screen (the numbers of vitviz.capture.mechanistic on the same
input), a click on a grid cell shows that head's map, a new image marks the plots stale (offscreen)."""

from __future__ import annotations

import numpy as np
import pytest
from gui_helpers import Recorder, open_and_wait, shown_window


class _Click:
    """A left click at a scene position (what the panel's click handler reads of a pyqtgraph mouse event)."""

    def __init__(self, pos):
        self._pos = pos

    def button(self):
        from PySide6.QtCore import Qt

        return Qt.MouseButton.LeftButton

    def scenePos(self):
        return self._pos


@pytest.fixture
def demo_window(qtbot, settings):
    from vitviz.demo import load_demo_model

    w = shown_window(qtbot, settings, load_demo_model(), model_key="demo", dialogs=Recorder())
    w.plots.show_page(w.plots.mechanistic)
    return w


def test_run_draws_lens_and_grid_and_a_click_shows_the_head(qtbot, demo_window):
    from PIL import Image
    from PySide6.QtCore import QPointF, Qt

    from vitviz.capture.mechanistic import head_knockout, logit_lens
    from vitviz.demo import sample_images

    w = demo_window
    samples = sample_images()
    open_and_wait(qtbot, w, samples[0])
    tab = w.plots.mechanistic
    assert tab.why_not() is None
    with qtbot.waitSignal(w.controller.runner.done, timeout=60000, check_params_cb=lambda k, *_: k == "mechanistic"):
        qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    lens, ko = tab.shown
    r = w.session.result
    pipeline = w.controller.pipeline
    x = pipeline.prepare(Image.fromarray(r.rgb)).x[None]
    want_ko = head_knockout(pipeline.model, x, int(r.target))
    want_lens = logit_lens(pipeline.model, x, int(r.target))
    np.testing.assert_allclose(tab.ko_item.image, want_ko.delta.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(lens.probabilities.numpy(), want_lens.probabilities.numpy(), rtol=1e-4, atol=1e-5)
    curves = tab.lens_plot.listDataItems()
    assert curves and any(c.name().endswith("(target)") for c in curves)
    assert r.label(int(r.target)) in tab.status.text()
    # a click on cell (layer 2, head 1) of the grid: that head's map on the canvas
    scene = tab.ko_plot.getViewBox().mapViewToScene(QPointF(1.5, 2.5))
    tab._on_click(_Click(scene))
    assert (w.session.options.layer, w.session.options.head) == (2, 1)
    assert "head" in w.session.view.reads
    # another image: the plots say they are of another image
    open_and_wait(qtbot, w, samples[1])
    assert "another image" in tab.status.text()

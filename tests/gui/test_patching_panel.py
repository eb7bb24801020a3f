"""The Compare window's Patching dock (vitviz.gui.patching_panel) on the bundled demo model: the shown image is the
clean one, another open image the corrupted one; Run draws the per-layer recovery and a layer's per-patch map, the
numbers of vitviz.capture.mechanistic.activation_patching on the same inputs (offscreen)."""

from __future__ import annotations

import numpy as np
from gui_helpers import Recorder, open_and_wait, shown_window


def test_patching_dock_draws_the_recovery_of_the_shown_image_into_another(qtbot, settings):
    from PIL import Image
    from PySide6.QtCore import Qt

    from vitviz.capture.mechanistic import activation_patching
    from vitviz.demo import load_demo_model, sample_images
    from vitviz.imaging import load_image

    w = shown_window(qtbot, settings, load_demo_model(), model_key="demo", dialogs=Recorder())
    a, b = (str(p) for p in sample_images()[:2])
    open_and_wait(qtbot, w, b)
    open_and_wait(qtbot, w, a)
    cw = w.show_compare()
    panel = cw.patching
    panel.refresh()
    assert [panel.corrupt_combo.itemData(i) for i in range(panel.corrupt_combo.count())] == [b]
    with qtbot.waitSignal(w.controller.runner.done, timeout=60000, check_params_cb=lambda k, *_: k == "patching"):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    r = w.session.result
    pipeline = w.controller.pipeline
    want = activation_patching(pipeline.model, pipeline.prepare(Image.fromarray(r.rgb)).x[None],
                               pipeline.prepare(load_image(b)).x[None], int(r.target))
    curves = {c.name(): c.getData()[1] for c in panel.curve_plot.listDataItems()}
    np.testing.assert_allclose(curves["[CLS] patched"], want.cls.numpy(), atol=1e-4)
    np.testing.assert_allclose(curves["all tokens"], want.all.numpy(), atol=1e-4)
    panel.layer_slider.setValue(1)
    np.testing.assert_allclose(panel.map_item.image, want.recovery_map(1).numpy(), atol=1e-4)
    y0, x0, y1, x1 = pipeline.prepare(load_image(b)).geometry.crop_in_image()  # the corrupted image's crop
    assert panel.photo_item.image.shape == (int(round(y1)) - int(round(y0)), int(round(x1)) - int(round(x0)), 3)
    assert "clean" in panel.status.text() and r.label(int(r.target)) in panel.status.text()
    cw.close()

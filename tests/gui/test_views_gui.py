"""The window builds its view list, shortcuts and enabled controls from the registry; quick PageDown presses."""

import numpy as np
from gui_helpers import make_image, open_and_wait
from PySide6.QtCore import Qt

from vitviz import views
from vitviz.document import appearance


class Squared(views.View):
    key = "toy_square"
    title = "Squared attention (toy)"
    reads = frozenset({"query"})
    quantity = "attention weight squared"
    shortcut = "Ctrl+9"

    def compute(self, result, options):
        p = result.num_prefix_tokens
        return views.as_grid(result.attentions[-1].float().mean(0)[p + options.query, p:] ** 2, result.grid)


def test_a_registered_view_is_listed_and_drawn(qtbot, tiny_model, settings, image_path):
    from vitviz.gui.main_window import MainWindow

    views.register(Squared())
    try:
        w = MainWindow(settings=settings, model=tiny_model)
        qtbot.addWidget(w)
        w.show()
        r = open_and_wait(qtbot, w, image_path)
        assert "toy_square" in w.controls.view_buttons and "toy_square" in w.acts.views
        assert w.acts.views["toy_square"].shortcut().toString() == "Ctrl+9"
        w.controls.view_buttons["toy_square"].click()  # the user picks it
        assert w.session.options.view == "toy_square"
        w.set_query(5)
        ref = (r.attentions[-1].float().mean(0)[1 + 5, 1:] ** 2).reshape(r.grid).numpy()
        np.testing.assert_allclose(np.asarray(w.canvas.overlay_values), ref, rtol=1e-6)
        # it reads only the query: layer, head and rollout controls are disabled
        assert not w.controls.layer_slider.isEnabled() and not w.controls.head_combo.isEnabled()
        assert not w.controls.rollout_box.isEnabled()
        assert "Squared attention (toy)" in w.windowTitle()
        w.close()
    finally:
        views.unregister("toy_square")


def test_controls_follow_what_each_view_reads(qtbot, window, image_path):
    open_and_wait(qtbot, window, image_path)
    for v in views.all_views():
        window.set_view(v.key)
        c = window.controls
        # the slider is live only where the view reads a layer (its slider option), named as the view reads it
        assert c.layer_slider.isEnabled() == (v.slider is not None), v.key
        assert (v.slider is not None) == bool(v.reads & {"layer", "start_layer", "legrad_start", "gradcam_layer"})
        assert c.layer_row_label.text() == v.slider_label, v.key
        assert c.head_combo.isEnabled() == ("head" in v.reads), v.key
        assert c.discard_spin.isEnabled() == ("discard_ratio" in v.reads), v.key
        assert c.mask_background.isEnabled() == ("mask_background" in v.reads), v.key
        assert c.pca_joint.isEnabled() == ("pca_joint" in v.reads), v.key
        assert c.view_buttons[v.key].isChecked() and window.acts.views[v.key].isChecked()
        # the canvas says what it shows, and the query box is drawn only where the view uses the patch
        if v.unavailable(window.session.result) is None:  # (a view this model lacks, RoPE's, says "not available")
            s = window.session
            assert window.canvas.title.text() == appearance.title(s.describe_view(), s.options)
            assert window.canvas.title.isVisible()
        else:
            assert "not available" in window.canvas.title.text(), v.key
        assert window.canvas.marker.isVisible() == ("query" in v.reads), v.key


def test_rollout_slider_is_its_start_layer(qtbot, window, image_path):
    open_and_wait(qtbot, window, image_path)
    window.set_view("rollout")
    qtbot.keyClick(window.canvas, Qt.Key.Key_End)
    o = window.session.options
    assert o.start_layer == window.session.result.num_layers - 1
    assert window.controls.layer_slider.value() == o.start_layer
    assert f"start layer {o.start_layer}" in window.canvas.title.text()
    window.set_view("token_sim")
    qtbot.keyClick(window.canvas, Qt.Key.Key_Home)
    assert window.session.options.layer == -1 and window.controls.layer_label.text() == "emb"
    assert "patch embeddings" in window.canvas.title.text()


def test_quick_page_down_presses_each_move_on(qtbot, window, tmp_path):
    paths = []
    for i in range(6):
        p = tmp_path / f"img{i}.png"
        make_image(p, 40 + i, 50, seed=i)
        paths.append(str(p))
    open_and_wait(qtbot, window, paths[0])
    window.session.add_images(paths)
    window.session.index = 0
    with qtbot.waitSignal(window.resultShown, timeout=30000):
        for _ in range(4):  # faster than the model: the requests pile up, each press moves on, the newest wins
            qtbot.keyClick(window.canvas, Qt.Key.Key_PageDown)
    qtbot.waitUntil(lambda: not window.runner.is_busy(), timeout=30000)
    assert window.session.result.source == paths[4]
    with qtbot.waitSignal(window.resultShown, timeout=30000):
        qtbot.keyClick(window.canvas, Qt.Key.Key_PageUp)
    assert window.session.result.source == paths[3]


def test_feature_pca_is_drawn_in_its_own_colours(qtbot, window, image_path):
    r = open_and_wait(qtbot, window, image_path)
    window.set_view("feature_pca")
    window.set_layer(r.num_layers - 1)
    c = window.canvas
    assert c.rgb_item.isVisible() and not c.overlay_item.isVisible()
    np.testing.assert_allclose(c.rgb_values, window.session.rgb_map())
    assert c.rgb_values.shape == (*r.grid, 4)
    assert "Feature PCA" in c.title.text()
    assert window.controls.mask_background.isEnabled()
    window.controls.mask_background.click()  # the user masks the background
    assert window.session.options.mask_background
    np.testing.assert_allclose(c.rgb_values, window.session.rgb_map())
    assert "background masked" in c.title.text()
    c.grab()  # drawn without error
    window.set_view("token_norm")  # another view: the colour map is back, the RGB picture gone
    assert c.overlay_item.isVisible() and not c.rgb_item.isVisible()


def test_legrads_pooling_control_takes_a_new_pass_for_the_other_pooling(qtbot, window, image_path):
    r = open_and_wait(qtbot, window, image_path)
    assert set(r.legrad) == {"mean"}  # the pass takes LeGrad for the pooling shown only
    window.set_view("legrad")
    combo = window.controls.legrad_pooling
    assert combo.isEnabled() and combo.currentData() == "mean"
    shown = np.asarray(window.canvas.overlay_values).copy()
    combo.setCurrentIndex(combo.findData("model"))  # the model's own pooling: the image is analysed again
    qtbot.waitUntil(lambda: window.session.result is not r and "model" in window.session.result.legrad, timeout=20000)
    assert window.session.options.legrad_pooling == "model" and window.session.current_map() is not None
    assert not np.array_equal(np.asarray(window.canvas.overlay_values), shown)
    assert window.session.result.target == r.target
    window.set_view("cls")
    assert not combo.isEnabled()

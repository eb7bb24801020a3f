"""Feature PCA "Fit over all open images" in the window: the other open images are read on the worker, the colours
equal vitviz.analysis's joint fit over every open image, the Compare window's panels share the fit, and an image
that cannot be read is left out (said once)."""

import numpy as np
import torch
from gui_helpers import make_image, open_and_wait

from vitviz import analysis as A
from vitviz.imaging import load_image


def _open(qtbot, window, tmp_path, n=3):
    paths = []
    for i in range(n):
        p = tmp_path / f"im{i}.png"
        make_image(p, 50 + 10 * i, 60, seed=i)
        paths.append(str(p))
    window.session.add_images(paths[1:])
    open_and_wait(qtbot, window, paths[0])
    return paths


def _joint(qtbot, window):
    window.set_view("feature_pca")
    window.set_layer(1)
    window.controls.pca_joint.setChecked(True)  # the option row's checkbox
    qtbot.waitUntil(lambda: window.session.joint_missing() == [] and "reading" not in window.session.describe_view(),
                    timeout=30000)


def test_the_joint_fit_reads_the_open_images_and_colours_as_the_analysis(qtbot, window, tmp_path):
    paths = _open(qtbot, window, tmp_path)
    _joint(qtbot, window)
    assert window.session.options.pca_joint and window.controls.pca_joint.isEnabled()
    assert "fitted over 3 open images" in window.canvas.title.text()
    pipe = window.controller.pipeline
    runs = pipe.run_batch([load_image(p) for p in paths], sources=paths, gradients=False)
    stacked = torch.cat([r.tokens[2][r.num_prefix_tokens:] for r in runs])
    r = window.session.result
    want = A.feature_pca(r.tokens[2], grid=r.grid, num_prefix_tokens=r.num_prefix_tokens, fit_tokens=stacked)
    np.testing.assert_allclose(window.session.rgb_map()[..., :3], want.rgb.numpy(), atol=1e-5)
    np.testing.assert_allclose(window.canvas.rgb_values[..., :3], want.rgb.numpy(), atol=1e-5)
    # the Compare window's rows (the open images) are coloured by the same fit
    from vitviz.document.comparison import CompareSpec

    cw = window.show_compare(CompareSpec(layout="views", views=("feature_pca",), images=tuple(paths[:2])))
    qtbot.waitUntil(lambda: cw.comparison is not None and len(cw.comparison.cells) == 2, timeout=30000)
    other = runs[1]
    want1 = A.feature_pca(other.tokens[2], grid=other.grid, num_prefix_tokens=1, fit_tokens=stacked)
    np.testing.assert_allclose(cw.comparison.cells[1].session.rgb_map()[..., :3], want1.rgb.numpy(), atol=1e-5)
    cw.close()


def test_an_unreadable_open_image_is_left_out_of_the_fit(qtbot, window, tmp_path):
    paths = _open(qtbot, window, tmp_path, n=2)
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not a png")
    window.session.add_images([str(bad)])
    window.session.index = 0
    with qtbot.waitSignal(window.statusBar().messageChanged, timeout=30000,
                          check_params_cb=lambda m: "Left out of the joint feature PCA: broken.png" in m):
        _joint(qtbot, window)
    qtbot.waitUntil(lambda: "fitted over 2 of 3 open images" in window.canvas.title.text(), timeout=30000)
    assert set(window.session.joint_fit_images()) == set(paths)
    assert not window.dialogs_recorder.errors


def test_another_model_forgets_the_tokens(qtbot, window, tmp_path):
    from vitviz.model import create_model

    _open(qtbot, window, tmp_path)
    _joint(qtbot, window)
    held = window.session.joint
    assert len(held) == 3
    wider = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=4,
                         num_classes=5).eval()
    with qtbot.waitSignal(window.resultShown, timeout=30000):
        window.controller.adopt(wider, "memory")
    qtbot.waitUntil(lambda: window.session.joint_missing() == [] and len(held) == 3
                    and held.tokens_of(window.session.result.source, 0).shape[-1] == 48, timeout=30000)
    assert "fitted over 3 open images" in window.canvas.title.text()

"""The feature PCA view: listed, computed from a pipeline result, drawn as RGB by the panel and the figures."""

import numpy as np

from vitviz import analysis as A
from vitviz import views
from vitviz.document.panel import panel_of, render_view, view_figure


def test_listed_and_declared():
    v = views.get("feature_pca")
    assert v in views.all_views()
    assert v.rgb and not v.needs_grads and not v.needs_cls and "target" not in v.reads
    assert v.reads == {"layer", "mask_background", "pca_joint", "pca_style"} and v.slider == "layer"
    assert all(not x.rgb for x in views.all_views() if x.key not in ("feature_pca", "logit_lens"))


def test_computes_for_the_tiny_model(session, tiny_model):
    r = session.result
    session.set_options(view="feature_pca", layer=r.num_layers - 1)
    t = r.tokens[r.num_layers].double()  # the last layer: after the final LayerNorm, written out
    normed = (t - t.mean(-1, keepdim=True)) / (t.var(-1, unbiased=False, keepdim=True) + tiny_model.norm.eps).sqrt()
    normed = normed * tiny_model.norm.weight.double() + tiny_model.norm.bias.double()
    ref = A.feature_pca(normed, grid=r.grid, num_prefix_tokens=r.num_prefix_tokens)
    np.testing.assert_allclose(session.current_map(), ref.scores[..., 0].numpy(), rtol=1e-4, atol=1e-5)
    rgba = session.rgb_map()
    assert rgba.shape == (*r.grid, 4) and rgba.dtype == np.float32
    np.testing.assert_allclose(rgba[..., :3], ref.rgb.numpy(), atol=1e-5)
    assert "tokens after the final norm" in session.caption()
    assert np.all(rgba[..., 3] == 1)
    assert session.unavailable_reason() is None
    session.set_options(layer=-1)  # the patch embeddings
    assert session.rgb_map().shape == (*r.grid, 4)
    assert "patch embeddings" in session.describe_view()


def test_mask_option_is_cached_apart_and_captioned(session):
    session.set_options(view="feature_pca", layer=2)
    full = session.rgb_map()
    session.set_options(mask_background=True)
    masked = session.rgb_map()
    assert masked is not full
    assert np.any(masked[..., 3] == 0) and np.all(masked[masked[..., 3] == 0][:, :3] == 0)
    assert "background masked" in session.describe_view()
    assert "_feature_pca_L2" in session.export_name()


def test_panel_and_figure_draw_rgb_without_colour_bar(session):
    session.set_options(view="feature_pca", layer=2, opacity=1.0)
    p = panel_of(session)
    assert p.rgb is not None and p.scale is None and p.grid_values is None
    assert "first three principal components of the patch tokens at layer 2 → R, G, B" in p.caption
    assert p.title.startswith("Feature PCA")
    spec = view_figure(session)
    assert spec is not None and spec.scale is None and not spec.colorbar
    px = render_view(session)
    assert px is not None and px.ndim == 3
    # with full opacity and no caption the exported picture is the RGB of each patch over the crop
    session.set_options(caption=False, colorbar=False)
    px = render_view(session)
    r = session.result
    y0, x0, y1, x1 = session.crop_rect_yx()
    gh, gw = r.grid
    cy = int(y0 + (y1 - y0) * 0.5 / gh)
    cx = int(x0 + (x1 - x0) * 0.5 / gw)
    np.testing.assert_allclose(px[cy, cx], np.round(session.rgb_map()[0, 0, :3] * 255), atol=1)


def test_other_views_keep_their_colour_bar(session):
    session.set_options(view="token_norm", layer=1)
    p = panel_of(session)
    assert p.rgb is None and p.scale is not None and session.rgb_map() is None

"""How the Qt-free session draws a map (vitviz.document.appearance): artefact tokens, colour-scale modes, the mass
mask, titles and one layer numbering."""

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz import analysis as A
from vitviz import views
from vitviz.document import appearance
from vitviz.document.session import Session
from vitviz.pipeline import run_inference


@pytest.fixture
def session(session_of):
    return session_of(64, 64)


def plant_artefacts(s, cells):
    """Make the given patches high-norm tokens in the later layers (x40 norm), as real ViTs' artefacts are."""
    r = s.result
    p, gw = r.num_prefix_tokens, r.grid[1]
    tokens = r.capture.tokens.clone()
    for row, col in cells:
        tokens[tokens.shape[0] // 2:, p + row * gw + col] *= 40.0
    r.capture.tokens = tokens
    s.set_result(r)


def title(s):
    """The canvas title of ``s``'s current view (as :func:`vitviz.document.panel.panel_of` makes it)."""
    return appearance.title(s.describe_view(), s.options)


def artefact_words(s):
    """The status bar's artefact part for ``s`` (as the window's status bar makes it)."""
    layer = s.view.attention_layer(s.options)
    share = appearance.register_share(s.result, s.cache, layer)
    return appearance.artefact_text(s.artefacts(), s.artefact_grid(), layer, share)


def test_planted_artefact_tokens_are_found_listed_and_left_out_of_the_scale(session):
    plant_artefacts(session, [(1, 2)])
    assert appearance.artefact_patches(session.artefact_grid()) == [(1, 2)]
    assert "(1, 2)" in artefact_words(session)
    # the map there is made huge: the robust scale ignores it when asked, not otherwise
    session.set_options(view="token_norm", layer=session.result.num_layers - 1, scale="per_map")
    m = session.current_map()
    assert m[1, 2] == m.max()
    with_art = session.set_options(scale_excludes_artefacts=False) and session.levels()
    without = session.set_options(scale_excludes_artefacts=True) and session.levels()
    assert with_art.hi == pytest.approx(float(m.max()))
    rest = np.delete(m.reshape(-1), 1 * m.shape[1] + 2)
    assert without.hi == pytest.approx(float(rest.max()))
    assert "artefact tokens excluded" in appearance.scale_text(session.options, bool(session.artefact_grid().any()))


def test_ignoring_artefacts_renormalises_every_layers_attention_before_the_views(session):
    plant_artefacts(session, [(3, 3)])  # (a 4x4 grid: the detector flags at most 10 % of the patches, one)
    assert appearance.artefact_patches(session.artefact_grid()) == [(3, 3)]
    r = session.result
    p, gw = r.num_prefix_tokens, r.grid[1]
    flagged = [p + 3 * gw + 3]
    # brute force: drop the two key columns of every row of every head and layer, renormalise, then the analyses
    attn = r.attentions.double().clone()
    for l in range(attn.shape[0]):
        for h in range(attn.shape[1]):
            for q in range(attn.shape[2]):
                row = attn[l, h, q].clone()
                row[flagged] = 0
                attn[l, h, q] = row / row.sum()
    grads = r.attention_grads.double().clone()
    grads[..., flagged] = 0
    session.set_options(view="cls", layer=1, head=0, ignore_artefacts=True)
    np.testing.assert_allclose(session.current_map(), A.cls_attention(attn, 1, 0, grid=r.grid).numpy(),
                               rtol=1e-4, atol=1e-6)
    assert session.current_map()[3, 3] == 0
    session.set_options(view="rollout")
    np.testing.assert_allclose(session.current_map(), A.attention_rollout(attn, grid=r.grid).numpy(),
                               rtol=1e-4, atol=1e-7)
    session.set_options(view="relevance")
    np.testing.assert_allclose(session.current_map(), A.relevance(attn, grads, grid=r.grid).numpy(),
                               rtol=1e-4, atol=1e-7)
    assert "artefact tokens ignored" in title(session)
    assert "noart" in session.export_name()
    session.set_options(ignore_artefacts=False)
    assert "ignored" not in title(session)
    session.set_options(view="token_sim", ignore_artefacts=True)  # not an attention view: unchanged
    assert "ignored" not in title(session)


def test_scale_modes(session):
    s = session
    s.set_options(view="cls", layer=1, head=0, scale="per_map")
    m = s.current_map()
    lv = s.levels()
    assert (lv.lo, lv.hi) == pytest.approx((float(m.min()), float(m.max())))
    s.set_options(scale="robust", percentile=90.0)
    assert s.levels().hi == pytest.approx(float(np.percentile(m, 90.0)), rel=1e-5)
    s.set_options(scale="layers", percentile=100.0)
    every = np.stack([s.map_for(s.view, s.options.__class__(**{**s.options.__dict__, "layer": i}))
                      for i in range(s.result.num_layers)])
    assert s.levels().hi == pytest.approx(float(every.max()), rel=1e-5)
    s.set_options(layer=0)
    assert s.levels().hi == pytest.approx(float(every.max()), rel=1e-5)  # the same bar on every layer
    s.set_options(scale="heads")
    heads = np.stack([s.map_for(s.view, s.options.__class__(**{**s.options.__dict__, "head": h}))
                      for h in range(s.result.num_heads)])
    assert s.levels().hi == pytest.approx(float(heads.max()), rel=1e-5)
    s.set_options(scale="fixed", fixed_range=(0.0, 0.5))
    assert (s.levels().lo, s.levels().hi) == (0.0, 0.5)
    with pytest.raises(ValueError):
        s.set_options(fixed_range=(0.5, 0.1))
    with pytest.raises(ValueError, match="scale must be"):
        s.set_options(scale="auto")


def test_signed_views_are_centred_at_zero_with_a_diverging_colormap(session):
    s = session
    s.set_options(view="token_sim", layer=1, query=3, scale="per_map")
    lv = s.levels()
    assert lv.diverging and lv.lo == -lv.hi
    assert float(lv.normalise(np.array([0.0]))[0]) == pytest.approx(0.5)
    assert appearance.colormap(s.levels(), s.options) != s.options.cmap
    s.set_options(view="cls")
    assert not s.levels().diverging and appearance.colormap(s.levels(), s.options) == s.options.cmap


def test_mass_mask_keeps_the_asked_share(session):
    s = session
    s.set_options(view="rollout", mask_keep=0.6)
    m, keep = s.current_map(), appearance.mask(s.current_map(), s.view, s.options, s.cache)
    assert keep.dtype == bool and keep.shape == m.shape
    total = m.clip(min=0).sum()
    assert m[keep].sum() >= 0.6 * total - 1e-6
    assert m[keep].min() >= m[~keep].max()  # the largest patches
    assert "top 60% of mass" in title(s)
    s.set_options(mask_keep=0.0)
    assert appearance.mask(s.current_map(), s.view, s.options, s.cache) is None


def test_titles_say_what_is_shown_and_one_layer_numbering(session):
    s = session
    r = s.result
    s.set_options(view="relevance", start_layer=1)
    t = title(s)
    assert t.startswith("Relevance") and r.label(r.target) in t and "start layer 1" in t and "mean of heads" in t
    s.set_options(view="grad_rollout")
    assert "all layers" in title(s)
    s.set_options(view="cls", layer=2, head=1)
    assert "layer 2" in title(s) and "head 1" in title(s)
    s.set_options(view="token_sim", layer=2)
    assert "output of layer 2" in title(s)
    # the heads panel shows the attention of the same layer the token view names
    assert s.view.attention_layer(s.options) == 2
    s.set_options(layer=-1)
    assert "patch embeddings" in title(s) and s.view.attention_layer(s.options) == 0
    # rollout's slider is its start layer
    assert views.get("rollout").slider == "start_layer" and views.get("rollout").slider_label == "Start layer"
    assert views.get("grad_rollout").slider is None and views.get("cls").slider == "layer"


def test_query_box_only_where_the_view_uses_it(session):
    s = session
    for key, shown in [("cls", False), ("query", True), ("rollout", False), ("token_sim", True),
                       ("pos_sim", True), ("token_norm", False)]:
        s.set_options(view=key)
        assert appearance.shows_query(s.result, s.view) == shown, key


def test_token_norm_view_matches_a_loop(session):
    s = session
    r = s.result
    s.set_options(view="token_norm", layer=1)
    p = r.num_prefix_tokens
    ref = np.array([[float(torch.sqrt((r.tokens[2, p + i * r.grid[1] + j] ** 2).sum())) for j in range(r.grid[1])]
                    for i in range(r.grid[0])])
    np.testing.assert_allclose(s.current_map(), ref, rtol=1e-5)
    assert appearance.quantity_text(s.view).startswith("token norm")


def test_models_with_registers_report_the_registers_share_of_cls_attention():
    from vitviz.model import create_model

    torch.manual_seed(0)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                     num_classes=3, num_reg_tokens=4).eval()
    s = Session()
    s.set_result(run_inference(m, Image.new("RGB", (40, 40), (120, 30, 200)), source="r.png"))
    r = s.result
    assert r.num_registers == 4 and r.num_prefix_tokens == 5
    s.set_options(view="cls", layer=1)
    expected = float(r.attentions[1, :, 0, 1:5].sum(-1).mean())  # [CLS] row, register columns, mean of heads
    assert appearance.register_share(s.result, s.cache, layer=1) == pytest.approx(expected, rel=1e-5)
    assert f"registers take {expected:.0%}" in artefact_words(s)

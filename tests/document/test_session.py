"""The Qt-free session: options, caching, geometry, captions (no window)."""

import numpy as np
import pytest
from PIL import Image

from vitviz import analysis as A
from vitviz import views
from vitviz.document.panel import render_heads, render_view
from vitviz.document.session import Session
from vitviz.pipeline import run_inference


@pytest.fixture
def session(tiny_model):
    rng = np.random.default_rng(0)
    img = Image.fromarray((rng.random((70, 110, 3)) * 255).astype(np.uint8))
    s = Session()
    s.set_result(run_inference(tiny_model, img, source="x.png"))
    return s


def test_layer_range_and_clamping(session):
    assert session.layer_range("cls") == (0, 2)
    # one numbering everywhere: layer l is block l; token views add -1, the patch embeddings
    assert session.layer_range("token_sim") == session.layer_range("token_norm") == (-1, 2)
    assert session.set_options(layer=99).layer == 2
    session.set_options(view="token_sim", layer=-1)
    assert session.options.layer == -1
    assert "patch embeddings" in session.describe_view()
    session.set_options(view="cls")
    assert session.options.layer == 0
    assert session.set_options(head=17).head == 3
    with pytest.raises(ValueError, match="unknown view"):
        session.set_options(view="nope")
    with pytest.raises(ValueError, match="head must be"):
        session.set_options(head="median")


def test_every_view_matches_the_analysis_function(session, tiny_model):
    r = session.result
    m = tiny_model
    p, g = r.num_prefix_tokens, r.grid
    session.set_options(layer=1, head=2, query=5)
    refs = {
        "cls": A.cls_attention(r.attentions, 1, 2, grid=g),
        "query": A.query_attention(r.attentions, 1, 2, p + 5, grid=g),
        "rollout": A.attention_rollout(r.attentions, grid=g),
        "grad_rollout": A.gradient_rollout(r.attentions, r.attention_grads, grid=g),
        "relevance": A.relevance(r.attentions, r.attention_grads, grid=g),
        "token_sim": A.token_similarity(r.tokens, layer=2, index=p + 5, grid=g),  # tokens[2]: block 1's output
        "token_norm": r.tokens[2, p:].norm(dim=-1).reshape(g),
        "pos_sim": A.position_embedding_similarity(r.pos_embed, grid=g)[1, 1],
        "feature_pca": A.feature_pca(r.tokens[2], grid=g, num_prefix_tokens=p).scores[..., 0],
        # LeGrad and GradCAM count their layers from the end by default: the last two layers, the last block
        "legrad": r.legrad["mean"][r.num_layers - 2:].sum(0).reshape(g),
        "gradcam": r.gradcam[r.num_layers - 1].reshape(g),
        # the logit lens: the model's own norm and head on each patch token of block 1's output
        "logit_lens": m.head(m.fc_norm(m.norm(r.tokens[2, p:]))).detach().softmax(-1).max(-1).values.reshape(g),
    }
    assert set(refs) | {"rope_sim"} == {v.key for v in views.all_views()}  # rope_sim: tests/views/test_rope_views.py
    for key, ref in refs.items():
        session.set_options(view=key)
        np.testing.assert_allclose(session.current_map(), ref.numpy(), rtol=1e-5, atol=1e-7, err_msg=key)


def test_maps_are_cached_per_options(session, monkeypatch):
    import vitviz.analysis as A_mod

    calls = []
    real = A_mod.cls_attention
    monkeypatch.setattr(A_mod, "cls_attention", lambda *a, **k: calls.append(a[1:3]) or real(*a, **k))
    session.set_options(layer=0, head="mean")
    session.current_map()
    session.set_options(layer=1)
    session.current_map()
    session.set_options(layer=0, cmap="viridis", opacity=0.2)  # display options do not invalidate maps
    session.current_map()
    assert calls == [(0, "mean"), (1, "mean")]


def test_patch_geometry_round_trip(session):
    r = session.result
    gh, gw = r.grid
    for idx in range(gh * gw):
        x, y, w, h = session.patch_rect(idx)
        assert session.image_to_patch(x + w / 2, y + h / 2) == divmod(idx, gw)
        info = session.hover(x + w / 2, y + h / 2)
        assert info.token == 1 + idx
        assert info.value == pytest.approx(float(session.current_map()[idx // gw, idx % gw]))
    assert session.image_to_patch(0.5, 35) is None  # left margin of the wide image lies outside the crop
    assert session.image_to_patch(-1, 5) is None


def test_captions_and_export(session):
    session.set_options(view="rollout", head_fusion="max", discard_ratio=0.5)
    cap = session.caption()
    assert "Attention rollout" in cap and "max fusion" in cap and "x.png" in cap and "tiny test ViT" in cap
    session.set_options(colorbar=False, caption=False)
    out = render_view(session)
    assert out.shape == (70, 110, 3) and out.dtype == np.uint8
    grid = render_heads(session)
    assert grid.ndim == 3 and grid.shape[0] > 70


def test_step_and_add_images():
    s = Session()
    assert s.step(1) is None
    s.add_images(["a", "b", "c"])
    s.index = 2
    assert s.step(1) == "a" and s.step(-1) == "b"
    assert s.add_images(["b"]) == 2 and s.images == ["a", "c", "b"]


def test_whole_attention_maps_and_plots_are_computed_once_per_result(session, monkeypatch):
    """Rollout, gradient rollout, relevance, distances and entropies: computed by the public analysis functions when
    first asked for (exactly their values), then served from the cache; other options compute anew."""
    import vitviz.analysis as A_mod

    r = session.result
    assert not hasattr(r, "analyses")
    g, p = r.grid, r.num_prefix_tokens
    refs = {
        "rollout": A.attention_rollout(r.attentions, grid=g, num_prefix_tokens=p),
        "grad_rollout": A.gradient_rollout(r.attentions, r.attention_grads, grid=g, num_prefix_tokens=p),
        "relevance": A.relevance(r.attentions, r.attention_grads, grid=g, num_prefix_tokens=p),
    }
    mad = A.mean_attention_distance(r.attentions, grid=g, patch_size=r.patch_size, num_prefix_tokens=p)
    ent = A.attention_entropy(r.attentions)
    calls = []
    names = ("attention_rollout", "gradient_rollout", "relevance", "mean_attention_distance", "attention_entropy")
    for name in names:
        real = getattr(A_mod, name)
        monkeypatch.setattr(A_mod, name, lambda *a, _n=name, _f=real, **k: calls.append(_n) or _f(*a, **k))
    for want in (list(names), []):  # the second round comes from the cache
        calls.clear()
        for view, ref in refs.items():
            session.set_options(view=view)
            np.testing.assert_array_equal(session.current_map(), ref.numpy())
        np.testing.assert_array_equal(session.mean_distances(), mad.numpy())
        np.testing.assert_array_equal(session.entropies(), ent.numpy())
        assert calls == want
    session.set_options(view="rollout", discard_ratio=0.5)
    m = session.current_map()
    assert calls == ["attention_rollout"]
    np.testing.assert_allclose(m, A.attention_rollout(r.attentions, grid=r.grid, discard_ratio=0.5).numpy(),
                               rtol=1e-6)

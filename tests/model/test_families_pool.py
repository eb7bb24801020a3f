"""A model without a [CLS] token that pools with an attention head (SigLIP's "MAP"): the head's attention row is
captured (with its gradient) and the [CLS]-based analyses and views read it instead of the [CLS] row, checked
against brute-force products; feature models (no classifier) say why the gradient views are unavailable."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from family_helpers import rel_err
from PIL import Image

from vitviz import analysis as A
from vitviz.capture import capture
from vitviz.document import appearance
from vitviz.document.session import Session
from vitviz.model import ViT
from vitviz.model.spec import ModelSpec, family_preprocess
from vitviz.pipeline import run_inference


def _siglip(num_classes: int = 0) -> ViT:
    torch.manual_seed(0)
    m = ViT(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=2, num_classes=num_classes,
            class_token=False, global_pool="map", act_layer="gelu_tanh").eval()
    with torch.no_grad():
        for b in m.blocks:
            b.attn.qkv.weight.mul_(20.0)
        m.attn_pool.q.weight.mul_(20.0)
    m.spec = ModelSpec(config=m.config, preprocess=family_preprocess("siglip", (32, 32)), name="siglip test")
    return m


def _brute(attn, row, grads=None, row_grads=None, *, relevance=False, start=0):
    """float64 loops: the pooling row times each layer's matrix, last layer first."""
    a = attn.double()
    L, H, N, _ = a.shape
    if relevance:
        v = (row.double() * row_grads.double()).clamp(min=0).mean(0)
    else:
        v = row.double().mean(0)
    for l in range(L - 1, start - 1, -1):
        if relevance:
            M = (a[l] * grads[l].double()).clamp(min=0).mean(0)
            v = v + v @ M
        else:
            M = a[l].mean(0) + torch.eye(N, dtype=torch.float64)
            M = M / M.sum(-1, keepdim=True)
            v = v @ M
    return v


def test_pool_row_rollout_and_relevance_against_brute_force():
    m = _siglip(num_classes=4)
    x = torch.randn(1, 3, 32, 32)
    cap = capture(m, x, target=2).image(0)
    assert cap.pool_attention.shape == (2, 16) and torch.allclose(cap.pool_attention.sum(-1), torch.ones(2))
    for s in (0, 1):
        got = A.attention_rollout(cap.attentions, grid=(4, 4), num_prefix_tokens=0, start_layer=s,
                                  query_row=cap.pool_attention)
        assert rel_err(got.reshape(-1), _brute(cap.attentions, cap.pool_attention, start=s)) <= 1e-5
        got = A.relevance(cap.attentions, cap.attention_grads, grid=(4, 4), num_prefix_tokens=0, start_layer=s,
                          query_row=cap.pool_attention, query_grads=cap.pool_attention_grad)
        want = _brute(cap.attentions, cap.pool_attention, cap.attention_grads, cap.pool_attention_grad,
                      relevance=True, start=s)
        assert rel_err(got.reshape(-1), want) <= 1e-5
    g = A.gradient_rollout(cap.attentions, cap.attention_grads, grid=(4, 4), num_prefix_tokens=0,
                           query_row=cap.pool_attention, query_grads=cap.pool_attention_grad)
    assert g.shape == (4, 4) and torch.isfinite(g).all()
    with pytest.raises(ValueError, match="needs a \\[CLS\\] token"):
        A.attention_rollout(cap.attentions, grid=(4, 4), num_prefix_tokens=0)


def test_pool_attention_gradient_is_the_derivative():
    """The captured pool-row gradient is d(target logit)/d(row): perturbing the row's effect by finite differences."""
    m = _siglip(num_classes=3).double()
    x = torch.randn(1, 3, 32, 32, dtype=torch.float64)
    cap = capture(m, x, target=1, store_dtype=torch.float64)
    pool = m.attn_pool
    feats = m.forward_features(x).detach()
    B, N, C = feats.shape
    k, v = pool.kv(feats).reshape(B, N, 2, pool.num_heads, pool.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    attn = cap.pool_attention.clone().requires_grad_(True)  # [1, H, N]

    def logit(a):
        y = (a[:, :, None] @ v).transpose(1, 2).reshape(B, 1, C)
        y = pool.proj(y)
        y = y + pool.mlp(pool.norm(y))
        return m.head(m.fc_norm(y[:, 0]))[0, 1]

    assert rel_err(logit(attn), cap.logits[0, 1]) <= 1e-6  # the capture stores logits in float32
    (g,) = torch.autograd.grad(logit(attn), attn)
    assert rel_err(cap.pool_attention_grads, g) <= 1e-9


def test_siglip_views_read_the_pooling_row():
    m = _siglip(num_classes=0)
    s = Session()
    s.set_result(run_inference(m, Image.fromarray((np.random.default_rng(0).random((40, 40, 3)) * 255)
                                                  .astype(np.uint8))))
    r = s.result
    assert r.num_prefix_tokens == 0 and r.pool_attention is not None and r.attention_grads is None
    assert r.num_classes == 0 and r.top_k(5) == []  # features are not class scores: no predictions
    s.set_options(view="cls", head="mean")
    want = r.pool_attention.mean(0).reshape(4, 4).numpy()
    np.testing.assert_allclose(s.current_map(), want, rtol=1e-6)
    s.set_options(query=5)  # the pooling row does not follow the selected patch
    np.testing.assert_allclose(s.current_map(), want, rtol=1e-6)
    assert "pooling head" in s.caption()
    # the heads thumbnails show the pooling row per head too, and the selected-patch box means nothing here
    assert appearance.reads_pool_row(s.result, s.view) and not appearance.shows_query(s.result, s.view)
    np.testing.assert_allclose(s.head_maps(), r.pool_attention.reshape(-1, 4, 4).numpy(), rtol=1e-6)
    s.set_options(view="query")
    assert not appearance.reads_pool_row(s.result, s.view) and appearance.shows_query(s.result, s.view)
    assert not np.allclose(s.head_maps(), r.pool_attention.reshape(-1, 4, 4).numpy())
    s.set_options(view="cls")
    from vitviz import views

    cap = views.get("cls").caption(r, s.options)
    assert "no [CLS] token" in cap and "pooling head" in cap
    s.set_options(view="rollout")
    roll = s.current_map()
    assert roll is not None and np.isclose(roll.sum(), 1.0, atol=1e-5)
    assert "pooling head's query as the [CLS] row" in views.get("rollout").caption(r, s.options)
    s.set_options(view="relevance")
    assert s.current_map() is None and "no classifier" in s.unavailable_reason()
    assert "DINOv2" in s.unavailable_reason()  # says which models these are


def test_dino_like_feature_model_forward_views_work():
    """A DINO-like model (a [CLS] token, no classifier): forward views work, gradient views say why not."""
    m = ViT(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=0).eval()
    m.spec = ModelSpec(config=m.config, preprocess=family_preprocess("dino", (32, 32)), name="dino test")
    s = Session()
    s.set_result(run_inference(m, Image.new("RGB", (32, 32), (90, 30, 200))))
    for v in ("cls", "rollout", "query", "token_norm"):
        s.set_options(view=v)
        assert s.current_map() is not None, v
    for v in ("relevance", "grad_rollout"):
        s.set_options(view=v)
        assert s.current_map() is None
        assert "has no classifier: its gradient views explain a similarity target" in s.unavailable_reason()

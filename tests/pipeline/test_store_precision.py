"""Results keep every layer in the model's precision (bfloat16 / float16 for a model run in it): nothing is lost (the
model computed those values in that precision), half the memory of float32 is held, and every view, statistic and
panel equals what the same values stored in float32 give (the analyses promote exactly what they read)."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from family_helpers import families
from PIL import Image

from vitviz import analysis as A
from vitviz import views
from vitviz.capture import capture
from vitviz.document import appearance
from vitviz.document.session import Session
from vitviz.model import create_model
from vitviz.pipeline import Pipeline

FAMILIES = families("cls", "map", "registers")


def _model(family):
    torch.manual_seed(1)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4,
                     num_classes=5, **FAMILIES[family])
    with torch.no_grad():  # non-trivial weights everywhere, peaky attention
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.2)
        for b in m.blocks:
            b.attn.qkv.weight.mul_(6.0)
    return m.eval()


def _photo(seed=0, size=40):
    rng = np.random.default_rng(seed)
    return Image.fromarray((rng.random((size, size, 3)) * 255).astype(np.uint8))


def _as_float32(r):
    """The same result with every stored tensor promoted to float32 (what the window stored before)."""
    c = r.capture

    def f(t):
        return None if t is None else t.float()

    return replace(r, capture=replace(c, attentions=f(c.attentions), tokens=f(c.tokens),
                                      attention_grads=f(c.attention_grads), pool_attention=f(c.pool_attention),
                                      pool_attention_grad=f(c.pool_attention_grad)))


@pytest.mark.parametrize("precision,dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16),
                                             ("fp32", torch.float32)])
def test_results_keep_the_models_precision_and_half_the_bytes(precision, dtype):
    p = Pipeline(_model("cls"), precision=precision)
    assert p.store_dtype == dtype
    r = p.run(_photo())
    for t in (r.attentions, r.tokens, r.attention_grads):
        assert t.dtype == dtype
    assert r.logits.dtype == torch.float32 and r.legrad["mean"].dtype == torch.float32
    assert r.gradcam.dtype == torch.float32
    r32 = _as_float32(r)
    ratio = r.attentions.element_size() / r32.attentions.element_size()
    assert ratio == (1.0 if dtype == torch.float32 else 0.5)


def test_auto_stores_what_auto_chose():
    p = Pipeline(_model("cls"), precision="auto")
    assert p.store_dtype == {"bf16": torch.bfloat16, "fp32": torch.float32}[p.precision]
    assert p.run(_photo()).attentions.dtype == p.store_dtype


def test_storing_in_the_models_precision_loses_nothing():
    """A bf16 model's attentions, tokens and gradients stored in bf16 are exactly its float32-stored values."""
    m = _model("registers").to(torch.bfloat16)
    x = torch.randn(2, 3, 32, 32)
    kw = dict(target=1, legrad=("mean", "model"), gradcam=True)
    low = capture(m, x, store_dtype=torch.bfloat16, **kw)
    high = capture(m, x, store_dtype=torch.float32, **kw)
    for a, b in ((low.attentions, high.attentions), (low.tokens, high.tokens),
                 (low.attention_grads, high.attention_grads)):
        assert a.dtype == torch.bfloat16 and b.dtype == torch.float32
        assert torch.equal(a.float(), b)
    assert sorted(high.legrad) == ["mean", "model"]
    for k in high.legrad:
        assert torch.equal(low.legrad[k], high.legrad[k])
    assert torch.equal(low.gradcam, high.gradcam)


def _maps(session):
    """Every view's map (and rgb), the head panels and the plots of the session's result."""
    out = {}
    r = session.result
    for v in views.all_views():
        if v.unavailable_at(r, session.options) is not None:
            continue
        for layer in range(r.num_layers):
            for head in (0, "mean", "max"):
                session.set_options(view=v.key, layer=layer, head=head, query=3)
                out[(v.key, layer, head)] = session.current_map()
                if v.rgb:
                    out[(v.key, layer, head, "rgb")] = session.rgb_map()
    session.set_options(view="cls", layer=1)
    out["heads"] = session.head_maps()
    out["all_heads"] = session.all_head_maps()
    out["distances"] = session.mean_distances()
    out["entropies"] = session.entropies()
    out["register_share"] = appearance.register_share(session.result, session.cache, layer=1)
    return out


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_every_view_equals_the_float32_stored_values(family, precision):
    r = Pipeline(_model(family), precision=precision).run(_photo(), source="x.png")
    assert r.attentions.dtype != torch.float32
    low, high = Session(), Session()
    low.set_result(r)
    high.set_result(_as_float32(r))
    got, want = _maps(low), _maps(high)
    assert got.keys() == want.keys() and len(got) > 20
    for k in want:
        if want[k] is None:
            assert got[k] is None, k
            continue
        g, w = np.asarray(got[k]), np.asarray(want[k])
        assert g.dtype == w.dtype, k
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7, err_msg=str(k))


HEADS = ["mean", "max", "min"]


def _stack(dtype, B=2, L=3, H=4, N=1 + 2 + 9):
    torch.manual_seed(3)
    a = torch.softmax(torch.randn(B, L, H, N, N) * 3, dim=-1).to(dtype)
    g = (torch.randn(B, L, H, N, N) * 0.1).to(dtype)
    return a, g


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_analyses_promote_reduced_precision_exactly(dtype):
    a, g = _stack(dtype)
    a32, g32 = a.float(), g.float()
    kw = dict(grid=(3, 3), num_prefix_tokens=3)
    row, row_g = a[:, -1, :, 0], g[:, -1, :, 0]
    cases = {
        "query": lambda a, g: A.query_attention(a, 1, "max", 5, **kw),
        "cls": lambda a, g: A.cls_attention(a, 2, 1, **kw),
        "rollout": lambda a, g: A.attention_rollout(a, **kw, head_fusion="min", discard_ratio=0.3, start_layer=1),
        "rollout_pool": lambda a, g: A.attention_rollout(a, **kw, query_row=row.to(a.dtype)),
        "transitions": lambda a, g: A.rollout_transitions(a, num_prefix_tokens=3, discard_ratio=0.5),
        "grad_rollout": lambda a, g: A.gradient_rollout(a, g, **kw, clamp="before_mean"),
        "grad_rollout_pool": lambda a, g: A.gradient_rollout(a, g, **kw, query_row=row.to(a.dtype),
                                                             query_grads=row_g.to(a.dtype)),
        "relevance": lambda a, g: A.relevance(a, g, **kw, start_layer=1),
        "relevance_pool": lambda a, g: A.relevance(a, g, **kw, query_row=row.to(a.dtype),
                                                   query_grads=row_g.to(a.dtype)),
        "distance": lambda a, g: A.mean_attention_distance(a, grid=(3, 3), patch_size=8, num_prefix_tokens=3),
        "entropy": lambda a, g: A.attention_entropy(a),
        "registers_cls": lambda a, g: A.register_attention_share(a, num_registers=2, num_prefix_tokens=3),
        "registers_patches": lambda a, g: A.register_attention_share(a, num_registers=2, num_prefix_tokens=3,
                                                                     query="patches", per_head=True),
        "artefacts": lambda a, g: A.artefact_attention_share(a, torch.arange(9) % 4 == 0, num_prefix_tokens=3,
                                                             query=7),
        "exclude": lambda a, g: A.exclude_tokens(a, torch.arange(9) % 4 == 0, num_prefix_tokens=3, grads=g)[0],
    }
    for head in HEADS:
        cases[f"fuse_{head}"] = lambda a, g, head=head: A.attention_rollout(a, **kw, head_fusion=head)
    for name, fn in cases.items():
        low, high = fn(a, g), fn(a32, g32)
        assert low.dtype == torch.float32 == high.dtype, name
        torch.testing.assert_close(low, high, rtol=1e-6, atol=1e-7, msg=name)
    # a float32 stack with reduced-precision gradients (and the other way round) is computed in float32 too
    torch.testing.assert_close(A.relevance(a32, g, **kw), A.relevance(a32, g32, **kw), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(A.relevance(a, g32, **kw), A.relevance(a32, g32, **kw), rtol=1e-6, atol=1e-7)
    # float64 stays float64
    assert A.attention_rollout(a.double(), **kw).dtype == torch.float64
    assert A.relevance(a.double(), g, **kw).dtype == torch.float64

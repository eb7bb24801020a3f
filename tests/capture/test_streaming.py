"""Streamed passes (vitviz.capture.streaming), the layer-by-layer analyses (vitviz.analysis.layerwise) and the maps
made from them (vitviz.document.streamed) against the stored path: vitviz.capture.capture and the vitviz.analysis
functions on every layer's stored attention, on tiny random models of each family ([CLS] token, mean pooling,
attention-pool "map" head, registers, distilled, BEiT's relative position bias, a feature model without head).

The pass itself (attention, gradients, tokens, logits, LeGrad, GradCAM, scores) is the stored capture's bit for bit,
whether the backward recomputes each block or keeps the forward's graph; the maps equal the stored path's to float
round-off (bit for bit where the stored path computes on the same shapes).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from family_helpers import FAMILY_OPTIONS
from PIL import Image

from vitviz import analysis as A
from vitviz import views
from vitviz.analysis.layerwise import LayerRows, LayerStatistics, LayerTokens, ReverseProduct
from vitviz.capture import CaptureError, capture
from vitviz.capture.streaming import FILL, fit_batch, graph_fits, is_out_of_memory, pass_bytes, stream_pass, streamable
from vitviz.capture.targets import CallableTarget, ClassTarget
from vitviz.document import appearance
from vitviz.document.session import Session
from vitviz.document.streamed import NotStreamable, StreamedSession, plan_streaming, shape_of_result, stream_images
from vitviz.model import create_model
from vitviz.pipeline import Pipeline
from vitviz.views.options import ViewOptions
from vitviz.views.stream_plan import Product

FAMILIES = FAMILY_OPTIONS


def _model(family: str, depth: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    kw = dict(img_size=32, patch_size=8, embed_dim=32, depth=depth, num_heads=4, num_classes=5)
    kw.update(FAMILIES[family])
    m = create_model("vit_tiny_patch16_224", **kw).eval()
    with torch.no_grad():  # peaky attention, so that maps differ between layers and heads
        for b in m.blocks:
            b.attn.qkv.weight.mul_(10.0)
    return m


def _photos(n: int = 3, size: tuple[int, int] = (40, 48)) -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray((rng.random((*size, 3)) * 255).astype(np.uint8)) for _ in range(n)]


class Recorder:
    """Every call a streamed pass makes, in order."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.attn: dict[int, torch.Tensor] = {}
        self.grads: dict[int, torch.Tensor] = {}
        self.tokens: dict[int, torch.Tensor] = {}
        self.pool = self.pool_grad = None

    def on_tokens(self, i, z):
        self.calls.append(("tokens", i))
        self.tokens[i] = z.clone()

    def on_attention(self, l, a):
        self.calls.append(("attention", l))
        self.attn[l] = a.clone()

    def on_pool(self, p):
        self.calls.append(("pool",))
        self.pool = p.clone()

    def on_pool_grad(self, p, g):
        self.calls.append(("pool_grad",))
        self.pool_grad = g.clone()

    def on_attention_grad(self, l, a, g):
        self.calls.append(("attention_grad", l))
        assert torch.equal(a, self.attn[l])  # the recomputed attention is the forward's
        self.grads[l] = g.clone()


# ----------------------------------------------------------------------------------------------- the pass
@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "features"])
@pytest.mark.parametrize("keep_graph", [False, True])
def test_pass_equals_the_stored_capture_bit_for_bit(family, keep_graph):
    m = _model(family)
    x = torch.randn(2, 3, 32, 40)
    stored = capture(m, x, target="top", legrad=("mean", "model"), gradcam=True)
    rec = Recorder()
    sp = stream_pass(m, x, [rec], target="top", legrad=("mean", "model"), gradcam=True, keep_graph=keep_graph)
    L = len(m.blocks)
    assert sp.recomputed is (not keep_graph)
    assert torch.equal(torch.stack([rec.attn[l] for l in range(L)]), stored.attentions)
    assert torch.equal(torch.stack([rec.grads[l] for l in range(L)]), stored.attention_grads)
    assert torch.equal(torch.stack([rec.tokens[i] for i in range(L + 1)]), stored.tokens)
    assert torch.equal(sp.logits, stored.logits) and torch.equal(sp.targets, stored.targets)
    assert torch.equal(sp.scores, stored.scores)
    for k in ("mean", "model"):
        assert torch.equal(sp.legrad[k], stored.legrad[k])
    assert torch.equal(sp.gradcam, stored.gradcam)
    if stored.pool_attention is not None:
        assert torch.equal(sp.pool_attention, stored.pool_attention)
        assert torch.equal(sp.pool_attention_grads, stored.pool_attention_grads)
        assert torch.equal(rec.pool, stored.pool_attention) and torch.equal(rec.pool_grad, stored.pool_attention_grads)
    # forward in layer order, then the backward from the last layer down (the pooling head's gradient first)
    fwd = [c for c in rec.calls if c[0] in ("tokens", "attention")]
    assert fwd == [("tokens", 0)] + [c for l in range(L) for c in (("attention", l), ("tokens", l + 1))]
    bwd = [c for c in rec.calls if c[0] in ("pool_grad", "attention_grad")]
    assert bwd == ([("pool_grad",)] if stored.pool_attention is not None else []) + [
        ("attention_grad", l) for l in range(L - 1, -1, -1)]


@pytest.mark.parametrize("target", [3, [1, 4], ClassTarget(2), CallableTarget(lambda out: out[0] - out[1], "diff")])
def test_pass_takes_every_target_the_capture_takes(target):
    m = _model("cls")
    x = torch.randn(2, 3, 32, 32)
    stored = capture(m, x, target=target)
    rec = Recorder()
    sp = stream_pass(m, x, [rec], target=target)
    assert torch.equal(torch.stack([rec.grads[l] for l in range(3)]), stored.attention_grads)
    assert torch.equal(sp.scores, stored.scores)
    assert (sp.targets is None) == (stored.targets is None)
    if sp.targets is not None:
        assert torch.equal(sp.targets, stored.targets)


def test_forward_only_pass_and_feature_models():
    m = _model("features")
    x = torch.randn(1, 3, 32, 32)
    stored = capture(m, x, target="top")  # a feature model's top class is no target: forward only
    rec = Recorder()
    sp = stream_pass(m, x, [rec], target="top")
    assert sp.target is None and sp.targets is None and not rec.grads and stored.attention_grads is None
    assert torch.equal(torch.stack([rec.attn[l] for l in range(3)]), stored.attentions)
    assert torch.equal(sp.logits, stored.logits)


def test_the_model_is_left_as_it_was_also_when_the_pass_fails():
    m = _model("cls")
    hooks = [len(b.attn.attn_map._forward_hooks) for b in m.blocks]
    with pytest.raises(ValueError, match="out of range"):
        stream_pass(m, torch.randn(1, 3, 32, 32), target=7)
    with pytest.raises(ZeroDivisionError):
        stream_pass(m, torch.randn(1, 3, 32, 32), [type("Bad", (), {"on_attention": lambda s, l, a: 1 / 0})()])
    assert m.fused_attention and [len(b.attn.attn_map._forward_hooks) for b in m.blocks] == hooks
    assert all(p.grad is None for p in m.parameters())


def test_models_that_cannot_be_streamed_are_named():
    import torchvision

    tv = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8,
                                              mlp_dim=8)
    assert "not vitviz's own ViT" in streamable(tv)
    with pytest.raises(CaptureError, match="cannot stream"):
        stream_pass(tv, torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match="one image"):
        stream_pass(_model("cls"), torch.randn(3, 32, 32))


# ----------------------------------------------------------------------------------------------- the analyses
def _stack(m, x, target="top"):
    cap = capture(m, x, target=target)
    a = cap.attentions.transpose(0, 1)
    g = None if cap.attention_grads is None else cap.attention_grads.transpose(0, 1)
    return cap, a, g


@pytest.mark.parametrize("family", ["cls", "map", "registers"])
def test_reverse_products_equal_the_whole_stack_analyses(family):
    m = _model(family, depth=4)
    x = torch.randn(2, 3, 32, 32)
    cap, a, g = _stack(m, x)
    p = cap.num_prefix_tokens
    pooled = cap.pool_attention is not None and p == 0
    kw = {"query_row": cap.pool_attention} if pooled else {}
    gkw = {**kw, "query_grads": cap.pool_attention_grads} if pooled else {}
    cases = [("rollout", dict(head_fusion="max", discard_ratio=0.3), A.attention_rollout,
              dict(head_fusion="max", discard_ratio=0.3), (0, 2, 3)),
             ("rollout", {}, A.attention_rollout, {}, (0, 1)),
             ("grad_rollout", dict(discard_ratio=0.2, clamp="before_mean"), A.gradient_rollout,
              dict(discard_ratio=0.2, clamp="before_mean"), (0, 2)),
             ("relevance", {}, A.relevance, {}, (0, 1, 3))]
    for kind, own, fn, theirs, starts in cases:
        prods = [ReverseProduct(kind, num_layers=4, num_prefix_tokens=p, starts=starts, pooled=pooled, **own)]
        if kind == "rollout":
            prods.append(ReverseProduct(kind, num_layers=4, num_prefix_tokens=p, starts=starts, pooled=pooled,
                                        from_forward=True, **own))
        for prod in prods:
            sp = stream_pass(m, x, [prod], target="top")
            prod.finish()
            for s in starts:
                args = (a,) if kind == "rollout" else (a, g)
                want = fn(*args, grid=cap.grid, num_prefix_tokens=p, start_layer=s, **(kw if kind == "rollout" else
                                                                                         gkw), **theirs)
                got = prod.rows[s][:, p:].reshape(2, *cap.grid).float()
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7, msg=f"{kind} {own} from {s}")
            assert sp.num_layers == 4


def test_rows_tokens_and_statistics_equal_the_whole_stack_analyses():
    m = _model("registers")
    x = torch.randn(2, 3, 32, 32)
    cap, a, _ = _stack(m, x, None)
    rows, toks = LayerRows({0: [0, 5], 2: [7]}), LayerTokens([0, 3], 3)
    stats = LayerStatistics(3, grid=cap.grid, patch_size=cap.patch_size, num_prefix_tokens=cap.num_prefix_tokens)
    stream_pass(m, x, [rows, toks, stats])
    assert set(rows.rows) == {(0, 0), (0, 5), (2, 7)}
    assert torch.equal(rows.rows[(2, 7)], a[:, 2, :, 7, :])
    assert set(toks.tokens) == {0, 3} and torch.equal(toks.tokens[3], cap.tokens[3])
    torch.testing.assert_close(toks.norms, A.token_norms(cap.tokens.transpose(0, 1)), rtol=0, atol=1e-6)
    dist = A.mean_attention_distance(a, grid=cap.grid, patch_size=cap.patch_size,
                                     num_prefix_tokens=cap.num_prefix_tokens)
    torch.testing.assert_close(stats.distances, dist, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(stats.entropies, A.attention_entropy(a), rtol=1e-6, atol=1e-6)


def test_reverse_product_refuses_what_it_cannot_be():
    with pytest.raises(ValueError, match="gradients"):
        ReverseProduct("relevance", num_layers=2, num_prefix_tokens=1, from_forward=True)
    with pytest.raises(ValueError, match="kind"):
        ReverseProduct("lrp", num_layers=2, num_prefix_tokens=1)


# ----------------------------------------------------------------------------------------------- the maps
def _all_demands(result):
    """Every view at several options: layers, heads, fusions, discards, starts, query patches, poolings."""
    out = []
    for v in views.all_views():
        lo, hi = v.layer_range(result)
        for layer in range(lo, hi + 1):
            for head in ("mean", 1):
                o = ViewOptions(view=v.key, layer=layer, head=head, query=5 if head == 1 else 0,
                                start_layer=max(0, layer), discard_ratio=0.3 if head == 1 else 0.0,
                                head_fusion="max" if head == 1 else "mean",
                                legrad_pooling="model" if head == 1 else "mean", legrad_start=max(0, layer),
                                gradcam_layer=max(0, layer), mask_background=head == 1)
                out.append((v, o))
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_view_of_a_streamed_pass_equals_the_stored_path(family):
    pipe = Pipeline(_model(family))
    photos = _photos(3)
    streamed = stream_images(pipe, photos, sources=["a", "b", "c"], demands=_all_demands)
    stored = pipe.run_batch(photos, sources=["a", "b", "c"], legrad=("mean", "model"))
    for si, sr in zip(streamed, stored):
        assert si.result.attentions.is_meta and si.result.tokens.is_meta  # nothing per layer is kept
        ss, s = StreamedSession(si), Session()
        s.set_result(sr)
        for v, o in _all_demands(sr):
            a, b = ss.map_for(v, o), s.map_for(v, o)
            assert (a is None) == (b is None), (family, v.key, o)
            if a is not None:
                assert a.dtype == np.float32 and a.shape == b.shape
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"{family} {v.key} {o}")
            if v.rgb:
                ss.options = s.options = o
                x, y = ss.rgb_map(), s.rgb_map()
                assert (x is None) == (y is None), (family, v.key)  # (a view the model lacks: no picture on either)
                if x is not None:
                    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
        assert np.array_equal(ss.artefact_grid(), s.artefact_grid())
        assert si.result.top_k(3) == sr.top_k(3) and si.result.target == sr.target


def _one_photo_stored_and_streamed() -> tuple[Session, StreamedSession]:
    """One photo through the stored route and the streamed one (every view's demands), as two sessions."""
    pipe = Pipeline(_model("cls"))
    photo = _photos(1)[0]
    si = stream_images(pipe, [photo], demands=_all_demands)[0]
    s = Session()
    s.set_result(pipe.run_batch([photo], legrad=("mean", "model"))[0])
    return s, StreamedSession(si)


def test_one_image_at_a_time_the_maps_are_the_stored_maps_bit_for_bit():
    s, ss = _one_photo_stored_and_streamed()
    for v, o in _all_demands(s.result):
        a, b = ss.map_for(v, o), s.map_for(v, o)
        assert (a is None and b is None) or np.array_equal(a, b), (v.key, o)
    art, want = ss.artefacts(), s.artefacts()
    assert torch.equal(art.mask, want.mask) and torch.equal(art.score, want.score)


def test_a_streamed_sessions_smooth_map_reads_the_artefact_tokens_of_its_stream():
    """The patches left out of the colour scale (and drawn grey) come from the session's one artefact source
    (:meth:`Session.artefacts`, which a streamed session takes from its stream), also when the smooth map is the first
    thing asked for: the stored tokens of a streamed result are shapes without data."""
    s, ss = _one_photo_stored_and_streamed()
    v, o = next((v, o) for v, o in _all_demands(s.result) if v.key == "token_norm" and o.head == "mean")
    ss.options = s.options = replace(o, interpolation="bilinear", scale_excludes_artefacts=True)
    np.testing.assert_allclose(ss.display_map(), s.display_map(), rtol=1e-5, atol=1e-6)  # asked first
    want = appearance.excluded_grid(s.options, s.artefact_grid)
    got = appearance.excluded_grid(ss.options, ss.artefact_grid)
    assert (got is None and want is None) or np.array_equal(got, want)


def test_statistics_of_a_streamed_pass_equal_the_sessions():
    pipe = Pipeline(_model("map"))
    photos = _photos(2)
    streamed = stream_images(pipe, photos, gradients=False, statistics=True)
    for si, sr in zip(streamed, pipe.run_batch(photos, gradients=False)):
        s = Session()
        s.set_result(sr)
        ss = StreamedSession(si)
        np.testing.assert_allclose(ss.mean_distances(), s.mean_distances(), rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(ss.entropies(), s.entropies(), rtol=1e-6, atol=1e-6)
        assert np.array_equal(ss.artefact_grid(), s.artefact_grid())


def test_legrad_of_a_similarity_target_with_the_neutral_prompts_correction():
    """A feature model explained by a similarity target, LeGrad corrected by a neutral target's maps (SigLIP's
    prompts: the pipeline carries ``legrad_neutral``): the streamed maps are the stored ones."""
    from vitviz.capture.targets import SimilarityTarget

    pipe = Pipeline(_model("features"))
    torch.manual_seed(1)
    target = SimilarityTarget(torch.randn(32), "reference")
    pipe.legrad_neutral = SimilarityTarget(torch.randn(32), "neutral")
    legrad = views.get("legrad")
    options = [ViewOptions(view="legrad", legrad_correction=c, legrad_start=s) for c in (True, False) for s in (0, 2)]
    photos = _photos(2)
    got = stream_images(pipe, photos, target=target, demands=lambda r: [(legrad, o) for o in options])
    want = pipe.run_batch(photos, target=target)
    for si, sr in zip(got, want):
        assert "mean|neutral" in si.result.legrad and "mean|neutral" in sr.legrad
        s = Session()
        s.set_result(sr)
        for o in options:
            np.testing.assert_allclose(si.map(legrad, o), s.map_for(legrad, o), rtol=1e-5, atol=1e-7)
        assert si.result.target_score == pytest.approx(sr.target_score, rel=1e-6)


def test_what_was_not_gathered_or_cannot_be_streamed_is_said():
    pipe = Pipeline(_model("cls"))
    photo = _photos(1)[0]
    cls = views.get("cls")
    si = stream_images(pipe, [photo], demands=lambda r: [(cls, ViewOptions(view="cls", layer=1))])[0]
    assert si.map(cls, ViewOptions(view="cls", layer=1)) is not None
    with pytest.raises(NotStreamable, match="did not gather"):
        si.map(cls, ViewOptions(view="cls", layer=2))
    with pytest.raises(NotStreamable, match="ignore artefact"):
        stream_images(pipe, [photo], demands=lambda r: [(cls, ViewOptions(view="cls", ignore_artefacts=True))])
    with pytest.raises(NotStreamable, match="measure attention distances"):
        StreamedSession(si).mean_distances()
    shape = shape_of_result(pipe, pipe.prepare(photo), gradients=True)
    plan = plan_streaming(shape, [(views.get("rollout"), ViewOptions(start_layer=2)),
                                  (views.get("relevance"), ViewOptions(start_layer=1)),
                                  (views.get("token_norm"), ViewOptions(view="token_norm", layer=-1))])
    rollout = Product("rollout", (("head_fusion", "mean"), ("discard_ratio", 0.0), ("from_forward", False)))
    assert plan.products == {rollout: {2}, Product("relevance"): {1}} and plan.tokens == {0}


def test_streamed_results_follow_the_target_and_the_input_sizes():
    pipe = Pipeline(_model("cls"))
    photos = _photos(2, (40, 48)) + _photos(1, (48, 40))
    rel = views.get("relevance")
    demands = lambda r: [(rel, ViewOptions(view="relevance"))]  # noqa: E731
    for target in (None, 3, [1, 2, 4]):
        got = stream_images(pipe, photos, target=target, demands=demands)
        want = pipe.run_batch(photos, target=target)
        for si, sr in zip(got, want):
            assert si.result.target == sr.target and si.result.grid == sr.grid
            s = Session()
            s.set_result(sr)
            np.testing.assert_allclose(si.map(rel, ViewOptions(view="relevance")),
                                       s.map_for(rel, ViewOptions(view="relevance")), rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------------------------- memory
def test_memory_estimate_grows_with_one_layer_not_with_depth():
    """What a streamed pass holds per layer is a block's input [N, D]; the stored capture holds [H, N, N] and more."""
    grid = (24, 24)
    per_layer = [pass_bytes(create_model("vit_small_patch16_384", depth=d), grid, 1, gradients=True) -
                 pass_bytes(create_model("vit_small_patch16_384", depth=d - 1), grid, 1, gradients=True)
                 for d in (3, 6)]
    N, D, H = 1 + 24 * 24, 384, 6
    assert per_layer[0] == per_layer[1] == N * D * 4  # one block input per layer, nothing of the attention
    one = create_model("vit_small_patch16_384", depth=2)
    assert pass_bytes(one, grid, 1, gradients=True) > H * N * N * 4  # the one layer's attention is counted
    keep = pass_bytes(one, grid, 1, gradients=True, keep_graph=True)
    assert graph_fits(one, grid, 1, available=4 * keep) and not graph_fits(one, grid, 1, available=keep)
    per = pass_bytes(one, grid, 1, gradients=False)
    assert fit_batch(one, grid, 16, gradients=False, available=int(5.5 * per / FILL))[0] == 5
    assert fit_batch(one, grid, 16, gradients=False, available=1)[0] == 1
    assert fit_batch(one, grid, 16, gradients=False, available=10**15)[0] == 16


def test_out_of_memory_errors_are_recognised():
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
                                         "memory: you tried to allocate 123 bytes"))
    assert is_out_of_memory(RuntimeError("could not create a primitive"))  # oneDNN's, under a memory limit
    assert not is_out_of_memory(RuntimeError("shape mismatch")) and not is_out_of_memory(ValueError("out of memory"))
    oom = getattr(torch, "OutOfMemoryError", None)
    if oom is not None:
        assert is_out_of_memory(oom("x"))


def test_stream_images_halves_the_batch_on_out_of_memory(monkeypatch):
    import vitviz.document.streamed.batches as batches

    pipe = Pipeline(_model("cls"))
    photos = _photos(5)
    real, sizes, notes = batches.stream_pass, [], []

    def limited(model, x, *a, **kw):
        sizes.append(int(x.shape[0]))
        if x.shape[0] > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return real(model, x, *a, **kw)

    monkeypatch.setattr(batches, "stream_pass", limited)
    sizer = batches.BatchSizer(5, note=notes.append)
    cls = views.get("cls")
    got = stream_images(pipe, photos, demands=lambda r: [(cls, ViewOptions())], sizer=sizer)
    assert sizes == [5, 2, 2, 1] and sizer.limit == 2 and len(notes) == 1 and "2 at a time" in notes[0]
    want = pipe.run_batch(photos)
    for si, sr in zip(got, want):
        s = Session()
        s.set_result(sr)
        np.testing.assert_allclose(si.map(cls, ViewOptions()), s.map_for(cls, ViewOptions()), rtol=1e-5)

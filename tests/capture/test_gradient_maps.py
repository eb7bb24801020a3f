"""LeGrad and GradCAM taken during a capture equal explicit implementations: for LeGrad, one fresh forward per layer
and one ``torch.autograd.grad`` of that layer's score written out by hand (the official formula); for GradCAM, a
direct computation on hooks of the chosen block's ``norm1`` (pytorch-grad-cam's rule), on tiny random models of each
family: [CLS] token, mean pooling, attention-pool head, registers, distillation token, DINOv3 (RoPE)."""

import pytest
import torch
import torch.nn.functional as F
from family_helpers import families

from vitviz import analysis as A
from vitviz.capture import capture
from vitviz.capture.targets import CallableTarget, SimilarityTarget
from vitviz.model import create_model

FAMILIES = families("cls", "avg", "map", "registers", "distilled", "dinov3")


def _model(family, num_classes=6):
    torch.manual_seed(1)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=24, depth=3, num_heads=3,
                     num_classes=num_classes, **FAMILIES[family])
    with torch.no_grad():  # non-trivial weights everywhere (zero-initialised heads and pools would hide mistakes)
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return m.eval()


def _layer_pass(model, x, layer):
    """A fresh forward with the explicit attention path: (live attention of ``layer``, live output of ``layer``,
    live attention-pool probabilities seen afterwards)."""
    seen = {}
    mods = [b.attn for b in model.blocks] + ([model.attn_pool] if model.attn_pool is not None else [])
    for m in mods:
        m.fused = False
    hooks = [model.blocks[layer].attn.attn_map.register_forward_hook(lambda m, a, o: seen.__setitem__("attn", o)),
             model.blocks[layer].register_forward_hook(lambda m, a, o: seen.__setitem__("tokens", o))]
    try:
        with torch.enable_grad():
            model(x.requires_grad_(True))
    finally:
        for h in hooks:
            h.remove()
        for m in mods:
            m.fused = True
    return seen["attn"], seen["tokens"]


def _legrad_by_hand(model, x, score, start):
    """The official formula, layer by layer: s_l = score(head(pool(tokens_l))); ReLU(d s_l / d A_l), mean over heads
    and query rows, prefix columns dropped (the pool's own attention for an attention-pool model); summed."""
    P = model.num_prefix_tokens
    total = 0
    for layer in range(start, len(model.blocks)):
        attn, tokens = _layer_pass(model, x.clone(), layer)
        if model.attn_pool is not None:
            pool_probs = []
            h = model.attn_pool.attn_map.register_forward_hook(lambda m, a, o, seen=pool_probs: seen.append(o))
            model.attn_pool.fused = False
            try:
                pooled = model.attn_pool(tokens)  # LeGrad's SigLIP rule: the pool on the layer's tokens
            finally:
                h.remove()
                model.attn_pool.fused = True
            wrt = pool_probs[0]
        else:
            mean = tokens.mean(dim=1)  # every token, [CLS] and registers included
            if isinstance(model.norm, torch.nn.LayerNorm):
                mean = F.layer_norm(mean, mean.shape[-1:], model.norm.weight, model.norm.bias, model.norm.eps)
            pooled = mean
            wrt = attn
        if isinstance(model.fc_norm, torch.nn.LayerNorm):
            pooled = F.layer_norm(pooled, pooled.shape[-1:], model.fc_norm.weight, model.fc_norm.bias,
                                  model.fc_norm.eps)
        out = pooled if isinstance(model.head, torch.nn.Identity) else F.linear(pooled, model.head.weight,
                                                                                model.head.bias)
        if isinstance(model.head_dist, torch.nn.Linear):
            out = (out + F.linear(pooled, model.head_dist.weight, model.head_dist.bias)) / 2
        (g,) = torch.autograd.grad(score(out, pooled).sum(), [wrt])
        total = total + g.clamp(min=0).mean(dim=1).mean(dim=1)[:, P:]
    return total


@pytest.mark.parametrize("family", list(FAMILIES))
def test_legrad_equals_the_official_formula_layer_by_layer(family):
    model = _model(family)
    x = torch.randn(2, 3, 32, 32)
    cap = capture(model, x, target=4, legrad=("mean",))
    L = len(model.blocks)
    for start in (0, L - 2):
        ref = _legrad_by_hand(model, x, lambda out, emb: out[:, 4], start)
        for b in range(2):
            got = A.legrad_map(cap.legrad["mean"][:, b], start, cap.grid)
            torch.testing.assert_close(got, ref[b].reshape(cap.grid), rtol=1e-4, atol=1e-8)
    assert float(cap.legrad["mean"].abs().sum()) > 0


def test_legrad_of_a_similarity_target_on_a_feature_model():
    model = _model("cls", num_classes=0)  # a DINO-style feature model: the output is the pooled embedding
    x = torch.randn(1, 3, 32, 32)
    v = torch.randn(24)
    cap = capture(model, x, target=SimilarityTarget(v, "vector"), legrad=("mean",))
    ref = _legrad_by_hand(model, x, lambda out, emb: F.cosine_similarity(out, v[None], dim=-1), 1)
    torch.testing.assert_close(A.legrad_map(cap.legrad["mean"][:, 0], -2, cap.grid), ref[0].reshape(cap.grid),
                               rtol=1e-4, atol=1e-8)


def test_legrad_with_the_models_own_pooling_ends_on_the_models_own_score():
    """With the model's own pooling, the last layer's score is the model's output: its map is ReLU(d logit / d A_L)
    averaged, the same gradient the relevance view reads."""
    model = _model("cls")
    x = torch.randn(1, 3, 32, 32)
    cap = capture(model, x, target=2, legrad=("model",))
    g = cap.attention_grads[-1, 0].clamp(min=0).mean(0).mean(0)[1:]
    torch.testing.assert_close(cap.legrad["model"][-1, 0], g, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("family", ["cls", "registers", "avg"])
def test_gradcam_equals_a_direct_computation_on_norm1(family):
    model = _model(family)
    x = torch.randn(2, 3, 32, 32)
    fn = CallableTarget(lambda out: out[1] - out[3], "logit 1 minus logit 3")
    cap = capture(model, x, target=fn, gradcam=True)
    P = model.num_prefix_tokens
    for layer in (len(model.blocks) - 1, 0):
        acts = {}
        h = model.blocks[layer].norm1.register_forward_hook(lambda m, a, o, seen=acts: seen.__setitem__("a", o))
        for blk in model.blocks:
            blk.attn.fused = False
        try:
            with torch.enable_grad():
                out = model(x.clone().requires_grad_(True))
        finally:
            h.remove()
            for blk in model.blocks:
                blk.attn.fused = True
        (g,) = torch.autograd.grad((out[:, 1] - out[:, 3]).sum(), [acts["a"]])
        a = acts["a"].detach()[:, P:]  # pytorch-grad-cam's ViT reshape_transform drops the prefix tokens
        w = g[:, P:].mean(dim=1)  # weights: the gradient averaged over the spatial positions
        ref = torch.relu((a * w[:, None]).sum(-1))
        for b in range(2):
            torch.testing.assert_close(A.gradcam_map(cap.gradcam[:, b], layer, cap.grid), ref[b].reshape(cap.grid),
                                       rtol=1e-4, atol=1e-7)


def test_legrad_and_gradcam_need_a_target():
    model = _model("cls")
    cap = capture(model, torch.randn(1, 3, 32, 32), legrad=("mean",), gradcam=True)
    assert cap.legrad == {} and cap.gradcam is None and cap.attention_grads is None
    with pytest.raises(ValueError, match="legrad poolings"):
        capture(model, torch.randn(1, 3, 32, 32), target=0, legrad=("cls",))

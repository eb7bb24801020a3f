"""Prompts on a CLIP / SigLIP image tower: the zero-shot head's scores are the family's own, LeGrad on a prompt is
the official formula (CLIP: ln_post(mean of the layer's tokens) @ proj, normalised, against the text embedding), and
SigLIP's neutral-prompt correction follows the official rule."""

import pytest
import torch
import torch.nn.functional as F

from vitviz import analysis as A
from vitviz.capture import capture
from vitviz.capture.targets import ClassTarget, SimilarityTarget
from vitviz.model import create_model
from vitviz.model.zero_shot import with_prompts
from vitviz.pipeline import Pipeline


def _clip_like(siglip=False):
    torch.manual_seed(5)
    if siglip:
        m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=24, depth=3, num_heads=3,
                         num_classes=0, class_token=False, global_pool="map")
    else:  # CLIP: [CLS] pooled, ln_post as the final norm, a bias-free projection to 16 dims as the head
        m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=24, depth=3, num_heads=3,
                         num_classes=16, head_bias=False, pre_norm=True)
        m.spec = m.spec.replace(head_kind="projection")
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return m.eval()


@pytest.mark.parametrize("siglip", [False, True])
def test_prompt_scores_are_the_familys_own(siglip):
    tower = _clip_like(siglip)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        image = tower(x)
    text = torch.randn(3, image.shape[1])
    scale, bias = (10.0, -4.0) if siglip else (100.0, 0.0)
    m = with_prompts(tower, text, ["a", "b", "c"], scale=scale, bias=bias,
                     probability="sigmoid" if siglip else "softmax")
    with torch.no_grad():
        got = m(x)
    ref = scale * F.normalize(image, dim=-1) @ F.normalize(text, dim=-1).T + bias
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert m.spec.labels == ("a", "b", "c") and not m.spec.is_feature_model and tower.spec.is_feature_model
    assert m.head is not tower.head and m.blocks is tower.blocks  # the weights are shared, the tower untouched
    r = Pipeline(m).run_batch([_pil()], target=1)[0]
    p = torch.sigmoid(r.logits) if siglip else torch.softmax(r.logits, -1)
    torch.testing.assert_close(r.probabilities, p)
    assert r.target_text() == "b"


def _pil():
    import numpy as np
    from PIL import Image

    return Image.fromarray((np.random.default_rng(0).random((40, 40, 3)) * 255).astype(np.uint8))


def _official_clip_legrad(tower, x, text_vec, start):
    """LeGrad's compute_legrad_clip, written out: per layer, ln_post(mean over tokens) @ proj, normalised; the
    gradient of text . feature at that layer's attention, clamped, averaged over heads and rows, [CLS] dropped."""
    total = 0
    for layer in range(start, len(tower.blocks)):
        seen = {}
        for b in tower.blocks:
            b.attn.fused = False
        blk = tower.blocks[layer]
        hooks = [blk.attn.attn_map.register_forward_hook(lambda m, a, o, s=seen: s.__setitem__("a", o)),
                 blk.register_forward_hook(lambda m, a, o, s=seen: s.__setitem__("t", o))]
        try:
            with torch.enable_grad():
                tower(x.clone().requires_grad_(True))
        finally:
            for h in hooks:
                h.remove()
            for b in tower.blocks:
                b.attn.fused = True
        ln = tower.norm
        feat = F.layer_norm(seen["t"].mean(dim=1), ln.normalized_shape, ln.weight, ln.bias, ln.eps)
        feat = F.normalize(feat @ tower.head.weight.T, dim=-1)
        sim = (F.normalize(text_vec, dim=-1)[None] * feat).sum()
        (g,) = torch.autograd.grad(sim, [seen["a"]])
        total = total + g.clamp(min=0).mean(dim=1).mean(dim=1)[:, 1:]
    return total


def test_legrad_on_a_prompt_is_the_official_formula():
    tower = _clip_like()
    x = torch.randn(1, 3, 32, 32)
    text = torch.randn(2, 16)
    m = with_prompts(tower, text, ["a red car", "a cat"], scale=100.0)
    cap = capture(m, x, target=ClassTarget(1), legrad=("mean",))
    ref = _official_clip_legrad(tower, x, text[1], len(tower.blocks) - 2)
    # the prompt's logit is logit_scale times the official similarity: the same map up to that positive factor
    torch.testing.assert_close(A.legrad_map(cap.legrad["mean"][:, 0], -2, cap.grid) / 100.0, ref[0].reshape(cap.grid),
                               rtol=1e-4, atol=1e-9)


def test_siglip_neutral_prompt_correction_follows_the_official_rule():
    tower = _clip_like(siglip=True)
    x = torch.randn(1, 3, 32, 32)
    text = torch.randn(2, 24)
    neutral_vec = torch.randn(24)
    m = with_prompts(tower, text, ["a", "b"], scale=10.0, bias=-5.0, probability="sigmoid")
    neutral = SimilarityTarget(neutral_vec, "a photo of a")
    cap = capture(m, x, target=ClassTarget(0), legrad=("mean",), legrad_neutral=neutral)
    plain = cap.legrad["mean"][:, 0]
    empty = cap.legrad["mean|neutral"][:, 0]
    # the neutral maps are LeGrad's of the neutral target alone
    alone = capture(m, x, target=neutral, legrad=("mean",)).legrad["mean"][:, 0]
    torch.testing.assert_close(empty, alone, rtol=1e-5, atol=1e-9)
    # official: accum[min_max(accum_empty) > 0.8] = 0, sums from the start layer
    start = 1
    acc, acc_empty = plain[start:].sum(0), empty[start:].sum(0)
    norm_empty = (acc_empty - acc_empty.min()) / (acc_empty.max() - acc_empty.min())
    ref = acc.clone()
    ref[norm_empty > 0.8] = 0
    got = A.legrad_map(plain, start, cap.grid, empty)
    torch.testing.assert_close(got, ref.reshape(cap.grid))
    assert int((norm_empty > 0.8).sum()) >= 1 and not torch.equal(got, A.legrad_map(plain, start, cap.grid))


def test_bad_prompt_heads_are_refused():
    tower = _clip_like()
    with pytest.raises(ValueError, match="no prompts"):
        with_prompts(tower, torch.randn(0, 16), [], scale=1.0)
    with pytest.raises(ValueError, match="2 prompts but 3 text embeddings"):
        with_prompts(tower, torch.randn(3, 16), ["a", "b"], scale=1.0)
    with pytest.raises(ValueError, match="the text embeddings have 24 values but the image tower's embedding has 16"):
        with_prompts(tower, torch.randn(2, 24), ["a", "b"], scale=1.0)

"""Our ViT against timm with the same random weights, plus the constructor's validation."""

import pytest
import torch

from vitviz.model import ViT, create_model, list_models

timm = pytest.importorskip("timm")


def _ours_like(ref, **extra) -> ViT:
    cfg = dict(
        img_size=ref.patch_embed.img_size, patch_size=ref.patch_embed.patch_size[0], embed_dim=ref.embed_dim,
        depth=len(ref.blocks), num_heads=ref.blocks[0].attn.num_heads, num_classes=ref.num_classes,
        distilled=getattr(ref, "dist_token", None) is not None, num_reg_tokens=getattr(ref, "num_reg_tokens", 0),
        global_pool=ref.global_pool, no_embed_class=ref.no_embed_class, class_token=ref.cls_token is not None,
    )
    cfg.update(extra)
    m = ViT(**cfg).eval()
    m.load_state_dict(ref.state_dict(), strict=True)
    return m


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "deit_tiny_distilled_patch16_224"])
def test_logits_match_timm(name):
    ref = timm.create_model(name, pretrained=False).eval()
    ours = _ours_like(ref)
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        a, b = ours(x), ref(x)
    assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_fused_and_explicit_paths_agree():
    m = ViT(img_size=64, patch_size=16, embed_dim=64, depth=3, num_heads=4, num_classes=7).eval()
    x = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        m.set_fused_attention(True)
        a = m(x)
        m.set_fused_attention(False)
        b = m(x)
    assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def test_registry_has_paper_variants():
    names = list_models()
    for n in ["vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224", "vit_base_patch32_384",
              "vit_large_patch16_384", "vit_huge_patch14_224"]:
        assert n in names
    m = create_model("vit_base_patch16_224", depth=2)
    assert (m.embed_dim, m.num_heads, len(m.blocks)) == (768, 12, 2)
    assert m.spec.preprocess.crop == (224, 224)

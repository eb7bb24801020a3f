"""Model families in timm's layout (timm hub folders and bare files): DINOv2 with and without registers (and the
giant's packed SwiGLU), DeiT III, CLIP image towers (GELU and QuickGELU, and an ImageNet-fine-tuned classifier) and
SigLIP (attention-pool "MAP" head). Each test builds a tiny random-weight timm model, loads what it wrote with
vitviz, and compares outputs and every layer's attention (and SigLIP's pooling attention) at the native and at a
second (non-square) input size, with a capture (with gradients where there is a head)."""

from __future__ import annotations

import pytest
import torch
from family_helpers import check_against_reference, randomise_, rel_err, timm_attentions, write_timm_folder

from vitviz.model import load_checkpoint
from vitviz.model.preprocess import IMAGENET_MEAN, IMAGENET_STD

timm = pytest.importorskip("timm")


def _timm(name: str, **kw):
    m = timm.create_model(name, pretrained=False, dynamic_img_size=True, **kw)
    return randomise_(m)


def _reference(model, pool: bool = False):
    def ref(x):
        out, attn = timm_attentions(model, x)
        pool_attn = None
        if pool:
            p = model.attn_pool
            with torch.no_grad():
                feats = model.forward_features(x)
                B, N, C = feats.shape
                q = p.q(p.latent.expand(B, -1, -1)).reshape(B, 1, p.num_heads, p.head_dim).transpose(1, 2)
                k = p.kv(feats).reshape(B, N, 2, p.num_heads, p.head_dim).permute(2, 0, 3, 1, 4)[0]
                pool_attn = ((q * p.scale) @ k.transpose(-2, -1)).softmax(-1)[:, :, 0]
        return out, attn, pool_attn
    return ref


DINOV2_CFG = {"input_size": [3, 56, 56], "interpolation": "bicubic", "crop_pct": 1.0, "mean": list(IMAGENET_MEAN),
              "std": list(IMAGENET_STD), "num_classes": 0}


@pytest.mark.parametrize("arch, registers", [("vit_small_patch14_dinov2", 0), ("vit_small_patch14_reg4_dinov2", 4)])
def test_dinov2_timm_folder(tmp_path, arch, registers):
    ref = _timm(arch, img_size=56, embed_dim=32, depth=2, num_heads=2, num_classes=0)
    folder = write_timm_folder(tmp_path / arch, ref, arch, DINOV2_CFG)
    ours = load_checkpoint(folder)
    c = ours.config
    assert ours.spec.source_format == "timm" and c.init_values is not None and c.num_reg_tokens == registers
    assert c.no_embed_class == bool(registers) and c.patch_size == 14 and c.num_classes == 0
    assert ours.spec.preprocess.mean == IMAGENET_MEAN and ours.spec.preprocess.crop == (56, 56)
    assert ours.spec.preprocess.resize == 56  # crop_pct 1.0
    check_against_reference(ours, _reference(ref), [(56, 56), (70, 42)], prefix=1 + registers, registers=registers)


def test_dinov2_giant_swiglu_bare_file(tmp_path):
    """The giant's packed SwiGLU MLP (fc1 holds value and gate, fc2 takes half), from a bare safetensors file."""
    from safetensors.torch import save_file

    ref = _timm("vit_giant_patch14_dinov2", img_size=42, embed_dim=48, depth=2, num_heads=2, num_classes=0)
    assert type(ref.blocks[0].mlp).__name__ == "GluMlp"
    path = tmp_path / "dinov2_g.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    ours = load_checkpoint(path, num_heads=2)
    assert ours.config.mlp_layer == "swiglu"
    assert ours.blocks[0].mlp.fc2.in_features * 2 == ours.blocks[0].mlp.fc1.out_features
    # no config: the family is told by its shapes (LayerScale, patch 14): DINOv2's ImageNet mean/std, crop 1.0
    assert ours.spec.preprocess.mean == IMAGENET_MEAN and ours.spec.preprocess.resize == 42
    check_against_reference(ours, _reference(ref), [(42, 42), (56, 28)], prefix=1)


def test_deit3_timm_classifier(tmp_path):
    ref = _timm("deit3_small_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                num_classes=7)
    from safetensors.torch import save_file

    path = tmp_path / "deit3.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    ours = load_checkpoint(path, num_heads=2)
    c = ours.config
    assert c.no_embed_class and c.init_values is not None and c.num_classes == 7
    assert ours.spec.preprocess.mean == IMAGENET_MEAN and ours.spec.preprocess.resize == 32  # DeiT III: crop 1.0
    check_against_reference(ours, _reference(ref), [(32, 32), (48, 40)], prefix=1, target=3)


@pytest.mark.parametrize("arch, act", [("vit_base_patch16_clip_224", "gelu"),
                                       ("vit_base_patch16_clip_quickgelu_224", "quick_gelu")])
def test_clip_timm_tower(tmp_path, arch, act):
    """CLIP image tower: ln_pre (norm_pre), no patch bias, eps 1e-5, the projection as a (zero-bias) head; the
    activation comes from the architecture name in config.json."""
    ref = _timm(arch, img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=16)
    cfg = {"input_size": [3, 32, 32], "crop_pct": 1.0, "interpolation": "bicubic",
           "mean": [0.48145466, 0.4578275, 0.40821073], "std": [0.26862954, 0.26130258, 0.27577711]}
    ours = load_checkpoint(write_timm_folder(tmp_path / arch, ref, arch + ".openai", cfg))
    c = ours.config
    assert c.pre_norm and not c.patch_bias and c.layer_norm_eps == 1e-5 and c.act_layer == act
    assert ours.spec.preprocess.mean == (0.48145466, 0.4578275, 0.40821073)
    check_against_reference(ours, _reference(ref), [(32, 32), (40, 48)], prefix=1)


def test_clip_quickgelu_matters(tmp_path):
    """The activation is not a detail: a QuickGELU tower loaded as GELU gives other features."""
    ref = _timm("vit_base_patch16_clip_quickgelu_224", img_size=32, patch_size=8, embed_dim=32, depth=2,
                num_heads=2, num_classes=16)
    right = load_checkpoint(write_timm_folder(tmp_path / "q", ref, "vit_base_patch16_clip_quickgelu_224"))
    wrong = load_checkpoint(write_timm_folder(tmp_path / "g", ref, "vit_base_patch16_clip_224"))
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        r = ref(x)
        assert rel_err(right(x), r) <= 1e-4 and rel_err(wrong(x), r) > 1e-3


def test_clip_finetuned_classifier(tmp_path):
    """timm's ImageNet-fine-tuned CLIP ViTs: the tower with a classifier (bias) and gradients."""
    ref = _timm("vit_base_patch16_clip_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                num_classes=10)
    ours = load_checkpoint(write_timm_folder(tmp_path / "ft", ref, "vit_base_patch16_clip_224.openai_ft_in1k"))
    assert ours.config.head_bias and ours.config.num_classes == 10
    check_against_reference(ours, _reference(ref), [(32, 32), (48, 48)], prefix=1, target=2)


@pytest.mark.parametrize("tag", ["webli", "v2_webli"])
def test_siglip_timm_tower(tmp_path, tag):
    """SigLIP and SigLIP 2 at fixed resolution (timm's ``.v2_webli`` weights: the same architecture): no [CLS], an
    attention-pool head whose attention is captured (with gradients through a head)."""
    ref = _timm("vit_base_patch16_siglip_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                num_classes=0)
    cfg = {"input_size": [3, 32, 32], "crop_pct": 1.0, "interpolation": "bicubic", "mean": [0.5] * 3,
           "std": [0.5] * 3}
    ours = load_checkpoint(write_timm_folder(tmp_path / "siglip", ref, f"vit_base_patch16_siglip_224.{tag}", cfg))
    c = ours.config
    assert c.global_pool == "map" and not c.class_token and c.num_prefix_tokens == 0
    check_against_reference(ours, _reference(ref, pool=True), [(32, 32), (48, 40)], prefix=0)
    # with a classifier (a fine-tuned SigLIP): gradients reach the pooling attention
    ref2 = _timm("vit_base_patch16_siglip_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                 num_classes=5)
    ours2 = load_checkpoint(write_timm_folder(tmp_path / "siglip2", ref2, "vit_base_patch16_siglip_224", cfg))
    check_against_reference(ours2, _reference(ref2, pool=True), [(32, 32)], prefix=0, target=4)

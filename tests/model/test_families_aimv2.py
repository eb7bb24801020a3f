"""AIMv2 (timm ``aimv2_*``: RMSNorm everywhere including on the patch embeddings, no biases but the patch
projection's, an unpacked SwiGLU, no [CLS], mean pooling after the final norm) from its timm hub folder against timm
with random weights: outputs and every layer's attention (timm's explicit path, its own softmax) at the native and at
a non-square size within 1e-4; the RMSNorm option round-trips through vitviz's own file; a bare file whose norms have
no bias is refused (RMSNorm and LayerNorm without bias look the same)."""

from __future__ import annotations

import pytest
import torch
from family_helpers import check_against_reference, randomise_, rel_err, timm_attentions, write_timm_folder
from safetensors.torch import save_file

from vitviz.model import load_checkpoint
from vitviz.model.checkpoints.common import CheckpointError
from vitviz.model.checkpoints.saving import save_checkpoint

timm = pytest.importorskip("timm")
ARCH = "aimv2_large_patch14_224"


def aimv2():
    torch.manual_seed(0)
    m = timm.create_model(ARCH, pretrained=False, dynamic_img_size=True, img_size=56, embed_dim=32, depth=2,
                          num_heads=2, num_classes=0)
    return randomise_(m)


def test_aimv2_equals_timm(tmp_path):
    ref = aimv2()
    ours = load_checkpoint(write_timm_folder(tmp_path / "aimv2", ref, ARCH))
    c = ours.config
    assert c.norm_layer == "rmsnorm" and c.layer_norm_eps == 1e-5 and c.embed_norm and not c.proj_bias
    assert not c.qkv_bias and c.patch_bias and c.mlp_layer == "swiglu" and not c.class_token
    assert c.global_pool == "avg" and not c.fc_norm and c.num_heads == 2
    assert isinstance(ours.blocks[0].norm1, torch.nn.RMSNorm) and isinstance(ours.patch_embed.norm, torch.nn.RMSNorm)
    worst = check_against_reference(ours, lambda x: (*timm_attentions(ref, x), None), [(56, 56), (42, 70)],
                                    prefix=0)
    print("AIMv2 worst relative errors:", worst)
    # vitviz's own file keeps the options
    path = save_checkpoint(ours, tmp_path / "aimv2.safetensors")
    again = load_checkpoint(path)
    assert again.config == c
    x = torch.randn(1, 3, 56, 56)
    with torch.no_grad():
        assert rel_err(again(x), ref(x)) <= 1e-4


def test_norms_without_bias_need_the_architecture(tmp_path):
    ref = aimv2()
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(tmp_path / "bare.safetensors"))
    with pytest.raises(CheckpointError, match="bare.safetensors: the block norms have no bias") as e:
        load_checkpoint(tmp_path / "bare.safetensors", num_heads=2)
    assert "\n" not in str(e.value)

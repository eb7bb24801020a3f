"""The composable parts the model families need, checked against independent references: post-norm blocks against
torch's own ``TransformerEncoderLayer(norm_first=False)``, the fused (SDPA) and explicit attention paths with a
relative position bias, QuickGELU / GELU-tanh, and the relative-position index against timm's."""

from __future__ import annotations

import warnings

import pytest
import torch
from family_helpers import rel_err

from vitviz.model.layers import Block
from vitviz.model.pos_embed import relative_position_index, resize_rel_pos_table
from vitviz.model.vit import ViT


@pytest.mark.parametrize("act", ["gelu", "quick_gelu", "gelu_tanh"])
def test_post_norm_block_equals_torch_encoder_layer(act):
    dim, heads = 32, 4
    blk = Block(dim, heads, mlp_ratio=2.0, eps=1e-5, post_norm=True, act_layer=act).eval()
    acts = {"gelu": torch.nn.functional.gelu, "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
            "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}
    ref = torch.nn.TransformerEncoderLayer(dim, heads, dim_feedforward=64, dropout=0.0, activation=acts[act],
                                           layer_norm_eps=1e-5, batch_first=True, norm_first=False).eval()
    with torch.no_grad():
        for p in blk.parameters():
            p.normal_(0, 0.2)
        ref.self_attn.in_proj_weight.copy_(blk.attn.qkv.weight)
        ref.self_attn.in_proj_bias.copy_(blk.attn.qkv.bias)
        ref.self_attn.out_proj.weight.copy_(blk.attn.proj.weight)
        ref.self_attn.out_proj.bias.copy_(blk.attn.proj.bias)
        for a, b in (("linear1", blk.mlp.fc1), ("linear2", blk.mlp.fc2), ("norm1", blk.norm1), ("norm2", blk.norm2)):
            getattr(ref, a).weight.copy_(b.weight)
            getattr(ref, a).bias.copy_(b.bias)
        x = torch.randn(2, 7, dim)
        want = ref(x)
        assert rel_err(blk(x), want) <= 1e-5
        blk.attn.fused = False
        assert rel_err(blk(x), want) <= 1e-5
        pre = Block(dim, heads, mlp_ratio=2.0, eps=1e-5, act_layer=act).eval()
        pre.load_state_dict(blk.state_dict())
        assert rel_err(pre(x), want) > 1e-2  # the option changes the block


def test_post_norm_model_capture():
    from vitviz.capture import capture

    m = ViT(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=3, post_norm=True).eval()
    x = torch.randn(1, 3, 32, 32)
    cap = capture(m, x, target=1)
    with torch.no_grad():
        assert rel_err(cap.logits, m(x)) <= 1e-5
    assert cap.attention_grads is not None and m.fused_attention


def test_rel_pos_bias_fused_equals_explicit_and_changes_attention():
    m = ViT(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=3, pos_embed="none",
            rel_pos_bias="layer").eval()
    with torch.no_grad():
        for b in m.blocks:
            b.attn.relative_position_bias_table.normal_(0, 1.0)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        fused = m(x)
        m.set_fused_attention(False)
        explicit = m(x)
        m.set_fused_attention(True)
        assert rel_err(fused, explicit) <= 1e-5
        for b in m.blocks:
            b.attn.relative_position_bias_table.zero_()
        assert rel_err(m(x), fused) > 1e-3


def test_relative_position_index_equals_timm():
    beit = pytest.importorskip("timm.models.beit")
    for window in [(2, 2), (3, 4), (5, 5)]:
        assert torch.equal(relative_position_index(window), beit.gen_relative_position_index(window))


def test_rel_pos_table_resize_equals_timm():
    pos = pytest.importorskip("timm.layers.pos_embed_rel")
    g = torch.Generator().manual_seed(0)
    table = torch.randn((2 * 4 - 1) ** 2 + 3, 3, generator=g)
    for new in [(6, 6), (3, 3), (5, 7)]:
        n = (2 * new[0] - 1) * (2 * new[1] - 1) + 3
        with warnings.catch_warnings():  # timm's interpolator passes a non-contiguous grid to bucketize
            warnings.simplefilter("ignore", UserWarning)
            want = pos.resize_rel_pos_bias_table(table, new_window_size=new, new_bias_shape=(n, 3),
                                                 old_window_size=(4, 4))
        assert rel_err(resize_rel_pos_table(table, (4, 4), new, "timm"), want) <= 1e-5


@pytest.mark.parametrize("kw", [
    dict(class_token=False, global_pool="map", act_layer="gelu_tanh"),
    dict(pos_embed="none", rel_pos_bias="shared", init_values=0.1, global_pool="avg", rel_pos_interp="bilinear"),
    dict(pre_norm=True, patch_bias=False, head_bias=False, act_layer="quick_gelu", layer_norm_eps=1e-5),
    dict(mlp_layer="swiglu", mlp_ratio=5.0, init_values=1e-5, num_reg_tokens=4, no_embed_class=True,
         pos_embed_interp="dino", post_norm=True),
    dict(rope="dinov3", rope_theta=100.0, rope_half=True, pos_embed="none", num_reg_tokens=4, global_pool="avg",
         fc_norm=False, qkv_bias=False),
    dict(rope="axial", rope_ref_grid=(3, 5), rope_grid_offset=1.0, rope_grid_indexing="xy", mlp_layer="swiglu",
         mlp_norm=True, class_token=False, global_pool="map", pool_num_heads=4, pre_norm=True),
    dict(rope="mixed", rope_theta=10.0, pos_embed="none", final_norm=False, global_pool="avg"),
])
def test_native_round_trip_keeps_every_option(tmp_path, kw):
    from vitviz.model import load_checkpoint, save_checkpoint
    from vitviz.model.spec import ModelSpec

    m = ViT(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=3, **kw).eval()
    m.spec = ModelSpec(config=m.config, name="parts")
    back = load_checkpoint(save_checkpoint(m, tmp_path / "m.safetensors"))
    assert back.config == m.config
    x = torch.randn(1, 3, 40, 48)  # another size: the resampling options matter
    with torch.no_grad():
        assert rel_err(back(x), m(x)) <= 1e-6

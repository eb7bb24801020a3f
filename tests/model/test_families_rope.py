"""Rotary-position-embedding families in timm's layout (timm hub folders written from timm's own ``Eva`` models with
random weights): EVA-02 (separate q/k/v, SwiGLU with its inner norm), Perception Encoder core (absolute position
embedding + RoPE, attention-pool head with its own head count) and spatial (no final norm), DINOv3 S, S+ (SwiGLU) and
the qkvb variant (4 registers, LayerScale, no key bias), timm's mixed-RoPE ViT (learned per-layer, per-head
frequencies) and the reg1-GAP RoPE ViT. vitviz's outputs and every layer's attention (and PE's pooling attention)
equal timm's own at the native size and at another (non-square) one; the reference attention is what timm's softmax
produced (its attention dropout's input; the pool's softmax wrapped), never recomputed here. Nothing is passed to the
loader: heads, layout and rope settings come from the folder."""

from __future__ import annotations

import pytest
import torch
from family_helpers import check_against_reference, randomise_, rel_err, timm_reference, write_timm_folder

from vitviz.capture import capture
from vitviz.model import load_checkpoint

timm = pytest.importorskip("timm")


def _timm(name: str, **kw):
    torch.manual_seed(0)
    return randomise_(timm.create_model(name, pretrained=False, dynamic_img_size=True, num_classes=0, **kw))


def _folder(tmp_path, arch: str, model, model_args: dict, **extra):
    folder = write_timm_folder(tmp_path / arch, model, arch, **extra)
    import json

    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_args"] = model_args  # what timm's save_for_hf writes for a model created with these arguments
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


SMALL = dict(embed_dim=64, depth=2, num_heads=2)

CASES = {
    # arch: (creation kwargs, input sizes, prefix tokens, registers, expected ViTConfig fields)
    "eva02_base_patch14_224": (dict(img_size=56, **SMALL), [(56, 56), (70, 42)], 1, 0,
                               dict(rope="axial", rope_ref_grid=(16, 16), mlp_layer="swiglu", mlp_norm=True,
                                    global_pool="avg", fc_norm=True)),
    "eva02_small_patch14_224": (dict(img_size=56, **SMALL), [(56, 56), (42, 70)], 1, 0,
                                dict(rope="axial", mlp_layer="swiglu", mlp_norm=False)),
    "vit_pe_core_base_patch16_224": (dict(img_size=64, **SMALL), [(64, 64), (80, 48)], 1, 0,
                                     dict(rope="axial", rope_ref_grid=(14, 14), rope_grid_offset=1.0,
                                          rope_grid_indexing="xy", global_pool="map", pool_num_heads=8,
                                          pre_norm=True, pos_embed="learned")),
    "eva02_base_patch16_clip_224": (dict(img_size=64, **SMALL), [(64, 64), (80, 48)], 1, 0,
                                    dict(rope="axial", rope_ref_grid=(16, 16), attn_norm=True, mlp_norm=True,
                                         global_pool="token", fc_norm=False)),
    "eva02_large_patch14_clip_336": (dict(img_size=56, **SMALL), [(56, 56), (42, 70)], 1, 0,
                                     dict(rope="axial", attn_norm=True, global_pool="token")),
    "vit_pe_core_gigantic_patch14_448": (dict(img_size=56, **SMALL), [(56, 56), (70, 42)], 0, 0,
                                         dict(rope="axial", rope_ref_grid=(32, 32), rope_grid_offset=0.0,
                                              global_pool="map", pool_num_heads=8, pool_mlp_ratio=4.0,
                                              class_token=False, pre_norm=True)),
    "vit_pe_spatial_base_patch16_512": (dict(img_size=64, **SMALL), [(64, 64), (48, 80)], 1, 0,
                                        dict(rope="axial", rope_ref_grid=(32, 32), final_norm=False)),
    "vit_small_patch16_dinov3": (dict(img_size=64, **SMALL), [(64, 64), (80, 48)], 5, 4,
                                 dict(rope="dinov3", rope_theta=100.0, rope_half=True, qkv_bias=False,
                                      pos_embed="none", layer_norm_eps=1e-5)),
    "vit_small_plus_patch16_dinov3": (dict(img_size=64, **SMALL), [(64, 64), (48, 96)], 5, 4,
                                      dict(rope="dinov3", mlp_layer="swiglu", qkv_bias=False)),
    "vit_small_patch16_dinov3_qkvb": (dict(img_size=64, **SMALL), [(64, 64), (80, 48)], 5, 4,
                                      dict(rope="dinov3", qkv_bias=True)),
    "vit_small_patch16_rope_mixed_224": (dict(img_size=64, **SMALL), [(64, 64), (80, 48)], 1, 0,
                                         dict(rope="mixed", rope_theta=10.0, rope_grid_indexing="xy",
                                              global_pool="token")),
    "vit_base_patch16_rope_reg1_gap_256": (dict(img_size=64, **SMALL), [(64, 64), (48, 80)], 1, 1,
                                           dict(rope="axial", rope_ref_grid=(16, 16), class_token=False,
                                                global_pool="avg")),
}


@pytest.mark.parametrize("arch", sorted(CASES))
def test_rope_family_equals_timm(tmp_path, arch):
    kw, sizes, prefix, registers, expect = CASES[arch]
    ref = _timm(arch, **kw)
    folder = _folder(tmp_path, arch, ref, kw)
    ours = load_checkpoint(folder)
    assert ours.spec.source_format == "timm-eva"
    c = ours.config
    assert c.num_heads == 2 and c.depth == 2
    for k, v in expect.items():
        assert getattr(c, k) == v, (k, getattr(c, k), v)
    worst = check_against_reference(ours, timm_reference(ref), sizes, prefix=prefix, registers=registers)
    assert worst["attn"] <= 1e-4


def test_rope_matters_and_a_wrong_layout_is_caught(tmp_path):
    """The comparison can fail: the same DINOv3 weights with the rotation left out (or interleaved pairs instead
    of halves) differ from timm's attention far beyond the tolerance."""
    from dataclasses import replace

    from vitviz.model.vit import ViT

    kw = dict(img_size=64, **SMALL)
    ref = _timm("vit_small_patch16_dinov3", **kw)
    ours = load_checkpoint(_folder(tmp_path, "vit_small_patch16_dinov3", ref, kw))
    x = torch.randn(1, 3, 64, 64)
    _, ref_attn, _ = timm_reference(ref)(x)
    assert rel_err(capture(ours, x).attentions[0], ref_attn[0]) <= 1e-4
    for change in (dict(rope="none"), dict(rope_half=False), dict(rope_theta=10000.0)):
        other = ViT.from_config(replace(ours.config, **change)).eval()
        other.load_state_dict(ours.state_dict())
        assert rel_err(capture(other, x).attentions[0], ref_attn[0]) > 1e-2, change


def test_unmodelled_model_args_are_refused(tmp_path):
    kw = dict(img_size=64, **SMALL)
    ref = _timm("vit_small_patch16_dinov3", **kw)
    folder = _folder(tmp_path, "vit_small_patch16_dinov3", ref, {**kw, "qk_norm": True})
    from vitviz.model.checkpoints import CheckpointError

    with pytest.raises(CheckpointError, match="model_args.qk_norm=True"):
        load_checkpoint(folder)


@pytest.mark.parametrize("gated", [False, True])
def test_dinov3_hugging_face_folder_equals_transformers(tmp_path, gated):
    """``DINOv3ViTModel`` saved by transformers: 4 registers, no key bias, LayerScale, the GELU MLP or the SiLU-gated
    one (S+ / H+); outputs (``pooler_output``: [CLS] after the norm) and every layer's attention (transformers'
    eager softmax, ``output_attentions``) at two sizes."""
    T = pytest.importorskip("transformers")
    import warnings

    torch.manual_seed(0)
    cfg = T.DINOv3ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                            image_size=64, patch_size=16, num_register_tokens=4, use_gated_mlp=gated,
                            hidden_act="silu" if gated else "gelu", attn_implementation="eager")
    ref = randomise_(T.DINOv3ViTModel(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.save_pretrained(tmp_path / "dinov3")
    ours = load_checkpoint(tmp_path / "dinov3")
    c = ours.config
    assert ours.spec.source_format == "hf-dinov3" and c.rope == "dinov3" and c.num_reg_tokens == 4
    assert c.mlp_layer == ("swiglu" if gated else "mlp") and c.global_pool == "token" and c.pos_embed == "none"
    assert ours.blocks[0].attn.qkv.bias[64:128].abs().max() == 0  # no key bias: zeros in its slot

    def reference(x):
        with torch.no_grad():
            out = ref(pixel_values=x, output_attentions=True)
        return out.pooler_output, list(out.attentions), None

    check_against_reference(ours, reference, [(64, 64), (80, 48)], prefix=5, registers=4)


@pytest.mark.parametrize("arch, kw", [("vit_small_patch16_dinov3", dict(img_size=64)),
                                      ("eva02_tiny_patch14_224", dict(img_size=56)),
                                      ("vit_pe_core_base_patch16_224", dict(img_size=64))])
def test_hub_config_without_model_args(tmp_path, arch, kw):
    """A folder as timm's hub holds it (``config.json``: architecture, num_classes, num_features, global_pool,
    pretrained_cfg; no model_args): the architecture's real width, heads from the width, the RoPE layout from the
    architecture table; two blocks to keep it small (the block count is read from the tensors)."""
    import json

    ref = _timm(arch, depth=2, **kw)
    folder = write_timm_folder(tmp_path / arch, ref, arch, {"input_size": [3, kw["img_size"], kw["img_size"]]})
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["model_args"]
    cfg.update(num_features=ref.embed_dim, global_pool=ref.global_pool)
    (folder / "config.json").write_text(json.dumps(cfg))
    ours = load_checkpoint(folder)
    assert ours.config.num_heads == ref.blocks[0].attn.num_heads and ours.config.rope != "none"
    s = kw["img_size"]
    check_against_reference(ours, timm_reference(ref), [(s, s), (s + 16 if s % 16 == 0 else s + 14, s)],
                            prefix=ref.num_prefix_tokens, registers=ours.config.num_reg_tokens)


@pytest.mark.parametrize("arch, kw", [("eva02_base_patch16_clip_224", dict(img_size=64)),
                                      ("vit_pe_core_gigantic_patch14_448", dict(img_size=56))])
def test_new_parts_round_trip_through_vitviz_files(tmp_path, arch, kw):
    """The attention inner norm (EVA-02 CLIP) and the pool's own MLP width (PE core gigantic) are saved in vitviz's
    own files and read back: the same config, the same outputs."""
    from vitviz.model.checkpoints.saving import save_checkpoint

    ref = _timm(arch, **kw, **SMALL)
    ours = load_checkpoint(_folder(tmp_path, arch, ref, {**kw, **SMALL}))
    assert ours.config.attn_norm or ours.config.pool_mlp_ratio == 4.0
    again = load_checkpoint(save_checkpoint(ours, tmp_path / "again.safetensors"))
    assert again.config == ours.config
    x = torch.randn(1, 3, kw["img_size"], kw["img_size"])
    with torch.no_grad():
        assert rel_err(again(x), ref(x)) <= 1e-4

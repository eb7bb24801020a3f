"""Model families in their own layouts: timm's BEiT (relative position bias per layer or shared, optional absolute
position embedding; at another input size the reference is timm's own resize of the tables), open_clip image
towers (OpenAI's QuickGELU and LAION's GELU; at another size the reference is timm's open_clip converter), and
DINOv2's own ``.pth`` files (with and without registers)."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from family_helpers import check_against_reference, randomise_, rel_err, timm_attentions

from vitviz.capture import capture
from vitviz.model import load_checkpoint
from vitviz.model.preprocess import INCEPTION_MEAN

timm = pytest.importorskip("timm")


def _save_pth(tmp_path, sd, name):
    path = tmp_path / name
    torch.save({k: v.detach().clone() for k, v in sd.items()}, path)
    return path


# ------------------------------------------------------------------------------------------------ timm BEiT
@pytest.mark.parametrize("kw", [dict(), dict(use_shared_rel_pos_bias=True, use_rel_pos_bias=False),
                                dict(use_abs_pos_emb=True)])
def test_beit_timm(tmp_path, kw):
    from timm.models.beit import checkpoint_filter_fn

    small = dict(patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=5, **kw)
    ref = randomise_(timm.create_model("beit_base_patch16_224", pretrained=False, img_size=32, **small))
    sd = ref.state_dict()
    ours = load_checkpoint(_save_pth(tmp_path, sd, "beit.pth"), num_heads=2)
    c = ours.config
    assert ours.spec.source_format == "timm-beit" and c.init_values is not None
    assert c.rel_pos_bias == ("shared" if kw.get("use_shared_rel_pos_bias") else "layer")
    assert c.pos_embed == ("learned" if kw.get("use_abs_pos_emb") else "none")
    assert ours.spec.preprocess.mean == INCEPTION_MEAN  # BEiT's default without a config

    refs = {(32, 32): ref}
    with warnings.catch_warnings():  # timm's table interpolation passes a non-contiguous grid to bucketize
        warnings.simplefilter("ignore", UserWarning)
        for hw in [(48, 48), (40, 56)]:  # timm's way to another size: a new model, the tables resized on load
            m = timm.create_model("beit_base_patch16_224", pretrained=False, img_size=hw, **small).eval()
            m.load_state_dict(checkpoint_filter_fn(dict(sd), m))
            refs[hw] = m

    def reference(x):
        out, attn = timm_attentions(refs[tuple(x.shape[-2:])], x)
        return out, attn, None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        check_against_reference(ours, reference, list(refs), prefix=1, target=1)


# ------------------------------------------------------------------------------------------------ open_clip
@pytest.mark.parametrize("quick_gelu", [True, False])
def test_open_clip_tower(tmp_path, quick_gelu):
    open_clip = pytest.importorskip("open_clip")
    from timm.models.vision_transformer import checkpoint_filter_fn

    torch.manual_seed(0)
    model = open_clip.CLIP(embed_dim=16, vision_cfg=dict(layers=2, width=32, head_width=16, patch_size=8,
                                                         image_size=32),
                           text_cfg=dict(context_length=8, vocab_size=64, width=32, heads=2, layers=1),
                           quick_gelu=quick_gelu)
    randomise_(model)
    sd = model.state_dict()
    name = "ViT-T-8-quickgelu-openai.pt" if quick_gelu else "ViT-T-8-laion.pt"
    ours = load_checkpoint(_save_pth(tmp_path, sd, name), num_heads=2)
    c = ours.config
    assert ours.spec.source_format == "open_clip" and c.pre_norm and c.num_classes == 16 and not c.head_bias
    assert c.act_layer == ("quick_gelu" if quick_gelu else "gelu") and c.layer_norm_eps == 1e-5
    visual = model.visual

    def reference_native(x):
        maps = []

        def hook(mod, args):  # the block's attention input: its weights from nn.MultiheadAttention itself
            h = args[0]
            maps.append(mod.attn(h, h, h, need_weights=True, average_attn_weights=False)[1].detach())

        handles = [b.register_forward_pre_hook(lambda m, a, b=b: hook(b, (b.ln_1(a[0]),)))
                   for b in visual.transformer.resblocks]
        try:
            with torch.no_grad():
                out = model.encode_image(x)
        finally:
            for h in handles:
                h.remove()
        return out, maps, None

    check_against_reference(ours, reference_native, [(32, 32)], prefix=1)
    # another input size: timm's open_clip converter and its position-embedding resampling as the reference
    arch = "vit_base_patch16_clip_quickgelu_224" if quick_gelu else "vit_base_patch16_clip_224"
    t = timm.create_model(arch, pretrained=False, img_size=(48, 40), patch_size=8, embed_dim=32, depth=2,
                          num_heads=2, num_classes=16).eval()
    t.load_state_dict(checkpoint_filter_fn(dict(sd), t))
    x = torch.randn(1, 3, 48, 40)
    out, attn = timm_attentions(t, x)
    with torch.no_grad():
        assert rel_err(ours(x), out) <= 1e-4
    cap = capture(ours, x)
    for i, ra in enumerate(attn):
        assert rel_err(cap.attentions[i], ra) <= 1e-4
    # an open_clip hub folder: the activation and preprocessing from open_clip_config.json, whatever the name
    from safetensors.torch import save_file

    folder = tmp_path / "hub"
    folder.mkdir()
    save_file({k: v.contiguous() for k, v in sd.items()}, str(folder / "open_clip_model.safetensors"))
    vision = dict(layers=2, width=32, head_width=16, patch_size=8, image_size=32)
    (folder / "open_clip_config.json").write_text(json.dumps({
        "model_cfg": {"quick_gelu": quick_gelu, "vision_cfg": vision},
        "preprocess_cfg": {"mean": [0.5, 0.4, 0.3], "std": [0.2] * 3}}))
    hub = load_checkpoint(folder)  # the heads from vision_cfg: width / head_width
    assert hub.config.num_heads == 2 and hub.config.act_layer == ("quick_gelu" if quick_gelu else "gelu")
    assert hub.spec.preprocess.mean == (0.5, 0.4, 0.3) and hub.spec.preprocess.crop == (32, 32)


# ------------------------------------------------------------------------------------------------ DINOv2 .pth
@pytest.mark.parametrize("registers", [0, 4])
def test_dinov2_original_pth(tmp_path, registers):
    """DINOv2's own files: mask_token, register_tokens and the [CLS] position slot, as timm converts them."""
    from timm.models.vision_transformer import checkpoint_filter_fn

    arch = "vit_small_patch14_reg4_dinov2" if registers else "vit_small_patch14_dinov2"
    t = randomise_(timm.create_model(arch, pretrained=False, img_size=42, embed_dim=32, depth=2, num_heads=2,
                                     num_classes=0))
    sd = {k: v for k, v in t.state_dict().items()}
    # back to DINOv2's names: mask_token, register_tokens, [CLS] slot in pos_embed (the inverse of timm's converter)
    orig = {("register_tokens" if k == "reg_token" else k): v for k, v in sd.items()}
    orig["mask_token"] = torch.zeros(1, 32)
    if registers:
        cls_pos = torch.randn(1, 1, 32)
        orig["pos_embed"] = torch.cat([cls_pos, sd["pos_embed"]], dim=1)
        orig["cls_token"] = sd["cls_token"] - cls_pos
    assert rel_err(checkpoint_filter_fn(dict(orig), t)["cls_token"], sd["cls_token"]) < 1e-6
    ours = load_checkpoint(_save_pth(tmp_path, orig, f"dinov2_reg{registers}.pth"), num_heads=2)
    assert ours.spec.source_format == "dinov2" and ours.config.num_reg_tokens == registers
    assert ours.config.pos_embed_interp == ("timm" if registers else "dino")
    x = torch.randn(1, 3, 42, 42)
    with torch.no_grad():
        assert rel_err(ours(x), t(x)) <= 1e-4
    if not registers:  # DINOv2's own interpolation at another size: scale_factor with the 0.1 offset
        from vitviz.model.pos_embed import resample_pos_embed

        pe = ours.pos_embed
        want = torch.nn.functional.interpolate(pe[:, 1:].reshape(1, 3, 3, 32).permute(0, 3, 1, 2),
                                               scale_factor=((5 + 0.1) / 3, (4 + 0.1) / 3), mode="bicubic")
        got = resample_pos_embed(pe, (5, 4), (3, 3), 1, "dino")[:, 1:]
        assert rel_err(got, want.permute(0, 2, 3, 1).reshape(1, 20, 32)) <= 1e-6
        bic = resample_pos_embed(pe, (5, 4), (3, 3), 1, "bicubic")[:, 1:]
        assert rel_err(bic, got) > 1e-3  # the offset is not a detail


# ------------------------------------------------------------------------------------------------ refused
def test_swin_is_refused_with_what_is_supported(tmp_path):
    from safetensors.torch import save_file

    from vitviz.model import CheckpointError

    swin = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, embed_dim=16, depths=(1, 1, 1, 1),
                             num_heads=(1, 1, 1, 1), num_classes=3)
    path = tmp_path / "swin.safetensors"
    save_file({k: v.contiguous() for k, v in swin.state_dict().items()}, str(path))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    msg = str(e.value)
    assert msg.startswith(str(path)) and "windowed-attention model (Swin" in msg
    assert "DINOv2" in msg and "SigLIP" in msg and "CLIP" in msg and "BEiT" in msg
    T = pytest.importorskip("transformers")
    hf = T.SwinModel(T.SwinConfig(embed_dim=16, depths=[1, 1], num_heads=[1, 1], image_size=32, patch_size=4,
                                  window_size=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf.save_pretrained(tmp_path / "hfswin")
    with pytest.raises(CheckpointError, match="windowed-attention model .*config.json says 'swin'"):
        load_checkpoint(tmp_path / "hfswin")


# ------------------------------------------------------------------------------------------------ DINO .pth
def test_dino_original_pth(tmp_path):
    """DINO's own files: timm's names, no head, told by their name; ImageNet preprocessing and DINO's position-
    embedding interpolation (scale_factor with the 0.1 offset), checked against a timm model given that embedding."""
    t = randomise_(timm.create_model("vit_small_patch16_224", pretrained=False, img_size=32, patch_size=8,
                                     embed_dim=32, depth=2, num_heads=2, num_classes=0))
    sd = t.state_dict()
    ours = load_checkpoint(_save_pth(tmp_path, sd, "dino_deitsmall8_pretrain.pth"), num_heads=2)
    assert ours.config.pos_embed_interp == "dino" and ours.spec.preprocess.mean == (0.485, 0.456, 0.406)
    other = load_checkpoint(_save_pth(tmp_path, sd, "my_vit.pth"), num_heads=2)
    assert other.config.pos_embed_interp == "timm"
    x = torch.randn(1, 3, 48, 40)
    pe = sd["pos_embed"]  # DINO's vision_transformer.py interpolate_pos_encoding, transcribed
    patch = torch.nn.functional.interpolate(pe[:, 1:].reshape(1, 4, 4, 32).permute(0, 3, 1, 2),
                                            scale_factor=((6 + 0.1) / 4, (5 + 0.1) / 4), mode="bicubic")
    ref = timm.create_model("vit_small_patch16_224", pretrained=False, img_size=(48, 40), patch_size=8, embed_dim=32,
                            depth=2, num_heads=2, num_classes=0).eval()
    ref.load_state_dict({**sd, "pos_embed": torch.cat([pe[:, :1], patch.permute(0, 2, 3, 1).reshape(1, 30, 32)], 1)})
    out, attn = timm_attentions(ref, x)
    cap = capture(ours, x)
    assert rel_err(cap.logits, out) <= 1e-4
    assert all(rel_err(cap.attentions[i], a) <= 1e-4 for i, a in enumerate(attn))
    with torch.no_grad():
        assert rel_err(other(x), out) > 5e-4  # timm's resampling differs: the family's own matters

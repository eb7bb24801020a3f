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

from vitviz.capture import capture
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


# --- Hugging Face Aimv2VisionModel / Aimv2Model folders ------------------------------------------------------------
class _SdpaRecorder:
    """The pooling attention of transformers' AIMv2 head, which calls ``F.scaled_dot_product_attention``: the query
    and key it passes are recorded and their softmax taken here (the head has no softmax of its own to hook); the
    recorder also checks that this softmax times the values is what SDPA returned."""

    def __init__(self, module):
        import torch.nn.functional as F

        self.maps: list[torch.Tensor] = []
        self.F, self.orig = F, F.scaled_dot_product_attention
        rec = self

        def wrapped(q, k, v, *a, **kw):
            out = rec.orig(q, k, v, *a, **kw)
            p = ((q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5).softmax(-1)
            assert rel_err(p @ v, out) <= 1e-5
            rec.maps.append(p.detach()[:, :, 0])
            return out

        self.handles = [module.register_forward_pre_hook(lambda m, a: setattr(F, "scaled_dot_product_attention",
                                                                             wrapped)),
                        module.register_forward_hook(lambda m, a, o: setattr(F, "scaled_dot_product_attention",
                                                                            rec.orig))]

    def close(self) -> None:
        self.F.scaled_dot_product_attention = self.orig
        for h in self.handles:
            h.remove()


def _hf_aimv2(tmp_path, *, whole: bool = False, **kw):
    T = pytest.importorskip("transformers")
    from family_helpers import save_hf_folder

    torch.manual_seed(0)
    vision = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2, image_size=56,
                  patch_size=14, **kw)
    if whole:
        cfg = T.Aimv2Config(vision_config=vision, text_config=dict(hidden_size=32, intermediate_size=64,
                                                                   num_hidden_layers=1, num_attention_heads=2,
                                                                   vocab_size=64), projection_dim=24)
        cfg._attn_implementation = "eager"
        cfg.vision_config._attn_implementation = "eager"
        ref = randomise_(T.Aimv2Model(cfg))
    else:
        ref = randomise_(T.Aimv2VisionModel(T.Aimv2VisionConfig(attn_implementation="eager", **vision)))
    with torch.no_grad():  # a query far from zero: a pooling attention far from uniform
        for name, p in ref.named_parameters():
            if name.endswith("head.cls_token"):
                p.normal_(0.0, 3.0)
    return ref, load_checkpoint(save_hf_folder(ref, tmp_path / "aimv2-hf"))


def _hf_reference(ref, *, whole: bool = False):
    vision = ref.vision_model if whole else ref

    def run(x):
        pool = _SdpaRecorder(vision.head) if vision.use_head else None
        try:
            with torch.no_grad():
                out = vision(pixel_values=x, output_attentions=True)
                pooled = ref.get_image_features(pixel_values=x) if whole else out.pooler_output
        finally:
            if pool is not None:
                pool.close()
        if pooled is None:
            pooled = out.last_hidden_state.mean(1)  # no head: the tokens' mean after the final norm (timm's AIMv2)
        elif not torch.is_tensor(pooled):
            pooled = pooled.pooler_output
        return pooled, list(out.attentions), (pool.maps[0] if pool is not None else None)
    return run


@pytest.mark.parametrize("use_head", [True, False])
def test_hf_aimv2_vision_model_equals_transformers(tmp_path, use_head):
    ref, ours = _hf_aimv2(tmp_path, use_head=use_head)
    c = ours.config
    assert ours.spec.source_format == "hf-aimv2" and c.norm_layer == "rmsnorm" and c.layer_norm_eps == 1e-5
    assert not c.class_token and not c.qkv_bias and not c.proj_bias and c.embed_norm and c.mlp_layer == "swiglu"
    assert c.num_heads == 2 and c.global_pool == ("map" if use_head else "avg") and c.pos_embed == "learned"
    # the learned table has no resampling in transformers: the native size only
    worst = check_against_reference(ours, _hf_reference(ref), [(56, 56)], prefix=0)
    print("HF AIMv2 worst relative errors:", worst)
    if use_head:  # the pooling attention is far from uniform: a wrongly read query would show
        cap = capture(ours, torch.randn(1, 3, 56, 56))
        assert float(cap.pool_attention.std()) > 0.01


def test_hf_aimv2_native_follows_the_grid(tmp_path):
    """``is_native``: the sin-cos embedding of each input's own grid (transformers' layout, vitviz's sincos), at the
    native size and at non-square ones; with biases (``qkv_bias`` and ``mlp_bias``)."""
    ref, ours = _hf_aimv2(tmp_path, is_native=True, qkv_bias=True, mlp_bias=True)
    c = ours.config
    assert c.pos_embed == "sincos" and c.qkv_bias and c.proj_bias
    check_against_reference(ours, _hf_reference(ref), [(56, 56), (42, 70), (84, 28)], prefix=0)


def test_hf_aimv2_model_image_features(tmp_path):
    """The vision half of an ``Aimv2Model``: ``get_image_features`` (head, then ``visual_projection``) is the output;
    the text tower is named as left to the text reader."""
    ref, ours = _hf_aimv2(tmp_path, whole=True)
    assert ours.spec.head_kind == "projection" and ours.config.num_classes == 24 and not ours.config.head_bias
    check_against_reference(ours, _hf_reference(ref, whole=True), [(56, 56)], prefix=0)


def test_hf_aimv2_refuses_what_it_cannot_model(tmp_path):
    from family_fixtures import json_edit

    with pytest.raises(CheckpointError, match="hidden_act='gelu'") as e:
        _hf_aimv2(tmp_path / "a", hidden_act="gelu")
    assert "\n" not in str(e.value)
    with pytest.raises(CheckpointError, match="one switch for both"):
        _hf_aimv2(tmp_path / "b", qkv_bias=True, mlp_bias=False)
    ref, _ = _hf_aimv2(tmp_path / "c")
    json_edit(tmp_path / "c" / "aimv2-hf", "config.json", is_native=True)
    with pytest.raises(CheckpointError, match="is_native=true but the weights hold a position table"):
        load_checkpoint(tmp_path / "c" / "aimv2-hf")


def test_hf_aimv2_native_round_trips_through_vitviz_files(tmp_path):
    """The per-grid sin-cos embedding (``pos_embed_interp="sincos_grid"``) is kept by vitviz's own files."""
    ref, ours = _hf_aimv2(tmp_path, is_native=True)
    again = load_checkpoint(save_checkpoint(ours, tmp_path / "again.safetensors"))
    assert again.config == ours.config and again.config.pos_embed_interp == "sincos_grid"
    x = torch.randn(1, 3, 42, 70)
    with torch.no_grad():
        assert rel_err(again(x), ref(pixel_values=x).pooler_output) <= 1e-4

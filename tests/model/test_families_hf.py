"""Model families in Hugging Face's layouts (folders written by ``save_pretrained``): DINO (``ViTModel``),
``Dinov2Model`` and ``Dinov2WithRegistersModel`` (with the giant's SwiGLU), CLIP (``CLIPVisionModel`` and
``...WithProjection``), SigLIP (``SiglipVisionModel``: the attention-pool head), BEiT (relative position bias per
layer, mean pooling, classifier) and data2vec-vision (shared relative position bias). Each test builds a tiny
random-weight transformers model, loads the folder with vitviz, and compares outputs and every layer's attention
(``output_attentions``) at the native and at a second input size (``interpolate_pos_encoding``)."""

from __future__ import annotations

import pytest
import torch
from family_helpers import check_against_reference, randomise_, rel_err, save_hf_folder

from vitviz.model import load_checkpoint
from vitviz.model.preprocess import IMAGENET_MEAN, INCEPTION_MEAN
from vitviz.model.spec import CLIP_MEAN

T = pytest.importorskip("transformers")


def _build(model_cls, config_cls, model_kw: dict | None = None, **cfg):
    torch.manual_seed(0)
    m = model_cls(config_cls(attn_implementation="eager", **cfg), **(model_kw or {}))
    return randomise_(m)




def _reference(model, pick, *, interpolate: bool = True, pool: bool = False):
    def ref(x):
        kw = {"interpolate_pos_encoding": True} if interpolate else {}
        with torch.no_grad():
            out = model(pixel_values=x, output_attentions=True, **kw)
        pool_attn = None
        if pool:  # SigLIP's head: nn.MultiheadAttention of the probe over the normed tokens
            head = model.vision_model.head if hasattr(model, "vision_model") else model.head
            h = out.last_hidden_state
            with torch.no_grad():
                _, w = head.attention(head.probe.expand(h.shape[0], -1, -1), h, h, need_weights=True,
                                      average_attn_weights=False)
            pool_attn = w[:, :, 0]
        return pick(out), list(out.attentions), pool_attn
    return ref


SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2)


def test_dino_hf_vitmodel(tmp_path):
    """DINO on the hub is a ViTModel (no classifier): the [CLS] features, ImageNet preprocessing from its
    preprocessor_config.json, HF's bicubic position-embedding resampling."""
    ref = _build(T.ViTModel, T.ViTConfig, intermediate_size=64, image_size=32, patch_size=8, **SMALL)
    pp = {"do_resize": True, "size": {"height": 32, "width": 32}, "resample": 3, "do_normalize": True,
          "image_mean": list(IMAGENET_MEAN), "image_std": [0.229, 0.224, 0.225]}
    ours = load_checkpoint(save_hf_folder(ref, tmp_path / "dino", pp))
    assert ours.spec.source_format == "hf" and ours.config.num_classes == 0
    assert ours.config.pos_embed_interp == "bicubic" and ours.spec.preprocess.mean == IMAGENET_MEAN
    check_against_reference(ours, _reference(ref, lambda o: o.last_hidden_state[:, 0]), [(32, 32), (48, 40)],
                            prefix=1)


@pytest.mark.parametrize("registers, swiglu", [(0, False), (4, False), (4, True)])
def test_dinov2_hf(tmp_path, registers, swiglu):
    kw = dict(image_size=28, patch_size=14, mlp_ratio=2, use_swiglu_ffn=swiglu, layerscale_value=0.5, **SMALL)
    if registers:
        ref = _build(T.Dinov2WithRegistersModel, T.Dinov2WithRegistersConfig, num_register_tokens=registers, **kw)
    else:
        ref = _build(T.Dinov2Model, T.Dinov2Config, **kw)
    ours = load_checkpoint(save_hf_folder(ref, tmp_path / "dinov2"))
    c = ours.config
    assert ours.spec.source_format == "hf-dinov2" and c.num_reg_tokens == registers and c.init_values is not None
    assert c.mlp_layer == ("swiglu" if swiglu else "mlp") and c.no_embed_class == bool(registers)
    assert c.pos_embed_interp == ("timm" if registers else "bicubic")
    assert ours.spec.preprocess.mean == IMAGENET_MEAN and ours.spec.preprocess.resize == 28  # DINOv2's default
    check_against_reference(ours, _reference(ref, lambda o: o.pooler_output, interpolate=False),
                            [(28, 28), (56, 42)], prefix=1 + registers, registers=registers)


@pytest.mark.parametrize("projection, act", [(False, "quick_gelu"), (True, "gelu")])
def test_clip_hf(tmp_path, projection, act):
    cfg = dict(intermediate_size=64, image_size=32, patch_size=8, hidden_act=act, **SMALL)
    if projection:
        ref = _build(T.CLIPVisionModelWithProjection, T.CLIPVisionConfig, projection_dim=16, **cfg)
        pick = lambda o: o.image_embeds  # noqa: E731
    else:
        ref = _build(T.CLIPVisionModel, T.CLIPVisionConfig, **cfg)
        pick = lambda o: o.pooler_output  # noqa: E731
    ours = load_checkpoint(save_hf_folder(ref, tmp_path / "clip"))
    c = ours.config
    assert ours.spec.source_format == "hf-clip" and c.pre_norm and not c.patch_bias and c.act_layer == act
    assert c.num_classes == (16 if projection else 0) and not (projection and c.head_bias)
    assert ours.spec.preprocess.mean == CLIP_MEAN
    check_against_reference(ours, _reference(ref, pick), [(32, 32), (40, 48)], prefix=1)


def test_siglip_hf(tmp_path):
    ref = _build(T.SiglipVisionModel, T.SiglipVisionConfig, intermediate_size=64, image_size=32, patch_size=8,
                 **SMALL)
    ours = load_checkpoint(save_hf_folder(ref, tmp_path / "siglip"))
    c = ours.config
    assert ours.spec.source_format == "hf-siglip" and c.global_pool == "map" and c.num_prefix_tokens == 0
    assert c.act_layer == "gelu_tanh" and ours.spec.preprocess.mean == INCEPTION_MEAN
    check_against_reference(ours, _reference(ref, lambda o: o.pooler_output, pool=True), [(32, 32), (48, 40)],
                            prefix=0)


def test_beit_hf_classifier(tmp_path):
    """BEiT: relative position bias per layer, LayerScale, q/v biases (no key bias), mean pooling + fc_norm, a
    classifier with gradients; the tables resized bilinearly at another size as transformers does."""
    ref = _build(T.BeitForImageClassification, T.BeitConfig, intermediate_size=64, image_size=32, patch_size=8,
                 use_relative_position_bias=True, use_mean_pooling=True, num_labels=3, layer_scale_init_value=0.5,
                 **SMALL)
    ours = load_checkpoint(save_hf_folder(ref, tmp_path / "beit"))
    c = ours.config
    assert ours.spec.source_format == "hf-beit" and c.rel_pos_bias == "layer" and c.pos_embed == "none"
    assert c.global_pool == "avg" and c.fc_norm and c.rel_pos_interp == "bilinear"
    torch.testing.assert_close(ours.blocks[0].attn.qkv.bias[32:64], torch.zeros(32))  # the key part
    check_against_reference(ours, _reference(ref, lambda o: o.logits), [(32, 32), (48, 48)], prefix=1, target=2)


def test_data2vec_vision_hf_shared_bias(tmp_path):
    ref = _build(T.Data2VecVisionModel, T.Data2VecVisionConfig, {"add_pooling_layer": True}, intermediate_size=64,
                 image_size=32, patch_size=8,
                 use_shared_relative_position_bias=True, use_relative_position_bias=False,
                 layer_scale_init_value=0.5, **SMALL)
    ours = load_checkpoint(save_hf_folder(ref, tmp_path / "d2v"))
    assert ours.spec.source_format == "hf-beit" and ours.config.rel_pos_bias == "shared"
    check_against_reference(ours, _reference(ref, lambda o: o.pooler_output), [(32, 32), (40, 40)], prefix=1)


def test_data2vec_vision_without_its_pooler_is_refused_clearly(tmp_path):
    """Saved with add_pooling_layer=False, a mean-pooling data2vec model has no final LayerNorm at all: a clear error
    naming the file and what to do, not a list of missing keys."""
    from vitviz.model import CheckpointError

    ref = _build(T.Data2VecVisionModel, T.Data2VecVisionConfig, {"add_pooling_layer": False}, intermediate_size=64,
                 image_size=32, patch_size=8, use_mean_pooling=True, **SMALL)
    folder = save_hf_folder(ref, tmp_path / "d2v_nopool")
    with pytest.raises(CheckpointError, match="without its final LayerNorm") as e:
        load_checkpoint(folder)
    assert "d2v_nopool" in str(e.value) and "add_pooling_layer=True" in str(e.value)


def test_hf_families_are_not_confused(tmp_path):
    """Each folder is read by its own layout module, and a model whose activation vitviz lacks is refused by name."""
    ref = _build(T.ViTModel, T.ViTConfig, intermediate_size=64, image_size=32, patch_size=8, hidden_act="relu",
                 **SMALL)
    from vitviz.model import CheckpointError

    with pytest.raises(CheckpointError, match="unsupported activation hidden_act='relu'"):
        load_checkpoint(save_hf_folder(ref, tmp_path / "relu"))
    x = torch.randn(1, 3, 32, 32)
    m = _build(T.ViTModel, T.ViTConfig, intermediate_size=64, image_size=32, patch_size=8, **SMALL)
    ours = load_checkpoint(save_hf_folder(m, tmp_path / "vit"))
    with torch.no_grad():
        assert rel_err(ours(x), m(pixel_values=x).last_hidden_state[:, 0]) <= 1e-4


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_two_tower_models_load_their_image_tower(tmp_path, kind):
    """A full CLIPModel / SiglipModel folder: the text tower's keys are ignored, the vision_config is read."""
    vis = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32,
               patch_size=8)
    txt = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=64,
               max_position_embeddings=16)
    if kind == "clip":
        cfg = T.CLIPConfig(text_config=txt, vision_config={**vis, "hidden_act": "gelu"}, projection_dim=16)
        model = T.CLIPModel(cfg)
    else:
        cfg = T.SiglipConfig(text_config=txt, vision_config=vis)
        model = T.SiglipModel(cfg)
    randomise_(model)
    ours = load_checkpoint(save_hf_folder(model, tmp_path / kind))
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        if kind == "clip":
            assert ours.config.act_layer == "gelu" and ours.config.num_classes == 16  # from vision_config
            want = model.get_image_features(pixel_values=x)
        else:
            want = model.vision_model(pixel_values=x).pooler_output
        want = getattr(want, "pooler_output", want)
        assert rel_err(ours(x), want) <= 1e-4

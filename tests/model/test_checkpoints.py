"""Checkpoint loading: logit equivalence with torchvision / timm / HF / Google npz on the same random weights,
architecture inference, overrides, preprocessing defaults, the native round trip, and every bad-input case."""

from __future__ import annotations

import json
import pickle
import re
import warnings
import zipfile

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from vitviz.model import CheckpointError, ViT, load_checkpoint, save_checkpoint
from vitviz.model.preprocess import IMAGENET_MEAN, IMAGENET_STD, INCEPTION_MEAN, Preprocess
from vitviz.model.spec import ModelSpec

timm = pytest.importorskip("timm")
torchvision = pytest.importorskip("torchvision")

ATOL = RTOL = 1e-4


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=ATOL, rtol=RTOL)


def _logits(model, x):
    with torch.no_grad():
        out = model(x)
    return getattr(out, "logits", out)


# ------------------------------------------------------------------------------------------------ torchvision
def _tv_small(**kw):
    from torchvision.models.vision_transformer import VisionTransformer

    cfg = dict(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10)
    cfg.update(kw)
    m = VisionTransformer(**cfg).eval()
    with torch.no_grad():  # torchvision zero-initialises the head and the position embedding is tiny: randomise
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return m


@pytest.mark.parametrize("mlp_spelling", ["mlp.0", "mlp.linear_1"])
def test_torchvision_small_config(tmp_path, mlp_spelling):
    ref = _tv_small()
    sd = ref.state_dict()
    assert any(".mlp.0." in k for k in sd)
    if mlp_spelling == "mlp.linear_1":  # the older torchvision spelling
        sd = {k.replace(".mlp.0.", ".mlp.linear_1.").replace(".mlp.3.", ".mlp.linear_2."): v for k, v in sd.items()}
    path = tmp_path / "tv.pth"
    torch.save(sd, path)
    ours = load_checkpoint(path, num_heads=4)
    assert ours.spec.source_format == "torchvision"
    c = ours.config
    assert (c.embed_dim, c.depth, c.num_heads, c.patch_size, c.img_size, c.num_classes) == (64, 2, 4, 8, (32, 32), 10)
    assert c.mlp_ratio == 2.0 and c.layer_norm_eps == 1e-6
    x = torch.randn(3, 3, 32, 32)
    assert _close(_logits(ours, x), _logits(ref, x))
    # torchvision defaults: resize 256 bilinear is for 224 px; here (32 px) resize = crop, ImageNet mean/std
    assert ours.spec.preprocess.mean == IMAGENET_MEAN and ours.spec.preprocess.std == IMAGENET_STD


def test_torchvision_vit_b_16_architecture(tmp_path):
    from torchvision.models import vit_b_16

    ref = vit_b_16().eval()  # random weights, the real architecture
    with torch.no_grad():
        ref.heads.head.weight.normal_(0, 0.02)
        ref.encoder.pos_embedding.normal_(0, 0.02)
    path = tmp_path / "vit_b_16.pth"
    torch.save(ref.state_dict(), path)
    ours = load_checkpoint(path)  # heads inferred: 768 -> 12
    c = ours.config
    assert (c.embed_dim, c.depth, c.num_heads, c.patch_size, c.img_size, c.num_classes) == (
        768, 12, 12, 16, (224, 224), 1000)
    p = ours.spec.preprocess
    assert (p.resize, p.crop, p.interpolation, p.mean, p.std) == (256, (224, 224), "bilinear", IMAGENET_MEAN,
                                                                  IMAGENET_STD)
    assert ours.spec.labels is not None and ours.spec.label(281) == "tabby"
    x = torch.randn(1, 3, 224, 224)
    assert _close(_logits(ours, x), _logits(ref, x))


# ------------------------------------------------------------------------------------------------ timm
@pytest.mark.parametrize("name,container,size", [
    ("vit_tiny_patch16_224", "safetensors", 224),
    ("deit_tiny_distilled_patch16_224", "wrapped-pth", 224),
    ("vit_small_patch16_384", "pth", 384),
])
def test_timm_named_models(tmp_path, name, container, size):
    ref = timm.create_model(name, pretrained=False).eval()
    with torch.no_grad():
        ref.head.weight.normal_(0, 0.02)  # timm zero-initialises heads
        if getattr(ref, "head_dist", None) is not None:
            ref.head_dist.weight.normal_(0, 0.02)
    sd = {k: v.contiguous() for k, v in ref.state_dict().items()}
    if container == "safetensors":
        path = tmp_path / f"{name}.safetensors"
        save_file(sd, str(path))
    elif container == "wrapped-pth":  # DeiT's released files: {"model": state_dict}
        path = tmp_path / f"{name}.pth"
        torch.save({"model": sd, "epoch": 300}, path)
    else:
        path = tmp_path / f"{name}.pth"
        torch.save(sd, path)
    ours = load_checkpoint(path)
    assert ours.spec.source_format == "timm"
    assert ours.config.img_size == (size, size)
    assert ours.config.num_heads == ref.blocks[0].attn.num_heads
    assert ours.config.distilled == name.startswith("deit")
    x = torch.randn(1, 3, size, size)
    assert _close(_logits(ours, x), _logits(ref, x))
    pre = ours.spec.preprocess
    if name.startswith("deit"):
        assert pre.mean == IMAGENET_MEAN and pre.crop == (224, 224) and pre.resize == 256
    else:
        assert pre.mean == INCEPTION_MEAN and pre.interpolation == "bicubic"
        assert pre.resize == (256 if size == 224 else size)


@pytest.mark.parametrize("variant", ["reg4_gap", "reg2_cls", "fc_norm_avg"])
def test_timm_register_tokens_and_pooling(tmp_path, variant):
    from timm.models.vision_transformer import VisionTransformer

    kw = dict(img_size=48, patch_size=16, embed_dim=64, depth=2, num_heads=2, num_classes=5)
    if variant == "reg4_gap":  # as timm's vit_*_reg4_gap_*: no CLS, registers, no pos for prefix, avg pool, no fc_norm
        kw.update(reg_tokens=4, class_token=False, no_embed_class=True, global_pool="avg", fc_norm=False)
    elif variant == "reg2_cls":
        kw.update(reg_tokens=2)
    else:
        kw.update(global_pool="avg", fc_norm=True)
    ref = VisionTransformer(**kw).eval()
    with torch.no_grad():
        ref.head.weight.normal_(0, 0.05)
    path = tmp_path / "t.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    ours = load_checkpoint(path)  # 64 -> head_dim 64 would say 1 head: the config is not in the file
    assert ours.config.num_heads == 1
    ours = load_checkpoint(path, num_heads=2)
    c = ours.config
    assert c.num_reg_tokens == kw.get("reg_tokens", 0)
    assert c.global_pool == kw.get("global_pool", "token")
    assert c.no_embed_class == kw.get("no_embed_class", False)
    assert c.fc_norm == kw.get("fc_norm", False)
    x = torch.randn(2, 3, 48, 48)
    assert _close(_logits(ours, x), _logits(ref, x))


@pytest.mark.parametrize("new_size", [96, (64, 112)])
def test_other_resolution_matches_timm_resampling(tmp_path, new_size):
    from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn

    src = VisionTransformer(img_size=64, patch_size=16, embed_dim=64, depth=2, num_heads=2, num_classes=5).eval()
    with torch.no_grad():
        src.pos_embed.normal_(0, 0.5)  # a rough embedding so that resampling matters
        src.head.weight.normal_(0, 0.05)
    path = tmp_path / "t.safetensors"
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(path))
    ref = VisionTransformer(img_size=new_size, patch_size=16, embed_dim=64, depth=2, num_heads=2, num_classes=5).eval()
    ref.load_state_dict(checkpoint_filter_fn(src.state_dict(), ref))
    ours = load_checkpoint(path, num_heads=2, img_size=new_size)
    hw = (new_size, new_size) if isinstance(new_size, int) else new_size
    assert ours.config.img_size == hw
    assert torch.allclose(ours.pos_embed, ref.pos_embed, atol=1e-6)
    x = torch.randn(2, 3, *hw)
    assert _close(_logits(ours, x), _logits(ref, x))
    assert ours.spec.preprocess.crop == hw


# ------------------------------------------------------------------------------------------------ Hugging Face
def _hf_model(kind="cls"):
    from transformers import ViTConfig, ViTForImageClassification, ViTModel

    cfg = ViTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256, image_size=32,
                    patch_size=8, num_labels=4, id2label={0: "ant", 1: "bee", 2: "cat", 3: "dog"},
                    label2id={"ant": 0, "bee": 1, "cat": 2, "dog": 3})
    m = (ViTForImageClassification(cfg) if kind == "cls" else ViTModel(cfg, add_pooling_layer=True)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return m


def test_hf_save_pretrained_directory(tmp_path):
    from transformers import ViTImageProcessor

    ref = _hf_model()
    ref.save_pretrained(tmp_path / "hf")
    ViTImageProcessor(size={"height": 32, "width": 32}, resample=3, image_mean=[0.4, 0.5, 0.6],
                      image_std=[0.2, 0.3, 0.4]).save_pretrained(tmp_path / "hf")
    ours = load_checkpoint(tmp_path / "hf")
    assert ours.spec.source_format == "hf"
    c = ours.config
    assert ((c.embed_dim, c.depth, c.num_heads, c.patch_size, c.num_classes, c.layer_norm_eps)
            == (128, 2, 2, 8, 4, 1e-12))
    assert ours.spec.labels == ("ant", "bee", "cat", "dog")
    p = ours.spec.preprocess
    assert (p.resize, p.crop, p.interpolation, p.mean, p.std) == ((32, 32), (32, 32), "bicubic", (0.4, 0.5, 0.6),
                                                                  (0.2, 0.3, 0.4))
    x = torch.randn(2, 3, 32, 32)
    assert _close(_logits(ours, x), ref(pixel_values=x).logits.detach())


def test_hf_pytorch_model_bin_and_bare_weights(tmp_path):
    ref = _hf_model()
    ref.save_pretrained(tmp_path / "hf")
    x = torch.randn(2, 3, 32, 32)
    want = ref(pixel_values=x).logits.detach()
    # a directory with pytorch_model.bin instead of safetensors
    d = tmp_path / "bin"
    d.mkdir()
    (d / "config.json").write_text((tmp_path / "hf" / "config.json").read_text())
    torch.save(ref.state_dict(), d / "pytorch_model.bin")
    ours = load_checkpoint(d)
    assert _close(_logits(ours, x), want) and ours.spec.labels == ("ant", "bee", "cat", "dog")
    # the bare weights file: no config (heads from head_dim 64 = 128/64 = 2), default 0.5 preprocessing
    bare = load_checkpoint(tmp_path / "hf" / "model.safetensors")
    assert bare.spec.source_format == "hf" and bare.config.num_heads == 2 and bare.spec.labels is None
    assert bare.spec.preprocess.mean == INCEPTION_MEAN and bare.spec.preprocess.resize == (32, 32)
    assert _close(_logits(bare, x), want)


def test_hf_in_memory_state_dict_new_key_names():
    """transformers >= 5 names parameters ``vit.layers.N.attention.q_proj`` in memory (files keep the old names)."""
    ref = _hf_model()
    sd = ref.state_dict()
    ours = load_checkpoint(sd, num_heads=2)
    assert ours.spec.source_format == "hf"
    x = torch.randn(2, 3, 32, 32)
    assert _close(_logits(ours, x), ref(pixel_values=x).logits.detach())


def test_hf_vit_model_without_head(tmp_path):
    ref = _hf_model("base")
    ref.save_pretrained(tmp_path / "m")
    ours = load_checkpoint(tmp_path / "m")  # the pooler is not used: features are the final-norm CLS token
    assert ours.config.num_classes == 0
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = ref(pixel_values=x).last_hidden_state[:, 0]
    assert _close(_logits(ours, x), want)


# ------------------------------------------------------------------------------------------------ Google npz
def _timm_to_google(ref, big_vision: bool = False) -> dict[str, np.ndarray]:
    """Write a timm ViT's weights in Google's layout (vit_jax, or big_vision's stacked 'params/' layout)."""
    sd = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    D = sd["cls_token"].shape[-1]
    H = ref.blocks[0].attn.num_heads
    hd = D // H
    out = {
        "embedding/kernel": sd["patch_embed.proj.weight"].transpose(2, 3, 1, 0),  # OIHW -> HWIO
        "embedding/bias": sd["patch_embed.proj.bias"],
        "cls": sd["cls_token"],
        "Transformer/encoder_norm/scale": sd["norm.weight"],
        "Transformer/encoder_norm/bias": sd["norm.bias"],
        "head/kernel": sd["head.weight"].T,
        "head/bias": sd["head.bias"],
    }
    mha, mlp, ln2 = ("MultiHeadDotProductAttention_0", "MlpBlock_0", "LayerNorm_1") if big_vision else (
        "MultiHeadDotProductAttention_1", "MlpBlock_3", "LayerNorm_2")
    blocks = []
    for i in range(len(ref.blocks)):
        b = f"blocks.{i}."
        w, bias = sd[b + "attn.qkv.weight"], sd[b + "attn.qkv.bias"]
        blk = {
            "LayerNorm_0/scale": sd[b + "norm1.weight"], "LayerNorm_0/bias": sd[b + "norm1.bias"],
            f"{ln2}/scale": sd[b + "norm2.weight"], f"{ln2}/bias": sd[b + "norm2.bias"],
            f"{mlp}/Dense_0/kernel": sd[b + "mlp.fc1.weight"].T, f"{mlp}/Dense_0/bias": sd[b + "mlp.fc1.bias"],
            f"{mlp}/Dense_1/kernel": sd[b + "mlp.fc2.weight"].T, f"{mlp}/Dense_1/bias": sd[b + "mlp.fc2.bias"],
            f"{mha}/out/kernel": sd[b + "attn.proj.weight"].T.reshape(H, hd, D),
            f"{mha}/out/bias": sd[b + "attn.proj.bias"],
        }
        for j, n in enumerate(("query", "key", "value")):
            blk[f"{mha}/{n}/kernel"] = w[j * D:(j + 1) * D].T.reshape(D, H, hd)
            blk[f"{mha}/{n}/bias"] = bias[j * D:(j + 1) * D].reshape(H, hd)
        blocks.append(blk)
    if big_vision:
        out["pos_embedding"] = sd["pos_embed"]
        for k in blocks[0]:
            out[f"Transformer/encoderblock/{k}"] = np.stack([blk[k] for blk in blocks])
        out = {f"params/{k}": v for k, v in out.items()}
        out["opt/state/step"] = np.zeros(1)  # optimizer state outside the params: ignored
    else:
        out["Transformer/posembed_input/pos_embedding"] = sd["pos_embed"]
        for i, blk in enumerate(blocks):
            out.update({f"Transformer/encoderblock_{i}/{k}": v for k, v in blk.items()})
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


@pytest.mark.parametrize("big_vision", [False, True], ids=["vit_jax", "big_vision_stacked"])
def test_google_npz(tmp_path, big_vision):
    from timm.models.vision_transformer import VisionTransformer, _load_weights

    kw = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=6)
    src = VisionTransformer(**kw).eval()
    with torch.no_grad():
        src.head.weight.normal_(0, 0.05)
    path = tmp_path / "ViT-X_8.npz"
    np.savez(path, **_timm_to_google(src, big_vision))
    # independent reference: timm's own npz reader
    ref = VisionTransformer(**kw).eval()
    _load_weights(ref, str(path))
    x = torch.randn(2, 3, 32, 32)
    want = _logits(ref, x)
    assert _close(want, _logits(src, x))  # the test's writer is right
    ours = load_checkpoint(path)  # heads from the per-head kernels
    assert ours.spec.source_format == "npz" and ours.config.num_heads == 4
    assert ours.spec.preprocess.mean == INCEPTION_MEAN
    assert _close(_logits(ours, x), want)


def test_npz_pre_logits_is_refused_unless_head_replaced(tmp_path):
    from timm.models.vision_transformer import VisionTransformer

    src = VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=4, num_classes=6).eval()
    arrays = _timm_to_google(src)
    arrays["pre_logits/kernel"] = np.zeros((64, 64), np.float32)
    arrays["pre_logits/bias"] = np.zeros(64, np.float32)
    path = tmp_path / "in21k.npz"
    np.savez(path, **arrays)
    with pytest.raises(CheckpointError, match="pre_logits/kernel.*num_classes=0"):
        load_checkpoint(path)
    feats = load_checkpoint(path, num_classes=0)
    assert feats(torch.randn(1, 3, 32, 32)).shape == (1, 64)


# ------------------------------------------------------------------------------------------------ overrides
def _timm_small_file(tmp_path, **kw):
    from timm.models.vision_transformer import VisionTransformer

    cfg = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=1000)
    cfg.update(kw)
    ref = VisionTransformer(**cfg).eval()
    path = tmp_path / "small.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    return ref, path


def test_num_classes_override(tmp_path):
    ref, path = _timm_small_file(tmp_path)
    base = load_checkpoint(path, num_heads=4)
    assert base.spec.labels is not None and len(base.spec.labels) == 1000  # 1000 classes: ImageNet names
    feats = load_checkpoint(path, num_heads=4, num_classes=0)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = ref.forward_head(ref.forward_features(x), pre_logits=True)
    assert _close(feats(x), want)
    new = load_checkpoint(path, num_heads=4, num_classes=7)
    assert _logits(new, x).shape == (2, 7) and new.spec.labels is None
    assert torch.equal(new.blocks[1].mlp.fc2.weight, ref.blocks[1].mlp.fc2.weight)


def test_preprocess_and_labels_arguments(tmp_path):
    _, path = _timm_small_file(tmp_path, num_classes=3)
    assert load_checkpoint(path, num_heads=4).spec.preprocess.mean == INCEPTION_MEAN
    assert load_checkpoint(path, num_heads=4, preprocess="imagenet").spec.preprocess.mean == IMAGENET_MEAN
    custom = Preprocess(resize=40, crop=(32, 32), interpolation="bilinear", mean=(0.1,) * 3, std=(0.2,) * 3)
    assert load_checkpoint(path, num_heads=4, preprocess=custom).spec.preprocess == custom
    with pytest.raises(ValueError, match="preprocess='caffe'"):
        load_checkpoint(path, num_heads=4, preprocess="caffe")
    m = load_checkpoint(path, num_heads=4, labels=["a", "b", "c"])
    assert m.spec.label(2) == "c"
    with pytest.raises(ValueError, match="2 names but the model has 3 classes"):
        load_checkpoint(path, num_heads=4, labels=["a", "b"])


def test_training_checkpoint_with_args(tmp_path):
    """timm/DeiT training checkpoints: {"model" or "state_dict": ..., "args": Namespace, "optimizer": ...}."""
    import argparse

    ref, _ = _timm_small_file(tmp_path, num_classes=5)
    p = tmp_path / "checkpoint-10.pth.tar"
    torch.save({"epoch": 10, "args": argparse.Namespace(lr=0.1, model="vit"), "state_dict": ref.state_dict(),
                "optimizer": {"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 0.1}]}}, p)
    ours = load_checkpoint(p, num_heads=4)
    x = torch.randn(1, 3, 32, 32)
    assert _close(_logits(ours, x), _logits(ref, x))


def test_in_memory_state_dict_and_module_prefix(tmp_path):
    ref, _ = _timm_small_file(tmp_path, num_classes=5)
    sd = {f"module.{k}": v for k, v in ref.state_dict().items()}  # DataParallel
    ours = load_checkpoint({"state_dict": sd}, num_heads=4)
    assert ours.spec.source_path is None and ours.spec.source_format == "timm"
    x = torch.randn(1, 3, 32, 32)
    assert _close(_logits(ours, x), _logits(ref, x))


# ------------------------------------------------------------------------------------------------ native
def test_native_round_trip_keeps_everything(tmp_path):
    m = ViT(img_size=(32, 48), patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=3, pos_embed="sincos",
            num_reg_tokens=2, distilled=True, layer_norm_eps=1e-5).eval()
    with torch.no_grad():
        m.head.weight.normal_(0, 0.1)
    pre = Preprocess(resize=(36, 54), crop=(32, 48), interpolation="bilinear", mean=(0.1, 0.2, 0.3), std=(1, 2, 3))
    m.spec = ModelSpec(config=m.config, preprocess=pre, labels=("x", "y", "z"), name="demo")
    path = tmp_path / "demo.safetensors"
    assert save_checkpoint(m, path) == path
    back = load_checkpoint(path)
    assert back.config == m.config
    assert back.spec.preprocess == pre and back.spec.labels == ("x", "y", "z") and back.spec.name == "demo"
    assert back.spec.source_format == "native" and back.spec.source_path == str(path)
    x = torch.randn(2, 3, 32, 48)
    assert torch.equal(_logits(back, x), _logits(m, x))
    assert not back.training


def test_native_save_never_overwrites_silently(tmp_path):
    m = ViT(img_size=16, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=2)
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"user data")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_checkpoint(m, path)
    assert path.read_bytes() == b"user data"
    save_checkpoint(m, path, overwrite=True)
    assert load_checkpoint(path).config == m.config
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]  # no temporary left behind


def test_native_without_spec_gets_one(tmp_path):
    m = ViT(img_size=16, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=2)
    assert m.spec is None
    save_checkpoint(m, tmp_path / "m.safetensors")
    assert load_checkpoint(tmp_path / "m.safetensors").config == m.config


# ------------------------------------------------------------------------------------------------ bad input
def test_not_a_checkpoint(tmp_path):
    cases = {
        "notes.txt": b"just some text\n",
        "random.bin": bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)),
        "empty.pth": b"",
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(CheckpointError, match="not a checkpoint") as e:
            load_checkpoint(p)
        assert str(p) in str(e.value)
    z = tmp_path / "photos.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("a.jpg", b"xx")
    with pytest.raises(CheckpointError, match="not a checkpoint.*a.jpg"):
        load_checkpoint(z)
    p = tmp_path / "list.pth"
    torch.save([torch.zeros(2)], p)
    with pytest.raises(CheckpointError, match="not a checkpoint: it holds a list"):
        load_checkpoint(p)
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "nope.safetensors")
    raw = tmp_path / "plain.pkl"
    raw.write_bytes(pickle.dumps({"weight": [1.0, 2.0]}, protocol=4))
    with pytest.raises(CheckpointError, match="plain Python pickle"):
        load_checkpoint(raw)
    ts = tmp_path / "scripted.pt"
    with warnings.catch_warnings():  # torch.jit is deprecated, but such files are still around
        warnings.simplefilter("ignore")
        torch.jit.script(torch.nn.Linear(2, 2)).save(str(ts))
    with pytest.raises(CheckpointError, match="TorchScript archive"):
        load_checkpoint(ts)


@pytest.mark.parametrize("kind", ["safetensors", "pth", "legacy-pth", "npz"])
def test_truncated_file(tmp_path, kind):
    from timm.models.vision_transformer import VisionTransformer

    ref = VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=4, num_classes=3)
    full = tmp_path / f"full.{kind}"
    if kind == "safetensors":
        save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(full))
    elif kind == "pth":
        torch.save(ref.state_dict(), full)
    elif kind == "legacy-pth":
        torch.save(ref.state_dict(), full, _use_new_zipfile_serialization=False)
    else:
        np.savez(full, **_timm_to_google(ref))
    data = full.read_bytes()
    cut = tmp_path / f"cut.{kind}"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(CheckpointError, match="truncated") as e:
        load_checkpoint(cut)
    assert str(cut) in str(e.value)
    load_checkpoint(full, num_heads=4)  # the intact file loads


def test_unknown_format_lists_formats_tried(tmp_path):
    p = tmp_path / "resnet.safetensors"
    save_file({"conv1.weight": torch.zeros(4, 3, 3, 3), "fc.weight": torch.zeros(2, 4)}, str(p))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(p)
    msg = str(e.value)
    assert str(p) in msg and "unknown checkpoint format" in msg and "'conv1.weight'" in msg
    for fmt in ("native", "timm", "torchvision", "Hugging Face", "npz"):
        assert fmt in msg


def test_missing_and_unexpected_keys_are_named(tmp_path):
    ref, _ = _timm_small_file(tmp_path, num_classes=3)
    sd = dict(ref.state_dict())
    del sd["blocks.1.norm2.weight"]
    with pytest.raises(CheckpointError, match=r"missing keys 'blocks\.1\.norm2\.weight'"):
        load_checkpoint(sd, num_heads=4)
    sd = dict(ref.state_dict())
    sd["blocks.0.attn.q_norm.weight"] = torch.ones(16)
    with pytest.raises(CheckpointError, match=r"unexpected keys 'blocks\.0\.attn\.q_norm\.weight'"):
        load_checkpoint(sd, num_heads=4)
    # torchvision names are reported in torchvision's spelling
    tv = dict(_tv_small().state_dict())
    tv["encoder.layers.encoder_layer_0.extra.weight"] = torch.ones(3)
    with pytest.raises(CheckpointError, match="encoder_layer_0.extra.weight"):
        load_checkpoint(tv, num_heads=4)


def test_shape_mismatch_names_tensor_and_shapes(tmp_path):
    tv = dict(_tv_small().state_dict())
    k = "encoder.layers.encoder_layer_1.mlp.3.weight"
    tv[k] = torch.zeros(64, 100)
    path = tmp_path / "tv.pth"
    torch.save(tv, path)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path, num_heads=4)
    msg = str(e.value)
    assert str(path) in msg and k in msg and "(64, 100)" in msg and "(64, 128)" in msg


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_pickle_with_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    p = tmp_path / "evil.pth"
    torch.save({"weight": torch.zeros(2), "payload": _Evil(marker)}, p)
    assert not marker.exists()
    with pytest.raises(CheckpointError, match="refused.*Python code") as e:
        load_checkpoint(p)
    assert str(p) in str(e.value) and re.search(r"\((io|builtins|_io)\.open\)", str(e.value))  # names the global
    assert "weights_only` set to `False`" not in str(e.value)  # torch's advice to switch the safety off is dropped
    assert not marker.exists()
    # the same with a legacy (non-zip) torch file
    p2 = tmp_path / "evil_legacy.pth"
    torch.save({"payload": _Evil(marker)}, p2, _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(p2)
    assert not marker.exists()
    # an .npz with object arrays needs pickle: refused too
    p3 = tmp_path / "objects.npz"
    np.savez(p3, a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(CheckpointError, match="refused.*pickled objects"):
        load_checkpoint(p3)


def test_hf_directory_problems(tmp_path):
    d = tmp_path / "empty_dir"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "vit"}))
    with pytest.raises(CheckpointError, match="no model.safetensors or pytorch_model.bin"):
        load_checkpoint(d)
    (d / "model-00001-of-00002.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="sharded"):
        load_checkpoint(d)


def test_heads_cannot_be_inferred(tmp_path):
    ref, _ = _timm_small_file(tmp_path, embed_dim=48, num_heads=4, num_classes=3)
    with pytest.raises(CheckpointError, match="num_heads="):
        load_checkpoint(ref.state_dict())
    assert load_checkpoint(ref.state_dict(), num_heads=4).config.num_heads == 4


@pytest.mark.parametrize("width,heads", [(192, 3), (384, 6), (768, 12), (1024, 16), (1280, 16), (512, 8)])
def test_heads_from_width(width, heads):
    """The paper's table (ViT-H/14: 1280 wide, 16 heads of 80), otherwise head_dim 64."""
    from vitviz.model.checkpoints import Converted, infer_config

    state = {"patch_embed.proj.weight": torch.zeros(width, 3, 14, 14), "pos_embed": torch.zeros(1, 1 + 16 * 16, width),
             "cls_token": torch.zeros(1, 1, width)}
    cfg = infer_config(Converted(state, {}, []), "<test>")
    assert (cfg.num_heads, cfg.patch_size, cfg.img_size, cfg.depth, cfg.num_classes) == (heads, 14, (224, 224), 0, 0)


def test_non_square_grid_and_bad_activation(tmp_path):
    ref, _ = _timm_small_file(tmp_path, num_classes=3)
    sd = dict(ref.state_dict())
    sd["pos_embed"] = torch.zeros(1, 1 + 12, 64)
    with pytest.raises(CheckpointError, match="13 slots.*not a square"):
        load_checkpoint(sd, num_heads=4)
    hf = _hf_model()
    hf.save_pretrained(tmp_path / "hf")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["hidden_act"] = "relu"
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="hidden_act='relu'"):
        load_checkpoint(tmp_path / "hf")


def test_img_size_not_multiple_of_patch(tmp_path):
    _, path = _timm_small_file(tmp_path, num_classes=3)
    with pytest.raises(CheckpointError,
                       match=r"small.safetensors.*img_size height 50 is not a multiple of patch_size=8"):
        load_checkpoint(path, num_heads=4, img_size=50)


def test_mlp_width_that_float_rounding_would_lose():
    """120 / 88 * 88 == 119.99999999999999: the inferred ratio must still rebuild a 120-wide MLP."""
    m = ViT(img_size=16, patch_size=8, embed_dim=88, depth=1, num_heads=2, num_classes=2, mlp_ratio=2.0)
    sd = dict(m.state_dict())
    sd["blocks.0.mlp.fc1.weight"] = torch.randn(120, 88)
    sd["blocks.0.mlp.fc1.bias"] = torch.randn(120)
    sd["blocks.0.mlp.fc2.weight"] = torch.randn(88, 120)
    back = load_checkpoint(sd, num_heads=2)
    assert back.blocks[0].mlp.fc1.out_features == 120

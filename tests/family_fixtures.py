"""One tiny random-weight checkpoint of every model family vitviz reads, each written by its own library's save
function (timm state dicts, ``save_pretrained``, ``torch.save`` of open_clip / torchvision / DINOv2 / textbook
models, vitviz's native format). Used by the tests that run over every family (tests/model/test_key_guard.py)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from family_helpers import randomise_, write_timm_folder
from safetensors.torch import save_file


def _timm(name: str, **kw):
    import timm

    return randomise_(timm.create_model(name, pretrained=False, **kw))


def _timm_folder(arch: str, **kw) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        size = kw.get("img_size", 224)
        return write_timm_folder(folder, _timm(arch, **kw), arch, {"input_size": [3, size, size]})
    return build


def _pth(name: str, state: Callable[[], dict]) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        torch.save({k: v.detach().clone() for k, v in state().items()}, folder / name)
        return folder / name
    return build


def _hf(model_cls: str, config_cls: str, **cfg) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        import transformers as T

        torch.manual_seed(0)
        m = randomise_(getattr(T, model_cls)(getattr(T, config_cls)(**cfg)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.save_pretrained(folder)
        return folder
    return build


def _open_clip() -> dict:
    import open_clip

    torch.manual_seed(0)
    model = open_clip.CLIP(embed_dim=16, vision_cfg=dict(layers=2, width=32, head_width=16, patch_size=8,
                                                         image_size=32),
                           text_cfg=dict(context_length=8, vocab_size=64, width=32, heads=2, layers=1))
    return randomise_(model).state_dict()


def _torchvision() -> dict:
    from torchvision.models.vision_transformer import VisionTransformer

    return randomise_(VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64,
                                        mlp_dim=128, num_classes=10)).state_dict()


def _dinov2_original() -> dict:
    from timm.models.vision_transformer import VisionTransformer

    m = randomise_(VisionTransformer(img_size=28, patch_size=14, embed_dim=32, depth=2, num_heads=2, init_values=1.0,
                                     num_classes=0))
    return {**m.state_dict(), "mask_token": torch.zeros(1, 32)}


def _textbook_b() -> dict:
    from textbook_models import VisionTransformer

    return VisionTransformer(img_size=32, patch_size=8, in_channels=3, num_classes=10, d_model=32, num_heads=2,
                             num_layers=2, d_ff=64, dropout=0.0).state_dict()


def _open_clip_eva02(folder: Path) -> Path:
    """An open_clip folder of an ``EVA02-B-16``-shaped model (a timm trunk), its trunk small (head width 64)."""
    import open_clip
    import timm

    torch.manual_seed(0)
    vision = dict(image_size=32, timm_model_name="eva02_base_patch16_clip_224", timm_model_pretrained=False,
                  timm_pool="token", timm_proj=None)
    text = dict(context_length=8, vocab_size=64, width=32, heads=2, layers=1)
    model = open_clip.CLIP(embed_dim=16, vision_cfg=vision, text_cfg=text)
    model.visual.trunk = timm.create_model("eva02_base_patch16_clip_224", pretrained=False, num_classes=16,
                                           img_size=32, embed_dim=128, depth=2, num_heads=2, global_pool="token")
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(randomise_(model).state_dict(), folder / "open_clip_pytorch_model.bin")
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": {"embed_dim": 16, "vision_cfg": vision,
                                                                            "text_cfg": text}}))
    return folder


def _native(folder: Path) -> Path:
    from vitviz.model import create_model, save_checkpoint

    folder.mkdir(parents=True, exist_ok=True)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                     num_classes=5)
    save_checkpoint(m, folder / "native.safetensors")
    return folder / "native.safetensors"


SMALL_HF = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
                patch_size=8)

FAMILIES: dict[str, Callable[[Path], Path]] = {
    "timm-vit": _timm_folder("vit_base_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                             num_classes=5),
    "timm-dinov2-reg": _timm_folder("vit_small_patch14_reg4_dinov2", img_size=28, embed_dim=32, depth=2, num_heads=2,
                                    num_classes=0),
    "timm-clip": _timm_folder("vit_base_patch16_clip_224", img_size=32, patch_size=8, embed_dim=32, depth=2,
                              num_heads=2, num_classes=0),
    "timm-siglip": _timm_folder("vit_base_patch16_siglip_224", img_size=32, patch_size=8, embed_dim=32, depth=2,
                                num_heads=2, num_classes=0),
    "timm-eva02": _timm_folder("eva02_base_patch14_224", img_size=28, embed_dim=32, depth=2, num_heads=2,
                               num_classes=0),
    "timm-pe-core": _timm_folder("vit_pe_core_base_patch16_224", img_size=32, embed_dim=32, depth=2, num_heads=2,
                                 num_classes=0),
    "timm-dinov3": _timm_folder("vit_small_plus_patch16_dinov3", img_size=32, embed_dim=32, depth=2, num_heads=2,
                                num_classes=0),
    "timm-pe-spatial": _timm_folder("vit_pe_spatial_base_patch16_512", img_size=32, embed_dim=32, depth=2,
                                    num_heads=2, num_classes=0),
    "timm-rope-ape": _timm_folder("vit_small_patch16_rope_ape_224", img_size=32, embed_dim=32, depth=2, num_heads=2,
                                  num_classes=0),
    "timm-rope-mixed": _timm_folder("vit_small_patch16_rope_mixed_224", img_size=32, embed_dim=32, depth=2,
                                    num_heads=2, num_classes=0),
    "timm-aimv2": _timm_folder("aimv2_large_patch14_224", img_size=56, embed_dim=32, depth=2, num_heads=2,
                               num_classes=0),
    "timm-naflexvit": _timm_folder("naflexvit_base_patch16_gap", embed_dim=32, depth=2, num_heads=2, num_classes=0,
                                   pos_embed_grid_size=(4, 4), img_size=64),
    "timm-naflexvit-siglip": _timm_folder("naflexvit_base_patch16_siglip", embed_dim=32, depth=2, num_heads=2,
                                          num_classes=0, pos_embed_grid_size=(4, 4), img_size=64),
    "timm-beit": _pth("beit.pth", lambda: _timm("beit_base_patch16_224", img_size=32, patch_size=8, embed_dim=32,
                                                depth=2, num_heads=2, num_classes=5).state_dict()),
    "dinov2-original": _pth("dinov2.pth", _dinov2_original),
    "torchvision": _pth("tv.pth", _torchvision),
    "open_clip": _pth("ViT-T-8-laion.pt", _open_clip),
    "open_clip-eva02": _open_clip_eva02,
    "textbook-b": _pth("textbook.pth", _textbook_b),
    "native": _native,
    "hf-vit": _hf("ViTForImageClassification", "ViTConfig", num_labels=5, **SMALL_HF),
    "hf-dinov2": _hf("Dinov2Model", "Dinov2Config", **SMALL_HF),
    "hf-dinov2-swiglu": _hf("Dinov2WithRegistersModel", "Dinov2WithRegistersConfig", use_swiglu_ffn=True,
                            num_register_tokens=4, **SMALL_HF),
    "hf-dinov3": _hf("DINOv3ViTModel", "DINOv3ViTConfig", num_register_tokens=4, use_gated_mlp=True,
                     hidden_act="silu", **SMALL_HF),
    "hf-clip": _hf("CLIPVisionModel", "CLIPVisionConfig", **SMALL_HF),
    "hf-siglip": _hf("SiglipVisionModel", "SiglipVisionConfig", **SMALL_HF),
    "hf-siglip2-naflex": _hf("Siglip2VisionModel", "Siglip2VisionConfig", hidden_size=32, intermediate_size=64,
                             num_hidden_layers=2, num_attention_heads=2, patch_size=8, num_patches=16),
    "hf-aimv2": _hf("Aimv2VisionModel", "Aimv2VisionConfig", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=2, image_size=32, patch_size=8),
    "hf-aimv2-native": _hf("Aimv2VisionModel", "Aimv2VisionConfig", hidden_size=32, intermediate_size=48,
                           num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8, is_native=True,
                           use_head=False),
    "hf-beit": _hf("BeitForImageClassification", "BeitConfig", num_labels=5, use_relative_position_bias=True,
                   use_mean_pooling=True, layer_scale_init_value=0.1, **SMALL_HF),
}
"""family -> a builder writing that family's checkpoint under a folder and returning the path to load."""

ROPE_FAMILIES = ("timm-eva02", "timm-pe-core", "timm-pe-spatial", "timm-dinov3", "timm-rope-ape", "timm-rope-mixed")
"""The timm hub folders of :data:`FAMILIES` whose model rotates queries and keys (RoPE; settings in config.json)."""


def add_key(path: Path, name: str, value: torch.Tensor) -> None:
    """Add one tensor to the weights of a written checkpoint (a folder's safetensors / bin, or a .pth file)."""
    if path.is_dir() and (path / "open_clip_pytorch_model.bin").is_file():
        add_key(path / "open_clip_pytorch_model.bin", name, value)
    elif path.is_dir():
        st = next((path / n for n in ("model.safetensors", "native.safetensors") if (path / n).is_file()), None)
        if st is None:
            raise FileNotFoundError(f"no model.safetensors in {path}")
        from safetensors.torch import load_file

        sd = load_file(str(st))
        sd[name] = value
        save_file(sd, str(st), metadata={"format": "pt"})
    elif path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
            sd = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not a mapping
        sd[name] = value
        save_file(sd, str(path), metadata=meta)
    else:
        sd = torch.load(path, weights_only=True)
        sd[name] = value
        torch.save(sd, path)


def block_key(path: Path) -> str:
    """A key of the first block of a written checkpoint's image tower, for a stray key placed where a reader's rules
    look."""
    if path.is_dir():
        path = next(path / n for n in ("model.safetensors", "native.safetensors", "open_clip_pytorch_model.bin")
                    if (path / n).is_file())
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            keys = list(f.keys())
    else:
        keys = list(torch.load(path, weights_only=True))
    image = [k for k in keys if "visual." in k] or [k for k in keys if not k.startswith(("text", "transformer."))]
    return next(k for k in sorted(image) if ".0." in k and k.endswith("weight"))


def json_edit(folder: Path, name: str, **changes) -> None:
    """Change top-level fields of a folder's JSON file."""
    cfg = json.loads((folder / name).read_text())
    cfg.update(changes)
    (folder / name).write_text(json.dumps(cfg))

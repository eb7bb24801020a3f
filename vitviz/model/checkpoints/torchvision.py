"""torchvision ``VisionTransformer`` state dicts (``vit_b_16`` ...). No Qt."""

from __future__ import annotations

from vitviz.model.checkpoints.common import Converted, RawCheckpoint, rename
from vitviz.model.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from vitviz.model.vit import ViTConfig

NAME = "torchvision"
DESCRIPTION = "torchvision (conv_proj.weight)"

_L = r"encoder\.layers\.encoder_layer_(\d+)\."
RULES = [
    (r"conv_proj\.(weight|bias)", r"patch_embed.proj.\1"),
    (r"class_token", r"cls_token"),
    (r"encoder\.pos_embedding", r"pos_embed"),
    (_L + r"ln_1\.(weight|bias)", r"blocks.\1.norm1.\2"),
    (_L + r"self_attention\.in_proj_(weight|bias)", r"blocks.\1.attn.qkv.\2"),
    (_L + r"self_attention\.out_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (_L + r"ln_2\.(weight|bias)", r"blocks.\1.norm2.\2"),
    (_L + r"mlp\.(?:linear_1|0)\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
    (_L + r"mlp\.(?:linear_2|3)\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (r"encoder\.ln\.(weight|bias)", r"norm.\1"),
    (r"heads\.head\.(weight|bias)", r"head.\1"),
]


def detect(raw: RawCheckpoint) -> bool:
    """``conv_proj.weight`` and ``encoder.layers.encoder_layer_*`` keys."""
    keys = raw.tensors.keys()
    return "conv_proj.weight" in keys and any(k.startswith("encoder.layers.encoder_layer_") for k in keys)


def convert(raw: RawCheckpoint) -> Converted:
    """Rename torchvision's keys to ours; LayerNorm eps 1e-6."""
    c = rename(raw.tensors, RULES)
    c.config["layer_norm_eps"] = 1e-6
    return c


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """224 px: resize 256 bilinear, crop 224 (V1 weights); other sizes: SWAG E2E (resize = crop, bicubic)."""
    size = cfg.img_size
    if size == (224, 224):
        return Preprocess(resize=256, crop=size, interpolation="bilinear", mean=IMAGENET_MEAN, std=IMAGENET_STD)
    return Preprocess(resize=size[0] if size[0] == size[1] else size, crop=size, interpolation="bicubic",
                      mean=IMAGENET_MEAN, std=IMAGENET_STD)

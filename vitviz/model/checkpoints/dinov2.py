"""DINOv2's own ``.pth`` files (``dinov2_vits14_pretrain.pth``, ``dinov2_vits14_reg4_pretrain.pth`` ...; timm's
names already, plus ``mask_token``, ``register_tokens`` and the giant's ``mlp.w12`` / ``mlp.w3``), converted as timm's
``_convert_dinov2`` does. No Qt.

Register models: the [CLS] position slot is folded into the [CLS] token (``no_embed_class``). Position embeddings at
other sizes follow DINOv2's code: ``scale_factor`` with the 0.1 offset and no antialiasing (``"dino"``) for the
models without registers; bicubic with antialiasing to the size (``"timm"``) for the register models, which DINOv2
builds with ``interpolate_antialias=True, interpolate_offset=0``.
"""

from __future__ import annotations

from vitviz.model.checkpoints.common import MASK_TOKEN, Converted, RawCheckpoint, rename
from vitviz.model.preprocess import Preprocess
from vitviz.model.spec import family_preprocess
from vitviz.model.vit import ViTConfig

NAME = "dinov2"
DESCRIPTION = "DINOv2 original (mask_token + blocks.0.ls1.gamma)"

RULES = [
    (r"register_tokens", "reg_token"),
    (r"blocks\.(\d+)\.mlp\.w12\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
    (r"blocks\.(\d+)\.mlp\.w3\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (r"(.*)", r"\1"),
]


def detect(raw: RawCheckpoint) -> bool:
    keys = raw.tensors.keys()
    return "mask_token" in keys and "patch_embed.proj.weight" in keys and "blocks.0.ls1.gamma" in keys


def convert(raw: RawCheckpoint) -> Converted:
    c = rename(raw.tensors, RULES, {"mask_token": MASK_TOKEN})
    registers = "reg_token" in c.state
    if registers and "pos_embed" in c.state and "cls_token" in c.state:
        c.state["cls_token"] = c.state["cls_token"] + c.state["pos_embed"][:, :1]
        c.state["pos_embed"] = c.state["pos_embed"][:, 1:]
    c.config["options"] = {"pos_embed_interp": "timm" if registers else "dino", "no_embed_class": registers}
    return c


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """DINOv2's: ImageNet mean/std, bicubic, crop 1.0."""
    return family_preprocess("dinov2", cfg.img_size)

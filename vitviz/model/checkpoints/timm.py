"""timm ``VisionTransformer`` state dicts (and DeiT / timm training checkpoints): our names already. No Qt."""

from __future__ import annotations

from vitviz.model.checkpoints.common import Converted, RawCheckpoint, rename, resolve_preprocess
from vitviz.model.vit import ViTConfig
from vitviz.preprocess import Preprocess

NAME = "timm"
DESCRIPTION = "timm (patch_embed.proj.weight)"


def detect(raw: RawCheckpoint) -> bool:
    """``patch_embed.proj.weight`` and ``blocks.*`` keys."""
    keys = raw.tensors.keys()
    return "patch_embed.proj.weight" in keys and any(k.startswith("blocks.") for k in keys)


def convert(raw: RawCheckpoint) -> Converted:
    """Identity renaming: timm's names are ours."""
    return rename(raw.tensors, [(r"(.*)", r"\1")])


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """DeiT (distilled): ImageNet mean/std; otherwise mean = std = 0.5. Bicubic, crop_pct 0.875 (1.0 above 224)."""
    return resolve_preprocess("imagenet" if cfg.distilled else "inception", cfg.img_size)  # type: ignore[return-value]

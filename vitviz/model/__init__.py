"""vitviz.model: our ViT, its registry, checkpoint loading and named pretrained weights. No Qt."""

from vitviz.model.spec import ModelSpec
from vitviz.model.variants import create_model, list_models
from vitviz.model.vit import Attention, Block, PatchEmbed, ViT, ViTConfig
from vitviz.model.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from vitviz.model.pretrained import (
    PRETRAINED, DownloadCancelled, PretrainedError, PretrainedInfo, is_cached, load_model, pretrained,
)

__all__ = [
    "Attention", "Block", "CheckpointError", "DownloadCancelled", "ModelSpec", "PatchEmbed", "PRETRAINED",
    "PretrainedError", "PretrainedInfo", "ViT", "ViTConfig", "create_model", "is_cached", "list_models",
    "load_checkpoint", "load_model", "pretrained", "save_checkpoint",
]

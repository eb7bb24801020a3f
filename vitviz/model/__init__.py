"""vitviz.model: our ViT, its registry, checkpoint loading and named pretrained weights. No Qt."""

from vitviz.model.spec import ModelSpec
from vitviz.model.variants import create_model, list_models
from vitviz.model.vit import Attention, Block, PatchEmbed, ViT, ViTConfig
from vitviz.model.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from vitviz.model.pretrained import PRETRAINED, PretrainedError, pretrained

__all__ = [
    "Attention", "Block", "CheckpointError", "ModelSpec", "PatchEmbed", "PRETRAINED", "PretrainedError", "ViT",
    "ViTConfig", "create_model", "list_models", "load_checkpoint", "pretrained", "save_checkpoint",
]

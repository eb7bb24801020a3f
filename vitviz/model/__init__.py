"""vitviz.model: our ViT, its registry, checkpoint loading and named pretrained weights. No Qt.

Names are imported on first use (``vitviz.model.sources.refs`` and the window's start-up path do not need torch).
"""

from __future__ import annotations

from vitviz._util.lazy import lazy_names

_LAZY = {
    "ModelSpec": "spec", "create_model": "variants", "list_models": "variants",
    "Attention": "layers", "Block": "layers", "PatchEmbed": "layers", "ViT": "vit", "ViTConfig": "vit",
    "CheckpointError": "checkpoints", "load_checkpoint": "checkpoints", "save_checkpoint": "checkpoints",
    "PRETRAINED": "sources.torch_hub", "DownloadCancelled": "sources.torch_hub", "PretrainedError": "sources.torch_hub",
    "PretrainedInfo": "sources.torch_hub", "is_cached": "sources.torch_hub", "load_model": "sources.refs",
    "pretrained": "sources.torch_hub",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names("vitviz.model", _LAZY, globals())

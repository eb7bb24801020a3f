"""vitviz.model: our ViT, its registry, checkpoint loading and named pretrained weights. No Qt.

Names are imported on first use (``vitviz.model.sources`` and the window's start-up path do not need torch).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "ModelSpec": "spec", "create_model": "variants", "list_models": "variants",
    "Attention": "vit", "Block": "vit", "PatchEmbed": "vit", "ViT": "vit", "ViTConfig": "vit",
    "CheckpointError": "checkpoints", "load_checkpoint": "checkpoints", "save_checkpoint": "checkpoints",
    "PRETRAINED": "pretrained", "DownloadCancelled": "pretrained", "PretrainedError": "pretrained",
    "PretrainedInfo": "pretrained", "is_cached": "pretrained", "load_model": "pretrained", "pretrained": "pretrained",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"vitviz.model.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vitviz.model' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

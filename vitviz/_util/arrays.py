"""Tensor-or-array helpers that do not import torch (the window's start-up path stays torch-free)."""

from __future__ import annotations

from typing import Any

import numpy as np


def to_numpy(t: Any) -> np.ndarray:
    """A tensor or array as a float32 numpy array (on the CPU)."""
    if hasattr(t, "detach") and hasattr(t, "cpu"):
        return t.detach().float().cpu().numpy()
    return np.asarray(t, dtype=np.float32)

"""Masks over a map's patches. No Qt."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["top_mass_mask"]

DEFAULT_KEEP = 0.6


def top_mass_mask(m: Any, keep: float = DEFAULT_KEEP) -> Any:
    """The smallest set of patches holding ``keep`` of the map's mass (Caron et al. 2021, DINO's visualisation).

    With ``w = max(m, 0)`` (negative values carry no mass; NaN and +-inf carry none and are never kept) and the
    patches sorted by ``w`` descending (ties: the lower row-major index first), keep the first ``k`` patches where
    ``k`` is the smallest count with ``sum_{i<k} w_(i) >= keep * sum w``. So the kept mass reaches ``keep`` and
    dropping the smallest kept patch falls below it; patches with ``w = 0`` are never kept.

    DINO thresholds the ascending cumulative sum at ``1 - keep``; this is the same set with the tie order and the
    ``>=`` made explicit.

    Edge cases: ``keep = 0`` and a map without positive mass (all zero, negative or NaN) keep nothing (an empty mask:
    no patch carries mass); ``keep = 1`` keeps every patch with positive mass.

    Args:
        m: ``[gh, gw]`` map (any shape works: the mask has the map's shape), numpy array or torch tensor.
        keep: fraction of the mass to keep, in [0, 1] (default 0.6, DINO's 60%).

    Returns:
        bool mask of ``m``'s shape: a numpy array for numpy input, a tensor on ``m``'s device for torch input.
    """
    keep = float(keep)
    if not 0.0 <= keep <= 1.0:
        raise ValueError(f"keep={keep} must be in [0, 1]")
    is_torch = isinstance(m, torch.Tensor)
    v = m.detach().to("cpu", torch.float64).numpy() if is_torch else np.asarray(m, dtype=np.float64)
    w = np.where(np.isfinite(v) & (v > 0), v, 0.0).ravel()
    order = np.argsort(-w, kind="stable")  # descending, ties in index order
    csum = np.cumsum(w[order])
    total = csum[-1] if csum.size else 0.0
    k = 0
    if keep > 0 and total > 0:
        k = int(np.searchsorted(csum, keep * total, side="left")) + 1  # first index with csum >= keep * total
        k = min(k, int(np.count_nonzero(w)))  # round-off at keep = 1 never adds zero-mass patches
    mask = np.zeros(w.size, dtype=bool)
    mask[order[:k]] = True
    mask = mask.reshape(v.shape)
    return torch.from_numpy(mask).to(m.device) if is_torch else mask

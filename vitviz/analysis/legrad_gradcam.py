"""LeGrad's and GradCAM's maps from the per-layer maps a capture takes (:mod:`vitviz.capture.gradient_maps`).

* :func:`legrad_map`: the sum of LeGrad's layer maps from ``start_layer`` to the last (Bousselham et al. 2025: the
  official code sums the last two layers by default and min-max normalises for display; vitviz keeps the sum, and
  the colour scale does the rest);
* :func:`gradcam_map`: one block's GradCAM map.

No Qt.
"""

from __future__ import annotations

import torch

__all__ = ["gradcam_map", "legrad_map"]


def _layer(value: int, num_layers: int, what: str) -> int:
    """A layer index, a negative one counted from the end; ValueError outside ``-L .. L-1``."""
    if not -num_layers <= int(value) < num_layers:
        raise ValueError(f"{what} {value} out of range for {num_layers} layers (valid: {-num_layers} .. "
                         f"{num_layers - 1})")
    return int(value) % num_layers


def min_max(m: torch.Tensor) -> torch.Tensor:
    """``(m - min) / (max - min)`` (zeros for a constant map), as LeGrad's official ``min_max``."""
    lo, hi = m.min(), m.max()
    return (m - lo) / (hi - lo) if float(hi - lo) > 0 else torch.zeros_like(m)


NEUTRAL_THRESHOLD = 0.8  # LeGrad's official correction_threshold


def legrad_map(layer_maps: torch.Tensor, start_layer: int, grid: tuple[int, int],
               neutral_maps: torch.Tensor | None = None) -> torch.Tensor:
    """``[gh, gw]``: the sum of ``layer_maps [L, gh * gw]`` over layers ``start_layer .. L-1`` (negative: from the
    end).

    With ``neutral_maps`` (the same for a neutral prompt, "a photo of a"), SigLIP's correction as LeGrad's official
    code applies it: the patches where the neutral prompt's min-max normalised map exceeds 0.8 are set to 0.
    """
    start = _layer(start_layer, int(layer_maps.shape[0]), "start layer")
    m = layer_maps[start:].float().sum(dim=0)
    if neutral_maps is not None:
        empty = min_max(neutral_maps[start:].float().sum(dim=0))
        m = torch.where(empty > NEUTRAL_THRESHOLD, torch.zeros_like(m), m)
    return m.reshape(grid)


def gradcam_map(layer_maps: torch.Tensor, layer: int, grid: tuple[int, int]) -> torch.Tensor:
    """``[gh, gw]``: GradCAM's map of block ``layer`` (negative: from the end) from ``layer_maps [L, gh * gw]``."""
    return layer_maps[_layer(layer, int(layer_maps.shape[0]), "block")].float().reshape(grid)

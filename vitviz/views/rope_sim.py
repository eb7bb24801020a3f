"""The RoPE kernel of the selected patch: how similar the rotation alone makes every other position to it, per
head or fused (:func:`vitviz.analysis.rope_kernel_row`). For a model with a rotary position embedding, this is its
position similarity (the ViT paper's Fig. 7 centre has a learned table; RoPE has none, or both: Perception Encoder)."""

from __future__ import annotations

import numpy as np

from vitviz.views.base import as_grid, head_text
from vitviz.views.kinds import ResultView


class RopeSimilarity(ResultView):
    key = "rope_sim"
    title = "RoPE position similarity"
    reads = frozenset({"query", "head", "layer"})
    quantity = "mean cos of the rotation angle differences"
    signed = True
    uses_attention = False

    def compute(self, result, options):
        data = result.model_data
        if data is None or data.rope_angles is None:
            return None
        from vitviz import analysis as A  # here: importing the views must not import torch
        from vitviz.analysis.basics import fuse_heads

        angles = data.rope_angles
        if angles.ndim == 4:  # mixed RoPE: this layer's heads
            rows = A.rope_kernel_row(angles[int(options.layer) % angles.shape[0]], query=options.query,
                                     grid=result.grid)
            m = fuse_heads(rows, options.head, dim=0)
        else:  # one rotation for every layer and head
            m = A.rope_kernel_row(angles, query=options.query, grid=result.grid)
        return np.ascontiguousarray(as_grid(m, result.grid))

    def unavailable(self, result):
        data = result.model_data
        if data is None or data.rope_angles is None:
            return "the model has no rotary position embedding (RoPE)"
        return None

    def caption_parts(self, result, options):
        parts = super().caption_parts(result, options)
        data = None if result is None else result.model_data
        if data is not None and data.rope_angles is not None and data.rope_angles.ndim == 2:
            parts = [p for p in parts if p not in (self.layer_text(options.layer), head_text(options.head))]
            parts.insert(0, "the same in every layer and head")
        parts.append("the rotation alone: mean over channel pairs of cos(angle difference)")
        return parts


VIEW = RopeSimilarity()

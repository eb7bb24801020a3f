"""Cosine similarity of the selected patch's position embedding to every other (the ViT paper's Fig. 7, centre); for
a model whose only position information is a rotary embedding (DINOv3, timm's RoPE ViTs), its RoPE kernel (averaged
over heads and layers; the caption says so). A model with both (Perception Encoder) shows its table here and the
kernel in the "RoPE position similarity" view."""

from __future__ import annotations

import numpy as np

from vitviz.views.kinds import ResultView


class PositionSimilarity(ResultView):
    key = "pos_sim"
    title = "Position-embedding similarity"
    reads = frozenset({"query"})
    quantity = "cosine similarity"
    short_title = "Position similarity"
    signed = True
    uses_attention = False

    def compute(self, result, options):
        sim = result.model_data.pos_similarity() if result.model_data is not None else None
        if sim is None:
            return None
        gw = result.grid[1]
        return np.ascontiguousarray(sim[options.query // gw, options.query % gw])

    def unavailable(self, result):
        if result.model_data is None or result.model_data.pos_similarity_kind is None:
            return "the model has no position embedding for this grid (neither a table nor RoPE)"
        return None

    def caption_parts(self, result, options):
        parts = super().caption_parts(result, options)
        if result is not None and result.model_data is not None and result.model_data.pos_similarity_kind == "rope":
            parts.append("RoPE kernel (no position table): the similarity the rotation alone gives two positions, "
                         "mean of heads")
        return parts


VIEW = PositionSimilarity()

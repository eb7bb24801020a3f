"""Cosine similarity of the selected patch's position embedding to every other (the ViT paper's Fig. 7, centre)."""

from __future__ import annotations

import numpy as np

from vitviz.views.base import View


class PositionSimilarity(View):
    key = "pos_sim"
    title = "Position-embedding similarity"
    reads = frozenset({"query"})
    quantity = "cosine similarity"
    signed = True
    uses_attention = False

    def compute(self, result, options):
        sim = result.model_data.pos_similarity() if result.model_data is not None else None
        if sim is None:
            return None
        gw = result.grid[1]
        return np.ascontiguousarray(sim[options.query // gw, options.query % gw])

    def unavailable(self, result):
        if result.pos_embed is None or result.pos_embed.shape[0] < result.num_patches:
            return "the model has no learned position embedding for this grid"
        return None


VIEW = PositionSimilarity()

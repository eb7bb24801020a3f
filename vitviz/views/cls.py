"""Attention from [CLS] (or, for a model without one, from the selected patch) at one layer and head."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import View, as_grid


class ClsAttention(View):
    key = "cls"
    title = "Attention from [CLS]"
    reads = frozenset({"layer", "head"})
    quantity = "attention weight"

    def compute(self, result, options):
        p, grid = result.num_prefix_tokens, result.grid
        if p > 0:
            m = A.cls_attention(result.attentions, options.layer, options.head, grid=grid, num_prefix_tokens=p)
        else:  # no [CLS] token: fall back to the selected patch
            m = A.query_attention(result.attentions, options.layer, options.head, p + options.query, grid=grid,
                                  num_prefix_tokens=p)
        return as_grid(m, grid)

    def cache_key(self, options):
        return super().cache_key(options) + (options.query,)  # the fallback row of models without [CLS]


VIEW = ClsAttention()

"""Attention from the selected patch at one layer and head."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import as_grid
from vitviz.views.kinds import RowView


class QueryAttention(RowView):
    key = "query"
    title = "Attention from the selected patch"
    reads = frozenset({"layer", "head", "query"})
    quantity = "attention weight"
    short_title = "Patch attention"

    def compute(self, result, options):
        p, grid = result.num_prefix_tokens, result.grid
        m = A.query_attention(result.attentions, options.layer, options.head, p + options.query, grid=grid,
                              num_prefix_tokens=p)
        return as_grid(m, grid)


VIEW = QueryAttention()

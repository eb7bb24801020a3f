"""Attention from [CLS] at one layer and head; for a model without one: the attention-pooling head's query (SigLIP's
"MAP" head, which reads the last layer's output) where the model has one, else the selected patch."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import as_grid, pool_row
from vitviz.views.kinds import RowView


class ClsAttention(RowView):
    key = "cls"
    title = "Attention from [CLS]"
    reads = frozenset({"layer", "head"})
    quantity = "attention weight"
    short_title = "[CLS] attention"
    reads_cls_row = True

    def compute(self, result, options):
        p, grid = result.num_prefix_tokens, result.grid
        row = pool_row(result)
        if row is not None:  # the pooling head's attention [H, N] over the last layer's output (every layer alike)
            from vitviz.analysis.basics import fuse_heads  # here: importing the views must not import torch

            m = fuse_heads(row[:, p:].float(), options.head, dim=0).reshape(grid)
        elif p > 0:
            m = A.cls_attention(result.attentions, options.layer, options.head, grid=grid, num_prefix_tokens=p)
        else:  # no [CLS] token: fall back to the selected patch
            m = A.query_attention(result.attentions, options.layer, options.head, p + options.query, grid=grid,
                                  num_prefix_tokens=p)
        return as_grid(m, grid)

    def row_query(self, options, result):
        """[CLS] (a model with one), else the selected patch; None where the pooling head's row stands in for it."""
        if pool_row(result) is not None:
            return None
        p = int(result.num_prefix_tokens)
        return 0 if p > 0 else p + int(options.query)

    def cache_key(self, options):
        return super().cache_key(options) + (options.query,)  # the fallback row of models without [CLS]

    def caption_parts(self, result, options):
        parts = super().caption_parts(result, options)
        if result is not None and pool_row(result) is not None:
            parts[parts.index(self.layer_text(options.layer))] = "pooling head (after the last layer)"
            parts.append("no [CLS] token: the attention-pooling query's row")
        elif result is not None and result.num_prefix_tokens == 0:
            parts.append("no [CLS] token: from the selected patch")
        return parts


VIEW = ClsAttention()

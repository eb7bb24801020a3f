"""Attention rollout (Abnar & Zuidema 2020) of the [CLS] row over all layers from the start layer."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import WholeAttentionView, pool_kwargs


class Rollout(WholeAttentionView):
    key = "rollout"
    title = "Attention rollout"
    reads = frozenset({"head_fusion", "discard_ratio", "start_layer"})
    quantity = "rollout attention"

    def analysis(self, result, options):
        return A.attention_rollout(result.attentions, grid=result.grid, num_prefix_tokens=result.num_prefix_tokens,
                                   head_fusion=options.head_fusion, discard_ratio=options.discard_ratio,
                                   start_layer=options.start_layer, **pool_kwargs(result))


VIEW = Rollout()

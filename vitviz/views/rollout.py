"""Attention rollout (Abnar & Zuidema 2020) of the [CLS] row over all layers from the start layer."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import pool_kwargs
from vitviz.views.kinds import WholeAttentionView
from vitviz.views.stream_plan import Product


class Rollout(WholeAttentionView):
    key = "rollout"
    title = "Attention rollout"
    reads = frozenset({"head_fusion", "discard_ratio", "start_layer"})
    quantity = "rollout attention"
    short_title = "Rollout"

    def analysis(self, result, options):
        return A.attention_rollout(result.attentions, grid=result.grid, num_prefix_tokens=result.num_prefix_tokens,
                                   head_fusion=options.head_fusion, discard_ratio=options.discard_ratio,
                                   start_layer=options.start_layer, **pool_kwargs(result))

    def product(self, options, result):
        """Without gradients, the rollout is taken from the forward's attention (every layer's matrix kept until the
        pass ends)."""
        shape = (("head_fusion", options.head_fusion), ("discard_ratio", float(options.discard_ratio)),
                 ("from_forward", result.attention_grads is None))
        return Product("rollout", shape), int(options.start_layer) % int(result.num_layers)


VIEW = Rollout()

"""Attention rollout (Abnar & Zuidema 2020) of the [CLS] row over all layers from the start layer."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import View, as_grid


class Rollout(View):
    key = "rollout"
    title = "Attention rollout"
    reads = frozenset({"head_fusion", "discard_ratio", "start_layer"})
    quantity = "rollout attention"
    needs_cls = True

    def compute(self, result, options):
        if self.unavailable(result):
            return None
        pre = result.analyses
        if pre is not None and (options.head_fusion, options.discard_ratio, options.start_layer) == ("mean", 0.0, 0):
            return as_grid(pre.rollout, result.grid)  # the one sweep computed it at these options
        m = A.attention_rollout(result.attentions, grid=result.grid, num_prefix_tokens=result.num_prefix_tokens,
                                head_fusion=options.head_fusion, discard_ratio=options.discard_ratio,
                                start_layer=options.start_layer)
        return as_grid(m, result.grid)

    def caption_parts(self, result, options):
        return [f"{options.head_fusion} fusion, discard {options.discard_ratio:.2f}, from layer {options.start_layer}"]


VIEW = Rollout()

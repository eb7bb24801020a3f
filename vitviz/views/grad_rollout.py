"""Gradient rollout: rollout of the gradient-weighted attention for the target class."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import pool_kwargs
from vitviz.views.kinds import WholeAttentionView
from vitviz.views.stream_plan import Product


class GradientRollout(WholeAttentionView):
    key = "grad_rollout"
    title = "Gradient rollout"
    reads = frozenset({"discard_ratio", "target"})
    quantity = "gradient rollout"
    short_title = "Gradient rollout"
    unit = "a.u."
    needs_grads = True
    heads_note = "mean of heads"

    def analysis(self, result, options):
        return A.gradient_rollout(result.attentions, result.attention_grads, grid=result.grid,
                                  num_prefix_tokens=result.num_prefix_tokens, discard_ratio=options.discard_ratio,
                                  **pool_kwargs(result, grads=True))

    def product(self, options, result):
        return Product("grad_rollout", (("discard_ratio", float(options.discard_ratio)), ("clamp", "after_mean"))), 0


VIEW = GradientRollout()

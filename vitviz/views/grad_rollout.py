"""Gradient rollout: rollout of the gradient-weighted attention for the target class."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import View, as_grid


class GradientRollout(View):
    key = "grad_rollout"
    title = "Gradient rollout"
    reads = frozenset({"discard_ratio", "target"})
    quantity = "gradient rollout"
    unit = "a.u."
    needs_cls = True
    needs_grads = True

    def compute(self, result, options):
        if self.unavailable(result):
            return None
        pre = result.analyses
        if pre is not None and pre.gradient_rollout is not None and options.discard_ratio == 0.0:
            return as_grid(pre.gradient_rollout, result.grid)
        m = A.gradient_rollout(result.attentions, result.attention_grads, grid=result.grid,
                               num_prefix_tokens=result.num_prefix_tokens, discard_ratio=options.discard_ratio)
        return as_grid(m, result.grid)


VIEW = GradientRollout()

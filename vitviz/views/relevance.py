"""Generic-attention relevance (Chefer et al. 2021) of the target class."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import View, as_grid


class Relevance(View):
    key = "relevance"
    title = "Relevance (Chefer et al.)"
    reads = frozenset({"start_layer", "target"})
    quantity = "relevance"
    unit = "a.u."
    needs_cls = True
    needs_grads = True

    def compute(self, result, options):
        if self.unavailable(result):
            return None
        pre = result.analyses
        if pre is not None and pre.relevance is not None and options.start_layer == 0:
            return as_grid(pre.relevance, result.grid)
        m = A.relevance(result.attentions, result.attention_grads, grid=result.grid,
                        num_prefix_tokens=result.num_prefix_tokens, start_layer=options.start_layer)
        return as_grid(m, result.grid)


VIEW = Relevance()

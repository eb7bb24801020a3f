"""Generic-attention relevance (Chefer et al. 2021) of the target class."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import WholeAttentionView, pool_kwargs


class Relevance(WholeAttentionView):
    key = "relevance"
    title = "Relevance (Chefer et al.)"
    reads = frozenset({"start_layer", "target"})
    quantity = "relevance"
    unit = "a.u."
    needs_grads = True
    heads_note = "mean of heads"

    def analysis(self, result, options):
        return A.relevance(result.attentions, result.attention_grads, grid=result.grid,
                           num_prefix_tokens=result.num_prefix_tokens, start_layer=options.start_layer,
                           **pool_kwargs(result, grads=True))


VIEW = Relevance()

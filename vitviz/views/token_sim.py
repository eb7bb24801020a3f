"""Cosine similarity of the selected patch's token to every patch token, after a layer (-1: the embeddings)."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import View, as_grid


class TokenSimilarity(View):
    key = "token_sim"
    title = "Token similarity of the selected patch"
    reads = frozenset({"layer", "query"})
    quantity = "cosine similarity"
    signed = True
    uses_attention = False

    def layer_range(self, result):
        return (-1, result.num_layers - 1)  # -1 = the embeddings, l = the output of block l (as everywhere)

    def layer_text(self, layer):
        return "patch embeddings" if layer < 0 else f"output of layer {layer}"

    def compute(self, result, options):
        p = result.num_prefix_tokens
        m = A.token_similarity(result.tokens, layer=options.layer + 1, index=p + options.query, grid=result.grid,
                               num_prefix_tokens=p)
        return as_grid(m, result.grid)


VIEW = TokenSimilarity()

"""Cosine similarity of the selected patch's token to every patch token, after a layer (-1: the embeddings)."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import as_grid
from vitviz.views.kinds import TokenView


class TokenSimilarity(TokenView):
    key = "token_sim"
    title = "Token similarity of the selected patch"
    short_title = "Token similarity"
    reads = frozenset({"layer", "query"})
    quantity = "cosine similarity"
    signed = True

    def compute(self, result, options):
        p = result.num_prefix_tokens
        m = A.token_similarity(result.tokens, layer=options.layer + 1, index=p + options.query, grid=result.grid,
                               num_prefix_tokens=p)
        return as_grid(m, result.grid)


VIEW = TokenSimilarity()

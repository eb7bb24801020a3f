"""Cosine similarity of the selected patch's token to every patch token, after a layer (0: the embeddings)."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import View, as_grid, patch_text


class TokenSimilarity(View):
    key = "token_sim"
    title = "Token similarity of the selected patch"
    reads = frozenset({"layer", "query"})
    quantity = "cosine similarity"

    def layer_range(self, result):
        return (0, result.num_layers)  # 0 = embeddings, l = output of block l

    def attention_layer(self, options):
        return max(0, options.layer - 1)  # the output of block l follows the attention of block l - 1

    def compute(self, result, options):
        p = result.num_prefix_tokens
        m = A.token_similarity(result.tokens, layer=options.layer, index=p + options.query, grid=result.grid,
                               num_prefix_tokens=p)
        return as_grid(m, result.grid)

    def caption_parts(self, result, options):
        parts = ["patch embeddings" if options.layer == 0 else f"layer {options.layer}"]
        if result is not None:
            parts.append(patch_text(result, options.query))
        return parts


VIEW = TokenSimilarity()

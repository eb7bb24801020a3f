"""Generic-attention relevance (Chefer et al. 2021) of the target class."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import pool_kwargs
from vitviz.views.kinds import WholeAttentionView
from vitviz.views.stream_plan import Product


class Relevance(WholeAttentionView):
    key = "relevance"
    title = "Relevance (Chefer et al.)"
    reads = frozenset({"start_layer", "target"})
    quantity = "relevance"
    short_title = "Relevance"
    unit = "a.u."
    needs_grads = True
    heads_note = "mean of heads"

    def analysis(self, result, options):
        return A.relevance(result.attentions, result.attention_grads, grid=result.grid,
                           num_prefix_tokens=result.num_prefix_tokens, start_layer=options.start_layer,
                           **pool_kwargs(result, grads=True))

    def product(self, options, result):
        return Product("relevance"), int(options.start_layer) % int(result.num_layers)

    def result_changes(self, result):
        """CLIP prompts: the last layer only, as Chefer's CLIP notebook (:func:`clip_prompt_changes`)."""
        return clip_prompt_changes(result)

    def caption_parts(self, result, options):
        parts = super().caption_parts(result, options)
        clip_prompts = result is not None and getattr(result, "head_kind", "") == "prompts" \
            and getattr(result, "probability", "") == "softmax"
        if clip_prompts and options.start_layer == result.num_layers - 1:
            parts.append("last layer only, as Chefer's CLIP notebook (all layers light up artefact tokens)")
        return parts


def clip_prompt_changes(result) -> dict:
    """The option changes that show relevance on CLIP prompts as Chefer's CLIP notebook does (the last layer only:
    summed over all layers, CLIP ViT-B/16's relevance lights up artefact tokens); empty for other results."""
    if getattr(result, "head_kind", "") == "prompts" and getattr(result, "probability", "") == "softmax":
        return {"start_layer": result.num_layers - 1}
    return {}


VIEW = Relevance()

"""The input kinds of views: what a view reads, and so how one streamed pass gathers it and how the view's map is made
from what was gathered. A view subclasses its kind and inherits both; a new view of an existing kind is one module
and one registry line, and works stored and streamed. No Qt, no torch.

* :class:`RowView`: one layer's attention rows (the [CLS] and query views), read through :meth:`RowView.row_query`;
* :class:`TokenView`: one layer's tokens (token similarity, token norm, feature PCA, the logit lens);
* :class:`WholeAttentionView`: a product over the layers from a start layer (rollout, gradient rollout, relevance),
  named by :meth:`WholeAttentionView.product`;
* :class:`ResultView`: what a result holds in full (position tables and RoPE angles; LeGrad's and GradCAM's
  per-layer maps, which those views add to the plan themselves).

A new input kind is one class here (its :meth:`~vitviz.views.View.plan_stream` and
:meth:`~vitviz.views.View.streamed_map`), one field of :class:`~vitviz.views.stream_plan.StreamPlan` and one observer
(accumulator) in :mod:`vitviz.analysis.layerwise` that :mod:`vitviz.document.streamed.batches` runs.

The streamed ``image`` the methods read is a :class:`vitviz.document.streamed.StreamedImage`: ``result`` (every-layer
tensors as shapes only), ``rows``, ``tokens``, ``products``, ``missing(view, what)`` (the error when the pass did not
gather something) and ``with_capture(**fields)`` (the result with capture fields replaced).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitviz.views.base import View, as_grid
from vitviz.views.stream_plan import Product, StreamPlan

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.pipeline import InferenceResult
    from vitviz.views.options import ViewOptions

__all__ = ["ResultView", "RowView", "TokenView", "WholeAttentionView"]


class RowView(View):
    """A view of one layer's attention rows (``stream_input = "rows"``): a streamed pass keeps the row of
    :meth:`row_query` at the view's layer; the view then computes on a result whose attention is that row at every
    layer and query (an expanded view of it, no copy), so its own code picks it."""

    stream_input = "rows"

    def row_query(self, options: "ViewOptions", result: "InferenceResult") -> int | None:
        """The query token whose attention row the map reads (default: the selected patch); None when the result
        itself holds the row (an attention-pooling head's)."""
        return int(result.num_prefix_tokens) + int(options.query)

    def plan_stream(self, plan: StreamPlan, result: "InferenceResult", options: "ViewOptions") -> None:
        query = self.row_query(options, result)
        if query is not None:
            plan.rows.setdefault(int(options.layer) % int(result.num_layers), set()).add(query)

    def streamed_map(self, image: Any, options: "ViewOptions") -> Any:
        r = image.result
        query = self.row_query(options, r)
        if query is None:
            return self.compute(r, options)
        L, H, N = r.num_layers, r.num_heads, int(r.attentions.shape[-1])
        key = (int(options.layer) % L, query)
        row = image.rows.get(key)
        if row is None:
            raise image.missing(self, f"the attention row of token {key[1]} at layer {key[0]}")
        return self.compute(image.with_capture(attentions=row[None, :, None, :].expand(L, H, N, N)), options)


class TokenView(View):
    """A view of the tokens after a layer (``stream_input = "tokens"``: token similarity, token norm, feature PCA):
    its layers run from -1, the patch embeddings, to ``L - 1``, the output of the last block (``tokens[layer + 1]``).
    A streamed pass keeps that layer's tokens; the view computes on a result whose every layer is them."""

    uses_attention = False
    stream_input = "tokens"

    def layer_range(self, result):
        return (-1, result.num_layers - 1)

    def layer_text(self, layer):
        return "patch embeddings" if layer < 0 else f"output of layer {layer}"

    def plan_stream(self, plan: StreamPlan, result: "InferenceResult", options: "ViewOptions") -> None:
        plan.tokens.add(int(options.layer) + 1)

    def streamed_result(self, image: Any, options: "ViewOptions") -> Any:
        """The streamed image's result with the view's layer's tokens at every layer."""
        tok = image.tokens.get(int(options.layer) + 1)
        if tok is None:
            raise image.missing(self, f"the tokens of layer {options.layer}")
        return image.with_capture(tokens=tok[None].expand(image.result.num_layers + 1, *tok.shape))

    def streamed_map(self, image: Any, options: "ViewOptions") -> Any:
        return self.compute(self.streamed_result(image, options), options)

    def streamed_rgb(self, image: Any, options: "ViewOptions") -> Any:
        return self.compute_rgb(self.streamed_result(image, options), options)


class WholeAttentionView(View):
    """A view computed from the attention of every layer (``stream_input = "product"``: rollout, gradient rollout,
    relevance): its map is :meth:`analysis` at the options, None when the view is unavailable for the result. The
    session computes it when it is first shown and caches it per result and options. A streamed pass accumulates
    :meth:`product` from the last layer down and keeps its row at the start layer; the map is that row's patch
    columns, as the analyses finish theirs."""

    needs_cls = True
    stream_input = "product"

    def analysis(self, result: "InferenceResult", options: "ViewOptions") -> Any:
        """The map at any options (a tensor ``[gh, gw]``)."""
        raise NotImplementedError

    def product(self, options: "ViewOptions", result: "InferenceResult") -> tuple[Product, int]:
        """``(product, start layer)`` of the map at ``options``: the product over the layers (its kind and the
        options that shape every layer's matrix) and the start layer whose row is the map."""
        raise NotImplementedError

    def compute(self, result, options):
        if self.unavailable(result):
            return None
        return as_grid(self.analysis(result, options), result.grid)

    def plan_stream(self, plan: StreamPlan, result: "InferenceResult", options: "ViewOptions") -> None:
        if self.unavailable(result):
            return
        product, start = self.product(options, result)
        plan.products.setdefault(product, set()).add(start)

    def streamed_map(self, image: Any, options: "ViewOptions") -> Any:
        r = image.result
        if self.unavailable(r):
            return None
        product, start = self.product(options, r)
        row = image.products.get(product, {}).get(start)
        if row is None:
            raise image.missing(self, f"the product {product.kind} {product.options} from layer {start}")
        p = r.num_prefix_tokens
        return as_grid(row[p:].reshape(r.grid).float(), r.grid)


class ResultView(View):
    """A view computed from what a result holds in full (``stream_input = "result"``: position embeddings and RoPE
    angles in its model data; LeGrad's and GradCAM's per-layer maps, taken during the pass, which those views add to
    the plan in their own :meth:`plan_stream`). Its streamed map is :meth:`compute` of the streamed result."""

    stream_input = "result"

    def plan_stream(self, plan: StreamPlan, result: "InferenceResult", options: "ViewOptions") -> None:
        return None

    def streamed_map(self, image: Any, options: "ViewOptions") -> Any:
        return self.compute(image.result, options)

"""What a streamed pass must gather so that the maps asked for can be made: from ``(view, options)`` pairs to a
:class:`StreamPlan` (attention rows of some layers, tokens of some layers, rollout / relevance / gradient-rollout
products and their start layers, LeGrad poolings, GradCAM, per-layer statistics), and the key under which each
view's product is kept. A view vitviz cannot make from a stream (one it does not know, or "ignore artefact tokens",
which needs the artefacts of the later layers before the first layer's attention) raises :class:`NotStreamable`:
the caller then takes the stored path. No Qt.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from vitviz.views.base import View, pool_row
from vitviz.views.options import ViewOptions

__all__ = ["NotStreamable", "ROW_VIEWS", "PRODUCT_VIEWS", "RESULT_VIEWS", "StreamPlan", "TOKEN_VIEWS",
           "plan_streaming", "product_key", "row_query"]

ROW_VIEWS = ("cls", "query")
"""Views of one layer's attention rows."""
PRODUCT_VIEWS = ("rollout", "grad_rollout", "relevance")
"""Views of a product over the layers (:class:`vitviz.analysis.layerwise.ReverseProduct`)."""
TOKEN_VIEWS = ("token_sim", "token_norm", "feature_pca", "logit_lens")
"""Views of one layer's tokens."""
RESULT_VIEWS = ("pos_sim", "rope_sim", "legrad", "gradcam")
"""Views computed from what a streamed result holds in full (position embeddings and RoPE angles, LeGrad's and
GradCAM's per-layer maps)."""


class NotStreamable(ValueError):
    """The maps asked for cannot be made from a stream (the message says why); use the stored path."""


@dataclass
class StreamPlan:
    """What one streamed pass gathers.

    Attributes:
        rows: layer -> query tokens whose attention rows ``[H, N]`` are kept.
        tokens: token indices kept (0: the embeddings; ``l + 1``: the output of block ``l``).
        products: product key (:func:`product_key`) -> start layers.
        legrad: LeGrad poolings taken; gradcam: GradCAM's maps taken.
        statistics: mean attention distance and entropy per layer and head (``vitviz stats``).
    """

    rows: dict[int, set[int]] = field(default_factory=dict)
    tokens: set[int] = field(default_factory=set)
    products: dict[tuple, set[int]] = field(default_factory=dict)
    legrad: set[str] = field(default_factory=set)
    gradcam: bool = False
    statistics: bool = False


def row_query(view: View, options: ViewOptions, result: Any) -> int:
    """The query token whose attention row a row view reads: [CLS] (the [CLS] view of a model with one), else the
    selected patch."""
    p = int(result.num_prefix_tokens)
    return 0 if view.key == "cls" and p > 0 else p + int(options.query)


def product_key(view: View, options: ViewOptions, num_layers: int) -> tuple[tuple, int]:
    """``(key, start layer)`` of a product view's map: the key names the product (kind and the options that shape
    every layer's matrix), the start layer the row kept of it."""
    L = int(num_layers)
    if view.key == "rollout":
        return ("rollout", options.head_fusion, float(options.discard_ratio)), int(options.start_layer) % L
    if view.key == "grad_rollout":
        return ("grad_rollout", float(options.discard_ratio), "after_mean"), 0
    if view.key == "relevance":
        return ("relevance",), int(options.start_layer) % L
    raise NotStreamable(f"{view.key} is not a product over the layers")


def plan_streaming(result: Any, demands: Iterable[tuple[View, ViewOptions]], *,
                   statistics: bool = False) -> StreamPlan:
    """The plan that makes every ``(view, options)`` of ``demands`` for ``result`` (a result's shape: a streamed
    result before its pass).

    Raises:
        NotStreamable: a demand no stream can make (naming the view and why).
    """
    plan = StreamPlan(statistics=bool(statistics))
    L = int(result.num_layers)
    for view, o in demands:
        k = view.key
        if view.uses_attention and view.ignores_artefacts(o):
            raise NotStreamable(f"{k} with 'ignore artefact tokens' needs every layer's attention once the artefacts "
                                "are known")
        if k in ROW_VIEWS:
            if k == "cls" and pool_row(result) is not None:
                continue  # the pooling head's row, which every result holds
            plan.rows.setdefault(int(o.layer) % L, set()).add(row_query(view, o, result))
        elif k in PRODUCT_VIEWS:
            if view.unavailable(result):
                continue
            key, start = product_key(view, o, L)
            plan.products.setdefault(key, set()).add(start)
        elif k in TOKEN_VIEWS:
            plan.tokens.add(int(o.layer) + 1)
        elif k == "legrad":
            if not view.unavailable(result):
                plan.legrad.add(str(o.legrad_pooling))
        elif k == "gradcam":
            plan.gradcam = plan.gradcam or not view.unavailable(result)
        elif k not in ("pos_sim", "rope_sim"):
            raise NotStreamable(f"the view {k!r} has no streamed form")
    return plan

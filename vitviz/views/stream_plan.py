"""What a streamed pass gathers (:class:`StreamPlan`), built by the views themselves
(:meth:`vitviz.views.View.plan_stream`), and :class:`NotStreamable`, said when a map cannot be made from a stream.
No Qt, no torch.

A streamed pass (:func:`vitviz.document.streamed.stream_images`) sees every layer's attention once and keeps only
what the plan names; each view's map is then made from that (:meth:`vitviz.views.View.streamed_map`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["NotStreamable", "Product", "StreamPlan"]


class NotStreamable(ValueError):
    """The maps asked for cannot be made from a stream (the message says why); use the stored path."""


@dataclass(frozen=True)
class Product:
    """A product over the layers that a streamed pass accumulates (:class:`vitviz.analysis.layerwise.ReverseProduct`):
    its kind (``"rollout" | "grad_rollout" | "relevance"``) and the keyword options that shape every layer's matrix
    (``(("head_fusion", "mean"), ("discard_ratio", 0.0), ...)``). Views whose maps are rows of the same product share
    it; the start layers kept are the plan's."""

    kind: str
    options: tuple[tuple[str, Any], ...] = ()

    def kwargs(self) -> dict[str, Any]:
        """The options as :class:`~vitviz.analysis.layerwise.ReverseProduct`'s keyword arguments."""
        return dict(self.options)

    @property
    def keeps_layers(self) -> bool:
        """Whether it keeps every layer's matrix until the pass ends (a rollout from the forward, without
        gradients), which the batch size must leave room for."""
        return bool(self.kwargs().get("from_forward"))


@dataclass
class StreamPlan:
    """What one streamed pass gathers.

    Attributes:
        rows: layer -> query tokens whose attention rows ``[H, N]`` are kept.
        tokens: token indices kept (0: the embeddings; ``l + 1``: the output of block ``l``).
        products: :class:`Product` -> start layers whose rows are kept.
        legrad: LeGrad poolings taken; gradcam: GradCAM's maps taken.
        statistics: mean attention distance and entropy per layer and head (``vitviz stats``).
    """

    rows: dict[int, set[int]] = field(default_factory=dict)
    tokens: set[int] = field(default_factory=set)
    products: dict[Product, set[int]] = field(default_factory=dict)
    legrad: set[str] = field(default_factory=set)
    gradcam: bool = False
    statistics: bool = False

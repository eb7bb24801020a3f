"""One image of a streamed pass: :class:`StreamedImage` (its result and what the pass gathered for it) and the maps
of the views made from that, through the views' own code; :class:`StreamedSession`, a
:class:`~vitviz.document.session.Session` that serves them, so that the panel, the figures and the statistics of
``vitviz export`` / ``stats`` are drawn from a stream exactly as from a stored result. No Qt.

The result is an :class:`~vitviz.pipeline.InferenceResult` whose every-layer tensors (attentions, tokens, attention
gradients) are shapes without data (``device="meta"``: a computation that would read them fails loudly instead of
reading zeros); what is small is real (logits, the target, an attention-pool head's row and gradient, LeGrad's and
GradCAM's per-layer maps, the model's data). A view's map is made by
the view from what was gathered for it (:meth:`vitviz.views.View.streamed_map`, written once per input kind in
:mod:`vitviz.views.kinds`):

* a view of attention rows (the [CLS] and query views) from the one row it reads: the view computes on a result whose
  attention is that row at every layer and query (an expanded view of it, no copy), so its own code picks it;
* a view of tokens likewise from the one layer's tokens;
* a product view (rollout, gradient rollout, relevance) from the row of the product kept for its start layer, as the
  views' analyses finish theirs (the patch columns, float32, the grid);
* a view of the whole result (position embeddings, LeGrad, GradCAM) from the result itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from vitviz import analysis as A
from vitviz._util.arrays import to_numpy
from vitviz.document.session import Session
from vitviz.document.streamed.demands import check_streamable
from vitviz.views.base import View
from vitviz.views.options import ViewOptions
from vitviz.views.stream_plan import NotStreamable, Product

__all__ = ["StreamedImage", "StreamedSession"]


@dataclass
class StreamedImage:
    """One image of a streamed pass (see the module's docstring).

    Attributes:
        result: the image's result (every-layer tensors as shapes only).
        rows: ``(layer, query token) -> [H, N]`` float32 attention rows.
        tokens: ``token index -> [N, D]`` float32 (0: the embeddings; ``l + 1``: block ``l``'s output).
        norms: ``[L+1, N]`` float32, every token's L2 norm at every layer (the artefact tokens), or None.
        products: ``product -> {start layer: [N] float64 row}`` (:class:`vitviz.views.stream_plan.Product`, named by
            the product views' :meth:`~vitviz.views.WholeAttentionView.product`).
        distances, entropies: ``[L, H]`` float32 mean attention distance (pixels) and entropy (nats), or None.
    """

    result: Any
    rows: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    tokens: dict[int, torch.Tensor] = field(default_factory=dict)
    norms: torch.Tensor | None = None
    products: dict[Product, dict[int, torch.Tensor]] = field(default_factory=dict)
    distances: np.ndarray | None = None
    entropies: np.ndarray | None = None

    def missing(self, view: View, what: str) -> NotStreamable:
        """The error for a map whose input the pass did not gather (``what``, in words)."""
        return NotStreamable(f"the streamed pass of {self.result.source} did not gather {what} for the view "
                             f"{view.key!r} (it was not asked for)")

    def with_capture(self, **capture: Any) -> Any:
        """The result with the capture fields ``capture`` replaced (the gathered rows or tokens in place of every
        layer's)."""
        r = self.result
        return replace(r, capture=replace(r.capture, **capture))

    def map(self, view: View, options: ViewOptions) -> np.ndarray | None:
        """The view's map at ``options``, float32 ``[gh, gw]``, as :meth:`View.compute` of the stored result; None
        when the view is unavailable for the result (:meth:`View.streamed_map`, by the view's input kind).

        Raises:
            NotStreamable: the pass did not gather what the map needs, or the view has no streamed form.
        """
        check_streamable(view, options)
        return view.streamed_map(self, options)

    def rgb(self, view: View, options: ViewOptions) -> np.ndarray | None:
        """An RGB view's picture (:meth:`View.streamed_rgb`), from what the pass gathered."""
        if not view.rgb:
            return None
        return view.streamed_rgb(self, options)

    def artefacts(self) -> Any:
        """The high-norm patch tokens (:func:`vitviz.analysis.high_norm_tokens` at its defaults) from every layer's
        token norms."""
        if self.norms is None:
            raise NotStreamable("the streamed pass kept no token norms")
        # each token's norm as a one-dimensional token: its norm is itself, so the rule sees the stored path's norms
        return A.high_norm_tokens(self.norms[..., None], num_prefix_tokens=self.result.num_prefix_tokens)


class StreamedSession(Session):
    """A :class:`~vitviz.document.session.Session` on a :class:`StreamedImage`: its maps, pictures, artefact tokens,
    distances and entropies come from the stream (cached as the session caches); everything else is the session's
    own. What needs every layer's attention (the heads panel, "ignore artefact tokens") raises instead."""

    def __init__(self, image: StreamedImage, cache: Any = None) -> None:
        super().__init__(cache)
        self.streamed = image
        self.set_result(image.result)

    def map_for(self, view: View, options: ViewOptions) -> np.ndarray | None:
        if self.result is None:
            return None
        return self.cache.get_or(("map",) + view.cache_key(options), lambda: self.streamed.map(view, options))

    def rgb_map(self) -> np.ndarray | None:
        v, o = self.view, self.options
        if self.result is None or not v.rgb:
            return None
        return self.cache.get_or(("rgb",) + v.cache_key(o), lambda: self.streamed.rgb(v, o))

    def artefacts(self) -> Any:
        return None if self.result is None else self.cache.get_or(("artefacts",), self.streamed.artefacts)

    def mean_distances(self) -> np.ndarray | None:
        d = self.streamed.distances
        if d is None:
            raise NotStreamable("the streamed pass did not measure attention distances")
        return to_numpy(d)

    def entropies(self) -> np.ndarray | None:
        e = self.streamed.entropies
        if e is None:
            raise NotStreamable("the streamed pass did not measure attention entropies")
        return to_numpy(e)

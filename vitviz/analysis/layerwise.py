"""The analyses of :mod:`vitviz.analysis`, accumulated one layer at a time as a streamed pass gives the layers
(:mod:`vitviz.capture.streaming`: forward in layer order, backward from the last layer down), so that no stack of
every layer's attention is ever held. No Qt.

Each class takes the per-layer tensors of a batch (``attn``, ``grad`` ``[B, H, N, N]``, ``tokens`` ``[B, N, D]``, a
pooling head's row ``[B, H, N]``) through the methods a streamed pass calls (``on_attention``, ``on_attention_grad``,
``on_tokens``, ``on_pool``, ``on_pool_grad``) and computes with the very functions, in the very order, of the
whole-stack analysis it stands for, so its results are those of the stored path (to float round-off; bit for bit on
the same device and batch):

* :class:`ReverseProduct`: rollout (:func:`~vitviz.analysis.attention_maps.attention_rollout`), gradient rollout
  (:func:`~vitviz.analysis.attention_maps.gradient_rollout`) and relevance (:func:`~vitviz.analysis.lrp.relevance`):
  the [CLS] row (or a pooling head's row) times the per-layer matrices, from the last layer down, the row of every
  start layer asked for kept on the way. From the backward it needs no memory per layer; from a forward-only pass
  (rollout without gradients) it keeps each layer's ``[B, N, N]`` transition matrix (1/H of that layer's attention)
  until the pass ends, then multiplies them last layer first, as the stored path does;
* :class:`LayerRows`: the attention rows of a few query tokens at a few layers (the [CLS] and query views);
* :class:`LayerTokens`: the tokens of a few layers (token views) and every layer's token norms (the artefact tokens);
* :class:`LayerStatistics`: mean attention distance and entropy per layer and head (``vitviz stats``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import torch

from vitviz.analysis.attention_maps import fused_heads, grad_weighted, transitions_from_fused
from vitviz.analysis.basics import CLAMPS, FUSIONS, as_float, check_choice
from vitviz.analysis.distance import attention_entropy, mean_attention_distance

__all__ = ["LayerRows", "LayerStatistics", "LayerTokens", "ReverseProduct"]

ProductKind = Literal["rollout", "grad_rollout", "relevance"]
KINDS: tuple[str, ...] = ("rollout", "grad_rollout", "relevance")


class ReverseProduct:
    """Rollout, gradient rollout or relevance of a batch, one layer at a time from the last layer down.

    ``rollout``: ``row T_{L-1} ... T_s`` with ``T_l`` = :func:`~vitviz.analysis.attention_maps.transitions_from_fused`
    of the fused heads; ``grad_rollout``: the same of ``grad_weighted(A, dA, clamp)``; ``relevance``: ``row (I +
    Abar_{L-1}) ... (I + Abar_s)`` with ``Abar = grad_weighted(A, dA, "before_mean")``. ``row`` is the [CLS] row of
    the last layer's matrix (``pooled=False``: only that row of layer ``L-1`` is computed, as the stored path does) or a
    pooling head's fused row (``pooled=True``; every layer then enters as a whole matrix). Products are float64.

    Args:
        kind: ``"rollout" | "grad_rollout" | "relevance"``.
        num_layers, num_prefix_tokens: L and p of the model.
        starts: the start layers whose rows are kept (:attr:`rows`).
        pooled: start from a pooling head's row (:meth:`on_pool` / :meth:`on_pool_grad`) instead of [CLS].
        head_fusion, discard_ratio, clamp: as the whole-stack functions.
        from_forward: take the attention from the forward (``on_attention``: rollout without gradients) instead of the
            backward (``on_attention_grad``).
    """

    def __init__(self, kind: ProductKind, *, num_layers: int, num_prefix_tokens: int, starts: Iterable[int] = (0,),
                 pooled: bool = False, head_fusion: str = "mean", discard_ratio: float = 0.0,
                 clamp: str = "after_mean", from_forward: bool = False):
        check_choice(kind, KINDS, "kind")
        check_choice(head_fusion, FUSIONS, "head_fusion")
        check_choice(clamp, CLAMPS, "clamp")
        if from_forward and kind != "rollout":
            raise ValueError(f"{kind} needs the attention gradients: it is accumulated during the backward")
        self.kind = kind
        self.L = int(num_layers)
        self.p = int(num_prefix_tokens)
        self.starts = sorted({int(s) % self.L for s in starts})
        if not self.starts:
            raise ValueError("starts must name at least one start layer")
        self.pooled = bool(pooled)
        self.head_fusion, self.discard_ratio, self.clamp = head_fusion, float(discard_ratio), clamp
        self.from_forward = bool(from_forward)
        self._v: torch.Tensor | None = None  # [B, 1, N] float64, the row so far
        self._pending: dict[int, torch.Tensor] = {}  # forward-only: each layer's matrix until the pass ends
        self._pool_row: torch.Tensor | None = None
        self.rows: dict[int, torch.Tensor] = {}  # start layer -> [B, N] float64

    # ------------------------------------------------------------------ per layer
    def _weighted(self, a: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
        """``[B, 1, H, R, N]`` -> ``[B, 1, R, N]``: the fused (rollout) or gradient-weighted heads."""
        if self.kind == "rollout":
            return fused_heads(a, self.head_fusion)
        assert g is not None
        return grad_weighted(a, g, "before_mean" if self.kind == "relevance" else self.clamp)

    def _matrix(self, layer: int, a: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
        """The layer's matrix ``[B, N, N]`` (the last layer's [CLS] row ``[B, 1, N]`` when not pooled)."""
        a = as_float(a, "attn")[:, None]
        g = None if g is None else as_float(g, "grads").to(a.dtype)[:, None]
        if layer == self.L - 1 and not self.pooled:  # only its [CLS] row is needed
            a = a[:, :, :, :1].contiguous()
            g = None if g is None else g[:, :, :, :1].contiguous()
        m = self._weighted(a, g)[:, 0]
        if self.kind != "relevance":
            m = transitions_from_fused(m.clone() if layer == self.L - 1 and not self.pooled else m, self.p,
                                       self.discard_ratio)
        return m

    def _step(self, layer: int, m: torch.Tensor) -> None:
        if layer == self.L - 1 and not self.pooled:  # the row starts as the last layer's [CLS] row
            v = m.to(torch.float64, copy=True)
            if self.kind == "relevance":
                v[:, 0, 0] += 1.0
        else:
            assert self._v is not None, "the row must start before the layers below it"
            step = torch.bmm(self._v, m.double())
            v = self._v + step if self.kind == "relevance" else step
        self._v = v
        if layer in self.starts:
            self.rows[layer] = v[:, 0]

    def _start_pooled(self, row: torch.Tensor, grad: torch.Tensor | None) -> None:
        r = as_float(row, "query_row")[:, None, :, None]
        if self.kind == "rollout":
            v = fused_heads(r.contiguous(), self.head_fusion)[:, 0, 0]
        else:
            assert grad is not None
            rg = as_float(grad, "query_grads").to(r.dtype)[:, None, :, None]
            v = grad_weighted(r.contiguous(), rg.contiguous(), "before_mean" if self.kind == "relevance"
                              else self.clamp)[:, 0, 0]
        self._v = v.to(torch.float64, copy=True)[:, None]

    # ------------------------------------------------------------------ what a streamed pass calls
    def on_attention(self, layer: int, attn: torch.Tensor) -> None:
        if self.from_forward and layer >= self.starts[0]:
            self._pending[layer] = self._matrix(layer, attn, None)

    def on_pool(self, attn: torch.Tensor) -> None:
        if self.pooled and self.from_forward:
            self._pool_row = attn

    def on_pool_grad(self, attn: torch.Tensor, grad: torch.Tensor) -> None:
        if self.pooled and not self.from_forward:
            self._start_pooled(attn, grad)

    def on_attention_grad(self, layer: int, attn: torch.Tensor, grad: torch.Tensor) -> None:
        if not self.from_forward and layer >= self.starts[0]:
            self._step(layer, self._matrix(layer, attn, grad))

    def finish(self) -> None:
        """A forward-only pass is over (after the last layer, and the pooling head's row when pooled): multiply the
        kept matrices from the last layer down."""
        if not self.from_forward or not self._pending:
            return
        if self.pooled:
            if self._pool_row is None:
                raise ValueError("a pooled rollout needs the pooling head's row (on_pool)")
            self._start_pooled(self._pool_row, None)
        for layer in range(self.L - 1, self.starts[0] - 1, -1):
            self._step(layer, self._pending.pop(layer))
        self._pending.clear()


class LayerRows:
    """The attention rows of some query tokens at some layers: ``rows[(layer, query)] = attn[:, :, query, :]``
    ``[B, H, N]`` float32 (where the pass computes)."""

    def __init__(self, wanted: Mapping[int, Iterable[int]]):
        self.wanted = {int(l): sorted({int(q) for q in qs}) for l, qs in wanted.items()}
        self.rows: dict[tuple[int, int], torch.Tensor] = {}

    def on_attention(self, layer: int, attn: torch.Tensor) -> None:
        for q in self.wanted.get(layer, ()):
            self.rows[(layer, q)] = as_float(attn[:, :, q, :], "attn").clone()


class LayerTokens:
    """The tokens of some layers (``tokens[i]`` ``[B, N, D]`` float32, ``i`` = 0 for the embeddings, ``l + 1`` for
    block ``l``) and the L2 norm of every token at every layer, ``norms [B, L+1, N]`` (as
    :func:`~vitviz.analysis.artefacts.token_norms`)."""

    def __init__(self, keep: Iterable[int], num_layers: int):
        self.keep = {int(i) for i in keep}
        self.tokens: dict[int, torch.Tensor] = {}
        self._norms: list[torch.Tensor | None] = [None] * (int(num_layers) + 1)

    def on_tokens(self, index: int, tokens: torch.Tensor) -> None:
        t = as_float(tokens, "tokens")
        if index in self.keep:
            self.tokens[index] = t.clone()
        self._norms[index] = torch.linalg.vector_norm(t, dim=-1)

    @property
    def norms(self) -> torch.Tensor:
        if any(n is None for n in self._norms):
            raise ValueError("the pass did not give every layer's tokens")
        return torch.stack(self._norms, dim=1)  # type: ignore[arg-type]


class LayerStatistics:
    """Mean attention distance (pixels) and mean entropy (nats) per layer and head, ``[B, L, H]`` float32, as
    :func:`~vitviz.analysis.distance.mean_attention_distance` and :func:`~vitviz.analysis.distance.attention_entropy`
    of the whole stack."""

    def __init__(self, num_layers: int, *, grid: tuple[int, int], patch_size: float, num_prefix_tokens: int):
        self.grid, self.patch_size, self.p = grid, float(patch_size), int(num_prefix_tokens)
        self._dist: list[torch.Tensor | None] = [None] * int(num_layers)
        self._ent: list[torch.Tensor | None] = [None] * int(num_layers)

    def on_attention(self, layer: int, attn: torch.Tensor) -> None:
        a = as_float(attn, "attn")[:, None]
        self._dist[layer] = mean_attention_distance(a, grid=self.grid, patch_size=self.patch_size,
                                                    num_prefix_tokens=self.p)[:, 0]
        self._ent[layer] = attention_entropy(a)[:, 0]

    @property
    def distances(self) -> torch.Tensor:
        return torch.stack(self._dist, dim=1)  # type: ignore[arg-type]

    @property
    def entropies(self) -> torch.Tensor:
        return torch.stack(self._ent, dim=1)  # type: ignore[arg-type]

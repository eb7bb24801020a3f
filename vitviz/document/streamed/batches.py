"""Images through a streamed pass, batch by batch, in a batch size that adapts to the memory available: the streamed
counterpart of :meth:`vitviz.pipeline.Pipeline.run_batch` that ``vitviz export``, ``stats`` and ``evaluate`` use.

:func:`stream_images` groups the images by input size, plans what the maps asked for need
(:func:`~vitviz.document.streamed.demands.plan_streaming`), builds the observers of :mod:`vitviz.analysis.layerwise`,
runs :func:`vitviz.capture.streaming.stream_pass` and returns one :class:`~vitviz.document.streamed.streamed_maps.
StreamedImage` per image. A :class:`BatchSizer` decides how many images go through at once: the batch asked for, or
fewer when the estimate of a pass (:func:`vitviz.capture.streaming.fit_batch`) exceeds the memory available, halved
again on an out-of-memory error (each said once per run).

What a streamed pass keeps: nothing per layer but what was asked for, on the model's device while the pass runs,
copied to the CPU (float32; products float64) once per batch at its end.

No Qt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from vitviz.analysis.layerwise import LayerRows, LayerStatistics, LayerTokens, ReverseProduct
from vitviz.capture import Capture, ImageCapture
from vitviz.capture.model_head import LEGRAD_POOLINGS, is_feature_model
from vitviz.capture.preflight import resolve_target
from vitviz.capture.streaming import fit_batch, is_out_of_memory, stream_pass, streamable
from vitviz.document.streamed.demands import NotStreamable, StreamPlan, plan_streaming
from vitviz.document.streamed.streamed_maps import StreamedImage
from vitviz.pipeline import DTYPES, InferenceResult, PreparedImage
from vitviz.views.base import View
from vitviz.views.options import ViewOptions

__all__ = ["BatchSizer", "Demands", "shape_of_result", "stream_images"]

Demands = Callable[[Any], Sequence[tuple[View, ViewOptions]]]
"""``demands(result) -> [(view, options), ...]``: the maps wanted of each result of a pass (given a result's shape)."""


class BatchSizer:
    """How many images go through one pass: ``requested``, fewer when the memory available would not hold them, half
    as many after an out-of-memory error. ``note(line)`` is told each reduction once per run."""

    def __init__(self, requested: int, note: Callable[[str], None] | None = None):
        if int(requested) < 1:
            raise ValueError(f"batch size must be at least 1, got {requested}")
        self.requested = int(requested)
        self.limit = int(requested)  # lowered by out-of-memory errors, never raised again
        self.note = note or (lambda line: None)
        self._said: set[str] = set()

    def _say(self, kind: str, line: str) -> None:
        if kind not in self._said:
            self._said.add(kind)
            self.note(line)

    def fit(self, model: Any, grid: tuple[int, int], *, gradients: bool, device: Any,
            extra_per_image: int = 0) -> int:
        """The batch for a pass of ``model`` at ``grid`` now."""
        size, per, free = fit_batch(model, grid, self.limit, gradients=gradients, device=device,
                                    extra_per_image=extra_per_image)
        if size < self.limit and free is not None:
            self._say("fit", f"a batch of {self.limit} would need about {self.limit * per / 2**30:.1f} GiB but "
                             f"{free / 2**30:.1f} GiB is available on {device}: batches of {size}")
        return size

    def halve(self, size: int, error: BaseException) -> int:
        """After an out-of-memory error at ``size`` images: the next size (>= 1)."""
        new = max(1, int(size) // 2)
        self.limit = min(self.limit, new)
        self._say("oom", f"out of memory with {size} image(s) at once ({str(error).splitlines()[0][:120]}): "
                         f"{new} at a time from now on")
        return new


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device="meta")


def shape_of_result(pipeline: Any, prepared: PreparedImage, *, gradients: bool, source: str = "image",
                    pooled: bool = False) -> InferenceResult:
    """A streamed result before its pass: the model's shapes at ``prepared``'s input size, every tensor a shape
    without data (what planning reads: layers, heads, grid, prefix tokens, whether there are gradients and an
    attention-pool row)."""
    m = pipeline.model
    grid = tuple(int(v) for v in m.patch_embed.check_input(prepared.x[None]))
    L, H, D = len(m.blocks), int(m.blocks[0].attn.num_heads), int(m.embed_dim)
    P = int(m.num_prefix_tokens)
    N, M = P + grid[0] * grid[1], grid[0] * grid[1]
    cap = ImageCapture(
        logits=_meta(int(getattr(m, "num_classes", 0) or 0) or D), attentions=_meta(L, H, N, N),
        tokens=_meta(L + 1, N, D), grid=grid, patch_size=int(m.patch_size), num_prefix_tokens=P,
        attention_grads=_meta(L, H, N, N) if gradients else None,
        pool_attention=_meta(int(m.attn_pool.num_heads), N) if pooled else None,
        pool_attention_grad=_meta(int(m.attn_pool.num_heads), N) if pooled and gradients else None,
        legrad={k: _meta(L, M) for k in LEGRAD_POOLINGS} if gradients else {},
        gradcam=_meta(L, M) if gradients else None)
    return pipeline.result(prepared, cap, source)


def _observers(plan: StreamPlan, shape: InferenceResult) -> dict[str, Any]:
    L, P = shape.num_layers, shape.num_prefix_tokens
    pooled = shape.pool_attention is not None and P == 0
    obs: dict[str, Any] = {"tokens": LayerTokens(plan.tokens, L)}
    if plan.rows:
        obs["rows"] = LayerRows(plan.rows)
    if plan.statistics:
        obs["stats"] = LayerStatistics(L, grid=shape.grid, patch_size=shape.patch_size, num_prefix_tokens=P)
    for product, starts in plan.products.items():
        obs[f"product{len(obs)}"] = (product, ReverseProduct(product.kind, num_layers=L, num_prefix_tokens=P,
                                                             starts=starts, pooled=pooled, **product.kwargs()))
    return obs


def _forward_product_bytes(plan: StreamPlan, shape: InferenceResult) -> int:
    """What products taken from the forward keep per image: one float32 ``[N, N]`` matrix per layer from their
    start (:attr:`~vitviz.views.stream_plan.Product.keeps_layers`)."""
    N, L = int(shape.attentions.shape[-1]), shape.num_layers
    return sum((L - min(s)) * N * N * 4 for k, s in plan.products.items() if k.keeps_layers)


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu")


def _run(pipeline: Any, prepared: list[PreparedImage], sources: list[str], want: Any, plan: StreamPlan,
         shape: InferenceResult, gradients: bool, keep_graph: bool | None) -> list[StreamedImage]:
    model = pipeline.model
    x = torch.stack([p.x for p in prepared]).to(device=pipeline.device, dtype=DTYPES[pipeline.precision])
    obs = _observers(plan, shape)
    flat = [o[1] if isinstance(o, tuple) else o for o in obs.values()]
    neutral = getattr(pipeline, "legrad_neutral", None) if plan.legrad else None  # SigLIP prompts' correction
    sp = stream_pass(model, x, flat, target=want if gradients else None, legrad=sorted(plan.legrad),
                     gradcam=plan.gradcam, keep_graph=keep_graph, legrad_neutral=neutral)
    for o in flat:
        finish = getattr(o, "finish", None)
        if finish is not None:
            finish()
    L, H = sp.num_layers, sp.num_heads
    N, D = sp.num_tokens, sp.embed_dim
    tok = obs["tokens"]
    norms = _cpu(tok.norms)
    kept_tokens = {i: _cpu(t) for i, t in tok.tokens.items()}
    rows = {k: _cpu(v) for k, v in obs["rows"].rows.items()} if "rows" in obs else {}
    products = {key: {s: _cpu(v) for s, v in prod.rows.items()} for key, prod in
                (o for o in obs.values() if isinstance(o, tuple))}
    stats = obs.get("stats")
    dist = None if stats is None else stats.distances.float().cpu().numpy()
    ent = None if stats is None else stats.entropies.float().cpu().numpy()
    grads = sp.target is not None
    B = len(prepared)
    # the batch's capture as the stored route's, every-layer tensors as shapes: sliced per image as that route slices
    batch = Capture(
        logits=sp.logits, attentions=_meta(L, B, H, N, N), tokens=_meta(L + 1, B, N, D), grid=sp.grid,
        patch_size=sp.patch_size, num_prefix_tokens=sp.num_prefix_tokens,
        attention_grads=_meta(L, B, H, N, N) if grads else None, targets=sp.targets,
        pool_attention=sp.pool_attention, pool_attention_grads=sp.pool_attention_grads, target=sp.target,
        scores=sp.scores, legrad=sp.legrad, gradcam=sp.gradcam)
    out = []
    for b, (p, source) in enumerate(zip(prepared, sources)):
        cap = batch.image(b)
        out.append(StreamedImage(
            result=pipeline.result(p, cap, source), rows={k: v[b] for k, v in rows.items()},
            tokens={i: t[b] for i, t in kept_tokens.items()}, norms=norms[b],
            products={key: {s: v[b] for s, v in r.items()} for key, r in products.items()},
            distances=None if dist is None else dist[b], entropies=None if ent is None else ent[b]))
    return out


def stream_images(pipeline: Any, images: Sequence[Any], *, sources: Sequence[str] | None = None, target: Any = None,
                  gradients: bool = True, demands: Demands | None = None, statistics: bool = False,
                  sizer: BatchSizer | None = None, keep_graph: bool | None = None) -> list[StreamedImage]:
    """Images through streamed passes: one :class:`StreamedImage` per image, in order.

    Args:
        pipeline: a :class:`~vitviz.pipeline.Pipeline` of a vitviz ViT.
        images: PIL images, loaded images or :class:`~vitviz.pipeline.PreparedImage` s.
        sources, target, gradients: as :meth:`~vitviz.pipeline.Pipeline.run_batch` (a target for all, one class per
            image, None for each image's top class; ``gradients=False``: forward only).
        demands: the maps wanted of each result (:data:`Demands`); None: none (statistics, artefacts only).
        statistics: measure mean attention distance and entropy per layer and head.
        sizer: the batch size policy (default: every image of a size at once, fewer when memory says so).
        keep_graph: the backward keeps every block's graph from the forward (True: fastest), recomputes each block
            (False: one block's graph in memory), or chooses by the memory available (None,
            :func:`vitviz.capture.streaming.graph_fits`).

    Raises:
        NotStreamable: the model or a map asked for has no streamed form (use :meth:`Pipeline.run_batch`).
    """
    why = streamable(pipeline.model)
    if why:
        raise NotStreamable(why)
    prepared, sources, groups = pipeline.batch_groups(images, sources=sources, target=target, gradients=gradients)
    n = len(prepared)
    model = pipeline.model
    K = int(getattr(model, "num_classes", 0) or 0)
    sizer = sizer or BatchSizer(max(1, n))
    out: list[Any] = [None] * n
    for idx, want in groups:
        spec = resolve_target(want, len(idx), K, is_feature_model(model))[0] if want is not None else None
        grads = spec is not None
        shape = shape_of_result(pipeline, prepared[idx[0]], gradients=grads, source=sources[idx[0]],
                                pooled=model.attn_pool is not None)
        plan = plan_streaming(shape, demands(shape) if demands is not None else (), statistics=statistics)
        size = sizer.fit(model, shape.grid, gradients=grads, device=pipeline.device,
                         extra_per_image=_forward_product_bytes(plan, shape))
        i = 0
        while i < len(idx):
            chunk = idx[i:i + size]
            w = want if not isinstance(want, list) else [want[j] for j in range(i, i + len(chunk))]
            try:
                done = _run(pipeline, [prepared[j] for j in chunk], [sources[j] for j in chunk], w, plan, shape,
                            grads, keep_graph)
            except Exception as e:  # noqa: BLE001 - out of memory: fewer at once; anything else goes up
                if not is_out_of_memory(e) or size == 1:
                    raise
                size = sizer.halve(size, e)
                continue
            for j, r in zip(chunk, done):
                out[j] = r
            i += len(chunk)
    return out

"""The document behind the desktop app: one image, one model, its capture, and what the user is looking at.

No Qt here. The GUI writes the user's intent into a :class:`Session` (view, layer, head, query patch, colormap ...)
and asks it for numbers to draw: the current map ``[gh, gw]``, per-head thumbnails, plot data, hover read-outs and
the exported picture. Everything is computed from the stored :class:`InferenceResult`; changing what is looked at never
re-runs the model. Derived maps are cached per result, keyed by the options they depend on.

The expensive part, :func:`run_inference` (load + preprocess + one forward/backward), is a plain function so that
the GUI can run it on a worker thread and the tests can call it directly.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
import torch

from vitviz.preprocess import CropGeometry

ViewName = Literal["cls", "query", "rollout", "grad_rollout", "relevance", "token_sim", "pos_sim"]
HeadChoice = int | Literal["mean", "max", "min"]
Precision = Literal["fp32", "bf16", "fp16"]
Interpolation = Literal["nearest", "bilinear"]

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
HEAD_REDUCTIONS: tuple[str, ...] = ("mean", "max", "min")


@dataclass(frozen=True)
class ViewInfo:
    """What a view shows and which controls it listens to."""

    key: ViewName
    title: str
    uses_layer: bool
    uses_head: bool
    uses_query: bool
    uses_rollout_options: bool = False
    uses_target: bool = False


VIEWS: tuple[ViewInfo, ...] = (
    ViewInfo("cls", "Attention from [CLS]", True, True, False),
    ViewInfo("query", "Attention from the selected patch", True, True, True),
    ViewInfo("rollout", "Attention rollout", False, False, False, uses_rollout_options=True),
    ViewInfo("grad_rollout", "Gradient rollout", False, False, False, uses_rollout_options=True, uses_target=True),
    ViewInfo("relevance", "Relevance (Chefer et al.)", False, False, False, uses_rollout_options=True,
             uses_target=True),
    ViewInfo("token_sim", "Token similarity of the selected patch", True, False, True),
    ViewInfo("pos_sim", "Position-embedding similarity", False, False, True),
)
VIEW_BY_KEY: dict[str, ViewInfo] = {v.key: v for v in VIEWS}


def available_devices() -> list[str]:
    """``["cpu", "cuda:0", ..., "mps"]`` for what this machine has."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def available_precisions(device: str) -> list[str]:
    """fp32 and bf16 everywhere; fp16 only on a GPU (CPU half matmuls are slow or missing)."""
    return ["fp32", "bf16"] + (["fp16"] if not device.startswith("cpu") else [])


def device_description(device: str) -> str:
    """A human-readable name of ``device`` (the GPU's model name for CUDA)."""
    if device.startswith("cuda") and torch.cuda.is_available():
        idx = int(device.split(":")[1]) if ":" in device else 0
        return f"{device} ({torch.cuda.get_device_name(idx)})"
    if device == "mps":
        return "mps (Apple GPU)"
    return "cpu"


@dataclass
class InferenceResult:
    """One image through one model: everything the views need, on the CPU in float32.

    Attributes:
        source: the image file (or a name such as ``"clipboard"``).
        rgb: the full image, uint8 ``[H, W, 3]`` (EXIF rotation applied).
        geometry: where the model's input crop lies in the image.
        attentions: ``[L, H, N, N]`` post-softmax attention, row = query.
        tokens: ``[L+1, N, D]`` (index 0: embeddings; l: output of block l).
        attention_grads: ``[L, H, N, N]`` d(target logit)/d(attention), or None.
        logits: ``[K]``.
        target: class index the gradients are taken for (None when there are no gradients).
        grid: ``(gh, gw)`` patch grid; ``patch_size``: pixels per patch side; ``num_prefix_tokens``: CLS/DIST/REG.
        pos_embed: ``[N_pos, D]`` the model's position embedding for this grid (prefix slots included when it has them).
        patch_embed_weight: ``[D, C, P, P]`` the patch-embedding filters.
        model_name, device, precision: for captions and the status bar.
        labels: class names (None when the model has none).
        analyses: rollout, gradient rollout, relevance, mean attention distance and entropy at the default view
            options, computed in one sweep (:func:`vitviz.analysis.analyse_image`) by :func:`run_inference` in the
            background, so those views and plots show at once; None without a [CLS] token.
    """

    source: str
    rgb: np.ndarray
    geometry: CropGeometry
    attentions: torch.Tensor
    tokens: torch.Tensor
    attention_grads: torch.Tensor | None
    logits: torch.Tensor
    target: int | None
    grid: tuple[int, int]
    patch_size: int
    num_prefix_tokens: int
    pos_embed: torch.Tensor | None = None
    patch_embed_weight: torch.Tensor | None = None
    model_name: str = "model"
    device: str = "cpu"
    precision: str = "fp32"
    labels: tuple[str, ...] | None = None
    analyses: Any = None  # vitviz.analysis.ImageAnalyses

    @property
    def num_layers(self) -> int:
        return int(self.attentions.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.attentions.shape[1])

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def image_size(self) -> tuple[int, int]:
        return (int(self.rgb.shape[0]), int(self.rgb.shape[1]))

    @property
    def probabilities(self) -> torch.Tensor:
        return torch.softmax(self.logits.float(), dim=-1)

    def label(self, index: int) -> str:
        if self.labels is not None and 0 <= index < len(self.labels):
            return self.labels[index]
        return f"class {index}"

    def top_k(self, k: int = 5) -> list[tuple[int, str, float]]:
        """``[(class index, label, probability)]`` for the k most probable classes."""
        p = self.probabilities
        k = min(k, p.numel())
        vals, idx = p.topk(k)
        return [(int(i), self.label(int(i)), float(v)) for v, i in zip(vals, idx)]


class CancelledError(Exception):
    """Raised inside worker code when the user cancelled (e.g. a download)."""


def image_to_rgb(image: Any) -> np.ndarray:
    """A PIL image (any mode) -> uint8 ``[H, W, 3]``."""
    if image.mode != "RGB":
        image = image.convert("RGB")
    return np.ascontiguousarray(np.asarray(image, dtype=np.uint8))


def run_inference(model: torch.nn.Module, image: Any, *, source: str = "image", target: int | None = None,
                  device: str = "cpu", precision: str = "fp32") -> InferenceResult:
    """Preprocess one PIL image with the model's spec, capture attention and gradients, return the result.

    The model must already be on ``device`` in the dtype of ``precision``. Gradients are taken for ``target`` or,
    when it is None, for the top prediction (one extra forward pass without hooks to find it).

    Args:
        model: a :class:`vitviz.model.ViT` with ``spec`` set.
        image: a PIL image (converted to RGB here).
        source: a name for captions (the file path).
        target: class index for the gradient views, or None for the top prediction.
        device: torch device string.
        precision: "fp32" | "bf16" | "fp16".

    Returns:
        An :class:`InferenceResult` with tensors on the CPU in float32.
    """
    from vitviz.analysis import analyse_image
    from vitviz.capture import capture

    spec = model.spec
    rgb_image = image.convert("RGB") if image.mode != "RGB" else image
    x, geometry = spec.preprocess.apply(rgb_image)
    dtype = DTYPES[precision]
    x = x[None].to(device=device, dtype=dtype)
    model.eval()
    if target is None:
        with torch.no_grad():
            target = int(model(x).float().argmax(dim=-1)[0])
    num_classes = int(getattr(model, "num_classes", 0) or 0)
    if num_classes <= 0:
        target = None
    elif not 0 <= target < num_classes:
        raise ValueError(f"target class {target} is out of range for a model with {num_classes} classes")
    cap = capture(model, x, target=target, store_dtype=torch.float32)
    grads = cap.attention_grads
    pos = getattr(model, "pos_embed", None)
    pos_embed = None
    if pos is not None:
        try:
            pos_embed = model.pos_embed_for(tuple(cap.grid))[0].detach().float().cpu()
        except Exception:  # noqa: BLE001 - a model without resampling support still shows the other views
            pos_embed = pos[0].detach().float().cpu()
    weight = model.patch_embed.proj.weight.detach().float().cpu() if hasattr(model, "patch_embed") else None
    attentions = cap.attentions[:, 0].float().cpu()
    attention_grads = grads[:, 0].float().cpu() if grads is not None else None
    analyses = None
    if cap.num_prefix_tokens >= 1:
        analyses = analyse_image(attentions, attention_grads, grid=tuple(cap.grid), patch_size=cap.patch_size,
                                 num_prefix_tokens=cap.num_prefix_tokens)
    return InferenceResult(
        source=source,
        rgb=image_to_rgb(rgb_image),
        geometry=geometry,
        attentions=attentions,
        tokens=cap.tokens[:, 0].float().cpu(),
        attention_grads=attention_grads,
        logits=cap.logits[0].float().cpu(),
        target=target,
        grid=tuple(int(g) for g in cap.grid),  # type: ignore[arg-type]
        patch_size=int(cap.patch_size),
        num_prefix_tokens=int(cap.num_prefix_tokens),
        pos_embed=pos_embed,
        patch_embed_weight=weight,
        model_name=getattr(spec, "name", "model"),
        device=device,
        precision=precision,
        labels=getattr(spec, "labels", None),
        analyses=analyses,
    )


@dataclass(frozen=True)
class ViewOptions:
    """What the user is looking at. Immutable; the session swaps it for a modified copy."""

    view: ViewName = "cls"
    layer: int = 0
    head: HeadChoice = "mean"
    query: int = 0  # patch index in row-major order (0 .. gh*gw-1), prefix tokens not counted
    head_fusion: Literal["mean", "max", "min"] = "mean"
    discard_ratio: float = 0.0
    start_layer: int = 0
    cmap: str = "inferno"
    opacity: float = 0.6
    interpolation: Interpolation = "nearest"
    colorbar: bool = True
    caption: bool = True


@dataclass(frozen=True)
class HoverInfo:
    """What lies under the cursor: patch (row, col), its token index and the current map's value there."""

    row: int
    col: int
    token: int
    value: float


class _LRU(OrderedDict):
    def __init__(self, maxsize: int = 256):
        super().__init__()
        self.maxsize = maxsize

    def get_or(self, key: Any, fn: Callable[[], Any]) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        val = fn()
        self.put(key, val)
        return val

    def put(self, key: Any, val: Any) -> None:
        self[key] = val
        self.move_to_end(key)
        if len(self) > self.maxsize:
            self.popitem(last=False)


class Session:
    """The app's document: the opened images, the current result and the view options.

    Qt-free; the GUI calls :meth:`set_options` and then asks for :meth:`current_map` etc. All maps are float32
    numpy arrays ``[gh, gw]`` over the patch grid, raw (not normalised).
    """

    def __init__(self) -> None:
        self.images: list[str] = []
        self.index: int = -1
        self.result: InferenceResult | None = None
        self.options = ViewOptions()
        self._cache = _LRU(512)

    # ------------------------------------------------------------------ images
    def add_images(self, paths: list[str]) -> int:
        """Append ``paths`` (duplicates are moved to the end) and return the index of the first one."""
        first = None
        for p in paths:
            p = str(p)
            if p in self.images:
                self.images.remove(p)
            self.images.append(p)
            if first is None:
                first = len(self.images) - 1
        if first is not None:
            # indices of earlier duplicates shifted; recompute the first added
            first = self.images.index(str(paths[0]))
        return first if first is not None else self.index

    def step(self, delta: int) -> str | None:
        """The path ``delta`` images away from the current one (wrapping), or None without images."""
        if not self.images:
            return None
        i = (self.index + delta) % len(self.images) if self.index >= 0 else 0
        return self.images[i]

    # ------------------------------------------------------------------ result & options
    def set_result(self, result: InferenceResult) -> None:
        """Adopt a new result; keeps the view options, clamping layer/head/query to the new model."""
        self.result = result
        self._cache.clear()
        if result.source in self.images:
            self.index = self.images.index(result.source)
        self.options = self._clamped(self.options)
        pre = result.analyses
        if pre is not None:  # the one-sweep results are what the views compute at the default options
            default = ViewOptions()
            for view, m in (("rollout", pre.rollout), ("grad_rollout", pre.gradient_rollout),
                            ("relevance", pre.relevance)):
                if m is not None:
                    key = self._map_key(replace(default, view=view))
                    self._cache.put(("map",) + key, _as_grid(m, result.grid))
            self._cache.put(("mad",), _np(pre.mean_attention_distance))
            self._cache.put(("entropy",), _np(pre.attention_entropy))

    def set_options(self, **changes: Any) -> ViewOptions:
        """Change view options (unknown names raise); returns the new, clamped options."""
        opts = replace(self.options, **changes)
        self.options = self._clamped(opts)
        return self.options

    def layer_range(self, view: str | None = None) -> tuple[int, int]:
        """Valid layers for a view: ``0 .. L-1`` for attention; ``0 .. L`` for token similarity (0 = embeddings)."""
        r = self.result
        if r is None:
            return (0, 0)
        view = view or self.options.view
        return (0, r.num_layers if view == "token_sim" else r.num_layers - 1)

    def _clamped(self, o: ViewOptions) -> ViewOptions:
        r = self.result
        if o.view not in VIEW_BY_KEY:
            raise ValueError(f"unknown view {o.view!r}; valid: {[v.key for v in VIEWS]}")
        if not (isinstance(o.head, int) or o.head in HEAD_REDUCTIONS):
            raise ValueError(f"head must be an index or one of {HEAD_REDUCTIONS}, got {o.head!r}")
        if r is None:
            return o
        lo, hi = self.layer_range(o.view)
        head = o.head
        if isinstance(head, int):
            head = min(max(head, 0), r.num_heads - 1)
        return replace(
            o,
            layer=min(max(int(o.layer), lo), hi),
            head=head,
            query=min(max(int(o.query), 0), r.num_patches - 1),
            start_layer=min(max(int(o.start_layer), 0), r.num_layers - 1),
            discard_ratio=float(min(max(o.discard_ratio, 0.0), 0.99)),
            opacity=float(min(max(o.opacity, 0.0), 1.0)),
        )

    @property
    def view(self) -> ViewInfo:
        return VIEW_BY_KEY[self.options.view]

    def query_token(self) -> int:
        """Token index of the selected query patch (prefix tokens counted)."""
        assert self.result is not None
        return self.result.num_prefix_tokens + self.options.query

    # ------------------------------------------------------------------ maps
    def _map_key(self, o: ViewOptions) -> tuple:
        v = VIEW_BY_KEY[o.view]
        key: tuple = (o.view,)
        if v.uses_layer:
            key += (o.layer,)
        if v.uses_head:
            key += (o.head,)
        if v.uses_query:
            key += (o.query,)
        if o.view == "rollout":
            key += (o.head_fusion, o.discard_ratio, o.start_layer)
        elif o.view == "grad_rollout":
            key += (o.discard_ratio,)
        elif o.view == "relevance":
            key += (o.start_layer,)
        return key

    def current_map(self) -> np.ndarray | None:
        """The current view's map, float32 ``[gh, gw]``; None without a result (or without gradients)."""
        if self.result is None:
            return None
        o = self.options
        return self._cache.get_or(("map",) + self._map_key(o), lambda: self._compute_map(o))

    def map_for(self, **changes: Any) -> np.ndarray | None:
        """The map the session would show with ``changes`` applied (does not change the options)."""
        if self.result is None:
            return None
        o = self._clamped(replace(self.options, **changes))
        return self._cache.get_or(("map",) + self._map_key(o), lambda: self._compute_map(o))

    def _compute_map(self, o: ViewOptions) -> np.ndarray | None:
        from vitviz import analysis as A

        r = self.result
        assert r is not None
        p, grid = r.num_prefix_tokens, r.grid
        attn = r.attentions
        if o.view == "cls":
            if p > 0:
                m = A.cls_attention(attn, o.layer, o.head, grid=grid, num_prefix_tokens=p)
            else:  # no [CLS] token: fall back to the selected patch
                m = A.query_attention(attn, o.layer, o.head, p + o.query, grid=grid, num_prefix_tokens=p)
        elif o.view == "query":
            m = A.query_attention(attn, o.layer, o.head, p + o.query, grid=grid, num_prefix_tokens=p)
        elif o.view in ("rollout", "grad_rollout", "relevance") and p == 0:
            return None  # rollouts follow the [CLS] row: undefined without one
        elif o.view == "rollout":
            m = A.attention_rollout(attn, grid=grid, num_prefix_tokens=p, head_fusion=o.head_fusion,
                                    discard_ratio=o.discard_ratio, start_layer=o.start_layer)
        elif o.view == "grad_rollout":
            if r.attention_grads is None:
                return None
            m = A.gradient_rollout(attn, r.attention_grads, grid=grid, num_prefix_tokens=p,
                                   discard_ratio=o.discard_ratio)
        elif o.view == "relevance":
            if r.attention_grads is None:
                return None
            m = A.relevance(attn, r.attention_grads, grid=grid, num_prefix_tokens=p, start_layer=o.start_layer)
        elif o.view == "token_sim":
            m = A.token_similarity(r.tokens, layer=o.layer, index=p + o.query, grid=grid, num_prefix_tokens=p)
        elif o.view == "pos_sim":
            sim = self.pos_similarity()
            if sim is None:
                return None
            gw = grid[1]
            return np.ascontiguousarray(sim[o.query // gw, o.query % gw])
        else:  # pragma: no cover - _clamped rejects unknown views
            raise ValueError(o.view)
        return _as_grid(m, grid)

    def unavailable_reason(self) -> str | None:
        """Why the current view has no map (None when it has one)."""
        r = self.result
        if r is None:
            return "no image has been analysed yet"
        if self.current_map() is not None:
            return None
        if self.options.view in ("rollout", "grad_rollout", "relevance") and r.num_prefix_tokens == 0:
            return "the model has no [CLS] token"
        if self.view.uses_target and r.attention_grads is None:
            return "the model has no classifier, so there are no gradients"
        if self.options.view == "pos_sim":
            return "the model has no learned position embedding for this grid"
        return "not available for this model"

    def head_maps(self, layer: int | None = None) -> np.ndarray | None:
        """Every head of ``layer`` for the per-head views: float32 ``[H, gh, gw]``.

        Rows are the [CLS] query (or the selected patch in the query view, and in every view without a [CLS] token).
        """
        r = self.result
        if r is None:
            return None
        layer = self.options.layer if layer is None else layer
        layer = min(max(layer, 0), r.num_layers - 1)
        q = self._thumb_query()
        return self._cache.get_or(("heads", layer, q), lambda: _rows(r, r.attentions[layer], q))

    def all_head_maps(self) -> np.ndarray | None:
        """``[L, H, gh, gw]`` attention rows of every layer and head (same query as :meth:`head_maps`)."""
        r = self.result
        if r is None:
            return None
        q = self._thumb_query()
        return self._cache.get_or(("all_heads", q), lambda: _rows(r, r.attentions, q))

    def _thumb_query(self) -> int:
        r = self.result
        assert r is not None
        if self.options.view == "query" or r.num_prefix_tokens == 0:
            return self.query_token()
        return 0

    # ------------------------------------------------------------------ plots
    def mean_distances(self) -> np.ndarray | None:
        """``[L, H]`` mean attention distance in pixels."""
        from vitviz import analysis as A

        r = self.result
        if r is None:
            return None
        return self._cache.get_or(("mad",), lambda: _np(A.mean_attention_distance(
            r.attentions, grid=r.grid, patch_size=r.patch_size, num_prefix_tokens=r.num_prefix_tokens)))

    def entropies(self) -> np.ndarray | None:
        """``[L, H]`` mean attention entropy (nats)."""
        from vitviz import analysis as A

        r = self.result
        if r is None:
            return None
        return self._cache.get_or(("entropy",), lambda: _np(A.attention_entropy(r.attentions)))

    def pos_similarity(self) -> np.ndarray | None:
        """``[gh, gw, gh, gw]`` cosine similarity of position embeddings, or None when the model has none."""
        from vitviz import analysis as A

        r = self.result
        if r is None or r.pos_embed is None:
            return None
        n_patch = r.num_patches
        pe = r.pos_embed
        p = pe.shape[0] - n_patch
        if p < 0:
            return None
        return self._cache.get_or(("possim",), lambda: _np(A.position_embedding_similarity(
            pe[None] if pe.ndim == 2 else pe, grid=r.grid, num_prefix_tokens=p)))

    def filters(self, k: int = 28) -> np.ndarray | None:
        """``[k, P, P, C]`` principal components of the patch-embedding filters, in [0, 1]."""
        from vitviz import analysis as A

        r = self.result
        if r is None or r.patch_embed_weight is None:
            return None
        w = r.patch_embed_weight
        k = min(k, w.shape[0], w[0].numel())
        return self._cache.get_or(("filters", k), lambda: _np(A.embedding_filters(w, k=k)))

    # ------------------------------------------------------------------ geometry
    def image_to_patch(self, x: float, y: float) -> tuple[int, int] | None:
        """The patch (row, col) under image pixel coordinate ``(x, y)`` (continuous, pixel edges at integers)."""
        r = self.result
        if r is None:
            return None
        h, w = r.image_size
        if not (0 <= x < w and 0 <= y < h):
            return None
        iy, ix = r.geometry.image_to_input(y, x)
        row, col = math.floor(iy / r.patch_size), math.floor(ix / r.patch_size)
        gh, gw = r.grid
        if 0 <= row < gh and 0 <= col < gw:
            return (row, col)
        return None

    def patch_rect(self, index: int) -> tuple[float, float, float, float]:
        """The patch ``index`` (row-major) as ``(x0, y0, width, height)`` in image pixel coordinates."""
        r = self.result
        assert r is not None
        gw = r.grid[1]
        row, col = divmod(index, gw)
        y0, x0, y1, x1 = self.crop_rect_yx()
        sy = (y1 - y0) / r.grid[0]
        sx = (x1 - x0) / r.grid[1]
        return (x0 + col * sx, y0 + row * sy, sx, sy)

    def crop_rect_yx(self) -> tuple[float, float, float, float]:
        """The model's crop as ``(y0, x0, y1, x1)`` in image pixels, limited to the patch grid actually used."""
        r = self.result
        assert r is not None
        g = r.geometry
        h, w = g.image_size
        rh, rw = g.resized_size
        top, left, _, _ = g.crop_box
        gh, gw = r.grid
        sy, sx = h / rh, w / rw
        return (top * sy, left * sx, (top + gh * r.patch_size) * sy, (left + gw * r.patch_size) * sx)

    def hover(self, x: float, y: float) -> HoverInfo | None:
        """Patch, token index and current value under image pixel ``(x, y)``."""
        rc = self.image_to_patch(x, y)
        if rc is None:
            return None
        r = self.result
        assert r is not None
        row, col = rc
        idx = row * r.grid[1] + col
        m = self.current_map()
        value = float(m[row, col]) if m is not None else float("nan")
        return HoverInfo(row, col, r.num_prefix_tokens + idx, value)

    # ------------------------------------------------------------------ text
    def head_text(self) -> str:
        h = self.options.head
        return f"head {h}" if isinstance(h, int) else f"{h} of heads"

    def describe_view(self) -> str:
        """Caption of the current view, e.g. ``"Attention from [CLS] · layer 3 · head 5"``."""
        r, o, v = self.result, self.options, self.view
        parts = [v.title]
        if v.uses_layer:
            if o.view == "token_sim":
                parts.append("patch embeddings" if o.layer == 0 else f"layer {o.layer}")
            else:
                parts.append(f"layer {o.layer}")
        if v.uses_head:
            parts.append(self.head_text())
        if v.uses_query and r is not None:
            row, col = divmod(o.query, r.grid[1])
            parts.append(f"patch ({row}, {col})")
        if o.view == "rollout":
            parts.append(f"{o.head_fusion} fusion, discard {o.discard_ratio:.2f}, from layer {o.start_layer}")
        if v.uses_target and r is not None and r.target is not None:
            parts.append(f"target {r.label(r.target)}")
        return " · ".join(parts)

    def caption(self) -> str:
        r = self.result
        name = r.model_name if r is not None else "model"
        src = Path(r.source).name if r is not None else ""
        return f"{name} · {self.describe_view()}" + (f" · {src}" if src else "")

    # ------------------------------------------------------------------ rendering
    def image_map(self, m: np.ndarray | None = None) -> np.ndarray | None:
        """The current map on the full image's pixel grid, float32 ``[H, W]`` with NaN outside the crop."""
        from vitviz.analysis import map_to_image

        r = self.result
        m = self.current_map() if m is None else m
        if r is None or m is None:
            return None
        mode = "bilinear" if self.options.interpolation == "bilinear" else "nearest"
        out = map_to_image(torch.as_tensor(m), r.geometry, mode=mode)
        return _np(out)

    def render_export(self) -> np.ndarray | None:
        """The current view at the image's own resolution (plus optional colour bar / caption): uint8 ``[H', W', 3]``."""
        from vitviz import imaging

        r = self.result
        values = self.image_map()
        if r is None or values is None:
            return None
        o = self.options
        return imaging.render_export(r.rgb, values, cmap=o.cmap, opacity=o.opacity, colorbar=o.colorbar,
                                     caption=self.caption() if o.caption else None)

    def render_heads_grid(self, ncols: int | None = None) -> np.ndarray | None:
        """Every head of the current layer overlaid on the image, tiled: uint8 ``[H', W', 3]``."""
        from vitviz import imaging
        from vitviz.analysis import map_to_image

        r = self.result
        maps = self.head_maps()
        if r is None or maps is None:
            return None
        o = self.options
        mode = "bilinear" if o.interpolation == "bilinear" else "nearest"
        tiles = []
        for m in maps:
            values = _np(map_to_image(torch.as_tensor(m), r.geometry, mode=mode))
            tiles.append(imaging.overlay(r.rgb, values, cmap=o.cmap, opacity=o.opacity))
        ncols = ncols or int(math.ceil(math.sqrt(len(tiles))))
        labels = [f"layer {o.layer} head {h}" for h in range(len(tiles))]
        return imaging.tile_grid(tiles, ncols, labels=labels)


def _np(t: Any) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().float().cpu().numpy()
    return np.asarray(t, dtype=np.float32)


def _as_grid(m: Any, grid: tuple[int, int]) -> np.ndarray:
    a = _np(m).astype(np.float32, copy=False)
    if a.shape != tuple(grid):
        a = a.reshape(grid)
    return np.ascontiguousarray(a)


def _rows(r: InferenceResult, attn: torch.Tensor, query: int) -> np.ndarray:
    """Attention rows of token ``query`` over the patch keys: ``[..., H, N, N]`` -> ``[..., H, gh, gw]``."""
    p = r.num_prefix_tokens
    rows = attn[..., query, p:]
    return np.ascontiguousarray(_np(rows).reshape(*rows.shape[:-1], *r.grid))

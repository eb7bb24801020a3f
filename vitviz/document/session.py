"""The document behind the desktop app: the opened images, the current result, and what the user is looking at.

No Qt here. The GUI writes the user's intent into a :class:`Session` (view, layer, head, query patch, colormap ...)
and asks it for numbers to draw: the current map ``[gh, gw]``, per-head thumbnails, plot data, hover read-outs, the
artefact tokens and the colour scale. How a map is drawn and described (mask, title, scale words, colour-bar label)
are plain functions of the session's data in :mod:`vitviz.document.appearance`, which the panels call;
:mod:`vitviz.document.panel` assembles what a panel shows from both. Everything is computed from the stored
:class:`~vitviz.pipeline.InferenceResult` through the registry of views (:mod:`vitviz.views`); changing what is
looked at never re-runs the model. Derived maps are cached per result, keyed by the options each view reads.

A view that fits something to the tokens (feature PCA: a view with a ``fitted`` method) has its fit made once per
result and options, and its map and picture read from it. Its "Fit over all open images" option (``pca_joint``) fits
over the patch tokens of the open images that :attr:`Session.joint` holds (:mod:`vitviz.document.open_tokens`; the
window reads them on its worker): :meth:`Session.joint_missing` says which it still lacks.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from vitviz import analysis as A
from vitviz import views
from vitviz._util.arrays import to_numpy as _np
from vitviz.document import appearance
from vitviz.document.open_tokens import OpenImageTokens, joint_words
from vitviz.views.base import View
from vitviz.views.options import HEAD_REDUCTIONS, ViewOptions, checked

if TYPE_CHECKING:  # pragma: no cover - torch is imported when the first result arrives, not at start-up
    import torch

    from vitviz.analysis.artefacts import ArtefactTokens
    from vitviz.pipeline import InferenceResult
    from vitviz.render.scales import ColourScale


MAP_CACHE_SIZE = 512  # maps, scales and masks kept per result (emptied for each new result)


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

    def __init__(self, cache: _LRU | None = None) -> None:
        """``cache``: the map cache to use (documents showing one result may share one); default a new one."""
        self.images: list[str] = []
        self.index: int = -1
        self.result: InferenceResult | None = None
        self.options = ViewOptions()
        self._cache = _LRU(MAP_CACHE_SIZE) if cache is None else cache
        self.joint: OpenImageTokens | None = None  # the open images' tokens (the window's); None: own fits only
        self.joint_images: list[str] | None = None  # the images a joint fit goes over (None: :attr:`images`)

    @property
    def cache(self) -> _LRU:
        """The per-result cache of maps, colour scales and masks (emptied for each new result)."""
        return self._cache

    # ------------------------------------------------------------------ images
    def add_images(self, paths: list[str]) -> int:
        """Append ``paths`` (duplicates are moved to the end) and return the index of the first one."""
        if not paths:
            return self.index
        for p in map(str, paths):
            if p in self.images:
                self.images.remove(p)
            self.images.append(p)
        return self.images.index(str(paths[0]))

    def step(self, delta: int, start: str | None = None) -> str | None:
        """The path ``delta`` images away from ``start`` (default: the current image), wrapping; None without images.

        The window passes the image it last *requested*, so quick presses each move on even before the previous
        request has finished.
        """
        if not self.images:
            return None
        i = self.images.index(start) if start in self.images else self.index
        return self.images[(i + delta) % len(self.images) if i >= 0 else 0]

    def forget_image(self, path: str) -> None:
        """Drop an unreadable image from the set (the current index follows the shown image)."""
        if path in self.images:
            self.images.remove(path)
            r = self.result
            self.index = self.images.index(r.source) if r is not None and r.source in self.images else -1

    # ------------------------------------------------------------------ result & options
    def set_result(self, result: InferenceResult, *, centre_query: bool = False) -> None:
        """Adopt a new result; keeps the view options, clamping layer/head/query to the new model. ``centre_query``:
        a result on a new patch grid starts its query patch at the centre (:func:`appearance.default_query`)"""
        grid = None if self.result is None else self.result.grid
        self.result = result
        self._cache.clear()
        if result.source in self.images:
            self.index = self.images.index(result.source)
        self.options = self.clamped(self.options)
        if centre_query and grid != result.grid:
            self.options = replace(self.options, query=appearance.default_query(result, self.artefact_grid()))

    def set_options(self, **changes: Any) -> ViewOptions:
        """Change view options (unknown names raise); returns the new, clamped options."""
        self.options = self.clamped(replace(self.options, **changes))
        return self.options

    @property
    def view(self) -> View:
        return views.get(self.options.view)

    def layer_range(self, view: str | None = None) -> tuple[int, int]:
        """Valid layers of a view (e.g. ``0 .. L`` for token similarity, where 0 is the embeddings)."""
        if self.result is None:
            return (0, 0)
        return views.get(view or self.options.view).layer_range(self.result)

    def slider_range(self) -> tuple[int, int]:
        """The layer slider's range in the current view (its layers, or the start layers of a cumulative view)."""
        v, r = self.view, self.result
        if r is None or v.slider is None:
            return (0, 0)
        return v.slider_range(r)

    def slider_value(self) -> int:
        """The option the layer slider shows in the current view."""
        v = self.view
        if not v.slider:
            return int(self.options.layer)
        return v.slider_value(self.options, self.result)

    def set_slider(self, value: int) -> ViewOptions:
        """Move the layer slider: sets the option the current view reads as its layer (clamped); no-op in views
        that use every layer."""
        v = self.view
        if v.slider is None:
            return self.options
        lo, hi = self.slider_range()
        return self.set_options(**{v.slider: min(max(int(value), lo), hi)})

    def clamped(self, o: ViewOptions) -> ViewOptions:
        """``o`` checked against the option table (:func:`vitviz.views.options.checked`: an unknown view or choice
        raises ValueError naming the option, numbers are clamped to their range and to the shown model) and a fixed
        colour scale's range checked."""
        view = views.get(o.view)  # raises for an unknown view
        o = checked(o, self.result, view)
        if o.scale == "fixed":
            from vitviz.render.scales import scale_for

            if o.fixed_range is None:
                raise ValueError("a fixed colour scale needs a range (fixed_range=(lo, hi))")
            scale_for(np.zeros(1), mode="fixed", fixed=o.fixed_range, log=o.log_scale)  # ValueError: what is wrong
        return o

    # ------------------------------------------------------------------ maps
    def current_map(self) -> np.ndarray | None:
        """The current view's map, float32 ``[gh, gw]``; None without a result (or when the view is unavailable)."""
        return self.map_for(self.view, self.options)

    def map_for(self, view: View, options: ViewOptions) -> np.ndarray | None:
        """Any view's map at any options (cached), e.g. every layer for a colour scale shared across layers."""
        r = self.result
        if r is None:
            return None
        if hasattr(view, "fitted"):
            return self._cache.get_or(("map",) + self._map_key(view, options), lambda: view.map_of(
                self.fitted(view, options), r))
        return self._cache.get_or(("map",) + view.cache_key(options), lambda: view.compute(
            appearance.result_for(r, self._cache, view, options, self.artefact_grid), options))

    def rgb_map(self) -> np.ndarray | None:
        """An RGB view's picture (:attr:`vitviz.views.View.rgb`), float32 RGBA ``[gh, gw, 4]`` (cached); None for
        the other views, without a result, or when unavailable."""
        v, o = self.view, self.options
        if self.result is None or not v.rgb:
            return None
        if hasattr(v, "fitted"):
            return self._cache.get_or(("rgb",) + self._map_key(v, o), lambda: v.rgb_of(self.fitted(v, o)))
        return self._cache.get_or(("rgb",) + v.cache_key(o), lambda: v.compute_rgb(
            appearance.result_for(self.result, self._cache, v, o, self.artefact_grid), o))

    # ------------------------------------------------------------------ fits (feature PCA)
    def fitted(self, view: View, options: ViewOptions) -> Any:
        """A fitted view's fit (feature PCA's :class:`vitviz.analysis.PatchPCA`): made once per result and options
        (its map and its picture both read it), over the open images' tokens when the options fit jointly."""
        over = self.joint_fit_images(view, options)

        def make() -> Any:
            fit = None
            if over and self.joint is not None:
                fit = self.joint.fit(over, options.layer, mask_background=bool(options.mask_background))
            source = appearance.result_for(self.result, self._cache, view, options, self.artefact_grid)
            return view.fitted(source, options, fit)

        return self._cache.get_or(("fit",) + self._map_key(view, options), make)

    def _joins(self, view: View, options: ViewOptions) -> bool:
        return self.result is not None and "pca_joint" in view.reads and bool(getattr(options, "pca_joint", False))

    def _open_images(self) -> list[str]:
        return list(self.images if self.joint_images is None else self.joint_images)

    def joint_fit_images(self, view: View | None = None, options: ViewOptions | None = None) -> tuple[str, ...]:
        """The images a joint fit goes over now (those whose tokens :attr:`joint` holds, the shown one first); ()
        when the view does not fit over all open images or there is nothing to hold them."""
        v, o = view or self.view, options or self.options
        if not self._joins(v, o) or self.joint is None:
            return ()
        assert self.result is not None
        return self.joint.held(self._open_images(), self.result)

    def joint_missing(self) -> list[str]:
        """The open images whose tokens the current view's joint fit still lacks (the window reads them)."""
        if not self._joins(self.view, self.options) or self.joint is None:
            return []
        assert self.result is not None
        return self.joint.missing(self._open_images(), self.result)

    def joint_note(self) -> str:
        """The caption's words on a joint fit ("fitted over 3 open images"), "" when the view does not fit jointly."""
        if not self._joins(self.view, self.options):
            return ""
        if self.joint is None:
            return "fitted on this image alone (no other images are held)"
        r = self.result
        assert r is not None
        opened = len(set(self._open_images()) | {r.source})
        return joint_words(len(self.joint_fit_images()), opened, bool(self.joint_missing()))

    def _map_key(self, view: View, options: ViewOptions) -> tuple:
        return view.cache_key(options) + (self.joint_fit_images(view, options),)

    def display_map(self) -> np.ndarray | None:
        """What the canvas shows: the map itself (nearest) or its 8x bilinear upsampling (smooth)."""
        m = self.current_map()
        if m is None or self.options.interpolation != "bilinear":
            return m
        import torch

        from vitviz.analysis import upsample

        # an excluded token's value does not bleed into its neighbours
        m = appearance.filled(m, appearance.excluded_grid(self.options, self.artefact_grid))
        key = ("display", self.options.scale_excludes_artefacts) + self._map_key(self.view, self.options)
        return self._cache.get_or(key, lambda: upsample(torch.as_tensor(m), (m.shape[0] * 8, m.shape[1] * 8),
                                                        mode="bilinear").numpy())

    def unavailable_reason(self) -> str | None:
        """Why the current view has no map (None when it has one)."""
        r = self.result
        if r is None:
            return "no image has been analysed yet"
        if self.current_map() is not None:
            return None
        return self.view.unavailable_at(r, self.options) or "not available for this model"

    def head_maps(self, layer: int | None = None) -> np.ndarray | None:
        """Every head of ``layer`` for the per-head views: float32 ``[H, gh, gw]``.

        Rows are the [CLS] query (or the selected patch in the query view, and in every view without a [CLS] token;
        the attention-pooling head's query where the view reads it in place of [CLS]).
        """
        r = self.result
        if r is None:
            return None
        if appearance.reads_pool_row(r, self.view):  # the pooling head's row per head (from the last layer: any)
            from vitviz.views.base import pool_row

            return self._cache.get_or(("heads", "pool"), lambda: _rows(r, pool_row(r)[:, None, :], 0))
        layer = self.options.layer if layer is None else layer
        layer = min(max(layer, 0), r.num_layers - 1)
        q = self.thumb_query()
        return self._cache.get_or(("heads", layer, q), lambda: _rows(r, r.attentions[layer], q))

    def all_head_maps(self) -> np.ndarray | None:
        """``[L, H, gh, gw]`` attention rows of every layer and head (same query as :meth:`head_maps`)."""
        r = self.result
        if r is None:
            return None
        q = self.thumb_query()
        return self._cache.get_or(("all_heads", q), lambda: _rows(r, r.attentions, q))

    def thumb_query(self) -> int:
        """The token whose attention rows the head thumbnails show: [CLS], or the selected patch."""
        r = self.result
        assert r is not None
        if "query" in self.view.reads and "head" in self.view.reads or r.num_prefix_tokens == 0:
            return r.num_prefix_tokens + self.options.query  # the selected patch (prefix tokens counted)
        return 0

    # ------------------------------------------------------------------ plots
    def mean_distances(self) -> np.ndarray | None:
        """``[L, H]`` mean attention distance in pixels."""
        r = self.result
        if r is None:
            return None
        return self._cache.get_or(("mad",), lambda: _np(A.mean_attention_distance(
            r.attentions, grid=r.grid, patch_size=r.patch_size, num_prefix_tokens=r.num_prefix_tokens)))

    def entropies(self) -> np.ndarray | None:
        """``[L, H]`` mean attention entropy (nats)."""
        r = self.result
        if r is None:
            return None
        return self._cache.get_or(("entropy",), lambda: _np(A.attention_entropy(r.attentions)))

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
        row, col = divmod(index, r.grid[1])
        y0, x0, y1, x1 = self.crop_rect_yx()
        sy, sx = (y1 - y0) / r.grid[0], (x1 - x0) / r.grid[1]
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
        m = self.current_map()
        value = float(m[row, col]) if m is not None else float("nan")
        return HoverInfo(row, col, r.num_prefix_tokens + row * r.grid[1] + col, value)

    def hover_text(self, x: float, y: float) -> str:
        """The status-bar read-out for the cursor at image pixel ``(x, y)`` (NaN: off the image)."""
        if math.isnan(x) or self.result is None:
            return ""
        info = self.hover(x, y)
        pix = f"pixel ({int(x)}, {int(y)})"
        if info is None:
            return f"{pix} · outside the model's crop"
        return f"{pix} · patch (row {info.row}, col {info.col}) · token {info.token} · value {info.value:.4g}"

    def next_head(self, delta: int) -> Any:
        """The head choice ``delta`` steps from the current one, through mean, max, min, head 0, 1, ... (wrapping)."""
        r = self.result
        choices: list[Any] = list(HEAD_REDUCTIONS) + (list(range(r.num_heads)) if r is not None else [])
        cur = self.options.head
        i = choices.index(cur) if cur in choices else 0
        return choices[(i + delta) % len(choices)]

    # ------------------------------------------------------------------ text
    def describe_view(self) -> str:
        """Caption of the current view, e.g. ``"Attention from [CLS] · layer 3 · head 5"``."""
        text = self.view.caption(self.result, self.options)
        note = self.joint_note()
        return f"{text} · {note}" if note else text

    def caption(self) -> str:
        r = self.result
        name = r.model_name if r is not None else "model"
        src = Path(r.source).name if r is not None else ""
        return f"{name} · {self.describe_view()}" + (f" · {src}" if src else "")

    def export_name(self, suffix: str = "") -> str:
        """A file name for the current view built from the parameters it reads, e.g. ``cat_cls_L3_h5.png``."""
        r = self.result
        stem = Path(r.source).stem if r is not None else "view"
        return f"{stem}_{self.view.file_stem(r, self.options)}{suffix}.png"

    # ------------------------------------------------------------------ rendering
    def image_map(self, m: np.ndarray | None = None) -> np.ndarray | None:
        """The current map on the full image's pixel grid, float32 ``[H, W]`` with NaN outside the crop."""
        import torch

        from vitviz.analysis import map_to_image

        r = self.result
        if m is None:
            m = appearance.filled(self.current_map(), appearance.excluded_grid(self.options, self.artefact_grid))
        if r is None or m is None:
            return None
        mode = "bilinear" if self.options.interpolation == "bilinear" else "nearest"
        return _np(map_to_image(torch.as_tensor(m), r.geometry, mode=mode))

    # ------------------------------------------------------------------ artefact tokens
    def artefacts(self) -> ArtefactTokens | None:
        """The high-norm patch tokens of the current result (:func:`vitviz.analysis.high_norm_tokens`, defaults;
        cached); None without a result. The one source of the artefact tokens that the colour scale, the outlines,
        the status text and "ignore artefact tokens" read (a streamed session finds them from its stream)."""
        r = self.result
        if r is None:
            return None
        return self._cache.get_or(("artefacts",), lambda: A.high_norm_tokens(r.tokens,
                                                                            num_prefix_tokens=r.num_prefix_tokens))

    def artefact_grid(self) -> np.ndarray | None:
        """bool ``[gh, gw]``: the flagged patches of :meth:`artefacts` (None without a result)."""
        a = self.artefacts()
        return None if a is None else np.asarray(a.mask, dtype=bool).reshape(self.result.grid)

    def levels(self) -> ColourScale | None:
        """The colour scale of the current map under the options' scale mode (:func:`appearance.levels` over
        :func:`appearance.scale_stack`, cached: the window asks twice per redraw); None without a map."""
        m = self.current_map()
        if m is None:
            return None
        o, v = self.options, self.view
        return self._cache.get_or(("levels", o), lambda: appearance.levels(
            m, v, o, artefacts=self.artefact_grid() if o.scale_excludes_artefacts else None,
            stack=appearance.scale_stack(self.result, v, o, self.map_for)))


def _rows(r: InferenceResult, attn: torch.Tensor, query: int) -> np.ndarray:
    """Attention rows of token ``query`` over the patch keys: ``[..., H, N, N]`` -> ``[..., H, gh, gw]``."""
    p = r.num_prefix_tokens
    rows = attn[..., query, p:]
    return np.ascontiguousarray(_np(rows).reshape(*rows.shape[:-1], *r.grid))

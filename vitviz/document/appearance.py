"""How a map is drawn and described: artefact tokens, the colour scale, the top-mass mask, the title. No Qt.

Plain functions of what they read (the result, the view, the options, the map). What costs something to find is
kept in the document's map cache (``cache``: anything with ``get_or(key, make)``, one per result).
:class:`vitviz.document.session.Session` holds the data they read (the result, the options, the view, the
artefact tokens, the cache); the panels (:mod:`vitviz.document.panel`, the window, the notebook viewer) call them with
it. The artefact tokens themselves are the session's (:meth:`~vitviz.document.session.Session.artefacts`, which a
streamed session finds from its stream): what reads them here takes them, or a function giving them, as an argument.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from vitviz import analysis
from vitviz.render.scales import ColourScale, scale_for
from vitviz.views.base import View, pool_row
from vitviz.views.options import ViewOptions

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.analysis.artefacts import ArtefactTokens
    from vitviz.pipeline import InferenceResult

__all__ = ["Cache", "artefact_patches", "artefact_text", "colormap", "default_query",
           "excluded_grid", "filled", "precision_text", "levels", "mask",
           "quantity_text", "reads_pool_row", "register_share", "result_for", "scale_stack", "scale_text",
           "shows_query", "title"]


class Cache(Protocol):
    """The per-result cache of a document: ``get_or(key, make)`` returns the value kept under ``key`` or keeps and
    returns ``make()``."""

    def get_or(self, key: Any, fn: Callable[[], Any]) -> Any: ...


# ----------------------------------------------------------------------------------------------- artefact tokens
def artefact_patches(grid: np.ndarray | None) -> list[tuple[int, int]]:
    """(row, col) of every flagged patch of ``grid`` (bool ``[gh, gw]``, e.g.
    :meth:`~vitviz.document.session.Session.artefact_grid`), row-major."""
    return [] if grid is None else [(int(r), int(c)) for r, c in zip(*np.nonzero(grid))]


def excluded_grid(options: ViewOptions, artefact_grid: Callable[[], np.ndarray | None]) -> np.ndarray | None:
    """bool ``[gh, gw]``: the patches left out of the colour scale and drawn in the neutral colour (the flagged
    ones, ``artefact_grid()``, when the options leave them out of the scale); None when there are none."""
    if not options.scale_excludes_artefacts:
        return None
    grid = artefact_grid()
    return grid if grid is not None and grid.any() else None


def filled(m: np.ndarray | None, exclude: np.ndarray | None) -> np.ndarray | None:
    """``m`` with each ``exclude``d cell replaced by the mean of its kept 8-neighbours (the median of the kept
    cells where none is kept): a smooth (bilinear) drawing then does not spread an excluded token's value, which
    may lie far above the scale, into its neighbours. ``m`` itself when nothing is excluded."""
    if m is None or exclude is None or exclude.shape != m.shape or not exclude.any():
        return m
    out = np.array(m, dtype=np.float32, copy=True)
    keep = ~exclude & np.isfinite(out)
    fallback = float(np.median(out[keep])) if keep.any() else 0.0
    gh, gw = m.shape
    for r, c in zip(*np.nonzero(exclude)):
        r0, r1, c0, c1 = max(r - 1, 0), min(r + 2, gh), max(c - 1, 0), min(c + 2, gw)
        k = keep[r0:r1, c0:c1]
        out[r, c] = float(out[r0:r1, c0:c1][k].mean()) if k.any() else fallback
    return out


def default_query(result: InferenceResult | None, artefacts: np.ndarray | None = None) -> int:
    """The query patch (row-major index, prefix not counted) a window starts at: the centre of the patch grid, or
    the kept patch nearest to it when the centre is a flagged artefact token (``artefacts``: bool ``[gh, gw]``).
    Not patch 0: the top-left corner is an artefact token on many ViTs (ViT-Ti's four corners), so "token
    similarity of the selected patch" would first light only the corners. 0 without a result."""
    if result is None:
        return 0
    gh, gw = result.grid
    rows, cols = np.mgrid[0:gh, 0:gw]
    dist = (rows - gh // 2) ** 2 + (cols - gw // 2) ** 2  # (7, 7) of a 14 x 14 grid
    if artefacts is not None and artefacts.shape == (gh, gw) and not artefacts.all():
        dist = np.where(artefacts, np.inf, dist)
    return int(np.argmin(dist))


PRECISION_WORDS = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float64": "fp64"}


def precision_text(result: InferenceResult | None) -> str:
    """The precision the model computed ``result`` in (its stored tokens'): ``"fp32"``, ``"bf16"``, ``"fp16"``; ""
    without a result. Every figure's caption and every table says it: bf16 maps and scores differ from fp32 ones in
    the second or third digit."""
    if result is None:
        return ""
    dtype = str(getattr(result.tokens, "dtype", ""))
    return PRECISION_WORDS.get(dtype, dtype.removeprefix("torch."))


def register_share(result: InferenceResult | None, cache: Cache, layer: int) -> float | None:
    """For a model with registers: the share of the [CLS] row's attention (mean of heads) that goes to the register
    tokens at ``layer``; None without registers."""
    r = result
    if r is None or not r.num_registers or r.num_prefix_tokens <= r.num_registers:
        return None

    def shares():
        return np.asarray(analysis.register_attention_share(r.attentions, num_registers=r.num_registers,
                                                            num_prefix_tokens=r.num_prefix_tokens), dtype=float)

    return float(cache.get_or(("register-share",), shares)[layer])


def artefact_text(artefacts: ArtefactTokens | None, grid: np.ndarray | None, layer: int, reg: float | None) -> str:
    """For the status bar: how many patches are flagged (``artefacts``, their bool ``[gh, gw]`` ``grid``), where,
    how far above the median norm, and the registers' share ``reg`` of [CLS] attention at ``layer``
    (:func:`register_share`); "" without artefact tokens (no result)."""
    a = artefacts
    if a is None:
        return ""
    cells = artefact_patches(grid)
    reg_text = "" if reg is None else f" · registers take {reg:.0%} of [CLS] attention at layer {layer}"
    if not cells:
        return "no artefact tokens" + reg_text
    shown = ", ".join(f"({r}, {c})" for r, c in cells[:6]) + (" …" if len(cells) > 6 else "")
    return f"{len(cells)} artefact token{'s' * (len(cells) > 1)} (norm > {a.ratio:g}× median): {shown}" + reg_text


def result_for(result: InferenceResult | None, cache: Cache, view: View, options: ViewOptions,
               artefact_grid: Callable[[], np.ndarray | None]) -> Any:
    """The result ``view`` computes from: ``result``, or, with "ignore artefact tokens", one whose attention has the
    flagged patches' (``artefact_grid()``, bool ``[gh, gw]``) key columns removed and its rows renormalised
    (:func:`vitviz.analysis.exclude_tokens`)."""
    if not view.ignores_artefacts(options):
        return result
    grid = artefact_grid()
    if grid is None or not grid.any():
        return result
    return cache.get_or(("excluding-artefacts",), lambda: result.excluding(grid.reshape(-1)))


# ----------------------------------------------------------------------------------------------- colour scale
def levels(m: np.ndarray, view: View, options: ViewOptions, *, artefacts: np.ndarray | None = None,
           stack: np.ndarray | None = None) -> ColourScale:
    """The colour scale of the map ``m`` under the options' scale mode.

    Args:
        artefacts: bool ``[gh, gw]`` patches left out of the levels (the flagged ones when the options say so).
        stack: the maps a shared scale spans (:func:`scale_stack`); None: ``m``'s own levels.
    """
    o, v = options, view
    exclude = artefacts if artefacts is not None and artefacts.any() and artefacts.shape == m.shape else None
    kw = dict(signed=True if v.signed else None, log=o.log_scale and not v.signed, percentile=o.percentile,
              cmap=o.cmap)
    if o.scale == "fixed":
        return scale_for(m, mode="fixed", fixed=o.fixed_range, **kw)
    if stack is not None:
        ex = None if exclude is None else np.broadcast_to(exclude, stack.shape)
        return scale_for(m, mode="shared", shared=stack, exclude=ex, **kw)
    mode = "per_map" if o.scale == "per_map" else "robust"
    return scale_for(m, mode=mode, exclude=exclude, **kw)


def scale_stack(result: InferenceResult | None, view: View, options: ViewOptions,
                map_for: Callable[[View, ViewOptions], np.ndarray | None]) -> np.ndarray | None:
    """The maps a shared scale spans: ``[n, gh, gw]`` over the layer slider's range ("layers") or over the heads
    ("heads"), each ``map_for(view, options)``; None when the mode is not shared or the view does not vary along
    that axis."""
    o, v, r = options, view, result
    if r is None:
        return None
    if o.scale == "layers" and v.slider is not None:
        lo, hi = v.slider_range(r)
        maps = [map_for(v, replace(o, **{v.slider: i})) for i in range(lo, hi + 1)]
    elif o.scale == "heads" and "head" in v.reads:
        maps = [map_for(v, replace(o, head=h)) for h in range(r.num_heads)]
    else:
        return None
    maps = [m for m in maps if m is not None]
    return np.stack(maps) if maps else None


def scale_text(options: ViewOptions, has_artefacts: bool) -> str:
    """The scale mode in words, for the colour bar's tooltip and captions (``has_artefacts``: patches are
    flagged)."""
    o = options
    text = {"robust": f"robust ({o.percentile:g}th percentile)", "per_map": "min–max of this map",
            "layers": "shared across layers", "heads": "shared across heads", "fixed": "fixed"}[o.scale]
    if o.log_scale:
        text += ", log"
    if o.scale_excludes_artefacts and has_artefacts:
        text += ", artefact tokens excluded"
    return text


def colormap(scale: ColourScale | None, options: ViewOptions) -> str:
    """The colormap a map is drawn with: its scale's (the user's, or a diverging one centred at 0 for signed
    quantities), else the options'."""
    return scale.cmap if scale is not None else options.cmap


def quantity_text(view: View) -> str:
    """The colour bar's label: the view's quantity and unit, e.g. ``"relevance (a.u.)"``."""
    return f"{view.quantity} ({view.unit})" if view.unit else view.quantity


def reads_pool_row(result: InferenceResult | None, view: View) -> bool:
    """Whether ``view`` reads the attention-pooling head's row in place of [CLS] (SigLIP's "MAP" head: the [CLS]
    view and the [CLS]-based views of a model that pools with attention)."""
    r, v = result, view
    return r is not None and "query" not in v.reads and (v.needs_cls or v.reads_cls_row) and pool_row(r) is not None


def shows_query(result: InferenceResult | None, view: View) -> bool:
    """Whether the selected-patch box means something in ``view`` (it reads the query patch, or the model has no
    [CLS] so the patch stands in for it, unless an attention-pooling head's row does)."""
    r, v = result, view
    return r is not None and ("query" in v.reads or (r.num_prefix_tokens == 0 and "head" in v.reads
                                                     and not reads_pool_row(r, v)))


# ----------------------------------------------------------------------------------------------- mask, title
def mask(m: np.ndarray | None, view: View, options: ViewOptions, cache: Cache) -> np.ndarray | None:
    """bool ``[gh, gw]``: the patches holding the top ``mask_keep`` of the map ``m``'s mass (None when off)."""
    keep = options.mask_keep
    if m is None or keep <= 0:
        return None
    return cache.get_or(("mask", keep) + view.cache_key(options),
                        lambda: np.asarray(analysis.top_mass_mask(m, keep=keep), dtype=bool))


def title(description: str, options: ViewOptions) -> str:
    """What the canvas shows: the view's ``description`` (e.g. ``"Relevance (Chefer et al.) · Egyptian cat · start
    layer 0 · mean of heads"``), plus the mask when one is drawn."""
    if options.mask_keep > 0:
        description += f" · top {options.mask_keep:.0%} of mass"
    return description

"""What a panel shows, assembled once from a session: the window's canvas, the Compare window's panels and the figure
files all draw the :class:`~vitviz.render.figures.Panel` of :func:`panel_of`; the heads dock and the heads figure
both draw the :class:`HeadsGrid` of :func:`heads_of`. No Qt.

The figures of a session (:func:`view_figure`, :func:`heads_figure`, :func:`layer_figures`) are
:class:`~vitviz.render.figures.FigureSpec` s in the colours of the window (the same
:class:`~vitviz.render.scales.ColourScale`, ticks, quantity and unit); :func:`render_view` and :func:`render_heads`
draw them to pixels.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from vitviz.document import appearance
from vitviz.document.session import Session
from vitviz.render import figures
from vitviz.render.figures import FigureSpec, Panel, grid_shape
from vitviz.render.scales import ColourScale, scale_for

__all__ = ["HEADS_QUANTITY", "PREFIX_NOTE_SHARE", "HeadsGrid", "diffuse_note", "figure_size_problem", "heads_figure",
           "heads_of", "layer_figures", "panel_of", "render_heads", "render_view", "view_figure"]

HEADS_QUANTITY = "attention weight"
"""What the tiles of the heads grid show (their colour bar's label)."""
PREFIX_NOTE_SHARE = 0.5
"""A head tile says how much of its row goes to the prefix tokens when that share is at least this: such a tile is
nearly black on the patch grid (ViT-Ti layer 0 head 2: 6e-8 at most), which is not "attends to nothing"."""


# ----------------------------------------------------------------------------------------------- one panel
def panel_of(session: Session, scale: ColourScale | None = None, *, badge: str | None = None,
             on_image: bool = False) -> Panel:
    """What the session's current view shows: the map (on the patch grid over the model's crop, as the screens draw
    it; with ``on_image`` also on the photo's pixels, as a figure draws it) in its colour scale, the query-patch box
    where the view uses it, the top-mass mask, the artefact tokens (outlined dashed), the title, the caption (model,
    image, colour scale), the quantity of the colour bar and, without a map, why.

    Args:
        scale: the colour scale to draw the map in (a comparison's shared one); None: the session's own
            (:meth:`~vitviz.document.session.Session.levels`).
        badge: a box in the panel's corner (the layer of an animation frame).
        on_image: also the map on the photo's pixels (``Panel.values``; costly for a large photo, so the screens,
            which draw ``grid_values``, leave it out).

    Raises:
        ValueError: the session has no result.
    """
    r, o = session.result, session.options
    if r is None:
        raise ValueError("nothing to show: no image has been analysed yet")
    has_map = session.current_map() is not None
    rgb = session.rgb_map() if has_map else None  # a view in colours of its own: no colour scale, no colour bar
    alone = rgb is not None and bool(o.pca_colours_only)
    if rgb is not None:
        has_map = False
    if alone:  # the colours alone on black (a masked background black too), as the DINO figures
        rgb = np.concatenate([rgb[..., :3] * rgb[..., 3:4], np.ones_like(rgb[..., 3:4])], axis=-1)
    if has_map and scale is None:
        scale = session.levels()
    y0, x0, y1, x1 = session.crop_rect_yx()
    v = session.view
    outlined = tuple(appearance.artefact_patches(session.artefact_grid()))
    excluded = appearance.excluded_grid(o, session.artefact_grid) if has_map else None
    neutral = outlined if excluded is not None else ()
    scale_text = words = appearance.scale_text(o, bool(outlined))
    if outlined:  # outlined as in the window; left out of the scale: drawn grey
        words = words.replace("artefact tokens excluded", "artefact tokens (grey, dashed) left out of the scale") \
            if "artefact tokens excluded" in words else words + ", artefact tokens dashed"
    shown = session.display_map() if has_map else None
    if shown is not None and excluded is not None:  # the neutral colour is drawn there, never a scale colour
        f = shown.shape[0] // excluded.shape[0]
        shown = np.where(np.repeat(np.repeat(excluded, f, axis=0), f, axis=1), np.nan, shown).astype(np.float32)
    return Panel(photo=r.rgb, values=session.image_map() if has_map and on_image else None,
                 scale=scale if has_map else None, opacity=1.0 if alone else o.opacity, photo_shown=not alone,
                 marker=session.patch_rect(o.query) if appearance.shows_query(r, v) else None,
                 mask=appearance.mask(session.current_map(), v, o, session.cache),
                 mask_style=o.mask_style, badge=badge, outlined=outlined, neutral=neutral,
                 colorbar_label=appearance.quantity_text(v), crop=(x0, y0, x1 - x0, y1 - y0), grid=r.grid,
                 grid_values=shown,
                 title=appearance.title(session.describe_view(), o) if has_map or rgb is not None
                 else f"{v.title}: not available",
                 caption=_caption(session, " · ".join(filter(None, [
                     f"colour: {v.rgb_text(o) if rgb is not None else words}", diffuse_note(session)]))),
                 scale_text=scale_text, unavailable=session.unavailable_reason(), rgb=rgb)


SMALL_WIDTH = 384
"""The width of a small classifier (ViT-Ti/S), on which views known to look diffuse
(:attr:`~vitviz.views.View.diffuse_when_small`: LeGrad, GradCAM), which a first reader takes for broken, get a caption
that points to the faithfulness table, which measures how well a map ranks the patches whatever it looks like."""


def diffuse_note(session: Session) -> str:
    """The caption's pointer to the faithfulness table for a view known to be diffuse on the session's model, or
    ""."""
    r, v = session.result, session.view
    if r is None or not v.diffuse_when_small or int(r.tokens.shape[-1]) > SMALL_WIDTH:
        return ""
    return (f"{v.title} is often diffuse on a model this small (width {int(r.tokens.shape[-1])}): the Faithfulness "
            "tab (vitviz evaluate) measures how well it ranks the patches")


def _caption(s: Session, extra: str = "") -> str:
    r = s.result
    parts = [r.model_name, Path(r.source).name or str(r.source)]
    if extra:
        parts.append(extra)
    parts.append(f"computed in {appearance.precision_text(r)}")
    return " · ".join(parts)


# ----------------------------------------------------------------------------------------------- the heads grid
@dataclass(frozen=True)
class HeadsGrid:
    """Every head of the attention layer shown (``all_layers``: every layer x every head) on one colour scale.

    Attributes:
        maps: float32 ``[L, H, gh, gw]`` attention rows of the query token over the patch keys (``L = 1`` for one
            layer).
        scale: the colour scale every tile shares: the robust percentile of all tiles (the options'), artefact
            patches left out of the levels when the options say so.
        layer: the attention layer that goes with the current view (the one shown when not ``all_layers``).
        query: the query token in words: ``"[CLS]"`` or ``"patch (row, col)"``.
        all_layers: every layer, not only ``layer``.
        pool_row: the rows are the attention-pooling head's (a model without [CLS] whose view reads the pooling
            head's row).
        excludes_artefacts: artefact patches were left out of the scale.
        prefix_share: float ``[L, H]``: the share of each row that goes to the prefix tokens (1 - the row's sum over
            the patch keys: attention rows sum to 1); None where the rows are not softmax rows over all tokens (no
            prefix tokens, or the pooling head's row).
        prefix_name: the prefix tokens in words: ``"[CLS]"`` or ``"prefix tokens"`` ([CLS] and registers).
        excluded: bool ``[gh, gw]``: the patches left out of the scale, drawn in the neutral grey on every tile as
            the canvas draws them (:func:`vitviz.document.appearance.excluded_grid`); None: none.
    """

    maps: np.ndarray
    scale: ColourScale
    layer: int
    query: str
    all_layers: bool = False
    pool_row: bool = False
    excludes_artefacts: bool = False
    prefix_share: np.ndarray | None = None
    prefix_name: str = "[CLS]"
    excluded: np.ndarray | None = None

    @property
    def neutral(self) -> tuple[tuple[int, int], ...]:
        """(row, col) of every excluded patch (a :class:`~vitviz.render.figures.Panel`'s ``neutral``)."""
        return tuple(appearance.artefact_patches(self.excluded))

    @property
    def tiles(self) -> np.ndarray:
        """``[L * H, gh, gw]``: the maps row-major (layer by layer)."""
        return self.maps.reshape(-1, *self.maps.shape[2:])

    def prefix_notes(self, *, short: bool = False) -> list[str]:
        """One text per tile, row-major: ``"97% to [CLS]"`` (``short``: ``"97% [CLS]"``) where at least
        :data:`PREFIX_NOTE_SHARE` of the row goes to the prefix tokens, else ``""``."""
        if self.prefix_share is None:
            return [""] * (self.maps.shape[0] * self.maps.shape[1])
        sep = " " if short else " to "
        return [f"{v:.0%}{sep}{self.prefix_name}" if v >= PREFIX_NOTE_SHARE else ""
                for v in self.prefix_share.reshape(-1)]


def heads_of(session: Session, *, all_layers: bool = False) -> HeadsGrid | None:
    """The heads of the session's attention layer (``all_layers``: of every layer) as the heads dock and the heads
    figure show them; None without a result."""
    r, o = session.result, session.options
    if r is None:
        return None
    q = session.thumb_query()
    query = "[CLS]" if q == 0 and r.num_prefix_tokens > 0 else \
        "patch ({}, {})".format(*divmod(q - r.num_prefix_tokens, r.grid[1]))
    layer = max(0, min(session.view.attention_layer(o), r.num_layers - 1))
    maps = session.all_head_maps() if all_layers else session.head_maps(layer)[None]
    exclude = appearance.excluded_grid(o, session.artefact_grid)  # the canvas's: left out of the scale, drawn grey
    flat = maps.reshape(-1, *r.grid)
    ex = None if exclude is None else np.broadcast_to(exclude, flat.shape)
    scale = scale_for(flat, mode="shared", shared=flat, percentile=o.percentile, exclude=ex, cmap=o.cmap)
    pooled = appearance.reads_pool_row(r, session.view)
    share = None if pooled or r.num_prefix_tokens == 0 else \
        np.clip(1.0 - maps.astype(np.float64).sum(axis=(-2, -1)), 0.0, 1.0)
    return HeadsGrid(maps=maps, scale=scale, layer=layer, query=query, all_layers=all_layers,
                     pool_row=pooled, excludes_artefacts=exclude is not None, prefix_share=share,
                     prefix_name="[CLS]" if r.num_prefix_tokens == 1 else "prefix tokens", excluded=exclude)


# ----------------------------------------------------------------------------------------------- figures
def view_figure(session: Session, *, badge: str | None = None) -> FigureSpec | None:
    """The session's current view as a figure: the map on the photo in the window's colours, the query-patch box
    and the mask where the window draws them, the title the canvas shows (view, target, layer, heads, mask) and
    the colour bar with the view's quantity, unit and ticks; the caption names the model, the image and the colour
    scale. The options' ``caption`` and ``colorbar`` switch those off. None without a result or map."""
    r, o = session.result, session.options
    if r is None or session.current_map() is None:
        return None
    p = panel_of(session, badge=badge, on_image=True)
    if p.rgb is not None:  # colours of its own: no colour bar
        return FigureSpec(panels=(p,), ncols=1, title=p.title if o.caption else None,
                          caption=p.caption if o.caption else None, colorbar=False)
    return FigureSpec(panels=(p,), ncols=1, title=p.title if o.caption else None,
                      caption=p.caption if o.caption else None, colorbar=o.colorbar,
                      colorbar_label=p.colorbar_label, scale=p.scale)


def figure_size_problem(session: Session, scale: figures.ScaleOption = "print", *, heads: bool = False,
                        all_layers: bool = False) -> str | None:
    """Why the figure of the session's view (``heads``: :func:`heads_figure`, every layer's with ``all_layers``; an
    animation frame is the view's) at ``scale`` would be over the limit, from the image's size alone
    (:func:`vitviz.render.figures.size_problem`), before any map is drawn at the image's pixels: one line naming the
    image. None when it fits, or without a result."""
    r = session.result
    if r is None:
        return None
    panels = ncols = 1
    if heads:
        g = heads_of(session, all_layers=all_layers)
        n_layers, n_heads = g.maps.shape[:2]
        panels, ncols = n_layers * n_heads, n_heads if all_layers else grid_shape(n_heads, r.image_size)[1]
    problem = figures.size_problem(r.image_size, scale, panels=panels, ncols=ncols)
    return None if problem is None else f"{r.source}: {problem}"


def heads_figure(session: Session, *, all_layers: bool = False) -> FigureSpec | None:
    """Every head of the current attention layer (``all_layers``: every layer x every head, with row and column
    labels) on one colour scale, as the heads panel shows them (:func:`heads_of`); a grid with no empty cell, a
    title naming what is shown, the layer, the model and the image, and one colour bar. None without a result."""
    g = heads_of(session, all_layers=all_layers)
    if g is None:
        return None
    r, o = session.result, session.options
    L, H = g.maps.shape[:2]
    img = [session.image_map(m) for m in g.tiles]
    what = f"Attention from {g.query}"
    note = ", artefact tokens (grey) left out of the scale" if g.excludes_artefacts else ""
    y0, x0, y1, x1 = session.crop_rect_yx()  # the excluded patches drawn grey, as on screen
    where = dict(neutral=g.neutral, grid=r.grid, crop=(x0, y0, x1 - x0, y1 - y0))
    scale_words = f"colour: shared across {'every layer and head' if all_layers else 'heads'} " \
                  f"({o.percentile:g}th percentile){note}"
    if all_layers:
        panels = tuple(Panel(photo=r.rgb, values=v, scale=g.scale, opacity=o.opacity, **where) for v in img)
        title = f"{what} · every layer × every head"
        return FigureSpec(panels=panels, ncols=H, title=title, caption=_caption(session, scale_words),
                          row_labels=tuple(f"layer {i}" for i in range(L)),
                          col_labels=tuple(f"head {h}" for h in range(H)), colorbar=True,
                          colorbar_label=HEADS_QUANTITY, scale=g.scale)
    _, cols = grid_shape(H, r.image_size)
    notes = g.prefix_notes()
    panels = tuple(Panel(photo=r.rgb, values=v, scale=g.scale, opacity=o.opacity, **where,
                         label=f"head {h}" + (f" · {notes[h]}" if notes[h] else "")) for h, v in enumerate(img))
    title = f"{what} · layer {g.layer} · {H} heads"
    return FigureSpec(panels=panels, ncols=cols, title=title, caption=_caption(session, scale_words), colorbar=True,
                      colorbar_label=HEADS_QUANTITY, scale=g.scale)


def layer_figures(session: Session) -> list[FigureSpec]:
    """One figure per layer of the current view (its layer slider: the layer, or the start layer of a cumulative
    view), every frame on one colour scale shared across the layers (a typed fixed range is kept), the layer drawn
    in a badge on the image and named in the title.

    Raises:
        ValueError: no result, or the view does not depend on the layer (its message says which view).
    """
    r, v, o = session.result, session.view, session.options
    if r is None:
        raise ValueError("nothing to animate: no image has been analysed yet")
    if v.slider is None:
        raise ValueError(f"{v.title} does not change with the layer: choose a view with a layer slider")
    lo, hi = session.slider_range()
    s = copy.copy(session)  # shares the result and the map cache; only the options differ
    out = []
    for i in range(lo, hi + 1):
        s.options = replace(o, scale=o.scale if o.scale == "fixed" else "layers", **{v.slider: i})
        badge = v.slider_text(i)
        spec = view_figure(s, badge=badge)
        if spec is None:
            raise ValueError(f"{v.title} is not available: {session.unavailable_reason()}")
        out.append(spec)
    return out


def render_view(session: Session, scale: figures.ScaleOption = "native") -> np.ndarray | None:
    """The current view as the figure an export writes (:func:`view_figure`: the map in the colours of the screen,
    with the title, colour bar and caption the options ask for), drawn at ``scale`` (default ``"native"``: the image
    at its own pixels; ``"print"``: long side >= 2048 px): uint8 ``[H', W', 3]``. With neither caption nor colour bar
    it is the overlay at exactly the image's size. None without a map. :func:`vitviz.render.figures.save` writes it
    as PNG / SVG / PDF."""
    spec = view_figure(session)
    return None if spec is None else figures.render(spec, scale).pixels


def render_heads(session: Session, scale: figures.ScaleOption = "native", *,
                 all_layers: bool = False) -> np.ndarray | None:
    """Every head of the current layer (``all_layers``: every layer x head) on one shared colour scale, with a
    title, tile labels and the colour bar (:func:`heads_figure`): uint8 ``[H', W', 3]``; None without a result."""
    spec = heads_figure(session, all_layers=all_layers)
    return None if spec is None else figures.render(spec, scale).pixels

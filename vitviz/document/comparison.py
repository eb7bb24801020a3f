"""Comparison grids: several maps side by side, on shared or per-panel colour scales, with row and column labels.

No Qt. A :class:`CompareSpec` says what to compare (it is part of the saved session, :mod:`vitviz.document.state`):

- ``"views"``: the open images (rows) x chosen views (columns);
- ``"layers"``: one image, one layer-dependent view at chosen layers (or start layers of a cumulative view);
- ``"classes"``: one image, one target-dependent view (relevance, gradient rollout) for chosen classes.

:func:`needed_runs` lists the model runs a comparison needs beyond the window's own result (other images at their
top class; the shown image for other targets); :func:`build_comparison` lays the panels out from the results as a
:class:`Comparison`: one :class:`~vitviz.document.session.Session` per panel (the window's options with the panel's
view, layer or result, so every map, colour scale, mask and caption is the window's own code), the colour scale of
each panel, labels, title and caption. Each panel shows :func:`vitviz.document.panel.panel_of` of its session in its
colour scale. :func:`comparison_figure` turns it into a :class:`vitviz.render.figures.FigureSpec`
for PNG / SVG / PDF export; the Compare window (:mod:`vitviz.gui.compare_window`) draws the same comparison on screen.

Shared scale: the panels that show the same view (a column of ``"views"``, every panel of ``"layers"`` and
``"classes"``) get one colour scale from all their maps (:func:`vitviz.render.scales.scale_for` in mode ``"shared"``
with the window's percentile, artefact exclusion, log and diverging rules; a typed fixed range stays fixed). Per panel:
each panel's scale is what the window would use for it alone (its scale mode).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vitviz import views
from vitviz.document import appearance
from vitviz.document.panel import panel_of
from vitviz.document.session import Session
from vitviz.render.figures import FigureSpec, Panel, ScaleOption, grid_shape, size_problem
from vitviz.render.scales import ColourScale, scale_for
from vitviz.views.options import ViewOptions

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.pipeline import InferenceResult

__all__ = ["LAYOUTS", "Cell", "CompareSpec", "Comparison", "build_comparison", "comparison_figure",
           "comparison_size_problem", "default_classes", "default_layers", "needed_runs"]

LAYOUTS: tuple[str, ...] = ("views", "layers", "classes")
PROMPT_PANELS = 8  # prompts laid out side by side by default (the "classes" layout over a model's prompts)
LAYOUT_TITLES = {"views": "Images × views", "layers": "One view over layers", "classes": "One view per class"}
MAX_PANELS = 64


def short_title(view: views.View) -> str:
    """The view's name for a column label (:attr:`~vitviz.views.View.short_title`, else its title; the full title
    is in the caption)."""
    return view.short_title or view.title


@dataclass(frozen=True)
class CompareSpec:
    """What a comparison shows.

    Attributes:
        layout: ``"views"``, ``"layers"`` or ``"classes"`` (see the module docstring).
        views: ``"views"``: the columns; ``"layers"`` / ``"classes"``: ``views[0]`` is the view (empty: the
            window's view).
        images: ``"views"``: the rows, as image paths (empty: the shown image). Not used by the other layouts
            (they show the window's image).
        layers: ``"layers"``: the layer slider's values (layers, or start layers of a cumulative view); empty:
            :func:`default_layers`.
        classes: ``"classes"``: the targets; empty: :func:`default_classes`.
        shared_scale: one colour scale for the panels of each view (else each panel its own).
    """

    layout: str = "views"
    views: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    layers: tuple[int, ...] = ()
    classes: tuple[int, ...] = ()
    shared_scale: bool = True

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        for name in ("views", "images", "layers", "classes"):
            object.__setattr__(self, name, tuple(dict.fromkeys(getattr(self, name))))  # no repeats, order kept


@dataclass
class Cell:
    """One panel: its document (result + options), place, label and colour scale."""

    session: Session
    row: int
    col: int
    label: str | None = None
    scale: ColourScale | None = None

    @property
    def map(self) -> np.ndarray | None:
        return self.session.current_map()

    @property
    def view(self) -> views.View:
        return self.session.view

    @property
    def unavailable(self) -> str | None:
        """Why the panel has no map (None when it has one)."""
        return self.session.unavailable_reason()

    def panel(self, *, on_image: bool = False) -> Panel:
        """What this cell shows (:func:`vitviz.document.panel.panel_of` of its document, in its colour scale);
        ``on_image``: with the map on the photo's pixels, for a figure."""
        return panel_of(self.session, self.scale, on_image=on_image)


@dataclass
class Comparison:
    """A laid-out comparison: ``cells`` row-major in ``nrows x ncols`` (every cell filled)."""

    spec: CompareSpec
    cells: list[Cell]
    nrows: int
    ncols: int
    title: str
    caption: str
    row_labels: tuple[str, ...] | None = None
    col_labels: tuple[str, ...] | None = None
    scale_note: str = ""
    notes: list[str] = field(default_factory=list)

    def cell(self, row: int, col: int) -> Cell:
        return self.cells[row * self.ncols + col]

    @property
    def shared(self) -> ColourScale | None:
        """The one colour scale of every panel with a map, when they all share it (else None)."""
        scales = {id(c.scale): c.scale for c in self.cells if c.scale is not None}
        return next(iter(scales.values())) if len(scales) == 1 else None


# ----------------------------------------------------------------------------------------------- defaults
def default_layers(view: views.View, result: InferenceResult, n: int = 4) -> tuple[int, ...]:
    """``n`` evenly spaced values of the view's layer slider, first and last included (all of them when fewer)."""
    if view.slider is None:
        return ()
    lo, hi = view.slider_range(result)
    if hi - lo + 1 <= n:
        return tuple(range(lo, hi + 1))
    return tuple(dict.fromkeys(round(lo + i * (hi - lo) / (n - 1)) for i in range(n)))


def default_classes(result: InferenceResult, n: int = 4) -> tuple[int, ...]:
    """The ``n`` most probable classes of ``result`` (its target first when it is not among them)."""
    if result.attention_grads is None:
        return ()
    if getattr(result, "head_kind", "") == "prompts":  # the prompts, side by side (as many as a grid shows)
        n = max(n, min(int(result.logits.shape[-1]), PROMPT_PANELS))
    top = [i for i, _, _ in result.top_k(n)]
    if result.target is not None and result.target not in top:
        top = [result.target] + top[:n - 1]
    return tuple(top)


def _view_of(spec: CompareSpec, base: Session) -> views.View:
    return views.get(spec.views[0]) if spec.views else base.view


def _rows(spec: CompareSpec, base: Session) -> tuple[str, ...]:
    assert base.result is not None
    return spec.images or (base.result.source,)


def _classes(spec: CompareSpec, base: Session) -> tuple[int, ...]:
    assert base.result is not None
    return spec.classes or default_classes(base.result)


def needed_runs(spec: CompareSpec, base: Session) -> list[tuple[str, int | None]]:
    """``(image, target)`` runs the comparison needs beyond ``base.result`` (target None: the top class)."""
    r = base.result
    if r is None:
        return []
    if spec.layout == "views":
        return [(src, None) for src in _rows(spec, base) if src != r.source]
    if spec.layout == "classes" and r.attention_grads is not None:
        return [(r.source, c) for c in _classes(spec, base) if c != r.target]
    return []


# ----------------------------------------------------------------------------------------------- building
def _options(o: ViewOptions) -> dict[str, Any]:
    return {f.name: getattr(o, f.name) for f in fields(ViewOptions)}


def _cell_session(result: InferenceResult, options: ViewOptions, pool: dict | None,
                  base: Session | None = None) -> Session:
    """A document showing ``result`` with ``options``. The documents of one result share one map cache (its keys
    name the view and the options), kept in ``pool`` across builds. A fit over all open images (feature PCA) is the
    window's (``base``'s): the same colours in every panel."""
    entry = None if pool is None else pool.get(id(result))
    shared = entry[1] if entry is not None and entry[0] is result else None
    s = Session(cache=shared)
    s.images = [result.source]
    if base is not None:
        s.joint, s.joint_images = base.joint, list(base.images)
    s.result = result
    if pool is not None and shared is None:
        pool[id(result)] = (result, s.cache)
    s.options = s.clamped(options)
    return s


def build_comparison(spec: CompareSpec, base: Session,
                     results: Mapping[tuple[str, int | None], InferenceResult] | None = None, *,
                     pool: dict | None = None) -> Comparison:
    """Lay out ``spec`` over the window's document ``base`` (its result, options and image list).

    Args:
        results: the runs of :func:`needed_runs`, keyed ``(image, target)``.
        pool: the map caches of earlier builds (``{id(result): (result, cache)}``), reused when the same results
            come back. (Not the window's own cache: its keys do not name the result, and it is emptied for the
            next image while a comparison may still show this one.)

    Raises:
        ValueError: nothing to compare (no result, no view or class chosen, a view that does not change with the
            layer or the class, a run missing from ``results``, more than :data:`MAX_PANELS` panels); the message
            says what to choose.
    """
    r, o = base.result, base.options
    if r is None:
        raise ValueError("nothing to compare: open an image first")
    results = dict(results or {})

    def get(src: str, target: int | None) -> InferenceResult:
        if src == r.source and (target is None or target == r.target):
            return r
        if (src, target) not in results:
            raise ValueError(f"{Path(src).name} has not been analysed yet"
                             + (f" for class {target}" if target is not None else ""))
        return results[(src, target)]

    cells: list[Cell] = []
    row_labels = col_labels = None
    notes: list[str] = []
    if spec.layout == "views":
        keys = spec.views or (o.view,)
        rows = _rows(spec, base)
        _check_count(len(rows) * len(keys))
        for i, src in enumerate(rows):
            res = get(src, None)
            for j, key in enumerate(keys):
                cells.append(Cell(_cell_session(res, replace(o, view=key), pool, base), i, j))
        nrows, ncols = len(rows), len(keys)
        col_labels = tuple(short_title(views.get(k)) for k in keys)
        row_labels = None
        if len(rows) > 1:  # each image at its own top class: name it where a view depends on the class
            by_class = any("target" in views.get(k).reads for k in keys)
            row_labels = tuple(Path(src).name + (f" ({_target_text(cells[i * len(keys)].session.result)})"
                                                 if by_class else "") for i, src in enumerate(rows))
        title = (f"{len(keys)} view{'s' * (len(keys) > 1)} of {Path(rows[0]).name}" if len(rows) == 1 else
                 f"{len(rows)} images × {len(keys)} view{'s' * (len(keys) > 1)}")
    elif spec.layout == "layers":
        v = _view_of(spec, base)
        if v.slider is None:
            raise ValueError(f"{v.title} does not change with the layer: choose a view with a layer slider")
        layers = spec.layers or default_layers(v, r)
        lo, hi = v.slider_range(r)
        bad = [x for x in layers if not lo <= x <= hi]
        if bad:
            raise ValueError(f"{v.title}: layer{'s' * (len(bad) > 1)} {', '.join(map(str, bad))} out of range "
                             f"({lo} .. {hi})")
        _check_count(len(layers))
        for x in layers:
            label = v.slider_text(x)
            cells.append(Cell(_cell_session(r, replace(o, view=v.key, **{v.slider: x}), pool, base), 0, 0, label))
        title = f"{v.title} over {v.slider_label.lower()}s"
    else:  # classes
        v = _view_of(spec, base)
        if "target" not in v.reads:
            targets = [x.title for x in views.all_views() if "target" in x.reads]
            raise ValueError(f"{v.title} does not depend on the class: choose {' or '.join(targets)}")
        if r.attention_grads is None:
            raise ValueError(f"{v.title} needs gradients, and this model has no classifier")
        classes = _classes(spec, base)
        if not classes:
            raise ValueError("choose at least one class")
        n_cls = int(r.logits.shape[-1])
        bad = [c for c in classes if not 0 <= c < n_cls]
        if bad:
            raise ValueError(f"class{'es' * (len(bad) > 1)} {', '.join(map(str, bad))} out of range: the model "
                             f"has {n_cls} classes (0 .. {n_cls - 1})")
        _check_count(len(classes))
        probs = r.probabilities
        prompts = getattr(r, "head_kind", "") == "prompts"
        for c in classes:
            res = get(r.source, c)
            label = f"“{r.label(c)}” ({float(probs[c]):.0%})" if prompts else f"{r.label(c)} ({float(probs[c]):.0%})"
            cells.append(Cell(_cell_session(res, replace(o, view=v.key), pool, base), 0, 0, label))
        title = f"{v.title} per prompt ({r.probability})" if prompts else f"{v.title} per class"
    if spec.layout != "views":
        nrows, ncols = grid_shape(len(cells), r.image_size)
        for i, c in enumerate(cells):
            c.row, c.col = divmod(i, ncols)
    if not cells:
        raise ValueError("choose at least one view")
    scale_note = _scales(cells, spec.shared_scale, o)
    for c in cells:
        why = c.unavailable
        if why:
            notes.append(f"{c.view.title} ({Path(c.session.result.source).name}): {why}")
    title, caption = _texts(spec, cells, title, scale_note, base)
    return Comparison(spec=spec, cells=cells, nrows=nrows, ncols=ncols, title=title, caption=caption,
                      row_labels=row_labels, col_labels=col_labels, scale_note=scale_note, notes=notes)


def _target_text(result: InferenceResult) -> str:
    return result.label(result.target) if result.target is not None else "no target"


def _check_count(n: int) -> None:
    if n > MAX_PANELS:
        raise ValueError(f"{n} panels is too many to compare (at most {MAX_PANELS}); choose fewer")


def _scales(cells: list[Cell], shared: bool, o: ViewOptions) -> str:
    """Give each cell its colour scale; returns the words for the caption. A view in colours of its own (feature
    PCA) has no scale: its colours are said instead."""
    groups: dict[str, list[Cell]] = {}
    for c in cells:
        if c.map is not None and not c.view.rgb:
            groups.setdefault(c.view.key, []).append(c)
    for c in cells:
        c.scale = None
    own = next((c for c in cells if c.view.rgb and c.map is not None), None)
    if own is not None:
        words = own.view.rgb_text(own.session.options)
        if not groups:
            return words
        return f"{_scale_words(cells, groups, shared, o)}; {own.view.title}: {words}"
    return _scale_words(cells, groups, shared, o)


def _scale_words(cells: list[Cell], groups: dict[str, list[Cell]], shared: bool, o: ViewOptions) -> str:
    if not shared or o.scale == "fixed":
        for group in groups.values():
            for c in group:
                c.scale = c.session.levels()
        first = next((c.session for c in cells if c.scale is not None), None)
        if o.scale == "fixed":
            return "fixed range" + (", log" if o.log_scale else "")
        if first is None:
            return "each panel on its own scale"
        flagged = first.options.scale_excludes_artefacts and bool(first.artefact_grid().any())
        return f"each panel on its own scale: {appearance.scale_text(first.options, flagged)}"
    note = ""
    for group in groups.values():
        v = group[0].view
        maps, masks = [], []
        for c in group:
            m = c.map
            maps.append(np.asarray(m, dtype=np.float64).ravel())
            g = c.session.artefact_grid() if o.scale_excludes_artefacts else None
            masks.append(np.asarray(g, dtype=bool).ravel() if g is not None and g.shape == m.shape
                         else np.zeros(m.size, dtype=bool))
        stack, ex = np.concatenate(maps), np.concatenate(masks)
        if ex.any():
            note = ", artefact tokens excluded"
        scale = scale_for(stack, mode="shared", shared=stack, exclude=ex if ex.any() else None,
                          signed=True if v.signed else None, log=o.log_scale and not v.signed,
                          percentile=o.percentile, cmap=o.cmap)
        for c in group:
            c.scale = scale
    rule = f"robust {o.percentile:g}th percentile{', log' if o.log_scale else ''}{note}"
    if all(len(g) == 1 for g in groups.values()) and len(groups) > 1:
        return f"each panel on its own scale ({rule})"
    per = "each view's panels" if len(groups) > 1 else "every panel"
    return f"one scale for {per} ({rule})"


def _texts(spec: CompareSpec, cells: list[Cell], title: str, scale_note: str, base: Session) -> tuple[str, str]:
    """The figure's title (what is compared and what all panels share) and caption (what differs per column, the
    model, the image, the colour scale)."""
    parts = [c.view.caption_parts(c.session.result, c.session.options) + [x for x in [c.session.joint_note()] if x]
             for c in cells]
    common = [p for p in parts[0] if all(p in q for q in parts[1:])]
    r = base.result
    details = []
    if spec.layout == "views":  # per column: the view's full title and what its panels share beyond the common
        columns: dict[str, list[list[str]]] = {}
        for c, p in zip(cells, parts):
            columns.setdefault(c.view.title, []).append([x for x in p if x not in common])
        for t, ps in columns.items():
            shared = [x for x in ps[0] if all(x in q for q in ps[1:])]
            details.append(f"{t}: {', '.join(shared)}" if shared else t)
        head = title + (" · " + " · ".join(common) if common else "")
        images = ""
    else:
        head = " · ".join([title] + common)
        images = Path(r.source).name
    caption = " · ".join(details + [x for x in [r.model_name, images, f"colour: {scale_note}"] if x])
    return head, caption


# ----------------------------------------------------------------------------------------------- the figure
def comparison_size_problem(comp: Comparison, scale: ScaleOption = "print") -> str | None:
    """Why :func:`comparison_figure` at ``scale`` would be over the figure limit, from the images' sizes alone
    (:func:`vitviz.render.figures.size_problem`), before any map is drawn at an image's pixels; None when it fits."""
    sizes = [c.session.result.image_size for c in comp.cells]
    cell = (max(h for h, _ in sizes), max(w for _, w in sizes))
    problem = size_problem(cell, scale, panels=len(sizes), ncols=comp.ncols)
    return None if problem is None else f"{comp.cells[0].session.result.source}: {problem}"


def comparison_figure(comp: Comparison) -> FigureSpec:
    """The comparison as a :class:`vitviz.render.figures.FigureSpec`: every panel in the window's colours (its scale,
    the query-patch box where the view uses it, the mask), row and column labels (the panel labels in the ``"layers"``
    and ``"classes"`` layouts), one colour bar when all panels share a scale (else one under each panel), the title
    and the caption. The options' ``caption`` and ``colorbar`` switch those off."""
    o = comp.cells[0].session.options
    quantities = {appearance.quantity_text(c.view) for c in comp.cells if c.scale is not None}
    one_label = len(quantities) == 1
    panels = []
    for c in comp.cells:
        label = c.label
        if c.scale is None and not (c.view.rgb and c.map is not None):
            label = f"{label + ': ' if label else ''}not available"
        # the window's own picture of this panel (map, query box, mask, artefact outlines), in the panel's scale
        p = c.panel(on_image=True)
        # a column that shares one scale (images x views) gets one bar, under its last panel
        last = c.row == comp.nrows - 1 or not (comp.spec.layout == "views" and comp.spec.shared_scale)
        panels.append(replace(p, label=label, marker=p.marker if c.scale is not None else None,
                              colorbar_label=None if one_label else p.colorbar_label, own_colorbar=last))
    return FigureSpec(panels=tuple(panels), ncols=comp.ncols, title=comp.title if o.caption else None,
                      caption=comp.caption if o.caption else None, row_labels=comp.row_labels,
                      col_labels=comp.col_labels, colorbar=o.colorbar,
                      colorbar_label=quantities.pop() if one_label else "", scale=comp.shared)

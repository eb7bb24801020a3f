"""What one image of ``vitviz export`` becomes: the target class a ``--target`` names, whether gradients are needed,
the options checked against the model, every map to make (view, layer, head, query) of a result, and the view
options of each map drawn (what a streamed pass must gather). No Qt."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from vitviz import views as registry
from vitviz.batch.export_options import HEAD_WORDS, ExportOptions, is_int
from vitviz.document.session import Session
from vitviz.render import figures


def resolve_target(text: str | int | None, labels: Sequence[str] | None, num_classes: int) -> int | None:
    """``"top"`` / None -> None (each image's top class); an index; or a class name: the label itself or one of its
    comma-separated names (case-insensitive), else a unique part of one.

    Raises:
        ValueError: out of range, no class or several classes match (naming them), or a name without labels.
    """
    if text is None or str(text).strip().lower() in ("", "top"):
        return None
    t = str(text).strip()
    if num_classes <= 0:
        raise ValueError(f"--target {t}: the model has no classification head, so there is no class to explain")
    if is_int(t):
        i = int(t)
        if not 0 <= i < num_classes:
            raise ValueError(f"--target {t}: out of range for a model with {num_classes} classes "
                             f"(valid: 0..{num_classes - 1})")
        return i
    if not labels:
        raise ValueError(f"--target {t}: the model has no class names; give a class index (0..{num_classes - 1})")
    low = t.lower()
    exact = [i for i, lab in enumerate(labels)
             if low == lab.lower() or low in (n.strip().lower() for n in lab.split(","))]
    hits = exact or [i for i, lab in enumerate(labels) if low in lab.lower()]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise ValueError(f"--target {t}: no class name contains {t!r}" + did_you_mean(low, labels))
    shown = ", ".join(f"{labels[i]} ({i})" for i in hits[:6]) + (" ..." if len(hits) > 6 else "")
    raise ValueError(f"--target {t}: {len(hits)} classes match ({shown}); be more precise or give the index")


def did_you_mean(text: str, labels: Sequence[str]) -> str:
    """``"; did you mean tabby (281), tiger cat (282)?"``: the class names closest to ``text`` (difflib, each
    comma-separated name of a label on its own), or "" when none is close."""
    names: dict[str, int] = {}
    for i, lab in enumerate(labels):
        for n in [lab, *lab.split(",")]:
            names.setdefault(n.strip().lower(), i)
    close = difflib.get_close_matches(text.strip().lower(), list(names), n=6, cutoff=0.6)
    found = list(dict.fromkeys(names[n] for n in close))[:3]
    return "; did you mean " + ", ".join(f"{labels[i]} ({i})" for i in found) + "?" if found else ""


def needs_gradients(view_keys: Sequence[str]) -> bool:
    """Whether any of the views needs the attention gradients of a target class."""
    return any(registry.get(k).needs_grads or "target" in registry.get(k).reads for k in view_keys)


def grid_of(spec: Any, cfg: Any) -> tuple[int, int] | None:
    """The patch grid of the model's input (crop / patch size), or None when the spec does not say."""
    try:
        h, w = spec.input_size
        p = int(cfg.patch_size)
        return (int(h) // p, int(w) // p) if p > 0 else None
    except (AttributeError, TypeError, ValueError):
        return None


def check_against_model(options: ExportOptions, depth: int | None, heads: int | None,
                        grid: tuple[int, int] | None = None) -> None:
    """Layer and head indices and the query patch against the model (ValueError naming the flag and the valid
    range)."""
    if grid and options.query is not None and not (options.query[0] < grid[0] and options.query[1] < grid[1]):
        raise ValueError(f"--query {options.query[0]},{options.query[1]}: outside the model's {grid[0]}x{grid[1]} "
                         f"patch grid (rows 0..{grid[0] - 1}, columns 0..{grid[1] - 1})")
    if depth:
        for w in options.layers:
            if is_int(w) and not -depth <= int(w) < depth:
                raise ValueError(f"--layers {w}: the model has {depth} layers (valid: 0..{depth - 1}, or -1 for the "
                                 "last)")
    if heads:
        for w in options.heads:
            if is_int(w) and not 0 <= int(w) < heads:
                raise ValueError(f"--heads {w}: the model has {heads} heads (valid: 0..{heads - 1})")


def figure_check(options: ExportOptions) -> Callable[[int, int], str | None] | None:
    """The limit a figure puts on an image's size, for :func:`vitviz.batch.inputs.stream_batches` to ask from each
    image's header before it is decoded and run: a PNG (``--format png|both``) or ``--animate`` frame of one view
    is the image at ``--scale`` with its text, refused over :data:`~vitviz.render.figures.MAX_FIGURE_PIXELS`
    (:func:`~vitviz.render.figures.size_problem`). None with ``--format npy`` and no animation: the maps are at the
    patch grid's size whatever the image's."""
    if options.format == "npy" and not options.animate:
        return None
    scale = figures.parse_scale(options.scale)
    only_npy = "--format npy" + (" without --animate" if options.animate else "")

    def check(width: int, height: int) -> str | None:
        problem = figures.size_problem((height, width), scale)
        if problem is None:
            return None
        smaller = "" if figures.grid_factor((height, width), 1, 1, scale) == 1 else "choose a smaller --scale, "
        return f"{problem}; {smaller}reduce the image, or export its maps only ({only_npy})"

    return check


def map_requests(result: Any, options: ExportOptions) -> list[tuple[str, dict[str, Any]]]:
    """Every map to make of ``result``: ``(view key, ViewOptions changes)``, in the order of the views, then layers,
    then heads; each view gets only the layers and heads it reads (relevance on CLIP prompts: the last layer only,
    :meth:`vitviz.views.View.result_changes`)."""
    L, H = result.num_layers, result.num_heads
    gh, gw = result.grid
    row, col = options.query if options.query is not None else (gh // 2, gw // 2)
    if not (0 <= row < gh and 0 <= col < gw):
        raise ValueError(f"--query {row},{col}: outside the {gh}x{gw} patch grid")
    out = []
    for key in options.views:
        v = registry.get(key)
        layers: list[int | None] = [None]
        if "layer" in v.reads:
            lo, hi = v.layer_range(result)
            layers = []
            for w in options.layers:
                if w == "all":
                    layers += list(range(lo, hi + 1))
                elif w == "last":
                    layers.append(L - 1)
                elif w == "emb":
                    if lo < 0:
                        layers.append(-1)
                else:
                    i = int(w)
                    layers.append(i + L if i < 0 else i)
            layers = list(dict.fromkeys(x for x in layers if lo <= x <= hi)) or [L - 1]
        head_list: list[Any] = [None]
        if "head" in v.reads:
            head_list = []
            for w in options.heads:
                head_list += list(range(H)) if w == "all" else [w] if w in HEAD_WORDS else [int(w)]
            head_list = list(dict.fromkeys(head_list))
        for layer in layers:
            for head in head_list:
                changes: dict[str, Any] = {"view": key, "query": row * gw + col}
                changes.update(v.result_changes(result))  # relevance on CLIP prompts: the last layer only
                if layer is not None:
                    changes["layer"] = layer
                if head is not None:
                    changes["head"] = head
                out.append((key, changes))
    return out



def map_demands(result: Any, options: ExportOptions) -> list[tuple[Any, Any]]:
    """Every ``(view, ViewOptions)`` whose map the export of ``result`` draws: each of :func:`map_requests` as the
    writer sets it on its session (the display options, then the request's changes, clamped by the session), and with
    ``animate`` every value of the layer slider of each animated view (:func:`vitviz.document.panel.layer_figures`).
    A streamed pass gathers what these need (:func:`vitviz.document.streamed.plan_streaming`)."""
    s = Session()
    s.set_result(result)
    s.set_options(**dict(options.display))
    base = s.options
    out: list[tuple[Any, Any]] = []
    requests = map_requests(result, options)
    for _key, changes in requests:
        s.options = base
        s.set_options(**changes)
        out.append((s.view, s.options))
    if options.animate:
        for _key, changes in requests:
            s.options = base
            s.set_options(**{k: v for k, v in changes.items() if k != "layer"})
            v = s.view
            if v.slider is None:
                continue
            lo, hi = s.slider_range()
            out += [(v, replace(s.options, **{v.slider: i})) for i in range(lo, hi + 1)]
    return out

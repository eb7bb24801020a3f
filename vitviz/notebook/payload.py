"""What the notebook viewer sends to the browser, computed from a :class:`~vitviz.document.session.Session`: plain
bytes and JSON-able dicts, no widget library. No Qt.

A view's maps travel at patch resolution, one frame per position of its layer slider, so that moving the slider
repaints in the browser without asking the kernel (:func:`view_frames`):

* ``index``: uint8 ``[n, gh, gw]``, each patch's row of the colour map's lookup table, exactly as the figures colour
  it (``round(scale.normalise(value) * 255)``, :func:`vitviz.render.figures.composite`); an RGB view (feature PCA)
  sends uint8 RGBA ``[n, gh, gw, 4]`` instead;
* ``values``: float16 ``[n, gh, gw]``, each map divided by its largest magnitude (NaN kept), for the hover read-out
  (``value = values * absmax``; float16 keeps about three digits);
* ``meta``: per frame the title and caption the window shows, the colour scale (levels, ticks, colour map, quantity)
  and, for an unavailable view, why.

The lookup tables of every colour map are sent once (:func:`lookup_tables`). The heads grid is one frame per head on
one shared scale (:func:`heads_frames`); the view list names every registered view and why one is unavailable
(:func:`view_list`).
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from PIL import Image

from vitviz import views
from vitviz.document.panel import heads_of, panel_of
from vitviz.document.session import Session
from vitviz.render.colormaps import COLORMAPS, NEUTRAL_RGB
from vitviz.render.scales import ColourScale

__all__ = ["PHOTO_MAX_SIDE", "Frames", "frame_session", "head_choices", "heads_frames", "lookup_tables", "photo_png",
           "scale_dict", "view_frames", "view_list"]

PHOTO_MAX_SIDE = 640
"""The photo is sent at most this many pixels on its long side (the maps are drawn over it at any size)."""


@dataclass(frozen=True)
class Frames:
    """Maps ready for the browser (see the module's notes): ``index`` and ``values`` bytes and their ``meta``."""

    index: bytes
    values: bytes
    meta: dict[str, Any]


def lookup_tables() -> tuple[bytes, list[str]]:
    """Every colour map's table as uint8 ``[k, 256, 4]`` bytes, and the names in that order."""
    names = list(COLORMAPS)
    return np.ascontiguousarray(np.stack([COLORMAPS[n] for n in names]).astype(np.uint8)).tobytes(), names


def scale_dict(scale: ColourScale, quantity: str) -> dict[str, Any]:
    """A colour scale as the browser draws its bar: levels, colour map, ticks and the quantity's words."""
    return {"lo": float(scale.lo), "hi": float(scale.hi), "log": bool(scale.log), "cmap": scale.cmap,
            "diverging": bool(scale.diverging), "ticks": [[float(v), t] for v, t in scale.ticks()],
            "quantity": quantity}


def lut_index(scale: ColourScale, values: np.ndarray) -> np.ndarray:
    """uint8 rows of the lookup table, as :func:`vitviz.render.figures.composite` colours ``values``."""
    t = scale.normalise(values)
    return np.round(np.nan_to_num(t, nan=0.0) * 255).astype(np.uint8)


def frame_session(session: Session, **changes: Any) -> Session:
    """A copy of ``session`` at other options (sharing its result and map cache)."""
    s = copy.copy(session)
    s.options = session.clamped(replace(session.options, **changes)) if changes else session.options
    return s


def _frame(s: Session, gh: int, gw: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """One frame: (index or RGBA, values, meta) of ``s``'s current view."""
    p = panel_of(s)
    m = s.current_map()
    meta: dict[str, Any] = {"title": p.title, "caption": p.caption, "scale": None, "absmax": 1.0,
                            "unavailable": p.unavailable, "marker": p.marker is not None, "scale_text": p.scale_text,
                            "outlined": [[int(r), int(c)] for r, c in p.outlined]}
    values = np.full((gh, gw), np.nan, dtype=np.float16)
    if p.rgb is not None:
        index = np.round(np.clip(np.asarray(p.rgb, dtype=np.float64), 0, 1) * 255).astype(np.uint8)
        if m is not None:
            m = np.asarray(m, dtype=np.float64)
            absmax = float(np.nanmax(np.abs(m))) if np.isfinite(m).any() else 1.0
            meta["absmax"] = absmax or 1.0
            values = (m / meta["absmax"]).astype(np.float16)
        return index, values, meta
    index = np.zeros((gh, gw), dtype=np.uint8)
    if m is None or p.scale is None:
        return index, values, meta
    m = np.asarray(m, dtype=np.float64)
    absmax = float(np.nanmax(np.abs(m))) if np.isfinite(m).any() else 0.0
    meta["absmax"] = absmax or 1.0
    meta["scale"] = scale_dict(p.scale, p.colorbar_label)
    # tokens left out of the scale: drawn in the neutral colour at the map's opacity, as the figures draw them
    meta["neutral"] = [[int(r), int(c)] for r, c in (p.neutral or ())]
    meta["neutral_rgb"] = list(NEUTRAL_RGB)
    return lut_index(p.scale, m), (m / meta["absmax"]).astype(np.float16), meta


def view_frames(session: Session) -> Frames:
    """The current view at every position of its layer slider (one frame when it has none), on each position's own
    colour scale as the window shows it (a scale shared across layers spans them all).

    Raises:
        ValueError: the session has no result.
    """
    r = session.result
    if r is None:
        raise ValueError("nothing to show: no image has been analysed yet")
    v = session.view
    gh, gw = r.grid
    lo, hi = session.slider_range() if v.slider is not None else (0, 0)
    positions = list(range(lo, hi + 1)) if v.slider is not None else [None]
    index, values, metas = [], [], []
    for i in positions:
        s = session if i is None else frame_session(session, **{v.slider: i})
        a, b, meta = _frame(s, gh, gw)
        meta["label"] = v.slider_text(i) if i is not None else ""
        index.append(a)
        values.append(b)
        metas.append(meta)
    meta = {"view": v.key, "grid": [gh, gw], "first": lo, "count": len(positions), "rgb": bool(v.rgb),
            "slider": v.slider_label if v.slider is not None else "", "frames": metas}
    return Frames(np.ascontiguousarray(np.stack(index)).tobytes(), np.ascontiguousarray(np.stack(values)).tobytes(),
                  meta)


def head_choices(session: Session) -> list[str]:
    """The head slider's positions: the reductions, then every head of the model (as text)."""
    r = session.result
    return list(views.HEAD_REDUCTIONS) + [str(h) for h in range(r.num_heads if r is not None else 0)]


def heads_frames(session: Session) -> Frames | None:
    """Every head of the attention layer shown, on the heads grid's one shared scale (:func:`heads_of`); None
    without a result."""
    g = heads_of(session)
    if g is None:
        return None
    tiles = g.tiles.astype(np.float64)
    absmax = float(np.nanmax(np.abs(tiles))) if np.isfinite(tiles).any() else 1.0
    meta = {"count": int(tiles.shape[0]), "grid": list(tiles.shape[1:]), "layer": g.layer, "query": g.query,
            "absmax": absmax or 1.0, "scale": scale_dict(g.scale, "attention weight"),
            "title": f"Attention from {g.query} · layer {g.layer} · {tiles.shape[0]} heads"}
    return Frames(lut_index(g.scale, tiles).tobytes(), (tiles / meta["absmax"]).astype(np.float16).tobytes(), meta)


def view_list(session: Session) -> list[dict[str, Any]]:
    """Every registered view in menu order: key, title, whether it has a map for the shown result and why not."""
    r = session.result
    out = []
    for v in views.all_views():
        reason = v.unavailable(r) if r is not None else "no image has been analysed yet"
        out.append({"key": v.key, "title": v.title, "available": reason is None, "reason": reason or "",
                    "reads_head": "head" in v.reads, "reads_query": "query" in v.reads,
                    "slider": v.slider_label if v.slider is not None else ""})
    return out


def photo_png(rgb: np.ndarray, max_side: int = PHOTO_MAX_SIDE) -> tuple[bytes, tuple[int, int]]:
    """The photo as PNG bytes at most ``max_side`` on its long side, and its ``(height, width)`` as sent."""
    im = Image.fromarray(np.ascontiguousarray(np.asarray(rgb)[..., :3], dtype=np.uint8), "RGB")
    w, h = im.size
    k = min(1.0, max_side / max(w, h))
    if k < 1.0:
        im = im.resize((max(1, round(w * k)), max(1, round(h * k))), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue(), (im.size[1], im.size[0])

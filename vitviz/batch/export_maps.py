"""What ``vitviz export`` (:mod:`vitviz.batch.export`) writes for one image: its manifest fields, each requested
map (npy, the window's figure as PNG) and, with ``--animate``, each view over every layer. The maps are the window's:
made through a :class:`~vitviz.document.session.Session` with the options set as the window sets them; nothing here
computes a map."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np

from vitviz.batch.export_options import ExportOptions
from vitviz.batch.export_plan import map_requests, needs_gradients
from vitviz.batch.inputs import InputImage
from vitviz.batch.prompt_passes import prompt_word
from vitviz.batch.target_flags import describe_prompts, describe_target
from vitviz.document import panel
from vitviz.render import figures


def describe_result(r: Any, num_classes: int, options: ExportOptions) -> dict[str, Any]:
    """An image's manifest fields: its size, the model, precision and grid, the top predictions, the target."""
    top = r.top_k(5) if r.logits.ndim == 1 and num_classes > 0 else []
    target = describe_target(r)
    if options.text:  # every prompt, each the target of its own maps
        target = {"kind": "prompts", "prompts": describe_prompts(r), "templates": options.templates}
    return {"size": [int(r.image_size[1]), int(r.image_size[0])], "model": r.model_name,
            "precision": r.precision, "grid": list(r.grid),
            "predictions": [{"class": c, "label": lab, "p": round(p, 6)} for c, lab, p in top],
            "target": target}


def write_maps(session: Any, item: InputImage, written: list[str], o: ExportOptions,
               write: Callable[[str, bytes, list[str]], None]) -> list[dict[str, Any]]:
    """Every requested map of one image's result through its :class:`~vitviz.document.session.Session`
    (:meth:`vitviz.batch.batch_passes.BatchPasses.session`), as the window makes it, written with ``write(rel, data,
    written)`` (:meth:`vitviz.batch.export_files.OutputFiles.write`); returns the manifest's map entries."""
    r = session.result
    session.set_options(**dict(o.display))
    base = session.options
    maps = []
    for key, changes in map_requests(r, o):
        session.options = base
        session.set_options(**changes)
        v = session.view
        entry: dict[str, Any] = {"view": key}
        if o.text and needs_gradients([key]):
            entry["prompt"] = r.target_text()
        for k in ("layer", "head"):
            if k in changes:
                entry[k] = changes[k]
        if "query" in v.reads:
            entry["query"] = list(divmod(session.options.query, r.grid[1]))
        try:
            m = session.current_map()
        except ValueError as e:  # this view cannot be drawn here (non-finite tokens ...): said; the others go on
            m, entry["unavailable"] = None, str(e).strip().splitlines()[0][:300]
        if m is None:
            if "unavailable" not in entry:
                entry["unavailable"] = session.unavailable_reason() or "not available for this model"
            maps.append(entry)
            continue
        stem = f"{item.rel}_{v.file_stem(r, session.options)}"
        files: list[tuple[str, bytes]] = []
        if o.format in ("npy", "both"):  # an RGB view's (feature PCA's): its R, G, B [gh, gw, 3], as drawn
            raw = session.rgb_map()[..., :3] if v.rgb else m
            buf = io.BytesIO()
            np.save(buf, np.ascontiguousarray(raw, dtype=np.float32))
            files.append((stem + ".npy", buf.getvalue()))
        if o.format in ("png", "both"):
            spec = panel.view_figure(session)
            data, _ = figures.encode(spec, ".png", scale=figures.parse_scale(o.scale))
            files.append((stem + ".png", data))
        for rel, data in files:
            write(rel, data, written)
            entry["npy" if rel.endswith(".npy") else "png"] = rel
        maps.append(entry)
    if o.animate:
        maps += write_animations(session, base, r, item, written, o, write)
    return maps


def write_animations(session: Any, base: Any, r: Any, item: InputImage, written: list[str], o: ExportOptions,
                     write: Callable[[str, bytes, list[str]], None]) -> list[dict[str, Any]]:
    """``--animate``: each requested view that has a layer slider over every layer, one file per view (and head,
    query as for its maps): ``<name>_<view>[_<head>][_<prompt>]_layers.<gif|apng|mp4>``."""
    out = []
    done = set()
    for key, changes in map_requests(r, o):
        changes = {k: v for k, v in changes.items() if k != "layer"}
        session.options = base
        session.set_options(**changes)
        v = session.view
        ident = (key, changes.get("head"))
        if v.slider is None or ident in done:
            continue
        done.add(ident)
        entry: dict[str, Any] = {"view": key, "layers": "all"}
        if "head" in changes:
            entry["head"] = changes["head"]
        if session.current_map() is None:
            entry["unavailable"] = session.unavailable_reason() or "not available for this model"
            out.append(entry)
            continue
        specs = panel.layer_figures(session)
        fmt = "." + o.animate
        data = figures.encode_animation(specs, fmt, scale=figures.parse_scale(o.scale),
                                        fps=o.fps)
        head = changes.get("head")
        head_part = "" if "head" not in v.reads else f"_{head}" if isinstance(head, str) else f"_h{head}"
        prompt = f"_{prompt_word(r)}" if o.text and needs_gradients([key]) else ""
        rel = f"{item.rel}_{key}{head_part}{prompt}_layers{fmt}"
        write(rel, data, written)
        entry.update(animation=rel, frames=len(specs))
        out.append(entry)
    return out

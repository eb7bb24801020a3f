"""Writing a session: its JSON form (:func:`to_dict`, :func:`state_json`), a figure's metadata entry
(:func:`figure_metadata`) and the session file (:func:`save_state`). The options are written from the option table
(:mod:`vitviz.views.options`): every row, under its name. No Qt."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from vitviz import imaging
from vitviz._util.files import folder_problem
from vitviz.document.state.schema import FORMAT, METADATA_KEY, VERSION, SessionState
from vitviz.document.state.snapshot import software
from vitviz.views.options import ViewOptions, all_options

__all__ = ["figure_metadata", "options_dict", "save_state", "state_json", "to_dict"]


def _relative(path: str, base: Path | None) -> str | None:
    if base is None or not os.path.isabs(path):
        return None
    try:
        return Path(os.path.relpath(path, base)).as_posix()
    except ValueError:  # another drive (Windows)
        return None


def options_dict(options: ViewOptions) -> dict[str, Any]:
    """Every option of the table under its name, JSON-ready (a ``range`` as a list of two numbers)."""
    out = {}
    for row in all_options():
        value = getattr(options, row.name)
        if row.kind == "range" and value is not None:
            value = [float(v) for v in value]
        out[row.name] = value
    return out


def to_dict(state: SessionState, base: str | os.PathLike | None = None) -> dict[str, Any]:
    """The JSON-ready form of ``state``; ``base``: the folder of the file it goes into (for ``relative``)."""
    b = Path(base).resolve() if base is not None else None
    options = options_dict(state.options)
    model: dict[str, Any] = {"ref": state.model}
    if state.model.startswith("file:"):
        rel = _relative(state.model[5:], b)
        if rel is not None:
            model["relative"] = rel
    model.update(name=state.model_name, device=state.device, precision=state.precision)
    if state.preprocess is not None:
        model["preprocess"] = state.preprocess.to_dict()
    images = []
    for ref in state.images:
        entry: dict[str, Any] = {"path": ref.path}
        rel = _relative(ref.path, b)
        if rel is not None:
            entry["relative"] = rel
        if ref.sha256:
            entry["sha256"] = ref.sha256
        images.append(entry)
    compare = None
    if state.compare is not None:
        c = state.compare
        paths = state.paths
        compare = {"layout": c.layout, "views": list(c.views), "images": [paths.index(p) for p in c.images],
                   "layers": list(c.layers), "classes": list(c.classes), "shared_scale": bool(c.shared_scale)}
    return {"format": FORMAT, "version": VERSION, "written_by": state.written_by or software(), "model": model,
            "images": images, "current": state.current, "target": state.target, "target_label": state.target_label,
            "options": options, "window": {"heads_all_layers": bool(state.heads_all_layers)}, "compare": compare}


def state_json(state: SessionState, base: str | os.PathLike | None = None, *, indent: int | None = 1) -> str:
    """``state`` as JSON text (``indent=None``: one line, for figure metadata)."""
    return json.dumps(to_dict(state, base), indent=indent, ensure_ascii=False, allow_nan=False)


def figure_metadata(state: SessionState, figure_path: str | os.PathLike | None = None) -> dict[str, str]:
    """The metadata entries an exported figure carries (``metadata=`` of :func:`vitviz.render.figures.save`):
    ``{METADATA_KEY: the state's JSON}``, relative paths taken from the figure's folder."""
    base = Path(figure_path).resolve().parent if figure_path is not None else None
    return {METADATA_KEY: state_json(state, base, indent=None)}


def save_state(state: SessionState, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write ``state`` to ``path`` (a ``.vitviz.json``) atomically.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False (nothing is written).
        ExportError: the folder is missing or not writable, the disk is full ... (names the file and the cause).
    """
    target = Path(path)
    problem = folder_problem(target.parent)
    if problem:
        raise imaging.ExportError(target, problem)
    if target.is_dir():
        raise imaging.ExportError(target, "a folder of that name exists")
    data = (state_json(state, target.resolve().parent) + "\n").encode("utf-8")
    return imaging.write_atomic(target, lambda fh: fh.write(data), overwrite=overwrite, suffix=".json.tmp")


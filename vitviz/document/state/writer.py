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
from vitviz.document.state.reader import parse_state
from vitviz.document.state.schema import (
    FORMAT,
    MAX_BYTES,
    MAX_IMAGES,
    METADATA_KEY,
    TARGET_VERSION,
    SessionState,
    StateError,
    size_text,
)
from vitviz.document.state.snapshot import software
from vitviz.views.options import ViewOptions, all_options

__all__ = ["figure_metadata", "options_dict", "readable_json", "save_state", "state_json", "target_dict", "to_dict"]


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
    target: Any = state.target
    version = 1  # a class target: what older vitviz read too
    if state.target_choice is not None:
        target, version = target_dict(state, b), TARGET_VERSION
    extra: dict[str, Any] = {}
    if state.prompts:  # the target indexes the prompts: older vitviz cannot read it
        extra, version = {"prompts": list(state.prompts)}, TARGET_VERSION
    return {"format": FORMAT, "version": version, "written_by": state.written_by or software(), "model": model,
            "images": images, "current": state.current, "target": target, "target_label": state.target_label,
            "options": options, "window": {"heads_all_layers": bool(state.heads_all_layers)}, "compare": compare,
            **extra}


def target_dict(state: SessionState, base: Path | None) -> dict[str, Any]:
    """A target that is not a class as JSON: ``{"kind": "image" | "patch" | "vector", "path", "relative",
    "patch": [row, col]}``, or ``{"kind": "callable", "name"}`` (a function is saved by its name only)."""
    c = state.target_choice
    assert c is not None
    out: dict[str, Any] = {"kind": c.kind}
    if c.is_similarity:
        out["path"] = c.path
        rel = _relative(c.path, base)
        if rel is not None:
            out["relative"] = rel
        if c.patch is not None:
            out["patch"] = [int(c.patch[0]), int(c.patch[1])]
    else:
        out["name"] = c.name
    return out


def state_json(state: SessionState, base: str | os.PathLike | None = None, *, indent: int | None = 1) -> str:
    """``state`` as JSON text (``indent=None``: one line, for figure metadata)."""
    return json.dumps(to_dict(state, base), indent=indent, ensure_ascii=False, allow_nan=False)


def readable_json(state: SessionState, base: str | os.PathLike | None, target: str | os.PathLike,
                  *, indent: int | None = 1) -> str:
    """``state`` as JSON text that the reader reads back (what vitviz writes, it reads): within the reader's limits
    (:data:`MAX_IMAGES` images, :data:`MAX_BYTES`), and read back by it before anything is written.

    Raises:
        StateError: naming ``target`` and why this state cannot be written.
    """
    n = len(state.images)
    if n > MAX_IMAGES:
        raise StateError(target, f"cannot be saved: the session holds {n:,} images; a session holds at most "
                                 f"{MAX_IMAGES:,} (close some images first)")
    text = state_json(state, base, indent=indent)
    size = len(text.encode("utf-8"))
    if size > MAX_BYTES:
        raise StateError(target, f"cannot be saved: the session would take {size_text(size)}; a session is at most "
                                 f"{size_text(MAX_BYTES)} (its {n:,} image paths are long: close some images first)")
    try:
        parse_state(text, target)
    except StateError as e:
        raise StateError(target, f"cannot be saved: vitviz could not read it back ({e.problem})") from None
    return text


def figure_metadata(state: SessionState, figure_path: str | os.PathLike | None = None) -> dict[str, str]:
    """The metadata entries an exported figure carries (``metadata=`` of :func:`vitviz.render.figures.save`):
    ``{METADATA_KEY: the state's JSON}``, relative paths taken from the figure's folder.

    Raises:
        StateError: the state could not be read back from the figure (:func:`readable_json`).
    """
    base = Path(figure_path).resolve().parent if figure_path is not None else None
    return {METADATA_KEY: readable_json(state, base, figure_path or "the figure", indent=None)}


def save_state(state: SessionState, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write ``state`` to ``path`` (a ``.vitviz.json``) atomically.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False (nothing is written).
        ExportError: the folder is missing or not writable, the disk is full ... (names the file and the cause).
        StateError: the session could not be read back (too many images, too large: :func:`readable_json`);
            nothing is written.
    """
    target = Path(path)
    problem = folder_problem(target.parent)
    if problem:
        raise imaging.ExportError(target, problem)
    if target.is_dir():
        raise imaging.ExportError(target, "a folder of that name exists")
    data = (readable_json(state, target.resolve().parent, target) + "\n").encode("utf-8")
    return imaging.write_atomic(target, lambda fh: fh.write(data), overwrite=overwrite, suffix=".json.tmp")


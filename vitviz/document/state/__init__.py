"""Reproducible state: what the window shows, as a versioned JSON document (``.vitviz.json``) and as figure metadata.

No Qt. A :class:`SessionState` names everything that makes the picture: the model (its reference, :mod:`vitviz.model.
sources`), the open images and which one is shown, the gradient target, every view, display and analysis option
(:class:`~vitviz.document.session.ViewOptions`), the heads panel's grid toggle and, when a comparison is open, the comparison
(:class:`~vitviz.document.comparison.CompareSpec`). The window's File > Save session writes one with :func:`save_state`; every
exported figure carries the same JSON under the metadata key :data:`METADATA_KEY` (:func:`figure_metadata`), so
File > Open session reads either (:func:`read_state`) and restores the view that made it.

Reading is strict and bounded: a file over :data:`MAX_BYTES`, JSON that is not an object, nested too deeply, with
duplicate keys, NaN or huge numbers, unknown keys, values of the wrong type or out of range, an unknown view or
colormap, or a newer schema version gives a :class:`StateError` naming the file, the field and the problem, before
anything is changed. :func:`locate` then finds the files the state names (each at its saved absolute path, else
relative to the state file's folder, so a project folder can move) and raises one :class:`StateError` listing
everything missing. :func:`reproduce` rebuilds the :class:`~vitviz.document.session.Session` headlessly (the CLI, tests);
the window does the same on its worker.

Schema (``"version": 1``)::

    {"format": "vitviz-session", "version": 1, "written_by": "vitviz 0.1.0",
     "model": {"ref": "file:/abs/vit.safetensors", "relative": "vit.safetensors", "name": "ViT-Ti/16",
               "device": "cpu", "precision": "fp32"},
     "images": [{"path": "/abs/cat.png", "relative": "cat.png", "sha256": "..."}],
     "current": 0, "target": 281, "target_label": "tabby cat",
     "options": {"view": "relevance", "layer": 11, "head": "mean", "query": 0, ... every ViewOptions field},
     "window": {"heads_all_layers": false},
     "compare": null | {"layout": "views", "views": ["cls", "rollout"], "images": [0, 1], "layers": [],
                        "classes": [], "shared_scale": true}}

``relative`` entries are written relative to the folder of the file the state is written into (the session file or
the exported figure) and are only a fallback: the absolute path wins when it exists. ``target`` is the class whose
gradients the target-dependent views show (null: the model has no classifier).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitviz.document.session import SCALE_MODES, ViewOptions

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.document.comparison import CompareSpec
    from vitviz.pipeline import InferenceResult, Pipeline
    from vitviz.model.preprocess import Preprocess
    from vitviz.document.session import Session

__all__ = ["FORMAT", "METADATA_KEY", "SUFFIX", "VERSION", "ImageRef", "SessionState", "StateError", "apply_state",
           "capture_state", "changed_images", "figure_metadata", "file_sha256", "from_dict", "locate", "parse_state",
           "read_state", "reproduce", "save_state", "state_json", "to_dict", "with_preprocess"]

FORMAT = "vitviz-session"
VERSION = 1
SUFFIX = ".vitviz.json"
METADATA_KEY = "vitviz.document.session"
"""The key of the state in an exported figure's metadata (PNG text chunk, SVG metadata, PDF document info)."""
MAX_BYTES = 1 << 20
"""The largest session file read (1 MiB; a session with a thousand images is about 150 kB)."""
MAX_FIGURE_BYTES = 1 << 30
"""The largest figure whose metadata is read (1 GiB)."""
MAX_IMAGES = 10_000
MAX_TEXT = 4096  # characters of a path or name
MAX_DEPTH = 16  # JSON nesting (the schema needs 3)
MAX_INDEX = 1_000_000  # layers, patches, classes
IN_MEMORY_MODEL = "memory"  # the reference of a model handed to the window by a script (vitviz.show, tests)
_MODEL_REF = re.compile(r"[a-z][a-z0-9_-]*:.+", re.DOTALL)  # KIND:VALUE (vitviz.model.sources.refs: file, hub ...)


class StateError(ValueError):
    """A session file or figure cannot be used; the message names the file and every problem."""

    def __init__(self, source: str | os.PathLike | None, problem: str):
        self.source = None if source is None else str(source)
        self.problem = problem
        super().__init__(f"{self.source}: {problem}" if self.source else problem)


@dataclass(frozen=True)
class ImageRef:
    """One image of the session.

    Attributes:
        path: where it is (absolute when it is a file; a name such as ``"pasted image"`` when it is not).
        sha256: of the file's bytes when the state was made (None: unknown); a changed file is reported.
        relative: as written in the file, relative to that file's folder (a fallback for :func:`locate`).
    """

    path: str
    sha256: str | None = None
    relative: str | None = None


@dataclass(frozen=True)
class SessionState:
    """Everything that makes the window's picture (see the module docstring for the JSON form).

    Attributes:
        model: the model reference (``"demo"``, ``"file:PATH"``, ``"pretrained:NAME"``, ``"random:NAME"``;
            ``"memory"`` for a model handed over by a script, which cannot be reopened).
        images: the open images; ``images[current]`` is the one shown.
        current: index of the shown image.
        options: the view, display and analysis options.
        target: the class of the gradient views (None: the model has no classifier).
        target_label: the class's name, for messages.
        model_name, device, precision: for messages (a session opens on the window's own device and precision).
        model_relative: the checkpoint relative to the file's folder (``file:`` models), a fallback for
            :func:`locate`.
        preprocess: how the model prepared its images (resize, crop, mean, std); a reopened model whose own
            preprocessing differs (a checkpoint that does not say, a default that changed) is given this one, so
            the maps are the same.
        heads_all_layers: the heads panel shows every layer x every head.
        compare: the comparison open in the Compare window, or None.
        written_by: the vitviz that wrote it.
        origin: the file it was read from (not written).
    """

    model: str
    images: tuple[ImageRef, ...]
    current: int
    options: ViewOptions
    target: int | None = None
    target_label: str = ""
    model_name: str = ""
    device: str = "cpu"
    precision: str = "fp32"
    model_relative: str | None = None
    preprocess: Preprocess | None = None
    heads_all_layers: bool = False
    compare: CompareSpec | None = None
    written_by: str = ""
    origin: str = field(default="", compare=False)

    @property
    def image(self) -> ImageRef:
        """The shown image."""
        return self.images[self.current]

    @property
    def paths(self) -> list[str]:
        return [i.path for i in self.images]


# ----------------------------------------------------------------------------------------------- from the window
def capture_state(session: Session, model_ref: str, *, model_name: str = "", device: str = "cpu",
                  precision: str = "fp32", preprocess: Preprocess | None = None, heads_all_layers: bool = False,
                  compare: CompareSpec | None = None, hashes: bool = True) -> SessionState:
    """The state of ``session`` (its shown result, images and options) with the model ``model_ref``.

    Args:
        preprocess: the model's preprocessing (``pipeline.spec.preprocess``), recorded so that a reopened model
            prepares the images the same way.
        hashes: record the SHA-256 of the shown image's file and of the comparison's images (a changed image is
            reported when the state is opened).

    Raises:
        StateError: nothing is shown yet.
    """
    r = session.result
    if r is None:
        raise StateError(None, "nothing to save: no image has been analysed yet")
    paths = [str(p) for p in session.images]
    if r.source not in paths:
        paths.append(str(r.source))
    for p in compare.images if compare is not None else ():  # the comparison's rows are images of the session
        if p not in paths:
            paths.append(str(p))
    # the images the picture is made of are hashed (the shown one, the comparison's): a folder of photos is not
    # read again at every export
    pictured = {str(r.source)} | set(compare.images if compare is not None else ())
    refs = []
    for p in paths:
        q = Path(p)
        is_file = q.is_file()
        sha = file_sha256(q) if is_file and hashes and p in pictured else None
        refs.append(ImageRef(path=str(q.resolve()) if is_file else p, sha256=sha))
    current = paths.index(str(r.source))
    if compare is not None:
        compare = replace(compare, images=tuple(refs[paths.index(p)].path for p in compare.images))
    return SessionState(model=model_ref, images=tuple(refs), current=current, options=session.options,
                        target=r.target, target_label=r.label(r.target) if r.target is not None else "",
                        model_name=model_name or r.model_name, device=device, precision=precision,
                        preprocess=preprocess, heads_all_layers=bool(heads_all_layers), compare=compare,
                        written_by=_software())


def file_sha256(path: str | os.PathLike) -> str | None:
    """SHA-256 of a regular file's bytes (None when it cannot be read)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _software() -> str:
    import vitviz

    return f"vitviz {vitviz.__version__}"


# ----------------------------------------------------------------------------------------------- writing
def _relative(path: str, base: Path | None) -> str | None:
    if base is None or not os.path.isabs(path):
        return None
    try:
        return Path(os.path.relpath(path, base)).as_posix()
    except ValueError:  # another drive (Windows)
        return None


def to_dict(state: SessionState, base: str | os.PathLike | None = None) -> dict[str, Any]:
    """The JSON-ready form of ``state``; ``base``: the folder of the file it goes into (for ``relative``)."""
    b = Path(base).resolve() if base is not None else None
    o = state.options
    options = {f.name: getattr(o, f.name) for f in fields(ViewOptions)}
    if options["fixed_range"] is not None:
        options["fixed_range"] = [float(v) for v in options["fixed_range"]]
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
    return {"format": FORMAT, "version": VERSION, "written_by": state.written_by or _software(), "model": model,
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
    from vitviz import imaging
    from vitviz._util.files import folder_problem

    target = Path(path)
    problem = folder_problem(target.parent)
    if problem:
        raise imaging.ExportError(target, problem)
    if target.is_dir():
        raise imaging.ExportError(target, "a folder of that name exists")
    data = (state_json(state, target.resolve().parent) + "\n").encode("utf-8")
    return imaging.write_atomic(target, lambda fh: fh.write(data), overwrite=overwrite, suffix=".json.tmp")


# ----------------------------------------------------------------------------------------------- reading
def read_state(path: str | os.PathLike) -> SessionState:
    """The state in a session file (``.vitviz.json``) or in a figure vitviz exported (PNG, SVG, PDF).

    Raises:
        StateError: naming the file and the problem (missing, too large, not JSON, a figure without a session,
            a wrong field ...). Nothing is opened.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise StateError(p, "file does not exist") from None
    except OSError as e:
        raise StateError(p, f"cannot read file ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise StateError(p, "is a folder, not a session file")
    if not stat.S_ISREG(st.st_mode):
        raise StateError(p, "is not a regular file")
    try:
        with open(p, "rb") as fh:
            head = fh.read(16)
    except OSError as e:
        raise StateError(p, f"cannot read file ({e.strerror or e})") from None
    if _is_figure(head, p):
        if st.st_size > MAX_FIGURE_BYTES:
            raise StateError(p, f"is {st.st_size / 2**30:.1f} GB; figures over {MAX_FIGURE_BYTES >> 30} GB "
                                f"are not read")
        from vitviz.render.figures import read_metadata

        try:
            meta = read_metadata(p)
        except ValueError as e:
            raise StateError(None, str(e)) from None
        text = meta.get(METADATA_KEY)
        if text is None:
            raise StateError(p, "this figure carries no vitviz session (it was exported by an older vitviz or "
                                "by another program); only figures exported by vitviz can be reopened")
        if len(text.encode("utf-8")) > MAX_BYTES:
            raise StateError(p, f"its session is over {MAX_BYTES >> 20} MB")
        return parse_state(text, p)
    if st.st_size > MAX_BYTES:
        raise StateError(p, f"is {st.st_size / 2**20:.1f} MB; a session file is at most {MAX_BYTES >> 20} MB "
                            f"(is this a session file?)")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise StateError(p, f"cannot read file ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise StateError(p, f"not a session file: not UTF-8 text (byte {e.start})") from None
    return parse_state(text, p)


def _is_figure(head: bytes, p: Path) -> bool:
    if head.startswith((b"\x89PNG", b"%PDF")):
        return True
    return p.suffix.lower() == ".svg"


def parse_state(text: str, source: str | os.PathLike | None = None) -> SessionState:
    """The state in the JSON ``text`` (``source``: the file it came from, for messages and relative paths).

    Raises:
        StateError: naming ``source``, the field and the problem.
    """
    if len(text) > MAX_BYTES:
        raise StateError(source, f"over {MAX_BYTES >> 20} MB of text; a session is at most {MAX_BYTES >> 20} MB")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise _Bad(f"the key {k!r} appears twice in one object")
            out[k] = v
        return out

    def no_constants(name: str) -> Any:
        raise _Bad(f"{name} is not a number a session can hold")

    try:
        obj = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constants)
    except _Bad as e:
        raise StateError(source, f"not a valid session: {e}") from None
    except RecursionError:
        raise StateError(source, "not a valid session: nested too deeply") from None
    except json.JSONDecodeError as e:
        raise StateError(source, f"not a session file: not valid JSON (line {e.lineno}, column {e.colno}: "
                                 f"{e.msg})") from None
    except ValueError as e:  # integers with thousands of digits
        raise StateError(source, f"not a valid session: {e}") from None
    if _depth(obj) > MAX_DEPTH:
        raise StateError(source, "not a valid session: nested too deeply")
    return from_dict(obj, source)


class _Bad(ValueError):
    """A problem with one field (the caller adds the file's name)."""


def _depth(obj: Any, limit: int = MAX_DEPTH + 1) -> int:
    stack, deepest = [(obj, 1)], 1
    while stack:
        o, d = stack.pop()
        deepest = max(deepest, d)
        if d > limit:
            return d
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return deepest


def _type_name(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", int: "an integer",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _obj(v: Any, where: str, keys: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _Bad(f"{where} must be an object, not {_type_name(v)}")
    unknown = sorted(set(v) - set(keys))
    if unknown:
        raise _Bad(f"{where} has unknown {'keys' if len(unknown) > 1 else 'key'} {', '.join(map(repr, unknown))} "
                   f"(known: {', '.join(keys)})")
    missing = [k for k in required if k not in v]
    if missing:
        raise _Bad(f"{where} lacks {', '.join(map(repr, missing))}")
    return v


def _str(v: Any, where: str, *, empty: bool = True) -> str:
    if not isinstance(v, str):
        raise _Bad(f"{where} must be a string, not {_type_name(v)}")
    if len(v) > MAX_TEXT:
        raise _Bad(f"{where} is {len(v)} characters long (at most {MAX_TEXT})")
    if "\x00" in v:
        raise _Bad(f"{where} contains a NUL character")
    if not empty and not v:
        raise _Bad(f"{where} is empty")
    return v


def _int(v: Any, where: str, lo: int = -MAX_INDEX, hi: int = MAX_INDEX) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad(f"{where} must be an integer, not {_type_name(v)}")
    if not lo <= v <= hi:
        raise _Bad(f"{where} is {v}; it must lie in {lo} .. {hi}")
    return v


def _float(v: Any, where: str, lo: float = -1e300, hi: float = 1e300) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Bad(f"{where} must be a number, not {_type_name(v)}")
    v = float(v)
    if not (math.isfinite(v) and lo <= v <= hi):
        raise _Bad(f"{where} is {v:g}; it must lie in {lo:g} .. {hi:g}")
    return v


def _bool(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise _Bad(f"{where} must be true or false, not {_type_name(v)}")
    return v


def _choice(v: Any, where: str, choices: tuple[str, ...] | list[str]) -> str:
    s = _str(v, where)
    if s not in choices:
        raise _Bad(f"{where} is {s!r}; valid: {', '.join(choices)}")
    return s


def _list(v: Any, where: str, most: int) -> list[Any]:
    if not isinstance(v, list):
        raise _Bad(f"{where} must be a list, not {_type_name(v)}")
    if len(v) > most:
        raise _Bad(f"{where} has {len(v)} entries (at most {most})")
    return v


def _view_key(v: Any, where: str) -> str:
    from vitviz import views

    keys = [x.key for x in views.all_views()]
    s = _str(v, where)
    if s not in keys:
        raise _Bad(f"{where}: unknown view {s!r} (this vitviz has {', '.join(keys)})")
    return s


def _options(v: Any) -> ViewOptions:
    """Every ViewOptions field, checked; missing fields take their defaults."""
    from vitviz import imaging
    from vitviz.views import HEAD_REDUCTIONS

    names = tuple(f.name for f in fields(ViewOptions))
    d = _obj(v, "options", names)
    w = "options."
    out: dict[str, Any] = {}
    checks: dict[str, Callable[[Any, str], Any]] = {
        "view": _view_key,
        "layer": _int, "query": lambda x, n: _int(x, n, 0), "start_layer": lambda x, n: _int(x, n, 0),
        "head": lambda x, n: (_int(x, n, 0) if isinstance(x, int) and not isinstance(x, bool)
                              else _choice(x, n, HEAD_REDUCTIONS) if isinstance(x, str)
                              else _bad_head(x, n)),
        "head_fusion": lambda x, n: _choice(x, n, HEAD_REDUCTIONS),
        "discard_ratio": lambda x, n: _float(x, n, 0.0, 0.99),
        "cmap": lambda x, n: _choice(x, n, list(imaging.COLORMAPS)),
        "opacity": lambda x, n: _float(x, n, 0.0, 1.0),
        "interpolation": lambda x, n: _choice(x, n, ("nearest", "bilinear")),
        "colorbar": _bool, "caption": _bool, "ignore_artefacts": _bool, "scale_excludes_artefacts": _bool,
        "scale": lambda x, n: _choice(x, n, SCALE_MODES),
        "percentile": lambda x, n: _float(x, n, 50.0, 100.0),
        "log_scale": _bool,
        "fixed_range": _fixed_range,
        "mask_keep": lambda x, n: _float(x, n, 0.0, 1.0),
        "mask_style": lambda x, n: _choice(x, n, ("contour", "dim")),
    }
    missing = set(names) - set(checks)
    if missing:  # pragma: no cover - a new option must be given a check here (tests/test_state.py checks)
        raise RuntimeError(f"vitviz.document.state has no check for the options {sorted(missing)}")
    for k, val in d.items():
        out[k] = checks[k](val, w + k)
    o = replace(ViewOptions(), **out)
    if o.scale == "fixed" and o.fixed_range is None:
        raise _Bad("options.scale is 'fixed' but options.fixed_range is null")
    if o.fixed_range is not None and o.log_scale and o.fixed_range[0] <= 0:
        raise _Bad("options.fixed_range must be positive with options.log_scale")
    return o


def _bad_head(x: Any, where: str) -> Any:
    raise _Bad(f"{where} must be a head index or one of 'mean', 'max', 'min', not {_type_name(x)}")


def _fixed_range(v: Any, where: str) -> tuple[float, float] | None:
    if v is None:
        return None
    lst = _list(v, where, 2)
    if len(lst) != 2:
        raise _Bad(f"{where} must be [low, high] or null")
    lo, hi = _float(lst[0], where + "[0]"), _float(lst[1], where + "[1]")
    if not lo < hi:
        raise _Bad(f"{where} is [{lo:g}, {hi:g}]; low must be below high")
    return (lo, hi)


def _model_ref(v: Any, where: str) -> str:
    s = _str(v, where, empty=False)
    if s not in ("demo", IN_MEMORY_MODEL) and not _MODEL_REF.fullmatch(s):
        raise _Bad(f"{where} is {s!r}; a model reference is demo or KIND:NAME (file:PATH, pretrained:NAME, "
                   f"hub:OWNER/NAME, random:NAME)")
    return s


def from_dict(d: Any, source: str | os.PathLike | None = None) -> SessionState:
    """The :class:`SessionState` of a parsed JSON object, every field checked.

    Raises:
        StateError: naming ``source``, the field and the problem.
    """
    try:
        return _from_dict(d, "" if source is None else str(source))
    except _Bad as e:
        raise StateError(source, f"not a valid session: {e}") from None


def _from_dict(d: Any, origin: str) -> SessionState:
    if not isinstance(d, dict):
        raise _Bad(f"the file must hold a JSON object, not {_type_name(d)}")
    if d.get("format") != FORMAT:
        raise _Bad(f"'format' must be {FORMAT!r} (is this a vitviz session?)")
    version = d.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise _Bad(f"it was written by a newer vitviz (session version {version}; this vitviz reads version "
                   f"{VERSION}); update vitviz to open it")
    _int(version, "version", 1, VERSION)
    top = ("format", "version", "written_by", "model", "images", "current", "target", "target_label", "options",
           "window", "compare")
    _obj(d, "the session", top, ("model", "images", "current", "options"))
    written_by = _str(d.get("written_by", ""), "written_by")
    m = _obj(d["model"], "model", ("ref", "relative", "name", "device", "precision", "preprocess"), ("ref",))
    ref = _model_ref(m["ref"], "model.ref")
    rel = m.get("relative")
    model_relative = None if rel is None else _str(rel, "model.relative", empty=False)
    model_name = _str(m.get("name", ""), "model.name")
    device = _str(m.get("device", "cpu"), "model.device")
    precision = _str(m.get("precision", "fp32"), "model.precision")
    preprocess = None if m.get("preprocess") is None else _preprocess(m["preprocess"], "model.preprocess")
    images = []
    for i, e in enumerate(_list(d["images"], "images", MAX_IMAGES)):
        where = f"images[{i}]"
        e = _obj(e, where, ("path", "relative", "sha256"), ("path",))
        sha = e.get("sha256")
        if sha is not None:
            sha = _str(sha, where + ".sha256")
            if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
                raise _Bad(f"{where}.sha256 is not a SHA-256 digest (64 lower-case hex digits)")
        rel = e.get("relative")
        images.append(ImageRef(path=_str(e["path"], where + ".path", empty=False), sha256=sha,
                               relative=None if rel is None else _str(rel, where + ".relative", empty=False)))
    if not images:
        raise _Bad("images is empty: a session shows at least one image")
    current = _int(d["current"], "current", 0, len(images) - 1)
    target = d.get("target")
    target = None if target is None else _int(target, "target", 0)
    target_label = _str(d.get("target_label", ""), "target_label")
    options = _options(d["options"])
    win = _obj(d.get("window", {}), "window", ("heads_all_layers",))
    heads_all = _bool(win.get("heads_all_layers", False), "window.heads_all_layers")
    compare = _compare(d.get("compare"), [i.path for i in images])
    return SessionState(model=ref, images=tuple(images), current=current, options=options, target=target,
                        target_label=target_label, model_name=model_name, device=device, precision=precision,
                        model_relative=model_relative, preprocess=preprocess, heads_all_layers=heads_all,
                        compare=compare,
                        written_by=written_by, origin=origin)


def _preprocess(v: Any, where: str) -> Preprocess:
    from vitviz.model.preprocess import Preprocess

    d = _obj(v, where, ("resize", "crop", "interpolation", "mean", "std"), ("resize", "crop", "mean", "std"))
    side = lambda x, n: _int(x, n, 1, 16384)
    r = d["resize"]
    resize: Any = side(r, where + ".resize") if not isinstance(r, list) else \
        tuple(side(x, f"{where}.resize[{i}]") for i, x in enumerate(_pair(r, where + ".resize")))
    crop = tuple(side(x, f"{where}.crop[{i}]") for i, x in enumerate(_pair(d["crop"], where + ".crop")))
    interp = _choice(d.get("interpolation", "bicubic"), where + ".interpolation",
                     ("nearest", "bilinear", "bicubic", "lanczos"))
    mean = tuple(_float(x, f"{where}.mean[{i}]", -1e6, 1e6) for i, x in enumerate(_list(d["mean"], where + ".mean", 4)))
    std = tuple(_float(x, f"{where}.std[{i}]", 1e-12, 1e6) for i, x in enumerate(_list(d["std"], where + ".std", 4)))
    if not mean or len(mean) != len(std):
        raise _Bad(f"{where}: mean and std must have the same number of channels (1 to 4)")
    return Preprocess(resize=resize, crop=crop, interpolation=interp, mean=mean, std=std)


def _pair(v: Any, where: str) -> list[Any]:
    lst = _list(v, where, 2)
    if len(lst) != 2:
        raise _Bad(f"{where} must be [height, width]")
    return lst


def with_preprocess(model: Any, state: SessionState) -> str | None:
    """Give a reopened ``model`` the state's preprocessing when its own differs; returns a note saying so."""
    spec = getattr(model, "spec", None)
    p = state.preprocess
    if p is None or spec is None or spec.preprocess == p:
        return None
    model.spec = spec.replace(preprocess=p)
    return "the model prepares images as when the session was saved (its file says otherwise)"


def _compare(v: Any, paths: list[str]) -> CompareSpec | None:
    if v is None:
        return None
    from vitviz.document.comparison import LAYOUTS, CompareSpec

    c = _obj(v, "compare", ("layout", "views", "images", "layers", "classes", "shared_scale"), ("layout",))
    layout = _choice(c["layout"], "compare.layout", LAYOUTS)
    views = tuple(_view_key(x, f"compare.views[{i}]") for i, x in enumerate(_list(c.get("views", []),
                                                                                   "compare.views", 64)))
    rows = [_int(x, f"compare.images[{i}]", 0, len(paths) - 1)
            for i, x in enumerate(_list(c.get("images", []), "compare.images", 64))]
    layers = tuple(_int(x, f"compare.layers[{i}]", -1) for i, x in enumerate(_list(c.get("layers", []),
                                                                                    "compare.layers", 256)))
    classes = tuple(_int(x, f"compare.classes[{i}]", 0) for i, x in enumerate(_list(c.get("classes", []),
                                                                                    "compare.classes", 64)))
    shared = _bool(c.get("shared_scale", True), "compare.shared_scale")
    try:
        return CompareSpec(layout=layout, views=views, images=tuple(paths[i] for i in rows), layers=layers,
                           classes=classes, shared_scale=shared)
    except ValueError as e:
        raise _Bad(f"compare: {e}") from None


# ----------------------------------------------------------------------------------------------- finding the files
def locate(state: SessionState, *, current_model: str | None = None, check_model: bool = True) -> SessionState:
    """``state`` with every file found: each image (and a ``file:`` checkpoint) at its saved absolute path, else
    at its ``relative`` path from the folder of the file the state was read from.

    Args:
        current_model: the reference of the model the caller has loaded: a state naming it needs no reopening
            (never true of ``"memory"``: vitviz cannot tell two models handed over by scripts apart).
        check_model: False: the caller brings its own model; only the images are looked for.

    Raises:
        StateError: naming the state's file and everything that is missing: images that are not files (or a
            pasted image), a checkpoint that does not exist, a model given by a script, an unknown name.
    """
    base = Path(state.origin).resolve().parent if state.origin else None
    problems: list[str] = []
    found: dict[str, str] = {}  # saved path -> where it is

    def find(path: str, relative: str | None) -> str | None:
        if os.path.isabs(path) and os.path.isfile(path):
            return path
        if relative and base is not None:
            cand = base / relative
            if cand.is_file():
                return str(cand.resolve())
        return None

    images = []
    for ref in state.images:
        where = find(ref.path, ref.relative)
        if where is None:
            if not os.path.isabs(ref.path):
                problems.append(f"the image {ref.path!r} was not a file (it was pasted or dropped as pixels), "
                                f"so it cannot be opened again")
            elif os.path.exists(ref.path):
                problems.append(f"the image {ref.path} is not a regular file")
            else:
                extra = f" (nor {base / ref.relative})" if ref.relative and base is not None else ""
                problems.append(f"the image {ref.path} does not exist{extra}")
            images.append(ref)
        else:
            found[ref.path] = where
            images.append(replace(ref, path=where))
    model = state.model
    if not check_model or (model == current_model and model != IN_MEMORY_MODEL):
        pass
    elif model == IN_MEMORY_MODEL:
        name = f" ({state.model_name})" if state.model_name else ""
        problems.append(f"its model{name} was handed to vitviz by a script, not opened from a file or by name, so "
                        f"it cannot be reopened; open that model, then the images")
    elif model.startswith("file:"):
        ckpt = model[5:]
        if not os.path.exists(ckpt):
            alt = base / state.model_relative if state.model_relative and base is not None else None
            if alt is not None and alt.exists():
                model = f"file:{alt.resolve()}"
            else:
                extra = f" (nor {alt})" if alt is not None else ""
                problems.append(f"the model checkpoint {ckpt} does not exist{extra}")
    elif model != "demo":  # a name: known here? (no network; the download is asked for when it is opened)
        try:
            from vitviz.model.sources.refs import parse_model_ref

            parse_model_ref(model)
        except Exception as e:  # noqa: BLE001 - CheckpointError naming the known names
            problems.append(f"unknown model: {e}")
    if problems:
        lead = "cannot be opened: " if len(problems) == 1 else "cannot be opened:\n- "
        raise StateError(state.origin or None, lead + "\n- ".join(problems))
    compare = state.compare
    if compare is not None:
        compare = replace(compare, images=tuple(found.get(p, p) for p in compare.images))
    return replace(state, images=tuple(images), model=model, compare=compare)


def changed_images(state: SessionState, which: list[int] | None = None) -> list[str]:
    """Paths of the images (all, or the indices ``which``) whose bytes differ from the SHA-256 the state recorded."""
    out = []
    for i, ref in enumerate(state.images):
        if which is not None and i not in which:
            continue
        if ref.sha256 and os.path.isfile(ref.path) and file_sha256(ref.path) != ref.sha256:
            out.append(ref.path)
    return out


# ----------------------------------------------------------------------------------------------- reopening
def apply_state(state: SessionState, session: Session, result: InferenceResult) -> None:
    """Make ``session`` show ``state`` with ``result`` (the state's image through its model and target): the image
    list, the options (clamped to the model like any option the window sets) and the result."""
    session.images = list(state.paths)
    session.options = state.options
    session.set_result(result)


def reproduce(state: SessionState, *, pipeline: Pipeline | None = None, device: str = "cpu",
              precision: str | None = None) -> tuple[Session, Pipeline]:
    """Rebuild the session ``state`` describes, headlessly: open its model (unless ``pipeline`` is given), run its
    image with its target, set its options.

    Args:
        pipeline: a loaded model to use instead of opening ``state.model``.
        device, precision: where to run an opened model (default precision: the state's when available).

    Returns:
        ``(session, pipeline)``.

    Raises:
        StateError: a file is missing (:func:`locate`); CheckpointError, ImageError ...: the model or the image
            cannot be read.
    """
    from vitviz.devices import available_precisions
    from vitviz.imaging import load_image
    from vitviz.model.sources.refs import open_model
    from vitviz.pipeline import Pipeline
    from vitviz.document.session import Session

    state = locate(state, check_model=pipeline is None)
    if pipeline is None:
        model, _ = open_model(state.model, show_bar=False)
        with_preprocess(model, state)
        prec = precision or (state.precision if state.precision in available_precisions(device) else "fp32")
        pipeline = Pipeline(model, device=device, precision=prec)
    result = pipeline.run(load_image(state.image.path), source=state.image.path, target=state.target)
    session = Session()
    apply_state(state, session, result)
    return session, pipeline

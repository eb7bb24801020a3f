"""Reading a session: from a session file or an exported figure's metadata (:func:`read_state`), from JSON text
(:func:`parse_state`) or a parsed object (:func:`from_dict`), every field checked, strictly and within bounds (see
:mod:`vitviz.document.state`). The options are read from the option table (:mod:`vitviz.views.options`): each row
by its kind, range and choices. No Qt, no torch.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitviz._util.json_scan import without_strings
from vitviz.document.comparison import LAYOUTS, CompareSpec
from vitviz.document.state.json_checks import (
    FieldProblem,
    boolean,
    choice,
    depth,
    integer,
    json_list,
    json_object,
    number,
    text,
    type_name,
    view_key,
)
from vitviz.document.state.schema import (
    FORMAT,
    IN_MEMORY_MODEL,
    MAX_BYTES,
    MAX_CONTAINERS,
    MAX_DEPTH,
    MAX_FIGURE_BYTES,
    MAX_IMAGES,
    MAX_INDEX,
    MAX_NUMBER_CHARS,
    MAX_VALUES,
    METADATA_KEY,
    VERSION,
    ImageRef,
    SessionState,
    StateError,
    size_text,
)
from vitviz.document.target_choice import TargetChoice
from vitviz.imaging import RESAMPLING
from vitviz.render.figures.embedded_text import PNG_SIGNATURE
from vitviz.render.figures.metadata import MetadataError, is_svg, read_metadata
from vitviz.views.options import Option, ViewOptions, all_options

MAX_PROMPTS = 1000  # prompts a session may carry

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.model.preprocess import Preprocess

__all__ = ["from_dict", "parse_state", "read_options", "read_state"]

_MODEL_REF = re.compile(r"[a-z][a-z0-9_-]*:.+", re.DOTALL)  # KIND:VALUE (vitviz.model.sources.refs: file, hub ...)
PREPROCESS_INTERPOLATIONS = tuple(RESAMPLING)  # vitviz.model.preprocess.Interpolation
_DEEP = re.compile(r"[\[{](?:\s*[\[{]){%d}" % MAX_DEPTH)  # more openings in a row than a session nests


def read_state(path: str | os.PathLike) -> SessionState:
    """The state in a session file (``.vitviz.json``) or in a figure vitviz exported (PNG, APNG, SVG, PDF, GIF, MP4).

    Bounded in time and memory: a session file is read only up to :data:`MAX_BYTES`; of a figure only its metadata
    is read (:func:`vitviz.render.figures.read_metadata`: its pixels are never decoded).

    Raises:
        StateError: naming the file and the problem (missing, too large, not JSON, a figure without a session,
            a damaged or cut-short figure, a wrong field ...); it is the only error. Nothing is opened.
    """
    p = Path(path)
    try:
        return _read_state(p)
    except StateError:
        raise
    except MemoryError:
        raise StateError(p, "not enough memory to read it") from None
    except OSError as e:
        raise StateError(p, f"cannot read file ({e.strerror or e})") from None


def _read_state(p: Path) -> SessionState:
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise StateError(p, "file does not exist") from None
    if stat.S_ISDIR(st.st_mode):
        raise StateError(p, "is a folder, not a session file")
    if not stat.S_ISREG(st.st_mode):
        raise StateError(p, "is not a regular file")
    with open(p, "rb") as fh:
        head = fh.read(4096)
    if _is_figure(head, p):
        if st.st_size > MAX_FIGURE_BYTES:
            raise StateError(p, f"is {st.st_size / 2**30:.1f} GiB; figures over {MAX_FIGURE_BYTES >> 30} GiB "
                                f"are not read")
        try:
            meta = read_metadata(p, max_bytes=MAX_BYTES)
        except MetadataError as e:
            raise StateError(p, e.problem) from None
        text = meta.get(METADATA_KEY)
        if text is None:
            raise StateError(p, "this figure carries no vitviz session (it was exported by an older vitviz or "
                                "by another program); only figures exported by vitviz can be reopened")
        if len(text.encode("utf-8")) > MAX_BYTES:
            raise StateError(p, f"its session is over {size_text(MAX_BYTES)}")
        return parse_state(text, p)
    if st.st_size > MAX_BYTES:
        raise StateError(p, f"is {size_text(st.st_size)}; a session file is at most {size_text(MAX_BYTES)} "
                            f"(is this a session file?)")
    with open(p, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:  # it grew since
        raise StateError(p, f"is over {size_text(MAX_BYTES)}; a session file is at most {size_text(MAX_BYTES)}")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) and data[:8].decode("utf-16", "replace").lstrip()[:1] == "{":
        raise StateError(p, "not a session file: UTF-16 text (a session file is UTF-8)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise StateError(p, f"not a session file: not UTF-8 text (byte {e.start:,})") from None
    return parse_state(text, p)


def _is_figure(head: bytes, p: Path) -> bool:
    if head.startswith((PNG_SIGNATURE, b"%PDF", b"GIF8")) or head[4:8] == b"ftyp" or is_svg(head):
        return True
    return p.suffix.lower() == ".svg"


class _LongNumber:
    """A number token over :data:`MAX_NUMBER_CHARS` characters, kept unconverted (found and named after parsing)."""

    def __init__(self, token: str):
        self.length = len(token)


def _long_number_at(obj: Any) -> tuple[str, int] | None:
    """Where the first over-long number lies ("options.layer", "images[3].path") and its length."""
    stack: list[tuple[Any, str]] = [(obj, "")]
    while stack:
        o, where = stack.pop()
        if isinstance(o, _LongNumber):
            return where or "the file", o.length
        if isinstance(o, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in reversed(o.items()))
        elif isinstance(o, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(o))))
    return None


def parse_state(text: str, source: str | os.PathLike | None = None) -> SessionState:
    """The state in the JSON ``text`` (``source``: the file it came from, for messages and relative paths).

    Before parsing, the text's size and how many lists, objects and values it holds are checked (linear scans),
    so a hostile text cannot make the parser build millions of them; numbers longer than
    :data:`MAX_NUMBER_CHARS` characters are refused before they are converted.

    Raises:
        StateError: naming ``source``, the field and the problem.
    """
    if len(text) > MAX_BYTES:
        raise StateError(source, f"over {size_text(MAX_BYTES)} of text; a session is at most {size_text(MAX_BYTES)}")
    skeleton = without_strings(text)
    if _DEEP.search(skeleton):
        raise StateError(source, "not a valid session: nested too deeply")
    containers = skeleton.count("{") + skeleton.count("[")
    if containers > MAX_CONTAINERS:
        raise StateError(source, f"not a valid session: it holds {containers:,} lists and objects (a session holds "
                                 f"at most {MAX_CONTAINERS:,}: one per image and a few)")
    values = skeleton.count(",") + 1
    if values > MAX_VALUES:
        raise StateError(source, f"not a valid session: it holds {values:,} values (a session holds at most "
                                 f"{MAX_VALUES:,})")
    del skeleton
    long_numbers: list[_LongNumber] = []

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise FieldProblem(f"the key {k!r} appears twice in one object")
            out[k] = v
        return out

    def no_constants(name: str) -> Any:
        raise FieldProblem(f"{name} is not a number a session can hold")

    def number(convert):
        def parse(token: str) -> Any:
            if len(token) > MAX_NUMBER_CHARS:
                long_numbers.append(_LongNumber(token))
                return long_numbers[-1]
            return convert(token)
        return parse

    try:
        obj = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constants,
                         parse_int=number(int), parse_float=number(float))
    except FieldProblem as e:
        raise StateError(source, f"not a valid session: {e}") from None
    except RecursionError:
        raise StateError(source, "not a valid session: nested too deeply") from None
    except json.JSONDecodeError as e:
        raise StateError(source, f"not a session file: not valid JSON (line {e.lineno}, column {e.colno}: "
                                 f"{e.msg})") from None
    if long_numbers:
        where, length = _long_number_at(obj) or ("a value", long_numbers[0].length)
        raise StateError(source, f"{where}: number too long ({length:,} characters; a session's numbers have at "
                                 f"most {MAX_NUMBER_CHARS})")
    if depth(obj) > MAX_DEPTH:
        raise StateError(source, "not a valid session: nested too deeply")
    return from_dict(obj, source)


def read_options(v: Any) -> ViewOptions:
    """Every option of the table (:mod:`vitviz.views.options`), each checked by its kind and range; missing ones
    take their defaults."""
    rows = {row.name: row for row in all_options()}
    d = json_object(v, "options", tuple(rows))
    o = replace(ViewOptions(), **{k: _option_value(rows[k], val, "options." + k) for k, val in d.items()})
    if o.scale == "fixed" and o.fixed_range is None:
        raise FieldProblem("options.scale is 'fixed' but options.fixed_range is null")
    if o.fixed_range is not None and o.log_scale and o.fixed_range[0] <= 0:
        raise FieldProblem("options.fixed_range must be positive with options.log_scale")
    return o


def _option_value(row: Option, x: Any, where: str) -> Any:
    lo, hi = row.range
    if row.kind == "view":
        return view_key(x, where)
    if row.kind == "int" or (row.kind == "head" and isinstance(x, int) and not isinstance(x, bool)):
        return integer(x, where, -MAX_INDEX if lo is None else int(lo), MAX_INDEX if hi is None else int(hi))
    if row.kind in ("choice", "head") and isinstance(x, str):
        return choice(x, where, row.choices)
    if row.kind == "head":
        raise FieldProblem(f"{where} must be a head index or one of {', '.join(map(repr, row.choices))}, "
                           f"not {type_name(x)}")
    if row.kind == "choice":
        return choice(x, where, row.choices)  # says what x is
    if row.kind == "float":
        return number(x, where, -1e300 if lo is None else lo, 1e300 if hi is None else hi)
    if row.kind == "bool":
        return boolean(x, where)
    if row.kind == "range":
        return _fixed_range(x, where)
    raise RuntimeError(f"vitviz.document.state cannot read options of kind {row.kind!r} ({row.name})")


def _fixed_range(v: Any, where: str) -> tuple[float, float] | None:
    if v is None:
        return None
    lst = json_list(v, where, 2)
    if len(lst) != 2:
        raise FieldProblem(f"{where} must be [low, high] or null")
    lo, hi = number(lst[0], where + "[0]"), number(lst[1], where + "[1]")
    if not lo < hi:
        raise FieldProblem(f"{where} is [{lo:g}, {hi:g}]; low must be below high")
    return (lo, hi)


def _model_ref(v: Any, where: str) -> str:
    s = text(v, where, empty=False)
    if s not in ("demo", IN_MEMORY_MODEL) and not _MODEL_REF.fullmatch(s):
        raise FieldProblem(f"{where} is {s!r}; a model reference is demo or KIND:NAME (file:PATH, pretrained:NAME, "
                           f"hub:OWNER/NAME, random:NAME)")
    return s


def from_dict(d: Any, source: str | os.PathLike | None = None) -> SessionState:
    """The :class:`SessionState` of a parsed JSON object, every field checked.

    Raises:
        StateError: naming ``source``, the field and the problem.
    """
    try:
        return _from_dict(d, "" if source is None else str(source))
    except FieldProblem as e:
        raise StateError(source, f"not a valid session: {e}") from None


def _from_dict(d: Any, origin: str) -> SessionState:
    if not isinstance(d, dict):
        raise FieldProblem(f"the file must hold a JSON object, not {type_name(d)}")
    if d.get("format") != FORMAT:
        raise FieldProblem(f"'format' must be {FORMAT!r} (is this a vitviz session?)")
    version = d.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise FieldProblem(f"it was written by a newer vitviz (session version {version}; this vitviz reads "
                           f"version {VERSION}); update vitviz to open it")
    integer(version, "version", 1, VERSION)
    top = ("format", "version", "written_by", "model", "images", "current", "target", "target_label", "options",
           "window", "compare", "prompts")
    json_object(d, "the session", top, ("model", "images", "current", "options"))
    written_by = text(d.get("written_by", ""), "written_by")
    m = json_object(d["model"], "model", ("ref", "relative", "name", "device", "precision", "preprocess"), ("ref",))
    ref = _model_ref(m["ref"], "model.ref")
    rel = m.get("relative")
    model_relative = None if rel is None else text(rel, "model.relative", empty=False)
    model_name = text(m.get("name", ""), "model.name")
    device = text(m.get("device", "cpu"), "model.device")
    precision = text(m.get("precision", "fp32"), "model.precision")
    preprocess = None if m.get("preprocess") is None else _preprocess(m["preprocess"], "model.preprocess")
    images = []
    for i, e in enumerate(json_list(d["images"], "images", MAX_IMAGES)):
        where = f"images[{i}]"
        e = json_object(e, where, ("path", "relative", "sha256"), ("path",))
        sha = e.get("sha256")
        if sha is not None:
            sha = text(sha, where + ".sha256")
            if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
                raise FieldProblem(f"{where}.sha256 is not a SHA-256 digest (64 lower-case hex digits)")
        rel = e.get("relative")
        images.append(ImageRef(path=text(e["path"], where + ".path", empty=False), sha256=sha,
                               relative=None if rel is None else text(rel, where + ".relative", empty=False)))
    if not images:
        raise FieldProblem("images is empty: a session shows at least one image")
    current = integer(d["current"], "current", 0, len(images) - 1)
    target, target_choice, target_relative = _target(d.get("target"))
    prompts = _prompts(d.get("prompts"))
    if target is not None and prompts and target >= len(prompts):
        raise FieldProblem(f"target is {target} but there are {len(prompts)} prompts (it indexes them)")
    if target_choice is not None and prompts:
        raise FieldProblem("target: with prompts the target is a prompt's index (or null), not an object")
    target_label = text(d.get("target_label", ""), "target_label")
    options = read_options(d["options"])
    win = json_object(d.get("window", {}), "window", ("heads_all_layers",))
    heads_all = boolean(win.get("heads_all_layers", False), "window.heads_all_layers")
    compare = _compare(d.get("compare"), [i.path for i in images])
    return SessionState(model=ref, images=tuple(images), current=current, options=options, target=target,
                        target_label=target_label, target_choice=target_choice, target_relative=target_relative,
                        prompts=prompts,
                        model_name=model_name, device=device, precision=precision, model_relative=model_relative,
                        preprocess=preprocess, heads_all_layers=heads_all, compare=compare, written_by=written_by,
                        origin=origin)


def _prompts(v: Any) -> tuple[str, ...]:
    """The ``prompts`` field: absent or null (none), or a list of non-empty prompts without ';'."""
    if v is None:
        return ()
    out = []
    for i, p in enumerate(json_list(v, "prompts", MAX_PROMPTS)):
        p = text(p, f"prompts[{i}]", empty=False)
        if not p.strip() or ";" in p or p != p.strip():
            raise FieldProblem(f"prompts[{i}] is {p[:40]!r}: a prompt is a phrase without ';' or outer spaces")
        out.append(p)
    if not out:
        raise FieldProblem("prompts is empty: leave it out for a session without prompts")
    return tuple(out)


def _target(v: Any) -> tuple[int | None, TargetChoice | None, str | None]:
    """``(class, choice, relative)`` of the ``target`` field: null (the top class), a class index, or an object
    naming a target that is not a class (:func:`vitviz.document.state.writer.target_dict`)."""
    if v is None:
        return None, None, None
    if not isinstance(v, dict):
        if isinstance(v, bool) or not isinstance(v, int):
            raise FieldProblem(f"target must be a class index, null or an object naming a similarity target, not "
                               f"{type_name(v)}")
        return integer(v, "target", 0), None, None
    d = json_object(v, "target", ("kind", "path", "relative", "patch", "name"), ("kind",))
    kind = choice(d["kind"], "target.kind", ("image", "patch", "vector", "text", "callable", "named"))
    if kind in ("text", "callable", "named"):
        what = {"text": "prompt", "callable": "function", "named": "named target"}[kind]
        if "path" in d or "patch" in d:
            raise FieldProblem(f"target: a {what} has a name, not a path or a patch")
        name = text(d.get("name", ""), "target.name", empty=kind != "text")
        return None, TargetChoice(kind, name=name), None
    if "path" not in d:
        raise FieldProblem(f"target lacks 'path' (the {'vector' if kind == 'vector' else 'reference image'})")
    path = text(d["path"], "target.path", empty=False)
    rel = d.get("relative")
    rel = None if rel is None else text(rel, "target.relative", empty=False)
    patch = None
    if kind == "patch":
        if "patch" not in d:
            raise FieldProblem("target lacks 'patch' ([row, col] of the reference image's patch)")
        lst = json_list(d["patch"], "target.patch", 2)
        if len(lst) != 2:
            raise FieldProblem("target.patch must be [row, col]")
        patch = (integer(lst[0], "target.patch[0]", 0), integer(lst[1], "target.patch[1]", 0))
    elif "patch" in d:
        raise FieldProblem(f"target: a {kind} target has no patch")
    if kind == "vector" and not path.lower().endswith(".npy"):
        raise FieldProblem(f"target.path is {path!r}; a stored vector is an .npy file")
    return None, TargetChoice(kind, path=path, patch=patch), rel


def _preprocess(v: Any, where: str) -> Preprocess:
    from vitviz.model.preprocess import Preprocess

    d = json_object(v, where, ("resize", "crop", "interpolation", "mean", "std", "max_num_patches", "patch_size"),
                    ("resize", "crop", "mean", "std"))

    def side(x: Any, n: str) -> int:
        return integer(x, n, 1, 16384)

    r = d["resize"]
    resize: Any = side(r, where + ".resize") if not isinstance(r, list) else \
        tuple(side(x, f"{where}.resize[{i}]") for i, x in enumerate(_pair(r, where + ".resize")))
    crop = tuple(side(x, f"{where}.crop[{i}]") for i, x in enumerate(_pair(d["crop"], where + ".crop")))
    interp = choice(d.get("interpolation", "bicubic"), where + ".interpolation", PREPROCESS_INTERPOLATIONS)
    mean = tuple(number(x, f"{where}.mean[{i}]", -1e6, 1e6)
                 for i, x in enumerate(json_list(d["mean"], where + ".mean", 4)))
    std = tuple(number(x, f"{where}.std[{i}]", 1e-12, 1e6)
                for i, x in enumerate(json_list(d["std"], where + ".std", 4)))
    if not mean or len(mean) != len(std):
        raise FieldProblem(f"{where}: mean and std must have the same number of channels (1 to 4)")
    naflex = {k: integer(d[k], f"{where}.{k}", 0 if k == "max_num_patches" else 1, 1 << 20)
              for k in ("max_num_patches", "patch_size") if k in d}
    return Preprocess(resize=resize, crop=crop, interpolation=interp, mean=mean, std=std, **naflex)


def _pair(v: Any, where: str) -> list[Any]:
    lst = json_list(v, where, 2)
    if len(lst) != 2:
        raise FieldProblem(f"{where} must be [height, width]")
    return lst


def _compare(v: Any, paths: list[str]) -> CompareSpec | None:
    if v is None:
        return None
    c = json_object(v, "compare", ("layout", "views", "images", "layers", "classes", "shared_scale"), ("layout",))
    layout = choice(c["layout"], "compare.layout", LAYOUTS)
    views = tuple(view_key(x, f"compare.views[{i}]")
                  for i, x in enumerate(json_list(c.get("views", []), "compare.views", 64)))
    rows = [integer(x, f"compare.images[{i}]", 0, len(paths) - 1)
            for i, x in enumerate(json_list(c.get("images", []), "compare.images", 64))]
    layers = tuple(integer(x, f"compare.layers[{i}]", -1)
                   for i, x in enumerate(json_list(c.get("layers", []), "compare.layers", 256)))
    classes = tuple(integer(x, f"compare.classes[{i}]", 0)
                    for i, x in enumerate(json_list(c.get("classes", []), "compare.classes", 64)))
    shared = boolean(c.get("shared_scale", True), "compare.shared_scale")
    try:
        return CompareSpec(layout=layout, views=views, images=tuple(paths[i] for i in rows), layers=layers,
                           classes=classes, shared_scale=shared)
    except ValueError as e:
        raise FieldProblem(f"compare: {e}") from None


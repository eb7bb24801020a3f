"""Every option of what the user looks at, declared once: the option table, and :class:`ViewOptions` built from it.

A row (:class:`Option`) names an option, its kind, its default, and its choices or range. Everything else follows
from the table:

* :class:`ViewOptions` has one field per row, in table order, with the row's default;
* the session's checks (:func:`checked`): a choice outside the row's choices is refused, a number is clamped to the
  row's range and, once an image is shown, to what the model has (layers, heads, patches);
* the session file (:mod:`vitviz.document.state`) writes every row and reads each one back checked by its kind;
* the window's remembered settings (rows with a ``setting`` key, read back with :func:`parse`);
* the export command's display flags (:func:`cli_flags`);
* the options a view may read (:func:`readable_options`: the rows marked ``analysis``, and ``"target"``).

A new display option is one row in :data:`BUILTIN_OPTIONS` plus its drawing. A plug-in (or a test) adds one at run
time with :func:`register_option` and removes it with :func:`unregister_option`; :class:`ViewOptions` gains (or
loses) the field in place, and an options object made before the row was added reads the row's default.

No Qt, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from vitviz.analysis.choices import FUSIONS, UPSAMPLE_MODES
from vitviz.render.colormaps import COLORMAPS, DEFAULT_COLORMAP
from vitviz.render.figures.specification import MASK_STYLES  # how render draws a mask

__all__ = ["BUILTIN_OPTIONS", "HEAD_REDUCTIONS", "INTERPOLATIONS", "KINDS", "MASK_STYLES", "SCALE_MODES", "Flag",
           "Option", "ViewOptions", "all_options", "check_value", "checked", "cli_flags", "option", "parse",
           "readable_options", "register_option", "unregister_option"]

Kind = Literal["view", "int", "head", "choice", "float", "bool", "range"]
KINDS: tuple[str, ...] = ("view", "int", "head", "choice", "float", "bool", "range")
"""What an option's value is: ``view`` a key of the view registry (:func:`vitviz.views.get` checks it); ``int`` /
``float`` a number in the row's range; ``head`` a head index or one of the row's choices (a reduction over heads);
``choice`` one of the row's choices; ``bool``; ``range`` an optional ``(low, high)`` pair of numbers."""

HEAD_REDUCTIONS: tuple[str, ...] = FUSIONS  # a head index, or the heads reduced as the analyses fuse them
INTERPOLATIONS: tuple[str, ...] = UPSAMPLE_MODES
SCALE_MODES: tuple[str, ...] = ("robust", "per_map", "layers", "heads", "fixed")  # vitviz.render.scales.scale_for

_TYPES: dict[str, Any] = {"view": str, "int": int, "head": int | str, "choice": str, "float": float, "bool": bool,
                          "range": tuple[float, float] | None}


@dataclass(frozen=True)
class Option:
    """One row of the option table.

    Attributes:
        name: the :class:`ViewOptions` field (and the key in session files).
        kind: see :data:`KINDS`.
        default: the value of a new session.
        choices: the valid values of a ``choice`` option (the reductions of a ``head`` option).
        range: ``(low, high)`` of an ``int`` / ``float`` option (or of a ``head`` option's index), inclusive; None:
            open on that side. The session clamps into it; a session file outside it is refused.
        limits: ``(result, view) -> (low, high)``: the bounds the shown model sets (an ``int`` / ``head`` option);
            the session clamps into them once there is a result.
        label: the option in words ("Colormap"), for the window and messages.
        labels: the choices in words for the window, in the order of ``choices``.
        help: what it does, one line.
        analysis: a view may read it (:attr:`vitviz.views.View.reads`): the map depends on it and is cached by it.
        flag: the help of its ``vitviz export`` flag (:func:`cli_flags`); empty: no flag.
        setting: the key under which the window remembers it between runs (None: not remembered).
        from_end: a negative value counts from the end of its limits (``-1``: the last layer), resolved to that
            layer by :func:`checked` once a result says how many there are.
    """

    name: str
    kind: Kind
    default: Any
    choices: tuple[str, ...] = ()
    range: tuple[float | None, float | None] = (None, None)
    limits: Callable[[Any, Any], tuple[int, int]] | None = field(default=None, compare=False)
    label: str = ""
    labels: tuple[str, ...] = ()
    help: str = ""
    analysis: bool = False
    flag: str = ""
    setting: str | None = None
    from_end: bool = False

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name.startswith("_"):
            raise ValueError(f"an option's name must be a public Python identifier, got {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind in ("choice", "head") and not self.choices:
            raise ValueError(f"option {self.name!r} of kind {self.kind!r} needs its choices")
        if self.labels and len(self.labels) != len(self.choices):
            raise ValueError(f"option {self.name!r}: {len(self.labels)} labels for {len(self.choices)} choices")
        if check_value(self, self.default) != self.default:  # a choice raises; a number must lie in the range
            raise ValueError(f"option {self.name!r}: the default {self.default!r} lies outside {self.range}")

    @property
    def type(self) -> Any:
        """The Python type of the value (the :class:`ViewOptions` field's annotation)."""
        return _TYPES[self.kind]

    def labelled(self) -> tuple[tuple[str, str], ...]:
        """``(choice, words)`` pairs for a menu (the choice itself where the row has no words for it)."""
        return tuple(zip(self.choices, self.labels or self.choices))


def check_value(row: Option, value: Any) -> Any:
    """``value`` as a value of ``row``: a choice checked (ValueError naming the option), a number clamped to the
    row's range; a ``view`` key is not checked here (:func:`vitviz.views.get` knows the views)."""
    if row.kind == "choice" and value not in row.choices:
        raise ValueError(f"{row.name} must be {_one_of(row.choices)}, got {value!r}")
    if row.kind == "head" and not (isinstance(value, int) or value in row.choices):
        raise ValueError(f"{row.name} must be an index or one of {row.choices}, got {value!r}")
    if row.kind == "int" or (row.kind == "head" and isinstance(value, int)):
        return _clamp(int(value), row.range)
    if row.kind == "float":
        return float(_clamp(value, row.range))
    return value


def _one_of(choices: tuple[str, ...]) -> str:
    return " or ".join(map(repr, choices)) if len(choices) == 2 else f"one of {choices}"


def _clamp(v: Any, bounds: tuple[float | None, float | None]) -> Any:
    lo, hi = bounds
    if lo is not None:
        v = max(v, lo)
    if hi is not None:
        v = min(v, hi)
    return v


# ----------------------------------------------------------------------------------------------- the table
BUILTIN_OPTIONS: tuple[Option, ...] = (
    Option("view", "view", "cls", label="View", help="what the canvas shows (a key of vitviz.views)",
           setting="view"),
    Option("layer", "int", 0, limits=lambda r, v: v.layer_range(r), label="Layer", analysis=True,
           help="the layer of the views that have one (-1: the embeddings, in the views over tokens)"),
    Option("head", "head", "mean", choices=HEAD_REDUCTIONS, range=(0, None), label="Head", analysis=True,
           limits=lambda r, _v: (0, r.num_heads - 1), help="a head index, or the mean, max or min of the heads"),
    Option("query", "int", 0, range=(0, None), limits=lambda r, _v: (0, r.num_patches - 1), label="Query patch",
           analysis=True, help="patch index in row-major order (0 .. gh*gw-1), prefix tokens not counted"),
    Option("head_fusion", "choice", "mean", choices=HEAD_REDUCTIONS, label="Head fusion", analysis=True,
           help="how the heads of a layer are fused (attention rollout)"),
    Option("discard_ratio", "float", 0.0, range=(0.0, 0.99), label="Discard ratio", analysis=True,
           help="fraction of the lowest patch attentions discarded per row (attention rollout)"),
    Option("start_layer", "int", 0, range=(0, None), limits=lambda r, _v: (0, r.num_layers - 1),
           label="Start layer", analysis=True, help="the first layer of the cumulative views"),
    Option("cmap", "choice", DEFAULT_COLORMAP, choices=tuple(COLORMAPS), label="Colormap", setting="colormap",
           help="the colours of the map", flag=f"colormap (default {DEFAULT_COLORMAP})"),
    Option("opacity", "float", 0.6, range=(0.0, 1.0), label="Opacity", setting="opacity",
           help="of the map over the photo"),
    Option("interpolation", "choice", "nearest", choices=INTERPOLATIONS, label="Interpolation",
           labels=("Patches (nearest)", "Smooth (bilinear)"), setting="interpolation",
           help="the map drawn as patches or smoothly"),
    Option("colorbar", "bool", True, label="Colour bar in exports", help="exported figures have the colour bar",
           flag="PNG without the colour bar"),
    Option("caption", "bool", True, label="Caption in exports", help="exported figures have a title and caption",
           flag="PNG without title and caption"),
    # artefact tokens (high-norm patches, Darcet et al. 2023)
    Option("ignore_artefacts", "bool", False, label="Ignore them in attention (renormalise)",
           help="drop their key columns from every attention layer (renormalised rows)"),
    Option("scale_excludes_artefacts", "bool", True, label="Leave them out of the colour scale",
           help="the colour scale is computed without them (they are still drawn)"),
    # the colour scale: see vitviz.render.scales.scale_for
    Option("scale", "choice", "robust", choices=SCALE_MODES, label="Scale",
           labels=("Robust (percentile clip)", "This map's min–max", "Shared across layers", "Shared across heads",
                   "Fixed range"), help="how the colours map to values"),
    Option("percentile", "float", 99.5, range=(50.0, 100.0), label="Percentile",
           help="the robust scale's top (values above take the top colour)"),
    Option("log_scale", "bool", False, label="Log scale", help="colours follow log10 of the values"),
    Option("fixed_range", "range", None, label="Range", help="(low, high) of the fixed scale"),
    # "keep the top p of the mass" mask (DINO's visualisation); 0 = no mask
    Option("mask_keep", "float", 0.0, range=(0.0, 1.0), label="Keep the top",
           help="the share of the map's mass the mask keeps (0: no mask)"),
    Option("mask_style", "choice", "contour", choices=MASK_STYLES, label="Draw as", labels=("Outline", "Dim the rest"),
           help="the mask drawn as its outline or by dimming the rest"),
    # LeGrad (Bousselham et al. 2025) and GradCAM (Selvaraju et al. 2017): their layers count from the end by default
    Option("legrad_start", "int", -2, limits=lambda r, _v: (0, r.num_layers - 1), label="Start layer", analysis=True,
           from_end=True, help="LeGrad: the first layer summed (negative: from the end; -2, the last two layers, is "
           "the official default)"),
    Option("legrad_pooling", "choice", "mean", choices=("mean", "model"), label="LeGrad pooling", analysis=True,
           labels=("Mean of all tokens", "Model's own"),
           help="LeGrad: how each layer's tokens are pooled before the head"),
    Option("legrad_correction", "bool", True, label="Neutral-prompt correction", analysis=True,
           help="LeGrad on SigLIP prompts: zero the patches a neutral prompt ('a photo of a') lights up, as the "
           "official code does (only where the neutral prompt's maps were taken)"),
    Option("gradcam_layer", "int", -1, limits=lambda r, _v: (0, r.num_layers - 1), label="Block", analysis=True,
           from_end=True, help="GradCAM: the block whose norm1 output is explained (negative: from the end; -1, the "
           "last block, as pytorch-grad-cam's ViT tutorial)"),
    # feature PCA (vitviz.analysis.pca): DINOv2's demo masks the background by thresholding the first component
    Option("mask_background", "bool", False, label="Mask the background", analysis=True,
           help="feature PCA: patches low on the first component (the image's border side) left transparent"),
    Option("pca_style", "choice", "vitviz", choices=("vitviz", "dinov3"), label="PCA colours", analysis=True,
           labels=("Min-max (DINOv2 demo)", "Whitened, sigmoid (DINOv3)"),
           help="feature PCA: each component min-max scaled to [0, 1] (DINO / DINOv2 demos), or DINOv3's own: a "
           "whitened PCA fitted on the foreground patches, colours sigmoid(2x)"),
    Option("pca_joint", "bool", False, label="Fit over all open images", analysis=True,
           help="feature PCA: the components fitted on the patch tokens of every open image at that layer, so that "
           "colours are comparable across the images"),
    Option("pca_colours_only", "bool", False, label="PCA colours only", setting="pca_colours_only",
           help="feature PCA: the components' colours alone on black (as the DINO / DINOv2 figures), not blended "
           "over the photo at the map's opacity"),
)
_TABLE: dict[str, Option] = {}  # the rows, in order: the built-in ones, then those registered


def all_options() -> tuple[Option, ...]:
    """Every row of the table, in :class:`ViewOptions` field order."""
    return tuple(_TABLE.values())


def option(name: str) -> Option:
    """The row ``name``; ValueError naming the options when there is none."""
    try:
        return _TABLE[name]
    except KeyError:
        raise ValueError(f"unknown option {name!r}; valid: {', '.join(_TABLE)}") from None


def readable_options() -> tuple[str, ...]:
    """The options a view may read (:attr:`vitviz.views.View.reads`): the analysis rows, and ``"target"`` (the
    result's gradient target)."""
    return _READABLE


_READABLE: tuple[str, ...] = ()


# ----------------------------------------------------------------------------------------------- ViewOptions
class ViewOptions:
    """What the user is looking at: one field per row of the option table (:func:`all_options`), in its order, with
    the row's default. Immutable (a frozen dataclass); the session swaps it for a modified copy
    (``dataclasses.replace``)."""

    def __getattr__(self, name: str) -> Any:  # only for names that are not set: a row registered after this was made
        row = _TABLE.get(name)
        if row is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return row.default


_GENERATED: set[str] = set()  # what dataclass() added to ViewOptions (taken away before the fields are declared again)


def _declare() -> None:
    """(Re)make :class:`ViewOptions` a frozen dataclass with one field per row (the class object stays the same, so
    every module that imported it sees the new fields)."""
    global _READABLE
    cls = ViewOptions
    for name in _GENERATED | set(getattr(cls, "__annotations__", {})):
        if name in cls.__dict__:
            delattr(cls, name)
    cls.__annotations__ = {row.name: row.type for row in _TABLE.values()}
    for row in _TABLE.values():
        setattr(cls, row.name, row.default)
    before = set(cls.__dict__)
    dataclass(frozen=True)(cls)
    _GENERATED.clear()
    _GENERATED.update(set(cls.__dict__) - before)
    _READABLE = tuple(row.name for row in _TABLE.values() if row.analysis) + ("target",)


def register_option(row: Option) -> Option:
    """Add ``row`` to the table (a plug-in's option, a test's): :class:`ViewOptions` gains its field (after the
    others), the session checks it, session files save and read it. Returns it.

    Raises:
        ValueError: an option of that name exists.
    """
    if not isinstance(row, Option):
        raise TypeError(f"register_option() takes a vitviz.views.options.Option, got {type(row).__name__}")
    if row.name in _TABLE or row.name == "target" or hasattr(ViewOptions, row.name):
        raise ValueError(f"an option named {row.name!r} exists")
    _TABLE[row.name] = row
    _declare()
    return row


def unregister_option(name: str) -> None:
    """Remove an option :func:`register_option` added (no error when absent; the built-in ones stay)."""
    if any(row.name == name for row in BUILTIN_OPTIONS):
        raise ValueError(f"{name!r} is a built-in option; only registered ones can be removed")
    if _TABLE.pop(name, None) is not None:
        _declare()


for _row in BUILTIN_OPTIONS:
    _TABLE[_row.name] = _row
_declare()


# ----------------------------------------------------------------------------------------------- derived
def checked(options: ViewOptions, result: Any = None, view: Any = None) -> ViewOptions:
    """``options`` checked against the table: every choice checked (ValueError naming the option), every number
    clamped to its row's range and, given the shown ``result`` and the options' ``view``, to what the model has
    (the layers of the view, the heads, the patches). A ``view`` key is not checked here
    (:func:`vitviz.views.get`)."""
    changes = {}
    for row in _TABLE.values():
        value = getattr(options, row.name)
        new = check_value(row, value)
        if result is not None and row.limits is not None and isinstance(new, int) and not isinstance(new, bool):
            lo, hi = row.limits(result, view)
            if row.from_end and new < 0:
                new = hi + 1 + new
            new = _clamp(new, (lo, hi))
        if new is not value:
            changes[row.name] = new
    return replace(options, **changes) if changes else options


def parse(name: str, raw: Any) -> Any:
    """A value of the option ``name`` from loose input (a settings file's text, a command line's word): converted
    to the row's kind and checked (:func:`check_value`). ValueError when it cannot be one (a ``view`` key is only
    checked to be text: :func:`vitviz.views.get` knows the views)."""
    row = option(name)
    if row.kind == "bool":
        if isinstance(raw, bool):
            return raw
        words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
        if str(raw).strip().lower() not in words:
            raise ValueError(f"{name} must be true or false, got {raw!r}")
        return words[str(raw).strip().lower()]
    if row.kind in ("int", "float") or (row.kind == "head" and str(raw).strip() not in row.choices):
        number = float(raw) if row.kind == "float" else int(str(raw).strip())
        if not math.isfinite(number):
            raise ValueError(f"{name} must be a finite number, got {raw!r}")
        return check_value(row, number)
    if row.kind == "range":
        raise ValueError(f"{name} cannot be given as one word")
    word = str(raw).strip() if row.kind == "head" else str(raw)
    if not word:
        raise ValueError(f"{name} must not be empty")
    return check_value(row, word)


@dataclass(frozen=True)
class Flag:
    """A display option as a flag of ``vitviz export`` (argparse lives in :mod:`vitviz.cli`; this is what it needs).

    Attributes:
        option: the :class:`ViewOptions` field, and the parsed namespace's attribute (``dest``).
        flag: ``--cmap``; a bool that is on by default is switched off by ``--no-NAME``, one that is off switched
            on by ``--NAME``.
        action: ``"store"``, ``"store_false"`` or ``"store_true"`` (argparse's).
        default: the parsed value when the flag is not given.
        help: the flag's help.
        metavar: for ``"store"``: the value's placeholder (the choices for a choice option).
    """

    option: str
    flag: str
    action: str
    default: Any
    help: str
    metavar: str | None = None

    def add_argument_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``parser.add_argument(self.flag, **kwargs)``."""
        kw: dict[str, Any] = {"dest": self.option, "action": self.action, "help": self.help}
        if self.action == "store":
            kw["default"] = self.default
            if self.metavar:
                kw["metavar"] = self.metavar
        return kw

    def value(self, parsed: Any) -> Any:
        """The option's value from the parsed flag, checked: ValueError ``"--cmap X: unknown colormap; valid: ..."``
        naming the flag and the problem."""
        if self.action != "store":
            return bool(parsed)
        row = option(self.option)
        try:
            return parse(self.option, parsed)
        except ValueError:
            if row.kind == "choice":
                what = (row.label or row.name).lower()
                raise ValueError(f"{self.flag} {parsed}: unknown {what}; valid: {', '.join(row.choices)}") from None
            lo, hi = row.range
            raise ValueError(f"{self.flag} {parsed}: expected a number"
                             + (f" from {lo:g} to {hi:g}" if lo is not None and hi is not None else "")) from None


def cli_flags() -> tuple[Flag, ...]:
    """The export command's display flags: one per row marked ``flag``, in table order (today ``--cmap``,
    ``--no-colorbar``, ``--no-caption``). In :mod:`vitviz.cli`::

        for f in cli_flags():
            parser.add_argument(f.flag, **f.add_argument_kwargs())
        display = {f.option: f.value(getattr(args, f.option)) for f in cli_flags()}  # ValueError naming the flag
        session.set_options(**display)
    """
    out = []
    for row in _TABLE.values():
        if not row.flag:
            continue
        dashed = row.name.replace("_", "-")
        if row.kind == "bool":
            out.append(Flag(row.name, f"--no-{dashed}" if row.default else f"--{dashed}",
                            "store_false" if row.default else "store_true", row.default, row.flag))
        else:
            out.append(Flag(row.name, f"--{dashed}", "store", row.default, row.flag))
    return tuple(out)

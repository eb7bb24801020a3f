"""What ``vitviz export`` can be told, in one place: :class:`ExportOptions` and the words its lists take. Its display
options (colormap, colour bar, caption ...) are the rows of the option table that have an export flag
(:func:`vitviz.views.options.cli_flags`): a new such row is exported, and asked for by a flag, with no change here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from vitviz.views.options import HEAD_REDUCTIONS, cli_flags
from vitviz.views.presets import PROMPT_VIEWS, STANDARD_VIEWS  # noqa: F401 - PROMPT_VIEWS: the export default with --text

DEFAULT_VIEWS = STANDARD_VIEWS
FORMATS = ("png", "npy", "both")
HEAD_WORDS = HEAD_REDUCTIONS


@dataclass(frozen=True)
class ExportOptions:
    """Everything ``vitviz export`` can be told, in one place (each flag's help: :mod:`vitviz.cli.export_command`).

    Attributes:
        views: view keys of :mod:`vitviz.views`.
        layers: for views with a layer: ``"all"``, ``"last"``, ``"emb"`` (the embeddings, in the token views) or
            block indices (negative from the end).
        heads: for views with a head: ``"mean"``, ``"max"``, ``"min"``, ``"all"`` or head indices.
        query: ``(row, col)`` of the query patch (query, token similarity and position-embedding views), None = the
            centre patch.
        target: ``"top"``, a class index or a class name (or a unique part of one).
        format: ``"png"``, ``"npy"`` or ``"both"``.
        scale: PNG size: ``"native"`` (the image's own pixels), ``"print"`` (long side >= 2048 px, the window's
            default) or an integer factor.
        display: the display options that have an export flag (:func:`display_defaults`: today ``cmap``,
            ``colorbar``, ``caption``: the colormap, the figure's colour bar, its title + caption, as in the window),
            as ``(name, value)`` pairs (a mapping is taken too); default: the option table's defaults.
        batch_size: images per forward pass.
        device, precision: where and how the model runs (``"auto"``: bf16 where the hardware has it).
        shard: ``(K, N)``: this run does shard K of N.
        overwrite: recompute every image and replace existing files.
        quiet: no progress bar (log lines only).
        animate: also each layer-dependent view over every layer as one animation (``"gif"``, ``"apng"``, ``"mp4"``;
            :func:`vitviz.document.panel.layer_figures`: one colour scale across layers, the layer drawn on each frame),
            at ``scale``; None: no animation.
        fps: frames per second of the animations.
        text: prompts (CLIP, SigLIP: ``vitviz export --text``): the model becomes the zero-shot classifier over them
            (:func:`vitviz.pipeline.prompt_pipeline`) and every gradient view gets one map per prompt (``target``
            stays ``"top"``); empty: no prompts.
        templates: the prompts' templates: None (as typed), ``"photo"`` or ``"imagenet"``
            (:meth:`vitviz.model.text.TextTower.encode`).
    """

    views: tuple[str, ...] = DEFAULT_VIEWS
    layers: tuple[str, ...] = ("last",)
    heads: tuple[str, ...] = ("mean",)
    query: tuple[int, int] | None = None
    target: str = "top"
    format: str = "png"
    scale: str = "native"
    display: tuple[tuple[str, Any], ...] = field(default_factory=lambda: display_defaults())
    batch_size: int = 16
    device: str = "cpu"
    precision: str = "auto"
    shard: tuple[int, int] = (1, 1)
    overwrite: bool = False
    quiet: bool = False
    animate: str | None = None
    fps: float = 2.0
    text: tuple[str, ...] = ()
    templates: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.display, Mapping):
            object.__setattr__(self, "display", tuple(self.display.items()))
        if isinstance(self.text, list):
            object.__setattr__(self, "text", tuple(self.text))

    def request(self, model_sha256: str, precision: str) -> dict[str, Any]:
        """What the files depend on (a rerun with the same request skips the images done; one with another stops:
        :mod:`vitviz.batch.rerun`): these options (the display options under their own names), the precision and
        the model by content (:func:`vitviz.batch.fingerprint.model_sha256`), not by the path it came from."""
        d = asdict(self)
        for k in ("batch_size", "device", "precision", "shard", "overwrite", "quiet"):
            d.pop(k)
        d.update(dict(d.pop("display")))
        d.update(model_sha256=model_sha256, precision=precision)
        if not self.text:  # (the request of an export without prompts is what it was before they existed)
            d.pop("text")
            d.pop("templates")
        return d


def setting_names() -> dict[str, str]:
    """How the user names each setting of :meth:`ExportOptions.request` (its flag; a switch by its option's name),
    for the messages that say what changed."""
    names = {k: f"--{k}" for k in ("views", "layers", "heads", "query", "target", "format", "scale", "animate", "fps",
                                   "precision", "text", "templates")}
    names.update({f.option: f.flag if f.action == "store" else f.option for f in cli_flags()})
    return names


def display_defaults() -> tuple[tuple[str, Any], ...]:
    """``(name, default)`` of every display option that has an export flag, in the option table's order."""
    return tuple((f.option, f.default) for f in cli_flags())


def is_int(w: str) -> bool:
    """Whether the word ``w`` is an integer (a layer, head or class index)."""
    try:
        int(w)
    except ValueError:
        return False
    return True


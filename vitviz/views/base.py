"""The :class:`View` base class and the helpers the view modules share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vitviz._arrays import to_numpy

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.pipeline import InferenceResult
    from vitviz.session import ViewOptions

HEAD_REDUCTIONS: tuple[str, ...] = ("mean", "max", "min")
# the options a view may read (fields of vitviz.session.ViewOptions, plus "target": the result's gradient target)
OPTION_NAMES: tuple[str, ...] = ("layer", "head", "query", "head_fusion", "discard_ratio", "start_layer", "target")


def as_grid(m: Any, grid: tuple[int, int]) -> np.ndarray:
    """A map (tensor or array) as contiguous float32 ``[gh, gw]``."""
    a = to_numpy(m)
    if a.shape != tuple(grid):
        a = a.reshape(grid)
    return np.ascontiguousarray(a)


def head_text(head: Any) -> str:
    return f"head {head}" if isinstance(head, int) else f"{head} of heads"


def patch_text(result: "InferenceResult", query: int) -> str:
    row, col = divmod(query, result.grid[1])
    return f"patch ({row}, {col})"


class View:
    """One thing the canvas can show. Subclasses set the class attributes and implement :meth:`compute`.

    Attributes:
        key: identifier (settings, file names, ``Session.set_options(view=key)``).
        title: menu and caption text.
        reads: the options the map depends on (see ``OPTION_NAMES``); the window enables only those controls.
        quantity, unit: what the colour bar shows.
        shortcut: a key sequence, or None for the view's position in the menu.
        needs_cls: the map follows the [CLS] row (undefined for models without one).
        needs_grads: the map needs attention gradients (a classifier).
    """

    key: str = ""
    title: str = ""
    reads: frozenset[str] = frozenset()
    quantity: str = "value"
    unit: str = ""
    shortcut: str | None = None
    needs_cls: bool = False
    needs_grads: bool = False

    def compute(self, result: "InferenceResult", options: "ViewOptions") -> np.ndarray | None:
        """The map, float32 ``[gh, gw]``, or None when the view is unavailable for this result."""
        raise NotImplementedError

    def layer_range(self, result: "InferenceResult") -> tuple[int, int]:
        """Valid layers (inclusive)."""
        return (0, result.num_layers - 1)

    def attention_layer(self, options: "ViewOptions") -> int:
        """The attention layer that goes with the view's layer (the heads panel shows its heads)."""
        return options.layer

    def unavailable(self, result: "InferenceResult") -> str | None:
        """Why this view cannot be shown for ``result`` (None when it can)."""
        if self.needs_cls and result.num_prefix_tokens == 0:
            return "the model has no [CLS] token"
        if self.needs_grads and result.attention_grads is None:
            return "the model has no classifier, so there are no gradients"
        return None

    def cache_key(self, options: "ViewOptions") -> tuple:
        """What the map depends on (the result aside)."""
        return (self.key,) + tuple(getattr(options, n) for n in OPTION_NAMES if n in self.reads and n != "target")

    def caption_parts(self, result: "InferenceResult | None", options: "ViewOptions") -> list[str]:
        """The caption after the title, e.g. ``["layer 3", "head 5"]``."""
        parts = []
        if "layer" in self.reads:
            parts.append(f"layer {options.layer}")
        if "head" in self.reads:
            parts.append(head_text(options.head))
        if "query" in self.reads and result is not None:
            parts.append(patch_text(result, options.query))
        if "target" in self.reads and result is not None and result.target is not None:
            parts.append(f"target {result.label(result.target)}")
        return parts

    def caption(self, result: "InferenceResult | None", options: "ViewOptions") -> str:
        return " · ".join([self.title] + self.caption_parts(result, options))

    def file_stem(self, result: "InferenceResult | None", options: "ViewOptions") -> str:
        """The view's part of an export file name, from the options it reads."""
        parts = [self.key]
        if "layer" in self.reads:
            parts.append(f"L{options.layer}")
        if "head" in self.reads:
            parts.append(options.head if isinstance(options.head, str) else f"h{options.head}")
        if "query" in self.reads and result is not None:
            parts.append("p{}-{}".format(*divmod(options.query, result.grid[1])))
        if "head_fusion" in self.reads:
            parts.append(options.head_fusion)
        if "discard_ratio" in self.reads and options.discard_ratio > 0:
            parts.append(f"d{options.discard_ratio:.2f}")
        if "start_layer" in self.reads and options.start_layer > 0:
            parts.append(f"from{options.start_layer}")
        if "target" in self.reads and result is not None and result.target is not None:
            label = "".join(c if c.isalnum() else "-" for c in result.label(result.target)).strip("-")
            parts.append(label[:40] or f"class{result.target}")
        return "_".join(str(p) for p in parts)


class SweepView(View):
    """A whole-attention view whose map at the default options the pipeline's one sweep
    (:func:`vitviz.analysis.analyse_image`) already computed: ``result.analyses.<sweep_field>``."""

    sweep_field: str = ""
    sweep_defaults: dict[str, Any] = {}
    needs_cls = True

    def analysis(self, result: "InferenceResult", options: "ViewOptions") -> Any:
        """The map at any options (a tensor ``[gh, gw]``)."""
        raise NotImplementedError

    def compute(self, result, options):
        if self.unavailable(result):
            return None
        pre = getattr(result.analyses, self.sweep_field, None) if result.analyses is not None else None
        if pre is not None and all(getattr(options, k) == v for k, v in self.sweep_defaults.items()):
            return as_grid(pre, result.grid)
        return as_grid(self.analysis(result, options), result.grid)

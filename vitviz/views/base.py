"""The :class:`View` base class and the helpers the view modules share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vitviz._util.arrays import to_numpy
from vitviz.views.options import ViewOptions, readable_options
from vitviz.views.stream_plan import NotStreamable, StreamPlan

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.pipeline import InferenceResult


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


def target_words(result: "InferenceResult") -> str | None:
    """What the result's gradients explain, in words (a class's label, "similar to image cat.jpg" ...), or None."""
    words = getattr(result, "target_text", None)
    if callable(words):
        return words()
    return None if result.target is None else result.label(result.target)


POOL_NOTE = "pooling head's query as the [CLS] row (no [CLS] token)"


def pool_row(result: "InferenceResult") -> Any:
    """The attention-pooling head's row ``[H, N]`` of a model without a [CLS] token (SigLIP's "MAP" head), which the
    [CLS]-based views read in place of the [CLS] row; None for models with a [CLS] token or without such a head."""
    if result.num_prefix_tokens > 0:
        return None
    return getattr(result, "pool_attention", None)


def pool_kwargs(result: "InferenceResult", grads: bool = False) -> dict[str, Any]:
    """``query_row`` (and ``query_grads``) for the analyses when the model pools with an attention head."""
    row = pool_row(result)
    if row is None:
        return {}
    kw = {"query_row": row}
    if grads:
        kw["query_grads"] = getattr(result, "pool_attention_grad", None)
    return kw


class View:
    """One thing the canvas can show. Subclasses set the class attributes and implement :meth:`compute`.

    Attributes:
        key: identifier (settings, file names, ``Session.set_options(view=key)``).
        title: menu and caption text.
        reads: the options the map depends on (see :func:`vitviz.views.options.readable_options`); the window
            enables only those controls.
        quantity, unit: what the colour bar shows.
        shortcut: a key sequence, or None for the view's position in the menu.
        needs_cls: the map follows the [CLS] row (undefined for models without one).
        needs_grads: the map needs attention gradients (a classifier).
        signed: the quantity has a sign (a diverging colour map centred at 0 is used).
        uses_attention: the map is computed from attention (so "ignore artefact tokens" changes it).
        heads_note: how the view treats heads when it does not read ``head`` (e.g. "mean of heads"), for captions.
        rgb: the view is drawn as colours of its own (:meth:`compute_rgb`), without colormap or colour bar;
            :meth:`compute` still gives a scalar map (read out under the cursor, masks).
        short_title: a figure column's label (a column is a few centimetres wide); empty: the title.
        reads_cls_row: the map is the [CLS] row of one layer (an attention-pooling head's row in its place).
        diffuse_when_small: the map is known to look diffuse on a small classifier (its caption then points to the
            faithfulness table).
        stream_input: what the view reads, which says how a streamed pass gathers it (:mod:`vitviz.views.kinds`):
            ``"rows"`` (one layer's attention rows), ``"tokens"`` (one layer's tokens), ``"product"`` (a product over
            the layers from a start layer), ``"result"`` (what every result holds in full: position tables, RoPE
            angles, LeGrad's and GradCAM's per-layer maps); None: no streamed form.
    """

    key: str = ""
    title: str = ""
    reads: frozenset[str] = frozenset()
    quantity: str = "value"
    unit: str = ""
    shortcut: str | None = None
    needs_cls: bool = False
    needs_grads: bool = False
    signed: bool = False
    uses_attention: bool = True
    heads_note: str | None = None
    rgb: bool = False
    short_title: str = ""
    reads_cls_row: bool = False
    diffuse_when_small: bool = False
    stream_input: str | None = None

    @property
    def slider(self) -> str | None:
        """The option the layer slider drives: ``"layer"``, ``"start_layer"`` (cumulative views) or None."""
        if "layer" in self.reads:
            return "layer"
        if "start_layer" in self.reads:
            return "start_layer"
        return None

    @property
    def slider_label(self) -> str:
        """The layer slider's label in this view ("Layer", "Start layer")."""
        return {"layer": "Layer", "start_layer": "Start layer"}.get(self.slider or "", "Layer")

    def slider_range(self, result: "InferenceResult") -> tuple[int, int]:
        """The slider's values (inclusive): the view's layers, or the start layers ``0 .. L-1`` of a cumulative
        view."""
        if self.slider is None:
            return (0, 0)
        return self.layer_range(result) if self.slider == "layer" else (0, result.num_layers - 1)

    def slider_text(self, value: int) -> str:
        """A slider value in words, for badges and labels ("layer 3", "start layer 3")."""
        return self.layer_text(value) if self.slider == "layer" else f"{self.slider_label.lower()} {value}"

    def slider_value(self, options: "ViewOptions", result: "InferenceResult | None") -> int:
        """The slider option's value, a negative one counted from the end (``-1``: the last layer) once a result
        says how many layers there are."""
        value = int(getattr(options, self.slider or "layer"))
        if value < 0 and result is not None and self.slider != "layer":
            value = max(0, result.num_layers + value)
        return value

    def layer_text(self, layer: int) -> str:
        """One numbering everywhere: blocks are 0 .. L-1; -1 is the embeddings (views over tokens)."""
        return "embeddings" if layer < 0 else f"layer {layer}"

    def compute(self, result: "InferenceResult", options: "ViewOptions") -> np.ndarray | None:
        """The map, float32 ``[gh, gw]``, or None when the view is unavailable for this result.

        ``result``'s attentions, tokens and gradients are in the model's precision (bfloat16 for a model run in it,
        the window's ``auto`` on most hardware): promote the slice you read (``result.attentions[l].float()``)
        before arithmetic, or call the :mod:`vitviz.analysis` functions, which do."""
        raise NotImplementedError

    def compute_rgb(self, result: "InferenceResult", options: "ViewOptions") -> np.ndarray | None:
        """An :attr:`rgb` view's picture: float32 ``[gh, gw, 4]`` RGBA in [0, 1] (alpha 0: not drawn); None for the
        other views or when unavailable."""
        return None

    def rgb_text(self, options: "ViewOptions") -> str:
        """An :attr:`rgb` view's colours in words (the caption's "colour: ..."); "" for the other views."""
        return ""

    def layer_range(self, result: "InferenceResult") -> tuple[int, int]:
        """Valid values of the layer slider (inclusive): blocks ``0 .. L-1``; views over tokens start at -1 (the
        embeddings)."""
        return (0, result.num_layers - 1)

    def attention_layer(self, options: "ViewOptions") -> int:
        """The attention layer that goes with the view's layer (the heads panel shows its heads)."""
        return max(0, options.start_layer if self.slider == "start_layer" else options.layer)

    def unavailable(self, result: "InferenceResult") -> str | None:
        """Why this view cannot be shown for ``result`` (None when it can)."""
        if self.needs_cls and result.num_prefix_tokens == 0 and pool_row(result) is None:
            return "the model has no [CLS] token"
        if self.needs_grads and result.attention_grads is None:
            if getattr(result, "num_classes", None) == 0:
                return ("a feature model (DINO, DINOv2, CLIP, SigLIP) has no classifier: its gradient views explain a "
                        "similarity target (similar to an image, to a patch of an image, or to a vector)")
            return "the result has no gradients (it was analysed without a target)"
        return None

    def unavailable_at(self, result: "InferenceResult", options: "ViewOptions") -> str | None:
        """Why this view cannot be shown for ``result`` at ``options`` (None when it can); by default
        :meth:`unavailable`."""
        return self.unavailable(result)

    def ignores_artefacts(self, options: "ViewOptions") -> bool:
        """Whether "ignore artefact tokens" changes this view's map."""
        return self.uses_attention and bool(getattr(options, "ignore_artefacts", False))

    def cache_key(self, options: "ViewOptions") -> tuple:
        """What the map depends on (the result aside)."""
        read = tuple(getattr(options, n) for n in readable_options() if n in self.reads and n != "target")
        return (self.key,) + read + (self.ignores_artefacts(options),)

    def result_changes(self, result: "InferenceResult") -> dict[str, Any]:
        """The option changes this view asks for on ``result`` when it is shown by default (export, evaluate, a
        prompt model's first view); empty by default."""
        return {}

    def plan_stream(self, plan: StreamPlan, result: "InferenceResult", options: "ViewOptions") -> None:
        """Add to ``plan`` what a streamed pass must gather for this view's map at ``options`` (``result``: the
        result's shape, before the pass). The input kinds (:mod:`vitviz.views.kinds`) implement it.

        Raises:
            NotStreamable: the view has no streamed form."""
        raise NotStreamable(f"the view {self.key!r} has no streamed form")

    def streamed_map(self, image: Any, options: "ViewOptions") -> np.ndarray | None:
        """The map made from a streamed pass's ``image`` (a :class:`vitviz.document.streamed.StreamedImage`: its
        ``result`` and what the pass gathered), equal to :meth:`compute` on the stored result.

        Raises:
            NotStreamable: the pass did not gather what the map needs, or the view has no streamed form."""
        raise NotStreamable(f"the view {self.key!r} has no streamed form")

    def streamed_rgb(self, image: Any, options: "ViewOptions") -> np.ndarray | None:
        """An :attr:`rgb` view's picture from a streamed pass's ``image`` (as :meth:`streamed_map`)."""
        raise NotStreamable(f"the view {self.key!r} has no streamed picture")

    def caption_parts(self, result: "InferenceResult | None", options: "ViewOptions") -> list[str]:
        """The caption after the title, e.g. ``["tabby cat", "start layer 0", "mean of heads"]``: the target class,
        the layer (or start layer), the head(s), the options that differ from their defaults, the query patch."""
        parts = []
        if "target" in self.reads and result is not None and target_words(result):
            parts.append(target_words(result))
        if "layer" in self.reads:
            parts.append(self.layer_text(options.layer))
        elif self.slider is not None:
            parts.append(self.slider_text(self.slider_value(options, result)))
        elif self.needs_cls and self.uses_attention:
            parts.append("all layers")
        if self.needs_cls and self.uses_attention and result is not None and pool_row(result) is not None:
            parts.append(POOL_NOTE)
        if "head" in self.reads:
            parts.append(head_text(options.head))
        elif "head_fusion" in self.reads:
            parts.append(f"{options.head_fusion} fusion of heads")
        elif self.heads_note:
            parts.append(self.heads_note)
        if "discard_ratio" in self.reads and options.discard_ratio > 0:
            parts.append(f"discard {options.discard_ratio:.2f}")
        if "query" in self.reads and result is not None:
            parts.append(patch_text(result, options.query))
        if self.ignores_artefacts(options):
            parts.append("artefact tokens ignored")
        return parts

    def caption(self, result: "InferenceResult | None", options: "ViewOptions") -> str:
        return " · ".join([self.title] + self.caption_parts(result, options))

    def file_stem(self, result: "InferenceResult | None", options: "ViewOptions") -> str:
        """The view's part of an export file name, from the options it reads."""
        parts = [self.key]
        if "layer" in self.reads:
            parts.append("emb" if options.layer < 0 else f"L{options.layer}")
        if "head" in self.reads:
            parts.append(options.head if isinstance(options.head, str) else f"h{options.head}")
        if "query" in self.reads and result is not None:
            parts.append("p{}-{}".format(*divmod(options.query, result.grid[1])))
        if "head_fusion" in self.reads:
            parts.append(options.head_fusion)
        if "discard_ratio" in self.reads and options.discard_ratio > 0:
            parts.append(f"d{options.discard_ratio:.2f}")
        if "start_layer" in self.reads and "layer" not in self.reads:
            parts.append(f"from{options.start_layer}")
        if "target" in self.reads and result is not None and target_words(result):
            label = "".join(c if c.isalnum() else "-" for c in target_words(result)).strip("-")
            while "--" in label:
                label = label.replace("--", "-")
            parts.append(label[:40] or (f"class{result.target}" if result.target is not None else "target"))
        if self.ignores_artefacts(options):
            parts.append("noart")
        return "_".join(str(p) for p in parts)


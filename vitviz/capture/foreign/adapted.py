"""A foreign ViT module as a model of the pipeline and the window: :class:`AdaptedModel` (with an
:class:`AdaptedSpec`: preprocessing, labels, name), :func:`adapt`, and :func:`capture_module`, the capture of a bare
or adapted module.

This module never imports Qt.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from vitviz.capture.foreign.layout_finder import Pattern, find_layout, is_vitviz_model, patch_convs
from vitviz.capture.foreign.recording import call_forward, logits_of, module_origin, record_module
from vitviz.capture.results import Capture, CaptureError
from vitviz.capture.targets import Text
from vitviz.model.checkpoints.common import imagenet_labels, resolve_preprocess
from vitviz.model.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from vitviz.model.spec import ModelSpec


def capture_module(
    model: nn.Module,
    images: torch.Tensor,
    *,
    target: Any = None,
    store_dtype: torch.dtype = torch.float32,
    grad_dtype: torch.dtype | None = None,
    store_device: torch.device | str = "cpu",
    attention: Pattern | None = None,
    blocks: Pattern | None = None,
    patch_size: int | None = None,
    grid: tuple[int, int] | None = None,
    num_prefix_tokens: int | None = None,
) -> Capture:
    """:func:`vitviz.capture.capture` for any ViT module (the same arguments and :class:`Capture`), plus:

    Args:
        attention: module path(s) of the attention layers (``"blocks.*.attn"``); default: found (module docstring).
        blocks: module path(s) of the transformer blocks, or the path of the list holding them; default: found.
        patch_size: patch side in input pixels; default: the patch-embedding convolution's stride.
        grid: ``(gh, gw)`` patch grid; default: the convolution's output size.
        num_prefix_tokens: tokens before the first patch ([CLS], registers ...); default: tokens minus patches.

    The arguments above default to those an :class:`AdaptedModel` was made with. Every one given is checked against
    what the forward pass did.

    Raises:
        CaptureError: nothing recognisable (the message names what was looked for), or what was found or given
            disagrees with the pass.
        ForwardError: the module's own forward raised (naming its file and class, keeping its exception's text).
        ValueError: bad ``images`` or ``target``.
    """
    if isinstance(target, Text):  # the prompt's embedding, with the text tower of the module's source
        target = target.resolve(model)
    features = False
    if isinstance(model, AdaptedModel):
        features = model.features
        opts = dict(model.options)
        given = dict(attention=attention, blocks=blocks, patch_size=patch_size, grid=grid,
                     num_prefix_tokens=num_prefix_tokens)
        opts.update({k: v for k, v in given.items() if v is not None})
        layout = model.layout if opts["attention"] == model.options["attention"] \
            and opts["blocks"] == model.options["blocks"] else None
        attention, blocks, patch_size, grid, num_prefix_tokens = (opts[k] for k in given)
        model, origin = model.module, model.origin
    else:
        layout = origin = None
    return record_module(model, images, target=target, store_dtype=store_dtype, grad_dtype=grad_dtype,
                         store_device=store_device, attention=attention, blocks=blocks, patch_size=patch_size,
                         grid=grid, num_prefix_tokens=num_prefix_tokens, layout=layout, origin=origin,
                         features=features)


@dataclass(frozen=True)
class AdaptedSpec:
    """What the pipeline and the window read from ``model.spec``, for a module that is not a vitviz ViT."""

    preprocess: Any  # vitviz.model.preprocess.Preprocess
    labels: tuple[str, ...] | None = None
    name: str = "model"
    source_format: str = "module"
    source_path: str | None = None
    layout: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def input_size(self) -> tuple[int, int]:
        return tuple(self.preprocess.crop)  # type: ignore[return-value]

    def label(self, index: int) -> str:
        if self.labels is not None and 0 <= index < len(self.labels):
            return self.labels[index]
        return f"class {index}"

    def describe(self) -> str:
        p = self.preprocess
        lines = [f"name:          {self.name}",
                 f"format:        your own module ({self.source_path or 'in memory'})",
                 f"capture:       {self.layout}",
                 f"preprocessing: resize {p.resize} ({p.interpolation}), centre crop {p.crop[0]}x{p.crop[1]}, "
                 f"mean {tuple(round(x, 4) for x in p.mean)}, std {tuple(round(x, 4) for x in p.std)}"]
        return "\n".join(lines + list(self.notes))


class _ConfigView:
    """``model.config`` as the status bar reads it (depth, heads, patch size, registers)."""

    def __init__(self, depth: int, num_heads: int, patch_size: int):
        self.depth, self.num_heads, self.patch_size, self.num_reg_tokens = depth, num_heads, patch_size, 0


class _PatchEmbedView:
    """``model.patch_embed`` as :class:`vitviz.pipeline.ModelData` reads it (``.proj.weight``)."""

    def __init__(self, conv: nn.Conv2d | None, patch_size: int):
        self.proj, self.patch_size = conv, patch_size


def _nominal_size(module: nn.Module, conv: nn.Conv2d | None, pos: torch.Tensor | None) -> int | None:
    """The input size the module was built for: an ``img_size`` / ``image_size`` attribute (of the module, its
    config or its patch embedding), else the position embedding's square grid times the patch size."""
    cfg = getattr(module, "config", None)
    for owner in (module, cfg, getattr(module, "patch_embed", None)):
        for attr in ("img_size", "image_size"):
            v = owner.get(attr) if isinstance(owner, Mapping) else getattr(owner, attr, None)
            if isinstance(v, (tuple, list)) and len(v) == 2 and v[0] == v[1]:
                v = v[0]
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    if conv is not None and pos is not None:
        n = int(pos.shape[1])
        for p in (1, 0):
            side = math.isqrt(n - p) if n > p else 0
            if side and side * side == n - p:
                return side * int(conv.stride[0])
    return None


def _find_pos_embed(module: nn.Module, dim: int | None) -> str | None:
    """The name of a learned (or fixed) position embedding ``[1, n, D]`` or ``[n, D]``: a parameter or buffer whose
    name says position."""
    for n, t in list(module.named_parameters()) + list(module.named_buffers()):
        leaf = n.rsplit(".", 1)[-1].lower()
        if "pos" not in leaf:
            continue
        if t.ndim == 3 and t.shape[0] == 1 and (dim is None or t.shape[2] == dim):
            return n
        if t.ndim == 2 and dim is not None and t.shape[1] == dim:  # [n, D]
            return n
    return None


def _own_labels(module: nn.Module, num_classes: int) -> tuple[str, ...] | None:
    """Class names the module carries (a Hugging Face ``config.id2label`` that is not ``LABEL_k``), or None."""
    id2label = getattr(getattr(module, "config", None), "id2label", None)
    if not isinstance(id2label, Mapping) or len(id2label) != num_classes:
        return None
    try:
        names = tuple(str(id2label[i]) for i in range(num_classes))
    except KeyError:
        return None
    return None if all(re.fullmatch(r"LABEL_\d+", n) for n in names) else names


class AdaptedModel(nn.Module):
    """Any ViT module, with what vitviz's pipeline and window read from a model.

    Args:
        module: the user's ``nn.Module`` (its forward returns logits ``[B, K]``, or a tuple / object holding them).
        preprocess: a :class:`vitviz.model.preprocess.Preprocess`, ``"imagenet"`` / ``"inception"`` (mean = std =
            0.5), or None: resize the shorter side to the input size and centre-crop it, ImageNet mean and std.
        labels: class names in output order (default: ImageNet's for 1000 classes, else "class k").
        name: display name (default: the class name).
        input_size: the side of the square input (default: ``img_size`` / ``image_size`` of the module or its config,
            else the position embedding's grid times the patch size).
        attention, blocks, patch_size, grid, num_prefix_tokens: as :func:`capture_module`.
        features: the module's output is features, not class scores: no predictions and no gradient views (their
            reason is said in the window).
        check: run one forward pass on a blank image now (nothing is left to fail later, and the class count, head
            count and prefix tokens are known before a window opens).
        source_path: the user's file the module was built from (``vitviz --model FILE.py:CLASS``).
        origin: where the module comes from, named when its forward raises (default: ``FILE.py:CLASS`` of its class,
            :func:`~vitviz.capture.foreign.recording.module_origin`; the file as ``source_path`` gives it).

    Raises:
        CaptureError: the module's attention cannot be captured (the message says what was looked for).
        ForwardError: the module's own forward raised during the check (naming ``origin``).
        ValueError: bad preprocess / labels / input size.
    """

    def __init__(self, module: nn.Module, *, preprocess: Any = None, labels: Sequence[str] | None = None,
                 name: str | None = None, input_size: int | None = None, attention: Pattern | None = None,
                 blocks: Pattern | None = None, patch_size: int | None = None, grid: tuple[int, int] | None = None,
                 num_prefix_tokens: int | None = None, source_path: str | None = None, features: bool = False,
                 check: bool = True, origin: str | None = None):
        super().__init__()
        if not isinstance(module, nn.Module):
            raise CaptureError(f"vitviz needs a torch.nn.Module, got {type(module).__name__}")
        if isinstance(module, AdaptedModel):
            origin = origin or module.origin
            module = module.module
        self.module = module
        self.origin = origin or module_origin(module, source_path)
        self.options: dict[str, Any] = dict(attention=attention, blocks=blocks, patch_size=patch_size, grid=grid,
                                            num_prefix_tokens=num_prefix_tokens)
        self.layout = find_layout(module, attention=attention, blocks=blocks)
        convs = dict(patch_convs(module))
        conv = convs.get(self.layout.patch_embed) if self.layout.patch_embed else None
        self._pos_name = _find_pos_embed(module, int(conv.out_channels) if conv is not None else None)
        size = input_size if input_size is not None else _nominal_size(module, conv, self.pos_embed)
        if isinstance(preprocess, Preprocess):
            pre = preprocess
        else:
            if size is None:
                raise ValueError(f"{type(module).__name__}: cannot tell its input size (no img_size / image_size "
                                 "attribute, no position embedding over a square grid): pass input_size= or "
                                 "preprocess=vitviz.Preprocess(...)")
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                raise ValueError(f"input_size must be a positive integer, got {size!r}")
            if preprocess is None:
                pre = Preprocess(resize=size, crop=(size, size), interpolation="bicubic", mean=IMAGENET_MEAN,
                                 std=IMAGENET_STD)
            else:
                pre = resolve_preprocess(preprocess, (size, size))
        self.patch_size = int(patch_size or (conv.stride[0] if conv is not None else 0) or 0)
        self.patch_embed = None if conv is None else _PatchEmbedView(conv, self.patch_size)
        self.num_classes = 0
        self.num_prefix_tokens = num_prefix_tokens or 0
        self.config = _ConfigView(len(self.layout.blocks), 0, self.patch_size)
        labs = None if labels is None else tuple(str(s) for s in labels)
        self.spec = AdaptedSpec(preprocess=pre, labels=labs, name=name or type(module).__name__,
                                source_path=source_path, layout=self.layout.describe())
        self.features = bool(features)
        if features and labs is not None:
            raise ValueError("labels name classes, but features=True says the output holds none")
        if check:
            self.check()
            if labs is None and not features:
                own = _own_labels(module, self.num_classes)
                if own is None and self.num_classes == 1000:
                    own = imagenet_labels()
                if own is not None:
                    self.spec = AdaptedSpec(preprocess=pre, labels=own, name=self.spec.name,
                                            source_path=source_path, layout=self.spec.layout)
        if self.spec.labels is not None and self.num_classes and len(self.spec.labels) != self.num_classes:
            raise ValueError(f"labels has {len(self.spec.labels)} names but {self.spec.name} has {self.num_classes} "
                             "classes")

    def check(self) -> Capture:
        """One capture of a blank image at the nominal input size: fills in the class count, heads, patch size and
        prefix tokens, and raises now what would fail later."""
        h, w = self.spec.input_size
        c = int(self.patch_embed.proj.in_channels) if self.patch_embed is not None else len(
            self.spec.preprocess.mean)
        cap = capture_module(self, torch.zeros(1, c, h, w))
        self.num_classes = 0 if self.features else int(cap.logits.shape[1])
        self.num_prefix_tokens = cap.num_prefix_tokens
        self.patch_size = cap.patch_size
        if self.patch_embed is not None:
            self.patch_embed.patch_size = cap.patch_size
        self.config = _ConfigView(cap.num_layers, cap.num_heads, cap.patch_size)
        return cap

    @property
    def pos_embed(self) -> torch.Tensor | None:
        """The module's position embedding ``[1, n, D]`` (a parameter or buffer whose name says position), or None."""
        if self._pos_name is None:
            return None
        owner, _, leaf = self._pos_name.rpartition(".")
        t = getattr(self.module.get_submodule(owner) if owner else self.module, leaf)
        return t[None] if t.ndim == 2 else t

    @property
    def blocks(self) -> list[nn.Module]:
        """The module's transformer blocks, in layer order (what :mod:`vitviz.evaluate` randomises)."""
        mods = dict(self.module.named_modules())
        return [mods[n] for n in self.layout.blocks]

    def pos_embed_for(self, grid: tuple[int, int]) -> torch.Tensor:
        """The position embedding when ``grid`` is the nominal one (the module's own resampling is unknown)."""
        pos = self.pos_embed
        h, w = self.spec.input_size
        if pos is None or not self.patch_size or tuple(grid) != (h // self.patch_size, w // self.patch_size):
            raise ValueError(f"{self.spec.name}: no position embedding for a {grid[0]}x{grid[1]} grid")
        return pos

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The module's logits (:class:`~vitviz.capture.foreign.recording.ForwardError` naming :attr:`origin` when
        its forward raises)."""
        return logits_of(call_forward(self.module, self.origin, x), int(x.shape[0]), f"{self.spec.name}.forward")

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


def adapt(model: nn.Module, **kwargs: Any) -> nn.Module:
    """``model`` itself when it is a vitviz ViT (``preprocess`` / ``labels`` / ``name`` given replace its spec's),
    else an :class:`AdaptedModel` (keyword arguments as there)."""
    if isinstance(model, AdaptedModel) and not kwargs:
        return model
    if is_vitviz_model(model):
        spec = getattr(model, "spec", None)
        changes = {k: kwargs.pop(k) for k in ("preprocess", "labels", "name") if kwargs.get(k) is not None}
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if kwargs:
            raise ValueError(f"options {sorted(kwargs)} apply to other modules, not to a vitviz ViT")
        if spec is None and getattr(model, "config", None) is not None:  # built with ViT(...): a default spec
            h, w = model.config.img_size
            spec = model.spec = ModelSpec(config=model.config, name=type(model).__name__, preprocess=Preprocess(
                resize=h if h == w else (h, w), crop=(h, w), interpolation="bicubic", mean=IMAGENET_MEAN,
                std=IMAGENET_STD))
        if changes:
            if spec is None:
                raise ValueError("the vitviz ViT has no spec: create it with vitviz.create_model or load it with "
                                 "vitviz.load_checkpoint")
            if isinstance(changes.get("preprocess"), str):
                changes["preprocess"] = resolve_preprocess(changes["preprocess"], spec.config.img_size)
            if "labels" in changes:
                changes["labels"] = tuple(str(s) for s in changes["labels"])
                if len(changes["labels"]) != spec.config.num_classes:
                    raise ValueError(f"labels has {len(changes['labels'])} names but the model has "
                                     f"{spec.config.num_classes} classes")
            model.spec = spec.replace(**changes)
        return model
    return AdaptedModel(model, **kwargs)

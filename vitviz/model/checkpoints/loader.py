"""``load_checkpoint``: read, detect the format, convert, check, and build the model. No Qt."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from vitviz.model.checkpoints.common import (
    Converted,
    PreprocessArg,
    check_every_key_read,
    check_memory,
    err,
    imagenet_labels,
    infer_config,
    names,
    resolve_preprocess,
)
from vitviz.model.checkpoints.reading import read_raw
from vitviz.model.checkpoints.registry import detect_format, format_module
from vitviz.model.pos_embed import resample_pos_embed, resize_rel_pos_table
from vitviz.model.preprocess import Preprocess
from vitviz.model.spec import ModelSpec
from vitviz.model.vit import ViT, ViTConfig, to_pair


def load_checkpoint(
    source: str | os.PathLike[str] | Mapping[str, Any],
    *,
    num_classes: int | None = None,
    img_size: int | tuple[int, int] | None = None,
    num_heads: int | None = None,
    preprocess: PreprocessArg = None,
    labels: Sequence[str] | None = None,
    name: str | None = None,
) -> ViT:
    """Load a ViT from a native, timm, torchvision, Hugging Face or Google ``.npz`` checkpoint.

    Args:
        source: a file (``.safetensors``, ``.pth``/``.pt``/``.bin``, ``.npz``), a Hugging Face directory
            (``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``), or a state dict.
        num_classes: replace the classifier with a freshly initialised one of this size (0: no head, the model
            returns pooled features ``[B, D]``); labels are dropped when the size changes.
        img_size: nominal input size; when it differs from the checkpoint's, the position embeddings are resampled
            bicubically over the patch grid (prefix tokens kept), as timm does.
        num_heads: attention heads, for checkpoints that do not say (timm, torchvision, bare HF weights).
        preprocess: ``"imagenet"``, ``"inception"`` (mean = std = 0.5) or a :class:`Preprocess`; default: the format's
            documented default (see the package docstring).
        labels: class names in head order, overriding what the checkpoint provides.
        name: a display name for ``model.spec.name`` (default: the file name).

    Returns:
        The model in eval mode, with ``model.spec`` set.

    Raises:
        CheckpointError: the file is not a checkpoint, is truncated or corrupt, has an unknown format, settings of
            the wrong type or disagreeing with its tensors, missing or unexpected keys, mismatched shapes, would not
            fit in memory, or its pickle would run code.
    """
    raw = read_raw(source)
    fmt = detect_format(raw)
    module = format_module(fmt)
    conv = module.convert(raw)
    check_every_key_read(raw, conv)
    origin = raw.origin
    saved_spec: ModelSpec | None = conv.config.get("spec")
    if saved_spec is not None:
        cfg = saved_spec.config
        if num_heads is not None:
            cfg = ViTConfig.from_dict({**cfg.to_dict(), "num_heads": num_heads})
    else:
        cfg = infer_config(conv, origin, num_heads=num_heads)
    ckpt_cfg = cfg
    changes: dict[str, Any] = {}
    if img_size is not None:
        changes["img_size"] = to_pair(img_size)
    if num_classes is not None:
        changes["num_classes"] = int(num_classes)
    if changes:
        cfg = ViTConfig.from_dict({**cfg.to_dict(), **changes})
    check_memory(cfg, origin)  # before anything is allocated
    try:
        with torch.device("meta"):  # shapes only: nothing allocated until every key and shape has been checked
            model = ViT.from_config(cfg)
    except ValueError as e:
        raise err(origin, f"invalid architecture ({e})") from None

    state = dict(conv.state)
    head_reset = cfg.num_classes != ckpt_cfg.num_classes
    if head_reset:
        for k in [k for k in state if k.startswith(("head.", "head_dist."))]:
            del state[k]
        conv.unused = [k for k in conv.unused if not _PRE_LOGITS.search(k)]
    # resample the position embedding for another input size
    if cfg.img_size != ckpt_cfg.img_size and "pos_embed" in state and cfg.pos_embed == "learned":
        prefix = 0 if cfg.no_embed_class else cfg.num_prefix_tokens
        state["pos_embed"] = resample_pos_embed(state["pos_embed"], cfg.grid_size, ckpt_cfg.grid_size, prefix,
                                                cfg.pos_embed_interp)
    if cfg.img_size != ckpt_cfg.img_size and cfg.rel_pos_bias != "none":  # BEiT: the tables follow the grid
        for k in [k for k in state if k.endswith("relative_position_bias_table")]:
            state[k] = resize_rel_pos_table(state[k], ckpt_cfg.grid_size, cfg.grid_size, cfg.rel_pos_interp)
    if cfg.pos_embed == "sincos":  # fixed: recomputed for the grid
        state.pop("pos_embed", None)
    _check_state(model, state, conv, origin, skip_missing=_skip_missing(cfg, head_reset))
    model = _materialise(model, state, adopt=not isinstance(source, Mapping))
    with torch.no_grad():
        if cfg.pos_embed == "sincos":
            model.pos_embed.copy_(model.fixed_pos_embed())
        if head_reset:
            for head in (model.head, model.head_dist):
                if isinstance(head, torch.nn.Linear):
                    torch.nn.init.trunc_normal_(head.weight, std=0.02)
                    torch.nn.init.zeros_(head.bias)
    model.eval()

    size = cfg.img_size
    if isinstance(preprocess, (str, Preprocess)):
        pre = resolve_preprocess(preprocess, size)
    elif saved_spec is not None:
        pre = saved_spec.preprocess
        if size != ckpt_cfg.img_size:
            pre = _rescale_preprocess(pre, size)
    elif hasattr(module, "default_preprocess"):
        pre = module.default_preprocess(cfg, raw)
    else:
        pre = resolve_preprocess("inception", size)
    assert pre is not None
    if labels is not None:
        labs: tuple[str, ...] | None = tuple(str(x) for x in labels)
        if len(labs) != cfg.num_classes:
            raise ValueError(f"labels has {len(labs)} names but the model has {cfg.num_classes} classes")
    elif head_reset:
        labs = None
    elif saved_spec is not None:
        labs = saved_spec.labels
    else:
        labs = conv.config.get("labels")
        if labs is None and cfg.num_classes == 1000:
            labs = imagenet_labels()
    if labs is not None and len(labs) != cfg.num_classes:
        labs = None
    src_path = None if isinstance(source, Mapping) else str(Path(source).expanduser())
    display = name or (saved_spec.name if saved_spec is not None else None) or (
        Path(src_path).name if src_path else f"{fmt} state dict")
    if saved_spec is not None and not head_reset:
        head_kind = saved_spec.head_kind
    else:  # CLIP's image projection is the head of the converted model: its output is the image embedding
        projection = fmt in ("hf-clip", "open_clip") or (fmt == "timm" and not cfg.head_bias) or \
            conv.config.get("head_kind") == "projection"
        head_kind = "projection" if projection and cfg.num_classes > 0 and labs is None and not head_reset \
            else "classifier"
    model.spec = ModelSpec(config=cfg, preprocess=pre, labels=labs, source_format=fmt, source_path=src_path,
                           name=display, head_kind=head_kind)
    return model


def _rescale_preprocess(pre: Preprocess, size: tuple[int, int]) -> Preprocess:
    """Keep the crop ratio and normalisation of ``pre`` for a new input ``size``."""
    ch, cw = pre.crop
    if isinstance(pre.resize, tuple):
        rh, rw = pre.resize
        resize: int | tuple[int, int] = (round(rh * size[0] / ch), round(rw * size[1] / cw))
    else:
        resize = round(pre.resize * size[0] / ch) if size[0] == size[1] else (
            round(pre.resize * size[0] / ch), round(pre.resize * size[1] / cw))
    return Preprocess(resize=resize, crop=size, interpolation=pre.interpolation, mean=pre.mean, std=pre.std)


_PRE_LOGITS = re.compile(r"pre_logits")


def _skip_missing(cfg: ViTConfig, head_reset: bool) -> set[str]:
    skip = set()
    if head_reset:
        skip |= {"head.weight", "head.bias", "head_dist.weight", "head_dist.bias"}
    if cfg.pos_embed == "sincos":
        skip.add("pos_embed")
    return skip


def _check_state(model: ViT, state: dict[str, torch.Tensor], conv: Converted, origin: str, *,
                 skip_missing: set[str]) -> None:
    """Keys, shapes and dtypes of ``state`` against ``model`` (on the meta device: nothing allocated)."""
    target = model.state_dict()
    src = conv.source_names
    unexpected = [src.get(k, k) for k in state if k not in target] + list(conv.unused)
    missing = [k for k in target if k not in state and k not in skip_missing]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing keys {names(missing)}")
        if unexpected:
            parts.append(f"unexpected keys {names(unexpected)}")
        hint = " (the checkpoint does not match a supported ViT layout)"
        if any(_PRE_LOGITS.search(k) for k in unexpected):
            hint = (" (a pre-logits representation layer is not supported: load with num_classes=0 to use the "
                    "encoder alone, or num_classes=N for a new head)")
        raise err(origin, "; ".join(parts) + hint)
    for k, v in state.items():
        if tuple(v.shape) != tuple(target[k].shape):
            raise err(origin, f"shape mismatch for {src.get(k, k)!r}: the checkpoint has {tuple(v.shape)}, "
                              f"the inferred architecture needs {tuple(target[k].shape)}")
        if not (v.is_floating_point() or v.is_complex()):
            raise err(origin, f"tensor {src.get(k, k)!r} has dtype {v.dtype}, expected floating point")


def _materialise(model: ViT, state: dict[str, torch.Tensor], *, adopt: bool) -> ViT:
    """Give the meta-device ``model`` real tensors on the CPU: the checkpoint's own tensors where it has them (cast to
    the parameter's dtype and made contiguous, which copies nothing when they already are), fresh uninitialised
    ones for the rest (a new head, the sincos embedding; the caller fills them).

    Adopting the tensors read from a file instead of copying them into a second, empty model keeps the peak memory
    of a load at about one copy of the weights instead of two (bench/memory.py). Without ``adopt`` (an in-memory
    state dict, whose tensors belong to the caller, often another model's parameters) every tensor is copied.
    """
    seen: set[int] = set()
    with torch.no_grad():
        for name, current in list(model.named_parameters()) + list(model.named_buffers()):
            owner_name, _, attr = name.rpartition(".")
            owner = model.get_submodule(owner_name) if owner_name else model
            src = state.get(name)
            if src is None:
                t = torch.empty(current.shape, dtype=current.dtype, device="cpu")
            else:
                t = src.detach().to(device="cpu", dtype=current.dtype).contiguous()
                if not adopt and t.untyped_storage().data_ptr() == src.untyped_storage().data_ptr():
                    t = t.clone()
                elif t.untyped_storage().data_ptr() in seen:  # two names on one storage (tied or sliced in the
                    t = t.clone()  # file): each parameter gets its own
                seen.add(t.untyped_storage().data_ptr())
            if isinstance(current, torch.nn.Parameter):
                setattr(owner, attr, torch.nn.Parameter(t, requires_grad=current.requires_grad))
            else:
                owner._buffers[attr] = t
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    if left:  # pragma: no cover - every parameter and buffer is in named_parameters / named_buffers
        raise RuntimeError(f"still on the meta device after loading: {names(left)}")
    return model

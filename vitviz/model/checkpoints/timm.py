"""timm ``VisionTransformer`` state dicts (DeiT, DeiT III, DINOv2 with or without registers, CLIP and SigLIP image
towers, and timm training checkpoints): our names already. No Qt.

A timm hub folder (``config.json`` with ``architecture`` and ``pretrained_cfg`` next to ``model.safetensors``) says
what the shapes cannot: the activation (``*_quickgelu_*`` architectures: QuickGELU; ``model_args.act_layer``), and the
preprocessing (``pretrained_cfg``: input size, crop_pct, crop_mode, interpolation, mean, std). Without it the family
is guessed from the shapes (:func:`vitviz.model.spec.guess_family`) and gets its documented default (DINO's own
release files, ``dino_*.pth``, by their name: ImageNet mean/std and DINO's position-embedding interpolation); CLIP
towers
(``norm_pre``) use LayerNorm eps 1e-5 as timm's CLIP models do. The position embedding is resampled as timm does
(bicubic with antialiasing) for every family in this layout.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

import torch

from vitviz.imaging import RESAMPLING
from vitviz.model.checkpoints.common import (
    Converted,
    RawCheckpoint,
    err,
    rename,
    resolve_preprocess,
    want_int,
    want_number,
    want_numbers,
    want_object,
    want_str,
)
from vitviz.model.layers import ACT_LAYERS
from vitviz.model.preprocess import Preprocess
from vitviz.model.spec import family_preprocess, guess_family
from vitviz.model.timm_rope_archs import ROPE_NAMES
from vitviz.model.vit import ViTConfig

NAME = "timm"
DESCRIPTION = "timm (patch_embed.proj.weight)"

_INTERPOLATIONS = tuple(RESAMPLING)


def detect(raw: RawCheckpoint) -> bool:
    """``patch_embed.proj.weight`` and ``blocks.*`` keys."""
    keys = raw.tensors.keys()
    return "patch_embed.proj.weight" in keys and any(k.startswith("blocks.") for k in keys)


def timm_config(raw: RawCheckpoint) -> dict[str, Any] | None:
    """The folder's ``config.json`` when it is timm's (it has ``architecture``), else None."""
    cfg = raw.hf_config
    return cfg if isinstance(cfg, Mapping) and "architecture" in cfg else None


# timm architectures whose parts live in no tensor of the checkpoint (rotary position embedding: no weights, or
# weights under names no reader of this layout takes): never opened as a plain ViT, whatever the keys say
_UNMODELLED: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"eva02_enormous"), "has residual post-norm blocks (timm Eva's use_post_norm)"),
    (re.compile(r"_rpn_"), "has residual post-norm blocks (timm's ResPostBlock)"),
    (ROPE_NAMES, "rotates queries and keys (rotary position embedding, RoPE)"),
)


def refuse_unmodelled(cfg: Mapping[str, Any], where: str) -> None:
    """Refuse a timm folder whose ``architecture`` or ``model_args`` names a part this reader does not model (RoPE,
    EVA-02 enormous's post-norm blocks):
    its tensors alone would open as a plain ViT, with every map silently wrong."""
    arch = want_str(where, "architecture", cfg["architecture"])
    for pattern, what in _UNMODELLED:
        if pattern.search(arch):
            raise err(where, f"architecture {arch!r} {what}, a part the {NAME} reader does not model: refused rather "
                             "than opened without it")
    args = cfg.get("model_args")
    if isinstance(args, Mapping):
        rot = [k for k in args if "rope" in str(k) or "rot_pos" in str(k)]
        if rot and any(args[k] not in (None, False) for k in rot):
            raise err(where, f"model_args {', '.join(map(repr, rot))}: a rotary position embedding (RoPE), a part "
                             f"the {NAME} reader does not model: refused rather than opened without it")


def architecture_options(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """ViTConfig fields that a timm ``config.json`` gives and the shapes cannot: the activation, and the number of
    heads when ``model_args`` has it. A part this layout does not model is refused (:func:`refuse_unmodelled`)."""
    refuse_unmodelled(cfg, where)
    arch = want_str(where, "architecture", cfg["architecture"])
    options: dict[str, Any] = {}
    if "quickgelu" in arch:
        options["act_layer"] = "quick_gelu"
    args = cfg.get("model_args")
    if args is not None:
        args = want_object(where, "model_args", args)
        act = args.get("act_layer")
        if act is not None:
            act = want_str(where, "model_args.act_layer", act)
            act = {"gelu_tanh": "gelu_tanh", "quick_gelu": "quick_gelu", "gelu": "gelu"}.get(act)
            if act is None:
                raise err(where, f"unsupported activation model_args.act_layer={args['act_layer']!r} "
                                 f"(supported: {', '.join(ACT_LAYERS)})")
            options["act_layer"] = act
        if args.get("num_heads") is not None:
            options["num_heads"] = want_int(where, "model_args.num_heads", args["num_heads"])
    return options


AIMV2 = "aimv2_"
"""timm's AIMv2 architectures (``aimv2_large_patch14_224`` ...): RMSNorm (eps 1e-5) everywhere, the patch embeddings
normed, no biases but the patch projection's, SwiGLU (``fc1_g``, ``fc1_x``: packed here into ``fc1`` as
[gate; value]), no [CLS], mean pooling after the final norm."""


def pack_swiglu(c: Converted) -> None:
    """timm's unpacked SwiGLU (``mlp.fc1_g``, ``mlp.fc1_x``, no ``mlp.norm``) as the packed ``mlp.fc1`` of
    :class:`~vitviz.model.layers.SwiGLUPacked`: ``silu(gate) * value`` with ``gate, value = fc1(x).chunk(2)``."""
    for name in [k for k in c.state if re.fullmatch(r"blocks\.\d+\.mlp\.fc1_g\.(weight|bias)", k)]:
        other = name.replace("fc1_g", "fc1_x")
        if other not in c.state:
            continue
        packed = name.replace("fc1_g", "fc1")
        c.state[packed] = torch.cat([c.state.pop(name), c.state.pop(other)], dim=0)
        c.source_names[packed] = f"{c.source_names.pop(name, name)} + {c.source_names.pop(other, other)}"


def convert(raw: RawCheckpoint) -> Converted:
    """Identity renaming (timm's names are ours), plus what ``config.json`` says."""
    c = rename(raw.tensors, [(r"(.*)", r"\1")])
    cfg = timm_config(raw)
    options: dict[str, Any] = {}
    pack_swiglu(c)
    if "blocks.0.norm1.weight" in raw.tensors and "blocks.0.norm1.bias" not in raw.tensors:
        arch = str((cfg or {}).get("architecture", ""))
        if not arch.startswith(AIMV2):
            raise err(raw.origin, "the block norms have no bias (RMSNorm, or LayerNorm without bias: the weights "
                                  "cannot tell which); vitviz reads such a model from its timm hub folder "
                                  f"(config.json 'architecture' {AIMV2}*)")
        options["norm_layer"] = "rmsnorm"
        c.config["layer_norm_eps"] = 1e-5
    if "norm_pre.weight" in raw.tensors:
        c.config["layer_norm_eps"] = 1e-5  # timm's CLIP towers
    if cfg is not None:
        where = os.path.join(raw.origin, "config.json")
        options.update(architecture_options(cfg, where))
        if "num_heads" in options:
            c.config["num_heads"] = options.pop("num_heads")
        pcfg = cfg.get("pretrained_cfg")
        if pcfg is not None:
            pretrained_preprocess(want_object(where, "pretrained_cfg", pcfg), where)  # checked now, used after
    if cfg is None and is_dino_v1_file(raw):
        options["pos_embed_interp"] = "dino"  # DINO's own interpolate_pos_encoding (0.1 offset, no antialiasing)
    c.config["options"] = options
    return c


def is_dino_v1_file(raw: RawCheckpoint) -> bool:
    """DINO's own release files (``dino_deitsmall16_pretrain.pth``, ``dino_vitbase8_pretrain.pth`` ...) have timm's
    names and no head; only their name tells them from another headless timm ViT."""
    base = os.path.basename(str(raw.origin)).lower()
    return bool(re.match(r"dino(?!v2)[_-]", base)) and not any(k.startswith("head.") for k in raw.tensors) and \
        "blocks.0.ls1.gamma" not in raw.tensors


def pretrained_preprocess(pcfg: Mapping[str, Any], where: str, size: tuple[int, int] | None = None) -> Preprocess:
    """timm's ``pretrained_cfg`` as a :class:`Preprocess`: ``input_size`` (or ``size``), ``crop_pct``, ``crop_mode``
    (``center``; ``squash``: resize to the input size), ``interpolation``, ``mean``, ``std``; each field checked."""
    p = {k: v for k, v in pcfg.items() if v is not None}
    if size is None:
        inp = p.get("input_size", [3, 224, 224])
        if not (isinstance(inp, (list, tuple)) and len(inp) == 3 and all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in inp)):
            raise err(where, f"setting 'pretrained_cfg.input_size' should be [channels, height, width], found {inp!r}")
        size = (int(inp[1]), int(inp[2]))
    crop_pct = want_number(where, "pretrained_cfg.crop_pct", p.get("crop_pct", 0.875), positive=True)
    interp = want_str(where, "pretrained_cfg.interpolation", p.get("interpolation", "bicubic"), _INTERPOLATIONS)
    mean = want_numbers(where, "pretrained_cfg.mean", p.get("mean", (0.5, 0.5, 0.5)))
    std = want_numbers(where, "pretrained_cfg.std", p.get("std", (0.5, 0.5, 0.5)), positive=True)
    if len(mean) != len(std):
        raise err(where, f"pretrained_cfg.mean has {len(mean)} values but pretrained_cfg.std has {len(std)}")
    mode = want_str(where, "pretrained_cfg.crop_mode", p.get("crop_mode", "center"), ("center", "squash", "border"))
    h, w = size
    if mode == "squash" or h != w:
        resize: int | tuple[int, int] = (int(math.floor(h / crop_pct)), int(math.floor(w / crop_pct)))
        if mode == "squash" or crop_pct >= 1:
            resize = size
        return Preprocess(resize=resize, crop=size, interpolation=interp, mean=mean, std=std)  # type: ignore[arg-type]
    return Preprocess.for_crop(h, crop_pct=min(crop_pct, 1.0), interpolation=interp,  # type: ignore[arg-type]
                               mean=mean, std=std)


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """``pretrained_cfg`` of a timm folder when present; else the guessed family's default (DeiT: ImageNet mean/std,
    crop 0.875; DeiT III and DINOv2: ImageNet, crop 1.0; CLIP: OpenAI's mean/std; SigLIP and plain ViTs: 0.5)."""
    tcfg = timm_config(raw)
    pcfg = tcfg.get("pretrained_cfg") if tcfg is not None else None
    if isinstance(pcfg, Mapping):
        where = os.path.join(raw.origin, "config.json")
        inp = pcfg.get("input_size")
        native = isinstance(inp, (list, tuple)) and len(inp) == 3 and tuple(inp[1:]) == tuple(cfg.img_size)
        return pretrained_preprocess(pcfg, where, None if native else cfg.img_size)
    family = "dino" if is_dino_v1_file(raw) else guess_family(cfg)
    if family in ("vit", "deit"):  # crop_pct 0.875 at 224 px, 1.0 above (timm's augreg / DeiT fine-tunes)
        return resolve_preprocess("imagenet" if family == "deit" else "inception", cfg.img_size)  # type: ignore
    return family_preprocess(family, cfg.img_size)

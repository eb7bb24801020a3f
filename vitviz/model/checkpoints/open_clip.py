"""open_clip (and OpenAI CLIP) state dicts: the image tower under ``visual.*`` (``conv1``, ``class_embedding``,
``positional_embedding``, ``ln_pre``, ``transformer.resblocks.N``, ``ln_post``, ``proj``); the text tower's keys are
ignored. No Qt.

The activation cannot be read from the tensors: QuickGELU for OpenAI's weights (their state dicts carry
``input_resolution`` / ``context_length``; an ``open_clip_config.json`` with ``model_cfg.quick_gelu``; a model name
with ``quickgelu`` or ``openai`` in the folder's config), GELU otherwise (LAION's open_clip models). LayerNorm eps 1e-5.
The number of heads is ``width / head_width`` of ``model_cfg.vision_cfg`` (open_clip's rule, ``head_width`` 64 when
it does not say: ViT-H-14 has width 1280 and head width 80, 16 heads); without a config, OpenAI's rule (width / 64).
Settings of ``vision_cfg`` that change the computation and that vitviz's ViT does not build (an attentional pooler,
pooling other than the [CLS] token, the final LayerNorm after pooling, sin-cos position embeddings, custom blocks,
a timm trunk) refuse the checkpoint with one line naming them.
Position embeddings at other sizes: bicubic with antialiasing (open_clip's ``resize_pos_embed`` uses bicubic
without; timm's open_clip loader resamples with antialiasing: we follow timm, the reference these tests check).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from vitviz.model.checkpoints.common import (
    TEXT_TOWER,
    Converted,
    RawCheckpoint,
    err,
    rename,
    want_bool,
    want_int,
    want_number,
    want_object,
)
from vitviz.model.preprocess import Preprocess
from vitviz.model.spec import family_preprocess
from vitviz.model.vit import ViTConfig

NAME = "open_clip"
DESCRIPTION = "open_clip / OpenAI CLIP (visual.class_embedding)"

V = r"(?:module\.)?visual\."
B = V + r"transformer\.resblocks\.(\d+)\."
RULES = [
    (V + r"conv1\.weight", "patch_embed.proj.weight"),
    (V + r"class_embedding", "cls_token"),
    (V + r"positional_embedding", "pos_embed"),
    (V + r"ln_pre\.(weight|bias)", r"norm_pre.\1"),
    (B + r"ln_(1|2)\.(weight|bias)", r"blocks.\1.norm\2.\3"),
    (B + r"attn\.in_proj_(weight|bias)", r"blocks.\1.attn.qkv.\2"),
    (B + r"attn\.out_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (B + r"ls_(1|2)\.gamma", r"blocks.\1.ls\2.gamma"),
    (B + r"mlp\.c_fc\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
    (B + r"mlp\.c_proj\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (V + r"ln_post\.(weight|bias)", r"norm.\1"),
    (V + r"proj", "head.weight"),
]
TEXT = {r"(?:module\.)?(?:transformer\..*|token_embedding\..*|positional_embedding|ln_final\..*|text_projection|"
        r"logit_scale|logit_bias|attn_mask|input_resolution|context_length|vocab_size|text\..*)": TEXT_TOWER}


def detect(raw: RawCheckpoint) -> bool:
    """``visual.class_embedding`` and ``visual.conv1.weight``."""
    keys = raw.tensors.keys()
    return any(k.endswith("visual.class_embedding") for k in keys) and any(k.endswith("visual.conv1.weight")
                                                                           for k in keys)


def quick_gelu(raw: RawCheckpoint) -> bool:
    """Whether the tower uses QuickGELU (see the module docstring)."""
    cfg = raw.hf_config
    if isinstance(cfg, Mapping):
        where = os.path.join(raw.origin, "open_clip_config.json")
        mc = cfg.get("model_cfg")
        if mc is not None:
            mc = want_object(where, "model_cfg", mc)
            if mc.get("quick_gelu") is not None:
                return want_bool(where, "model_cfg.quick_gelu", mc["quick_gelu"])
        name = str(cfg.get("model_name", cfg.get("architecture", "")))
        if "quickgelu" in name.lower() or "openai" in name.lower():
            return True
    if any(k in raw.tensors for k in ("input_resolution", "context_length")):  # OpenAI's own state dicts
        return True
    base = os.path.basename(raw.origin).lower()
    return "quickgelu" in base or "openai" in base


# vision_cfg settings vitviz's ViT does not build, with the value each must have (open_clip's default)
UNSUPPORTED = {"attentional_pool": False, "final_ln_after_pool": False, "pos_embed_type": "learnable",
               "pool_type": "tok", "timm_model_name": None, "qk_norm": False, "scaled_cosine_attn": False,
               "scale_heads": False, "scale_attn_inner": False, "scale_attn": False, "scale_fc": False}


def vision_cfg(raw: RawCheckpoint) -> dict[str, Any] | None:
    """``model_cfg.vision_cfg`` of the folder's ``open_clip_config.json`` (None without one)."""
    cfg = raw.hf_config
    if not isinstance(cfg, Mapping) or cfg.get("model_cfg") is None:
        return None
    where = os.path.join(raw.origin, "open_clip_config.json")
    mc = want_object(where, "model_cfg", cfg["model_cfg"])
    return want_object(where, "model_cfg.vision_cfg", mc.get("vision_cfg") or {})


def vision_settings(raw: RawCheckpoint, width: int) -> dict[str, Any]:
    """``num_heads`` (``width / head_width``) and the LayerNorm eps of ``vision_cfg``; refuses what is not built."""
    vc = vision_cfg(raw)
    if not vc:  # no config, or one that says nothing of the image tower
        return {}
    where = os.path.join(raw.origin, "open_clip_config.json")
    odd = [f"{k}={vc[k]!r}" for k, ok in UNSUPPORTED.items() if vc.get(k) not in (None, ok)]
    if vc.get("block_type") not in (None, "default"):
        odd.append(f"block_type={vc['block_type']!r}")
    if odd:
        raise err(where, f"open_clip image tower settings vitviz's ViT does not build: {', '.join(odd)}")
    out: dict[str, Any] = {}
    head_width = want_int(where, "model_cfg.vision_cfg.head_width", vc.get("head_width", 64))
    if "width" in vc and want_int(where, "model_cfg.vision_cfg.width", vc["width"]) != width:
        raise err(where, f"model_cfg.vision_cfg.width is {vc['width']} but the weights are {width} wide")
    if width % head_width:
        raise err(where, f"model_cfg.vision_cfg.head_width {head_width} does not divide the width {width}")
    out["num_heads"] = width // head_width
    norm = want_object(where, "model_cfg.vision_cfg.norm_kwargs", vc.get("norm_kwargs") or {})
    if "eps" in norm:
        out["layer_norm_eps"] = want_number(where, "model_cfg.vision_cfg.norm_kwargs.eps", norm["eps"], positive=True)
    act = want_object(where, "model_cfg.vision_cfg.act_kwargs", vc.get("act_kwargs") or {})
    if act.get("approximate", "none") not in ("none", "tanh") or set(act) - {"approximate"}:
        raise err(where, f"model_cfg.vision_cfg.act_kwargs {act!r}: vitviz builds GELU (exact or tanh) only")
    out["gelu_tanh"] = act.get("approximate") == "tanh"
    return out


def convert(raw: RawCheckpoint) -> Converted:
    c = rename(raw.tensors, RULES, TEXT)
    if "cls_token" in c.state:
        c.state["cls_token"] = c.state["cls_token"].reshape(1, 1, -1)
    if "pos_embed" in c.state and c.state["pos_embed"].ndim == 2:
        c.state["pos_embed"] = c.state["pos_embed"][None]
    if "head.weight" in c.state:
        c.state["head.weight"] = c.state["head.weight"].t()  # x @ proj: [D, E] -> Linear weight [E, D]
    width = c.state["patch_embed.proj.weight"].shape[0] if "patch_embed.proj.weight" in c.state else 0
    settings = vision_settings(raw, int(width)) if width else {}
    act = "quick_gelu" if quick_gelu(raw) else "gelu_tanh" if settings.get("gelu_tanh") else "gelu"
    c.config["options"] = {"act_layer": act, "pos_embed_interp": "timm"}
    c.config["layer_norm_eps"] = settings.get("layer_norm_eps", 1e-5)
    if "num_heads" in settings:
        c.config["num_heads"] = settings["num_heads"]
    return c


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """``preprocess_cfg`` of ``open_clip_config.json`` (mean, std, interpolation) if present, else CLIP's OpenAI
    mean/std, bicubic, resize to the input size and centre crop."""
    pre = family_preprocess("clip", cfg.img_size)
    pc: Any = (raw.hf_config or {}).get("preprocess_cfg") if isinstance(raw.hf_config, Mapping) else None
    if isinstance(pc, Mapping):
        from vitviz.model.checkpoints.timm import pretrained_preprocess

        where = os.path.join(raw.origin, "open_clip_config.json")
        merged = {"crop_pct": 1.0, "interpolation": pc.get("interpolation", "bicubic"),
                  "mean": pc.get("mean", list(pre.mean)), "std": pc.get("std", list(pre.std))}
        return pretrained_preprocess(merged, where, cfg.img_size)
    return pre

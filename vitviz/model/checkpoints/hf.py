"""Hugging Face ``transformers`` ViT (``ViTModel`` / ``ViTForImageClassification``): folders written by
``save_pretrained`` or bare weights; old (``encoder.layer``) and new (``layers``) key names. No Qt.

Every setting of ``config.json`` and ``preprocessor_config.json`` that is used is checked (type and range), and the
declared sizes (``hidden_size``, ``num_hidden_layers`` ...) against the tensors in the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from vitviz.model.checkpoints.common import (
    Converted,
    RawCheckpoint,
    bad_field,
    block_count,
    err,
    names,
    rename,
    want_bool,
    want_int,
    want_number,
    want_numbers,
    want_object,
    want_size,
    want_str,
)
from vitviz.model.vit import ViTConfig
from vitviz.preprocess import INCEPTION_MEAN, INCEPTION_STD, Preprocess

NAME = "hf"
DESCRIPTION = "Hugging Face (embeddings.patch_embeddings.projection)"

_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "bilinear", 5: "bicubic"}


def key_prefix(keys: Sequence[str]) -> str | None:
    """``"vit."`` (classification model), ``""`` (bare ``ViTModel``) or None (not HF)."""
    for prefix in ("vit.", ""):
        if f"{prefix}embeddings.patch_embeddings.projection.weight" in keys:
            return prefix
    return None


def detect(raw: RawCheckpoint) -> bool:
    """``[vit.]embeddings.patch_embeddings.projection.weight``."""
    return key_prefix(list(raw.tensors)) is not None


def _rules(p: str) -> list[tuple[str, str]]:
    old = p + r"encoder\.layer\.(\d+)\."
    new = p + r"layers\.(\d+)\."
    return [
        (p + r"embeddings\.patch_embeddings\.projection\.(weight|bias)", r"patch_embed.proj.\1"),
        (p + r"embeddings\.cls_token", "cls_token"),
        (p + r"embeddings\.position_embeddings", "pos_embed"),
        (old + r"attention\.output\.dense\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
        (old + r"layernorm_before\.(weight|bias)", r"blocks.\1.norm1.\2"),
        (old + r"layernorm_after\.(weight|bias)", r"blocks.\1.norm2.\2"),
        (old + r"intermediate\.dense\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
        (old + r"output\.dense\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
        (new + r"attention\.o_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
        (new + r"layernorm_before\.(weight|bias)", r"blocks.\1.norm1.\2"),
        (new + r"layernorm_after\.(weight|bias)", r"blocks.\1.norm2.\2"),
        (new + r"mlp\.fc1\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
        (new + r"mlp\.fc2\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
        (p + r"layernorm\.(weight|bias)", r"norm.\1"),
        (r"classifier\.(weight|bias)", r"head.\1"),
    ]


def convert(raw: RawCheckpoint) -> Converted:
    """Rename to our keys, fuse query/key/value into ``qkv``, and read ``config.json`` (heads, eps, labels)."""
    p = re.escape(key_prefix(list(raw.tensors)) or "")
    qkv_pats = [re.compile(p + r"encoder\.layer\.(\d+)\.attention\.attention\.(query|key|value)\.(weight|bias)"),
                re.compile(p + r"layers\.(\d+)\.attention\.(q|k|v)_proj\.(weight|bias)")]
    ignore = [p + r"embeddings\.mask_token", p + r"pooler\.dense\.(weight|bias)"]
    rest, parts = {}, {}
    for k, v in raw.tensors.items():
        m = next((pat.fullmatch(k) for pat in qkv_pats if pat.fullmatch(k)), None)
        if m:
            parts[(int(m.group(1)), m.group(3), m.group(2)[0])] = (k, v)  # (block, weight|bias, q|k|v)
        else:
            rest[k] = v
    c = rename(rest, _rules(p), ignore)
    for i, kind in sorted({(i, kind) for (i, kind, _) in parts}):  # kind: "weight" / "bias"
        trio = [parts.get((i, kind, w)) for w in "qkv"]
        if any(t is None for t in trio):
            have = [t[0] for t in trio if t is not None]
            raise err(raw.origin, f"missing keys: block {i} has only {names(have)} of query/key/value {kind}")
        name = f"blocks.{i}.attn.qkv.{kind}"
        try:
            c.state[name] = torch.cat([t[1] for t in trio], dim=0)
        except RuntimeError:
            shapes = [tuple(t[1].shape) for t in trio]
            raise err(raw.origin, f"shape mismatch: query/key/value {kind} of block {i} have shapes {shapes}") \
                from None
        c.source_names[name] = trio[0][0].replace("query", "query/key/value").replace("q_proj", "q/k/v_proj")
    if raw.hf_config:
        _read_config(raw.hf_config, os.path.join(raw.origin, "config.json"), c)
    else:
        c.config["layer_norm_eps"] = 1e-12  # transformers' ViTConfig default
    if raw.hf_preprocessor:
        preprocessor_settings(raw)  # checked now, used after loading
    return c


def _read_config(cfg: Mapping[str, Any], where: str, c: Converted) -> None:
    cfg = {k: v for k, v in cfg.items() if v is not None}  # null: not set
    act = want_str(where, "hidden_act", cfg.get("hidden_act", "gelu"))
    if act != "gelu":
        raise err(where, f"unsupported activation hidden_act={act!r} in config.json (vitviz uses exact GELU)")
    if "num_attention_heads" in cfg:
        c.config["num_heads"] = want_int(where, "num_attention_heads", cfg["num_attention_heads"])
    c.config["layer_norm_eps"] = want_number(where, "layer_norm_eps", cfg.get("layer_norm_eps", 1e-12), positive=True)
    _check_sizes(cfg, where, c)
    id2label = cfg.get("id2label")
    if id2label is None:
        return
    id2label = want_object(where, "id2label", id2label)
    bad = next((v for v in id2label.values() if not isinstance(v, str)), None)
    if bad is not None:
        raise bad_field(where, "id2label", "an object of class names (strings)", bad)
    if id2label:
        try:
            labels = [id2label[str(i)] for i in range(len(id2label))]
        except KeyError:
            labels = None
        if labels and not all(re.fullmatch(r"LABEL_\d+", s) for s in labels):
            c.config["labels"] = tuple(labels)


def _check_sizes(cfg: Mapping[str, Any], where: str, c: Converted) -> None:
    """The sizes config.json declares must agree with the tensors in the weights file."""
    s = c.state
    declared = {k: want_int(where, k, cfg[k], 0 if k == "num_hidden_layers" else 1)
                for k in ("hidden_size", "num_hidden_layers", "intermediate_size", "num_channels", "patch_size")
                if k in cfg}
    w, fc1, pe = s.get("patch_embed.proj.weight"), s.get("blocks.0.mlp.fc1.weight"), s.get("pos_embed")
    actual: dict[str, tuple[int | None, str]] = {
        "hidden_size": (int(w.shape[0]) if w is not None and w.ndim == 4 else None, "patch_embed.proj.weight"),
        "num_channels": (int(w.shape[1]) if w is not None and w.ndim == 4 else None, "patch_embed.proj.weight"),
        "patch_size": (int(w.shape[2]) if w is not None and w.ndim == 4 else None, "patch_embed.proj.weight"),
        "intermediate_size": (int(fc1.shape[0]) if fc1 is not None and fc1.ndim == 2 else None,
                              "blocks.0.mlp.fc1.weight"),
    }
    for k, v in declared.items():
        if k == "num_hidden_layers":
            if v != block_count(s):
                raise err(where, f"config.json declares num_hidden_layers={v}, but the weights hold "
                                 f"{block_count(s)} layers")
            continue
        have, key = actual[k]
        if have is not None and have != v:
            raise err(where, f"config.json declares {k}={v}, but {c.source_names.get(key, key)!r} has shape "
                             f"{tuple(s[key].shape)}")
    if "image_size" in cfg:
        img = want_size(where, "image_size", cfg["image_size"])
        h, wd = (img, img) if isinstance(img, int) else img
        patch = actual["patch_size"][0]
        if patch and pe is not None and pe.ndim == 3:
            slots = (h // patch) * (wd // patch) + int("cls_token" in s)
            if slots != int(pe.shape[1]):
                raise err(where, f"config.json declares image_size={cfg['image_size']} ({slots} position slots with "
                                 f"patch {patch}), but {c.source_names.get('pos_embed', 'pos_embed')!r} has shape "
                                 f"{tuple(pe.shape)}")


def preprocessor_settings(raw: RawCheckpoint) -> dict[str, Any]:
    """The used settings of ``preprocessor_config.json``, checked: size, crop, resample, mean, std, flags."""
    pp = {k: v for k, v in (raw.hf_preprocessor or {}).items() if v is not None}  # null: not set
    where = os.path.join(raw.origin, "preprocessor_config.json")
    out: dict[str, Any] = {}
    for flag in ("do_resize", "do_center_crop", "do_normalize"):
        if flag in pp:
            out[flag] = want_bool(where, flag, pp[flag])
    for key in ("size", "crop_size"):
        if key not in pp:
            continue
        v = pp[key]
        if isinstance(v, Mapping):
            if "height" in v and "width" in v:
                out[key] = (want_int(where, f"{key}.height", v["height"]), want_int(where, f"{key}.width", v["width"]))
            elif "shortest_edge" in v and key == "size":
                out[key] = want_int(where, f"{key}.shortest_edge", v["shortest_edge"])
            elif key == "crop_size":
                raise bad_field(where, key, "an integer or {height, width}", v)
        elif key == "size" and isinstance(v, float) and not isinstance(v, bool) and v.is_integer() and v > 0:
            out[key] = (int(v), int(v))
        else:
            n = want_int(where, key, v)
            out[key] = (n, n)
    if "resample" in pp:
        out["resample"] = _RESAMPLE.get(want_int(where, "resample", pp["resample"], 0), "bilinear")
    for key in ("image_mean", "image_std"):
        if key in pp:
            v = pp[key]
            if not isinstance(v, (list, tuple)):
                v = [want_number(where, key, v, positive=key == "image_std")] * 3
            out[key] = want_numbers(where, key, v, positive=key == "image_std")
    if len(out.get("image_mean", INCEPTION_MEAN)) != len(out.get("image_std", INCEPTION_STD)):
        raise err(where, f"image_mean has {len(out.get('image_mean', INCEPTION_MEAN))} values but image_std has "
                         f"{len(out.get('image_std', INCEPTION_STD))}")
    return out


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """``preprocessor_config.json`` if present, else resize to the input size, bilinear, mean = std = 0.5."""
    size = cfg.img_size
    if not raw.hf_preprocessor:
        return Preprocess(resize=size, crop=size, interpolation="bilinear", mean=INCEPTION_MEAN, std=INCEPTION_STD)
    pp = preprocessor_settings(raw)
    rs = pp.get("size", size) if pp.get("do_resize", True) else size
    crop = pp.get("crop_size", size) if pp.get("do_center_crop") else size
    normalize = pp.get("do_normalize", True)
    mean = pp.get("image_mean", INCEPTION_MEAN) if normalize else (0.0,) * 3
    std = pp.get("image_std", INCEPTION_STD) if normalize else (1.0,) * 3
    return Preprocess(resize=rs, crop=crop, interpolation=pp.get("resample", "bilinear"),  # type: ignore[arg-type]
                      mean=mean, std=std)

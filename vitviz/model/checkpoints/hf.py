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
    MASK_TOKEN,
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
from vitviz.model.preprocess import INCEPTION_MEAN, INCEPTION_STD, Preprocess
from vitviz.model.spec import family_preprocess
from vitviz.model.vit import ViTConfig

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


QKV = re.compile(r"(?P<block>\d+)\.(?:attention\.attention\.|attention\.|self_attn\.)"
                 r"(?P<which>query|key|value|q_proj|k_proj|v_proj)\.(?P<kind>weight|bias)")


def fuse_qkv(raw: RawCheckpoint, block_prefix: str, rules: Sequence[tuple[str, str]],
             ignore: Mapping[str, str] | None = None,
             *, zero_k_bias: bool = False) -> Converted:
    """Rename with ``rules`` and fuse each block's separate query / key / value projections into ``qkv``.

    Args:
        raw: the checkpoint.
        block_prefix: regex of what precedes the block index (``"vit\\.encoder\\.layer\\."``).
        rules, ignore: as :func:`rename`.
        zero_k_bias: BEiT: the key projection has no bias; ``qkv.bias`` gets zeros for its key part.
    """
    pat = re.compile(block_prefix + QKV.pattern)
    rest, parts = {}, {}
    for k, v in raw.tensors.items():
        m = pat.fullmatch(k)
        if m:
            parts[(int(m.group("block")), m.group("kind"), m.group("which")[0])] = (k, v)  # (block, kind, q|k|v)
        else:
            rest[k] = v
    c = rename(rest, rules, ignore)
    for i, kind in sorted({(i, kind) for (i, kind, _) in parts}):  # kind: "weight" / "bias"
        trio = [parts.get((i, kind, w)) for w in "qkv"]
        if zero_k_bias and kind == "bias" and trio[1] is None and trio[0] is not None and trio[2] is not None:
            trio[1] = (trio[0][0].replace("query", "key").replace("q_proj", "k_proj") + " (none: zeros)",
                       torch.zeros_like(trio[0][1]))
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
        c.consume(*(t[0] for t in trio))
    return c


def convert(raw: RawCheckpoint) -> Converted:
    """Rename to our keys, fuse query/key/value into ``qkv``, and read ``config.json`` (heads, eps, labels).
    The position embedding is resampled as transformers' ``ViTEmbeddings.interpolate_pos_encoding`` does (bicubic,
    no antialiasing), for DINO's HF checkpoints too."""
    prefix = key_prefix(list(raw.tensors)) or ""
    p = re.escape(prefix)
    ignore = {p + r"embeddings\.mask_token": MASK_TOKEN,
              p + r"pooler\.dense\.(weight|bias)": "ViTModel's pooler (dense + tanh on [CLS]): vitviz returns the "
                                                   "features before it, as ViTForImageClassification reads them"}
    c = fuse_qkv(raw, p + r"(?:encoder\.layer|layers)\.", _rules(p), ignore)
    c.config["options"] = {"pos_embed_interp": "bicubic"}
    if raw.hf_config:
        _read_config(raw.hf_config, os.path.join(raw.origin, "config.json"), c)
    else:
        c.config["layer_norm_eps"] = 1e-12  # transformers' ViTConfig default
    if raw.hf_preprocessor:
        preprocessor_settings(raw)  # checked now, used after loading
    return c


def finish(raw: RawCheckpoint, c: Converted, options: dict[str, Any], eps: float, *, vision: bool = False,
           labels: bool = False) -> Converted:
    """The last step every Hugging Face family shares: the layout's options and LayerNorm eps, then what
    ``config.json`` says over them (the ``vision_config`` of a two-tower config with ``vision``; class names with
    ``labels``), and ``preprocessor_config.json`` checked now (used after loading)."""
    if "pos_embed" in c.state and c.state["pos_embed"].ndim == 2:  # an nn.Embedding's weight [N, D]
        c.state["pos_embed"] = c.state["pos_embed"][None]
    c.config["options"] = dict(options)
    c.config["layer_norm_eps"] = eps
    if raw.hf_config:
        where = os.path.join(raw.origin, "config.json")
        cfg: Mapping[str, Any] = raw.hf_config
        if vision and cfg.get("vision_config") is not None:
            cfg = want_object(where, "vision_config", cfg["vision_config"])
        cfg = read_common(cfg, where, c, eps)
        if labels:
            read_labels(cfg, where, c)
    if raw.hf_preprocessor:
        preprocessor_settings(raw)
    return c


def hf_activation(where: str, cfg: Mapping[str, Any]) -> str:
    """``hidden_act`` of a transformers config as a ViT ``act_layer``."""
    act = want_str(where, "hidden_act", cfg.get("hidden_act", "gelu"))
    mapped = {"gelu": "gelu", "quick_gelu": "quick_gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
              "gelu_fast": "gelu_tanh"}.get(act)
    if mapped is None:
        raise err(where, f"unsupported activation hidden_act={act!r} in config.json (supported: gelu, quick_gelu, "
                         "gelu_pytorch_tanh)")
    return mapped


def read_common(cfg: Mapping[str, Any], where: str, c: Converted, default_eps: float) -> dict[str, Any]:
    """The settings every transformers vision config shares: ``hidden_act``, ``num_attention_heads``,
    ``layer_norm_eps``, ``image_size`` (checked); returns the config with nulls dropped."""
    cfg = {k: v for k, v in cfg.items() if v is not None}
    c.config.setdefault("options", {})["act_layer"] = hf_activation(where, cfg)
    if "num_attention_heads" in cfg:
        c.config["num_heads"] = want_int(where, "num_attention_heads", cfg["num_attention_heads"])
    c.config["layer_norm_eps"] = want_number(where, "layer_norm_eps", cfg.get("layer_norm_eps", default_eps),
                                             positive=True)
    if "image_size" in cfg:
        want_size(where, "image_size", cfg["image_size"])
    return cfg


def _read_config(cfg: Mapping[str, Any], where: str, c: Converted) -> None:
    cfg = read_common(cfg, where, c, 1e-12)  # null: not set
    _check_sizes(cfg, where, c)
    read_labels(cfg, where, c)


def read_labels(cfg: Mapping[str, Any], where: str, c: Converted) -> None:
    """Class names from ``id2label`` (ignoring transformers' placeholder ``LABEL_<i>`` names)."""
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


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint, family: str | None = None) -> Preprocess:
    """``preprocessor_config.json`` if present, else the ``family``'s documented default
    (:data:`vitviz.model.spec.FAMILY_PREPROCESS`), else resize to the input size, bilinear, mean = std = 0.5."""
    size = cfg.img_size
    if not raw.hf_preprocessor:
        if family is not None:
            return family_preprocess(family, size)
        return Preprocess(resize=size, crop=size, interpolation="bilinear", mean=INCEPTION_MEAN, std=INCEPTION_STD)
    pp = preprocessor_settings(raw)
    rs = pp.get("size", size) if pp.get("do_resize", True) else size
    crop = pp.get("crop_size", size) if pp.get("do_center_crop") else size
    normalize = pp.get("do_normalize", True)
    mean = pp.get("image_mean", INCEPTION_MEAN) if normalize else (0.0,) * 3
    std = pp.get("image_std", INCEPTION_STD) if normalize else (1.0,) * 3
    return Preprocess(resize=rs, crop=crop, interpolation=pp.get("resample", "bilinear"),  # type: ignore[arg-type]
                      mean=mean, std=std)

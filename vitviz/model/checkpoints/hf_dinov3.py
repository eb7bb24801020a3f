"""Hugging Face ``DINOv3ViTModel`` folders (``facebook/dinov3-vit*-pretrain-*``, transformers' ``save_pretrained``).
No Qt.

``embeddings.cls_token`` / ``register_tokens`` / ``patch_embeddings`` (a Conv2d), ``[model.]layer.{i}.attention.
{q,k,v,o}_proj`` (no key bias by default: ``key_bias``), ``layer_scale{1,2}.lambda1``, ``mlp.up_proj / down_proj``
(GELU) or ``mlp.gate_proj / up_proj / down_proj`` (``use_gated_mlp``: SiLU-gated, packed into vitviz's SwiGLU),
``norm``. No absolute position embedding: the DINOv3 rotary embedding (``rope_theta``, patch centres in (-1, 1),
halves rotated; transformers' ``DINOv3ViTRopePositionEmbedding``) on the patch rows of q and k. The pooled output is
the [CLS] token after the final norm (``pooler_output``). ``mask_token`` is pre-training only. The coordinate
augmentations of the config (``pos_embed_shift / jitter / rescale``) act in training only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import torch

from vitviz.model.checkpoints import hf
from vitviz.model.checkpoints.common import (
    MASK_TOKEN,
    Converted,
    RawCheckpoint,
    err,
    rename,
    want_bool,
    want_int,
    want_number,
    want_size,
    want_str,
)
from vitviz.model.preprocess import Preprocess
from vitviz.model.vit import ViTConfig

NAME = "hf-dinov3"
DESCRIPTION = "Hugging Face DINOv3ViTModel (embeddings.register_tokens, model.layer.*.attention.q_proj)"

L = r"(?:model\.)?layer\.(\d+)\."  # ``layer.{i}`` on the Hub, ``model.layer.{i}`` in the module
RULES = [
    (r"embeddings\.patch_embeddings\.(weight|bias)", r"patch_embed.proj.\1"),
    (r"embeddings\.cls_token", "cls_token"),
    (r"embeddings\.register_tokens", "reg_token"),
    (L + r"norm(1|2)\.(weight|bias)", r"blocks.\1.norm\2.\3"),
    (L + r"attention\.o_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (L + r"layer_scale(1|2)\.lambda1", r"blocks.\1.ls\2.gamma"),
    (L + r"mlp\.down_proj\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (r"norm\.(weight|bias)", r"norm.\1"),
]
_QKV = re.compile(L + r"attention\.(q|k|v)_proj\.(weight|bias)")
_MLP_IN = re.compile(L + r"mlp\.(gate_proj|up_proj)\.(weight|bias)")


def detect(raw: RawCheckpoint) -> bool:
    """``embeddings.patch_embeddings.weight`` and ``model.layer.0.attention.q_proj.weight``, or config.json's
    ``model_type`` ``dinov3_vit``."""
    cfg = raw.hf_config if isinstance(raw.hf_config, Mapping) else {}
    keys = raw.tensors.keys()
    return cfg.get("model_type") == "dinov3_vit" or ("embeddings.patch_embeddings.weight" in keys and any(
        k in keys for k in ("layer.0.attention.q_proj.weight", "model.layer.0.attention.q_proj.weight")))


def convert(raw: RawCheckpoint) -> Converted:
    t = raw.tensors
    where = os.path.join(raw.origin, "config.json")
    cfg: Mapping[str, Any] = {k: v for k, v in (raw.hf_config or {}).items() if v is not None}
    rest = {k: v for k, v in t.items() if not _QKV.fullmatch(k) and not _MLP_IN.fullmatch(k)}
    c = rename(rest, RULES, {r"embeddings\.mask_token": MASK_TOKEN})
    qkv: dict[tuple[int, str], dict[str, tuple[str, torch.Tensor]]] = {}
    for k, v in t.items():
        if m := _QKV.fullmatch(k):
            qkv.setdefault((int(m.group(1)), m.group(3)), {})[m.group(2)] = (k, v)
    for (i, kind), d in sorted(qkv.items()):
        if kind == "weight" and set(d) != set("qkv"):
            raise err(raw.origin, f"missing keys: block {i} has only {sorted(d)} of its q/k/v projections")
        ref = next(iter(d.values()))[1]
        c.state[f"blocks.{i}.attn.qkv.{kind}"] = torch.cat([d[w][1] if w in d else torch.zeros_like(ref)
                                                             for w in "qkv"])
        c.source_names[f"blocks.{i}.attn.qkv.{kind}"] = f"model.layer.{i}.attention.q/k/v_proj.{kind}" + (
            f" (zeros for {', '.join(w for w in 'qkv' if w not in d)})" if len(d) < 3 else "")
        c.consume(*(x[0] for x in d.values()))
    mlp: dict[tuple[int, str], dict[str, tuple[str, torch.Tensor]]] = {}
    for k, v in t.items():
        if m := _MLP_IN.fullmatch(k):
            mlp.setdefault((int(m.group(1)), m.group(3)), {})[m.group(2)] = (k, v)
    gated = any("gate_proj" in d for d in mlp.values())
    for (i, kind), d in sorted(mlp.items()):
        if gated and set(d) != {"gate_proj", "up_proj"}:
            raise err(raw.origin, f"missing keys: block {i} has only {sorted(d)} of its gated MLP {kind}")
        parts = [d["gate_proj"], d["up_proj"]] if gated else [d["up_proj"]]
        c.state[f"blocks.{i}.mlp.fc1.{kind}"] = torch.cat([p[1] for p in parts])
        c.source_names[f"blocks.{i}.mlp.fc1.{kind}"] = "/".join(p[0] for p in parts)
        c.consume(*(p[0] for p in parts))
    act = want_str(where, "hidden_act", cfg.get("hidden_act", "silu" if gated else "gelu"))
    if cfg.get("use_gated_mlp") is not None and want_bool(where, "use_gated_mlp", cfg["use_gated_mlp"]) != gated:
        raise err(where, f"use_gated_mlp={cfg['use_gated_mlp']} but the weights {'have' if gated else 'lack'} "
                         "mlp.gate_proj")
    if gated and act != "silu":
        raise err(where, f"a gated MLP with hidden_act={act!r}: vitviz's SwiGLU gates with SiLU only")
    options: dict[str, Any] = dict(
        rope="dinov3", rope_theta=want_number(where, "rope_theta", cfg.get("rope_theta", 100.0), positive=True),
        rope_half=True, pos_embed="none", global_pool="token", fc_norm=False,
        mlp_layer="swiglu" if gated else "mlp", qkv_bias=any(k.endswith("bias") for k in c.state if ".attn.qkv" in k),
    )
    if not gated:
        options["act_layer"] = hf.hf_activation(where, {"hidden_act": act})
    c.config["options"] = options
    c.config["layer_norm_eps"] = want_number(where, "layer_norm_eps", cfg.get("layer_norm_eps", 1e-5), positive=True)
    if "num_attention_heads" in cfg:
        c.config["num_heads"] = want_int(where, "num_attention_heads", cfg["num_attention_heads"])
    size = want_size(where, "image_size", cfg.get("image_size", 224))
    c.config["image_size"] = (size, size) if isinstance(size, int) else size
    if raw.hf_preprocessor:
        hf.preprocessor_settings(raw)
    return c


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """``preprocessor_config.json`` if present, else DINOv2's / DINOv3's: ImageNet mean/std, bicubic, crop 1.0."""
    return hf.default_preprocess(cfg, raw, "dinov2")

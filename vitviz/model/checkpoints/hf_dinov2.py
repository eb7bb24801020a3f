"""Hugging Face ``Dinov2Model`` and ``Dinov2WithRegistersModel`` (``facebook/dinov2-*``,
``facebook/dinov2-with-registers-*``): LayerScale (``layer_scale{1,2}.lambda1``), registers, and the giant's SwiGLU
(``mlp.weights_in`` / ``weights_out``, or ``gate_proj`` / ``up_proj`` / ``down_proj``) packed into timm's ``fc1``.
No Qt.

The registers are inserted after the position embedding is added to ``[CLS] + patches``: the [CLS] slot is folded
into the [CLS] token and the model gets ``no_embed_class`` (timm's conversion, exact). Position embeddings at other
input sizes are resampled as transformers does: bicubic for ``Dinov2Model``, bicubic with antialiasing for
``Dinov2WithRegistersModel`` (DINOv2's register models do the same).
"""

from __future__ import annotations

import os
import re

import torch

from vitviz.model.checkpoints import hf
from vitviz.model.checkpoints.common import MASK_TOKEN, Converted, RawCheckpoint, err, want_bool
from vitviz.model.preprocess import Preprocess
from vitviz.model.vit import ViTConfig

NAME = "hf-dinov2"
DESCRIPTION = "Hugging Face DINOv2 (embeddings.mask_token + layer_scale1)"

PREFIXES = ("", "dinov2.", "dinov2_with_registers.")


def key_prefix(keys) -> str | None:
    keys = set(keys)
    for p in PREFIXES:
        if f"{p}embeddings.patch_embeddings.projection.weight" in keys and \
                f"{p}encoder.layer.0.layer_scale1.lambda1" in keys:
            return p
    return None


def detect(raw: RawCheckpoint) -> bool:
    """``[dinov2.]embeddings.patch_embeddings.projection.weight`` and ``encoder.layer.0.layer_scale1.lambda1``."""
    return key_prefix(raw.tensors) is not None


def _rules(p: str) -> list[tuple[str, str]]:
    L = p + r"encoder\.layer\.(\d+)\."
    return [
        (p + r"embeddings\.patch_embeddings\.projection\.(weight|bias)", r"patch_embed.proj.\1"),
        (p + r"embeddings\.cls_token", "cls_token"),
        (p + r"embeddings\.register_tokens", "reg_token"),
        (p + r"embeddings\.position_embeddings", "pos_embed"),
        (L + r"norm(1|2)\.(weight|bias)", r"blocks.\1.norm\2.\3"),
        (L + r"attention\.(?:output\.dense|o_proj)\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
        (L + r"layer_scale(1|2)\.lambda1", r"blocks.\1.ls\2.gamma"),
        (L + r"mlp\.(?:fc1|weights_in)\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
        (L + r"mlp\.(?:fc2|weights_out|down_proj)\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
        (p + r"layernorm\.(weight|bias)", r"norm.\1"),
    ]


def convert(raw: RawCheckpoint) -> Converted:
    """Rename, fuse q/k/v, pack a split SwiGLU, fold the [CLS] position slot of register models; config.json."""
    prefix = key_prefix(raw.tensors) or ""
    p = re.escape(prefix)
    gate_up = re.compile(p + r"encoder\.layer\.(\d+)\.mlp\.(gate_proj|up_proj)\.(weight|bias)")
    tensors = {k: v for k, v in raw.tensors.items() if not gate_up.fullmatch(k)}
    split = {(int(m.group(1)), m.group(2), m.group(3)): (k, v) for k, v in raw.tensors.items()
             if (m := gate_up.fullmatch(k))}
    c = hf.fuse_qkv(RawCheckpoint(tensors, raw.origin, raw.container), p + r"encoder\.layer\.", _rules(p),
                    {p + r"embeddings\.mask_token": MASK_TOKEN})
    for i, kind in sorted({(i, kind) for (i, _, kind) in split}):
        gate, up = split.get((i, "gate_proj", kind)), split.get((i, "up_proj", kind))
        if gate is None or up is None:
            raise err(raw.origin, f"missing keys: block {i} has only one of mlp.gate_proj / mlp.up_proj {kind}")
        c.state[f"blocks.{i}.mlp.fc1.{kind}"] = torch.cat([gate[1], up[1]], dim=0)  # silu(gate) * up
        c.source_names[f"blocks.{i}.mlp.fc1.{kind}"] = gate[0].replace("gate_proj", "gate_proj/up_proj")
        c.consume(gate[0], up[0])
    registers = "reg_token" in c.state
    if registers and "pos_embed" in c.state and "cls_token" in c.state:
        pe = c.state["pos_embed"]
        c.state["cls_token"] = c.state["cls_token"] + pe[:, :1]
        c.state["pos_embed"] = pe[:, 1:]
    if isinstance(raw.hf_config, dict) and raw.hf_config.get("use_swiglu_ffn") is not None:
        want_bool(os.path.join(raw.origin, "config.json"), "use_swiglu_ffn", raw.hf_config["use_swiglu_ffn"])
    options = {"pos_embed_interp": "timm" if registers else "bicubic", "act_layer": "gelu",
               "no_embed_class": registers}
    return hf.finish(raw, c, options, 1e-6, labels=True)


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """``preprocessor_config.json`` if present, else DINOv2's: ImageNet mean/std, bicubic, crop 1.0."""
    return hf.default_preprocess(cfg, raw, "dinov2")

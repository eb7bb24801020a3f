"""Hugging Face CLIP image towers: ``CLIPVisionModel``, ``CLIPVisionModelWithProjection`` and the vision half of a
full ``CLIPModel`` (``openai/clip-vit-*``, LAION's HF exports); the text tower's keys are ignored. No Qt.

``class_embedding`` -> [CLS], ``pre_layrnorm`` -> ``norm_pre``, the patch projection has no bias, ``post_layernorm``
-> ``norm``, ``visual_projection`` -> a bias-free head (the model then returns CLIP's image embedding; without it, the
pooled [CLS] features). ``hidden_act`` (``quick_gelu`` for OpenAI's weights) and ``layer_norm_eps`` come from
``config.json`` (a ``CLIPConfig``'s ``vision_config`` too); without a config the weights are refused (OpenAI's
use QuickGELU, LAION's GELU, with the same keys).
Position embeddings at other sizes: bicubic without antialiasing (transformers' ``interpolate_pos_encoding``).
"""

from __future__ import annotations

import re

from vitviz.model.checkpoints import hf
from vitviz.model.checkpoints.common import INDEX_BUFFER, TEXT_TOWER, Converted, RawCheckpoint, err
from vitviz.model.preprocess import Preprocess
from vitviz.model.vit import ViTConfig

NAME = "hf-clip"
DESCRIPTION = "Hugging Face CLIP ([vision_model.]embeddings.class_embedding)"

PREFIXES = ("vision_model.", "")
TEXT = {r"text_model\..*": TEXT_TOWER, r"text_projection\.weight": TEXT_TOWER, r"logit_scale": TEXT_TOWER,
        r"(?:vision_model\.)?embeddings\.position_ids": INDEX_BUFFER}


def key_prefix(keys) -> str | None:
    keys = set(keys)
    for p in PREFIXES:
        if f"{p}embeddings.class_embedding" in keys and f"{p}embeddings.patch_embedding.weight" in keys:
            return p
    return None


def detect(raw: RawCheckpoint) -> bool:
    """``[vision_model.]embeddings.class_embedding`` and ``embeddings.patch_embedding.weight``."""
    return key_prefix(raw.tensors) is not None


def encoder_rules(p: str) -> list[tuple[str, str]]:
    """CLIP / SigLIP encoder layers (``encoder.layers.N.{layer_norm1,self_attn.out_proj,layer_norm2,mlp}``)."""
    L = p + r"encoder\.layers\.(\d+)\."
    return [
        (L + r"layer_norm(1|2)\.(weight|bias)", r"blocks.\1.norm\2.\3"),
        (L + r"self_attn\.(?:out_proj|o_proj)\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
        (L + r"mlp\.fc(1|2)\.(weight|bias)", r"blocks.\1.mlp.fc\2.\3"),
        (p + r"post_layernorm\.(weight|bias)", r"norm.\1"),
    ]


def convert(raw: RawCheckpoint) -> Converted:
    if not raw.hf_config:  # OpenAI's weights use QuickGELU, LAION's GELU: the same keys
        raise err(raw.origin, "a Hugging Face CLIP image tower without its config.json: its MLP activation (GELU, or "
                              "OpenAI's QuickGELU: 'hidden_act') is in no tensor; open the folder with its config.json")
    p = re.escape(key_prefix(raw.tensors) or "")
    rules = [
        (p + r"embeddings\.class_embedding", "cls_token"),
        (p + r"embeddings\.patch_embedding\.weight", "patch_embed.proj.weight"),
        (p + r"embeddings\.position_embedding\.weight", "pos_embed"),
        (p + r"pre_layrnorm\.(weight|bias)", r"norm_pre.\1"),
        *encoder_rules(p),
        (r"visual_projection\.weight", "head.weight"),
    ]
    c = hf.fuse_qkv(raw, p + r"encoder\.layers\.", rules, TEXT)
    if "cls_token" in c.state:
        c.state["cls_token"] = c.state["cls_token"].reshape(1, 1, -1)
    return hf.finish(raw, c, {"pos_embed_interp": "bicubic", "act_layer": "quick_gelu"}, 1e-5, vision=True)


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """``preprocessor_config.json`` if present, else CLIP's: OpenAI mean/std, bicubic, crop 1.0."""
    return hf.default_preprocess(cfg, raw, "clip")

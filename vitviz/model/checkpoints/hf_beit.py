"""Hugging Face BEiT / BEiT v2 and data2vec-vision (``BeitModel``, ``BeitForImageClassification``,
``Data2VecVisionModel`` ...; ``microsoft/beit-*``, ``facebook/data2vec-vision-*``). No Qt.

The key projection has no bias (``qkv.bias`` gets zeros for its key part); ``lambda_1`` / ``lambda_2`` -> LayerScale;
the relative position bias per layer (``attention.attention.relative_position_bias``) or shared
(``encoder.relative_position_bias``); mean pooling with ``pooler.layernorm`` (-> ``fc_norm``) or the [CLS] token after
``layernorm``. At other input sizes the relative-position tables are resized bilinearly and the absolute position
embedding (where used) bicubically, as transformers does.
"""

from __future__ import annotations

import re

from vitviz.model.checkpoints import hf
from vitviz.model.checkpoints.common import INDEX_BUFFER, MASK_TOKEN, Converted, RawCheckpoint, err
from vitviz.model.preprocess import Preprocess
from vitviz.model.vit import ViTConfig

NAME = "hf-beit"
DESCRIPTION = "Hugging Face BEiT / data2vec-vision (lambda_1 or relative_position_bias)"

PREFIXES = ("beit.", "data2vec_vision.", "")


def key_prefix(keys) -> str | None:
    keys = set(keys)
    for p in PREFIXES:
        if f"{p}embeddings.patch_embeddings.projection.weight" not in keys:
            continue
        if any(k.startswith(p) and (".lambda_1" in k or "relative_position_bias_table" in k) for k in keys) or (
                f"{p}embeddings.cls_token" in keys and f"{p}embeddings.position_embeddings" not in keys):
            return p
    return None


def detect(raw: RawCheckpoint) -> bool:
    """A Hugging Face patch embedding with BEiT's LayerScale (``lambda_1``) or relative position tables."""
    return key_prefix(raw.tensors) is not None


def _rules(p: str) -> list[tuple[str, str]]:
    L = p + r"(?:encoder\.layer|layers)\.(\d+)\."
    return [
        (p + r"embeddings\.patch_embeddings\.projection\.(weight|bias)", r"patch_embed.proj.\1"),
        (p + r"embeddings\.cls_token", "cls_token"),
        (p + r"embeddings\.position_embeddings", "pos_embed"),
        (L + r"(?:attention\.attention\.|attention\.|)relative_position_bias\.relative_position_bias_table",
         r"blocks.\1.attn.relative_position_bias_table"),
        (L + r"(?:attention\.output\.dense|attention\.o_proj)\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
        (L + r"layernorm_before\.(weight|bias)", r"blocks.\1.norm1.\2"),
        (L + r"layernorm_after\.(weight|bias)", r"blocks.\1.norm2.\2"),
        (L + r"(?:intermediate\.dense|mlp\.fc1)\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
        (L + r"(?:output\.dense|mlp\.fc2)\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
        (L + r"lambda_(1|2)", r"blocks.\1.ls\2.gamma"),
        (p + r"(?:encoder\.)?relative_position_bias\.relative_position_bias_table",
         "rel_pos_bias.relative_position_bias_table"),
        (p + r"pooler\.layernorm\.(weight|bias)", r"fc_norm.\1"),
        (p + r"layernorm\.(weight|bias)", r"norm.\1"),
        (r"classifier\.(weight|bias)", r"head.\1"),
    ]


def convert(raw: RawCheckpoint) -> Converted:
    prefix = key_prefix(raw.tensors) or ""
    p = re.escape(prefix)
    ignore = {p + r"embeddings\.mask_token": MASK_TOKEN, r".*relative_position_index": INDEX_BUFFER}
    c = hf.fuse_qkv(raw, p + r"(?:encoder\.layer|layers)\.", _rules(p), ignore, zero_k_bias=True)
    if "norm.weight" not in c.state and "fc_norm.weight" not in c.state:
        raise err(raw.origin, "a BEiT / data2vec-vision checkpoint without its final LayerNorm: with mean pooling "
                  "that norm lives in the pooler (pooler.layernorm), and this file was saved without it "
                  "(add_pooling_layer=False); save the model with its pooling layer, e.g. "
                  "Data2VecVisionModel.from_pretrained(..., add_pooling_layer=True).save_pretrained(...)")
    options = {"pos_embed_interp": "bicubic", "rel_pos_interp": "bilinear", "act_layer": "gelu"}
    return hf.finish(raw, c, options, 1e-12, labels=True)


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """``preprocessor_config.json`` if present, else BEiT's: mean = std = 0.5, bicubic, crop 0.9."""
    return hf.default_preprocess(cfg, raw, "beit")

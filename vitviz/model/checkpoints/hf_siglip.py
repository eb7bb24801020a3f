"""Hugging Face SigLIP image towers: ``SiglipVisionModel`` and the vision half of a ``SiglipModel``
(``google/siglip-*``). No class token; the attention-pooling head (``head.probe``, ``head.attention`` as one
``in_proj``, ``head.layernorm``, ``head.mlp``) becomes the model's "MAP" pool
(:class:`~vitviz.model.layers.AttentionPool`).
``hidden_act`` ``gelu_pytorch_tanh`` -> GELU (tanh). Position embeddings at other sizes: bicubic without antialiasing
(transformers' ``interpolate_pos_encoding``). No Qt.
"""

from __future__ import annotations

import re

from vitviz.model.checkpoints import hf
from vitviz.model.checkpoints.common import INDEX_BUFFER, TEXT_TOWER, Converted, RawCheckpoint, err
from vitviz.model.checkpoints.hf_clip import encoder_rules
from vitviz.model.preprocess import Preprocess
from vitviz.model.vit import ViTConfig

NAME = "hf-siglip"
DESCRIPTION = "Hugging Face SigLIP (embeddings.patch_embedding, no class embedding)"

PREFIXES = ("vision_model.", "")
TEXT = {r"text_model\..*": TEXT_TOWER, r"logit_scale": TEXT_TOWER, r"logit_bias": TEXT_TOWER,
        r"(?:vision_model\.)?embeddings\.position_ids": INDEX_BUFFER}


def key_prefix(keys) -> str | None:
    keys = set(keys)
    for p in PREFIXES:
        if f"{p}embeddings.patch_embedding.weight" in keys and f"{p}embeddings.class_embedding" not in keys \
                and f"{p}encoder.layers.0.layer_norm1.weight" in keys:
            return p
    return None


def detect(raw: RawCheckpoint) -> bool:
    """``[vision_model.]embeddings.patch_embedding.weight`` and ``encoder.layers.*`` without a class embedding."""
    return key_prefix(raw.tensors) is not None


def convert(raw: RawCheckpoint) -> Converted:
    prefix = key_prefix(raw.tensors) or ""
    p = re.escape(prefix)
    rules = [
        (p + r"embeddings\.patch_embedding\.(weight|bias)", r"patch_embed.proj.\1"),
        (p + r"embeddings\.position_embedding\.weight", "pos_embed"),
        *encoder_rules(p),
        (p + r"head\.probe", "attn_pool.latent"),
        (p + r"head\.attention\.out_proj\.(weight|bias)", r"attn_pool.proj.\1"),
        (p + r"head\.layernorm\.(weight|bias)", r"attn_pool.norm.\1"),
        (p + r"head\.mlp\.fc(1|2)\.(weight|bias)", r"attn_pool.mlp.fc\1.\2"),
    ]
    in_proj = {k: raw.tensors.get(f"{prefix}head.attention.in_proj_{k}") for k in ("weight", "bias")}
    tensors = {k: v for k, v in raw.tensors.items() if not k.startswith(f"{prefix}head.attention.in_proj_")}
    c = hf.fuse_qkv(RawCheckpoint(tensors, raw.origin, raw.container), p + r"encoder\.layers\.", rules, TEXT)
    for kind, t in in_proj.items():  # nn.MultiheadAttention's packed [q; k; v]: q for the probe, k and v for kv
        if t is None:
            continue
        D = t.shape[0] // 3
        if t.shape[0] != 3 * D:
            raise err(raw.origin, f"shape mismatch: {prefix}head.attention.in_proj_{kind} has shape {tuple(t.shape)}, "
                                  "expected 3 x hidden_size rows")
        c.state[f"attn_pool.q.{kind}"], c.state[f"attn_pool.kv.{kind}"] = t[:D], t[D:]
        c.source_names[f"attn_pool.q.{kind}"] = c.source_names[f"attn_pool.kv.{kind}"] = \
            f"{prefix}head.attention.in_proj_{kind}"
        c.consume(f"{prefix}head.attention.in_proj_{kind}")
    options = {"pos_embed_interp": "bicubic", "act_layer": "gelu_tanh"}
    if "attn_pool.latent" not in c.state:  # a tower without its head (vision_use_head=False): mean of the tokens
        options["fc_norm"] = False
    return hf.finish(raw, c, options, 1e-6, vision=True)


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """``preprocessor_config.json`` if present, else SigLIP's: mean = std = 0.5, bicubic, resize to the input."""
    return hf.default_preprocess(cfg, raw, "siglip")

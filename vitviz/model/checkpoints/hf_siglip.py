"""Hugging Face SigLIP image towers: ``SiglipVisionModel`` and the vision half of a ``SiglipModel``
(``google/siglip-*``). No class token; the attention-pooling head (``head.probe``, ``head.attention`` as one
``in_proj``, ``head.layernorm``, ``head.mlp``) becomes the model's "MAP" pool
(:class:`~vitviz.model.layers.AttentionPool`).
``hidden_act`` ``gelu_pytorch_tanh`` -> GELU (tanh). Position embeddings at other sizes: bicubic without antialiasing
(transformers' ``interpolate_pos_encoding``).

SigLIP 2 fixed-resolution checkpoints on the Hub (``google/siglip2-base-patch16-224`` ...) are ``SiglipModel``
folders: read as above. SigLIP 2 **NaFlex** (``Siglip2VisionModel``, ``Siglip2Model``: ``google/siglip2-*-naflex``)
embeds patchified pixels with a Linear (``patch_embedding.weight [D, P*P*C]``, inputs flattened as (row in patch,
column in patch, channel)): it is the same map as a P x P convolution with stride P, whose weight is the Linear's
reshaped to ``[D, C, P, P]``, and is read so. Its square position table (``num_patches`` slots, 16 x 16) is resized
bilinearly with antialiasing to each image's own grid (``pos_embed_interp="bilinear_aa"``, transformers'
``resize_positional_embeddings``), and the preprocessing keeps each image's aspect ratio up to ``max_num_patches``
(:func:`vitviz.model.preprocess.naflex_size`). No Qt.
"""

from __future__ import annotations

import os
import re

from vitviz.model.checkpoints import hf
from vitviz.model.checkpoints.common import (
    INDEX_BUFFER,
    TEXT_TOWER,
    Converted,
    RawCheckpoint,
    err,
    want_int,
    want_object,
)
from vitviz.model.checkpoints.hf_clip import encoder_rules
from vitviz.model.preprocess import INCEPTION_MEAN, INCEPTION_STD, Preprocess
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
    w = c.state.get("patch_embed.proj.weight")
    if w is not None and w.ndim == 2:  # SigLIP 2 NaFlex: a Linear on patchified pixels
        patch, channels = naflex_patch(raw)
        D, n_in = int(w.shape[0]), int(w.shape[1])
        if n_in != channels * patch * patch:
            raise err(raw.origin, f"shape mismatch: {prefix}embeddings.patch_embedding.weight has shape "
                                  f"{tuple(w.shape)}, expected [{D}, {channels * patch * patch}] (patch {patch}, "
                                  f"{channels} channels)")
        c.state["patch_embed.proj.weight"] = w.reshape(D, patch, patch, channels).permute(0, 3, 1, 2).contiguous()
        options["pos_embed_interp"] = "bilinear_aa"
    if "attn_pool.latent" not in c.state:  # a tower without its head (vision_use_head=False): mean of the tokens
        options["fc_norm"] = False
    return hf.finish(raw, c, options, 1e-6, vision=True)


def naflex_patch(raw: RawCheckpoint) -> tuple[int, int]:
    """``(patch_size, num_channels)`` of a NaFlex ``config.json`` (its ``vision_config`` in a two-tower one);
    transformers' defaults 16 and 3."""
    cfg = raw.hf_config or {}
    where = os.path.join(raw.origin, "config.json")
    if cfg.get("vision_config") is not None:
        cfg = want_object(where, "vision_config", cfg["vision_config"])
    return (want_int(where, "patch_size", cfg.get("patch_size", 16)),
            want_int(where, "num_channels", cfg.get("num_channels", 3)))


def is_naflex(raw: RawCheckpoint) -> bool:
    """A SigLIP 2 NaFlex tower: its patch embedding is a Linear (2-D weight)."""
    prefix = key_prefix(raw.tensors) or ""
    w = raw.tensors.get(f"{prefix}embeddings.patch_embedding.weight")
    return w is not None and w.ndim == 2


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """``preprocessor_config.json`` if present, else SigLIP's: mean = std = 0.5, bicubic, resize to the input.
    NaFlex: the aspect ratio kept up to ``max_num_patches`` (``preprocessor_config.json``, default 256), bilinear
    (``Siglip2ImageProcessor``'s resample), mean = std = 0.5 unless the file says otherwise."""
    if not is_naflex(raw):
        return hf.default_preprocess(cfg, raw, "siglip")
    pp = hf.preprocessor_settings(raw) if raw.hf_preprocessor else {}
    where = os.path.join(raw.origin, "preprocessor_config.json")
    budget = want_int(where, "max_num_patches", (raw.hf_preprocessor or {}).get("max_num_patches", 256))
    pp_patch = want_int(where, "patch_size", (raw.hf_preprocessor or {}).get("patch_size", cfg.patch_size))
    if pp_patch != cfg.patch_size:
        raise err(where, f"patch_size {pp_patch} differs from the model's patch size {cfg.patch_size}")
    normalize = pp.get("do_normalize", True)
    return Preprocess(resize=cfg.img_size, crop=cfg.img_size,
                      interpolation=pp.get("resample", "bilinear"),
                      mean=pp.get("image_mean", INCEPTION_MEAN) if normalize else (0.0,) * 3,
                      std=pp.get("image_std", INCEPTION_STD) if normalize else (1.0,) * 3,
                      max_num_patches=budget, patch_size=cfg.patch_size)

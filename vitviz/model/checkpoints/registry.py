"""The ordered registry of checkpoint formats, and format detection through it. No Qt.

A format is a module with ``NAME``, ``DESCRIPTION`` (for messages), ``detect(raw) -> bool`` (by which metadata or
keys are present), ``convert(raw) -> Converted`` (a pure dict -> dict renaming, as timm's ``checkpoint_filter_fn``)
and optionally ``default_preprocess(cfg, raw) -> Preprocess``. Supporting a new model family (DINOv2, CLIP, SigLIP,
BEiT ...) is one new module and one line in :data:`FORMATS`; the first format whose ``detect`` accepts wins.
"""

from __future__ import annotations

import re
from types import ModuleType
from typing import Literal

from vitviz.model.checkpoints import (
    bare_parts,
    bare_rope,
    beit,
    dinov2,
    hf,
    hf_aimv2,
    hf_beit,
    hf_clip,
    hf_dinov2,
    hf_dinov3,
    hf_siglip,
    native,
    npz,
    open_clip,
    open_clip_timm,
    textbook,
    timm,
    timm_eva,
    timm_naflex,
    torchvision,
)
from vitviz.model.checkpoints.common import RawCheckpoint, err, names

Format = Literal["native", "timm-eva", "timm-naflex", "timm-beit", "dinov2", "timm", "torchvision", "hf-dinov2",
                 "hf-dinov3", "hf-aimv2", "hf-beit", "hf-clip",
                 "hf-siglip", "open_clip", "open_clip-timm", "hf", "npz", "textbook"]

FORMATS: tuple[ModuleType, ...] = (
    native,       # safetensors metadata "vitviz_spec": must come first (its keys are timm's)
    timm_eva,     # timm folders of RoPE models (EVA-02, PE, DINOv3, rope ViTs): by config.json's architecture
    timm_naflex,  # timm folders of NaFlexVit (naflexvit_*): by config.json's architecture
    beit,         # timm's BEiT (before timm: the same patch_embed / blocks names)
    dinov2,       # DINOv2's own files (before timm: timm's names plus mask_token)
    timm,
    torchvision,
    hf_dinov2,    # the Hugging Face families before the plain HF ViT (same patch embedding name)
    hf_dinov3,
    hf_aimv2,
    hf_beit,
    hf_clip,
    hf_siglip,
    open_clip,
    open_clip_timm,  # open_clip towers with a timm trunk (EVA02-*)
    hf,
    npz,
    textbook,     # the ViTs people write themselves (styles B, C, D of issue 17)
)
FORMAT_NAMES: tuple[str, ...] = tuple(f.NAME for f in FORMATS)


def format_module(name: str) -> ModuleType:
    """The registered format called ``name``."""
    for f in FORMATS:
        if f.NAME == name:
            return f
    raise KeyError(f"unknown checkpoint format {name!r}; registered: {', '.join(FORMAT_NAMES)}")


SUPPORTED = ("ViT / DeiT / DeiT III, DINO, DINOv2 (with or without registers), DINOv3, EVA-02 (and its CLIP towers), "
             "Perception Encoder, timm's RoPE ViTs, AIMv2 (timm and Hugging Face), timm's NaFlex ViTs (fixed grid), "
             "BEiT / BEiT v2 / data2vec-vision, "
             "CLIP / OpenCLIP and SigLIP image towers (timm, Hugging Face, open_clip and original layouts), "
             "torchvision ViT, Google .npz, the textbook ViTs people write themselves (styles B, C, D)")

_WINDOWED = re.compile(r"(^|\.)(layers|stages)\.\d+\.blocks\.\d+\.attn\.relative_position_bias_table$|"
                       r"(^|\.)encoder\.layers\.\d+\.blocks\.\d+\.|(^|\.)stages\.\d+\.blocks\.\d+\.attn\.|"
                       r"(^|\.)layers\.\d+\.downsample\.|window_size|attn_mask$")
_WINDOWED_TYPES = ("swin", "swinv2", "swin2sr", "maxvit", "nat", "dinat", "hiera", "mvitv2", "focalnet")


def windowed_attention(raw: RawCheckpoint) -> str | None:
    """What marks ``raw`` as a windowed-/hierarchical-attention model (Swin, MaxViT ...), or None."""
    cfg = raw.hf_config if isinstance(raw.hf_config, dict) else {}
    kind = str(cfg.get("model_type") or cfg.get("architecture") or "").lower()
    if any(kind.startswith(t) for t in _WINDOWED_TYPES):
        return f"config.json says {kind!r}"
    hit = next((k for k in raw.tensors if _WINDOWED.search(k)), None)
    return f"key {hit!r}" if hit is not None else None


_TIMM_LAYOUT_READERS = ("timm-beit", "dinov2", "timm")


def detect_format(raw: RawCheckpoint) -> Format:
    """The checkpoint format, from metadata and keys; raises :class:`CheckpointError` listing the formats tried
    (and naming a Swin / windowed-attention model as such)."""
    why = windowed_attention(raw)  # first: Swin's keys resemble timm's (patch_embed.proj, relative tables)
    if why is not None:
        raise err(raw.origin, f"a windowed-attention model (Swin, MaxViT or similar: {why}) is not supported: "
                              "vitviz shows the global self-attention of plain Vision Transformers; supported: "
                              f"{SUPPORTED}")
    for f in FORMATS:
        if f.detect(raw):
            if f.NAME in _TIMM_LAYOUT_READERS:  # a RoPE model's weights without its config.json: refused
                bare_rope.refuse_bare_rope(raw)
                bare_parts.refuse_unread_parts(raw)  # post-norm blocks, CLIP's activation, pooled prefix
            return f.NAME
    keys = raw.tensors.keys()
    sample = names(sorted(keys)[:8])
    raise err(raw.origin, f"unknown checkpoint format: the keys ({sample}, {len(keys)} in all) match none of the "
                          f"formats tried: {', '.join(f.DESCRIPTION for f in FORMATS)}")

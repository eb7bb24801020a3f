"""The timm architectures of the RoPE families vitviz reads (timm's ``Eva`` class: EVA-02, Perception Encoder,
DINOv3, timm's RoPE ViTs) and what each architecture function of timm 1.0 ``models/eva.py`` sets that the tensors
cannot show; and the NaFlex ViTs (``naflexvit_*``, timm ``models/naflexvit.py``) read in fixed-grid use. Torch-free:
the Hub's pre-download check reads it too (:mod:`vitviz.model.sources.hub`). No Qt.
"""

from __future__ import annotations

import re
from typing import Any


def ref_from_name(arch: str, patch: int) -> tuple[int, int]:
    """PE and the rope-reg ViTs: the pre-training grid is the input size in the name over the patch size."""
    size = int(re.search(r"_(\d+)$", arch).group(1))  # type: ignore[union-attr]
    return (size // patch, size // patch)


# architecture pattern -> (timm Eva arguments the architecture function sets that the tensors cannot show)
FAMILIES: tuple[tuple[re.Pattern[str], dict[str, Any]], ...] = (
    (re.compile(r"eva02_(tiny|small|base|large)_patch14_(224|336|448)"),
     dict(rope_type="cat", ref_feat_shape=(16, 16), eps=1e-6, global_pool="avg")),
    # EVA-02 CLIP image towers: a norm inside the attention (scale_attn_inner: attn.norm), the [CLS] pooled
    (re.compile(r"eva02_(base|large)_patch(14|16)_clip_(224|336)"),
     dict(rope_type="cat", ref_feat_shape=(16, 16), eps=1e-6, global_pool="token")),
    # the gigantic PE towers have no [CLS] token and no grid offset
    (re.compile(r"vit_pe_core_gigantic_patch14_448"),
     dict(rope_type="cat", ref="name", rope_grid_indexing="xy", eps=1e-5, global_pool="map", attn_pool_num_heads=8)),
    (re.compile(r"vit_pe_(spatial|lang)_gigantic_patch14_448"),
     dict(rope_type="cat", ref="name", rope_grid_indexing="xy", eps=1e-5, global_pool="avg",
          use_post_transformer_norm=False, use_fc_norm=False)),
    (re.compile(r"vit_pe_core_\w+_patch(\d+)_(\d+)"),
     dict(rope_type="cat", ref="name", rope_grid_offset=1.0, rope_grid_indexing="xy", eps=1e-5, global_pool="map",
          attn_pool_num_heads=8)),
    (re.compile(r"vit_pe_(spatial|lang)_\w+_patch(\d+)_(\d+)"),
     dict(rope_type="cat", ref="name", rope_grid_offset=1.0, rope_grid_indexing="xy", eps=1e-5, global_pool="avg",
          use_post_transformer_norm=False, use_fc_norm=False)),
    (re.compile(r"vit_\w+_patch16_dinov3(_qkvb)?"),
     dict(rope_type="dinov3", rope_temperature=100.0, rope_rotate_half=True, eps=1e-5, global_pool="avg",
          use_fc_norm=False)),
    (re.compile(r"vit_\w+_patch16_rope_reg\d_gap_256"),
     dict(rope_type="cat", ref="name", eps=1e-6, global_pool="avg")),
    (re.compile(r"vit_\w+_patch16_rope_mixed_224"),
     dict(rope_type="mixed", rope_temperature=10.0, rope_grid_indexing="xy", eps=1e-6, global_pool="token")),
    (re.compile(r"vit_\w+_patch16_rope_mixed_ape_224"),
     dict(rope_type="mixed", rope_temperature=10.0, rope_grid_indexing="xy", eps=1e-6, global_pool="token",
          no_embed_class=True)),
    (re.compile(r"vit_\w+_patch16_rope_224"),
     dict(rope_type="cat", rope_temperature=100.0, rope_grid_indexing="xy", eps=1e-6, global_pool="token")),
    (re.compile(r"vit_\w+_patch16_rope_ape_224"),
     dict(rope_type="cat", rope_temperature=100.0, rope_grid_indexing="xy", eps=1e-6, global_pool="token",
          no_embed_class=True)),
)

# widths whose head count is not the usual one (the tensors cannot say; model_args may)
ARCH_HEADS: dict[str, int] = {"vit_huge_plus_patch16_dinov3": 20, "vit_huge_plus_patch16_dinov3_qkvb": 20,
                              "vit_7b_patch16_dinov3": 32, "vit_pe_core_gigantic_patch14_448": 16,
                              "vit_pe_spatial_gigantic_patch14_448": 16, "vit_pe_lang_gigantic_patch14_448": 16}



# timm's NaFlex ViTs read in fixed-grid use (vitviz.model.checkpoints.timm_naflex): what each architecture function
# sets that the tensors cannot show (timm 1.0 models/naflexvit.py)
NAFLEX_ARCHS: dict[str, dict[str, Any]] = {
    "naflexvit_base_patch16_gap": dict(global_pool="avg", fc_norm=True),
    "naflexvit_so150m2_patch16_reg1_gap": dict(global_pool="avg", fc_norm=True),
    "naflexvit_base_patch16_siglip": dict(global_pool="map", act_layer="gelu_tanh", pos_embed_interp_mode="bilinear"),
    "naflexvit_so400m_patch16_siglip": dict(global_pool="map", act_layer="gelu_tanh",
                                            pos_embed_interp_mode="bilinear"),
}


ROPE_NAMES = re.compile(r"eva02|vit_pe_|rope|dinov3|lingbot|sapiens")
"""timm architecture names of models with a rotary position embedding (those outside :data:`FAMILIES` are refused:
their RoPE lives in no tensor, and a plain reader would open them without it)."""


def family(arch: str) -> dict[str, Any] | None:
    """The :data:`FAMILIES` entry of a timm architecture name (a copy), or None."""
    return next((dict(v) for p, v in FAMILIES if p.fullmatch(arch)), None)

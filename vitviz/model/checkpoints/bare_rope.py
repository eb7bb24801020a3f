"""Bare weights of a rotary-position-embedding (RoPE) model in timm's layout: refused, naming RoPE. No Qt.

timm's RoPE models (EVA-02, Perception Encoder, DINOv3, ``vit_*_rope_*``) keep their rotation in no tensor (the mixed
RoPE's learned frequencies excepted): what it is (theta, axial or mixed, pairs or halves, the pre-training grid, the
grid offset) comes only from the hub folder's ``config.json``. Their ``model.safetensors`` / ``pytorch_model.bin``
alone would otherwise open as a plain ViT with the rotation silently missing (Perception Encoder did, before this
check), or fail on a key with a message that does not say why. :func:`rope_signature` names what in the keys marks
such a file; :func:`refuse_bare_rope` refuses it in one line saying to open the hub folder with its ``config.json``.

The marks, each seen on the weights timm itself writes for these families and on no non-RoPE timm ViT:

- a key with ``rope`` in its name (``rope.freqs``: the mixed RoPE's learned frequencies);
- separate ``blocks.N.attn.q_proj / k_proj / v_proj`` (timm's ``Eva`` with ``qkv_fused=False``: every EVA-02);
- a SwiGLU with its inner norm (``blocks.N.mlp.norm`` beside ``fc1_g``: EVA-02's ``scale_mlp``);
- ``q_bias`` / ``v_bias`` beside a fused ``qkv`` with a packed gated MLP and no relative position table (EVA-02 tiny
  and small; BEiT always has its tables, EVA (v1) a plain MLP);
- LayerScale named ``gamma_1`` without relative position tables (timm's ``Eva`` class: ``vit_*_rope_ape_*``; BEiT
  names it so too, but always has its tables; CaiT too, beside its ``blocks_token_only``; timm's
  ``VisionTransformer`` names it ``ls1.gamma``);
- ``norm_pre`` with timm's latent attention-pool head (``attn_pool.q``): Perception Encoder core (timm's SigLIP
  towers, its only other ``map`` ViTs, have no ``norm_pre``);
- ``norm_pre`` without a final norm or ``fc_norm``: Perception Encoder spatial / lang;
- no position embedding of any kind (no ``pos_embed``, no relative position table): DINOv3, ``vit_*_rope_*``.

Folders whose ``config.json`` is timm's are read by their architecture (:mod:`.timm_eva`, :mod:`.timm`) and never
reach this check; Hugging Face layouts (``DINOv3ViTModel``: its keys name the family and transformers' defaults are
the released models' settings) are not in timm's layout and are read by their own readers.
"""

from __future__ import annotations

import re

from vitviz.model.checkpoints.common import RawCheckpoint, err

_TIMM_LAYOUT = ("patch_embed.proj.weight",)
_ROPE_KEY = re.compile(r"(^|\.)(rope|rot_pos|freqs_(cos|sin))(\.|_|$)")
_QKV_SPLIT = re.compile(r"blocks\.\d+\.attn\.(q|k|v)_proj\.weight")
_SWIGLU_NORM = re.compile(r"blocks\.\d+\.mlp\.norm\.weight")


def rope_signature(raw: RawCheckpoint) -> str | None:
    """What in the keys of ``raw`` (timm's layout, no timm ``config.json``) marks a RoPE model, or None."""
    keys = raw.tensors.keys()
    if not all(k in keys for k in _TIMM_LAYOUT) or not any(k.startswith("blocks.") for k in keys):
        return None
    cfg = raw.hf_config
    if isinstance(cfg, dict) and "architecture" in cfg:
        return None  # a timm folder: read by its architecture
    rope = sorted(k for k in keys if _ROPE_KEY.search(k))
    if rope:
        return f"key {rope[0]!r} (a rotary position embedding's frequencies)"
    split = sorted(k for k in keys if _QKV_SPLIT.fullmatch(k))
    if split:
        return f"separate q/k/v projections ({split[0]!r}), as timm's EVA-02"
    norm = sorted(k for k in keys if _SWIGLU_NORM.fullmatch(k))
    if norm and any(".mlp.fc1_g." in k for k in keys):
        return f"a SwiGLU with its inner norm ({norm[0]!r}), as timm's EVA-02"
    tables = any(k.endswith("relative_position_bias_table") for k in keys)
    if "blocks.0.attn.q_bias" in keys and not tables and _packed_glu(raw):
        return "q/v biases beside a fused qkv with a gated MLP and no relative position table, as timm's EVA-02 " \
               "tiny / small"
    if "blocks.0.gamma_1" in keys and not tables and not any(k.startswith("blocks_token_only.") for k in keys):
        return "LayerScale named 'gamma_1' without BEiT's relative position tables: timm's Eva class, as " \
               "vit_*_rope_ape_*"
    if "norm_pre.weight" in keys and "attn_pool.q.weight" in keys:
        return "'norm_pre' with a latent attention-pool head ('attn_pool.q'), as Perception Encoder core"
    if "norm_pre.weight" in keys and "norm.weight" not in keys and "fc_norm.weight" not in keys:
        return "'norm_pre' without a final norm, as Perception Encoder spatial / lang"
    if "pos_embed" not in keys and not tables:
        return "no position embedding of any kind (no 'pos_embed', no relative position table), as DINOv3 and " \
               "timm's vit_*_rope_*"
    return None


def _packed_glu(raw: RawCheckpoint) -> bool:
    """The first block's MLP is a packed gated one: ``fc1`` twice as wide as ``fc2``'s input."""
    fc1, fc2 = raw.tensors.get("blocks.0.mlp.fc1.weight"), raw.tensors.get("blocks.0.mlp.fc2.weight")
    return fc1 is not None and fc2 is not None and fc1.ndim == fc2.ndim == 2 and \
        int(fc1.shape[0]) == 2 * int(fc2.shape[1])


def refuse_bare_rope(raw: RawCheckpoint) -> None:
    """Raise one line naming RoPE when ``raw`` is the bare weights of a timm RoPE model (:func:`rope_signature`)."""
    why = rope_signature(raw)
    if why is not None:
        raise err(raw.origin, f"the weights of a model with a rotary position embedding (RoPE): {why}. Its settings "
                              "(theta, layout, pre-training grid) are in no tensor: open the hub folder with its "
                              "config.json (timm's 'architecture' and 'model_args') instead of the weights file alone; "
                              "refused rather than opened without its RoPE")

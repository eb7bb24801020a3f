"""timm hub folders of timm's NaFlex ViTs (``naflexvit_*``: timm ``models/naflexvit.py``) in fixed-grid use: an
image ``[B, C, H, W]`` through the model, as timm runs it without a NaFlex collator. No Qt.

``embeds.proj`` is a Linear on patchified pixels (``[D, P*P*C]``, each patch flattened as (row, column, channel)):
the same map as a P x P convolution with stride P, read so (as SigLIP 2 NaFlex). ``embeds.pos_embed`` is a
``[1, H, W, D]`` table of the patch grid only (prefix tokens get none: ``no_embed_class``), resized for each input's
grid as timm's ``NaFlexEmbeds._apply_learned_pos_embed`` does: ``F.interpolate`` with the architecture's mode
(bicubic, or bilinear for the SigLIP-shaped ones), antialiasing, no corner alignment (vitviz's ``"timm"`` and
``"bilinear_aa"``). The nominal input size is the table's own grid (16 x 16 patches); the preprocessing is timm's
``pretrained_cfg`` (384 px for the released models: the table is then resized to 24 x 24, exactly as timm does).
Blocks are timm's ``Block`` (our names); ``embeds.cls_token`` / ``embeds.reg_token`` are the prefix tokens.

What each architecture function sets that the tensors cannot show is in :data:`ARCHS` (timm 1.0); ``model_args``
override it. Refused, naming the part: the aspect-preserving (``par``) and factorized (``parfac``) position tables,
RADIO, an attention pool that skips the prefix tokens (``*_map`` with registers: vitviz's pool reads every token), and
any ``model_args`` entry of :data:`_ABSENT` away from its default (q/k norm, RoPE, grouped key/value heads, gated
attention, inner norms ...).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from vitviz.model.checkpoints.common import (
    Converted,
    RawCheckpoint,
    err,
    rename,
    want_bool,
    want_int,
    want_object,
    want_str,
)
from vitviz.model.checkpoints.timm import default_preprocess as timm_default_preprocess
from vitviz.model.checkpoints.timm import pretrained_preprocess, timm_config
from vitviz.model.preprocess import Preprocess
from vitviz.model.timm_rope_archs import NAFLEX_ARCHS as ARCHS
from vitviz.model.vit import ViTConfig

NAME = "timm-naflex"
DESCRIPTION = "timm NaFlexVit (config.json architecture naflexvit_*)"
PREFIX = "naflexvit_"

_MAP_PREFIX = "its attention pool reads the patch tokens only, skipping its register token (pool_include_prefix " \
    "false); vitviz's pool reads every token"
_REFUSED = {
    "naflexvit_base_patch16_map": _MAP_PREFIX,
    "naflexvit_so150m2_patch16_reg1_map": _MAP_PREFIX,
    "naflexvit_base_patch16_par_gap": "its aspect-preserving position table (pos_embed_ar_preserving)",
    "naflexvit_base_patch16_parfac_gap": "its aspect-preserving, factorized position tables (pos_embed_y / "
                                         "pos_embed_x)",
}
# NaFlexVitCfg fields at which the part is absent (anything else: a part vitviz's ViT does not model)
_ABSENT: dict[str, Any] = {
    "scale_mlp_norm": False, "num_kv_heads": None, "qk_norm": False, "scale_attn_inner_norm": False,
    "pos_embed": "learned", "pos_embed_ar_preserving": False, "pos_embed_antialias": True,
    "pos_embed_align_corners": False, "rope_type": "", "pre_norm": False, "final_norm": True,
    "input_norm_layer": None, "embed_norm_layer": None, "norm_layer": None, "block_fn": None, "mlp_layer": None,
    "attn_layer": None, "attn_type": "standard", "attn_gated": False, "swiglu_mlp": False, "qkv_fused": True,
    "attn_only_layer_scale": False, "patchify_channels_last": True, "attn_pool_num_heads": None,
    "attn_pool_mlp_ratio": None, "pool_include_prefix": False, "dynamic_img_pad": False,
}
# read here, or shown by the tensors, or without effect in eval mode on an image batch
_READ = {"global_pool", "fc_norm", "act_layer", "pos_embed_interp_mode", "num_heads", "pos_embed_grid_size",
         "img_size", "patch_size", "embed_dim", "depth", "mlp_ratio", "qkv_bias", "proj_bias", "init_values",
         "class_token", "reg_tokens", "embed_proj_type", "num_classes", "in_chans", "drop_rate", "pos_drop_rate",
         "patch_drop_rate", "proj_drop_rate", "attn_drop_rate", "drop_path_rate", "weight_init", "fix_init",
         "pos_embed_use_grid_sample", "enable_patch_interpolator", "use_key_only_attn_mask", "swiglu_align_to",
         "rope_temperature", "rope_ref_feat_shape", "rope_grid_offset", "rope_grid_indexing", "rope_rotate_half",
         "rope_shift_coords", "rope_jitter_coords", "rope_rescale_coords", "rope_mrope_section"}
_ACTS = {"gelu": "gelu", "gelu_tanh": "gelu_tanh", "quick_gelu": "quick_gelu"}
_INTERP = {"bicubic": "timm", "bilinear": "bilinear_aa"}

RULES = [
    (r"embeds\.proj\.(weight|bias)", r"patch_embed.proj.\1"),
    (r"embeds\.cls_token", "cls_token"),
    (r"embeds\.reg_token", "reg_token"),
    (r"embeds\.pos_embed", "pos_embed"),
    (r"(blocks\.\d+\..*|norm\.(weight|bias)|fc_norm\.(weight|bias)|attn_pool\..*|head\.(weight|bias))", r"\1"),
]


def detect(raw: RawCheckpoint) -> bool:
    """A timm folder whose ``architecture`` starts ``naflexvit_``."""
    cfg = timm_config(raw)
    return cfg is not None and isinstance(cfg["architecture"], str) and cfg["architecture"].startswith(PREFIX)


def _settings(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    arch = want_str(where, "architecture", cfg["architecture"])
    if arch in _REFUSED:
        raise err(where, f"architecture {arch!r}: {_REFUSED[arch]} is a part vitviz's ViT does not model (refused "
                         "rather than opened without it)")
    if arch not in ARCHS:
        raise err(where, f"architecture {arch!r}: a NaFlex ViT vitviz does not know (read: {', '.join(ARCHS)})")
    args = dict(want_object(where, "model_args", cfg.get("model_args") or {}))
    for k, v in args.items():
        if k in _READ or (k in _ABSENT and v == _ABSENT[k]):
            continue
        what = f"model_args.{k}={v!r}" if k in _ABSENT else f"model_args.{k}"
        raise err(where, f"{what}: a part of timm's NaFlexVit that vitviz's ViT does not model (refused rather than "
                         "opened without it)")
    out = {**ARCHS[arch], **{k: v for k, v in args.items() if k in _READ}}
    if cfg.get("global_pool") not in (None, ""):
        out["global_pool"] = cfg["global_pool"]
    return out


def convert(raw: RawCheckpoint) -> Converted:
    cfg = timm_config(raw)
    assert cfg is not None
    where = os.path.join(raw.origin, "config.json")
    s = _settings(cfg, where)
    c = rename(raw.tensors, RULES)
    w = c.state.get("patch_embed.proj.weight")
    if w is not None and w.ndim == 2:  # a Linear on (row, column, channel)-flattened patches
        patch = want_int(where, "model_args.patch_size", s.get("patch_size", _patch_from_name(cfg["architecture"])))
        channels = want_int(where, "model_args.in_chans", s.get("in_chans", 3))
        D, n_in = int(w.shape[0]), int(w.shape[1])
        if n_in != channels * patch * patch:
            raise err(raw.origin, f"shape mismatch: embeds.proj.weight has shape {tuple(w.shape)}, expected "
                                  f"[{D}, {channels * patch * patch}] (patch {patch}, {channels} channels)")
        c.state["patch_embed.proj.weight"] = w.reshape(D, patch, patch, channels).permute(0, 3, 1, 2).contiguous()
    pe = c.state.get("pos_embed")
    if pe is not None:
        if pe.ndim != 4 or pe.shape[0] != 1:
            raise err(raw.origin, f"shape mismatch: embeds.pos_embed has shape {tuple(pe.shape)}, expected "
                                  "[1, height, width, embed_dim]")
        gh, gw = int(pe.shape[1]), int(pe.shape[2])
        c.state["pos_embed"] = pe.reshape(1, gh * gw, int(pe.shape[3]))
        patch = int(c.state["patch_embed.proj.weight"].shape[-1])
        c.config["image_size"] = (gh * patch, gw * patch)  # the table's own grid (non-square tables too)
    pool = want_str(where, "global_pool", s["global_pool"], ("token", "avg", "map"))
    prefix = int("cls_token" in c.state) + (int(c.state["reg_token"].shape[1]) if "reg_token" in c.state else 0)
    if pool == "map" and prefix:
        raise err(where, f"architecture {cfg['architecture']!r}: its attention pool reads the patch tokens only, "
                         f"skipping its {prefix} prefix token(s) (pool_include_prefix false); vitviz's pool reads "
                         "every token: refused rather than pooled differently")
    act = want_str(where, "model_args.act_layer", s.get("act_layer") or "gelu", tuple(_ACTS))
    interp = want_str(where, "model_args.pos_embed_interp_mode", s.get("pos_embed_interp_mode", "bicubic"),
                      tuple(_INTERP))
    fc = s.get("fc_norm")
    options: dict[str, Any] = dict(global_pool=pool, act_layer=_ACTS[act], pos_embed_interp=_INTERP[interp],
                                   no_embed_class=prefix > 0,  # the table has no slots for prefix tokens
                                   fc_norm=want_bool(where, "model_args.fc_norm", fc) if fc is not None
                                   else pool == "avg")
    c.config["options"] = options
    if "num_heads" in s:
        c.config["num_heads"] = want_int(where, "model_args.num_heads", s["num_heads"])
    if (pcfg := cfg.get("pretrained_cfg")) is not None:
        pretrained_preprocess(want_object(where, "pretrained_cfg", pcfg), where)  # checked now, used after
    return c


def _patch_from_name(arch: str) -> int:
    m = re.search(r"_patch(\d+)", arch)
    return int(m.group(1)) if m else 16


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """timm's ``pretrained_cfg`` at its own input size (the position table is resized to that grid, as timm does)."""
    tcfg = timm_config(raw) or {}
    pcfg = tcfg.get("pretrained_cfg")
    if isinstance(pcfg, Mapping) and pcfg.get("input_size") is not None:
        return pretrained_preprocess(pcfg, os.path.join(raw.origin, "config.json"))
    return timm_default_preprocess(cfg, raw)


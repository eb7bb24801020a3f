"""timm hub folders of the models timm builds with its ``Eva`` class and a rotary position embedding: EVA-02
(``eva02_*``), Perception Encoder (``vit_pe_core_*``, ``vit_pe_spatial_*``, ``vit_pe_lang_*``), DINOv3
(``vit_*_dinov3[_qkvb]``) and timm's RoPE ViTs (``vit_*_rope_*``: axial, ``mixed`` with learned frequencies,
``reg*_gap``). No Qt.

Their RoPE lives in no tensor (except the mixed frequencies, ``rope.freqs``): what it is comes from the folder's
``config.json`` (``architecture``, then ``model_args``, which override), read through
:data:`vitviz.model.timm_rope_archs.FAMILIES`, a table of what each timm architecture function sets (timm 1.0
``models/eva.py``). Renaming (exact): ``gamma_1/2`` ->
LayerScale; EVA-02's separate ``q_proj / k_proj / v_proj`` (no key bias) and the fused ``qkv`` with ``q_bias`` /
``v_bias`` -> ``qkv`` with a zero key bias; the SwiGLU's ``fc1_g`` / ``fc1_x`` -> the packed ``fc1`` (gate first, as
``silu(gate) * x``), its inner ``norm`` kept. A ``model_args`` entry this reader does not model (q/k norm, grouped
key/value heads, post-norm blocks, MRoPE) is refused naming it; so is a key it does not read. EVA-02 CLIP's norm
inside the attention (``scale_attn_inner``: ``attn.norm``) and PE core gigantic's attention-pool MLP width
(``attn_pool_mlp_ratio``) are read from the tensors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import torch

from vitviz.model.checkpoints.common import (
    Converted,
    RawCheckpoint,
    err,
    names,
    rename,
    want_bool,
    want_int,
    want_number,
    want_object,
    want_size,
    want_str,
)
from vitviz.model.checkpoints.timm import default_preprocess as timm_default_preprocess
from vitviz.model.checkpoints.timm import pretrained_preprocess, timm_config
from vitviz.model.preprocess import Preprocess
from vitviz.model.timm_rope_archs import ARCH_HEADS, family, ref_from_name
from vitviz.model.vit import ViTConfig

NAME = "timm-eva"
DESCRIPTION = "timm Eva-class RoPE models (config.json architecture eva02_* / vit_pe_* / *_dinov3 / *_rope_*)"


# model_args this reader reads (the rest of timm's Eva arguments are refused unless at their default)
_READ = {"rope_type", "rope_temperature", "rope_grid_offset", "rope_grid_indexing", "rope_rotate_half",
         "ref_feat_shape", "global_pool", "attn_pool_num_heads", "use_fc_norm", "use_post_transformer_norm",
         "num_heads", "img_size", "use_rot_pos_emb"}
# shown by the tensors (checked there) or without effect on a forward pass in eval mode
_SHAPES = {"patch_size", "embed_dim", "depth", "mlp_ratio", "qkv_bias", "qkv_fused", "class_token", "num_reg_tokens",
           "init_values", "swiglu_mlp", "scale_mlp", "swiglu_align_to", "use_abs_pos_emb", "no_embed_class",
           "use_pre_transformer_norm", "dynamic_img_size", "dynamic_img_pad", "attn_type", "num_classes", "in_chans",
           "drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "attn_drop_rate", "drop_path_rate",
           "rope_shift_coords", "rope_jitter_coords", "rope_rescale_coords", "head_init_scale",
           "attn_pool_mlp_ratio", "scale_attn_inner"}
# at these values the part is absent; anything else is a part vitviz's ViT does not model
_ABSENT = {"qk_norm": False, "use_post_norm": False, "attn_only_layer_scale": False,
           "num_kv_heads": None, "rope_mrope_section": None}


def detect(raw: RawCheckpoint) -> bool:
    """A timm folder whose ``architecture`` is in :data:`FAMILIES`."""
    cfg = timm_config(raw)
    return cfg is not None and isinstance(cfg["architecture"], str) and family(cfg["architecture"]) is not None


_QKV = re.compile(r"blocks\.(\d+)\.attn\.(q_proj|k_proj|v_proj)\.(weight|bias)|blocks\.(\d+)\.attn\.(q|v)_bias")
_SWIGLU = re.compile(r"blocks\.(\d+)\.mlp\.fc1_(g|x)\.(weight|bias)")
RULES = [
    (r"blocks\.(\d+)\.gamma_(1|2)", r"blocks.\1.ls\2.gamma"),
    (r"(.*)", r"\1"),
]


def _model_args(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    args = dict(want_object(where, "model_args", cfg.get("model_args") or {}))
    for k, v in args.items():
        if k in _READ or k in _SHAPES:
            continue
        if k in _ABSENT and v == _ABSENT[k]:
            continue
        what = f"model_args.{k}={v!r}" if k in _ABSENT else f"model_args.{k}"
        raise err(where, f"{what}: a part of timm's Eva models that vitviz's ViT does not model (refused rather than "
                         "opened without it)")
    if args.get("use_rot_pos_emb") is False:
        raise err(where, "model_args.use_rot_pos_emb=false: this reader reads the RoPE models of timm's Eva class")
    return args


def _fuse(raw: RawCheckpoint, c: Converted) -> None:
    """q/k/v projections or q/v biases -> ``qkv``; SwiGLU ``fc1_g`` / ``fc1_x`` -> packed ``fc1``."""
    t = raw.tensors
    blocks = sorted({int(m.group(1) or m.group(4)) for k in t if (m := _QKV.fullmatch(k))})
    for i in blocks:
        b = f"blocks.{i}.attn."
        if f"{b}q_proj.weight" in t:
            parts = [f"{b}{w}_proj.weight" for w in "qkv"]
            miss = [p for p in parts if p not in t]
            if miss:
                raise err(raw.origin, f"missing keys {names(miss)} (block {i} has separate q/k/v projections)")
            c.state[f"{b}qkv.weight"] = torch.cat([t[p] for p in parts])
            c.source_names[f"{b}qkv.weight"] = f"{b}q_proj/k_proj/v_proj.weight"
            c.consume(*parts)
            qb, kb, vb = (f"{b}{w}_proj.bias" for w in "qkv")
        else:
            qb, kb, vb = f"{b}q_bias", f"{b}k_bias", f"{b}v_bias"
        if qb in t or vb in t:
            if qb not in t or vb not in t:
                raise err(raw.origin, f"missing keys: block {i} has only one of {qb!r} / {vb!r}")
            k = t.get(kb, torch.zeros_like(t[qb]))
            c.state[f"{b}qkv.bias"] = torch.cat([t[qb], k, t[vb]])
            c.source_names[f"{b}qkv.bias"] = f"{qb} / {vb} (key bias: {'the file' if kb in t else 'zeros'})"
            c.consume(qb, vb, *([kb] if kb in t else []))
    glu: dict[tuple[int, str], dict[str, tuple[str, torch.Tensor]]] = {}
    for k, v in t.items():
        if m := _SWIGLU.fullmatch(k):
            glu.setdefault((int(m.group(1)), m.group(3)), {})[m.group(2)] = (k, v)
    for (i, kind), d in sorted(glu.items()):
        if set(d) != {"g", "x"}:
            raise err(raw.origin, f"missing keys: block {i} has only {names([x[0] for x in d.values()])} of its "
                                  f"SwiGLU {kind}")
        c.state[f"blocks.{i}.mlp.fc1.{kind}"] = torch.cat([d["g"][1], d["x"][1]])
        c.source_names[f"blocks.{i}.mlp.fc1.{kind}"] = f"blocks.{i}.mlp.fc1_g/fc1_x.{kind}"
        c.consume(d["g"][0], d["x"][0])


def convert(raw: RawCheckpoint) -> Converted:
    cfg = timm_config(raw)
    assert cfg is not None
    where = os.path.join(raw.origin, "config.json")
    arch = want_str(where, "architecture", cfg["architecture"])
    fam = family(arch)
    assert fam is not None
    args = _model_args(cfg, where)
    fam.update({k: v for k, v in args.items() if k in _READ})
    if cfg.get("global_pool") not in (None, ""):
        fam["global_pool"] = cfg["global_pool"]
    rest = {k: v for k, v in raw.tensors.items() if not _QKV.fullmatch(k) and not _SWIGLU.fullmatch(k)}
    c = rename(rest, RULES)
    _fuse(raw, c)
    s = c.state
    w = s.get("patch_embed.proj.weight")
    patch = int(w.shape[-1]) if w is not None else 16

    kind = want_str(where, "model_args.rope_type", fam.get("rope_type", "cat"), ("cat", "dinov3", "mixed"))
    ref = fam.get("ref_feat_shape")
    if fam.get("ref") == "name" and "ref_feat_shape" not in args:
        ref = ref_from_name(arch, patch)
    pool = want_str(where, "global_pool", fam["global_pool"], ("token", "avg", "map"))
    post = fam.get("use_post_transformer_norm")
    fc = fam.get("use_fc_norm")
    options: dict[str, Any] = dict(
        rope={"cat": "axial", "dinov3": "dinov3", "mixed": "mixed"}[kind],
        rope_theta=want_number(where, "model_args.rope_temperature", fam.get("rope_temperature", 10000.0),
                               positive=True),
        rope_grid_offset=want_number(where, "model_args.rope_grid_offset", fam.get("rope_grid_offset", 0.0)),
        rope_grid_indexing=want_str(where, "model_args.rope_grid_indexing", fam.get("rope_grid_indexing", "ij"),
                                    ("ij", "xy")),
        rope_ref_grid=None if ref is None else want_size(where, "model_args.ref_feat_shape", list(ref),
                                                         pair_only=True),
        rope_half=want_bool(where, "model_args.rope_rotate_half", fam.get("rope_rotate_half", False)),
        global_pool=pool,
        mlp_norm="blocks.0.mlp.norm.weight" in s,
        pos_embed="learned" if "pos_embed" in s else "none",
        # timm's Eva: fc_norm by default with mean pooling; the final norm unless fc_norm is on
        fc_norm=bool(fc) if fc is not None else pool == "avg",
    )
    if post is not None:
        options["final_norm"] = bool(post) or bool(options["fc_norm"])
    if "attn_pool_num_heads" in fam:
        options["pool_num_heads"] = want_int(where, "model_args.attn_pool_num_heads", fam["attn_pool_num_heads"])
    no_embed_class = args.get("no_embed_class", fam.get("no_embed_class"))
    if no_embed_class is not None:
        options["no_embed_class"] = want_bool(where, "model_args.no_embed_class", no_embed_class)
    c.config["options"] = options
    c.config["layer_norm_eps"] = fam["eps"]
    if arch.startswith("vit_pe_core_"):
        c.config["head_kind"] = "projection"  # PE core's head is its image-text projection, not a classifier
    heads = args.get("num_heads", ARCH_HEADS.get(arch))
    if heads is not None:
        c.config["num_heads"] = want_int(where, "model_args.num_heads", heads)
    size = args.get("img_size")
    if size is None:
        pcfg = cfg.get("pretrained_cfg") or {}
        inp = pcfg.get("input_size") if isinstance(pcfg, Mapping) else None
        size = list(inp[1:]) if isinstance(inp, (list, tuple)) and len(inp) == 3 else None
    if size is None and "pos_embed" not in s and (m := re.search(r"_(\d+)$", arch)):
        size = int(m.group(1))  # else the position embedding's grid says it
    if size is None and "pos_embed" not in s:
        raise err(where, f"architecture {arch!r}: no input size (model_args.img_size or pretrained_cfg.input_size)")
    if size is not None:
        h, w_ = (size, size) if isinstance(size, int) else want_size(where, "model_args.img_size", size,
                                                                      pair_only=True)
        c.config["image_size"] = (int(h), int(w_))
    if (pcfg := cfg.get("pretrained_cfg")) is not None:
        pretrained_preprocess(want_object(where, "pretrained_cfg", pcfg), where)  # checked now, used after
    return c


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """The folder's ``pretrained_cfg`` (timm's)."""
    return timm_default_preprocess(cfg, raw)

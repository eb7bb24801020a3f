"""Native vitviz checkpoints: safetensors whose metadata holds the :class:`ModelSpec` JSON under ``vitviz_spec``.

Every saved setting is checked (type and range) before use, and the declared sizes against the tensors in the file,
so a damaged or hand-edited file is refused with the field named instead of building a wrong (or huge) model.
No Qt.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields
from typing import Any, get_args

from vitviz.model.checkpoints.common import (
    Converted,
    RawCheckpoint,
    bad_field,
    check_declared,
    err,
    names,
    rename,
    want_bool,
    want_int,
    want_number,
    want_numbers,
    want_object,
    want_size,
    want_str,
)
from vitviz.model.layers import ACT_LAYERS, MLP_LAYERS, NORM_LAYERS
from vitviz.model.pos_embed import POS_EMBED_INTERPS, REL_POS_INTERPS
from vitviz.model.preprocess import Interpolation, Preprocess
from vitviz.model.rope import ROPE_INDEXINGS, ROPE_KINDS
from vitviz.model.spec import HEAD_KINDS, ModelSpec
from vitviz.model.vit import REL_POS_BIASES, ViTConfig

NAME = "native"
DESCRIPTION = "native vitviz (safetensors metadata)"
SPEC_KEY = "vitviz_spec"
FORMAT_TAG = "vitviz"

_Check = Callable[[str, str, Any], Any]


def _int(minimum: int) -> _Check:
    return lambda where, fld, v: want_int(where, fld, v, minimum)


def _optional(check: _Check) -> _Check:
    return lambda where, fld, v: None if v is None else check(where, fld, v)


def _choice(*choices: str) -> _Check:
    return lambda where, fld, v: want_str(where, fld, v, choices)


def _fraction(where: str, fld: str, v: Any) -> float:
    return want_number(where, fld, v, below_one=True)


def _positive(where: str, fld: str, v: Any) -> float:
    return want_number(where, fld, v, positive=True)


CONFIG_FIELDS: dict[str, _Check] = {
    "img_size": want_size, "patch_size": _int(1), "in_channels": _int(1), "num_classes": _int(0),
    "embed_dim": _int(1), "depth": _int(0), "num_heads": _int(1), "mlp_ratio": _positive, "qkv_bias": want_bool,
    "drop_rate": _fraction, "attn_drop_rate": _fraction, "drop_path_rate": _fraction,
    "pos_embed": _choice("learned", "sincos", "none"), "class_token": want_bool, "num_reg_tokens": _int(0),
    "distilled": want_bool, "global_pool": _choice("token", "avg", "map"), "layer_norm_eps": _positive,
    "fc_norm": _optional(want_bool), "no_embed_class": want_bool,
    "init_values": _optional(lambda w, f, v: want_number(w, f, v)),
    "act_layer": _choice(*ACT_LAYERS), "mlp_layer": _choice(*MLP_LAYERS), "pre_norm": want_bool,
    "post_norm": want_bool, "patch_bias": want_bool, "head_bias": want_bool,
    "rel_pos_bias": _choice(*REL_POS_BIASES), "pos_embed_interp": _choice(*POS_EMBED_INTERPS),
    "rel_pos_interp": _choice(*REL_POS_INTERPS),
    "rope": _choice(*ROPE_KINDS), "rope_theta": _positive, "rope_grid_offset": lambda w, f, v: want_number(w, f, v),
    "rope_grid_indexing": _choice(*ROPE_INDEXINGS),
    "rope_ref_grid": _optional(lambda w, f, v: want_size(w, f, v, pair_only=True)), "rope_half": want_bool,
    "mlp_norm": want_bool, "final_norm": want_bool, "pool_num_heads": _optional(_int(1)),
    "norm_layer": _choice(*NORM_LAYERS), "embed_norm": want_bool, "proj_bias": want_bool, "attn_norm": want_bool,
    "pool_mlp_ratio": _optional(_positive),
}
assert set(CONFIG_FIELDS) == {f.name for f in fields(ViTConfig)}


def detect(raw: RawCheckpoint) -> bool:
    """Safetensors metadata with the ``vitviz_spec`` key (written by :func:`save_checkpoint`)."""
    return SPEC_KEY in raw.metadata


def parse_spec(text: str, origin: str) -> ModelSpec:
    """The saved :class:`ModelSpec`, every field checked; a :class:`CheckpointError` names the field otherwise."""
    try:
        d = json.loads(text)
    except ValueError as e:
        raise err(origin, f"corrupt vitviz metadata: {SPEC_KEY} is not JSON ({e})") from None
    d = want_object(origin, SPEC_KEY, d)
    if "config" not in d:
        raise err(origin, f"corrupt vitviz metadata: {SPEC_KEY} has no 'config'")
    cfg = want_object(origin, "config", d["config"])
    unknown = sorted(set(cfg) - set(CONFIG_FIELDS))
    if unknown:
        raise err(origin, f"corrupt vitviz metadata: unknown settings {names(unknown)} in 'config'")
    clean_cfg = {k: CONFIG_FIELDS[k](origin, f"config.{k}", v) for k, v in cfg.items()}
    pre = _preprocess(origin, want_object(origin, "preprocess", d.get("preprocess", {})))
    labels = d.get("labels")
    if labels is not None and not (isinstance(labels, list) and all(isinstance(x, str) for x in labels)):
        raise bad_field(origin, "labels", "a list of strings or null", labels)
    name = want_str(origin, "name", d.get("name", "vit"))
    source_format = want_str(origin, "source_format", d.get("source_format", "native"))
    head_kind = want_str(origin, "head_kind", d.get("head_kind", "classifier"))
    if head_kind not in HEAD_KINDS:
        raise bad_field(origin, "head_kind", " or ".join(map(repr, HEAD_KINDS)), head_kind)
    source_path = d.get("source_path")
    if source_path is not None:
        want_str(origin, "source_path", source_path)
    try:
        config = ViTConfig.from_dict(clean_cfg)
    except ValueError as e:
        raise err(origin, f"corrupt vitviz metadata ({e})") from None
    return ModelSpec(config=config, preprocess=pre, labels=tuple(labels) if labels is not None else None,
                     source_format=source_format, source_path=source_path, name=name, head_kind=head_kind)


def _preprocess(origin: str, p: dict[str, Any]) -> Preprocess:
    default = Preprocess()
    resize = want_size(origin, "preprocess.resize", p.get("resize", default.resize))
    crop = want_size(origin, "preprocess.crop", p.get("crop", list(default.crop)), pair_only=True)
    interp = want_str(origin, "preprocess.interpolation", p.get("interpolation", default.interpolation),
                      get_args(Interpolation))
    mean = want_numbers(origin, "preprocess.mean", p.get("mean", list(default.mean)))
    std = want_numbers(origin, "preprocess.std", p.get("std", list(default.std)), positive=True)
    if len(mean) != len(std):
        raise err(origin, f"corrupt vitviz metadata: preprocess.mean has {len(mean)} values but preprocess.std has "
                          f"{len(std)}")
    naflex = {k: want_int(origin, f"preprocess.{k}", p[k], 0 if k == "max_num_patches" else 1)
              for k in ("max_num_patches", "patch_size") if k in p}
    return Preprocess(resize=resize, crop=crop, interpolation=interp, mean=mean, std=std,  # type: ignore[arg-type]
                      **naflex)


def convert(raw: RawCheckpoint) -> Converted:
    """timm names plus the saved spec (``config["spec"]``), checked against the tensors in the file."""
    c = rename(raw.tensors, [(r"(.*)", r"\1")])
    spec = parse_spec(raw.metadata[SPEC_KEY], raw.origin)
    check_declared(spec.config, c, raw.origin, "the saved settings")
    c.config["spec"] = spec
    return c

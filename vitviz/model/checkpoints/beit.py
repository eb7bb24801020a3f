"""timm ``Beit`` state dicts (BEiT, BEiT v2, data2vec-vision in timm's layout): ``attn.q_bias`` / ``attn.v_bias``
(fused into ``qkv.bias`` with a zero key part), ``gamma_1`` / ``gamma_2`` (LayerScale), relative position tables per
block (``attn.relative_position_bias_table``) or shared (``rel_pos_bias.relative_position_bias_table``). No Qt.

At other input sizes the tables are resized as timm's ``resize_rel_pos_bias_table`` does (BEiT's geometric
progression of offsets, linear interpolation) and an absolute position embedding (where used) bicubically with
antialiasing.
"""

from __future__ import annotations

import re

import torch

from vitviz.model.checkpoints.common import INDEX_BUFFER, Converted, RawCheckpoint, err, rename
from vitviz.model.checkpoints.timm import architecture_options, timm_config
from vitviz.model.checkpoints.timm import default_preprocess as timm_default_preprocess
from vitviz.model.preprocess import Preprocess
from vitviz.model.vit import ViTConfig

NAME = "timm-beit"
DESCRIPTION = "timm BEiT (blocks.0.gamma_1 / attn.q_bias / relative_position_bias_table)"

RULES = [
    (r"blocks\.(\d+)\.gamma_(1|2)", r"blocks.\1.ls\2.gamma"),
    (r"(.*)", r"\1"),
]
IGNORE = {r".*relative_position_index": INDEX_BUFFER}


def detect(raw: RawCheckpoint) -> bool:
    keys = raw.tensors.keys()
    return "patch_embed.proj.weight" in keys and any(
        k.endswith(("attn.q_bias", ".gamma_1", "relative_position_bias_table")) for k in keys)


def convert(raw: RawCheckpoint) -> Converted:
    qv = re.compile(r"blocks\.(\d+)\.attn\.(q|v)_bias")
    rest = {k: v for k, v in raw.tensors.items() if not qv.fullmatch(k)}
    c = rename(rest, RULES, IGNORE)
    biases: dict[int, dict[str, tuple[str, torch.Tensor]]] = {}
    for k, v in raw.tensors.items():
        if m := qv.fullmatch(k):
            biases.setdefault(int(m.group(1)), {})[m.group(2)] = (k, v)
    for i, d in sorted(biases.items()):
        if set(d) != {"q", "v"}:
            raise err(raw.origin, f"missing keys: block {i} has only {sorted(d)} of attn.q_bias / attn.v_bias")
        q, v = d["q"][1], d["v"][1]
        c.state[f"blocks.{i}.attn.qkv.bias"] = torch.cat([q, torch.zeros_like(q), v])
        c.source_names[f"blocks.{i}.attn.qkv.bias"] = f"blocks.{i}.attn.q_bias/v_bias"
        c.consume(d["q"][0], d["v"][0])
    options = {"pos_embed_interp": "timm", "rel_pos_interp": "timm"}
    cfg = timm_config(raw)
    if cfg is not None:
        import os

        options.update(architecture_options(cfg, os.path.join(raw.origin, "config.json")))
        if "num_heads" in options:
            c.config["num_heads"] = options.pop("num_heads")
    c.config["options"] = options
    return c


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """``pretrained_cfg`` of a timm folder, else BEiT's: mean = std = 0.5, bicubic, crop 0.9."""
    return timm_default_preprocess(cfg, raw)

"""open_clip models whose image tower is a timm trunk (``visual.trunk.*``: open_clip's ``TimmModel``), read when the
trunk is one of the timm RoPE architectures vitviz reads (:data:`vitviz.model.timm_rope_archs.FAMILIES`: open_clip's
``EVA02-B-16``, ``EVA02-L-14``, ``EVA02-L-14-336`` use ``eva02_*_clip_*``). No Qt.

The folder's ``open_clip_config.json`` says which: ``model_cfg.vision_cfg.timm_model_name`` (the timm architecture),
``timm_pool`` (the trunk's pooling; open_clip's default ``avg``) and ``timm_proj`` (``null``: the trunk's own head is
the image projection, ``num_classes = embed_dim``; ``linear``: a bias-free ``visual.head.proj`` after a head-less
trunk). The trunk's keys, without ``visual.trunk.``, are then read by :mod:`.timm_eva` exactly as a timm folder of
that architecture; the text tower is left to :mod:`vitviz.model.text`. Refused, naming it: a trunk vitviz does not
read, an ``mlp`` projection or ``abs_attn`` / ``rot_attn`` pooling, and a trunk without its config (its RoPE is in
no tensor).
"""

from __future__ import annotations

import os

from vitviz.model.checkpoints import open_clip, timm, timm_eva
from vitviz.model.checkpoints.common import Converted, RawCheckpoint, err, rename, want_str
from vitviz.model.preprocess import Preprocess
from vitviz.model.timm_rope_archs import family
from vitviz.model.vit import ViTConfig

NAME = "open_clip-timm"
DESCRIPTION = "open_clip with a timm trunk (visual.trunk.*: EVA02-*)"
TRUNK = "visual.trunk."
PROJ = "visual.head.proj.weight"


def detect(raw: RawCheckpoint) -> bool:
    """Keys under ``visual.trunk.`` (with or without a ``module.`` prefix)."""
    return any(k.startswith((TRUNK, "module." + TRUNK)) for k in raw.tensors)


def convert(raw: RawCheckpoint) -> Converted:
    where = os.path.join(raw.origin, "open_clip_config.json")
    vc = open_clip.vision_cfg(raw)
    if not vc or not vc.get("timm_model_name"):
        raise err(raw.origin, "an open_clip image tower with a timm trunk (visual.trunk.*) but no "
                              "open_clip_config.json naming it (model_cfg.vision_cfg.timm_model_name): its rotary "
                              "position embedding (RoPE) and layout are in no tensor; open the hub folder with its "
                              "open_clip_config.json")
    arch = want_str(where, "model_cfg.vision_cfg.timm_model_name", vc["timm_model_name"])
    if family(arch) is None:
        timm.refuse_unmodelled({"architecture": arch}, where)  # names the part (EVA02-E-*: post-norm blocks)
        raise err(where, f"timm_model_name {arch!r}: an open_clip timm trunk vitviz does not read (read: the timm RoPE "
                         "architectures, e.g. eva02_*_clip_*)")
    pool = want_str(where, "model_cfg.vision_cfg.timm_pool", vc.get("timm_pool") or "avg", ("token", "avg"))
    proj = vc.get("timm_proj", "linear")
    if proj not in (None, "none", "linear"):
        raise err(where, f"timm_proj={proj!r}: a projection vitviz's ViT does not build (read: null, 'none', 'linear')")
    if proj == "linear" and vc.get("timm_proj_bias"):
        raise err(where, "timm_proj_bias=true: vitviz reads the bias-free linear projection only")
    prefix = "module." if any(k.startswith("module." + TRUNK) for k in raw.tensors) else ""
    t = prefix + TRUNK
    trunk = {k[len(t):]: v for k, v in raw.tensors.items() if k.startswith(t)}
    head = raw.tensors.get(prefix + PROJ) if proj == "linear" else None
    if head is not None:
        if "head.weight" in trunk:
            raise err(raw.origin, f"both the trunk's head and {prefix + PROJ!r}: timm_proj 'linear' resets the trunk's "
                                  "head")
        trunk["head.weight"] = head
    sub = RawCheckpoint(trunk, raw.origin, raw.container,
                        hf_config={"architecture": arch, "model_args": {}, "global_pool": pool})
    c = timm_eva.convert(sub)
    back = {k: t + k for k in trunk}
    if head is not None:
        back["head.weight"] = prefix + PROJ
    c.source_names = {ours: back.get(src, src) for ours, src in c.source_names.items()}
    c.consumed = {back.get(k, k) for k in c.consumed}
    c.ignored = {back.get(k, k): why for k, why in c.ignored.items()}
    c.unused = [back.get(k, k) for k in c.unused]
    rest = rename({k: v for k, v in raw.tensors.items() if not k.startswith(t) and k != prefix + PROJ}, [],
                  open_clip.TEXT)
    c.ignored.update(rest.ignored)
    c.unused += rest.unused
    if head is not None or "head.weight" in c.state:
        c.config["head_kind"] = "projection"  # the image embedding
    return c


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """``preprocess_cfg`` of ``open_clip_config.json`` if present, else CLIP's (as :mod:`.open_clip`)."""
    return open_clip.default_preprocess(cfg, raw)


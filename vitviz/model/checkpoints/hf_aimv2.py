"""Hugging Face AIMv2 image towers: ``Aimv2VisionModel`` and the vision half of an ``Aimv2Model`` (transformers'
``models/aimv2``). No Qt.

``[vision_model.]embeddings.patch_embed`` (a Conv2d) then ``embeddings.rms_norm`` (the normed patch embeddings),
``embeddings.position_embedding`` (a learned table; none with ``is_native``: the 2-D sin-cos embedding of the grid,
laid out [sin x, cos x, sin y, cos y] as vitviz's ``pos_embed="sincos"``), ``encoder.layers.{i}.rms_norm{1,2}``,
``attention.{q,k,v,out}_proj`` (biases only with ``qkv_bias``), ``ffn.gate_proj / up_proj / down_proj`` (SiLU-gated:
packed into vitviz's SwiGLU as [gate; value]; biases only with ``mlp_bias``), ``rms_norm`` (every norm an RMSNorm,
``rms_norm_eps``), no [CLS]. Without the head (``use_head`` false) the output is the mean of the tokens after the final
norm, as timm's AIMv2.

The attention-pooling head (``use_head``: ``head.cls_token`` as the query, with no query projection, ``head.k_proj``,
``head.v_proj``, softmax, ``head.output_proj``; no norm, no MLP) is read into vitviz's attention pool
(:class:`~vitviz.model.layers.AttentionPool`, the "MAP" head) exactly: its query projection is the identity (weight I,
bias 0) and its MLP's output layer zero, so that ``y + MLP(norm(y))`` is ``y``; the pooling attention is the head's
softmax. ``Aimv2Model``'s ``visual_projection`` (no bias) becomes the head (``get_image_features``: the image
embedding); its text tower is left to :mod:`vitviz.model.text`.

Refused, naming the setting: another ``hidden_act`` than SiLU; ``qkv_bias`` without ``mlp_bias`` or the other way
round (vitviz's ViT has one switch for the biases of the attention output and the MLP).
"""

from __future__ import annotations

import os
import re
from typing import Any

import torch

from vitviz.model.checkpoints import hf
from vitviz.model.checkpoints.common import (
    INDEX_BUFFER,
    TEXT_TOWER,
    Converted,
    RawCheckpoint,
    err,
    want_bool,
    want_int,
    want_number,
    want_object,
    want_size,
    want_str,
)
from vitviz.model.preprocess import Preprocess
from vitviz.model.vit import ViTConfig

NAME = "hf-aimv2"
DESCRIPTION = "Hugging Face Aimv2VisionModel (embeddings.patch_embed, encoder.layers.*.rms_norm1)"

PREFIXES = ("vision_model.", "")
TEXT = {r"text_model\..*": TEXT_TOWER, r"text_projection\.weight": TEXT_TOWER, r"logit_scale": TEXT_TOWER,
        r"(?:vision_model\.)?embeddings\.position_ids": INDEX_BUFFER}


def key_prefix(keys) -> str | None:
    keys = set(keys)
    return next((p for p in PREFIXES if f"{p}embeddings.patch_embed.weight" in keys
                 and f"{p}encoder.layers.0.rms_norm1.weight" in keys), None)


def detect(raw: RawCheckpoint) -> bool:
    """``[vision_model.]embeddings.patch_embed.weight`` and ``encoder.layers.0.rms_norm1.weight``."""
    return key_prefix(raw.tensors) is not None


def _vision_config(raw: RawCheckpoint, where: str) -> dict[str, Any]:
    cfg = dict(raw.hf_config or {})
    if "vision_config" in cfg:  # an Aimv2Model folder
        cfg = dict(want_object(where, "vision_config", cfg["vision_config"]))
    return {k: v for k, v in cfg.items() if v is not None}


def convert(raw: RawCheckpoint) -> Converted:
    t = raw.tensors
    prefix = key_prefix(t) or ""
    p = re.escape(prefix)
    where = os.path.join(raw.origin, "config.json")
    cfg = _vision_config(raw, where)
    L = p + r"encoder\.layers\.(\d+)\."
    rules = [
        (p + r"embeddings\.patch_embed\.(weight|bias)", r"patch_embed.proj.\1"),
        (p + r"embeddings\.rms_norm\.weight", "patch_embed.norm.weight"),
        (L + r"rms_norm(1|2)\.weight", r"blocks.\1.norm\2.weight"),
        (L + r"attention\.out_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
        (L + r"ffn\.down_proj\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
        (p + r"rms_norm\.weight", "norm.weight"),
        (p + r"head\.output_proj\.(weight|bias)", r"attn_pool.proj.\1"),
        (r"visual_projection\.weight", "head.weight"),
    ]
    glu = re.compile(L + r"ffn\.(gate_proj|up_proj)\.(weight|bias)")
    special = re.compile(p + r"embeddings\.position_embedding\.weight|" + p + r"head\.(k_proj|v_proj)\.(weight|bias)|"
                         + p + r"head\.cls_token")
    rest = {k: v for k, v in t.items() if not glu.fullmatch(k) and not special.fullmatch(k)}
    c = hf.fuse_qkv(RawCheckpoint(rest, raw.origin, raw.container), p + r"encoder\.layers\.", rules, TEXT)
    # the SiLU-gated MLP: [gate; value] in vitviz's packed SwiGLU
    mlp: dict[tuple[int, str], dict[str, tuple[str, torch.Tensor]]] = {}
    for k, v in t.items():
        if m := glu.fullmatch(k):
            mlp.setdefault((int(m.group(1)), m.group(3)), {})[m.group(2)] = (k, v)
    for (i, kind), d in sorted(mlp.items()):
        if set(d) != {"gate_proj", "up_proj"}:
            raise err(raw.origin, f"missing keys: block {i} has only {sorted(d)} of its gated MLP {kind}")
        c.state[f"blocks.{i}.mlp.fc1.{kind}"] = torch.cat([d["gate_proj"][1], d["up_proj"][1]])
        c.source_names[f"blocks.{i}.mlp.fc1.{kind}"] = f"{d['gate_proj'][0]} + {d['up_proj'][0]}"
        c.consume(d["gate_proj"][0], d["up_proj"][0])
    act = want_str(where, "hidden_act", cfg.get("hidden_act", "silu"))
    if act != "silu":
        raise err(where, f"hidden_act={act!r}: vitviz's gated MLP (SwiGLU) gates with SiLU only")
    attn_bias = any(k.endswith(".attn.proj.bias") for k in c.state)
    mlp_bias = any(k.endswith(".mlp.fc2.bias") for k in c.state)
    if attn_bias != mlp_bias:
        raise err(raw.origin, f"the attention output {'has' if attn_bias else 'lacks'} biases but the MLP "
                              f"{'has' if mlp_bias else 'lacks'} them (qkv_bias / mlp_bias differ): vitviz's ViT has "
                              "one switch for both")
    native = want_bool(where, "is_native", cfg.get("is_native", False))
    pe = t.get(f"{prefix}embeddings.position_embedding.weight")
    if pe is not None:
        if native:
            raise err(where, "is_native=true but the weights hold a position table "
                             f"({prefix}embeddings.position_embedding.weight)")
        c.state["pos_embed"] = pe.unsqueeze(0) if pe.ndim == 2 else pe
        c.source_names["pos_embed"] = f"{prefix}embeddings.position_embedding.weight"
        c.consume(f"{prefix}embeddings.position_embedding.weight")
    elif not native and raw.hf_config is not None:
        raise err(raw.origin, f"missing keys: '{prefix}embeddings.position_embedding.weight' (config.json does not "
                              "say is_native)")
    head = _read_head(raw, prefix, c)
    options: dict[str, Any] = dict(norm_layer="rmsnorm", global_pool="map" if head else "avg", fc_norm=False,
                                   pos_embed="learned" if pe is not None else "sincos")
    if pe is None:  # the sin-cos embedding of each input's own grid, as transformers builds it
        options["pos_embed_interp"] = "sincos_grid"
    c.config["options"] = options
    c.config["layer_norm_eps"] = want_number(where, "rms_norm_eps", cfg.get("rms_norm_eps", 1e-5), positive=True)
    if "num_attention_heads" in cfg:
        c.config["num_heads"] = want_int(where, "num_attention_heads", cfg["num_attention_heads"])
    size = want_size(where, "image_size", cfg.get("image_size", 224))
    if pe is None:  # the sin-cos grid says nothing: the config's (or transformers' default) input size
        c.config["image_size"] = (size, size) if isinstance(size, int) else size
    if "head.weight" in c.state:
        c.config["head_kind"] = "projection"
    if raw.hf_preprocessor:
        hf.preprocessor_settings(raw)
    return c


def _read_head(raw: RawCheckpoint, prefix: str, c: Converted) -> bool:
    """The attention-pooling head as vitviz's attention pool (identity query projection, zero MLP output); False when
    the checkpoint has none."""
    t = raw.tensors
    h = f"{prefix}head."
    if f"{h}cls_token" not in t:
        return False
    need = [f"{h}cls_token", f"{h}k_proj.weight", f"{h}v_proj.weight", f"{h}output_proj.weight"]
    miss = [k for k in need if k not in t]
    if miss:
        raise err(raw.origin, f"missing keys {', '.join(map(repr, miss))} (the attention-pooling head)")
    latent = t[f"{h}cls_token"]
    d = int(latent.shape[-1])
    c.state["attn_pool.latent"] = latent.reshape(1, 1, d)
    c.state["attn_pool.kv.weight"] = torch.cat([t[f"{h}k_proj.weight"], t[f"{h}v_proj.weight"]])
    c.source_names.update({"attn_pool.latent": f"{h}cls_token", "attn_pool.kv.weight": f"{h}k_proj/v_proj.weight"})
    c.consume(*need[:3])
    dt = latent.dtype
    if f"{h}k_proj.bias" in t or f"{h}v_proj.bias" in t:
        if f"{h}k_proj.bias" not in t or f"{h}v_proj.bias" not in t:
            raise err(raw.origin, f"missing keys: the head has only one of '{h}k_proj.bias' / '{h}v_proj.bias'")
        c.state["attn_pool.kv.bias"] = torch.cat([t[f"{h}k_proj.bias"], t[f"{h}v_proj.bias"]])
        c.source_names["attn_pool.kv.bias"] = f"{h}k_proj/v_proj.bias"
        c.consume(f"{h}k_proj.bias", f"{h}v_proj.bias")
    else:  # vitviz's pool always has key / value biases: zeros add nothing
        c.state["attn_pool.kv.bias"] = torch.zeros(2 * d, dtype=dt)
        c.source_names["attn_pool.kv.bias"] = "(none in AIMv2's head: zeros)"
    # the head's query is the token itself; no norm, no MLP: an exact identity and a zero residual branch
    hidden = int(c.state["blocks.0.mlp.fc1.weight"].shape[0]) if "blocks.0.mlp.fc1.weight" in c.state else 4 * d
    c.state.update({
        "attn_pool.q.weight": torch.eye(d, dtype=dt),
        "attn_pool.q.bias": torch.zeros(d, dtype=dt),
        "attn_pool.norm.weight": torch.ones(d, dtype=dt),
        "attn_pool.mlp.fc1.weight": torch.zeros(hidden, d, dtype=dt),
        "attn_pool.mlp.fc1.bias": torch.zeros(hidden, dtype=dt),
        "attn_pool.mlp.fc2.weight": torch.zeros(d, hidden, dtype=dt),
        "attn_pool.mlp.fc2.bias": torch.zeros(d, dtype=dt),
    })
    for k in ("attn_pool.q.weight", "attn_pool.q.bias", "attn_pool.norm.weight", "attn_pool.mlp.fc1.weight",
              "attn_pool.mlp.fc1.bias", "attn_pool.mlp.fc2.weight", "attn_pool.mlp.fc2.bias"):
        if k in c.state:
            c.source_names[k] = f"(none in AIMv2's head: {'identity' if '.q.' in k else 'zero residual branch'})"
    return True


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """``preprocessor_config.json`` if present, else CLIP's (AIMv2's processor: OpenAI CLIP mean/std, bicubic)."""
    return hf.default_preprocess(cfg, raw, "clip")

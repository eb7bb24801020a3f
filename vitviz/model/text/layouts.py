"""The text towers' state-dict layouts, turned into :class:`~vitviz.model.text.encoder.TextEncoder` weights. No Qt.

===========  =====================================================================  ==================================
layout       keys                                                                   settings from
===========  =====================================================================  ==================================
open_clip    ``[text.]token_embedding.weight``, ``[text.]positional_embedding``,    ``open_clip_config.json``'s
             ``[text.]transformer.resblocks.N.{ln_1, attn.in_proj_*, attn.out_proj,  ``model_cfg`` (``text_cfg``,
             ln_2, mlp.c_fc, mlp.c_proj, ls_1, ls_2}``, ``[text.]ln_final``,         ``quick_gelu``); without one,
             ``[text.]text_projection[.weight/.bias]``, ``logit_scale``,             OpenAI's rules (heads = width / 64,
             ``logit_bias`` (``text.``: open_clip's CustomTextCLIP, e.g. SigLIP)     QuickGELU for OpenAI's weights)
hf-clip      ``text_model.{embeddings, encoder.layers.N, final_layer_norm}``,        ``config.json``'s ``text_config``
             ``text_projection.weight``, ``logit_scale``                             (transformers' defaults)
hf-siglip    ``text_model.{embeddings, encoder.layers.N, final_layer_norm, head}``,  likewise
             ``logit_scale``, ``logit_bias``
===========  =====================================================================  ==================================

Sizes (vocabulary, context, width, layers, MLP, embedding) are read from the tensors; the number of heads, the
activation, the LayerNorm eps, the mask and the pooling from the settings. :func:`convert` returns the weights, the
config, and the score's scale (``exp(logit_scale)``) and bias.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from vitviz.model.text.encoder import TextConfig

LAYOUTS = ("open_clip", "hf-clip", "hf-siglip")
_OC = re.compile(r"^(?:module\.)?(?:text\.)?")
_OC_BLOCK = re.compile(
    r"^transformer\.resblocks\.(\d+)\.(ln_1|ln_2|attn\.in_proj_weight|attn\.in_proj_bias|attn\.out_proj|mlp\.c_fc|"
    r"mlp\.c_proj|ls_1|ls_2)(\.weight|\.bias|\.gamma)?$")
_OC_PARTS = {"ln_1": "norm1", "ln_2": "norm2", "attn.out_proj": "attn.proj", "mlp.c_fc": "mlp.fc1",
             "mlp.c_proj": "mlp.fc2", "ls_1": "ls1", "ls_2": "ls2"}
_HF_BLOCK = re.compile(r"^text_model\.encoder\.layers\.(\d+)\.(layer_norm1|layer_norm2|self_attn\.out_proj|mlp\.fc1|"
                       r"mlp\.fc2|self_attn\.[qkv]_proj)\.(weight|bias)$")
_HF_PARTS = {"layer_norm1": "norm1", "layer_norm2": "norm2", "self_attn.out_proj": "attn.proj", "mlp.fc1": "mlp.fc1",
             "mlp.fc2": "mlp.fc2"}
_HF_ACT = {"quick_gelu": "quick_gelu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
           "gelu_fast": "gelu_tanh"}


OC_WHERE = "open_clip_config.json: model_cfg.text_cfg."  # (where the settings are, for messages)
HF_WHERE = "config.json: text_config."


class LayoutError(ValueError):
    """The tensors or settings are not a text tower vitviz builds (the message says what and why, no file name:
    the caller puts the file first)."""


@dataclass
class Converted:
    """A text tower ready to build: its config, weights in :class:`TextEncoder` names, the score's scale and bias."""

    config: TextConfig
    state: dict[str, torch.Tensor]
    scale: float
    bias: float
    family: str  # "clip" | "siglip"


def layout(names: Mapping[str, Any] | list[str]) -> str | None:
    """Which layout the tensor names are (:data:`LAYOUTS`), or None: no text tower among them."""
    keys = set(names)
    if "text_model.embeddings.token_embedding.weight" in keys:
        return "hf-siglip" if "text_model.head.weight" in keys else "hf-clip"
    for p in ("", "text.", "module.", "module.text."):
        if f"{p}token_embedding.weight" in keys and f"{p}transformer.resblocks.0.attn.in_proj_weight" in keys:
            return "open_clip"
    return None


def wanted(layout_name: str):
    """The name filter of the tensors ``layout_name`` needs (the image tower's are never read)."""
    if layout_name == "open_clip":
        return lambda k: not re.match(r"(?:module\.)?visual\.", k) and not k.endswith("attn_mask")
    return lambda k: k.startswith("text_model.") or k in ("text_projection.weight", "logit_scale", "logit_bias")


def _scalar(tensors: Mapping[str, torch.Tensor], names: tuple[str, ...]) -> float | None:
    for n in names:
        t = tensors.get(n)
        if t is not None:
            if t.numel() != 1:
                raise LayoutError(f"{n} has shape {tuple(t.shape)}, expected one number")
            return float(t.reshape(()).float())
    return None


def _fp32(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.is_floating_point() else t


def _count(keys, pattern: re.Pattern[str]) -> int:
    idx = {int(m.group(1)) for k in keys if (m := pattern.match(k))}
    if idx != set(range(len(idx))):
        raise LayoutError(f"the text blocks are not numbered 0..N-1 (found {sorted(idx)[:8]})")
    return len(idx)


def setting(cfg: Mapping[str, Any], key: str, default: Any, kind: type, where: str = "") -> Any:
    """``cfg[key]`` (``default`` when absent or null) as ``kind`` (int or float; a bool or text is refused);
    ``where``: the settings' place, for the message (``"open_clip_config.json: model_cfg.text_cfg."``).

    Raises:
        LayoutError: a value of another type, or not finite.
    """
    value = cfg.get(key)
    if value is None:
        return default
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind is int:
        ok = ok and float(value).is_integer()
    if not ok:
        want = "an integer" if kind is int else "a number"
        raise LayoutError(f"{where or 'the text setting '}{key} is {str(value)[:40]!r}, not {want}")
    return kind(value)


def _need(state: Mapping[str, torch.Tensor], name: str, where: str) -> torch.Tensor:
    t = state.get(name)
    if t is None:
        raise LayoutError(f"no text tower weight {where!r} (an incomplete checkpoint?)")
    return t


# ---------------------------------------------------------------------------------------------------------------------
# open_clip / OpenAI
# ---------------------------------------------------------------------------------------------------------------------
def _refuse_open_clip_cfg(text_cfg: Mapping[str, Any]) -> None:
    if text_cfg.get("hf_model_name"):
        raise LayoutError(f"an open_clip model with a Hugging Face text encoder ({text_cfg['hf_model_name']!r}); "
                          "vitviz builds open_clip's own text transformer only")
    if text_cfg.get("embed_cls"):
        raise LayoutError("an open_clip text tower with a class token (CoCa); not supported")
    custom = [k for k in ("qk_norm", "scaled_cosine_attn", "scale_heads", "scale_attn_inner", "scale_attn",
                          "scale_fc") if text_cfg.get(k)]
    if custom or text_cfg.get("block_type") not in (None, "default"):
        raise LayoutError(f"an open_clip text tower with custom blocks ({', '.join(custom) or text_cfg['block_type']})"
                          "; not supported")
    if text_cfg.get("pool_type", "argmax") not in ("argmax", "eos", "first", "last"):
        raise LayoutError(f"open_clip text pooling {text_cfg['pool_type']!r} is not supported")


def open_clip(tensors: Mapping[str, torch.Tensor], model_cfg: Mapping[str, Any] | None, quick_gelu: bool) -> Converted:
    """An open_clip / OpenAI text tower (``model_cfg``: ``open_clip_config.json``'s ``model_cfg``, None without one;
    ``quick_gelu``: the activation when the config does not say)."""
    text_cfg = dict((model_cfg or {}).get("text_cfg") or {})
    _refuse_open_clip_cfg(text_cfg)
    state: dict[str, torch.Tensor] = {}
    unknown = []
    for k, v in tensors.items():
        name = _OC.sub("", k, count=1)
        m = _OC_BLOCK.match(name)
        if m:
            i, part, kind = m.groups()
            if part.startswith("attn.in_proj_"):
                state[f"blocks.{i}.attn.qkv.{part[len('attn.in_proj_'):]}"] = v
            else:
                state[f"blocks.{i}.{_OC_PARTS[part]}{kind or ''}"] = v
        elif name in ("token_embedding.weight", "ln_final.weight", "ln_final.bias"):
            state[name.replace("ln_final", "norm")] = v
        elif name == "positional_embedding":
            state["pos_embed"] = v
        elif name == "text_projection":  # x @ P: [D, E] -> Linear weight [E, D]
            state["proj.weight"] = v.t()
        elif name in ("text_projection.weight", "text_projection.bias"):
            state[name.replace("text_projection", "proj")] = v
        elif name not in ("logit_scale", "logit_bias", "input_resolution", "context_length", "vocab_size"):
            unknown.append(k)
    if unknown:
        raise LayoutError(f"text tower weights vitviz does not know: {', '.join(unknown[:4])}"
                          f"{' ...' if len(unknown) > 4 else ''} (custom open_clip blocks?)")
    emb = _need(state, "token_embedding.weight", "token_embedding")
    pos = _need(state, "pos_embed", "positional_embedding")
    width = emb.shape[1]
    layers = _count(state, re.compile(r"^blocks\.(\d+)\.attn\.qkv\.weight$"))
    if text_cfg.get("heads") is not None:
        heads = setting(text_cfg, "heads", None, int, OC_WHERE)
    else:  # open_clip's CLIPTextCfg default with a config; OpenAI's build_model rule (width / 64) without
        heads = 8 if text_cfg else max(1, width // 64)
    act_kwargs = text_cfg.get("act_kwargs") or {}
    act = "quick_gelu" if quick_gelu else ("gelu_tanh" if act_kwargs.get("approximate") == "tanh" else "gelu")
    pool = str(text_cfg.get("pool_type", "argmax"))
    proj = state.get("proj.weight")
    if text_cfg.get("proj_type") == "none":
        state.pop("proj.weight", None), state.pop("proj.bias", None)
        proj = None
    cfg = TextConfig(
        vocab_size=emb.shape[0], context_length=pos.shape[0], width=width, heads=heads, layers=layers,
        mlp_dim=_need(state, "blocks.0.mlp.fc1.weight", "mlp.c_fc").shape[0] if layers else 4 * width,
        embed_dim=None if proj is None else proj.shape[0], act=act,
        eps=setting(text_cfg.get("norm_kwargs") or {}, "eps", 1e-5, float, OC_WHERE + "norm_kwargs."),
        causal=not text_cfg.get("no_causal_mask"),
        pool=pool, eos_id=setting(text_cfg, "eos_id", 2, int, OC_WHERE) if pool == "eos" else None,
        proj_bias="proj.bias" in state, layer_scale="blocks.0.ls1.gamma" in state)
    return _finish(cfg, state, tensors, ("logit_scale", "module.logit_scale"),
                   ("logit_bias", "module.logit_bias"))


# ---------------------------------------------------------------------------------------------------------------------
# Hugging Face CLIPModel / SiglipModel
# ---------------------------------------------------------------------------------------------------------------------
def hf(tensors: Mapping[str, torch.Tensor], text_config: Mapping[str, Any] | None, siglip: bool) -> Converted:
    """A Hugging Face ``CLIPModel`` or ``SiglipModel`` text tower (``text_config``: ``config.json``'s
    ``text_config``; transformers' defaults where it says nothing)."""
    tc = dict(text_config or {})
    state: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    p = "text_model."
    for k, v in tensors.items():
        m = _HF_BLOCK.match(k)
        if m:
            i, part, kind = m.groups()
            if part.startswith("self_attn.") and part[-6] in "qkv" and part.endswith("_proj"):
                qkv.setdefault((i, kind), {})[part[-6]] = v
            else:
                state[f"blocks.{i}.{_HF_PARTS[part]}.{kind}"] = v
        elif k == p + "embeddings.token_embedding.weight":
            state["token_embedding.weight"] = v
        elif k == p + "embeddings.position_embedding.weight":
            state["pos_embed"] = v
        elif k.startswith(p + "final_layer_norm."):
            state["norm." + k.rsplit(".", 1)[1]] = v
        elif k in (p + "head.weight", p + "head.bias", "text_projection.weight"):
            state["proj." + k.rsplit(".", 1)[1]] = v
    for (i, kind), parts in qkv.items():
        if set(parts) != {"q", "k", "v"}:
            raise LayoutError(f"text layer {i} lacks {', '.join(sorted({'q', 'k', 'v'} - set(parts)))}_proj.{kind}")
        state[f"blocks.{i}.attn.qkv.{kind}"] = torch.cat([parts["q"], parts["k"], parts["v"]])
    emb = _need(state, "token_embedding.weight", p + "embeddings.token_embedding.weight")
    pos = _need(state, "pos_embed", p + "embeddings.position_embedding.weight")
    width = emb.shape[1]
    layers = _count(state, re.compile(r"^blocks\.(\d+)\.attn\.qkv\.weight$"))
    act_name = str(tc.get("hidden_act", "gelu_pytorch_tanh" if siglip else "quick_gelu"))
    if act_name not in _HF_ACT:
        raise LayoutError(f"text activation {act_name!r} is not supported (known: {', '.join(_HF_ACT)})")
    eos = tc.get("eos_token_id", 49407)
    if siglip:
        pool, eos_id = "last", None
    else:  # transformers' rule: the legacy eos_token_id 2 means argmax of the ids (OpenAI's), else the first eos
        pool, eos_id = ("argmax", None) if eos == 2 or not isinstance(eos, int) else ("eos", int(eos))
    proj = state.get("proj.weight")
    cfg = TextConfig(
        vocab_size=emb.shape[0], context_length=pos.shape[0], width=width,
        heads=setting(tc, "num_attention_heads", 12 if siglip else 8, int, HF_WHERE), layers=layers,
        mlp_dim=_need(state, "blocks.0.mlp.fc1.weight", "mlp.fc1").shape[0] if layers else 4 * width,
        embed_dim=None if proj is None else proj.shape[0], act=_HF_ACT[act_name],
        eps=setting(tc, "layer_norm_eps", 1e-6 if siglip else 1e-5, float, HF_WHERE), causal=not siglip, pool=pool,
        eos_id=eos_id,
        proj_bias="proj.bias" in state)
    return _finish(cfg, state, tensors, ("logit_scale",), ("logit_bias",))


def _finish(cfg: TextConfig, state: dict[str, torch.Tensor], tensors: Mapping[str, torch.Tensor],
            scale_names: tuple[str, ...], bias_names: tuple[str, ...]) -> Converted:
    problem = cfg.problem()
    if problem is not None:
        raise LayoutError(problem)
    log_scale = _scalar(tensors, scale_names)
    if log_scale is None:
        raise LayoutError("no logit_scale (the learned temperature of the image-text score)")
    bias = _scalar(tensors, bias_names)
    if not (math.isfinite(log_scale) and log_scale < 50) or (bias is not None and not math.isfinite(bias)):
        raise LayoutError(f"logit_scale {log_scale:.4g}, logit_bias {bias}: the score's scale must be a finite "
                          "log-scale below 50 (CLIP's is ln 100 = 4.6) and its bias finite")
    state = {k: _fp32(v) for k, v in state.items()}
    bad = next((k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())), None)
    if bad is not None:  # (its prompts would all score NaN)
        raise LayoutError(f"the text tower's weights hold NaN or infinite values ({bad}, as vitviz names it)")
    return Converted(cfg, state, math.exp(log_scale), bias or 0.0, "clip" if bias is None else "siglip")


def convert(tensors: Mapping[str, torch.Tensor], layout_name: str, settings: Mapping[str, Any] | None,
            quick_gelu: bool = False) -> Converted:
    """The text tower of ``tensors`` in ``layout_name`` (``settings``: open_clip's ``model_cfg`` or HF's
    ``text_config``)."""
    if layout_name == "open_clip":
        return open_clip(tensors, settings, quick_gelu)
    if layout_name in ("hf-clip", "hf-siglip"):
        return hf(tensors, settings, siglip=layout_name == "hf-siglip")
    raise LayoutError(f"unknown text layout {layout_name!r} (known: {', '.join(LAYOUTS)})")

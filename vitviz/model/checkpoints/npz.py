"""Google ``.npz`` checkpoints (``vit_jax`` and ``big_vision``): flax names, HWIO / [D, H, hd] kernels. No Qt."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

from vitviz.model.checkpoints.common import Converted, RawCheckpoint, err, resolve_preprocess
from vitviz.model.preprocess import Preprocess
from vitviz.model.vit import ViTConfig

NAME = "npz"
DESCRIPTION = "Google npz (embedding/kernel)"

PREFIXES = ("", "opt/target/", "params/", "params/img/")


def key_prefix(keys: Any) -> str | None:
    """The prefix of Google-layout keys (``""``, ``"opt/target/"``, ``"params/"``, ``"params/img/"``), or None."""
    keys = set(keys)
    for p in PREFIXES:
        if f"{p}embedding/kernel" in keys and any(k.startswith(f"{p}Transformer/") for k in keys):
            return p
    return None


def detect(raw: RawCheckpoint) -> bool:
    """``embedding/kernel`` and ``Transformer/...`` keys, under one of :data:`PREFIXES`."""
    return key_prefix(raw.tensors) is not None


def convert(raw: RawCheckpoint) -> Converted:
    """Transpose / reshape flax kernels to torch layouts and fuse query/key/value; heads from the kernel shape."""
    prefix = key_prefix(raw.tensors) or ""
    t = {k[len(prefix):]: v for k, v in raw.tensors.items() if k.startswith(prefix)}
    used: set[str] = set()
    state: dict[str, torch.Tensor] = {}
    names: dict[str, str] = {}
    heads_found: list[int] = []

    def take(src: str, dst: str, fn: Callable[[torch.Tensor], torch.Tensor] = lambda x: x, *,
             stacked_index: int | None = None) -> None:
        if src not in t:
            return
        v = t[src]
        if stacked_index is not None:
            v = v[stacked_index]
        try:
            state[dst] = fn(v.float()).contiguous()
        except RuntimeError as e:
            raise err(raw.origin, f"shape mismatch: {src!r} has shape {tuple(v.shape)} ({e})") from None
        names[dst] = src
        used.add(src)

    take("embedding/kernel", "patch_embed.proj.weight", lambda k: k.permute(3, 2, 0, 1))  # HWIO -> OIHW
    take("embedding/bias", "patch_embed.proj.bias")
    take("cls", "cls_token")
    take("Transformer/posembed_input/pos_embedding", "pos_embed")
    take("pos_embedding", "pos_embed")
    take("Transformer/encoder_norm/scale", "norm.weight")
    take("Transformer/encoder_norm/bias", "norm.bias")
    take("head/kernel", "head.weight", lambda k: k.t())
    take("head/bias", "head.bias")

    keys = list(t)
    stacked = any(k.startswith("Transformer/encoderblock/") for k in keys)
    big_vision = any(re.match(r"Transformer/encoderblock(_0)?/MlpBlock_0/", k) for k in keys)
    mha, mlp, ln1, ln2 = ("MultiHeadDotProductAttention_0", "MlpBlock_0", "LayerNorm_0", "LayerNorm_1") if big_vision \
        else ("MultiHeadDotProductAttention_1", "MlpBlock_3", "LayerNorm_0", "LayerNorm_2")
    if stacked:
        depth = t["Transformer/encoderblock/LayerNorm_0/scale"].shape[0] \
            if "Transformer/encoderblock/LayerNorm_0/scale" in t else 0
        blocks = [(i, "Transformer/encoderblock/", i) for i in range(depth)]
    else:
        idx = sorted({int(m.group(1)) for k in keys if (m := re.match(r"Transformer/encoderblock_(\d+)/", k))})
        blocks = [(i, f"Transformer/encoderblock_{i}/", None) for i in idx]

    for i, pre, si in blocks:
        b = f"blocks.{i}."
        take(pre + f"{ln1}/scale", b + "norm1.weight", stacked_index=si)
        take(pre + f"{ln1}/bias", b + "norm1.bias", stacked_index=si)
        take(pre + f"{ln2}/scale", b + "norm2.weight", stacked_index=si)
        take(pre + f"{ln2}/bias", b + "norm2.bias", stacked_index=si)
        take(pre + f"{mlp}/Dense_0/kernel", b + "mlp.fc1.weight", lambda k: k.t(), stacked_index=si)
        take(pre + f"{mlp}/Dense_0/bias", b + "mlp.fc1.bias", stacked_index=si)
        take(pre + f"{mlp}/Dense_1/kernel", b + "mlp.fc2.weight", lambda k: k.t(), stacked_index=si)
        take(pre + f"{mlp}/Dense_1/bias", b + "mlp.fc2.bias", stacked_index=si)
        # out: kernel [H, hd, D] -> weight [D, H*hd]
        take(pre + f"{mha}/out/kernel", b + "attn.proj.weight", lambda k: k.reshape(-1, k.shape[-1]).t(),
             stacked_index=si)
        take(pre + f"{mha}/out/bias", b + "attn.proj.bias", stacked_index=si)
        # query/key/value: kernel [D, H, hd] -> weight [H*hd, D]; bias [H, hd] -> [H*hd]
        qkv_k = [pre + f"{mha}/{n}/kernel" for n in ("query", "key", "value")]
        qkv_b = [pre + f"{mha}/{n}/bias" for n in ("query", "key", "value")]
        if all(k in t for k in qkv_k):
            ks = [t[k][si] if si is not None else t[k] for k in qkv_k]
            if any(k.ndim != 3 for k in ks):
                raise err(raw.origin, f"shape mismatch: {qkv_k[0]!r} has shape {tuple(ks[0].shape)}, "
                                      "expected [embed_dim, heads, head_dim]")
            state[b + "attn.qkv.weight"] = torch.cat([k.float().reshape(k.shape[0], -1).t() for k in ks]).contiguous()
            names[b + "attn.qkv.weight"] = qkv_k[0].replace("query", "query|key|value")
            used.update(qkv_k)
            heads_found.append(int(ks[0].shape[1]))
        if all(k in t for k in qkv_b):
            bs = [t[k][si] if si is not None else t[k] for k in qkv_b]
            state[b + "attn.qkv.bias"] = torch.cat([x.float().reshape(-1) for x in bs]).contiguous()
            names[b + "attn.qkv.bias"] = qkv_b[0].replace("query", "query|key|value")
            used.update(qkv_b)
    c = Converted(state=state, source_names={k: prefix + v for k, v in names.items()},
                  unused=[prefix + k for k in keys if k not in used], consumed={prefix + k for k in used},
                  ignored={k: "outside the model's parameters (optimizer state, other towers)" for k in raw.tensors
                           if not k.startswith(prefix)})
    if heads_found:
        c.config["num_heads"] = heads_found[0]
    c.config["layer_norm_eps"] = 1e-6
    return c


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """Google's mean = std = 0.5, bicubic, crop_pct 0.875 (1.0 above 224 px)."""
    return resolve_preprocess("inception", cfg.img_size)  # type: ignore[return-value]

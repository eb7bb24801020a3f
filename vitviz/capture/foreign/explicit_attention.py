"""Attention written out so that its probabilities exist and lie on the path from input to output:
:class:`torch.nn.MultiheadAttention` (:func:`mha_forward`) and
:func:`torch.nn.functional.scaled_dot_product_attention` (:func:`sdpa_explicit`), each handing the per-head
probabilities to a ``record`` callback before using them.

This module never imports Qt.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from vitviz.capture.results import CaptureError


def _float_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask of *forbidden* positions (True = masked, as nn.MultiheadAttention) -> additive -inf mask."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    return mask.to(dtype)


def mha_forward(mha: nn.MultiheadAttention, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None, need_weights: bool = True,
                attn_mask: torch.Tensor | None = None, average_attn_weights: bool = True, is_causal: bool = False,
                *, record: Callable[[torch.Tensor], None] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``mha(query, key, value, ...)`` computed explicitly: the same outputs as :class:`torch.nn.MultiheadAttention`
    (``need_weights`` / ``average_attn_weights`` as there), with the per-head probabilities ``[B, H, L, S]`` (before
    dropout) passed to ``record`` and used for the output.

    Raises:
        CaptureError: ``add_bias_kv`` / ``add_zero_attn`` (extra key slots: the attention is not token x token).
    """
    if mha.bias_k is not None or mha.add_zero_attn:
        raise CaptureError("nn.MultiheadAttention with add_bias_kv or add_zero_attn adds key slots: its attention "
                           "is not a token x token matrix")
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                           "method `generate_square_subsequent_mask` to create this mask.")
    unbatched = query.dim() == 2
    if unbatched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    elif mha.batch_first:
        query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
    L, B, E = query.shape  # sequence-first from here, as F.multi_head_attention_forward
    S = key.shape[0]
    H, hd = mha.num_heads, mha.head_dim
    b = mha.in_proj_bias
    bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
    if mha._qkv_same_embed_dim:
        wq, wk, wv = mha.in_proj_weight.chunk(3)
    else:
        wq, wk, wv = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
    q = F.linear(query, wq, bq).reshape(L, B * H, hd).transpose(0, 1)
    k = F.linear(key, wk, bk).reshape(S, B * H, hd).transpose(0, 1)
    v = F.linear(value, wv, bv).reshape(S, B * H, hd).transpose(0, 1)
    scores = (q * math.sqrt(1.0 / hd)) @ k.transpose(-2, -1)  # [B*H, L, S]
    scores = scores.view(B, H, L, S)
    if attn_mask is not None:
        m = _float_mask(attn_mask, scores.dtype)
        scores = scores + (m.view(B, H, L, S) if m.dim() == 3 else m)
    if key_padding_mask is not None:
        scores = scores + _float_mask(key_padding_mask, scores.dtype).view(B, 1, 1, S)
    probs = scores.softmax(dim=-1)
    if record is not None:
        record(probs)
    dropped = F.dropout(probs, p=mha.dropout, training=mha.training) if mha.dropout > 0.0 else probs
    out = (dropped.view(B * H, L, S) @ v).transpose(0, 1).reshape(L * B, E)
    out = F.linear(out, mha.out_proj.weight, mha.out_proj.bias).view(L, B, E)
    if unbatched:
        out = out.squeeze(1)
    elif mha.batch_first:
        out = out.transpose(0, 1)
    weights = None
    if need_weights:
        weights = dropped.mean(dim=1) if average_attn_weights else dropped
        if unbatched:
            weights = weights.squeeze(0)
    return out, weights


def sdpa_explicit(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
                  dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                  enable_gqa: bool = False, *, record: Callable[[torch.Tensor], None] | None = None) -> torch.Tensor:
    """:func:`torch.nn.functional.scaled_dot_product_attention` written out (its documented reference), with the
    probabilities (before dropout) passed to ``record`` and used for the output."""
    Lq, S = query.size(-2), key.size(-2)
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    if enable_gqa and key.size(-3) != query.size(-3):
        rep = query.size(-3) // key.size(-3)
        key, value = key.repeat_interleave(rep, -3), value.repeat_interleave(rep, -3)
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        allowed = torch.ones(Lq, S, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool \
            else scores + attn_mask.to(scores.dtype)
    probs = scores.softmax(dim=-1)
    if record is not None:
        record(probs)
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p, training=True)
    return probs @ value


# the parameters of scaled_dot_product_attention in order (its positional arguments bound to names)
SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")

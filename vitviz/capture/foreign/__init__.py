"""Capture the attention of any PyTorch Vision Transformer module, not only :class:`vitviz.model.ViT`.

:func:`vitviz.capture.capture` sends every module that is not a vitviz ViT here (:func:`capture_module`). What it
looks for, in this order (:func:`find_layout`):

1. ``attention=``: module paths the user names (``"encoder.layers.*.attn"``, ``*`` = one path component). Inside
   each, the one ``softmax`` over the last axis it computes is recorded (a :class:`torch.overrides.TorchFunctionMode`
   sees ``torch.softmax``, ``Tensor.softmax``, ``F.softmax`` and ``nn.Softmax``); a call of
   ``F.scaled_dot_product_attention`` there is recomputed explicitly (``softmax(q k^T * scale + mask) @ v``) so that
   the probabilities exist and lie on the path from input to output.
2. ``torch.nn.MultiheadAttention`` submodules: for the duration of the pass their ``forward`` is an explicit
   re-implementation of :func:`torch.nn.functional.multi_head_attention_forward` that computes the per-head
   probabilities ``[B, H, N, N]`` and uses *them* for the output (so their gradients are the true gradients of the
   output), and returns what the caller asked for (``need_weights``, ``average_attn_weights``) as the module does.
3. Models whose ``forward`` takes ``output_attentions`` (and returns the probabilities of every layer): called with
   ``output_attentions=True``; the returned tensors are the ones recorded (a tensor the output does not depend on
   gets no gradient, and that is said).
4. Modules whose class name says attention (``...Attention``, ``...Attn``; innermost ones): timm's ``Attention``
   and Hugging Face's ``ViTAttention`` / ``ViTSelfAttention`` among them. As in 1; a boolean ``fused_attn`` flag
   (timm) is switched off for the pass so that the module's own explicit path runs.

Transformer blocks are the largest ancestors of the attention modules that hold no other attention module and are
called (not a ModuleList; route 3: the outermost list of same-class modules), or ``blocks=``; their outputs are the
tokens (``tokens[0]`` is the input of the first block), and each block must take exactly what the one before gave. The patch grid is read from the patch-embedding convolution's output (a ``Conv2d`` with
kernel = stride that the images go through), or computed from ``patch_size=`` / ``grid=``; the prefix-token count
is the attention's token count minus the patches. Every inference is checked against what the pass actually did
(each attention module fired exactly once, rows sum to 1, token counts agree, the user's numbers agree with the
model's), and a mismatch is a :class:`~vitviz.capture.CaptureError` naming what was seen.

:class:`AdaptedModel` wraps such a module with what the pipeline and the window ask of a model (a spec with the
preprocessing and labels, the patch size, the position embedding, the patch-embedding filters), so that
:class:`vitviz.pipeline.Pipeline`, :func:`vitviz.show` and ``vitviz --model file.py:Class`` take any of them.
:func:`load_user_model` imports a class from the user's own Python file (their code, run at their request).

This module never imports Qt.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from vitviz.capture import (
    _CAPTURE_LOCK,
    Capture,
    CaptureError,
    _model_device_dtype,
    _targets,
    check_capture_memory,
)

__all__ = ["AdaptedModel", "AdaptedSpec", "Layout", "adapt", "capture_module", "find_layout", "is_vitviz_model",
           "load_user_model", "parse_user_ref"]

Route = Literal["named", "multihead_attention", "output_attentions", "attention_modules"]
Pattern = str | Sequence[str]

_ATTENTION_CLASS = re.compile(r"(attention|attn)", re.IGNORECASE)


def is_vitviz_model(model: Any) -> bool:
    """True for a :class:`vitviz.model.ViT` (or anything with its hookable structure), which capture handles itself."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(model, nn.Module) or blocks is None or not hasattr(model, "embed") \
            or not hasattr(getattr(model, "patch_embed", None), "check_input"):
        return False
    try:
        return all(isinstance(getattr(getattr(b, "attn", None), "attn_map", None), nn.Module) for b in blocks)
    except TypeError:
        return False


# =====================================================================================================================
# layout: where the attention, the blocks and the patch embedding are (static, no forward)
# =====================================================================================================================
@dataclass(frozen=True)
class Layout:
    """Where a module's attention layers are, found by :func:`find_layout`.

    Attributes:
        route: how the probabilities are obtained (see the module docstring).
        attention: module paths of the attention layers in layer order (empty for ``"output_attentions"``).
        blocks: module paths of the transformer blocks, one per layer (their outputs are the tokens).
        patch_embed: module path of the patch-embedding ``Conv2d``, or None.
    """

    route: Route
    attention: tuple[str, ...]
    blocks: tuple[str, ...]
    patch_embed: str | None

    def describe(self) -> str:
        how = {"named": "softmax inside the named modules", "multihead_attention": "nn.MultiheadAttention, "
               "recomputed per head", "output_attentions": "forward(..., output_attentions=True)",
               "attention_modules": "softmax inside the attention modules"}[self.route]
        where = f"{_short(self.attention)}" if self.attention else "returned by the model"
        return f"{how}; attention: {where}; blocks: {_short(self.blocks)}; patch embedding: {self.patch_embed}"


def _short(paths: Sequence[str]) -> str:
    paths = list(paths)
    if len(paths) <= 3:
        return ", ".join(paths) or "none"
    return f"{paths[0]}, {paths[1]} ... {paths[-1]} ({len(paths)})"


def _pattern_regex(pattern: str) -> re.Pattern:
    """``"blocks.*.attn"`` -> a regex where ``*`` is one path component (no dots)."""
    return re.compile("".join("[^.]+" if part == "*" else re.escape(part) for part in re.split(r"(\*)", pattern)))


def _match_modules(model: nn.Module, pattern: Pattern, what: str) -> list[tuple[str, nn.Module]]:
    """Modules whose path matches ``pattern`` (a path, a ``*`` pattern, or a list of them), in registration order."""
    pats = [pattern] if isinstance(pattern, str) else list(pattern)
    if not pats or not all(isinstance(p, str) and p for p in pats):
        raise ValueError(f"{what} must be a module path or a list of module paths, got {pattern!r}")
    regs = [_pattern_regex(p) for p in pats]
    found = [(n, m) for n, m in model.named_modules() if n and any(r.fullmatch(n) for r in regs)]
    if not found:
        hint = [n for n, m in model.named_modules() if n and _ATTENTION_CLASS.search(type(m).__name__ + n)]
        raise CaptureError(
            f"{what}={pattern!r} names no submodule of {type(model).__name__}"
            + (f"; modules that look like attention: {_short(hint)}" if hint else "")
            + " (paths as in model.named_modules(); '*' stands for one path component)")
    return found


def _innermost(mods: list[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    """Those of ``mods`` that contain none of the others."""
    names = [n for n, _ in mods]
    return [(n, m) for n, m in mods if not any(o != n and o.startswith(n + ".") for o in names)]


def _blocks_for(model: nn.Module, attention: Sequence[str]) -> list[str] | None:
    """For each attention path, its largest ancestor (not the root, not a ModuleList / ModuleDict, which are never
    called) holding no other attention module; None when an attention module would be its own block (the blocks
    cannot be told apart from the attention). Whether these pass their output on to each other is checked during
    the pass."""
    modules = dict(model.named_modules())
    out = []
    for a in attention:
        parts = a.split(".")
        best = None
        for k in range(1, len(parts)):
            anc = ".".join(parts[:k])
            if any(o != a and (o == anc or o.startswith(anc + ".")) for o in attention):
                continue
            if isinstance(modules.get(anc), (nn.ModuleList, nn.ModuleDict)):
                continue
            best = anc
            break
        if best is None:
            return None
        out.append(best)
    return out


def _block_list(model: nn.Module) -> list[str]:
    """The children of the outermost ModuleList / Sequential whose children are all of one class (the longest of
    those at the same depth)."""
    best: list[str] = []
    best_key: tuple[int, int] | None = None
    for name, m in model.named_modules():
        if isinstance(m, (nn.ModuleList, nn.Sequential)):
            kids = list(m.named_children())
            if not kids or len({type(c) for _, c in kids}) != 1 or isinstance(kids[0][1], (nn.Linear, nn.Dropout)):
                continue
            key = (name.count(".") if name else -1, -len(kids))
            if best_key is None or key < best_key:
                best_key, best = key, [f"{name}.{k}" if name else k for k, _ in kids]
    return best


def _patch_convs(model: nn.Module) -> list[tuple[str, nn.Conv2d]]:
    """Conv2d modules that cut non-overlapping square patches (kernel = stride, no padding, no dilation)."""
    out = []
    for n, m in model.named_modules():
        if isinstance(m, nn.Conv2d) and m.kernel_size == m.stride and m.kernel_size[0] == m.kernel_size[1] \
                and tuple(m.padding) == (0, 0) and tuple(m.dilation) == (1, 1) and m.groups == 1:
            out.append((n, m))
    return out


def _accepts_output_attentions(model: nn.Module) -> bool:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    if "output_attentions" not in params:
        return False
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return impl in (None, "eager")  # Hugging Face with sdpa returns no probabilities: its modules are hooked instead


def find_layout(model: nn.Module, *, attention: Pattern | None = None, blocks: Pattern | None = None) -> Layout:
    """Find the attention layers, the blocks and the patch embedding of ``model`` (no forward pass).

    Args:
        model: any ``nn.Module`` (a vitviz ViT is handled by :func:`vitviz.capture.capture` itself).
        attention: module path(s) of the attention layers (``*`` = one path component); default: found.
        blocks: module path(s) of the transformer blocks; default: found (see the module docstring).

    Raises:
        CaptureError: nothing recognisable; the message names everything that was looked for.
    """
    if not isinstance(model, nn.Module):
        raise CaptureError(f"capture needs a torch.nn.Module, got {type(model).__name__}")
    name = type(model).__name__
    mods = [(n, m) for n, m in model.named_modules() if n]
    route: Route
    if attention is not None:
        layers = [n for n, _ in _match_modules(model, attention, "attention")]
        route = "named"
    elif any(isinstance(m, nn.MultiheadAttention) for _, m in mods):
        layers = [n for n, m in mods if isinstance(m, nn.MultiheadAttention)]
        route = "multihead_attention"
    elif _accepts_output_attentions(model):
        layers, route = [], "output_attentions"
    else:
        cands = _innermost([(n, m) for n, m in mods if _ATTENTION_CLASS.search(type(m).__name__)
                            and not isinstance(m, (nn.Dropout, nn.Identity))])
        if not cands:
            raise CaptureError(
                f"{name}: found no attention to capture. Looked for: torch.nn.MultiheadAttention submodules; a "
                "forward(..., output_attentions=True) that returns the attention probabilities; submodules whose "
                "class name contains 'Attention' or 'Attn' (timm, Hugging Face and most hand-written ViTs) that "
                "compute a softmax or call scaled_dot_product_attention. Name the attention modules yourself: "
                "capture(model, images, attention='path.to.blocks.*.attn')")
        layers = [n for n, _ in cands]
        route = "attention_modules"
    if blocks is not None:
        found = _match_modules(model, blocks, "blocks")
        if len(found) == 1 and isinstance(found[0][1], (nn.ModuleList, nn.Sequential)):
            block_names = [f"{found[0][0]}.{k}" for k, _ in found[0][1].named_children()]
        else:
            block_names = [n for n, _ in found]
    elif route == "output_attentions":
        block_names = _block_list(model)
        if not block_names:
            raise CaptureError(f"{name}: found no list of transformer blocks (an nn.ModuleList or nn.Sequential of "
                               "same-class modules): pass blocks='path.to.blocks'")
    else:
        bl = _blocks_for(model, layers)
        if bl is None:
            raise CaptureError(f"{name}: cannot tell the transformer blocks apart from the attention modules "
                               f"({_short(layers)}): pass blocks='path.to.blocks.*' (their outputs are the tokens)")
        block_names = bl
    if layers and len(block_names) != len(layers):
        raise CaptureError(f"{name}: {len(layers)} attention modules ({_short(layers)}) but {len(block_names)} "
                           f"blocks ({_short(block_names)}): each block must hold one attention layer")
    convs = _patch_convs(model)
    return Layout(route=route, attention=tuple(layers), blocks=tuple(block_names),
                  patch_embed=convs[0][0] if convs else None)


# =====================================================================================================================
# explicit attention: nn.MultiheadAttention and scaled_dot_product_attention, with the probabilities on the path
# =====================================================================================================================
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


_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


# =====================================================================================================================
# one capture
# =====================================================================================================================
class _Recorder(TorchFunctionMode):
    """Active for the forward pass only. Records the softmax over the last axis computed inside an active attention
    module and replaces ``scaled_dot_product_attention`` there by :func:`sdpa_explicit`. Being a torch-function mode,
    it also keeps PyTorch's fused fast paths (TransformerEncoderLayer, MultiheadAttention) from bypassing modules."""

    def __init__(self, run: _Run):
        super().__init__()
        self.run = run

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        stack = self.run.active
        if stack:
            fname = getattr(func, "__name__", "")
            if fname == "scaled_dot_product_attention":
                i = stack[-1]
                bound = dict(zip(_SDPA_ARGS, args))
                bound.update(kwargs)
                return sdpa_explicit(**bound, record=lambda p: self.run.attention(i, p))
            if fname == "softmax":
                out = func(*args, **kwargs)
                x = args[0] if args else kwargs.get("input", kwargs.get("self"))
                dim = args[1] if len(args) > 1 else kwargs.get("dim")
                if isinstance(x, torch.Tensor) and isinstance(dim, int) and x.ndim >= 3 \
                        and dim % x.ndim == x.ndim - 1:
                    self.run.attention(stack[-1], out)
                return out
        return func(*args, **kwargs)


class _Run:
    """The state of one capture: hooks, buffers, counts."""

    def __init__(self, model: nn.Module, layout: Layout, B: int, store_dtype: torch.dtype, store_device: torch.device,
                 want_grad: bool, device: torch.device):
        self.model, self.layout, self.B = model, layout, B
        self.store_dtype, self.store_device, self.want_grad, self.device = store_dtype, store_device, want_grad, device
        self.L = len(layout.blocks)
        self.name = type(model).__name__
        self.active: list[int] = []  # indices of the attention modules whose forward is running
        self.attn_buf: torch.Tensor | None = None
        self.tok_buf: torch.Tensor | None = None
        self.live: list[torch.Tensor | None] = [None] * self.L
        self.attn_count = [0] * self.L
        self.block_count = [0] * self.L
        self.embed_count = 0
        self.N: int | None = None
        self.H: int | None = None
        self.seq_first = [False] * self.L
        self.conv_grid: tuple[int, int] | None = None
        self.handles: list[Any] = []
        self.restore: list[Callable[[], None]] = []

    # ---------------------------------------------------------------- what the hooks see
    def where(self, i: int) -> str:
        return self.layout.attention[i] if self.layout.attention else f"layer {i}"

    def attention(self, i: int, p: torch.Tensor) -> None:
        """Layer ``i``'s probabilities: ``[B, H, N, N]``, ``[B * H, N, N]`` or ``[B, N, N]``."""
        self.attn_count[i] += 1
        if self.attn_count[i] > 1:
            return  # reported after the pass (fired more than once)
        where = self.where(i)
        B = self.B
        if p.ndim not in (3, 4) or p.shape[-1] != p.shape[-2]:
            raise CaptureError(f"{self.name}: the attention in {where} has shape {tuple(p.shape)}; expected "
                               f"[B, heads, tokens, tokens] (self-attention over the same tokens)")
        N = int(p.shape[-1])
        live = p  # the tensor the output is computed from (a reshaped view of it would get no gradient)
        if p.ndim == 4:
            if p.shape[0] != B:
                raise CaptureError(f"{self.name}: the attention in {where} has shape {tuple(p.shape)}, but the batch "
                                   f"holds {B} image(s)")
            H = int(p.shape[1])
        else:
            if p.shape[0] % B:
                raise CaptureError(f"{self.name}: the attention in {where} has shape {tuple(p.shape)}: its first axis "
                                   f"is not a multiple of the batch size {B}")
            H = int(p.shape[0]) // B
            p = p.reshape(B, H, N, N)
        if self.attn_buf is None:
            check_capture_memory(self.L, B, H, N, grads=self.want_grad, device=self.device,
                                 itemsize=torch.empty((), dtype=self.store_dtype).element_size())
            self.attn_buf = torch.empty((self.L, B, H, N, N), dtype=self.store_dtype, device=self.store_device)
            self.N, self.H = N, H
        if (H, N) != (self.H, self.N):
            raise CaptureError(f"{self.name}: the attention in {where} has {H} heads over {N} tokens, but "
                               f"{self.where(0)} had {self.H} heads over {self.N} tokens; attentions cannot be stacked")
        pd = p.detach()
        sums = pd.float().sum(dim=-1)
        tol = 1e-3 if pd.dtype == torch.float32 or pd.dtype == torch.float64 else 2e-2
        if not bool(torch.isfinite(sums).all()) or float((sums - 1).abs().max()) > tol:
            raise CaptureError(f"{self.name}: the tensor seen in {where} is not a softmax over the keys (its rows sum "
                               f"to {float(sums.min()):.4g}..{float(sums.max()):.4g}, not 1); name the attention "
                               "module (attention=...) whose softmax gives the attention probabilities")
        self.attn_buf[i].copy_(pd)
        if self.want_grad:
            self.live[i] = live

    def tokens(self, index: int, t: Any, what: str, seq_first: bool = False) -> None:
        t = self._as_tokens(t, what, seq_first)
        if self.tok_buf is None:
            self.tok_buf = torch.empty((self.L + 1, self.B, int(t.shape[1]), int(t.shape[2])), dtype=self.store_dtype,
                                       device=self.store_device)
        if tuple(t.shape) != tuple(self.tok_buf.shape[1:]):
            raise CaptureError(f"{self.name}: {what} has shape {tuple(t.shape)}, but the tokens before it had "
                               f"{tuple(self.tok_buf.shape[1:])}")
        self.tok_buf[index].copy_(t.detach())

    def check_chain(self, i: int, t: Any) -> None:
        """Block ``i`` (> 0) must take what block ``i - 1`` gave: else these are not the transformer blocks."""
        if self.tok_buf is None or self.block_count[i - 1] != 1:
            return  # reported by check_counts
        what = f"the input of {self.layout.blocks[i]}"
        t = self._as_tokens(t, what, self.seq_first[i]).detach()
        prev = self.tok_buf[i]
        if tuple(t.shape) != tuple(prev.shape) or not torch.equal(t.to(device=prev.device, dtype=prev.dtype), prev):
            raise CaptureError(f"{self.name}: {what} is not the output of {self.layout.blocks[i - 1]}: these modules "
                               "are not the transformer blocks (their outputs would not be the tokens); name them: "
                               "blocks='path.to.blocks.*'")

    def _as_tokens(self, t: Any, what: str, seq_first: bool) -> torch.Tensor:
        if isinstance(t, (tuple, list)) and t:
            t = t[0]
        if isinstance(t, Mapping):
            t = next((v for v in t.values() if isinstance(v, torch.Tensor)), None)
        t = getattr(t, "last_hidden_state", t)
        if not isinstance(t, torch.Tensor) or t.ndim != 3:
            raise CaptureError(f"{self.name}: {what} is {_describe(t)}, expected tokens [B, N, D]")
        B = self.B
        if t.shape[1] == B and (t.shape[0] != B or seq_first):  # sequence-first [N, B, D] (batch_first=False)
            t = t.transpose(0, 1)
        return t

    # ---------------------------------------------------------------- hooks
    def install(self) -> None:
        model, layout = self.model, self.layout
        modules = dict(model.named_modules())
        blocks = [modules[n] for n in layout.blocks]
        attn = [modules[n] for n in layout.attention]
        for i, m in enumerate(attn):
            if isinstance(m, nn.MultiheadAttention):
                self.seq_first[i] = not m.batch_first
                self._patch_mha(i, m)
            else:
                for flag in ("fused_attn",):  # timm: take the module's own explicit path
                    if isinstance(getattr(m, flag, None), bool) and getattr(m, flag):
                        setattr(m, flag, False)
                        self.restore.append(functools.partial(setattr, m, flag, True))
                self.handles.append(m.register_forward_pre_hook(functools.partial(self._enter, i)))
                self.handles.append(m.register_forward_hook(functools.partial(self._leave, i), always_call=True))

        def first_input(args, kwargs):
            return args[0] if args else next((v for v in kwargs.values() if isinstance(v, torch.Tensor)), None)

        def embed_hook(module, args, kwargs):
            self.embed_count += 1
            self.tokens(0, first_input(args, kwargs), f"the input of {layout.blocks[0]}", self.seq_first[0])

        self.handles.append(blocks[0].register_forward_pre_hook(embed_hook, with_kwargs=True))
        for i, b in enumerate(blocks[1:], start=1):
            def chain_hook(module, args, kwargs, i=i):
                if self.block_count[i] == 0:
                    self.check_chain(i, first_input(args, kwargs))

            self.handles.append(b.register_forward_pre_hook(chain_hook, with_kwargs=True))
        for i, b in enumerate(blocks):
            def block_hook(module, args, out, i=i):
                self.block_count[i] += 1
                if self.block_count[i] == 1:
                    self.tokens(i + 1, out, f"the output of {layout.blocks[i]}", self.seq_first[i])

            self.handles.append(b.register_forward_hook(block_hook))
        if layout.patch_embed is not None:
            conv = modules[layout.patch_embed]

            def conv_hook(module, args, out):
                if self.conv_grid is None and isinstance(out, torch.Tensor) and out.ndim == 4:
                    self.conv_grid = (int(out.shape[2]), int(out.shape[3]))

            self.handles.append(conv.register_forward_hook(conv_hook))

    def _enter(self, i: int, module, args) -> None:
        self.active.append(i)

    def _leave(self, i: int, module, args, out) -> None:
        if self.active and self.active[-1] == i:
            self.active.pop()

    def _patch_mha(self, i: int, m: nn.MultiheadAttention) -> None:
        had = "forward" in m.__dict__
        old = m.__dict__.get("forward")

        def forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                    average_attn_weights=True, is_causal=False):
            return mha_forward(m, query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights,
                               is_causal, record=lambda p: self.attention(i, p))

        m.forward = forward

        def undo() -> None:
            if had:
                m.forward = old
            else:
                del m.forward

        self.restore.append(undo)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
        for undo in reversed(self.restore):
            undo()
        self.restore.clear()
        self.active.clear()

    # ---------------------------------------------------------------- after the pass
    def check_counts(self) -> None:
        problems = []
        if self.embed_count != 1:
            problems.append(f"the input of {self.layout.blocks[0]} was seen {self.embed_count} times")
        bad = [(i, c) for i, c in enumerate(self.attn_count) if c != 1]
        if bad:
            problems.append(", ".join(f"{self.where(i)} computed {c} attention softmaxes" for i, c in bad[:4])
                            + (f" (and {len(bad) - 4} more layers)" if len(bad) > 4 else ""))
        bad = [(i, c) for i, c in enumerate(self.block_count) if c != 1]
        if bad:
            problems.append(", ".join(f"block {self.layout.blocks[i]} ran {c} times" for i, c in bad[:4]))
        if problems:
            raise CaptureError(
                f"{self.name}: capture expected each attention layer to compute one attention softmax and each block "
                f"to run once per forward pass, but " + "; ".join(problems)
                + ". Name the modules that compute the attention probabilities (attention=...) and the blocks "
                  "(blocks=...)")


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)}"
    return "None" if x is None else f"a {type(x).__name__}"


def logits_of(out: Any, B: int, what: str = "the model") -> torch.Tensor:
    """The logits ``[B, K]`` in a model's output: a tensor, ``.logits``, ``["logits"]``, or the first ``[B, K]``
    tensor of a tuple / list."""
    if isinstance(out, torch.Tensor):
        t = out
    elif hasattr(out, "logits") and isinstance(out.logits, torch.Tensor):
        t = out.logits
    elif isinstance(out, Mapping) and isinstance(out.get("logits"), torch.Tensor):
        t = out["logits"]
    elif isinstance(out, (tuple, list)):
        t = next((o for o in out if isinstance(o, torch.Tensor) and o.ndim == 2 and o.shape[0] == B), None)
    else:
        t = None
    if not isinstance(t, torch.Tensor) or t.ndim != 2 or t.shape[0] != B:
        raise CaptureError(f"{what} returned {_describe(t if t is not None else out)}; expected logits [B, classes] "
                           f"(a tensor, .logits, or the first such tensor of a tuple) for a batch of {B}")
    return t


def _returned_attentions(out: Any, L: int, what: str) -> list[torch.Tensor]:
    att = None
    if hasattr(out, "attentions"):
        att = out.attentions
    elif isinstance(out, Mapping):
        att = out.get("attentions")
    elif isinstance(out, (tuple, list)):
        att = next((o for o in out if isinstance(o, (tuple, list)) and o
                    and all(isinstance(a, torch.Tensor) and a.ndim in (3, 4) for a in o)), None)
        if att is None:
            stacked = [o for o in out if isinstance(o, torch.Tensor) and o.ndim == 5]
            att = list(stacked[0].unbind(0)) if stacked else None
    if not att:
        raise CaptureError(f"{what} was called with output_attentions=True but returned no attention probabilities "
                           "(expected .attentions, or a list of [B, heads, tokens, tokens] tensors in its output)")
    att = list(att)
    if len(att) != L:
        raise CaptureError(f"{what} returned {len(att)} attention tensors but has {L} blocks; pass blocks=... naming "
                           "the transformer blocks")
    return att


def _grid_and_prefix(run: _Run, H_img: int, W_img: int, *, patch_size: int | None, grid: tuple[int, int] | None,
                     num_prefix_tokens: int | None, conv_stride: int | None) -> tuple[tuple[int, int], int, int]:
    """``(grid, patch_size, num_prefix_tokens)`` from what the pass saw and what the user said, all checked."""
    name, N = run.name, int(run.N or 0)
    conv = run.layout.patch_embed
    if grid is not None:
        grid = (int(grid[0]), int(grid[1]))
        if run.conv_grid is not None and run.conv_grid != grid:
            raise CaptureError(f"{name}: grid={grid} was given, but the patch embedding {conv} produced a "
                               f"{run.conv_grid[0]}x{run.conv_grid[1]} grid")
    elif run.conv_grid is not None:
        grid = run.conv_grid
    if patch_size is None:
        if conv_stride is not None and run.conv_grid is not None:
            patch_size = conv_stride
        elif grid is not None:
            if H_img % grid[0] or W_img % grid[1] or H_img // grid[0] != W_img // grid[1]:
                raise CaptureError(f"{name}: a {H_img}x{W_img} input does not split into a {grid[0]}x{grid[1]} grid "
                                   "of square patches: pass patch_size=")
            patch_size = H_img // grid[0]
    elif conv_stride is not None and run.conv_grid is not None and patch_size != conv_stride:
        raise CaptureError(f"{name}: patch_size={patch_size} was given, but the patch embedding {conv} has stride "
                           f"{conv_stride}")
    if grid is None and patch_size is not None:
        grid = (H_img // patch_size, W_img // patch_size)
    if grid is None:  # no convolution and nothing said: a square grid with 0 or 1 prefix tokens, if only one fits
        fits = []
        for p in (1, 0):
            side = math.isqrt(N - p) if N > p else 0
            if side and side * side == N - p and H_img % side == 0 and W_img % side == 0 and H_img == W_img:
                fits.append((p, side))
        if len(fits) != 1:
            raise CaptureError(f"{name}: found no patch-embedding convolution (a Conv2d with kernel = stride), and "
                               f"{N} tokens on a {H_img}x{W_img} input do not tell the patch grid: pass "
                               "patch_size= (and num_prefix_tokens= if it has other than one [CLS] token)")
        p, side = fits[0]
        grid, patch_size = (side, side), H_img // side
    assert patch_size is not None
    P = N - grid[0] * grid[1]
    if P < 0:
        raise CaptureError(f"{name}: the attention covers {N} tokens, fewer than the {grid[0]}x{grid[1]} = "
                           f"{grid[0] * grid[1]} patches of the grid" + (f" of {conv}" if run.conv_grid else "")
                           + ": the grid or patch size is wrong (pass grid= or patch_size=)")
    if num_prefix_tokens is not None and int(num_prefix_tokens) != P:
        raise CaptureError(f"{name}: num_prefix_tokens={num_prefix_tokens} was given, but the attention covers {N} "
                           f"tokens and the grid has {grid[0]}x{grid[1]} = {grid[0] * grid[1]} patches, which "
                           f"leaves {P} prefix tokens")
    if grid[0] * patch_size > H_img or grid[1] * patch_size > W_img:
        raise CaptureError(f"{name}: a {grid[0]}x{grid[1]} grid of {patch_size} px patches does not fit a "
                           f"{H_img}x{W_img} input")
    return grid, int(patch_size), P


def capture_module(
    model: nn.Module,
    images: torch.Tensor,
    *,
    target: int | Sequence[int] | torch.Tensor | Literal["top"] | None = None,
    store_dtype: torch.dtype = torch.float32,
    grad_dtype: torch.dtype | None = None,
    store_device: torch.device | str = "cpu",
    attention: Pattern | None = None,
    blocks: Pattern | None = None,
    patch_size: int | None = None,
    grid: tuple[int, int] | None = None,
    num_prefix_tokens: int | None = None,
) -> Capture:
    """:func:`vitviz.capture.capture` for any ViT module (the same arguments and :class:`Capture`), plus:

    Args:
        attention: module path(s) of the attention layers (``"blocks.*.attn"``); default: found (module docstring).
        blocks: module path(s) of the transformer blocks, or the path of the list holding them; default: found.
        patch_size: patch side in input pixels; default: the patch-embedding convolution's stride.
        grid: ``(gh, gw)`` patch grid; default: the convolution's output size.
        num_prefix_tokens: tokens before the first patch ([CLS], registers ...); default: tokens minus patches.

    The arguments above default to those an :class:`AdaptedModel` was made with. Every one given is checked against
    what the forward pass did.

    Raises:
        CaptureError: nothing recognisable (the message names what was looked for), or what was found or given
            disagrees with the pass.
        ValueError: bad ``images`` or ``target``.
    """
    if isinstance(model, AdaptedModel):
        if model.features and isinstance(target, str) and target == "top":
            target = None  # a feature model: no class to differentiate (as capture() for a ViT without a head)
        opts = dict(model.options)
        given = dict(attention=attention, blocks=blocks, patch_size=patch_size, grid=grid,
                     num_prefix_tokens=num_prefix_tokens)
        opts.update({k: v for k, v in given.items() if v is not None})
        layout = model.layout if opts["attention"] == model.options["attention"] \
            and opts["blocks"] == model.options["blocks"] else None
        attention, blocks, patch_size, grid, num_prefix_tokens = (opts[k] for k in given)
        model = model.module
    else:
        layout = None
    if not isinstance(images, torch.Tensor):
        raise ValueError(f"images must be a torch.Tensor [B, C, H, W], got {type(images).__name__}")
    if images.ndim != 4:
        raise ValueError(f"images must be a batch [B, C, H, W], got a tensor of shape {tuple(images.shape)}"
                         + (" (use images[None])" if images.ndim == 3 else ""))
    if images.shape[0] == 0:
        raise ValueError("images is an empty batch (B = 0)")
    for what, dt in (("store_dtype", store_dtype), ("grad_dtype", grad_dtype)):
        if dt is not None and (not isinstance(dt, torch.dtype) or not dt.is_floating_point):
            raise ValueError(f"{what} must be a floating torch.dtype (float32, float16, bfloat16), got {dt!r}")
    top = isinstance(target, str)
    if top and target != "top":
        raise ValueError(f"target must be a class index, one index per image or 'top', got {target!r}")
    B = int(images.shape[0])
    layout = layout or find_layout(model, attention=attention, blocks=blocks)
    device, dtype = _model_device_dtype(model)
    x = images.to(device=device, dtype=dtype)
    want_grad = target is not None
    run = _Run(model, layout, B, store_dtype, torch.device(store_device), want_grad, device)
    convs = dict(_patch_convs(model))
    conv_stride = int(convs[layout.patch_embed].stride[0]) if layout.patch_embed in convs else None
    grad_dtype = store_dtype if grad_dtype is None else grad_dtype
    tgt = None
    with _CAPTURE_LOCK:
        try:
            run.install()
            with torch.enable_grad() if want_grad else torch.inference_mode():
                if want_grad and not any(p.requires_grad for p in model.parameters()):
                    x = x.detach().requires_grad_(True)  # frozen model: make the graph exist anyway
                with _Recorder(run):
                    if layout.route == "output_attentions":
                        out = model(x, output_attentions=True)
                    else:
                        out = model(x)
                logits = logits_of(out, B, f"{run.name}.forward")
                if layout.route == "output_attentions":
                    for i, a in enumerate(_returned_attentions(out, run.L, f"{run.name}.forward")):
                        run.attention(i, a)
                run.check_counts()
                if run.tok_buf is None or run.attn_buf is None:  # pragma: no cover - check_counts saw them
                    raise CaptureError(f"{run.name}: the forward pass produced no attention")
                if run.tok_buf.shape[2] != run.N:
                    raise CaptureError(f"{run.name}: the blocks carry {run.tok_buf.shape[2]} tokens but the attention "
                                       f"covers {run.N}")
                K = int(logits.shape[1])
                if want_grad:
                    if top:
                        tgt = logits.detach().float().argmax(dim=-1).cpu()
                    else:
                        tgt = _targets(target, B, K)
                    live = run.live
                    if not all(t is not None and t.requires_grad for t in live):
                        raise CaptureError(f"{run.name}: the attention is not part of an autograd graph; cannot take "
                                           "its gradients")
                    sel = logits.gather(1, tgt.to(logits.device)[:, None]).sum()
                    grads = torch.autograd.grad(sel, live, allow_unused=True)
                    unused = [run.where(i) for i, g in enumerate(grads) if g is None]
                    if len(unused) == len(grads):
                        raise CaptureError(
                            f"{run.name}: the logits do not depend on the attention tensors that were seen "
                            f"({_short([run.where(i) for i in range(run.L)])}): they are copies, not the "
                            "probabilities the output is computed from, so they have no gradients")
                    grad_buf = torch.empty((run.L, B, run.H, run.N, run.N), dtype=grad_dtype,
                                           device=run.store_device)
                    for i, g in enumerate(grads):
                        if g is None:
                            grad_buf[i].zero_()
                        else:
                            grad_buf[i].copy_(g.reshape(B, run.H, run.N, run.N))
                    del grads, sel
                else:
                    grad_buf = None
        finally:
            run.remove()
            run.live = []
    grid_, psize, P = _grid_and_prefix(run, int(images.shape[2]), int(images.shape[3]), patch_size=patch_size,
                                       grid=grid, num_prefix_tokens=num_prefix_tokens, conv_stride=conv_stride)
    logits_out = torch.empty(tuple(logits.shape), dtype=torch.float32, device=run.store_device)
    logits_out.copy_(logits.detach())
    return Capture(logits=logits_out, attentions=run.attn_buf, tokens=run.tok_buf, grid=grid_, patch_size=psize,
                   num_prefix_tokens=P, attention_grads=grad_buf, targets=tgt)


# =====================================================================================================================
# a foreign module as a model of the pipeline and the window
# =====================================================================================================================
@dataclass(frozen=True)
class AdaptedSpec:
    """What the pipeline and the window read from ``model.spec``, for a module that is not a vitviz ViT."""

    preprocess: Any  # vitviz.model.preprocess.Preprocess
    labels: tuple[str, ...] | None = None
    name: str = "model"
    source_format: str = "module"
    source_path: str | None = None
    layout: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def input_size(self) -> tuple[int, int]:
        return tuple(self.preprocess.crop)  # type: ignore[return-value]

    def label(self, index: int) -> str:
        if self.labels is not None and 0 <= index < len(self.labels):
            return self.labels[index]
        return f"class {index}"

    def describe(self) -> str:
        p = self.preprocess
        lines = [f"name:          {self.name}",
                 f"format:        your own module ({self.source_path or 'in memory'})",
                 f"capture:       {self.layout}",
                 f"preprocessing: resize {p.resize} ({p.interpolation}), centre crop {p.crop[0]}x{p.crop[1]}, "
                 f"mean {tuple(round(x, 4) for x in p.mean)}, std {tuple(round(x, 4) for x in p.std)}"]
        return "\n".join(lines + list(self.notes))


class _ConfigView:
    """``model.config`` as the status bar reads it (depth, heads, patch size, registers)."""

    def __init__(self, depth: int, num_heads: int, patch_size: int):
        self.depth, self.num_heads, self.patch_size, self.num_reg_tokens = depth, num_heads, patch_size, 0


class _PatchEmbedView:
    """``model.patch_embed`` as :class:`vitviz.pipeline.ModelData` reads it (``.proj.weight``)."""

    def __init__(self, conv: nn.Conv2d | None, patch_size: int):
        self.proj, self.patch_size = conv, patch_size


def _nominal_size(module: nn.Module, conv: nn.Conv2d | None, pos: torch.Tensor | None) -> int | None:
    """The input size the module was built for: an ``img_size`` / ``image_size`` attribute (of the module, its
    config or its patch embedding), else the position embedding's square grid times the patch size."""
    cfg = getattr(module, "config", None)
    for owner in (module, cfg, getattr(module, "patch_embed", None)):
        for attr in ("img_size", "image_size"):
            v = owner.get(attr) if isinstance(owner, Mapping) else getattr(owner, attr, None)
            if isinstance(v, (tuple, list)) and len(v) == 2 and v[0] == v[1]:
                v = v[0]
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    if conv is not None and pos is not None:
        n = int(pos.shape[1])
        for p in (1, 0):
            side = math.isqrt(n - p) if n > p else 0
            if side and side * side == n - p:
                return side * int(conv.stride[0])
    return None


def _find_pos_embed(module: nn.Module, dim: int | None) -> str | None:
    """The name of a learned (or fixed) position embedding ``[1, n, D]`` or ``[n, D]``: a parameter or buffer whose
    name says position."""
    for n, t in list(module.named_parameters()) + list(module.named_buffers()):
        leaf = n.rsplit(".", 1)[-1].lower()
        if "pos" not in leaf:
            continue
        if t.ndim == 3 and t.shape[0] == 1 and (dim is None or t.shape[2] == dim):
            return n
        if t.ndim == 2 and dim is not None and t.shape[1] == dim:  # [n, D]
            return n
    return None


def _own_labels(module: nn.Module, num_classes: int) -> tuple[str, ...] | None:
    """Class names the module carries (a Hugging Face ``config.id2label`` that is not ``LABEL_k``), or None."""
    id2label = getattr(getattr(module, "config", None), "id2label", None)
    if not isinstance(id2label, Mapping) or len(id2label) != num_classes:
        return None
    try:
        names = tuple(str(id2label[i]) for i in range(num_classes))
    except KeyError:
        return None
    return None if all(re.fullmatch(r"LABEL_\d+", n) for n in names) else names


class AdaptedModel(nn.Module):
    """Any ViT module, with what vitviz's pipeline and window read from a model.

    Args:
        module: the user's ``nn.Module`` (its forward returns logits ``[B, K]``, or a tuple / object holding them).
        preprocess: a :class:`vitviz.model.preprocess.Preprocess`, ``"imagenet"`` / ``"inception"`` (mean = std = 0.5), or
            None: resize the shorter side to the input size and centre-crop it, ImageNet mean and std.
        labels: class names in output order (default: ImageNet's for 1000 classes, else "class k").
        name: display name (default: the class name).
        input_size: the side of the square input (default: ``img_size`` / ``image_size`` of the module or its config,
            else the position embedding's grid times the patch size).
        attention, blocks, patch_size, grid, num_prefix_tokens: as :func:`capture_module`.
        features: the module's output is features, not class scores: no predictions and no gradient views (their
            reason is said in the window).
        check: run one forward pass on a blank image now (nothing is left to fail later, and the class count, head
            count and prefix tokens are known before a window opens).

    Raises:
        CaptureError: the module's attention cannot be captured (the message says what was looked for).
        ValueError: bad preprocess / labels / input size.
    """

    def __init__(self, module: nn.Module, *, preprocess: Any = None, labels: Sequence[str] | None = None,
                 name: str | None = None, input_size: int | None = None, attention: Pattern | None = None,
                 blocks: Pattern | None = None, patch_size: int | None = None, grid: tuple[int, int] | None = None,
                 num_prefix_tokens: int | None = None, source_path: str | None = None, features: bool = False,
                 check: bool = True):
        super().__init__()
        from vitviz.model.checkpoints.common import imagenet_labels, resolve_preprocess
        from vitviz.model.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess

        if not isinstance(module, nn.Module):
            raise CaptureError(f"vitviz needs a torch.nn.Module, got {type(module).__name__}")
        if isinstance(module, AdaptedModel):
            module = module.module
        self.module = module
        self.options: dict[str, Any] = dict(attention=attention, blocks=blocks, patch_size=patch_size, grid=grid,
                                            num_prefix_tokens=num_prefix_tokens)
        self.layout = find_layout(module, attention=attention, blocks=blocks)
        convs = dict(_patch_convs(module))
        conv = convs.get(self.layout.patch_embed) if self.layout.patch_embed else None
        self._pos_name = _find_pos_embed(module, int(conv.out_channels) if conv is not None else None)
        size = input_size if input_size is not None else _nominal_size(module, conv, self.pos_embed)
        if isinstance(preprocess, Preprocess):
            pre = preprocess
        else:
            if size is None:
                raise ValueError(f"{type(module).__name__}: cannot tell its input size (no img_size / image_size "
                                 "attribute, no position embedding over a square grid): pass input_size= or "
                                 "preprocess=vitviz.Preprocess(...)")
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                raise ValueError(f"input_size must be a positive integer, got {size!r}")
            if preprocess is None:
                pre = Preprocess(resize=size, crop=(size, size), interpolation="bicubic", mean=IMAGENET_MEAN,
                                 std=IMAGENET_STD)
            else:
                pre = resolve_preprocess(preprocess, (size, size))
        self.patch_size = int(patch_size or (conv.stride[0] if conv is not None else 0) or 0)
        self.patch_embed = None if conv is None else _PatchEmbedView(conv, self.patch_size)
        self.num_classes = 0
        self.num_prefix_tokens = num_prefix_tokens or 0
        self.config = _ConfigView(len(self.layout.blocks), 0, self.patch_size)
        labs = None if labels is None else tuple(str(s) for s in labels)
        self.spec = AdaptedSpec(preprocess=pre, labels=labs, name=name or type(module).__name__,
                                source_path=source_path, layout=self.layout.describe())
        self.features = bool(features)
        if features and labs is not None:
            raise ValueError("labels name classes, but features=True says the output holds none")
        if check:
            self.check()
            if labs is None and not features:
                own = _own_labels(module, self.num_classes)
                if own is None and self.num_classes == 1000:
                    own = imagenet_labels()
                if own is not None:
                    self.spec = AdaptedSpec(preprocess=pre, labels=own, name=self.spec.name,
                                            source_path=source_path, layout=self.spec.layout)
        if self.spec.labels is not None and self.num_classes and len(self.spec.labels) != self.num_classes:
            raise ValueError(f"labels has {len(self.spec.labels)} names but {self.spec.name} has {self.num_classes} "
                             "classes")

    def check(self) -> Capture:
        """One capture of a blank image at the nominal input size: fills in the class count, heads, patch size and
        prefix tokens, and raises now what would fail later."""
        h, w = self.spec.input_size
        c = int(self.patch_embed.proj.in_channels) if self.patch_embed is not None else len(
            self.spec.preprocess.mean)
        cap = capture_module(self, torch.zeros(1, c, h, w))
        self.num_classes = 0 if self.features else int(cap.logits.shape[1])
        self.num_prefix_tokens = cap.num_prefix_tokens
        self.patch_size = cap.patch_size
        if self.patch_embed is not None:
            self.patch_embed.patch_size = cap.patch_size
        self.config = _ConfigView(cap.num_layers, cap.num_heads, cap.patch_size)
        return cap

    @property
    def pos_embed(self) -> torch.Tensor | None:
        """The module's position embedding ``[1, n, D]`` (a parameter or buffer whose name says position), or None."""
        if self._pos_name is None:
            return None
        owner, _, leaf = self._pos_name.rpartition(".")
        t = getattr(self.module.get_submodule(owner) if owner else self.module, leaf)
        return t[None] if t.ndim == 2 else t

    @property
    def blocks(self) -> list[nn.Module]:
        """The module's transformer blocks, in layer order (what :mod:`vitviz.evaluate` randomises)."""
        mods = dict(self.module.named_modules())
        return [mods[n] for n in self.layout.blocks]

    def pos_embed_for(self, grid: tuple[int, int]) -> torch.Tensor:
        """The position embedding when ``grid`` is the nominal one (the module's own resampling is unknown)."""
        pos = self.pos_embed
        h, w = self.spec.input_size
        if pos is None or not self.patch_size or tuple(grid) != (h // self.patch_size, w // self.patch_size):
            raise ValueError(f"{self.spec.name}: no position embedding for a {grid[0]}x{grid[1]} grid")
        return pos

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return logits_of(self.module(x), int(x.shape[0]), f"{self.spec.name}.forward")

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


def adapt(model: nn.Module, **kwargs: Any) -> nn.Module:
    """``model`` itself when it is a vitviz ViT (``preprocess`` / ``labels`` / ``name`` given replace its spec's),
    else an :class:`AdaptedModel` (keyword arguments as there)."""
    if isinstance(model, AdaptedModel) and not kwargs:
        return model
    if is_vitviz_model(model):
        spec = getattr(model, "spec", None)
        changes = {k: kwargs.pop(k) for k in ("preprocess", "labels", "name") if kwargs.get(k) is not None}
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if kwargs:
            raise ValueError(f"options {sorted(kwargs)} apply to other modules, not to a vitviz ViT")
        if spec is None and getattr(model, "config", None) is not None:  # built with ViT(...): a default spec
            from vitviz.model.spec import ModelSpec
            from vitviz.model.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess

            h, w = model.config.img_size
            spec = model.spec = ModelSpec(config=model.config, name=type(model).__name__, preprocess=Preprocess(
                resize=h if h == w else (h, w), crop=(h, w), interpolation="bicubic", mean=IMAGENET_MEAN,
                std=IMAGENET_STD))
        if changes:
            from vitviz.model.checkpoints.common import resolve_preprocess

            if spec is None:
                raise ValueError("the vitviz ViT has no spec: create it with vitviz.create_model or load it with "
                                 "vitviz.load_checkpoint")
            if isinstance(changes.get("preprocess"), str):
                changes["preprocess"] = resolve_preprocess(changes["preprocess"], spec.config.img_size)
            if "labels" in changes:
                changes["labels"] = tuple(str(s) for s in changes["labels"])
                if len(changes["labels"]) != spec.config.num_classes:
                    raise ValueError(f"labels has {len(changes['labels'])} names but the model has "
                                     f"{spec.config.num_classes} classes")
            model.spec = spec.replace(**changes)
        return model
    return AdaptedModel(model, **kwargs)


# =====================================================================================================================
# the user's own file: vitviz --model path/to/file.py:ClassName --weights ckpt.pth --init JSON
# =====================================================================================================================
_USER_REF = re.compile(r"^(?P<path>.+\.py):(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)$")


def parse_user_ref(text: str) -> tuple[str, str] | None:
    """``("path/to/file.py", "ClassName")`` for ``"path/to/file.py:ClassName"``, else None."""
    m = _USER_REF.match(os.fspath(text))
    return (m.group("path"), m.group("name")) if m else None


def _parse_init(init: str | Mapping[str, Any] | Sequence[Any] | None) -> tuple[list[Any], dict[str, Any]]:
    if init is None:
        return [], {}
    if isinstance(init, Mapping):
        return [], dict(init)
    if not isinstance(init, str):
        return list(init), {}
    text = init
    p = Path(init).expanduser()
    if not init.lstrip().startswith(("{", "[")) and p.suffix.lower() == ".json":
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise ValueError(f"--init {init}: cannot read the file ({e.strerror or e})") from None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ValueError(f"--init {init!r}: not valid JSON ({e}); give the constructor's arguments as an object, "
                         "e.g. '{\"img_size\": 32, \"num_classes\": 10}'") from None
    if isinstance(value, dict):
        return [], value
    if isinstance(value, list):
        return value, {}
    raise ValueError(f"--init {init!r}: expected a JSON object of keyword arguments (or a list of positional "
                     f"ones), got {type(value).__name__}")


def load_user_model(ref: str, *, weights: str | os.PathLike[str] | None = None,
                    init: str | Mapping[str, Any] | Sequence[Any] | None = None, **adapt_kwargs: Any
                    ) -> tuple[nn.Module, str | None]:
    """Import ``ClassName`` from the user's ``file.py`` (running that file: the user's own code, at their request),
    build it with ``init`` and load ``weights`` (``torch.load(weights_only=True)`` or safetensors).

    Args:
        ref: ``"path/to/file.py:ClassName"`` (a class or a function returning an ``nn.Module``).
        weights: a state dict file for the module (strict: every key and shape must match).
        init: the constructor's arguments: a JSON object (keyword) or list (positional), as text or a ``.json`` file.
        adapt_kwargs: for :class:`AdaptedModel` (preprocess, labels, input_size, attention ...).

    Returns:
        ``(model, note)``: an :class:`AdaptedModel` (or the module itself when it is a vitviz ViT) in eval mode, and a
        note for the user (random weights) or None.

    Raises:
        ValueError: file or class missing, init JSON bad, construction failed, weights mismatched (the message names
            the file and the problem); CaptureError: the module's attention cannot be captured.
    """
    parsed = parse_user_ref(ref)
    if parsed is None:
        raise ValueError(f"--model {ref}: expected path/to/file.py:ClassName")
    path_text, cls_name = parsed
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise ValueError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    args, kwargs = _parse_init(init)
    module_name = f"_vitviz_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a loader
        raise ValueError(f"{path}: cannot be imported as a Python module")
    mod = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)  # the user's file may import its neighbours
    sys.modules[module_name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        sys.modules.pop(module_name, None)
        raise ValueError(f"{path}: importing it failed: {type(e).__name__}: {e}") from e
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:  # pragma: no cover - the user's code removed it
            pass
    obj: Any = mod
    for part in cls_name.split("."):
        if not hasattr(obj, part):
            have = sorted(n for n, v in vars(mod).items() if isinstance(v, type) and issubclass(v, nn.Module)
                          and v.__module__ == module_name)
            raise ValueError(f"{path}: defines no {cls_name!r}"
                             + (f"; its nn.Module classes: {', '.join(have)}" if have else ""))
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{path}: {cls_name} is not a class or function")
    try:
        module = obj(*args, **kwargs)
    except Exception as e:
        raise ValueError(f"{path}: {cls_name}({_call_text(args, kwargs)}) failed: {type(e).__name__}: {e}") from e
    if not isinstance(module, nn.Module):
        raise ValueError(f"{path}: {cls_name}(...) returned a {type(module).__name__}, not a torch.nn.Module")
    note = None
    if weights is not None:
        load_user_weights(module, weights)
        display = adapt_kwargs.pop("name", None) or f"{cls_name} ({Path(weights).name})"
    else:
        note = "Randomly initialised weights (no --weights): the maps show no learned structure."
        display = adapt_kwargs.pop("name", None) or cls_name
    module.eval()
    if is_vitviz_model(module):
        return adapt(module, **adapt_kwargs), note
    return AdaptedModel(module, name=display, source_path=str(path), **adapt_kwargs), note


def _call_text(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= 120 else text[:117] + "..."


def load_user_weights(module: nn.Module, weights: str | os.PathLike[str]) -> None:
    """Load a state dict file into ``module`` strictly; every problem names the file and the keys."""
    from vitviz.model.checkpoints.common import names
    from vitviz.model.checkpoints.reading import read_raw

    p = Path(weights).expanduser()
    if not p.exists():
        raise ValueError(f"{p}: no such file")
    raw = read_raw(p)  # torch.load(weights_only=True) / safetensors; CheckpointError names the file
    state = raw.tensors
    target = module.state_dict()
    missing = [k for k in target if k not in state]
    unexpected = [k for k in state if k not in target]
    if missing or unexpected:
        parts = ([f"missing keys {names(missing)}"] if missing else []) + (
            [f"unexpected keys {names(unexpected)}"] if unexpected else [])
        raise ValueError(f"{p}: the weights do not match {type(module).__name__}: " + "; ".join(parts)
                         + " (was it saved from this class, with the same --init?)")
    bad = [(k, tuple(state[k].shape), tuple(v.shape)) for k, v in target.items() if tuple(state[k].shape) != tuple(v.shape)]
    if bad:
        shown = "; ".join(f"{k}: file {a}, model {b}" for k, a, b in bad[:4])
        raise ValueError(f"{p}: the weights do not match {type(module).__name__}: shape mismatch for {shown}"
                         + (f" and {len(bad) - 4} more" if len(bad) > 4 else "") + " (the same --init as in training?)")
    module.load_state_dict(state, strict=True)


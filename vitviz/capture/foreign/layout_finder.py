"""Where a foreign ViT module's attention layers, transformer blocks and patch embedding are: found statically
(:func:`find_layout`, no forward pass), by the routes the package docstring (:mod:`vitviz.capture.foreign`) lists.

This module never imports Qt.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from torch import nn

from vitviz.capture.results import CaptureError

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
        where = f"{short_paths(self.attention)}" if self.attention else "returned by the model"
        return f"{how}; attention: {where}; blocks: {short_paths(self.blocks)}; patch embedding: {self.patch_embed}"


def short_paths(paths: Sequence[str]) -> str:
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
            + (f"; modules that look like attention: {short_paths(hint)}" if hint else "")
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


def patch_convs(model: nn.Module) -> list[tuple[str, nn.Conv2d]]:
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
                               f"({short_paths(layers)}): pass blocks='path.to.blocks.*' (their outputs are the "
                               "tokens)")
        block_names = bl
    if layers and len(block_names) != len(layers):
        raise CaptureError(f"{name}: {len(layers)} attention modules ({short_paths(layers)}) but {len(block_names)} "
                           f"blocks ({short_paths(block_names)}): each block must hold one attention layer")
    convs = patch_convs(model)
    return Layout(route=route, attention=tuple(layers), blocks=tuple(block_names),
                  patch_embed=convs[0][0] if convs else None)

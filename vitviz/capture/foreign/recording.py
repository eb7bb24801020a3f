"""One capture of a foreign ViT module: for the duration of its forward pass, hooks on the blocks (tokens), the
attention modules' softmax recorded by a torch-function mode (scaled_dot_product_attention and
nn.MultiheadAttention computed explicitly), then every inference checked against what the pass did
(:func:`record_module`; :func:`vitviz.capture.foreign.capture_module` is its public face).

This module never imports Qt.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from vitviz.capture.foreign.explicit_attention import SDPA_ARGS, mha_forward, sdpa_explicit
from vitviz.capture.foreign.layout_finder import Layout, Pattern, find_layout, patch_convs, short_paths
from vitviz.capture.preflight import check_capture_memory, hold_capture, model_device_dtype, resolve_target
from vitviz.capture.results import Capture, CaptureError
from vitviz.capture.target_guard import guarding
from vitviz.capture.targets import TargetError, differentiable_scores

_OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


class ForwardError(RuntimeError):
    """The model's own ``forward`` raised. The message names where the module comes from (``file.py:Class``, see
    :func:`module_origin`) and keeps the exception's type and text; that exception is the ``__cause__`` (its
    traceback is the user's code)."""


def module_origin(module: nn.Module, source_path: str | os.PathLike[str] | None = None) -> str:
    """``"file.py:ClassName"``: the file that defines the class of ``module`` (``source_path`` as given when it is
    that file, else the file's name) and the class; the class alone when no file defines it (a notebook)."""
    cls = type(module)
    try:
        file = inspect.getsourcefile(cls)
    except (TypeError, OSError):  # a class of __main__ without a file, a built-in
        file = None
    if file is None:
        return cls.__qualname__
    if source_path is not None:
        try:
            if os.path.samefile(file, source_path):
                return f"{os.fspath(source_path)}:{cls.__qualname__}"
        except OSError:
            pass
    return f"{Path(file).name}:{cls.__qualname__}"


def call_forward(model: nn.Module, origin: str, *args: Any, **kwargs: Any) -> Any:
    """``model(*args, **kwargs)``; an exception of the model's own code becomes a :class:`ForwardError` naming
    ``origin`` (capture's own errors and running out of memory pass as they are)."""
    try:
        return model(*args, **kwargs)
    except (CaptureError, ForwardError, MemoryError, _OUT_OF_MEMORY):
        raise
    except Exception as e:
        text = str(e).strip()
        raise ForwardError(f"{origin} forward raised {type(e).__name__}" + (f": {text}" if text else "")) from e


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
                bound = dict(zip(SDPA_ARGS, args))
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


def record_module(
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
    layout: Layout | None = None,
    origin: str | None = None,
    features: bool = False,
) -> Capture:
    """Capture a bare module (arguments as :func:`vitviz.capture.foreign.capture_module`); ``layout``: one already
    found for ``attention`` / ``blocks`` (default: :func:`find_layout`, after the images are checked); ``origin``:
    where the module comes from, for the error when its forward raises (default: :func:`module_origin`);
    ``features``: the module's output is features (its top class is no target; a similarity target compares the
    output).

    Raises:
        ForwardError: the module's own forward raised (naming ``origin``, keeping the exception's type and text).
    """
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
    B = int(images.shape[0])
    layout = layout or find_layout(model, attention=attention, blocks=blocks)
    device, dtype = model_device_dtype(model)
    x = images.to(device=device, dtype=dtype)
    if isinstance(target, str) and target != "top":
        raise TargetError(f"target must be a class index, one index per image, 'top', a similarity target or a "
                          f"function of the output, got {target!r}")
    if features and resolve_target(target, B, 0, True)[0] is None:
        target = None  # the top class of a module whose output is features: nothing to differentiate
    want_grad = target is not None
    run = _Run(model, layout, B, store_dtype, torch.device(store_device), want_grad, device)
    convs = dict(patch_convs(model))
    conv_stride = int(convs[layout.patch_embed].stride[0]) if layout.patch_embed in convs else None
    grad_dtype = store_dtype if grad_dtype is None else grad_dtype
    tgt = spec = scores_out = None
    with hold_capture(), guarding(model):  # the target function leaves the model alone
        try:
            run.install()
            with torch.enable_grad() if want_grad else torch.inference_mode():
                if want_grad and not any(p.requires_grad for p in model.parameters()):
                    x = x.detach().requires_grad_(True)  # frozen model: make the graph exist anyway
                origin = origin or module_origin(model)
                with _Recorder(run):
                    if layout.route == "output_attentions":
                        out = call_forward(model, origin, x, output_attentions=True)
                    else:
                        out = call_forward(model, origin, x)
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
                    spec, tgt, top = resolve_target(target, B, K, features)
                    if top:
                        tgt = logits.detach().float().argmax(dim=-1).cpu()
                    live = run.live
                    if not all(t is not None and t.requires_grad for t in live):
                        raise CaptureError(f"{run.name}: the attention is not part of an autograd graph; cannot take "
                                           "its gradients")
                    if spec is None:
                        raise TargetError("the module's output is features, not class scores: give a similarity "
                                          "target or a function of the output")
                    scores = differentiable_scores(spec, logits, logits if features else None, tgt, owner="module")
                    scores_out = scores.detach().float().to(run.store_device)
                    sel = scores.sum()
                    grads = torch.autograd.grad(sel, live, allow_unused=True)
                    unused = [run.where(i) for i, g in enumerate(grads) if g is None]
                    if len(unused) == len(grads):
                        raise CaptureError(
                            f"{run.name}: the logits do not depend on the attention tensors that were seen "
                            f"({short_paths([run.where(i) for i in range(run.L)])}): they are copies, not the "
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
                   num_prefix_tokens=P, attention_grads=grad_buf, targets=tgt,
                   target=spec if grad_buf is not None else None, scores=scores_out)

"""Capture every attention layer (and every token) of a :class:`~vitviz.model.vit.ViT` in one forward pass.

:func:`capture` switches each block to the explicit attention path for the duration of the call, hooks

* ``blocks[0]`` (forward pre-hook): its input is ``model.embed(x)``, the embeddings after the position embedding
  (and ``pos_drop``) -> ``tokens[0]``;
* ``blocks[l].attn.attn_map`` (forward hook): the post-softmax probabilities ``[B, H, N, N]``, before attention
  dropout -> ``attentions[l]``;
* ``blocks[l]`` (forward hook): the block's output, before the final norm -> ``tokens[l + 1]``;
* ``attn_pool.attn_map`` (forward hook, models with an attention-pooling head such as SigLIP's "MAP"): the learned
  query's probabilities over all tokens ``[B, H, N]`` -> ``pool_attention``, the row the analyses use in place of the
  [CLS] row of a model without a class token;

copies each into a preallocated buffer (no stacking, so the peak memory is the model's working set plus the stored
result), and in a ``finally`` block restores every block's ``fused`` flag and removes every hook it added, also when
the forward raises.

With ``target`` the same pass runs with autograd on and one ``torch.autograd.grad`` call of
``sum_b logits[b, target[b]]`` with respect to the list of attention tensors, in layer order, gives
``attention_grads[l] = d logit_target / d attentions[l]`` (the total derivative through every later layer, as a
tensor hook would see it). Images in a batch do not interact, so each image's slice is the gradient of its own
target logit. Parameter ``.grad`` fields are never touched.

Storage: results live on ``store_device`` (default CPU, so the GUI can call ``.numpy()``) in ``store_dtype``
(float32 default; float16 halves the memory of the maps, which matters for ViT-L/H at 384/518 px). Logits are always
float32. The forward itself runs on the model's device and in the model's floating dtype (the input is cast).

This module never imports Qt.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

__all__ = ["Capture", "CaptureError", "ImageCapture", "capture"]

# capture() switches the model's attention path and adds hooks for the duration of a forward pass: two captures of
# the same model at once (a GUI worker and another thread) would restore each other's flags mid-pass. Serialise them.
_CAPTURE_LOCK = threading.RLock()


class CaptureError(RuntimeError):
    """The model's attention cannot be captured (not a vitviz ViT, no hookable attention, or a hook saw nothing)."""


@dataclass
class ImageCapture:
    """One image's slice of a :class:`Capture` (the shapes the :mod:`vitviz.analysis` functions take).

    Attributes:
        logits: ``[K]`` float32.
        attentions: ``[L, H, N, N]`` post-softmax attention, row = query.
        tokens: ``[L+1, N, D]``; index 0 the embeddings, index l the output of block l (before the final norm).
        grid: ``(gh, gw)`` patch grid; ``N = num_prefix_tokens + gh * gw``.
        patch_size: patch side in input pixels.
        num_prefix_tokens: CLS + distillation + register tokens.
        attention_grads: ``[L, H, N, N]`` d(target logit)/d(attention), or None.
        target: the class whose logit was differentiated, or None.
        pool_attention: ``[H, N]`` the pooling head's attention over the tokens, or None.
        pool_attention_grad: ``[H, N]`` its gradient, or None.
    """

    logits: torch.Tensor
    attentions: torch.Tensor
    tokens: torch.Tensor
    grid: tuple[int, int]
    patch_size: int
    num_prefix_tokens: int
    attention_grads: torch.Tensor | None = None
    target: int | None = None
    pool_attention: torch.Tensor | None = None
    pool_attention_grad: torch.Tensor | None = None


@dataclass
class Capture:
    """Everything one forward pass produced for a batch.

    Attributes:
        logits: ``[B, K]`` float32 (the model's output; pooled features ``[B, D]`` when it has no head).
        attentions: ``[L, B, H, N, N]`` post-softmax attention probabilities before dropout; row = query, column = key.
        tokens: ``[L+1, B, N, D]``; index 0: embeddings after the position embedding; index l: output of block l,
            before the final norm.
        grid: ``(gh, gw)`` patch grid of the input; patch tokens are row-major after the prefix tokens.
        patch_size: patch side in input pixels.
        num_prefix_tokens: CLS + distillation + register tokens (``N = num_prefix_tokens + gh * gw``).
        attention_grads: ``[L, B, H, N, N]`` d(logit of the target)/d(attention of layer l) when a target was given,
            else None.
        targets: ``[B]`` int64 target classes, or None.
        pool_attention: ``[B, H, N]`` the attention of an attention-pooling head (SigLIP's "MAP": one learned query
            over all N tokens, after the final norm), or None for models that pool a token or average. Views and
            analyses use it as the "[CLS] row" of a model that has no class token.
        pool_attention_grads: ``[B, H, N]`` d(logit of the target)/d(pool_attention) when a target was given.
    """

    logits: torch.Tensor
    attentions: torch.Tensor
    tokens: torch.Tensor
    grid: tuple[int, int]
    patch_size: int
    num_prefix_tokens: int
    attention_grads: torch.Tensor | None = None
    targets: torch.Tensor | None = field(default=None)
    pool_attention: torch.Tensor | None = None
    pool_attention_grads: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return int(self.attentions.shape[1])

    @property
    def num_layers(self) -> int:
        return int(self.attentions.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.attentions.shape[2])

    @property
    def num_tokens(self) -> int:
        return int(self.attentions.shape[-1])

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored tensors."""
        ts = [self.logits, self.attentions, self.tokens, self.attention_grads, self.targets, self.pool_attention,
              self.pool_attention_grads]
        return sum(t.numel() * t.element_size() for t in ts if t is not None)

    def image(self, b: int) -> ImageCapture:
        """The slices of image ``b`` (views, no copies): attentions ``[L, H, N, N]``, tokens ``[L+1, N, D]`` ..."""
        B = self.batch_size
        if not -B <= b < B:
            raise IndexError(f"image index {b} out of range for a capture of {B} image(s)")
        return ImageCapture(
            logits=self.logits[b],
            attentions=self.attentions[:, b],
            tokens=self.tokens[:, b],
            grid=self.grid,
            patch_size=self.patch_size,
            num_prefix_tokens=self.num_prefix_tokens,
            attention_grads=None if self.attention_grads is None else self.attention_grads[:, b],
            target=None if self.targets is None else int(self.targets[b]),
            pool_attention=None if self.pool_attention is None else self.pool_attention[b],
            pool_attention_grad=None if self.pool_attention_grads is None else self.pool_attention_grads[b],
        )


def _check_model(model: Any) -> list[nn.Module]:
    """Return the model's blocks, or raise CaptureError saying what is missing."""
    if not isinstance(model, nn.Module):
        raise CaptureError(f"capture needs a vitviz ViT (torch.nn.Module), got {type(model).__name__}")
    blocks = getattr(model, "blocks", None)
    name = type(model).__name__
    if blocks is None or not hasattr(model, "embed") or not hasattr(model, "patch_embed"):
        raise CaptureError(
            f"{name} is not a vitviz ViT (it needs .embed, .patch_embed and .blocks); load the weights into "
            "vitviz.model.ViT (vitviz.model.load_checkpoint converts timm / torchvision / HF checkpoints)"
        )
    blocks = list(blocks)
    if not blocks:
        raise CaptureError(f"{name} has no transformer blocks: there is no attention to capture")
    for i, blk in enumerate(blocks):
        attn = getattr(blk, "attn", None)
        if attn is None or not isinstance(getattr(attn, "attn_map", None), nn.Module) or not hasattr(attn, "fused"):
            raise CaptureError(
                f"{name}.blocks[{i}] has no hookable attention (expected .attn.attn_map and .attn.fused as in "
                "vitviz.model.vit.Attention); load the weights into vitviz.model.ViT"
            )
    return blocks


def _model_device_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    for p in model.parameters():
        if p.is_floating_point():
            return p.device, p.dtype
    for b in model.buffers():
        if b.is_floating_point():
            return b.device, b.dtype
    return torch.device("cpu"), torch.float32


def _targets(target: Any, B: int, K: int) -> torch.Tensor:
    if isinstance(target, (bool, np.bool_)):
        raise ValueError(f"target must be a class index or one index per image, got {target!r}")
    if isinstance(target, (int, np.integer)):
        t = torch.full((B,), int(target), dtype=torch.long)
    else:
        if isinstance(target, torch.Tensor):
            t = target.detach().to("cpu")
        elif isinstance(target, (Sequence, np.ndarray)):
            t = torch.as_tensor(np.asarray(target))
        else:
            raise ValueError(f"target must be an int or a sequence of ints, got {type(target).__name__}")
        if t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
            raise ValueError(f"target must hold integer class indices, got dtype {t.dtype}")
        t = t.reshape(-1).long() if t.ndim == 0 else t.long()
        if t.ndim != 1 or t.numel() not in (1, B):
            raise ValueError(f"target must be one class index or {B} (one per image), got shape {tuple(t.shape)}")
        t = t.expand(B).clone()
    if K <= 0:
        raise ValueError("the model has no classification head (num_classes=0): a target class is meaningless")
    bad = [int(v) for v in t if not 0 <= int(v) < K]
    if bad:
        raise ValueError(f"target class(es) {bad} out of range for a model with {K} classes (valid: 0..{K - 1})")
    return t


# measured (bench/memory.py): a capture's peak is about this many attention stacks [L, B, H, N, N] on top of the
# weights: the stored stack, the live graph of every layer's attention and the gradients
_STACKS_WITH_GRADS, _STACKS_WITHOUT = 4.6, 1.1


def available_memory(device: torch.device | str = "cpu") -> int | None:
    """Bytes that can still be allocated on ``device`` (Linux: MemAvailable; CUDA: free device memory), or None
    when unknown."""
    device = torch.device(device)
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except Exception:  # noqa: BLE001 - no driver / device: unknown
            return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_capture_memory(L: int, B: int, H: int, N: int, *, grads: bool, device: torch.device | str = "cpu",
                         itemsize: int = 4, available: int | None = None) -> None:
    """Refuse, before allocating anything, a capture whose attention stacks would not fit in memory.

    Estimate: ``k * L * B * H * N**2 * itemsize`` with k = 4.6 with gradients, 1.1 without (measured peaks of
    ViT-H/14 at 518 px: 18.9 GiB and 6.4 GiB). ``available`` defaults to :func:`available_memory`.

    Raises:
        CaptureError: the estimate exceeds the available memory (the message gives both and what to change).
    """
    need = (_STACKS_WITH_GRADS if grads else _STACKS_WITHOUT) * L * B * H * N * N * itemsize
    free = available_memory(device) if available is None else available
    if free is not None and need > free:
        raise CaptureError(
            f"capturing {L} layers x {H} heads x {N}x{N} tokens for {B} image(s){' with gradients' if grads else ''} "
            f"needs about {need / 2**30:.1f} GiB, but only {free / 2**30:.1f} GiB is available on {device}; use a "
            f"smaller input size, fewer images at once{', no gradient target' if grads else ''}, or a machine with "
            f"more memory")


def capture(
    model: nn.Module,
    images: torch.Tensor,
    *,
    target: int | Sequence[int] | torch.Tensor | Literal["top"] | None = None,
    store_dtype: torch.dtype = torch.float32,
    grad_dtype: torch.dtype | None = None,
    store_device: torch.device | str = "cpu",
    **adapter_options: Any,
) -> Capture:
    """Run ``model`` once on ``images`` and record every layer's attention and tokens.

    Args:
        model: a :class:`vitviz.model.vit.ViT`, or any other ViT ``nn.Module`` (timm, Hugging Face, torchvision,
            ``nn.MultiheadAttention``-based or hand-written: :func:`vitviz.capture.foreign.capture_module`, which also takes
            ``adapter_options``: ``attention``, ``blocks``, ``patch_size``, ``grid``, ``num_prefix_tokens``). Its
            train/eval mode is left as it is (use eval: the stored attention is before dropout, but dropout still
            changes later layers).
        images: preprocessed batch ``[B, C, H, W]`` (any size the model accepts; cast to the model's device/dtype).
        target: a class index, or one per image (sequence / 1-D tensor of length B), or ``"top"``: each image's
            most probable class, read from this same forward pass (one forward and one backward in all). When
            given, the pass runs with autograd and ``attention_grads`` holds d(logit[b, target[b]])/d(attentions[l, b]).
            ``"top"`` on a model without a classifier captures without gradients (``targets`` is None).
        store_dtype: dtype of the stored attentions and tokens (float16 halves their memory).
        grad_dtype: dtype of the stored gradients (default: ``store_dtype``). float16 flushes magnitudes below
            ~6e-8 to zero; prefer float32 or bfloat16 for gradients of large models.
        store_device: where the results are stored (default CPU).

    Returns:
        A :class:`Capture` with ``logits [B, K]`` (float32), ``attentions [L, B, H, N, N]``, ``tokens [L+1, B, N, D]``,
        ``grid``, ``patch_size``, ``num_prefix_tokens`` and (with a target) ``attention_grads [L, B, H, N, N]``.

    Raises:
        CaptureError: the model's attention cannot be captured, or a hook did not fire exactly once per layer.
        ValueError: bad ``images`` shape or ``target``.
    """
    from vitviz.capture.foreign import capture_module, is_vitviz_model

    if isinstance(model, nn.Module) and (adapter_options or not is_vitviz_model(model)):  # any other ViT module
        return capture_module(model, images, target=target, store_dtype=store_dtype, grad_dtype=grad_dtype,
                              store_device=store_device, **adapter_options)
    blocks = _check_model(model)
    if not isinstance(images, torch.Tensor):
        raise ValueError(f"images must be a torch.Tensor [B, C, H, W], got {type(images).__name__}")
    if images.ndim == 3:
        raise ValueError(
            f"images must be a batch [B, C, H, W]; got one image {tuple(images.shape)} (use images[None])"
        )
    grid = tuple(model.patch_embed.check_input(images))  # raises ValueError naming the problem
    if images.shape[0] == 0:
        raise ValueError("images is an empty batch (B = 0)")
    for name, dt in (("store_dtype", store_dtype), ("grad_dtype", grad_dtype)):
        if dt is not None and (not isinstance(dt, torch.dtype) or not dt.is_floating_point):
            raise ValueError(f"{name} must be a floating torch.dtype (float32, float16, bfloat16), got {dt!r}")
    device, dtype = _model_device_dtype(model)
    x = images.to(device=device, dtype=dtype)
    B = int(x.shape[0])
    L = len(blocks)
    P = int(model.num_prefix_tokens)
    N = P + grid[0] * grid[1]
    D = int(model.embed_dim)
    heads = [int(b.attn.num_heads) for b in blocks]
    if len(set(heads)) != 1:
        raise CaptureError(f"blocks have different head counts {heads}; attentions cannot be stacked")
    H = heads[0]
    num_classes = int(getattr(model, "num_classes", 0))
    top = isinstance(target, str)
    if top and target != "top":
        raise ValueError(f"target must be a class index, one index per image or 'top', got {target!r}")
    if top and num_classes <= 0:
        top, target = False, None  # no classifier: nothing to differentiate
    tgt = None if target is None or top else _targets(target, B, num_classes)
    grad_dtype = store_dtype if grad_dtype is None else grad_dtype
    store_device = torch.device(store_device)
    check_capture_memory(L, B, H, N, grads=tgt is not None or top, device=device,
                         itemsize=torch.empty((), dtype=store_dtype).element_size())

    attn_buf = torch.empty((L, B, H, N, N), dtype=store_dtype, device=store_device)
    tok_buf = torch.empty((L + 1, B, N, D), dtype=store_dtype, device=store_device)
    pool = _pool_module(model)
    pool_buf = None if pool is None else torch.empty((B, int(pool.num_heads), N), dtype=store_dtype,
                                                       device=store_device)
    live_pool: list[torch.Tensor] = []
    counts = {"embed": 0, "attn": [0] * L, "block": [0] * L, "pool": 0}
    live_attn: list[torch.Tensor | None] = [None] * L  # graph tensors, for autograd.grad (target only)
    pool_grad_buf: torch.Tensor | None = None
    want_grad = tgt is not None or top

    def _store(buf: torch.Tensor, t: torch.Tensor, what: str) -> None:
        if tuple(t.shape) != tuple(buf.shape):
            raise CaptureError(f"{what} has shape {tuple(t.shape)}, expected {tuple(buf.shape)}")
        buf.copy_(t.detach())

    def embed_hook(module: nn.Module, args: tuple) -> None:
        counts["embed"] += 1
        _store(tok_buf[0], args[0], "the input of blocks[0] (embeddings)")

    def make_attn_hook(i: int):
        def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
            counts["attn"][i] += 1
            _store(attn_buf[i], out, f"blocks[{i}] attention")
            if want_grad:
                live_attn[i] = out

        return hook

    def pool_hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
        counts["pool"] += 1
        assert pool_buf is not None
        _store(pool_buf, out[:, :, 0], "the pooling head's attention")
        if want_grad:
            live_pool.append(out)

    def make_block_hook(i: int):
        def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
            counts["block"][i] += 1
            _store(tok_buf[i + 1], out, f"blocks[{i}] output")

        return hook

    with _CAPTURE_LOCK:  # one capture at a time (flags and hooks are shared model state)
        attn_mods = [b.attn for b in blocks] + ([pool] if pool is not None else [])
        fused_before = [m.fused for m in attn_mods]
        handles = []
        try:
            for m in attn_mods:
                m.fused = False
            handles.append(blocks[0].register_forward_pre_hook(embed_hook))
            if pool is not None:
                handles.append(pool.attn_map.register_forward_hook(pool_hook))
            for i, b in enumerate(blocks):
                handles.append(b.attn.attn_map.register_forward_hook(make_attn_hook(i)))
                handles.append(b.register_forward_hook(make_block_hook(i)))
            if want_grad:
                with torch.enable_grad():
                    if not any(p.requires_grad for p in model.parameters()):
                        x = x.detach().requires_grad_(True)  # frozen model: make the graph exist anyway
                    logits = model(x)
                    _check_counts(counts, L, pool is not None)
                    if not all(t is not None and t.requires_grad for t in live_attn):
                        raise CaptureError("the attention is not part of an autograd graph; cannot take its grads")
                    if top:  # the top class of this very pass: no extra forward
                        tgt = logits.detach().float().argmax(dim=-1).cpu()
                    sel = logits.gather(1, tgt.to(logits.device)[:, None]).sum()
                    grads = torch.autograd.grad(sel, live_attn + live_pool, allow_unused=True)
                grad_buf = torch.empty((L, B, H, N, N), dtype=grad_dtype, device=store_device)
                for i, g in enumerate(grads[:L]):
                    if g is None:
                        grad_buf[i].zero_()
                    else:
                        grad_buf[i].copy_(g)
                if pool_buf is not None:
                    g = grads[L]
                    pool_grad_buf = torch.zeros_like(pool_buf, dtype=grad_dtype)
                    if g is not None:
                        pool_grad_buf.copy_(g[:, :, 0])
                del grads, sel
                live_attn.clear()
            else:
                grad_buf = None
                with torch.inference_mode():
                    logits = model(x)
                _check_counts(counts, L, pool is not None)
        finally:
            for h in handles:
                h.remove()
            for m, f in zip(attn_mods, fused_before):
                m.fused = f
            live_attn.clear()
            live_pool.clear()

    logits_out = torch.empty(tuple(logits.shape), dtype=torch.float32, device=store_device)
    logits_out.copy_(logits.detach())
    return Capture(
        logits=logits_out,
        attentions=attn_buf,
        tokens=tok_buf,
        grid=(int(grid[0]), int(grid[1])),
        patch_size=int(model.patch_size),
        num_prefix_tokens=P,
        attention_grads=grad_buf,
        targets=tgt,
        pool_attention=pool_buf,
        pool_attention_grads=pool_grad_buf if grad_buf is not None and pool_buf is not None else None,
    )


def _pool_module(model: nn.Module) -> nn.Module | None:
    """The model's attention-pooling head (``attn_pool`` with ``attn_map`` and ``fused``), or None."""
    pool = getattr(model, "attn_pool", None)
    if pool is None:
        return None
    if not isinstance(getattr(pool, "attn_map", None), nn.Module) or not hasattr(pool, "fused"):
        raise CaptureError(f"{type(model).__name__}.attn_pool has no hookable attention (expected .attn_map and "
                           ".fused as in vitviz.model.vit.AttentionPool)")
    return pool


def _check_counts(counts: dict, L: int, pool: bool = False) -> None:
    problems = []
    if pool and counts["pool"] != 1:
        problems.append(f"the pooling head's attention hook fired {counts['pool']} times")
    if counts["embed"] != 1:
        problems.append(f"the embedding hook fired {counts['embed']} times")
    for what in ("attn", "block"):
        bad = [(i, c) for i, c in enumerate(counts[what]) if c != 1]
        if bad:
            label = "attention hook" if what == "attn" else "block output hook"
            problems.append(", ".join(f"blocks[{i}] {label} fired {c} times" for i, c in bad))
    if problems:
        raise CaptureError(
            "capture saw an incomplete forward pass (expected each hook exactly once): " + "; ".join(problems)
            + ". Does the model bypass blocks[i].attn.attn_map (fused attention) or call blocks more than once?"
        )

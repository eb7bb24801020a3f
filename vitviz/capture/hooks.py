"""Capture every attention layer (and every token) of a :class:`~vitviz.model.vit.ViT` in one forward pass, by hooks.

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

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import nn

from vitviz.capture.foreign.adapted import capture_module
from vitviz.capture.foreign.layout_finder import is_vitviz_model
from vitviz.capture.preflight import CAPTURE_LOCK, check_capture_memory, model_device_dtype, resolve_targets
from vitviz.capture.results import Capture, CaptureError


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
                "vitviz.model.layers.Attention); load the weights into vitviz.model.ViT"
            )
    return blocks


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
            ``nn.MultiheadAttention``-based or hand-written: :func:`vitviz.capture.foreign.capture_module`, which
            also takes ``adapter_options``: ``attention``, ``blocks``, ``patch_size``, ``grid``,
            ``num_prefix_tokens``). Its train/eval mode is left as it is (use eval: the stored attention is before
            dropout, but dropout still changes later layers).
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
    device, dtype = model_device_dtype(model)
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
    tgt = None if target is None or top else resolve_targets(target, B, num_classes)
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

    with CAPTURE_LOCK:  # one capture at a time (flags and hooks are shared model state)
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
                           ".fused as in vitviz.model.layers.AttentionPool)")
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

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

from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from torch import nn

from vitviz.capture.foreign.adapted import capture_module
from vitviz.capture.foreign.layout_finder import is_vitviz_model
from vitviz.capture.gradient_maps import gradcam_layers, legrad_layers
from vitviz.capture.model_head import LEGRAD_POOLINGS, embedding_of, is_feature_model
from vitviz.capture.preflight import check_capture_memory, explicit_attention, model_device_dtype, resolve_target
from vitviz.capture.results import Capture, CaptureError
from vitviz.capture.target_guard import guarding
from vitviz.capture.targets import Target, Text, as_target, differentiable_scores, target_scores


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
    target: int | Sequence[int] | torch.Tensor | Literal["top"] | Target | Callable | None = None,
    store_dtype: torch.dtype = torch.float32,
    grad_dtype: torch.dtype | None = None,
    store_device: torch.device | str = "cpu",
    legrad: Sequence[str] = (),
    gradcam: bool = False,
    legrad_neutral: Target | None = None,
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
        target: what the gradients explain (:mod:`vitviz.capture.targets`): a class index, or one per image
            (sequence / 1-D tensor of length B), or ``"top"``: each image's most probable class, read from this same
            forward pass (one forward and one backward in all); a :class:`~vitviz.capture.targets.SimilarityTarget`
            (cosine similarity of the pooled embedding to a reference); a :class:`~vitviz.capture.targets.
            ClassTarget`; or any function of one image's output ``[K] -> 0-d tensor``. When given, the pass runs
            with autograd and ``attention_grads`` holds d(score[b])/d(attentions[l, b]). ``"top"`` on a feature model
            (no classifier) captures without gradients (``targets`` is None).
        legrad: the poolings (``"mean"``, ``"model"``: :func:`vitviz.capture.model_head.head_on_tokens`) of which
            LeGrad's per-layer maps are taken while the graph is alive (``Capture.legrad``); needs a target.
        gradcam: take GradCAM's per-layer maps on every block's ``norm1`` (``Capture.gradcam``); needs a target.
        legrad_neutral: a second target whose LeGrad maps are taken in the same graph, under the keys
            ``"POOLING|neutral"`` (SigLIP's neutral-prompt correction: :func:`vitviz.analysis.legrad_map`).
        store_dtype: dtype of the stored attentions and tokens (float16 halves their memory).
        grad_dtype: dtype of the stored gradients (default: ``store_dtype``). float16 flushes magnitudes below
            ~6e-8 to zero; prefer float32 or bfloat16 for gradients of large models. LeGrad's and GradCAM's maps
            (computed in float32, one value per layer and patch) are stored in float32 whatever these say.
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
    if isinstance(target, Text):
        target = target.resolve(model)
    spec, classes, top = resolve_target(target, B, num_classes, is_feature_model(model))
    legrad = tuple(legrad)
    bad = [p for p in legrad if p not in LEGRAD_POOLINGS]
    if bad:
        raise ValueError(f"legrad poolings must be among {LEGRAD_POOLINGS}, got {bad}")
    tgt = classes
    grad_dtype = store_dtype if grad_dtype is None else grad_dtype
    store_device = torch.device(store_device)
    check_capture_memory(L, B, H, N, grads=spec is not None, device=device,
                         itemsize=torch.empty((), dtype=store_dtype).element_size())

    attn_buf = torch.empty((L, B, H, N, N), dtype=store_dtype, device=store_device)
    tok_buf = torch.empty((L + 1, B, N, D), dtype=store_dtype, device=store_device)
    pool = _pool_module(model)
    pool_buf = None if pool is None else torch.empty((B, int(pool.num_heads), N), dtype=store_dtype,
                                                       device=store_device)
    live_pool: list[torch.Tensor] = []
    counts = {"embed": 0, "attn": [0] * L, "block": [0] * L, "pool": 0}
    live_attn: list[torch.Tensor | None] = [None] * L  # graph tensors, for autograd.grad (target only)
    live_tok: list[torch.Tensor | None] = [None] * L  # block outputs (LeGrad)
    live_norm1: list[torch.Tensor | None] = [None] * L  # blocks' norm1 outputs (GradCAM)
    live_head_in: list[torch.Tensor] = []  # the classifier's input: the pooled embedding (similarity targets)
    pool_grad_buf: torch.Tensor | None = None
    want_grad = spec is not None
    want_legrad = want_grad and bool(legrad)
    want_gradcam = want_grad and gradcam
    legrad_maps: dict[str, torch.Tensor] = {}
    gradcam_maps: torch.Tensor | None = None
    scores_out: torch.Tensor | None = None

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

    recording = [True]  # off once the model's own pass is over (LeGrad applies the pool again)

    def pool_hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
        if not recording[0]:
            return
        counts["pool"] += 1
        assert pool_buf is not None
        _store(pool_buf, out[:, :, 0], "the pooling head's attention")
        if want_grad:
            live_pool.append(out)

    def make_block_hook(i: int):
        def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
            counts["block"][i] += 1
            _store(tok_buf[i + 1], out, f"blocks[{i}] output")
            if want_legrad:
                live_tok[i] = out

        return hook

    def make_norm1_hook(i: int):
        def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
            live_norm1[i] = out

        return hook

    def head_hook(module: nn.Module, args: tuple) -> None:
        live_head_in.append(args[0])

    attn_mods = [b.attn for b in blocks] + ([pool] if pool is not None else [])
    with explicit_attention(attn_mods) as handles:  # one capture at a time (flags and hooks are shared model state)
        try:
            handles.append(blocks[0].register_forward_pre_hook(embed_hook))
            if pool is not None:
                handles.append(pool.attn_map.register_forward_hook(pool_hook))
            for i, b in enumerate(blocks):
                handles.append(b.attn.attn_map.register_forward_hook(make_attn_hook(i)))
                handles.append(b.register_forward_hook(make_block_hook(i)))
                if want_gradcam:
                    handles.append(b.norm1.register_forward_hook(make_norm1_hook(i)))
            if want_grad and isinstance(getattr(model, "head", None), nn.Module):
                handles.append(model.head.register_forward_pre_hook(head_hook))
            if want_grad:
                with torch.enable_grad(), guarding(model):  # the target function leaves the model alone
                    if not any(p.requires_grad for p in model.parameters()):
                        x = x.detach().requires_grad_(True)  # frozen model: make the graph exist anyway
                    logits = model(x)
                    recording[0] = False
                    _check_counts(counts, L, pool is not None)
                    if not all(t is not None and t.requires_grad for t in live_attn):
                        raise CaptureError("the attention is not part of an autograd graph; cannot take its grads")
                    if top:  # the top class of this very pass: no extra forward
                        tgt = logits.detach().float().argmax(dim=-1).cpu()
                    assert spec is not None

                    def score(out: torch.Tensor, emb: torch.Tensor | None) -> torch.Tensor:
                        return target_scores(spec, out, emb, tgt)

                    # the pooled embedding: the classifier's input (first call of the head: the model's own pass)
                    embedding = embedding_of(model, logits, live_head_in[0] if live_head_in else None)
                    scores = differentiable_scores(spec, logits, embedding, tgt)
                    scores_out = scores.detach().float().to(store_device)
                    norm1 = [t for t in live_norm1 if t is not None] if want_gradcam else []
                    sel = scores.sum()
                    grads = torch.autograd.grad(sel, live_attn + live_pool + norm1, allow_unused=True,
                                                retain_graph=want_legrad)
                    if want_gradcam:
                        gradcam_maps = gradcam_layers(norm1, grads[len(grads) - len(norm1):],
                                                      P).to(store_device, torch.float32)
                    if want_legrad:
                        for pooling in legrad:
                            legrad_maps[pooling] = legrad_layers(model, score, live_tok, live_attn, P,
                                                                 pooling).to(store_device, torch.float32)
                        if legrad_neutral is not None:
                            neutral = as_target(legrad_neutral)

                            def neutral_score(out: torch.Tensor, emb: torch.Tensor | None) -> torch.Tensor:
                                return target_scores(neutral, out, emb, tgt)

                            for pooling in legrad:
                                legrad_maps[f"{pooling}|neutral"] = legrad_layers(
                                    model, neutral_score, live_tok, live_attn, P, pooling
                                ).to(store_device, torch.float32)
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
                del grads, sel, scores, embedding
                live_attn.clear()
                live_tok.clear()
                live_norm1.clear()
                live_head_in.clear()
            else:
                grad_buf = None
                with torch.inference_mode():
                    logits = model(x)
                _check_counts(counts, L, pool is not None)
        finally:
            live_attn.clear()
            live_pool.clear()
            live_tok.clear()
            live_norm1.clear()
            live_head_in.clear()

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
        target=spec if grad_buf is not None else None,
        scores=scores_out,
        legrad=legrad_maps,
        gradcam=gradcam_maps,
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

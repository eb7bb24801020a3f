"""One pass of a vitviz ViT that hands each layer's attention to observers as it goes, instead of storing every layer.

:func:`vitviz.capture.capture` keeps ``attentions [L, B, H, N, N]``, ``tokens`` and the gradients of every layer: for
ViT-H/14 at 518 px with gradients that peaks near 19 GiB for one image. The analyses that export, stats and evaluate
write (rollout, relevance, gradient rollout, distances, entropy, a few layers' [CLS] rows or tokens) need one layer at
a time. :func:`stream_pass` runs the model block by block and calls its observers with each layer's tensors:

* forward, in layer order: ``on_tokens(0, embeddings)``; for each block ``l``: ``on_attention(l, A_l)`` (the
  post-softmax probabilities ``[B, H, N, N]``, before dropout, as the stored capture records them) and
  ``on_tokens(l + 1, z_l)`` (the block's output, before the final norm); then ``on_pool(P)`` (an attention-pool
  head's row ``[B, H, N]``);
* backward (with a target), last layer first: ``on_pool_grad(P, dP)``, then for ``l = L-1 .. 0``
  ``on_attention_grad(l, A_l, dA_l)`` with ``dA_l = d(sum_b score_b) / d A_l``, the total derivative through every
  later layer, as the stored capture's ``attention_grads``. Products of per-layer matrices taken from the last layer
  down (rollout, relevance, gradient rollout) are therefore accumulated in the order the stored path multiplies them.

An observer implements any of these methods (the others are not called); tensors are detached, in the model's dtype
and on its device (the observers compute there: nothing per layer is copied to the host).

The backward goes block by block: ``g_{l+1} = d score / d z_l`` is carried down, and block ``l``'s graph exists only
while its step runs. With ``keep_graph=False`` the forward runs without a graph, keeping each block's input
``[B, N, D]``, and each block is computed again at its backward step (activation checkpointing: about one more
forward's time; the peak is the weights, L block inputs and one block's graph). With ``keep_graph=True`` every block's
graph is kept from the forward (as fast as one forward and one backward, and as much memory as the stored capture's
graph, without its stored stacks). ``None`` chooses: keep the graph when it fits (:func:`~vitviz.capture.streaming.
budget.graph_fits`).

The scalar differentiated is :func:`vitviz.capture.targets.target_scores` of the target (a class, a similarity to a
reference, a function of the output), summed over the images: the same function the stored capture differentiates.
LeGrad's and GradCAM's per-layer maps are taken at each block's backward step, while its graph is alive
(:mod:`vitviz.capture.gradient_maps`: the same functions as the stored capture, one layer at a time).

No Qt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from vitviz.capture.gradient_maps import gradcam_layers, legrad_layers
from vitviz.capture.model_head import LEGRAD_POOLINGS, embedding_of, is_feature_model
from vitviz.capture.preflight import explicit_attention, model_device_dtype, resolve_target
from vitviz.capture.results import CaptureError
from vitviz.capture.streaming.budget import graph_fits
from vitviz.capture.target_guard import guarding
from vitviz.capture.targets import Target, as_target, differentiable_scores, target_scores
from vitviz.model.vit import ViT

__all__ = ["StreamedPass", "stream_pass", "streamable"]


@dataclass
class StreamedPass:
    """What a streamed pass gives besides what its observers gathered: everything small, on ``store_device``.

    Attributes:
        logits: ``[B, K]`` float32, the model's output.
        grid, patch_size, num_prefix_tokens, num_layers, num_heads, num_tokens, embed_dim: the shapes of the pass.
        targets: ``[B]`` int64 classes of a class target (each image's top class for ``"top"``), else None.
        target: what the gradients explain (:mod:`vitviz.capture.targets`), or None (no backward).
        scores: ``[B]`` float32 the target's value per image, or None.
        pool_attention, pool_attention_grads: ``[B, H, N]`` float32 of an attention-pool head (and its gradient).
        legrad: ``{pooling: [L, B, gh * gw]}`` LeGrad's per-layer maps; gradcam: ``[L, B, gh * gw]`` or None.
        recomputed: the backward recomputed each block (``keep_graph=False``).
    """

    logits: torch.Tensor
    grid: tuple[int, int]
    patch_size: int
    num_prefix_tokens: int
    num_layers: int
    num_heads: int
    num_tokens: int
    embed_dim: int
    targets: torch.Tensor | None = None
    target: Any = None
    scores: torch.Tensor | None = None
    pool_attention: torch.Tensor | None = None
    pool_attention_grads: torch.Tensor | None = None
    legrad: dict[str, torch.Tensor] = field(default_factory=dict)
    gradcam: torch.Tensor | None = None
    recomputed: bool = False


def streamable(model: Any) -> str | None:
    """Why :func:`stream_pass` cannot run ``model`` (None when it can): it runs vitviz's own ViT, whose blocks it
    calls one by one; any other module goes through the stored capture."""
    if not isinstance(model, ViT):
        return f"{type(model).__name__} is not vitviz's own ViT (its blocks are not called one by one)"
    if len(model.blocks) == 0:
        return "the model has no transformer blocks"
    heads = {int(b.attn.num_heads) for b in model.blocks}
    if len(heads) != 1:
        return f"blocks have different head counts {sorted(heads)}"
    return None


class _Slot:
    """What a hook saw during one module call (exactly one value expected)."""

    def __init__(self) -> None:
        self.items: list[torch.Tensor] = []

    def take(self, what: str) -> torch.Tensor:
        if len(self.items) != 1:
            n = len(self.items)
            self.items.clear()
            raise CaptureError(f"{what} fired {n} times in one block call (expected once): does the model bypass "
                               "blocks[i].attn.attn_map?")
        return self.items.pop()


def _emit(observers: Sequence[Any], method: str, *args: Any) -> None:
    for o in observers:
        fn = getattr(o, method, None)
        if fn is not None:
            fn(*args)


def _check_images(model: ViT, images: Any) -> tuple[int, int]:
    if not isinstance(images, torch.Tensor):
        raise ValueError(f"images must be a torch.Tensor [B, C, H, W], got {type(images).__name__}")
    if images.ndim == 3:
        raise ValueError(f"images must be a batch [B, C, H, W]; got one image {tuple(images.shape)} (use images[None])")
    grid = tuple(model.patch_embed.check_input(images))
    if images.shape[0] == 0:
        raise ValueError("images is an empty batch (B = 0)")
    return int(grid[0]), int(grid[1])


def stream_pass(model: nn.Module, images: torch.Tensor, observers: Sequence[Any] = (), *, target: Any = None,
                legrad: Sequence[str] = (), gradcam: bool = False, legrad_neutral: Target | None = None,
                keep_graph: bool | None = None, store_device: torch.device | str = "cpu") -> StreamedPass:
    """Run ``model`` on ``images`` once (and, with a target, backward once), calling ``observers`` per layer.

    Args:
        model: vitviz's :class:`~vitviz.model.vit.ViT` (:func:`streamable`); its train/eval mode is left as it is.
        images: preprocessed batch ``[B, C, H, W]`` (cast to the model's device and dtype).
        observers: objects with any of ``on_tokens(i, z)``, ``on_attention(l, A)``, ``on_pool(P)``,
            ``on_pool_grad(P, dP)``, ``on_attention_grad(l, A, dA)`` (see the module's docstring).
        target: as :func:`vitviz.capture.capture`'s (a class, one per image, ``"top"``, a similarity or callable
            target); None: forward only.
        legrad: LeGrad poolings (``"mean"``, ``"model"``) whose per-layer maps are taken; needs a target.
        gradcam: take GradCAM's per-layer maps (each block's ``norm1``); needs a target.
        legrad_neutral: a second target whose LeGrad maps are taken too, under ``"POOLING|neutral"`` (as
            :func:`vitviz.capture.capture`'s).
        keep_graph: keep every block's graph from the forward (True), recompute each block at its backward step
            (False), or choose by the memory available (None).
        store_device: where the small results go (logits, pool rows, LeGrad / GradCAM maps).

    Raises:
        CaptureError: the model cannot be streamed, or a hook saw an incomplete pass.
        ValueError (TargetError): bad ``images`` or ``target``.
    """
    why = streamable(model)
    if why:
        raise CaptureError(f"cannot stream the model: {why}")
    assert isinstance(model, ViT)
    grid = _check_images(model, images)
    blocks = list(model.blocks)
    device, dtype = model_device_dtype(model)
    x = images.to(device=device, dtype=dtype)
    B, L, P = int(x.shape[0]), len(blocks), int(model.num_prefix_tokens)
    N, D, H = P + grid[0] * grid[1], int(model.embed_dim), int(blocks[0].attn.num_heads)
    num_classes = int(getattr(model, "num_classes", 0) or 0)
    spec, classes, top = resolve_target(target, B, num_classes, is_feature_model(model))
    want_grad = spec is not None
    legrad = tuple(legrad) if want_grad else ()
    bad = [p for p in legrad if p not in LEGRAD_POOLINGS]
    if bad:
        raise ValueError(f"legrad poolings must be among {LEGRAD_POOLINGS}, got {bad}")
    gradcam = bool(gradcam) and want_grad
    if want_grad and keep_graph is None:
        keep_graph = graph_fits(model, grid, B, device=device)
    keep = bool(keep_graph) and want_grad
    store_device = torch.device(store_device)
    observers = list(observers)

    pool = model.attn_pool
    attn_slot, norm1_slot, pool_slot, head_in = _Slot(), _Slot(), _Slot(), []
    recording = {"pool": False, "head": False}

    def attn_hook(_m: nn.Module, _args: tuple, out: torch.Tensor) -> None:
        attn_slot.items.append(out)

    def norm1_hook(_m: nn.Module, _args: tuple, out: torch.Tensor) -> None:
        norm1_slot.items.append(out)

    def pool_hook(_m: nn.Module, _args: tuple, out: torch.Tensor) -> None:
        if recording["pool"]:  # the model's own head only (LeGrad applies the pool to other layers' tokens)
            pool_slot.items.append(out)

    def head_hook(_m: nn.Module, args: tuple) -> None:
        if recording["head"]:
            head_in.append(args[0])

    position: list[dict[str, Any]] = [{} for _ in blocks]  # per block: relative bias / rotary (position_args)

    def run_block(i: int, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        out = blocks[i](z, **position[i])
        a = attn_slot.take(f"blocks[{i}] attention hook")
        n1 = norm1_slot.take(f"blocks[{i}] norm1 hook") if gradcam else None
        return out, a, n1

    # flags and hooks are shared model state: one capture at a time
    with explicit_attention(model.attention_modules()) as handles, torch.inference_mode(False), guarding(model):
        try:
            for b in blocks:
                handles.append(b.attn.attn_map.register_forward_hook(attn_hook))
                if gradcam:
                    handles.append(b.norm1.register_forward_hook(norm1_hook))
            if pool is not None:
                handles.append(pool.attn_map.register_forward_hook(pool_hook))
            if want_grad and isinstance(getattr(model, "head", None), nn.Module):
                handles.append(model.head.register_forward_pre_hook(head_hook))

            # ---- forward, block by block
            saved: list[Any] = []
            context = torch.enable_grad() if keep else torch.no_grad() if want_grad else torch.inference_mode()
            with context:
                position = model.position_args(grid, detach=want_grad)
                z = model.embed(x)
                _emit(observers, "on_tokens", 0, z.detach())
                for i in range(L):
                    if keep:
                        z = z.detach().requires_grad_(True)
                    elif want_grad:
                        saved.append(z)
                    out, a, n1 = run_block(i, z)
                    if keep:
                        saved.append((z, out, a, n1))
                    _emit(observers, "on_attention", i, a.detach())
                    _emit(observers, "on_tokens", i + 1, out.detach())
                    z = out
                if not want_grad:
                    recording["pool"] = True
                    logits = model.forward_head(model.norm(z))
                    recording["pool"] = False
            if want_grad:  # the head with a graph from the last block's output
                z_last = z.detach().requires_grad_(True)
                recording["pool"] = recording["head"] = True
                with torch.enable_grad():
                    logits = model.forward_head(model.norm(z_last))
                recording["pool"] = recording["head"] = False
            pool_live = pool_slot.take("the pooling head's attention hook") if pool is not None else None
            if pool_live is not None:
                _emit(observers, "on_pool", pool_live.detach()[:, :, 0])

            # ---- backward, block by block from the last
            scores_out = None
            neutral = None if legrad_neutral is None or not legrad else as_target(legrad_neutral)
            keys = [(k, k) for k in legrad] + ([(f"{k}|neutral", k) for k in legrad] if neutral is not None else [])
            legrad_maps: dict[str, list[torch.Tensor | None]] = {key: [None] * L for key, _ in keys}
            gradcam_maps: list[torch.Tensor | None] = [None] * L
            pool_grad = None
            if want_grad:
                assert spec is not None
                if top:
                    classes = logits.detach().float().argmax(dim=-1).cpu()

                def score(out: torch.Tensor, emb: torch.Tensor | None) -> torch.Tensor:
                    return target_scores(spec, out, emb, classes)

                def neutral_score(out: torch.Tensor, emb: torch.Tensor | None) -> torch.Tensor:
                    return target_scores(neutral, out, emb, classes)

                with torch.enable_grad():
                    embedding = embedding_of(model, logits, head_in[0] if head_in else None)
                    scores = differentiable_scores(spec, logits, embedding, classes)
                    scores_out = scores.detach().float().to(store_device)
                    wrt = [z_last] + ([pool_live] if pool_live is not None else [])
                    grads = torch.autograd.grad(scores.sum(), wrt, allow_unused=True)
                del scores, embedding
                g = grads[0] if grads[0] is not None else torch.zeros_like(z_last)
                if pool_live is not None:
                    pg = grads[1]
                    pool_grad = torch.zeros_like(pool_live[:, :, 0]) if pg is None else pg[:, :, 0]
                    _emit(observers, "on_pool_grad", pool_live.detach()[:, :, 0], pool_grad)
                del grads, z_last
                for i in range(L - 1, -1, -1):
                    with torch.enable_grad():
                        if keep:
                            zin, out, a, n1 = saved[i]
                            saved[i] = None
                        else:
                            zin = saved[i].detach().requires_grad_(True)
                            saved[i] = None
                            out, a, n1 = run_block(i, zin)
                        for key, pooling in keys:  # the place of per-layer gradients of other scalars
                            fn = neutral_score if key.endswith("|neutral") else score
                            legrad_maps[key][i] = legrad_layers(model, fn, [out], [a], P, pooling)[0]
                        wrt = [a] + ([zin] if i > 0 else []) + ([n1] if n1 is not None else [])
                        gs = torch.autograd.grad(out, wrt, grad_outputs=g, allow_unused=True)
                    ga = gs[0] if gs[0] is not None else torch.zeros_like(a)
                    _emit(observers, "on_attention_grad", i, a.detach(), ga)
                    if gradcam:
                        gradcam_maps[i] = gradcam_layers([n1], [gs[-1]], P)[0]
                    g = gs[1] if i > 0 and gs[1] is not None else (torch.zeros_like(zin) if i > 0 else None)
                    del gs, ga, out, a, n1, zin
            saved.clear()
        finally:
            head_in.clear()

    logits_out = torch.empty(tuple(logits.shape), dtype=torch.float32, device=store_device)
    logits_out.copy_(logits.detach())
    pool_row = None if pool_live is None else pool_live.detach()[:, :, 0].to(store_device, torch.float32)
    return StreamedPass(
        logits=logits_out, grid=grid, patch_size=int(model.patch_size), num_prefix_tokens=P, num_layers=L,
        num_heads=H, num_tokens=N, embed_dim=D, targets=classes if want_grad else None, target=spec,
        scores=scores_out, pool_attention=pool_row,
        pool_attention_grads=None if pool_grad is None else pool_grad.detach().to(store_device, torch.float32),
        legrad={k: torch.stack(v).to(store_device) for k, v in legrad_maps.items()},  # type: ignore[arg-type]
        gradcam=torch.stack(gradcam_maps).to(store_device) if gradcam else None,  # type: ignore[arg-type]
        recomputed=want_grad and not keep,
    )

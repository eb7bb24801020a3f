"""Per-layer gradient maps taken while a capture's graph is alive: LeGrad and GradCAM, for every layer at once (the
views then sum or pick layers without another pass).

* :func:`legrad_layers` (Bousselham et al., ICCV 2025; the official code WalBouss/LeGrad): for each layer ``l`` the
  target is applied to the model's head on layer ``l``'s tokens (:func:`vitviz.capture.model_head.head_on_tokens`),
  ``s_l``, and ``map_l = ReLU(d s_l / d A_l)`` averaged over heads and query rows, the prefix columns dropped. For an
  attention-pool model (SigLIP) the pool is applied to layer ``l``'s tokens and the gradient is taken at the pool's
  attention (its one query row). The backward of ``s_l`` stops at ``A_l``: it crosses block ``l``'s attention output
  and MLP only, so all L layers together cost about one backward pass.
* :func:`gradcam_layers` (Selvaraju et al. 2017, as pytorch-grad-cam computes it for ViTs on ``blocks[l].norm1``): the
  channel weights are the gradient averaged over the patch tokens, the map ``ReLU(sum_c w_c A_c)`` over the patch
  tokens (prefix tokens dropped).

No Qt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from vitviz.capture.model_head import head_on_tokens

__all__ = ["gradcam_layers", "legrad_layers"]


def legrad_layers(model: nn.Module, score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                  tokens: Sequence[torch.Tensor], attentions: Sequence[torch.Tensor], num_prefix_tokens: int,
                  pooling: str = "mean") -> torch.Tensor:
    """``[L, B, gh * gw]`` float32: LeGrad's map of every layer (not yet summed).

    Args:
        model: the vitviz ViT whose graph is alive.
        score: ``(output [B, K], embedding [B, E]) -> [B]`` the target's value (:func:`~vitviz.capture.targets.
            target_scores` with the classes fixed).
        tokens: the live output of each block ``[B, N, D]`` (L of them).
        attentions: the live attention of each block ``[B, H, N, N]`` (L of them).
        num_prefix_tokens: the prefix columns dropped.
        pooling: ``"mean"`` (the official rule) or ``"model"`` (the model's own pooling).
    """
    pool = getattr(model, "attn_pool", None)
    P = int(num_prefix_tokens)
    maps = []
    seen: list[torch.Tensor] = []

    def pool_hook(_module: nn.Module, _args: tuple, out: torch.Tensor) -> None:
        seen.append(out)

    for tok, attn in zip(tokens, attentions):
        seen.clear()
        handle = None
        if pool is not None:  # the pool's attention of this very application is where the gradient is taken
            handle = pool.attn_map.register_forward_hook(pool_hook)
        try:
            out, emb = head_on_tokens(model, tok, pooling)
        finally:
            if handle is not None:
                handle.remove()
        s = score(out, emb).sum()
        wrt = seen[-1] if pool is not None else attn
        if not s.requires_grad:
            g = None
        else:
            (g,) = torch.autograd.grad(s, [wrt], retain_graph=True, allow_unused=True)
        if g is None:  # the score does not depend on this layer's attention
            B, N = int(wrt.shape[0]), int(wrt.shape[-1])
            maps.append(torch.zeros((B, N - P), dtype=torch.float32, device=wrt.device))
            continue
        m = g.float().clamp(min=0).mean(dim=1).mean(dim=1)  # heads, then query rows -> [B, N]
        maps.append(m[:, P:])
        del g, s, out, emb
    return torch.stack(maps)


def gradcam_layers(activations: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None],
                   num_prefix_tokens: int) -> torch.Tensor:
    """``[L, B, gh * gw]`` float32 GradCAM maps from each block's ``norm1`` output ``A [B, N, D]`` and the target's
    gradient there (None: no dependence -> a zero map)."""
    P = int(num_prefix_tokens)
    maps = []
    for a, g in zip(activations, grads):
        a = a.detach().float()[:, P:]
        if g is None:
            maps.append(torch.zeros(a.shape[:2], dtype=torch.float32, device=a.device))
            continue
        w = g.float()[:, P:].mean(dim=1)  # channel weights: the gradient averaged over the patch tokens [B, D]
        maps.append(torch.relu((a * w[:, None, :]).sum(dim=-1)))
    return torch.stack(maps)

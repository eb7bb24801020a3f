"""Head knock-out: the target's score with one attention head removed, for every (layer, head).

Head ``h`` of block ``l`` is removed by setting its slice ``[h * d_h, (h + 1) * d_h)`` of the attention output (the
heads' outputs concatenated, before the output projection ``attn.proj``) to zero, or (``mode="mean"``) to its mean
over the image's tokens (all ``N`` tokens of the sequence, prefix tokens included). The batch of one layer's ``H``
variants starts from the clean residual stream at that block's input (:class:`ResidualStream`), so the blocks before
``l`` run once for all heads and layers: ``H * L (L + 1) / 2`` block passes against ``H * L * L`` for one full
forward per head (``bench/ablation.py`` measures the time).

No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vitviz.capture.mechanistic.residual import MechanisticError, ResidualStream, chunks, model_lock
from vitviz.capture.targets import Target

__all__ = ["KNOCKOUT_MODES", "KnockoutResult", "head_knockout", "knock_out_heads"]

KNOCKOUT_MODES: tuple[str, ...] = ("zero", "mean")


@dataclass(frozen=True)
class KnockoutResult:
    """The knock-out grid of one image.

    Attributes:
        scores: ``[L, H]`` the target's value with head ``h`` of layer ``l`` removed.
        clean: the target's value of the unchanged pass.
        mode: ``"zero"`` or ``"mean"``.
        target, target_text: the target (a top class resolved to its index) and its words.
    """

    scores: torch.Tensor
    clean: float
    mode: str
    target: Target
    target_text: str

    @property
    def delta(self) -> torch.Tensor:
        """``[L, H]`` score with the head removed minus the clean score (negative: the head supported the target)."""
        return self.scores - self.clean

    def rows(self) -> list[tuple[int, int, float, float]]:
        """``(layer, head, score, delta)`` of every head, layer by layer."""
        L, H = self.scores.shape
        d = self.delta
        return [(l, h, float(self.scores[l, h]), float(d[l, h])) for l in range(L) for h in range(H)]


def knock_out_heads(a: torch.Tensor, heads: torch.Tensor, num_heads: int, mode: str) -> torch.Tensor:
    """The attention output ``a [B, N, D]`` (before ``proj``) with head ``heads[b]`` of row ``b`` removed (zero, or
    its mean over the ``N`` tokens); a head index of -1 leaves its row unchanged."""
    B, N, D = a.shape
    per = a.reshape(B, N, num_heads, D // num_heads)
    heads = heads.to(a.device)
    hit = torch.zeros(B, 1, num_heads, 1, dtype=torch.bool, device=a.device)
    rows = torch.nonzero(heads >= 0).flatten()
    hit[rows, 0, heads[rows], 0] = True
    fill = per.mean(dim=1, keepdim=True).expand_as(per) if mode == "mean" else torch.zeros_like(per)
    return torch.where(hit, fill, per).reshape(B, N, D)


def head_knockout(model: nn.Module, x: torch.Tensor, target: Any = None, *, mode: str = "zero",
                  stream: ResidualStream | None = None, batch_size: int = 64) -> KnockoutResult:
    """Every head of every layer knocked out in turn, one image ``x [1, C, H, W]``.

    Args:
        target: as :class:`ResidualStream` (default: the top class of the clean pass).
        mode: ``"zero"`` or ``"mean"`` (the head's slice replaced by its mean over the tokens).
        stream: a clean pass already run (its target is used).
        batch_size: knocked-out variants run together (at most the number of heads per batch is useful: the
            variants of one layer).

    Raises:
        MechanisticError: a bad mode, as :class:`ResidualStream`.
    """
    if mode not in KNOCKOUT_MODES:
        raise MechanisticError(f"mode {mode!r}: valid: {', '.join(KNOCKOUT_MODES)}")
    with model_lock():
        s = stream if stream is not None else ResidualStream(model, x, target)
        H = s.num_heads
        scores = torch.empty(s.depth, H)
        for l in range(s.depth):
            proj = model.blocks[l].attn.proj
            for a, b in chunks(H, batch_size):
                heads = torch.arange(a, b)

                def pre(module, args, heads=heads):
                    return (knock_out_heads(args[0], heads, H, mode),) + tuple(args[1:])

                handle = proj.register_forward_pre_hook(pre)
                try:
                    with torch.no_grad():
                        z = s.run_from(l, s.inputs[l].expand(b - a, -1, -1))
                finally:
                    handle.remove()
                scores[l, a:b] = s.score(z).scores.cpu()
    return KnockoutResult(scores=scores, clean=float(s.clean.scores[0]), mode=mode, target=s.target,
                          target_text=s.target_text())

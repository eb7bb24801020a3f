"""Activation patching between two images: block ``l``'s output taken from the clean run into the corrupted run.

For every block ``l`` the corrupted image's pass is run with the block's output replaced by the clean image's at
[CLS] (the first prefix token; no row for a model without prefix tokens), at all tokens, and at each patch position
alone; the share of the clean target score it recovers is ``(patched - corrupt) / (clean - corrupt)`` (1: the
patched position carries all the difference; 0: none of it). The target is fixed on the clean image (its top class
by default). Both images must give the same number of tokens (the model's preprocessing crops them alike). The
variants of one layer share block ``l``'s output of the corrupted pass; they run in batches from there.

No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vitviz.capture.mechanistic.residual import MechanisticError, ResidualStream, chunks, model_lock
from vitviz.capture.targets import Target

__all__ = ["PatchingResult", "activation_patching"]


@dataclass(frozen=True)
class PatchingResult:
    """Activation patching of one clean and one corrupted image.

    Attributes:
        clean, corrupt: the target's value of each unchanged pass.
        cls: ``[L]`` recovered share with block ``l``'s output at the first prefix token patched, or None (no prefix).
        all: ``[L]`` ... at all tokens.
        patches: ``[L, P]`` ... at each patch position alone (``P = gh * gw``, row-major).
        patched: ``{"cls": [L], "all": [L], "patches": [L, P]}`` the target's values of the patched passes.
        target, target_text, grid: the target (fixed on the clean image), its words, the patch grid.
    """

    clean: float
    corrupt: float
    cls: torch.Tensor | None
    all: torch.Tensor
    patches: torch.Tensor
    patched: dict[str, torch.Tensor]
    target: Target
    target_text: str
    grid: tuple[int, int]

    @property
    def num_layers(self) -> int:
        return int(self.all.shape[0])

    def recovery_map(self, layer: int) -> torch.Tensor:
        """``[gh, gw]`` the share recovered by patching each position of block ``layer``'s output."""
        return self.patches[layer].reshape(self.grid)

    def rows(self) -> list[tuple[int, str, float]]:
        """``(layer, position, recovered)``: per layer ``cls`` (where there is one), ``all``, then ``row,col`` of
        every patch."""
        gw = self.grid[1]
        out = []
        for l in range(self.num_layers):
            if self.cls is not None:
                out.append((l, "cls", float(self.cls[l])))
            out.append((l, "all", float(self.all[l])))
            out += [(l, f"{p // gw},{p % gw}", float(v)) for p, v in enumerate(self.patches[l].tolist())]
        return out


def activation_patching(model: nn.Module, clean: torch.Tensor, corrupt: torch.Tensor, target: Any = None, *,
                        batch_size: int = 64) -> PatchingResult:
    """Patch each block's output from ``clean`` into ``corrupt`` (both ``[1, C, H, W]``, preprocessed alike).

    Args:
        target: as :class:`ResidualStream`, resolved on the clean image (default: its top class).
        batch_size: patched variants run together.

    Raises:
        MechanisticError: images of different token counts, a target whose score is the same on both images (no
            difference to recover), as :class:`ResidualStream`.
    """
    with model_lock():
        c = ResidualStream(model, clean, target)
        if tuple(clean.shape[-2:]) != tuple(corrupt.shape[-2:]):
            raise MechanisticError(f"the clean image is {tuple(clean.shape[-2:])} pixels after preprocessing and the "
                                   f"corrupted one {tuple(corrupt.shape[-2:])}: patching needs the same token grid")
        k = ResidualStream(model, corrupt, c.target)
        clean_score, corrupt_score = float(c.clean.scores[0]), float(k.clean.scores[0])
        diff = clean_score - corrupt_score
        if diff == 0.0 or abs(diff) <= 1e-6 * max(1.0, abs(clean_score)):
            raise MechanisticError(f"{c.target_text()}: the score is the same on both images ({clean_score:.6g}); "
                                   "there is no difference to recover")
        L, p = c.depth, c.prefix
        P = c.grid[0] * c.grid[1]
        positions: list[slice | int] = ([0] if p > 0 else []) + [slice(None)] + [p + i for i in range(P)]
        values = torch.empty(L, len(positions))
        with torch.no_grad():
            for l in range(L):
                base, donor = k.inputs[l + 1][0], c.inputs[l + 1][0]
                for a, b in chunks(len(positions), batch_size):
                    z = base.expand(b - a, -1, -1).clone()
                    for row, pos in enumerate(positions[a:b]):
                        z[row, pos] = donor[pos]
                    values[l, a:b] = k.score(k.run_from(l + 1, z)).scores.cpu()
    recovered = (values - corrupt_score) / diff
    i = 1 if p > 0 else 0
    return PatchingResult(
        clean=clean_score, corrupt=corrupt_score, cls=recovered[:, 0] if p > 0 else None, all=recovered[:, i],
        patches=recovered[:, i + 1:],
        patched={"cls": values[:, 0] if p > 0 else None, "all": values[:, i], "patches": values[:, i + 1:]},
        target=c.target, target_text=c.target_text(), grid=tuple(c.grid))

"""The clean pass of one image through a vitviz ViT, kept block by block: the residual stream at every block's input,
from which the logit lens reads, the head knock-out restarts and activation patching splices.

:class:`ResidualStream` runs the model's own modules (``embed``, each ``Block``, the final norm, the pooling and the
head: :func:`vitviz.capture.model_head.head_on_tokens` with the model's own pooling), so every family vitviz's ViT
expresses (registers, distillation, mean pooling, the attention-pool "MAP" head, BEiT's relative position bias,
post-norm blocks, CLIP / SigLIP prompt heads) is covered by one code path. A module vitviz only adapted (an
:class:`~vitviz.capture.foreign.AdaptedModel`) is refused with one line: its blocks cannot be restarted.

No Qt.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vitviz.capture.foreign import is_vitviz_model
from vitviz.capture.model_head import head_on_tokens, is_feature_model
from vitviz.capture.preflight import hold_capture, model_device_dtype
from vitviz.capture.targets import ClassTarget, SimilarityTarget, Target, TargetError, as_target, target_scores

__all__ = ["MechanisticError", "ResidualStream", "Scored", "check_model", "chunks", "model_lock", "probabilities_of"]


class MechanisticError(ValueError):
    """A model, image or target the mechanistic passes cannot work on: one line naming it and the cause."""


def check_model(model: Any) -> None:
    """Refuse (one line) a model whose blocks cannot be run one at a time: anything but a vitviz ViT."""
    if not is_vitviz_model(model):
        name = getattr(getattr(model, "spec", None), "name", None) or type(model).__name__
        raise MechanisticError(f"{name}: logit lens, knock-out and patching need a model vitviz converted to its own "
                               "ViT (a checkpoint, a named model); a module it only adapted cannot be restarted "
                               "block by block")


@contextmanager
def model_lock() -> Iterator[None]:
    """The capture lock: a knock-out's hook on a shared model never meets a capture in another thread."""
    with hold_capture():
        yield


@dataclass(frozen=True)
class Scored:
    """The head's output on a batch of residual streams, and the target's value of each."""

    output: torch.Tensor  # [B, K] float32
    embedding: torch.Tensor | None  # [B, E] float32
    scores: torch.Tensor  # [B] float32


class ResidualStream:
    """One image's clean pass, every block's input kept (``inputs[l]``: the input of block ``l``; ``inputs[L]``: the
    output of the last block), and the tools to run blocks from any of them and score the head's output.

    Args:
        model: a vitviz ViT (with ``spec``), on its device and precision.
        x: ``[1, C, H, W]`` the preprocessed image.
        target: what is scored (:func:`vitviz.capture.targets.as_target`): a class index, ``"top"`` / None (the
            clean pass's top class, then fixed), a :class:`SimilarityTarget` or a function of the output.

    Raises:
        MechanisticError: a model that is not a vitviz ViT, a batch of more than one image, a class on a feature
            model, a class outside the head, a top class of a feature model (no classifier: give a similarity).
    """

    def __init__(self, model: nn.Module, x: torch.Tensor, target: Any = None):
        check_model(model)
        if x.ndim != 4 or x.shape[0] != 1:
            raise MechanisticError(f"expected one preprocessed image [1, C, H, W], got shape {tuple(x.shape)}")
        self.model = model
        device, dtype = model_device_dtype(model)
        self.dtype = dtype
        x = x.to(device=device, dtype=dtype)
        try:
            self.grid = model.patch_embed.check_input(x)
        except ValueError as e:
            raise MechanisticError(str(e)) from None
        self.depth = len(model.blocks)
        self.num_heads = int(model.blocks[0].attn.num_heads) if self.depth else 0
        self.prefix = int(model.num_prefix_tokens)
        self.feature_model = is_feature_model(model)
        with torch.no_grad():
            self._shared = model.rel_pos_bias(self.grid) if getattr(model, "rel_pos_bias", None) is not None else None
            z = model.embed(x)
            inputs = [z]
            for l in range(self.depth):
                z = self.block(l, z)
                inputs.append(z)
        self.inputs: list[torch.Tensor] = inputs
        self.target = self._resolve(target)
        self.clean = self.score(inputs[-1])

    # ------------------------------------------------------------------ passes
    def block(self, l: int, z: torch.Tensor) -> torch.Tensor:
        """Block ``l`` of the model on ``z [B, N, D]`` (with the relative position bias where the model has one)."""
        blk = self.model.blocks[l]
        if self.model.config.rel_pos_bias == "none":
            return blk(z)
        return blk(z, self.grid, self._shared)

    def run_from(self, l: int, z: torch.Tensor) -> torch.Tensor:
        """Blocks ``l .. L-1`` on ``z`` (the input of block ``l``): the last block's output."""
        for i in range(l, self.depth):
            z = self.block(i, z)
        return z

    def head(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The model's own head on a block's output ``[B, N, D]``: the final norm, its pooling, ``fc_norm`` and the
        head (a prompt model's projection and prompts): ``(output [B, K], embedding [B, E])``."""
        out, emb = head_on_tokens(self.model, z, "model")
        return out, emb

    def score(self, z: torch.Tensor) -> Scored:
        """The head on ``z`` (a block's output, ``[B, N, D]``) and the target's value of each row, float32."""
        with torch.no_grad():
            out, emb = self.head(z)
            out = out.float()
            emb = None if emb is None else emb.float()
            return Scored(out, emb, self.scores_of(out, emb))

    def scores_of(self, output: torch.Tensor, embedding: torch.Tensor | None) -> torch.Tensor:
        """The target's value for each row of ``output`` / ``embedding`` (float32)."""
        t = self.target
        classes = None
        if isinstance(t, ClassTarget):
            classes = torch.full((output.shape[0],), int(t.index), dtype=torch.long, device=output.device)
        return target_scores(t, output, embedding, classes).float()

    # ------------------------------------------------------------------ the target
    def _resolve(self, target: Any) -> Target:
        try:
            t = as_target(target)
        except TargetError as e:
            raise MechanisticError(str(e)) from None
        if isinstance(t, ClassTarget):
            if self.feature_model:
                what = "the top class" if t.index is None else f"class {t.index}"
                raise MechanisticError(f"{what}: the model has no classifier (its output is an embedding); give a "
                                       "similarity target (similar:IMAGE, similar:IMAGE@ROW,COL, similar:VECTOR.npy)")
            with torch.no_grad():
                out, _ = self.head(self.inputs[-1])
            k = int(out.shape[-1])
            if t.index is None:
                return ClassTarget(int(out[0].float().argmax()))
            if not 0 <= int(t.index) < k:
                raise MechanisticError(f"class {t.index}: the head has {k} classes (0 .. {k - 1})")
        if isinstance(t, SimilarityTarget):
            with torch.no_grad():
                _, emb = self.head(self.inputs[-1])
            if emb is None or int(emb.shape[-1]) != int(t.vector.shape[0]):
                have = "none" if emb is None else str(int(emb.shape[-1]))
                raise MechanisticError(f"{t.describe()}: the reference vector has {int(t.vector.shape[0])} values but "
                                       f"the model's pooled embedding has {have}")
        return t

    def target_text(self) -> str:
        """The target in words (a class's label, "similar to ...")."""
        return self.target.describe(getattr(getattr(self.model, "spec", None), "labels", None))


def probabilities_of(model: nn.Module, logits: torch.Tensor) -> torch.Tensor | None:
    """The model's class probabilities from its logits (softmax, or the sigmoid of each prompt for SigLIP prompts);
    None for a feature model (its output is an embedding, not class scores)."""
    if is_feature_model(model):
        return None
    if getattr(getattr(model, "spec", None), "probability", "softmax") == "sigmoid":
        return logits.float().sigmoid()
    return logits.float().softmax(-1)


def chunks(n: int, size: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of consecutive slices of ``range(n)`` of at most ``size`` (at least 1)."""
    size = max(1, int(size))
    for s in range(0, n, size):
        yield s, min(n, s + size)

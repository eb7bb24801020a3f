"""What a capture produces: :class:`Capture` (a batch), :class:`ImageCapture` (one image's slice of it) and
:class:`CaptureError`. Plain data; the analyses (:mod:`vitviz.analysis`) take these shapes.

This module never imports Qt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


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
        target_spec: what the gradients explain (:mod:`vitviz.capture.targets`), or None.
        score: the target's value for this image, or None.
        legrad: LeGrad's per-layer maps ``[L, gh * gw]`` by pooling (``"mean"``, ``"model"``).
        gradcam: GradCAM's per-layer maps ``[L, gh * gw]`` (on each block's ``norm1``), or None.
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
    target_spec: Any = None
    score: float | None = None
    legrad: dict[str, torch.Tensor] = field(default_factory=dict)
    gradcam: torch.Tensor | None = None


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
        target: the target the gradients explain (:mod:`vitviz.capture.targets`), or None.
        scores: ``[B]`` float32 the target's value per image, or None.
        legrad: ``{pooling: [L, B, gh * gw]}`` LeGrad's per-layer maps (:mod:`vitviz.capture.gradient_maps`).
        gradcam: ``[L, B, gh * gw]`` GradCAM's per-layer maps, or None.
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
    target: Any = None
    scores: torch.Tensor | None = None
    legrad: dict[str, torch.Tensor] = field(default_factory=dict)
    gradcam: torch.Tensor | None = None

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
              self.pool_attention_grads, self.scores, self.gradcam, *self.legrad.values()]
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
            target_spec=self.target,
            score=None if self.scores is None else float(self.scores[b]),
            legrad={k: v[:, b] for k, v in self.legrad.items()},
            gradcam=None if self.gradcam is None else self.gradcam[:, b],
        )

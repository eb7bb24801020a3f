"""Text prompts turn a CLIP or SigLIP image tower into a zero-shot classifier whose classes are the prompts.

:func:`with_prompts` gives a model that shares every weight of the image tower and whose head is a
:class:`ZeroShotHead`: the tower's own head (CLIP's image projection, or nothing for SigLIP), the image embedding
normalised, then one score per prompt, the family's own:

* CLIP: ``logit_scale * cos(image, text)`` (the probabilities over the prompts are the softmax, as CLIP's zero-shot
  classification);
* SigLIP: ``logit_scale * cos(image, text) + logit_bias`` (each prompt's probability is the sigmoid of its logit).

So every class-based part of vitviz works on prompts unchanged: a prompt is a class target, the gradient views and
LeGrad explain its score, the predictions panel shows the prompts' probabilities, the Compare window lays prompts
out side by side as it does classes, exports write one map per prompt. No Qt.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["PROBABILITIES", "ZeroShotHead", "with_prompts"]

PROBABILITIES: tuple[str, ...] = ("softmax", "sigmoid")


class ZeroShotHead(nn.Module):
    """``pooled [B, D] -> [B, P]``: the tower's head, the embedding normalised, ``scale * cos + bias`` per prompt.

    Args:
        embed: the image tower's own head (CLIP's projection ``Linear(D, E, bias=False)``, or ``nn.Identity``).
        text: ``[P, E]`` the prompts' text embeddings (normalised here).
        scale, bias: the family's logit scale (already exponentiated) and bias (SigLIP; 0 for CLIP).
    """

    def __init__(self, embed: nn.Module, text: torch.Tensor, scale: float, bias: float = 0.0):
        super().__init__()
        if text.ndim != 2 or text.shape[0] == 0:
            raise ValueError(f"text embeddings must be [prompts, dim] with at least one prompt, got "
                             f"{tuple(text.shape)}")
        self.embed = embed
        self.register_buffer("text", F.normalize(text.detach().float(), dim=-1), persistent=False)
        self.scale = float(scale)
        self.bias = float(bias)

    def embedding(self, pooled: torch.Tensor) -> torch.Tensor:
        """The image embedding (the space of the text embeddings), before normalisation."""
        return self.embed(pooled)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        e = F.normalize(self.embedding(pooled), dim=-1)
        return self.scale * e @ self.text.to(e.dtype).T + self.bias


def with_prompts(model: nn.Module, text: torch.Tensor, prompts: Sequence[str], *, scale: float, bias: float = 0.0,
                 probability: str = "softmax") -> nn.Module:
    """A zero-shot classifier over ``prompts`` sharing every weight of ``model`` (a vitviz ViT image tower whose
    output is an embedding: CLIP with its projection head, SigLIP).

    Args:
        text: ``[P, E]`` the prompts' embeddings, in the space of the tower's output.
        prompts: the prompts, in order (the classes' labels).
        scale, bias: the family's score (``logit_scale.exp()``; SigLIP's ``logit_bias``).
        probability: ``"softmax"`` (CLIP) or ``"sigmoid"`` (SigLIP): how the predictions turn logits into
            probabilities.

    Raises:
        ValueError: no prompts, a mismatch between prompts and embeddings or between the embeddings and the
            tower's output, a model without a head.
    """
    prompts = [str(p) for p in prompts]
    if not prompts:
        raise ValueError("no prompts: give at least one")
    if len(prompts) != int(text.shape[0]):
        raise ValueError(f"{len(prompts)} prompts but {int(text.shape[0])} text embeddings")
    if probability not in PROBABILITIES:
        raise ValueError(f"probability must be one of {PROBABILITIES}, got {probability!r}")
    head = getattr(model, "head", None)
    spec = getattr(model, "spec", None)
    if not isinstance(head, nn.Module) or spec is None:
        raise ValueError(f"{type(model).__name__} has no head to put the prompts on (a vitviz ViT image tower needed)")
    base = head.embed if isinstance(head, ZeroShotHead) else head
    width = int(base.out_features) if isinstance(base, nn.Linear) else int(model.embed_dim)
    if int(text.shape[1]) != width:
        raise ValueError(f"the text embeddings have {int(text.shape[1])} values but the image tower's embedding has "
                         f"{width}: the text tower is not this image tower's")
    clone = copy.copy(model)  # a new module object sharing the parameters and submodules of the tower
    clone._modules = dict(model._modules)  # noqa: SLF001 - its own submodule table, so the head can be replaced
    param = next(model.parameters())
    clone.head = ZeroShotHead(base, text.to(param.device), scale, bias)
    clone.num_classes = len(prompts)
    clone.config = dataclasses.replace(model.config, num_classes=len(prompts))
    clone.spec = spec.replace(config=clone.config, labels=tuple(prompts), head_kind="prompts",
                              probability=probability,
                              name=spec.name if isinstance(head, ZeroShotHead) else f"{spec.name} + prompts")
    return clone

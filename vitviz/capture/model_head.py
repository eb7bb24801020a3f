"""The model's head applied to tokens: what a target reads from a vitviz ViT besides its output.

* :func:`is_feature_model`: the output is an embedding (no classifier, or CLIP's projection), not class scores;
* :func:`embedding_of`: the pooled embedding a similarity target compares (the output of a feature model, the
  features before the classifier of a classifier);
* :func:`head_on_tokens`: the head applied to any layer's tokens, pooled the way LeGrad's official code pools
  (``"mean"``: the mean over all tokens, then the model's final norm and head or projection; an attention-pool model's
  pool applied to the layer's tokens) or by the model's own pooling (``"model"``: the final norm, then [CLS] / the
  mean of the patch tokens / the attention pool, exactly as the model treats its last layer);
* :func:`token_embedding`: one token of the last layer carried through the head, as if the model pooled it alone (a
  "patch of a reference image" target).

No Qt.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["LEGRAD_POOLINGS", "embedding_of", "head_on_tokens", "is_feature_model", "token_embedding"]

LEGRAD_POOLINGS: tuple[str, ...] = ("mean", "model")


def is_feature_model(model: Any) -> bool:
    """The model's output is an embedding, not class scores: no head (``num_classes == 0``) or a projection head
    (CLIP: ``spec.head_kind == "projection"``)."""
    spec = getattr(model, "spec", None)
    if spec is not None and hasattr(spec, "is_feature_model"):
        return bool(spec.is_feature_model)
    if getattr(model, "features", False):  # an adapted module that returns features
        return True
    return int(getattr(model, "num_classes", 0) or 0) == 0


def _finish(model: nn.Module, pooled: torch.Tensor, dist_token: torch.Tensor | None) -> tuple[torch.Tensor,
                                                                                            torch.Tensor]:
    """``(output, embedding)`` from the pooled token (before ``fc_norm``), as :meth:`ViT.forward_head` does."""
    pre = model.head_drop(model.fc_norm(pooled))
    out = model.head(pre)
    if getattr(model, "head_dist", None) is not None and dist_token is not None:
        out = (out + model.head_dist(dist_token)) / 2
    return out, embedding_of(model, out, pre)


def embedding_of(model: Any, output: torch.Tensor, head_input: torch.Tensor | None) -> torch.Tensor | None:
    """The pooled embedding: ``output`` for a feature model, the classifier's input (``head_input``) otherwise; for
    prompts on a CLIP / SigLIP tower (:class:`vitviz.model.zero_shot.ZeroShotHead`) the image embedding the prompts
    are compared with."""
    if is_feature_model(model):
        return output
    head = getattr(model, "head", None)
    if head_input is not None and hasattr(head, "embedding"):
        return head.embedding(head_input)
    return head_input


def head_on_tokens(model: nn.Module, tokens: torch.Tensor, pooling: str = "mean") -> tuple[torch.Tensor,
                                                                                          torch.Tensor]:
    """The model's head on one layer's tokens ``[B, N, D]`` (a block's output, before the final norm).

    Args:
        pooling: ``"mean"`` (LeGrad's: the mean over all tokens, [CLS] and registers included, then the final norm
            (``norm``, CLIP's ``ln_post``), ``fc_norm`` and the head; an attention-pool model: its pool on the tokens,
            as LeGrad's SigLIP code) or ``"model"`` (the model's own: the final norm, then its pooling).

    Returns:
        ``(output [B, K], embedding [B, E])``, in the autograd graph of ``tokens``.
    """
    if pooling not in LEGRAD_POOLINGS:
        raise ValueError(f"pooling must be one of {LEGRAD_POOLINGS}, got {pooling!r}")
    distilled = getattr(model, "head_dist", None) is not None
    if pooling == "model":
        x = model.norm(tokens)
        return _finish(model, model.pool(x), x[:, 1] if distilled else None)
    if getattr(model, "attn_pool", None) is not None:
        pooled = model.attn_pool(tokens)
        return _finish(model, pooled, pooled if distilled else None)
    pooled = model.norm(tokens.mean(dim=1))
    return _finish(model, pooled, pooled if distilled else None)


def token_embedding(model: nn.Module, tokens: torch.Tensor, index: int) -> torch.Tensor:
    """Token ``index`` of the last layer's tokens ``[B, N, D]`` (before the final norm) through the head, as if the
    model pooled it alone: the final norm, then (an attention-pool model) the pool over that one token,
    ``fc_norm`` and the head. Returns the embedding ``[B, E]`` (a feature model's output space; a classifier's
    features before its head)."""
    x = model.norm(tokens[:, index:index + 1])
    pooled = model.attn_pool(x) if getattr(model, "attn_pool", None) is not None else x[:, 0]
    return _finish(model, pooled, None)[1]

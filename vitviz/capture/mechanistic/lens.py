"""The logit lens: the model's own head read at every depth.

For every block ``l`` the block's output goes through what the model does after its last block (the final norm, its
pooling -- [CLS], the mean of the patch tokens or the attention-pool head --, ``fc_norm`` and the head; a prompt
model's projection and prompt scores): per layer the output, the class probabilities (softmax, or the sigmoid of each
SigLIP prompt) and the target's value (a class's probability and logit, or the similarity of a similarity target).
Per patch, each token is decoded alone the same way (the final norm, an attention-pool head over that one token,
``fc_norm``, the head): the class it decodes to and the target's value, a class map per layer.

Layer ``0`` is the output of the first block (the CLI's numbering too). No Qt.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vitviz.capture.foreign import is_vitviz_model
from vitviz.capture.mechanistic.residual import ResidualStream, chunks, model_lock, probabilities_of
from vitviz.capture.model_head import embedding_of, is_feature_model
from vitviz.capture.targets import ClassTarget, Target

__all__ = ["LensResult", "TokenDecoder", "decode_tokens", "logit_lens", "token_decoder"]


@dataclass(frozen=True)
class LensResult:
    """The logit lens of one image.

    Attributes:
        logits: ``[L, K]`` the head's output after each block (float32; a feature model's: its embedding).
        probabilities: ``[L, K]`` the class probabilities, or None for a feature model.
        scores: ``[L]`` the target's value after each block (a class's logit, a similarity ...).
        target_probability: ``[L]`` a class target's probability, or None (other targets).
        patch_classes: ``[L, P]`` the class each patch token decodes to alone, or None for a feature model.
        patch_scores: ``[L, P]`` the target's value of each patch token decoded alone.
        target, target_text: the target (a top class resolved to its index) and its words.
        grid: the patch grid ``(gh, gw)``; ``P = gh * gw``.
        labels: the classes' names, or None.
    """

    logits: torch.Tensor
    probabilities: torch.Tensor | None
    scores: torch.Tensor
    target_probability: torch.Tensor | None
    patch_classes: torch.Tensor | None
    patch_scores: torch.Tensor
    target: Target
    target_text: str
    grid: tuple[int, int]
    labels: tuple[str, ...] | None

    @property
    def num_layers(self) -> int:
        return int(self.logits.shape[0])

    def label(self, index: int) -> str:
        return self.labels[index] if self.labels is not None and 0 <= index < len(self.labels) else f"class {index}"

    def top(self, k: int) -> list[tuple[int, int, int, float, float]]:
        """``(layer, rank, class, probability, logit)`` of each layer's ``k`` most probable classes (rank 1 first);
        empty for a feature model."""
        if self.probabilities is None:
            return []
        k = max(1, min(int(k), int(self.probabilities.shape[1])))
        best = self.probabilities.topk(k, dim=1)
        rows = []
        for layer in range(self.num_layers):
            for rank in range(k):
                c = int(best.indices[layer, rank])
                rows.append((layer, rank + 1, c, float(best.values[layer, rank]), float(self.logits[layer, c])))
        return rows

    def class_map(self, layer: int) -> torch.Tensor | None:
        """``[gh, gw]`` the class each patch decodes to after block ``layer`` (None for a feature model)."""
        if self.patch_classes is None:
            return None
        return self.patch_classes[layer].reshape(self.grid)


def decode_tokens(model: nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each token of ``tokens [B, N, D]`` (a block's output) through the model's head alone: the final norm, an
    attention-pool head over that one token (a "MAP" model), ``fc_norm`` and the head (a distilled model: the mean
    of both heads on the token). Returns ``(output [B, N, K], embedding [B, N, E])``."""
    B, N, D = tokens.shape
    x = model.norm(tokens).reshape(B * N, 1, D)
    pooled = model.attn_pool(x) if getattr(model, "attn_pool", None) is not None else x[:, 0]
    pre = model.fc_norm(pooled)
    out = model.head(pre)
    if getattr(model, "head_dist", None) is not None:
        out = (out + model.head_dist(x[:, 0])) / 2
    emb = embedding_of(model, out, pre)
    return out.reshape(B, N, -1), None if emb is None else emb.reshape(B, N, -1)


class TokenDecoder(nn.Module):
    """A float32 CPU copy of what a classifier does after its last block (``norm``, ``attn_pool``, ``fc_norm``,
    ``head``, ``head_dist``; the model's ``spec``), to decode a result's stored tokens without the model
    (:func:`decode_tokens`; the logit-lens class map view)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        for name in ("norm", "attn_pool", "fc_norm", "head", "head_dist"):
            part = getattr(model, name, None)
            setattr(self, name, None if part is None else copy.deepcopy(part).float().cpu().eval())
        self.spec = getattr(model, "spec", None)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        with torch.no_grad():
            return decode_tokens(self, tokens.float())


def token_decoder(model: nn.Module) -> TokenDecoder | None:
    """The :class:`TokenDecoder` of a vitviz ViT classifier (prompt models included); None for a feature model or a
    module vitviz only adapted."""
    if not is_vitviz_model(model) or is_feature_model(model):
        return None
    return TokenDecoder(model)


def logit_lens(model: nn.Module, x: torch.Tensor, target: Any = None, *, stream: ResidualStream | None = None,
               batch_size: int = 4096) -> LensResult:
    """The logit lens of one preprocessed image ``x [1, C, H, W]`` through a vitviz ViT.

    Args:
        target: as :class:`ResidualStream` (default: the top class of the full pass).
        stream: a clean pass already run (its target is used).
        batch_size: patch tokens decoded per call of the head.

    Raises:
        MechanisticError: as :class:`ResidualStream`.
    """
    with model_lock():
        s = stream if stream is not None else ResidualStream(model, x, target)
        scored = [s.score(s.inputs[l + 1]) for l in range(s.depth)]
        outputs = torch.stack([r.output[0] for r in scored])
        scores = torch.stack([r.scores[0] for r in scored])
        probs = probabilities_of(model, outputs)
        p = s.prefix
        patch_classes, patch_scores = [], []
        with torch.no_grad():
            for l in range(s.depth):
                toks = s.inputs[l + 1][0, p:]
                cls_l, score_l = [], []
                for a, b in chunks(toks.shape[0], batch_size):
                    out, emb = decode_tokens(model, toks[None, a:b])
                    out, emb = out[0].float(), None if emb is None else emb[0].float()
                    cls_l.append(out.argmax(-1))
                    score_l.append(s.scores_of(out, emb))
                patch_classes.append(torch.cat(cls_l))
                patch_scores.append(torch.cat(score_l))
    t = s.target
    target_p = probs[:, int(t.index)] if probs is not None and isinstance(t, ClassTarget) else None
    spec = getattr(model, "spec", None)
    return LensResult(logits=outputs.cpu(), probabilities=None if probs is None else probs.cpu(), scores=scores.cpu(),
                      target_probability=None if target_p is None else target_p.cpu(),
                      patch_classes=None if probs is None else torch.stack(patch_classes).cpu(),
                      patch_scores=torch.stack(patch_scores).cpu(), target=t, target_text=s.target_text(),
                      grid=tuple(s.grid), labels=getattr(spec, "labels", None))

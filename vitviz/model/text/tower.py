"""A text tower with its tokenizer and its family's image-text score: prompts in, unit text embeddings out. No Qt.

The score is the family's own, on the image tower's output embedding (CLIP's projection, SigLIP's attention pool):

- CLIP: ``logit_scale * cos(image, text)`` (``logit_scale`` = exp of the learned log-scale, 100 for OpenAI's);
  zero-shot probabilities over prompts: softmax;
- SigLIP: ``logit_scale * cos(image, text) + logit_bias``, the pre-sigmoid logit; probabilities: sigmoid, each prompt
  on its own.

Templates (:mod:`.templates`): each prompt put into each template, every templated text embedded and normalised, the
mean over templates renormalised (CLIP's zero-shot notebook and open_clip's ``build_zero_shot_classifier``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from vitviz.model.text.encoder import TextEncoder
from vitviz.model.text.templates import apply_template, resolve_templates

FAMILIES = ("clip", "siglip")
BATCH = 256  # texts per forward pass (80 ImageNet templates x a few prompts)


class PromptError(ValueError):
    """A prompt list the tower cannot embed: none, an empty prompt, a non-string (one line naming it)."""


@dataclass(frozen=True)
class PromptTarget:
    """What a prompt's map explains: ``score = scale * cos(pooled image embedding, vector) + bias`` (the fields of
    ``vitviz.capture.targets.SimilarityTarget``, which this layer cannot import).

    Attributes:
        vector: the prompt's unit text embedding ``[E]`` (CPU, float32).
        name: the prompt as typed (titles, captions, file names).
        scale, bias: the family's (:attr:`TextTower.logit_scale`, :attr:`TextTower.logit_bias`).
    """

    vector: torch.Tensor
    name: str
    scale: float
    bias: float


def check_prompts(prompts: Sequence[str]) -> list[str]:
    """``prompts`` as a list, each a non-empty string.

    Raises:
        PromptError: a bare string (not a list), no prompt, an empty or blank prompt, or a non-string.
    """
    if isinstance(prompts, str):
        raise PromptError("prompts: give a list of prompts, not one string (['a cat'], not 'a cat')")
    out = list(prompts)
    if not out:
        raise PromptError("prompts: no prompt given")
    for i, p in enumerate(out, 1):
        where = f"prompt {i} of {len(out)}" if len(out) > 1 else "the prompt"
        if not isinstance(p, str):
            raise PromptError(f"{where} is a {type(p).__name__}, not text")
        if not p.strip():
            raise PromptError(f"{where} is empty")
    return out


class TextTower:
    """A text tower, its tokenizer and its family's score (see the module docstring).

    Attributes:
        encoder: the :class:`~vitviz.model.text.encoder.TextEncoder` (eval mode).
        tokenizer: ``tokenizer(list[str]) -> LongTensor [P, context_length]`` (:mod:`.bpe` or :mod:`.pieces`).
        family: ``"clip"`` or ``"siglip"``.
        logit_scale: the score's scale, exp applied (a plain float).
        logit_bias: SigLIP's bias; 0.0 for CLIP.
        name: what the tower was opened from, for messages.
    """

    def __init__(self, encoder: TextEncoder, tokenizer: Any, *, family: str, logit_scale: float,
                 logit_bias: float = 0.0, name: str = "text tower"):
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
        self.encoder = encoder.eval()
        self.tokenizer = tokenizer
        self.family = family
        self.logit_scale = float(logit_scale)
        self.logit_bias = float(logit_bias) if family == "siglip" else 0.0
        self.name = name

    def __repr__(self) -> str:
        c = self.encoder.cfg
        return (f"TextTower({self.name!r}, family={self.family!r}, width={c.width}, layers={c.layers}, "
                f"embed_dim={self.embed_dim}, context={c.context_length}, logit_scale={self.logit_scale:.4g}, "
                f"logit_bias={self.logit_bias:.4g})")

    @property
    def embed_dim(self) -> int:
        c = self.encoder.cfg
        return c.embed_dim if c.embed_dim is not None else c.width

    @property
    def context_length(self) -> int:
        return self.encoder.cfg.context_length

    @property
    def device(self) -> torch.device:
        return self.encoder.token_embedding.weight.device

    def to(self, device: str | torch.device) -> TextTower:
        """The tower on ``device`` (in place; returns itself)."""
        self.encoder.to(device)
        return self

    # ------------------------------------------------------------------------------------------------ text -> vectors
    def tokenize(self, texts: Sequence[str]) -> torch.Tensor:
        """``LongTensor [len(texts), context_length]``: the family's reference tokenization."""
        return self.tokenizer(list(texts))

    @torch.no_grad()
    def embed_texts(self, texts: Sequence[str]) -> torch.Tensor:
        """Unit embeddings ``[len(texts), E]`` of texts as given (no template), CPU float32."""
        out = []
        for i in range(0, len(texts), BATCH):
            ids = self.tokenize(texts[i:i + BATCH]).to(self.device)
            out.append(F.normalize(self.encoder(ids).float(), dim=-1).cpu())
        return torch.cat(out) if out else torch.zeros(0, self.embed_dim)

    def encode(self, prompts: Sequence[str], templates: str | Sequence[str] | None = None) -> torch.Tensor:
        """Unit text embeddings ``[P, E]`` of ``prompts`` (CPU, float32).

        Args:
            prompts: the phrases, each non-empty.
            templates: None (as typed), ``"photo"`` ("a photo of a {}."), ``"imagenet"`` (the 80-template ensemble),
                one template with ``{}``, or a list of them (:func:`~vitviz.model.text.templates.resolve_templates`).

        Raises:
            PromptError: see :func:`check_prompts`; ValueError: bad templates.
        """
        prompts = check_prompts(prompts)
        temps = resolve_templates(templates)
        texts = [apply_template(t, p) for p in prompts for t in temps]
        emb = self.embed_texts(texts).reshape(len(prompts), len(temps), -1)
        return F.normalize(emb.mean(dim=1), dim=-1) if len(temps) > 1 else emb[:, 0]

    # ------------------------------------------------------------------------------------------------ the score
    def score(self, image_embedding: torch.Tensor, text_embedding: torch.Tensor) -> torch.Tensor:
        """The family's logit: ``logit_scale * cos + logit_bias``. ``[E]`` x ``[E]`` -> a 0-d tensor; ``[B, E]`` x
        ``[P, E]`` -> ``[B, P]``; ``[E]`` x ``[P, E]`` -> ``[P]``. Differentiable in both."""
        img = F.normalize(image_embedding.float(), dim=-1)
        txt = F.normalize(text_embedding.float().to(img.device), dim=-1)
        return self.logit_scale * (img @ txt.transpose(-1, -2) if txt.ndim == 2 else img @ txt) + self.logit_bias

    def probabilities(self, scores: torch.Tensor) -> torch.Tensor:
        """Zero-shot probabilities from :meth:`score`'s logits over prompts (the last axis): softmax for CLIP,
        sigmoid (each prompt on its own) for SigLIP."""
        return scores.softmax(dim=-1) if self.family == "clip" else scores.sigmoid()

    def targets(self, prompts: Sequence[str], templates: str | Sequence[str] | None = None) -> list[PromptTarget]:
        """One :class:`PromptTarget` per prompt (``SimilarityTarget(t.vector, t.name, t.scale, t.bias)``)."""
        prompts = check_prompts(prompts)
        vectors = self.encode(prompts, templates)
        return [PromptTarget(v, p, self.logit_scale, self.logit_bias) for v, p in zip(vectors, prompts)]


def prompt_targets(tower: TextTower, prompts: Sequence[str],
                   templates: str | Sequence[str] | None = None) -> list[PromptTarget]:
    """One :class:`PromptTarget` per prompt of ``tower`` (:meth:`TextTower.targets`)."""
    return tower.targets(prompts, templates)
